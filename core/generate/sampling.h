#pragma once
// Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seeded RNG.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

#include "generate/sampling_params.h"

namespace servelab {

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits [batch, vocab] on any device -> next ids [batch] int64 on the CPU.
  at::Tensor next(const at::Tensor& logits);

 private:
  SamplingParams params_;
  at::Generator generator_;
};

}  // namespace servelab
