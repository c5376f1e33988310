#pragma once
// `servelab-cli generate`: prompts alone, as a padded batch, or served by continuous batching;
// text, or JSON with --json.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_common.h"
#include "generate/generator.h"

namespace servelab {

struct GenerateArgs {
  std::vector<std::string> prompts;
  int64_t max_new_tokens = 10;
  bool greedy = false;
  double temperature = 1;
  bool sampling = false;  // --temperature given
  int64_t top_k = 0;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  bool no_kv_cache = false;
  bool batch = false;
  bool chat = false;
  std::string system;
  bool json_out = false;
  std::vector<std::string> stop;
  std::vector<std::string> adapters;  // PEFT folders: one for every prompt, or one per prompt ("none": base)
  std::string lora_strategy = "segmented";
  double min_p = 0, repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  int64_t logprobs = 0;
  bool logprobs_given = false;
  // The prompts through the continuous-batching scheduler (given when either is > 0).
  int64_t max_num_batched_tokens = 0, max_num_seqs = 0;
  std::string kv = "paged";
  SpeculativeArgs speculative;
};

// The exit code; the text (coloured at a terminal) or one JSON line per prompt on stdout.
int cmd_generate(const ModelArgs& m, const GenerateArgs& a);

}  // namespace servelab
