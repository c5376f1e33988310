// Steps as roofline points. See roofline_point.h.
#include "experiments/roofline_point.h"

#include <map>
#include <sstream>
#include <utility>

#include "generate/continuous_batching.h"
#include "model/engine.h"
#include "model/model.h"

namespace servelab {

nlohmann::json RooflinePoint::to_json() const {
  return {{"kind", kind},
          {"label", label},
          {"quant", quant},
          {"rows", rows},
          {"positions", positions},
          {"flops", flops},
          {"bytes", bytes},
          {"ms", ms},
          {"intensity", intensity()},
          {"flop_s", flop_s()}};
}

RooflinePoint roofline_point(std::string kind, std::string label, std::string quant, int64_t rows,
                             int64_t positions, const StepCost& summed, double summed_ms, int64_t steps) {
  const double n = steps > 0 ? static_cast<double>(steps) : 1.0;
  return {std::move(kind), std::move(label), std::move(quant),   rows,
          positions,       summed.flops / n, summed.bytes() / n, summed_ms / n};
}

std::string roofline_quant(const Engine& engine) {
  // A GGUF file's quantized blocks run as stored are "stored" (quantization() says none).
  return engine.quantization().is_quantized() || engine.model().cost_model().stored_bytes_per_weight() <= 0
             ? engine.quantization().mode_name()
             : "stored";
}

std::vector<RooflinePoint> roofline_points(const std::vector<BatchStep>& steps, const std::string& quant) {
  struct Kind {
    std::string kind, label;
    int64_t rows = 0;
    int64_t positions = 0, steps = 0;
    StepCost cost;
    double ms = 0;
  };
  std::vector<Kind> kinds;
  std::map<std::string, size_t> index;
  for (const BatchStep& s : steps) {
    if (s.ms <= 0 || s.cost.flops <= 0) continue;
    const bool prefilling = s.prefill_tokens > 0;
    // A step that admits requests feeds their prompts' last tokens as decode rows: it is a prefill
    // unless requests that were running already decode beside it.
    const bool newcomers_only = s.running <= static_cast<int64_t>(s.admitted.size());
    const bool decoding = s.decode_tokens > 0 && !(prefilling && newcomers_only);
    std::string kind, label;
    int64_t rows = 0;
    if (decoding && prefilling) {
      kind = "mixed";
      label = "prompt chunks beside decode rows";
    } else if (prefilling) {
      kind = "prefill";
      label = "prefill";
    } else if (!s.speculation.empty()) {
      kind = "verify";
      rows = s.decode_tokens;
      label = "verify batch " + std::to_string(rows);
    } else {
      kind = "decode";
      rows = s.decode_tokens;
      label = "decode batch " + std::to_string(rows);
    }
    auto [at, added] = index.emplace(label, kinds.size());
    if (added) {
      Kind k;
      k.kind = kind;
      k.label = label;
      k.rows = rows;
      kinds.push_back(std::move(k));
    }
    Kind& k = kinds[at->second];
    int64_t positions = s.prefill_tokens - s.prefix_hit_tokens + s.decode_tokens;
    for (const SpecRow& row : s.speculation) positions += static_cast<int64_t>(row.proposed.size());
    k.positions += positions;
    k.steps += 1;
    k.cost += s.cost;
    k.ms += s.ms;
  }
  std::vector<RooflinePoint> out;
  for (const Kind& k : kinds) {
    // Positions per step on average, and for the prefill kind the prompt positions it computed.
    const int64_t positions = k.steps > 0 ? (k.positions + k.steps / 2) / k.steps : 0;
    std::ostringstream label;
    label << k.label;
    if (k.kind == "verify") label << ", " << positions << " positions a step";
    if (k.kind == "prefill") label << " " << positions << " tokens";
    out.push_back(roofline_point(k.kind, label.str(), quant, k.rows, positions, k.cost, k.ms, k.steps));
  }
  return out;
}

nlohmann::json roofline_json(const std::vector<RooflinePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const RooflinePoint& p : points) out.push_back(p.to_json());
  return out;
}

}  // namespace servelab
