#pragma once
// Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seeded RNG.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

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
