#pragma once
// Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seeded RNG.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "generate/sampling_params.h"

namespace servelab {

// ModelFormatError when a row of logits [batch, vocab] holds NaN or an infinity: the weights or an
// adapter overflowed, and every token from here on would be garbage. `where` names the step (and
// request) in the message. One fp32 sum over the logits (the rows are examined only when it is not
// finite): negligible next to a decode step (docs/benchmarks.md, "The cost of checking for NaN and
// infinity").
void check_finite_logits(const at::Tensor& logits, const std::string& where);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits [batch, vocab] on any device -> next ids [batch] int64 on the CPU.
  at::Tensor next(const at::Tensor& logits);
  // The distribution sampling draws from: temperature, min-p, top-k and top-p applied to logits
  // [batch, vocab], softmaxed; fp32 on the CPU (speculative decoding's rejection rule compares it).
  at::Tensor probs(const at::Tensor& logits) const;
  // One token drawn from probs [vocab] with this request's generator.
  int64_t draw(const at::Tensor& probs);
  // A uniform number in [0, 1) from this request's generator.
  double uniform();

 private:
  SamplingParams params_;
  at::Generator generator_;
};

}  // namespace servelab
