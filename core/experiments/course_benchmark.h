#pragma once
// The GPT-2 batch-inference benchmark of the course (docs/course.md): N queries of M greedy tokens,
// one at a time with the KV cache versus continuous batching; the course's table, row for row.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "model/engine.h"

namespace servelab {

struct CourseBenchmarkParams {
  std::vector<std::string> prompts = {"The quick brown fox jumped over the", "The rain in Spain falls",
                                      "What comes up must"};  // cycled over the queries
  int64_t queries = 100;
  int64_t new_tokens = 64;
  int64_t max_batch = 32;
  bool baseline = true;  // false: the batched run alone (for side-by-side runs against other engines)
  bool warmup = true;
};

struct CourseBenchmarkRow {
  std::string method;
  int64_t queries = 0;
  double time_s = 0;
  double throughput_vs_baseline = 0;
  int64_t max_batch = 0;
  double avg_batch = 0;
  int64_t tokens = 0;
  int64_t inference_calls = 0;
};

struct CourseBenchmarkResult {
  std::vector<CourseBenchmarkRow> rows;              // baseline, batched (batched alone without the baseline)
  bool same_tokens = true;                           // the batched run's tokens equal the baseline's
  std::vector<std::vector<int32_t>> batched_tokens;  // per query, from the batched run
  nlohmann::json to_json() const;
};

CourseBenchmarkResult run_course_benchmark(const Engine& engine, const CourseBenchmarkParams& params,
                                           const ExperimentControl& control = {});

}  // namespace servelab
