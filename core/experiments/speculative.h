#pragma once
// Speculative decoding, measured: the same requests decoded plainly and with each drafter at each
// k, rounds interleaved in one process, on an input-grounded workload (the answer copies its
// input: prompt lookup's best case) and an open-ended one (little to copy: its worst). Tokens/s,
// the speed-up over plain decoding measured round by round, the acceptance, the draft/verify time
// split, and whether greedy tokens stayed identical.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "experiments/roofline_point.h"
#include "generate/continuous_batching.h"

namespace servelab {

class Engine;

struct SpeculativeBenchParams {
  std::string workload = "grounded";  // "grounded" or "open"
  std::vector<SpeculativeMethod> methods = {SpeculativeMethod::Ngram};
  std::vector<int64_t> ks = {2, 4, 8};
  int64_t new_tokens = 128;
  int64_t concurrency = 1;  // requests decoded at once (max_num_seqs)
  int64_t requests = 8;     // the workload's prompts in turn, `concurrency` of them at a time
  int64_t rounds = 3;
  bool warmup = true;
  KvStrategy kv = KvStrategy::Paged;
  int64_t prompt_lookup_max = 4;
  // User turns decoded instead of the workload's (one request each; concurrency is then their count).
  std::vector<std::string> texts;
  bool chat = true;  // texts as user turns in the model's chat template (else as they are)
};

// One configuration: a drafter at a k (method None: plain decoding), medians over rounds.
struct SpeculativeBenchRun {
  SpeculativeMethod method = SpeculativeMethod::None;
  int64_t k = 0;
  double tokens_per_s = 0;
  double speedup = 0;  // median over rounds of this round's tokens/s over the plain run's
  double total_ms = 0, draft_ms = 0;
  SpecDecodeStats stats;  // summed over rounds
  bool identical = true;  // every request's greedy tokens equal plain decoding's, every round
};

struct SpeculativeBenchResult {
  SpeculativeBenchParams params;
  std::string pairing;  // what drafts for what (draft model runs)
  std::vector<std::string> prompts;
  std::vector<SpeculativeBenchRun> runs;  // plain first
  nlohmann::json to_json() const;
};

// The counters under vLLM's names (num_drafts, num_draft_tokens, num_accepted_tokens,
// accepted_per_position, acceptance_rate, mean_accepted_length) and draft_ms.
nlohmann::json spec_decode_stats_json(const SpecDecodeStats& stats);

// The workload's prompts (chat-templated user turns), `count` of them.
std::vector<std::string> speculative_workload(const std::string& workload, int64_t count);

// target: the model that verifies (the engine's, or its dense copy for a draft pairing); draft:
// the draft model for DraftModel runs (may be null when none is asked for).
SpeculativeBenchResult run_speculative_bench(const Engine& engine, const Model& target, const Model* draft,
                                             const std::string& pairing, const SpeculativeBenchParams& params,
                                             const ExperimentControl& control = {});

// The Speculative decoding tab's sweep: run_speculative_bench for one drafter, its model pair
// resolved as `--draft-model int4` resolves it (Engine::int4_draft_pair).
SpeculativeBenchResult run_speculative_sweep(const Engine& engine, SpeculativeMethod method,
                                             const SpeculativeBenchParams& params,
                                             const ExperimentControl& control = {});

// One prompt decoded with speculation, live through control.batch, and plainly for comparison
// (the same target, no events), after a short warm-up of both; `rounds` times each, interleaved,
// the run of median tokens/s kept (greedy runs give the same tokens every round: only the live
// first speculative run reports events).
struct SpeculativeDemoParams {
  std::string text;  // the user's text
  bool chat = true;  // as one user turn in the model's chat template
  SpeculativeMethod method = SpeculativeMethod::Ngram;
  int64_t k = 4;
  int64_t new_tokens = 96;
  int64_t prompt_lookup_max = 4;
  bool stop_at_eos = true;
  int64_t rounds = 3;
};

struct SpeculativeDemoResult {
  SpeculativeDemoParams params;
  std::string pairing;  // what drafts for what
  std::vector<int32_t> prompt_ids;
  BatchRunResult speculative, plain;  // each the round of median tokens/s
  bool identical = true;              // every speculative round's greedy tokens equal plain decoding's
  // Decode tokens/s after the first token (prefill excluded) of the kept runs.
  double speculative_tokens_per_s = 0, plain_tokens_per_s = 0;
  // The kept runs' steps on the roofline: the plain run's prefill and decode, the speculative run's
  // verify steps (experiments/roofline_point.h).
  std::vector<RooflinePoint> roofline;
  nlohmann::json to_json() const;
};

// Decode tokens per second of one request: tokens after its first over the time they took.
double decode_tokens_per_s(const RequestResult& request);

SpeculativeDemoResult run_speculative_demo(const Engine& engine, const SpeculativeDemoParams& params,
                                           const ExperimentControl& control = {});

}  // namespace servelab
