#pragma once
// The CLI's error for a command line that cannot mean anything.
#include <stdexcept>

namespace servelab {

// A command line that cannot mean anything (an unknown subcommand, contradictory options, an empty
// value): exit code 2, like the parser's own errors.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace servelab
