#include "generate/ngram_proposer.h"

#include <algorithm>

namespace servelab {

std::vector<int32_t> ngram_propose(const std::vector<int32_t>& tokens, int64_t k, int64_t min_n,
                                   int64_t max_n) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k < 1) return {};
  for (int64_t n = std::min(max_n, size - 1); n >= std::max<int64_t>(min_n, 1); --n) {
    const auto suffix = tokens.end() - n;
    // The most recent earlier occurrence: its continuation is the likeliest to be followed again.
    for (int64_t j = size - n - 1; j >= 0; --j) {
      if (!std::equal(suffix, tokens.end(), tokens.begin() + j)) continue;
      const int64_t from = j + n, to = std::min(from + k, size);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

}  // namespace servelab
