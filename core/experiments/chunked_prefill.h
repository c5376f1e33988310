#pragma once
// Chunked prefill, measured (vLLM's trade-off): streams are decoding when a long prompt arrives.
// Without a token budget its whole prefill runs in one step and every stream waits for it; with
// a budget of max_num_batched_tokens the prompt runs in chunks beside the streams' decodes, so
// their inter-token latency stays low while the long request's first token comes later. Both ways
// run in turn (interleaved rounds) on the same queue; medians reported.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "generate/continuous_batching.h"

namespace servelab {

class Engine;

struct ChunkedPrefillParams {
  int64_t streams = 4;          // requests decoding when the long prompt arrives
  int64_t stream_tokens = 128;  // new tokens of each stream
  int64_t stream_prompt_tokens = 16;
  int64_t long_prompt_tokens = 1500;
  int64_t long_new_tokens = 16;
  // The long prompt joins the queue at this scheduler step, once the streams have about this many
  // tokens (a step, not a time: both ways see it at the same point of the streams' progress
  // whatever the machine's speed).
  int64_t arrive_after_tokens = 16;
  int64_t budget = 128;  // max_num_batched_tokens of the chunked way
  KvStrategy kv = KvStrategy::Paged;
  int64_t rounds = 3;
  bool warmup = true;
};

// One way of running the scenario (one round, or the medians of several).
struct ChunkedPrefillRun {
  int64_t budget = 0;                                     // 0: unchunked
  double itl_p50_ms = 0, itl_p99_ms = 0, itl_max_ms = 0;  // the streams' gaps between tokens
  double long_ttft_ms = 0;                                // the long request: arrival -> first token
  double total_ms = 0;
  double tokens_per_s = 0;  // every request's generated tokens over the run
  int64_t steps = 0;
  int64_t chunks = 0;  // pieces the long prompt was computed in
};

struct ChunkedPrefillResult {
  ChunkedPrefillParams params;
  double arrival_ms = 0;                 // when the long prompt arrived (the chunked run's last round)
  ChunkedPrefillRun unchunked, chunked;  // medians over rounds
  std::vector<ChunkedPrefillRun> rounds_unchunked, rounds_chunked;
  // Last round of each: the runs themselves (per-token times for the ITL-over-time chart).
  BatchRunResult run_unchunked, run_chunked;
  double itl_max_cut = 0, itl_p99_cut = 0;  // unchunked / chunked
  double ttft_cost = 0;                     // chunked / unchunked long-request TTFT
  double throughput_ratio = 0;              // chunked / unchunked tokens/s
  bool same_tokens = true;                  // greedy tokens of every request equal both ways
  nlohmann::json to_json() const;
};

// The scenario's requests: `streams` short prompts at 0, then the long prompt joining at step
// arrive_after_tokens.
std::vector<BatchRequest> make_chunked_prefill_requests(const Engine& engine, const ChunkedPrefillParams& p);
// The inter-token gaps of requests [0, streams) (ms), the decoding streams.
std::vector<double> stream_gaps(const BatchRunResult& run, int64_t streams);

ChunkedPrefillResult run_chunked_prefill(const Engine& engine, const ChunkedPrefillParams& params,
                                         const ExperimentControl& control = {});

}  // namespace servelab
