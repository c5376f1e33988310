#pragma once
// The one place that says which instruction set our hand-written CPU kernels run: detected once
// (the best this CPU has), overridable by SERVELAB_ISA in the environment (read at the first
// question) or by set_active_isa (the CLI's --isa, tests). Every kernel asks active_isa() when it
// is called, so a test can run each path in turn on one machine.
#include <string>

namespace servelab {

// Avx2 means AVX2 + FMA + F16C (every CPU with AVX2 since Haswell has all three); Generic is
// portable C++ (what the compiler's baseline vectorizes, or ATen where no loop of ours exists).
enum class Isa { Avx512, Avx2, Generic };

const char* isa_name(Isa isa);  // "avx512", "avx2", "generic"
// "avx512" | "avx2" | "generic"; InputError naming `what` (the option or variable) otherwise.
Isa parse_isa(const std::string& name, const std::string& what = "--isa");
// Whether this CPU can run the kernels of `isa` (Generic: always).
bool cpu_supports(Isa isa);
// The best ISA this CPU has.
Isa best_isa();
// The ISA the kernels run now. On its first call it reads SERVELAB_ISA (an unknown value, or one
// this CPU lacks, throws InputError naming the variable, on every call until fixed).
Isa active_isa();
// Forces the kernels' ISA from now on; InputError naming `what` where the CPU lacks it.
void set_active_isa(Isa isa, const std::string& what = "--isa");
// The CPU's model name as /proc/cpuinfo gives it ("unknown" where it cannot be read).
std::string cpu_model_name();

}  // namespace servelab
