#pragma once
// The one place a generated token is chosen, for every path (generate, the continuous-batching
// scheduler, the server): the non-finite check, the grammar mask, the penalties, greedy or
// temperature / min-p / top-k / top-p sampling with the request's seeded generator, and the
// chosen token's log-probability with the most likely alternatives (vLLM's update_from_output).
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "generate/sampling.h"
#include "generate/token_constraint.h"

namespace servelab {

// One row of logits and the request it belongs to.
struct PickRow {
  const SamplingParams* params = nullptr;
  Sampler* sampler = nullptr;                    // the request's seeded generator (not needed for greedy)
  const std::vector<int32_t>* prompt = nullptr;  // for the repetition penalty
  const std::vector<int32_t>* output = nullptr;  // generated so far, for every penalty
  TokenConstraint* constraint = nullptr;         // structured output; advanced past the chosen token
  bool logprobs = false;                         // the chosen token's log-probability is wanted
};

struct PickedToken {
  int32_t id = 0;
  // log-softmax of the model's logits (after the grammar mask, before penalties and temperature)
  // at the chosen token (when the row asked for it or for top_logprobs; else 0), and the params'
  // top_logprobs most likely tokens with theirs.
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// logits [rows, vocab] on any device, one PickRow per row. ModelFormatError naming `where` when a
// row holds NaN or an infinity.
std::vector<PickedToken> pick_tokens(const at::Tensor& logits, const std::vector<PickRow>& rows,
                                     const std::string& where);

// The chosen token's log-probability and the params' top_logprobs alternatives, from a row of
// fp32 CPU logits [vocab] as the model (and grammar) gave them.
void fill_logprobs(PickedToken& token, const at::Tensor& row, const SamplingParams& params);

// The penalties of params over a row of fp32 logits, in place (exposed for tests).
void apply_penalties(float* logits, int64_t vocab, const SamplingParams& params,
                     const std::vector<int32_t>* prompt, const std::vector<int32_t>* output);

}  // namespace servelab
