#pragma once
// Generation requests, events and results, and the generate() entry point. Torch-free: the GUI
// and the CLI include this; tensor-level helpers are in generate/generator.h.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "generate/sampling_params.h"
#include "lora/lora_spec.h"
#include "model/decode_graph_stats.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

class Model;        // model/model.h
class LoraAdapter;  // lora/lora_adapter.h

struct GenerateOptions {
  int64_t max_new_tokens = 10;
  SamplingParams sampling;
  bool use_kv_cache = true;
  bool stop_at_eos = true;
  std::vector<std::string> stop_strings;
  int64_t report_top = 5;  // top-N logits reported per step (0: none)
  // Each generated token's log-probability (and sampling.top_logprobs alternatives) recorded.
  bool logprobs = false;
  const std::atomic<bool>* cancel = nullptr;  // checked before every step
  // Per prompt, the LoRA adapter its row runs with (null: the base model); empty: no adapters.
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  MultiLoraStrategy lora_strategy = MultiLoraStrategy::Segmented;
};

// One of the most likely next tokens at a step: its id, raw logit and softmax probability
// (temperature 1, over the whole vocabulary).
struct TopToken {
  int32_t id;
  float logit;
  float probability;
};

struct TokenEvent {
  size_t row;
  int64_t step;
  int32_t id;
  std::string piece;  // complete UTF-8 text this token finished (may be empty mid-character)
  double step_ms;
  std::vector<TopToken> top;  // report_top candidates of this step, most likely first
};

struct StepEvent {
  int64_t step;       // 0 is the prefill step that yields the first token
  int64_t batch;      // rows still generating
  int64_t positions;  // query positions the forward pass computed
  double ms;
};

class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void on_token(const TokenEvent&) {}
  virtual void on_step(const StepEvent&) {}
};

struct GeneratedSequence {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;                                         // decoded generated text (stop string cut off)
  std::vector<std::vector<std::pair<int32_t, float>>> top;  // per step: report_top (id, logit)
  std::vector<double> step_ms;                              // per generated token
  std::string finish_reason;                                // "length", "eos" or "stop"
  // With GenerateOptions::logprobs: per generated token, its log-probability and the
  // sampling.top_logprobs most likely tokens with theirs.
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
};

struct GenerateResult {
  std::vector<GeneratedSequence> sequences;
  std::vector<double> step_ms;  // per step of the whole batch; [0] is time to first token
  double total_ms = 0;
  int64_t kv_cache_bytes = 0;
  // The decode steps' CUDA graphs (on a GPU; otherwise `unavailable` says why none ran).
  DecodeGraphStats cuda_graphs;
};

// The tokens that end generation: the tokenizer's stop ids (eos, the model's end-of-turn tokens,
// generation_config.json's eos_token_id list), then every eos id the model's config.json lists.
std::vector<int32_t> generation_stop_ids(const Model& model, const Tokenizer& tokenizer);
// The padding id of a left-padded batch: the first stop id (the course pads with EOS), else 0.
int32_t padding_id(const Model& model, const Tokenizer& tokenizer);

// Checks a batch before any memory is touched: non-empty prompts, prompt + new tokens within the
// context, a batch whose KV cache and activations fit in memory. Throws InputError.
void check_generation_fits(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                           const GenerateOptions& options);

// Generates for all prompts as one left-padded batch (a batch of one is plain generation).
// Greedy tokens of a row equal those of the same prompt generated alone.
GenerateResult generate(const Model& model, const Tokenizer& tokenizer,
                        const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
                        GenerationSink* sink = nullptr);

// The static batch the course builds for a list of prompts, as plain data for tables: pad = EOS,
// left padding, attention_mask 1 on real tokens, position_ids = cumsum(mask) - 1 with padding set
// to 1. Row r is prompt r; every row has the longest prompt's length.
struct PaddedPrompts {
  int32_t pad_id = 0;
  std::vector<std::vector<int64_t>> input_ids, attention_mask, position_ids;
  std::vector<std::vector<std::string>>
      pieces;  // each cell's token as the vocabulary spells it ("Ġfox"), "" on padding
};
// Throws InputError for no prompts or an empty prompt.
PaddedPrompts pad_prompts(const Model& model, const Tokenizer& tokenizer,
                          const std::vector<std::string>& prompts);

}  // namespace servelab
