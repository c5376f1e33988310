#pragma once
// The CLI's error for a command line that cannot mean anything, its one-line messages, and what
// checks a seed.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace servelab {

// A command line that cannot mean anything (an unknown subcommand, contradictory options, an empty
// value): exit code 2, like the parser's own errors.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A seed as typed: a whole number in [0, 2^64 - 1]. CLI11 alone would wrap "-1" and saturate
// numbers past the top to the same seed, so different seeds would silently mean one.
inline const CLI::Validator kSeedValidator(
    [](std::string& text) -> std::string {
      const std::string why = "a seed is a whole number in [0, 18446744073709551615], got '" + text + "'";
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return why;
      errno = 0;
      std::strtoull(text.c_str(), nullptr, 10);
      return errno == ERANGE ? why : std::string();
    },
    "SEED");

// s with its line breaks as spaces: an error message on one line.
inline std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

}  // namespace servelab
