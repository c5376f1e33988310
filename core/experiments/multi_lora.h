#pragma once
// Lessons 5 and 6 and beyond: LoRA made visible, and a batch whose rows use different adapters
// computed by the course's loop, the course's gathered batched matmul and segmented (SGMV) products,
// side by side against the base model; generated text per adapter for one prompt. Torch-free
// header: the GUI includes it.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "lora/lora_spec.h"
#include "model/engine.h"

namespace servelab {

struct MultiLoraParams {
  // "toy": the course's model (embedding 10, linear 10x10 with LoRA, lm_head 10x10), toy_adapters
  // random adapters of toy_rank, a random adapter per row, average over toy_samples forward passes
  // of toy_seq_len tokens. "gpt2": the engine's model, one decode step after `context` tokens, with
  // the base model (no adapters) measured at every batch size beside the strategies.
  std::string workload = "gpt2";
  std::vector<std::string> strategies = {"loop", "gathered", "segmented"};
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8, 16, 32};

  int64_t toy_adapters = 64, toy_rank = 2, toy_samples = 500, toy_seq_len = 8;

  // gpt2: the adapters (empty: random_adapters random ones of random_rank on every module).
  std::vector<AdapterSource> adapters;
  int64_t random_adapters = 32, random_rank = 8;
  // Which adapter each row of a batch uses:
  //   "distinct"  row i uses adapter i mod n (every row its own adapter up to n rows)
  //   "shared"    row i uses adapter i mod shared_adapters (a few adapters, many rows each)
  //   "mixed"     every other row runs the base model (no adapter), the others as "distinct"
  //   "rows"      row i uses row_adapters[i mod size] ("" = base model): the batch composer
  std::string assignment = "distinct";
  int64_t shared_adapters = 4;
  std::vector<std::string> row_adapters;
  int64_t context = 32;      // cached positions before the timed decode steps
  int64_t decode_steps = 4;  // timed steps per repeat
  int64_t repeats = 3;       // strategies and base alternate within a repeat; medians
  bool warmup = true;

  // Text: the prompt through every adapter (up to `outputs_max` of them) and the base model.
  std::string prompt = "The quick brown fox jumped over the";
  int64_t new_tokens = 12;
  int64_t outputs_max = 4;
  // Prompts of their own, by adapter name (the built-in adapters' prompt formats,
  // lora/builtin_adapters.h): such an adapter continues its own prompt, with the base model's
  // continuation of the same prompt beside it, and every row then stops at end of text.
  std::map<std::string, std::string> adapter_prompts;
};

// One decode step's median time for a strategy ("base" for the model without adapters).
struct MultiLoraPoint {
  std::string strategy;
  int64_t batch = 0;
  double ms = 0;
  double ratio_to_base = 0;  // ms / base ms at the same batch size
  // toy: ms is the mean over the samples (the course averages); median_ms resists the outliers a
  // busy machine adds. gpt2: both are the median over repeats.
  double median_ms = 0;
  int64_t distinct_adapters = 0;
};

// The LoRA arithmetic of one wrapped matrix, for the tab's explanation.
struct LoraShapes {
  std::string module;  // "attn.c_attn", "self_attn.q_proj": from the model's projection table
  int64_t in = 0, out = 0, rank = 0;
  int64_t w_parameters = 0, ab_parameters = 0;
  double ratio = 0;  // (|A| + |B|) / |W|
};

struct AdapterOutput {
  std::string adapter;  // "" for the base model
  std::string prompt;   // the prompt it continued: params.prompt, or the adapter's own
  std::vector<int32_t> tokens;
  std::vector<std::string> pieces;
  std::string text;
};

struct MultiLoraResult {
  std::string workload;      // "toy", or "gpt2": the engine's own model, whatever its architecture
  std::string architecture;  // of the model the run used ("gpt2", "llama"; "toy" for the toy)
  std::string model;
  std::string caveat;
  int threads = 0;
  std::string device;
  std::string assignment;
  std::vector<AdapterInfo> adapters;
  std::vector<LoraShapes> shapes;      // every module, at the first adapter's rank
  std::vector<MultiLoraPoint> points;  // in measurement order
  std::vector<AdapterOutput> outputs;  // base first
  // Every strategy gave the same greedy tokens for every output (checked, not assumed).
  bool strategies_agree = true;
  double max_strategy_difference = 0;  // largest |logit| difference between strategies, one batch
  nlohmann::json to_json() const;
};

// Reports on_point(strategy, batch, ms) as each median is known and on_progress per stage.
// Throws InputError for bad names, sizes or adapters (ModelFormatError for bad PEFT folders),
// CancelledError when stopped.
MultiLoraResult run_multi_lora(const Engine& engine, const MultiLoraParams& params,
                               const ExperimentControl& control = {});

// Loads (or makes) an adapter for the engine's model and describes it: what the GUI's adapter list
// shows. Throws as run_multi_lora does for a bad folder.
AdapterInfo describe_adapter(const Engine& engine, const AdapterSource& source);

}  // namespace servelab
