#pragma once
// Prompt lookup (vLLM's "ngram" speculative method, llama.cpp's lookup decoding): a request's
// last n tokens are looked up earlier in its own tokens (prompt and output so far), and the
// tokens that followed the most recent earlier occurrence are proposed. Text that repeats its
// input (extraction, editing, quoting code) is drafted for free. Torch-free.
#include <cstdint>
#include <vector>

namespace servelab {

// Up to k proposed tokens after `tokens`: the longest suffix of length in [min_n, max_n] that
// occurs earlier is matched (longest first, then the most recent occurrence), and what followed
// it is proposed (fewer than k when the match sits near the end). Empty when nothing matches.
std::vector<int32_t> ngram_propose(const std::vector<int32_t>& tokens, int64_t k, int64_t min_n,
                                   int64_t max_n);

}  // namespace servelab
