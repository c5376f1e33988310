#pragma once
// Speculative decoding's settings and counters, torch-free so that the GUI and the CLI can build
// them. A drafter proposes up to k tokens after a decoding request's last one; the target model
// verifies them in the request's next decode (one forward over 1 + k positions) and keeps the
// longest agreeing prefix plus one token of its own (generate/speculative.h).
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

class Model;  // model/model.h

enum class SpeculativeMethod {
  None,
  // Prompt lookup (vLLM's "ngram"): the last n tokens matched earlier in the prompt and output,
  // the tokens that followed them proposed. No second model; free to draft.
  Ngram,
  // A draft model with the target's vocabulary proposes by decoding k tokens greedily (or sampling
  // them, for sampled requests).
  DraftModel,
};

const char* speculative_method_name(SpeculativeMethod method);
// "ngram", "draft" (or "off"/"none") -> the method; InputError naming the value otherwise.
SpeculativeMethod parse_speculative_method(const std::string& name);

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::None;
  int64_t num_speculative_tokens = 4;  // k, [1, 16]
  // N-gram: the longest and shortest suffix matched, longest first ([1, 16], min <= max).
  int64_t prompt_lookup_max = 4;
  int64_t prompt_lookup_min = 1;
  // DraftModel: the model that drafts (outlives the run; same vocabulary as the target).
  const Model* draft_model = nullptr;
  bool enabled() const { return method != SpeculativeMethod::None; }
  // InputError naming the bad field.
  void validate() const;
};

// What speculation did over a run, under vLLM's metric names (vllm:spec_decode_*).
struct SpecDecodeStats {
  int64_t num_drafts = 0;           // verified decode rows that carried proposals
  int64_t num_draft_tokens = 0;     // tokens proposed and verified
  int64_t num_accepted_tokens = 0;  // of those, accepted
  // Accepted proposals by their place in the draft (index 0: the first proposed token).
  std::vector<int64_t> accepted_per_position;
  double draft_ms = 0;  // device-synchronised time the drafter took
  // accepted / drafted, 0 without drafts.
  double acceptance_rate() const {
    return num_draft_tokens ? static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens)
                            : 0;
  }
  // Tokens a verified row gave on average: its accepted proposals plus the one the target adds
  // (vLLM's mean acceptance length); 0 without drafts.
  double mean_accepted_length() const {
    return num_drafts ? 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts) : 0;
  }
  void add(const SpecDecodeStats& other);
};

// One verified decode row of a step: what the drafter proposed, how many the target accepted.
struct SpecRow {
  int64_t request = 0;
  std::vector<int32_t> proposed;
  int64_t accepted = 0;
};

}  // namespace servelab
