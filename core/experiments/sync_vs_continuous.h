#pragma once
// Lesson 3: the same queue served by synchronous (static) batching and by continuous batching,
// side by side: totals, and the latency distribution of the requests.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "generate/continuous_batching.h"
#include "model/engine.h"

namespace servelab {

struct SyncVsContinuousParams {
  std::string prompt = "The quick brown fox jumped over the";
  int64_t requests = 32;
  int64_t max_batch = 8;
  // Chunked prefill for the continuous methods on slot and paged KV (BatchOptions); 0: off.
  int64_t max_num_batched_tokens = 0;
  int64_t long_every = 8;  // every n-th request (the first included) is a long one
  int64_t long_tokens = 100;
  int64_t short_tokens = 10;
  // > 0: each prompt is the prompt's tokens repeated to a random length in [min, max] (seeded).
  int64_t prompt_tokens_min = 0, prompt_tokens_max = 0;
  double arrival_rate = 0;  // requests per second (Poisson, seeded); 0: all present at the start
  std::uint64_t seed = 42;
  bool naive = true;  // also run the course's merge/filter continuous batching
  // Also run paged KV: blocks of kv_block_size positions, kv_budget_mb megabytes (1e6 bytes) of
  // them (0: as much memory as slot KV's), with or without prefix caching.
  bool paged = false;
  int64_t kv_block_size = 16;
  double kv_budget_mb = 0;
  bool prefix_caching = true;
  // With paged and prefix_caching: paged KV also runs without prefix caching on the same pool, so
  // the cache's hits and time to first token show side by side.
  bool paged_uncached_too = false;
  // With paged and a budget: the other methods get only the slots that kv_budget_mb holds (each as
  // long as the longest request), so slot KV and paged KV share one memory budget.
  bool slots_in_budget = false;
  bool warmup = true;
};

// One method's figures.
struct ServeSummary {
  std::string method;
  double total_ms = 0;
  int64_t inference_calls = 0, max_batch = 0, generated_tokens = 0, steps = 0;
  double average_batch = 0, tokens_per_s = 0;
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double latency_p50 = 0, latency_p90 = 0, latency_p99 = 0;
  double queue_wait_p50 = 0;
  int64_t kv_cache_bytes = 0;
  int64_t kv_copy_bytes = 0;                // KV memory moved between caches (admission and retirement)
  std::vector<double> ttft_ms, latency_ms;  // per request
};

struct SyncVsContinuousResult {
  std::vector<ServeSummary> methods;  // synchronous, continuous (slot KV)[, merge/filter][, paged]
  std::vector<BatchRunResult> runs;   // full per-request and per-step detail, same order
  bool same_tokens = true;            // greedy tokens agree across methods
  double speedup = 0;                 // synchronous total / continuous (slot KV) total
  nlohmann::json to_json() const;
};

ServeSummary summarize(const BatchRunResult& run);
// Nearest-rank percentile (p in [0, 100]) of a non-empty vector.
double percentile(std::vector<double> values, double p);
// percentile(values, 50), or 0 for no values (a run that measured nothing).
double median_or_zero(std::vector<double> values);
nlohmann::json batch_run_json(const BatchRunResult& run);

std::vector<BatchRequest> make_sync_vs_continuous_requests(const Engine& engine,
                                                           const SyncVsContinuousParams& p);
SyncVsContinuousResult run_sync_vs_continuous(const Engine& engine, const SyncVsContinuousParams& params,
                                              const ExperimentControl& control = {});

}  // namespace servelab
