#include "util/limits.h"

#include <sys/resource.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "util/errors.h"

namespace servelab::limits {

namespace {

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string gib(int64_t bytes) {
  std::ostringstream s;
  s.precision(3);
  s << static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30);
  return s.str();
}

int64_t proc_kib(const char* file, const std::string& wanted) {
  std::ifstream in(file);
  std::string key, unit;
  int64_t value = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    if (l >> key >> value && key == wanted) return value;
  }
  return -1;
}

}  // namespace

int64_t max_threads() {
  const int64_t hw = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return 4 * hw;
}

void check_range(const std::string& what, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo)
    throw InputError(what + " must be at least " + std::to_string(lo) + ", got " + std::to_string(value));
  if (value > hi)
    throw InputError(what + " must be at most " + std::to_string(hi) + ", got " + std::to_string(value));
}

void check_range(const std::string& what, double value, double lo, double hi) {
  if (!std::isfinite(value)) throw InputError(what + " must be a finite number, got " + number(value));
  if (value < lo) throw InputError(what + " must be at least " + number(lo) + ", got " + number(value));
  if (value > hi) throw InputError(what + " must be at most " + number(hi) + ", got " + number(value));
}

int64_t host_memory_budget_bytes() {
  int64_t budget = proc_kib("/proc/meminfo", "MemAvailable:");
  budget = budget < 0 ? 0 : budget * 1024;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const int64_t used = std::max<int64_t>(0, proc_kib("/proc/self/status", "VmSize:")) * 1024;
    const int64_t left = std::max<int64_t>(0, static_cast<int64_t>(as.rlim_cur) - used);
    budget = budget > 0 ? std::min(budget, left) : left;
  }
  return budget;
}

void check_fits_in_memory(const std::string& what, int64_t bytes) {
  const int64_t budget = host_memory_budget_bytes();
  if (budget > 0 && bytes > budget)
    throw InputError(what + " needs about " + gib(bytes) + " GiB, but only " + gib(budget) +
                     " GiB of memory is available");
}

}  // namespace servelab::limits
