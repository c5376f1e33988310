#pragma once
// What the CPU we run on can do, asked once (the AVX-512 kernels check it before they run).

namespace servelab {

// True where the CPU has AVX-512F (x86-64 only; false elsewhere).
bool cpu_has_avx512();

}  // namespace servelab
