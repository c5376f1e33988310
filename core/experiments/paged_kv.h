#pragma once
// "How many requests fit?": one queue served under one KV memory budget by slot KV (a slot sized
// for the longest request per running request) and by paged KV (blocks handed out as requests
// grow), with and without prefix caching; plus the decode step of each KV layout at equal batch.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "generate/continuous_batching.h"
#include "model/engine.h"

namespace servelab {

struct PagedKvParams {
  std::string prompt = "The quick brown fox jumped over the";
  int64_t requests = 32;
  int64_t max_batch = 32;              // requests running at once, whatever the memory
  int64_t max_num_batched_tokens = 0;  // chunked prefill for every method (BatchOptions); 0: off
  // The course's mix: every long_every-th request generates long_tokens, the others short_tokens;
  // prompts of a random length in [prompt_tokens_min, prompt_tokens_max] (seeded).
  int64_t long_every = 8;
  int64_t long_tokens = 100;
  int64_t short_tokens = 10;
  int64_t prompt_tokens_min = 4, prompt_tokens_max = 20;
  // > 0: every prompt starts with the same system prompt of this many tokens.
  int64_t shared_prefix_tokens = 0;
  double arrival_rate = 0;  // requests per second (Poisson, seeded); 0: all present at the start
  std::uint64_t seed = 42;
  // The KV budget: blocks of block_size positions, or megabytes (1e6 bytes); one of them > 0.
  int64_t budget_blocks = 0;
  double budget_mb = 0;
  int64_t block_size = 16;
  int64_t rounds = 1;        // runs of each method, interleaved; medians reported
  bool check_solo = true;    // compare every request's greedy tokens with its solo generate()
  int64_t decode_batch = 8;  // the decode-step comparison: rows, their context, steps
  int64_t decode_context = 128;
  int64_t decode_steps = 16;
  bool warmup = true;
};

struct PagedKvMethod {
  std::string method;             // "slot KV", "paged KV", "paged KV + prefix cache"
  int64_t capacity_requests = 0;  // slot KV: slots the budget holds; paged: blocks
  int64_t kv_blocks = 0;
  int64_t max_running = 0;  // most requests holding KV memory at once
  double average_batch = 0;
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0, prefix_hit_tokens = 0;
  double prefix_hit_rate = 0;  // of prompt positions admitted
  double ttft_p50 = 0, ttft_p99 = 0;
  double total_ms = 0;  // median over rounds
  std::vector<double> total_ms_rounds;
  double tokens_per_s = 0;
  int64_t generated_tokens = 0;
  int64_t kv_allocated_bytes = 0;      // the pool or the slot cache
  int64_t kv_peak_reserved_bytes = 0;  // held for requests at once (slots or blocks)
  int64_t kv_peak_used_bytes = 0;      // holding real positions at once
  double kv_fragmentation = 0;         // 1 - used / reserved, summed over steps
  bool same_as_solo = true;
  int64_t errors = 0;  // requests that could never fit
};

struct PagedKvDecodeStep {
  int64_t batch = 0, context = 0;
  double slot_ms = 0, paged_in_place_ms = 0, paged_gather_ms = 0;  // median decode step
  double in_place_vs_slot = 0, gather_vs_slot = 0;
};

struct PagedKvResult {
  PagedKvParams params;
  int64_t budget_bytes = 0, block_bytes = 0, longest_positions = 0;
  std::vector<PagedKvMethod> methods;
  std::vector<BatchRunResult> runs;  // the last round of each method, same order
  PagedKvDecodeStep decode;
  double concurrency_ratio = 0;  // paged / slot: most requests held at once
  double speedup = 0;            // slot total / paged total
  double ttft_p50_cut = 0;       // paged without / with prefix caching: median TTFT
  nlohmann::json to_json() const;
};

std::vector<BatchRequest> make_paged_kv_requests(const Engine& engine, const PagedKvParams& p);
PagedKvResult run_paged_kv(const Engine& engine, const PagedKvParams& params,
                           const ExperimentControl& control = {});

}  // namespace servelab
