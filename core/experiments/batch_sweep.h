#pragma once
// Lesson 2: throughput and latency against batch size, greedy, fixed number of new tokens.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "experiments/roofline_point.h"
#include "model/engine.h"

namespace servelab {

struct BatchSweepParams {
  std::vector<std::string> prompts = {"The quick brown fox jumped over the", "The rain in Spain falls",
                                      "What comes up must"};
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128};
  int64_t new_tokens = 10;
  int64_t repeats = 3;  // median over repeats per batch size
  bool warmup = true;
};

struct BatchSweepPoint {
  int64_t batch_size = 0;
  double total_ms = 0;        // median wall time of the whole batch generation
  double step_ms = 0;         // total_ms / new_tokens: the course's "latency"
  double decode_step_ms = 0;  // median decode step (prefill excluded)
  double tokens_per_ms = 0;   // batch * new_tokens / total_ms: the course's throughput
  double tokens_per_s = 0;
  // The batch's prefill and its decode steps on the roofline (costs from the model's shapes at the
  // left-padded prompt length and each step's position, over the measured times of every repeat).
  RooflinePoint prefill, decode;
};

struct BatchSweepResult {
  std::vector<BatchSweepPoint> points;
  int64_t new_tokens = 0;
  nlohmann::json to_json() const;
};

BatchSweepResult run_batch_sweep(const Engine& engine, const BatchSweepParams& params,
                                 const ExperimentControl& control = {});

// Median of a non-empty vector (copied, not reordered in place).
double median(std::vector<double> values);

}  // namespace servelab
