#pragma once
// What the C++ microbenchmarks share: medians, a clock in milliseconds, "1,2,4" lists.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace servelab::bench {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// "1,2,4,8" -> {1, 2, 4, 8}.
inline std::vector<int64_t> parse_rows(const std::string& s) {
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find(',', i);
    out.push_back(std::stoll(s.substr(i, j == std::string::npos ? std::string::npos : j - i)));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

}  // namespace servelab::bench
