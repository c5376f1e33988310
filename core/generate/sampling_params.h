#pragma once
// How the next token is chosen. Torch-free so that the GUI can build it.
#include <cstdint>

namespace servelab {

struct SamplingParams {
  bool greedy = true;
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // 0: no top-k filter
  double top_p = 1.0;        // (0, 1]; 1: no nucleus filter
  std::uint64_t seed = 0;

  // InputError naming the bad value.
  void validate() const;
};

}  // namespace servelab
