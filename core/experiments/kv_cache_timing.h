#pragma once
// Lesson 1: the same greedy tokens generated with and without the KV cache, per-token latency
// of both measured side by side (interleaved repeats, median per token).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "experiments/roofline_point.h"
#include "model/decode_graph_stats.h"
#include "model/engine.h"
#include "model/step_cost.h"

namespace servelab {

struct KvCacheTimingParams {
  std::string prompt = "The quick brown fox jumped over the";
  // > 0: the prompt's tokens repeated (and cut) to exactly this many, to study long prompts.
  int64_t prompt_tokens = 0;
  int64_t new_tokens = 10;
  int64_t repeats = 3;  // interleaved no-cache / cache runs; medians are reported
  bool warmup = true;
};

struct KvCacheTimingResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> tokens;  // generated without the cache (the same every repeat, checked)
  // Generated with the cache: identical to tokens (checked) unless the engine quantizes activations
  // per call (Engine::activations_quantized_per_call), where the two may part and the experiment
  // reports how far they agree instead of failing.
  std::vector<int32_t> cache_tokens;
  std::string comparison;       // "exact" or "agreement"
  bool tokens_agree = true;     // cache_tokens == tokens
  int64_t agreeing_prefix = 0;  // leading tokens the two runs share
  std::string text;
  std::vector<double> no_cache_ms;  // median per token over repeats; [0] includes the prefill
  std::vector<double> cache_ms;
  double no_cache_total_ms = 0, cache_total_ms = 0;  // sums of the medians
  double speedup = 0;                                // no_cache_total / cache_total
  double decode_speedup = 0;                         // same, prefill step excluded
  int64_t kv_cache_bytes = 0;                        // preallocated for prompt + new tokens
  int64_t kv_bytes_per_token = 0;                    // K and V of one position across all layers
  int64_t repeats = 0;
  // The cached runs' CUDA graphs (summed over the timed runs; on the CPU, why none ran), and the
  // warm-up run's, which captured them (its capture time and the memory the graphs took).
  DecodeGraphStats cuda_graphs, cuda_graphs_warmup;
  // FLOPs and bytes of each token's step (model/step_cost.h): with the cache, the prompt's prefill
  // and then one position a step; without it, the whole sequence so far every step.
  std::vector<StepCost> no_cache_cost, cache_cost;
  // Those steps on the roofline: the prefill, the cached decode steps and the recomputing ones
  // (each kind's costs summed over its median times).
  std::vector<RooflinePoint> roofline;
  nlohmann::json to_json() const;
};

KvCacheTimingResult run_kv_cache_timing(const Engine& engine, const KvCacheTimingParams& params,
                                        const ExperimentControl& control = {});

}  // namespace servelab
