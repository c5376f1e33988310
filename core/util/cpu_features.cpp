#include "util/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>

#include "util/errors.h"

namespace servelab {

namespace {

// -1 until the first question; then the Isa's value.
std::atomic<int> g_active{-1};
std::mutex g_init;

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    case Isa::Generic:
      return "generic";
  }
  return "?";
}

Isa parse_isa(const std::string& name, const std::string& what) {
  if (name == "avx512") return Isa::Avx512;
  if (name == "avx2") return Isa::Avx2;
  if (name == "generic") return Isa::Generic;
  throw InputError(what + ": \"" + name + "\" is not an ISA (avx512, avx2 or generic)");
}

bool cpu_supports(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  // Our AVX-512 kernels use F alone (with AVX2's FMA and F16C, which every AVX-512 CPU has).
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  switch (isa) {
    case Isa::Avx512:
      return avx512;
    case Isa::Avx2:
      return avx2;
    case Isa::Generic:
      return true;
  }
  return false;
#else
  return isa == Isa::Generic;
#endif
}

Isa best_isa() {
  if (cpu_supports(Isa::Avx512)) return Isa::Avx512;
  if (cpu_supports(Isa::Avx2)) return Isa::Avx2;
  return Isa::Generic;
}

void set_active_isa(Isa isa, const std::string& what) {
  if (!cpu_supports(isa))
    throw InputError(what + ": this CPU (" + cpu_model_name() + ") cannot run " + isa_name(isa) +
                     " kernels; the best it has is " + isa_name(best_isa()));
  std::lock_guard<std::mutex> lock(g_init);
  g_active.store(static_cast<int>(isa));
}

Isa active_isa() {
  const int v = g_active.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Isa>(v);
  std::lock_guard<std::mutex> lock(g_init);
  if (g_active.load() >= 0) return static_cast<Isa>(g_active.load());
  Isa isa = best_isa();
  if (const char* env = std::getenv("SERVELAB_ISA"); env && *env) {
    isa = parse_isa(env, "SERVELAB_ISA");
    if (!cpu_supports(isa))
      throw InputError(std::string("SERVELAB_ISA: this CPU (") + cpu_model_name() + ") cannot run " +
                       isa_name(isa) + " kernels; the best it has is " + isa_name(best_isa()));
  }
  g_active.store(static_cast<int>(isa));
  return isa;
}

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

}  // namespace servelab
