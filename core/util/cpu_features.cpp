#include "util/cpu_features.h"

namespace servelab {

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

}  // namespace servelab
