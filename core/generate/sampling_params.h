#pragma once
// How the next token is chosen. Torch-free so that the GUI can build it.
#include <cstdint>

namespace servelab {

// The parameters vLLM and llama.cpp's server users expect, with their meanings. The penalties
// apply to greedy decoding too; temperature, min-p, top-k and top-p shape sampling only.
struct SamplingParams {
  bool greedy = true;
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // 0: no top-k filter
  double top_p = 1.0;        // (0, 1]; 1: no nucleus filter
  std::uint64_t seed = 0;
  // [0, 1]: drops tokens whose probability is below min_p times the most likely one's (0: off).
  double min_p = 0.0;
  // > 0 (1: off): every token of the prompt or the output so far has its logit divided by it when
  // positive, multiplied when negative (the CTRL / Hugging Face / vLLM rule).
  double repetition_penalty = 1.0;
  // [-2, 2] (0: off), OpenAI's: over the output so far, each token's logit loses presence_penalty
  // once if it occurred and frequency_penalty times the number of times it occurred.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  // The most likely tokens reported with each chosen token's log-probability, [0, 20].
  int64_t top_logprobs = 0;

  // InputError naming the bad value.
  void validate() const;
  // Whether any penalty changes the logits.
  bool penalized() const {
    return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
  }
};

}  // namespace servelab
