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
#include "generate/continuous_batching.h"

namespace servelab {

class Engine;

struct SpeculativeBenchParams {
  std::string workload = "grounded";  // "grounded" or "open"
  std::vector<SpeculativeMethod> methods = {SpeculativeMethod::Ngram};
  std::vector<int64_t> ks = {2, 4, 8};
  int64_t new_tokens = 128;
  int64_t concurrency = 1;  // requests decoded at once (max_num_seqs)
  int64_t rounds = 3;
  bool warmup = true;
  KvStrategy kv = KvStrategy::Paged;
  int64_t prompt_lookup_max = 4;
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

// The workload's prompts (chat-templated user turns), `count` of them.
std::vector<std::string> speculative_workload(const std::string& workload, int64_t count);

// target: the model that verifies (the engine's, or its dense copy for a draft pairing); draft:
// the draft model for DraftModel runs (may be null when none is asked for).
SpeculativeBenchResult run_speculative_bench(const Engine& engine, const Model& target, const Model* draft,
                                             const std::string& pairing, const SpeculativeBenchParams& params,
                                             const ExperimentControl& control = {});

}  // namespace servelab
