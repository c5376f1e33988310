#pragma once
// What the C++ microbenchmarks share: medians, a clock in milliseconds, "1,2,4" lists.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
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

// A command line of "--name value" pairs, every name among `known`: name -> value. On a name not
// known or a name without a value, *error says which and the map is empty.
inline std::map<std::string, std::string> parse_options(int argc, char** argv,
                                                        const std::set<std::string>& known,
                                                        std::string* error) {
  std::map<std::string, std::string> out;
  for (int i = 1; i < argc; i += 2) {
    const std::string name = argv[i];
    if (!known.count(name)) {
      *error = "unknown option " + name;
      return {};
    }
    if (i + 1 >= argc) {
      *error = name + " needs a value";
      return {};
    }
    out[name] = argv[i + 1];
  }
  return out;
}

}  // namespace servelab::bench
