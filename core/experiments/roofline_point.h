#pragma once
// A step on the roofline: what kind of forward pass it was, its FLOPs and bytes moved (from the
// model's shapes and the step's rows and positions, model/step_cost.h) and the time it took. Every
// experiment that times steps reports its own points this way, so that the Roofline chart can place
// any run's steps under this machine's roof.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/step_cost.h"

namespace servelab {

class Engine;
struct BatchStep;

struct RooflinePoint {
  std::string kind;   // "prefill", "decode", "verify", "mixed", "recompute"
  std::string label;  // "prefill 128 tokens", "decode batch 8"
  // The weights' quantization mode: "none" for the loaded dtype, "stored" for a GGUF file's
  // quantized blocks run as stored, else the mode ("int8-channel").
  std::string quant;
  int64_t rows = 0, positions = 0;  // sequences in the pass; new positions over them
  double flops = 0, bytes = 0, ms = 0;
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
  double flop_s() const { return ms > 0 ? flops / (ms * 1e-3) : 0; }
  nlohmann::json to_json() const;
};

// Steps of one kind as one point: their FLOPs and bytes summed against their summed time, so the
// point is the kind's average achieved rate; flops, bytes and ms are per step (sums over steps).
RooflinePoint roofline_point(std::string kind, std::string label, std::string quant, int64_t rows,
                             int64_t positions, const StepCost& summed, double summed_ms, int64_t steps);

// The label the weights of engine's model get on the roofline (see RooflinePoint::quant).
std::string roofline_quant(const Engine& engine);

// A continuous-batching run's steps, one point per kind of step in the order first seen: prefill
// only, decode at n rows, decode rows verifying speculative proposals at n rows, and prompt chunks
// computed beside decode rows. Steps without a cost or a time are left out. A draft model's own
// passes are not in a verify step's cost, but are in its time.
std::vector<RooflinePoint> roofline_points(const std::vector<BatchStep>& steps, const std::string& quant);

nlohmann::json roofline_json(const std::vector<RooflinePoint>& points);

}  // namespace servelab
