#pragma once
// Serving with adapters: a queue served by continuous batching where every request names a LoRA
// adapter; the adapters share decode steps and live in a bounded cache. The GUI's "Serve with
// adapters" page and `servelab-cli lora serve` both run this.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "experiments/multi_lora.h"
#include "generate/continuous_batching.h"
#include "model/engine.h"

namespace servelab {

struct AdapterServingParams {
  std::string prompt = "The quick brown fox jumped over the";  // every request's prompt
  int64_t requests = 16;
  int64_t new_tokens = 16;  // greedy tokens per request, all of them (no stop at end of text)
  int64_t max_batch = 8;    // requests running at once
  // What the requests name, in turn. Empty: random_adapters random ones of random_rank (alpha 2r,
  // seeds 1, 2, ...).
  std::vector<AdapterSource> adapters;
  int64_t random_adapters = 4, random_rank = 8;
  int64_t base_every = 0;      // every n-th request runs the base model (0: none)
  int64_t cache_capacity = 0;  // adapters loaded at once (0: all of them)
  MultiLoraStrategy strategy = MultiLoraStrategy::Segmented;
};

// The adapters the run uses: params.adapters, or the random ones, without those no request names.
// InputError naming the count at fault (requests, adapters, rank, ...) before anything is allocated.
void check_adapter_serving_params(const Engine& engine, const AdapterServingParams& params);
std::vector<AdapterSource> adapter_serving_adapters(const AdapterServingParams& params);
// The adapter each request names, in queue order ("" for the base model).
std::vector<std::string> adapter_serving_assignment(const AdapterServingParams& params);

struct AdapterServingResult {
  std::string strategy;
  std::vector<AdapterSource> adapters;        // what was served
  std::vector<std::string> request_adapters;  // one per request
  BatchRunResult run;
  nlohmann::json to_json() const;
};

// Throws InputError for an empty prompt or queue, CancelledError when control.cancel is set.
// control.batch receives the scheduler's events as they happen.
AdapterServingResult run_adapter_serving(const Engine& engine, const AdapterServingParams& params,
                                         const ExperimentControl& control = {});

}  // namespace servelab
