#pragma once
// The prompts a load run sends. Generated ones are made on demand from (seed, request index), so a
// run of many requests holds no prompt list, and the same seed gives the same prompts:
// - fixed: one prompt for every request (the course's scenarios);
// - random: prompts of random words, or of random tokens of the model's tokenizer when one is given,
//   lengths uniform in [len * (1 - ratio), len * (1 + ratio)]; each prompt begins with words (tokens)
//   that spell its index, so no two share a prefix unless a shared prefix is asked for;
// - prefix-repetition: N shared prefixes of a given length, each request one of them (in turn) and a
//   suffix of its own: prefix caching measured on purpose;
// - shipped: our own set of varied prompts (resources/loadgen/prompts.jsonl), in turn;
// - file: a user's JSONL ({"prompt": ..., "output_tokens": N} a line) or ShareGPT JSON
//   ([{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}, ...]).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class Tokenizer;

struct DatasetEntry {
  std::string prompt;
  int64_t prompt_tokens = -1;  // known when made with the tokenizer; -1: unknown
  int64_t output_tokens = -1;  // tokens to ask for; -1: the run's --max-new-tokens
};

struct DatasetOptions {
  std::string name = "random";                    // fixed, random, prefix-repetition, shipped or file
  std::string path;                               // file
  std::string prompt = "What is deep learning?";  // fixed
  int64_t input_len = 128;                        // random: prompt tokens (words without a tokenizer)
  int64_t output_len = 32;                        // random, prefix-repetition: tokens to ask for
  double range_ratio = 0;                         // random: lengths uniform in [len * (1 - r), len * (1 + r)]
  int64_t prefix_len = 0;    // random: a prefix every prompt shares; prefix-repetition: each prefix's
  int64_t num_prefixes = 4;  // prefix-repetition
  int64_t suffix_len = 32;   // prefix-repetition: each request's own part
  uint64_t seed = 1;
};

// Limits on what a dataset may ask for (beyond them, InputError naming the option).
constexpr int64_t kMaxPromptLen = 200'000;
constexpr int64_t kMaxOutputLen = 1'000'000;
constexpr int64_t kMaxDatasetEntries = 1'000'000;
constexpr int64_t kMaxDatasetFileBytes = int64_t{1} << 30;

class LoadDataset {
 public:
  // InputError naming the option (--dataset, --input-len, ...) or the file and line.
  LoadDataset(const DatasetOptions& options, const Tokenizer* tokenizer);

  // The i-th request's prompt (i >= 0); the same for the same seed and i.
  DatasetEntry at(int64_t i) const;
  // Entries of a file or the shipped set (request i gets entry i % size); 0 for generated datasets.
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  const DatasetOptions& options() const { return options_; }
  bool tokens() const { return !vocab_.empty(); }  // random prompts are made of tokens

 private:
  std::string words(uint64_t stream, int64_t index, int64_t count, bool unique_head) const;
  std::vector<int32_t> ids(uint64_t stream, int64_t index, int64_t count, bool unique_head) const;
  std::string piece(uint64_t stream, int64_t index, int64_t count, bool unique_head, int64_t* tokens) const;

  DatasetOptions options_;
  const Tokenizer* tokenizer_;
  std::vector<DatasetEntry> entries_;
  std::vector<int32_t> vocab_;  // the tokenizer's ids random prompts are made of
};

// A JSONL or ShareGPT JSON text (`source` names it in messages); with a tokenizer, ShareGPT entries
// ask for as many tokens as their answer had. InputError naming the source and the line or entry.
std::vector<DatasetEntry> parse_dataset(std::string_view text, const std::string& source,
                                        const Tokenizer* tokenizer);

// resources/loadgen/prompts.jsonl, compiled in.
const std::string& shipped_prompts_jsonl();

}  // namespace servelab
