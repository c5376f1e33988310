#include "util/openmp_wait.h"

#include <unistd.h>

#include <cstdlib>

namespace servelab {

void use_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // No exec (no /proc): the variable would only mislead info and reach child processes.
  unsetenv("OMP_WAIT_POLICY");
}

const char* openmp_wait_policy() {
  if (const char* p = std::getenv("OMP_WAIT_POLICY")) return p;
  if (std::getenv("GOMP_SPINCOUNT")) return "GOMP_SPINCOUNT";
  return "libgomp default";
}

}  // namespace servelab
