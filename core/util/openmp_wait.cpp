#include "util/openmp_wait.h"

#include <cstdlib>

namespace servelab {

const char* openmp_wait_policy() {
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return p;
  if (std::getenv("GOMP_SPINCOUNT")) return "GOMP_SPINCOUNT";
  return "libgomp default";
}

}  // namespace servelab
