#pragma once
// What the CUDA graphs of a run did (model/decode_graphs.h), as plain data for results and JSON.
// Torch-free.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace servelab {

struct DecodeGraphStats {
  int64_t captured = 0;      // graphs captured
  double capture_ms = 0;     // their warm-up runs and captures
  int64_t memory_bytes = 0;  // device memory the captures added to libtorch's caching allocator
  int64_t replays = 0;       // steps run by replaying a graph
  int64_t eager_steps = 0;   // decode steps run eagerly (more rows than the largest bucket, a failure)
  std::string fallback;      // why capture failed, when it did (every later step is eager)
  // Why graphs did not run at all ("": they did, or the run had no decode step to give them).
  std::string unavailable;

  // Another run's counts added to these (the reasons kept from the first that has one).
  void add(const DecodeGraphStats& o) {
    captured += o.captured;
    capture_ms += o.capture_ms;
    memory_bytes += o.memory_bytes;
    replays += o.replays;
    eager_steps += o.eager_steps;
    if (fallback.empty()) fallback = o.fallback;
    if (unavailable.empty()) unavailable = o.unavailable;
  }
  nlohmann::json to_json() const {
    nlohmann::json j = {{"replays", replays},
                        {"eager_steps", eager_steps},
                        {"captured", captured},
                        {"capture_ms", capture_ms},
                        {"memory_bytes", memory_bytes}};
    if (!fallback.empty()) j["fallback"] = fallback;
    if (!unavailable.empty()) j["unavailable"] = unavailable;
    return j;
  }
};

}  // namespace servelab
