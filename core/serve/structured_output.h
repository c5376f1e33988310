#pragma once
// Structured output: decoding constrained to JSON matching a JSON Schema (LoRAX's
// response_format json_object + schema, OpenAI's json_schema / json_object), on xgrammar's C++
// core (scripts/build_xgrammar). Before each token the request's grammar says which tokens may
// come next (a bitmask over the vocabulary); the others' logits become -inf, so greedy and
// sampled decoding both stay inside the grammar. Torch- and xgrammar-free header.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generate/token_constraint.h"

namespace servelab {

class Tokenizer;

// What constraining has cost, over every token of every request.
struct StructuredOutputStats {
  int64_t grammars = 0;   // compiled (cache misses)
  double compile_ms = 0;  // their total
  int64_t masked_tokens = 0;
  double mask_us_total = 0;  // computing the bitmask and applying it to the logits
  double mask_us_max = 0;
  double fill_us_total = 0;  // of mask_us_total: xgrammar computing the bitmask
  // The first 100,000 tokens' times (medians and tails: a loaded machine's preemptions land in
  // single tokens and swamp a mean).
  std::vector<float> mask_us, fill_us;
};

class StructuredOutput {
 public:
  // Whether this build has it (xgrammar found when configuring).
  static bool available();
  // The vocabulary of tokenizer for a model with model_vocab logits; stop_ids end generation
  // (the grammar allows them once the JSON is complete). InputError when not available().
  StructuredOutput(const Tokenizer& tokenizer, int64_t model_vocab, std::vector<int32_t> stop_ids);
  ~StructuredOutput();
  StructuredOutput(const StructuredOutput&) = delete;
  StructuredOutput& operator=(const StructuredOutput&) = delete;

  // A constraint to JSON valid under schema (a JSON Schema document as text), or to any JSON
  // object when schema is empty. Compiled grammars are cached by schema. InputError naming the
  // problem for a schema the compiler refuses. Any thread.
  std::unique_ptr<TokenConstraint> json(const std::string& schema);

  StructuredOutputStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab
