#pragma once
// What a running server measures, and its Prometheus text form (GET /metrics). The engine thread
// records; connection threads and the app read copies. Names follow vLLM's where vLLM has the
// metric (vllm:num_requests_running, vllm:time_to_first_token_seconds, ...), so dashboards and
// scrapers written for vLLM read ours; what vLLM lacks is servelab:... Torch-free.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "generate/speculative_config.h"
#include "lora/lora_spec.h"

namespace servelab {

// A Prometheus histogram: observations in seconds, counted per bucket.
struct LatencyHistogram {
  std::vector<double> bounds;   // bucket upper bounds, increasing (the +Inf bucket is implied)
  std::vector<int64_t> counts;  // per bucket, not cumulative; bounds.size() + 1 entries
  double sum = 0;
  int64_t count = 0;

  explicit LatencyHistogram(std::vector<double> upper_bounds = {});
  void observe(double seconds);
  // The q-quantile (0..1) as the upper bound of the bucket that holds it (what Prometheus'
  // histogram_quantile interpolates between); 0 when empty, the last bound for the +Inf bucket.
  double quantile_bound(double q) const;
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
};

// The engine thread's phases: "idle" (waiting for work), "schedule" (taking submissions,
// cancellations, admission, publishing counters), "prefill" and "decode" (the forwards, with the KV
// bookkeeping of their pass), "kv" (paged KV: blocks for the next position, preemption), "sample"
// (masks, sampling, log-probabilities, detokenizing, handing tokens to streams), "finish" (retiring
// ended requests).
inline constexpr const char* kEnginePhases[] = {"idle", "schedule", "prefill", "decode",
                                                "kv",   "sample",   "finish"};
inline constexpr size_t kEnginePhaseCount = sizeof kEnginePhases / sizeof kEnginePhases[0];

struct ServeMetrics {
  int64_t running = 0, waiting = 0;
  int64_t max_batch = 0, max_queue = 0;
  int64_t prompt_tokens = 0;      // prefilled prompt tokens of admitted requests
  int64_t generation_tokens = 0;  // tokens handed to streams
  // Ended requests by vLLM's finished_reason: "stop" (a stop token or string), "length", "abort"
  // (cancelled: a client left, or shutdown).
  std::map<std::string, int64_t> finished;
  int64_t failed = 0;              // ended by an error (adapter load, engine failure)
  int64_t rejected = 0;            // refused at submit because the queue was full
  int64_t steps = 0;               // engine steps run
  int64_t batch_rows = 0;          // running requests summed over steps (mean occupancy = rows / steps)
  LatencyHistogram ttft;           // submit -> first token
  LatencyHistogram inter_token;    // between a request's consecutive tokens
  LatencyHistogram e2e;            // submit -> last token
  LatencyHistogram queue_time;     // submit -> admitted
  int64_t kv_bytes = 0;            // KV memory held (slot KV: allocated up front)
  int64_t kv_positions_used = 0;   // positions holding a running request's token
  int64_t kv_positions_total = 0;  // max batch x positions per request (paged: the pool's)
  bool kv_paged = false;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;  // paged: the block pool
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up in the prefix cache (recomputes included)
  int64_t prefix_cache_hits = 0;     // of those, found cached
  int64_t preemptions = 0;           // running requests evicted for blocks, to be recomputed
  AdapterCacheStats adapters;
  // Speculative decoding: vllm:spec_decode_* (all zero when it is off).
  bool speculative = false;
  SpecDecodeStats spec_decode;
  // Where the engine thread's time went, seconds summed over steps: what a step costs beyond the
  // model's forward (kEnginePhases names them).
  std::vector<double> engine_phase_seconds;

  ServeMetrics();
};

// Prometheus text exposition format 0.0.4; every series labelled model_name="...".
std::string prometheus_text(const ServeMetrics& metrics, const std::string& model_name);

}  // namespace servelab
