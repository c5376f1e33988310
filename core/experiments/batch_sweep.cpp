#include "experiments/batch_sweep.h"

#include <algorithm>

#include "generate/generator.h"
#include "model/engine.h"
#include "model/model.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

double median(std::vector<double> v) {
  if (v.empty()) throw InputError("median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json BatchSweepResult::to_json() const {
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& p : points)
    pts.push_back({{"batch_size", p.batch_size},
                   {"total_ms", p.total_ms},
                   {"step_ms", p.step_ms},
                   {"decode_step_ms", p.decode_step_ms},
                   {"tokens_per_ms", p.tokens_per_ms},
                   {"tokens_per_s", p.tokens_per_s},
                   {"roofline", roofline_json({p.prefill, p.decode})}});
  return {{"experiment", "batch-sweep"},
          {"new_tokens", new_tokens},
          {"points", pts},
          {"statistic", "median over repeats"}};
}

BatchSweepResult run_batch_sweep(const Engine& engine, const BatchSweepParams& p,
                                 const ExperimentControl& control) {
  if (p.prompts.empty()) throw InputError("batch sweep needs at least one prompt");
  if (p.batch_sizes.empty()) throw InputError("batch sweep needs at least one batch size");
  limits::check_range("repeats", p.repeats, 1, limits::kMaxRepeats);
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
  for (int64_t b : p.batch_sizes) limits::check_range("batch size", b, 1, limits::kMaxBatch);
  std::vector<std::vector<int32_t>> encoded;
  for (const auto& s : p.prompts) encoded.push_back(encode_prompt(engine.tokenizer(), s));
  GenerateOptions o;
  o.max_new_tokens = p.new_tokens;
  o.stop_at_eos = false;
  o.report_top = 0;
  o.cancel = control.cancel;
  BatchSweepResult result;
  result.new_tokens = p.new_tokens;
  const StepCostModel cost = engine.model().cost_model();
  const std::string quant = roofline_quant(engine);
  for (size_t bi = 0; bi < p.batch_sizes.size(); ++bi) {
    const int64_t bs = p.batch_sizes[bi];
    std::vector<std::vector<int32_t>> batch;
    for (int64_t i = 0; i < bs; ++i) batch.push_back(encoded[static_cast<size_t>(i) % encoded.size()]);
    check_generation_fits(engine.model(), batch, o);
    if (p.warmup) {
      GenerateOptions w = o;
      w.max_new_tokens = std::min<int64_t>(2, p.new_tokens);
      generate(engine.model(), engine.tokenizer(), batch, w);
    }
    std::vector<double> totals, decode_steps;
    // Rows are left-padded to the longest prompt: every row computes and reads that many positions.
    int64_t padded = 0;
    for (const auto& ids : batch) padded = std::max<int64_t>(padded, static_cast<int64_t>(ids.size()));
    const auto rows = [bs](CostRow r) { return std::vector<CostRow>(static_cast<size_t>(bs), r); };
    StepCost prefill_cost, decode_cost;
    double prefill_ms = 0, decode_ms = 0;
    int64_t decode_count = 0;
    for (int64_t rep = 0; rep < p.repeats; ++rep) {
      GenerateResult g = generate(engine.model(), engine.tokenizer(), batch, o);
      totals.push_back(g.total_ms);
      for (size_t i = 1; i < g.step_ms.size(); ++i) {
        decode_steps.push_back(g.step_ms[i]);
        decode_ms += g.step_ms[i];
        decode_cost += cost.forward(rows({padded + static_cast<int64_t>(i) - 1, 1, 1}));
        ++decode_count;
      }
      if (!g.step_ms.empty()) {
        prefill_ms += g.step_ms.front();
        prefill_cost += cost.forward(rows({0, padded, 1}));
      }
    }
    BatchSweepPoint pt;
    pt.batch_size = bs;
    pt.total_ms = median(totals);
    pt.step_ms = pt.total_ms / static_cast<double>(p.new_tokens);
    pt.decode_step_ms = decode_steps.empty() ? pt.step_ms : median(decode_steps);
    pt.tokens_per_ms = static_cast<double>(bs * p.new_tokens) / pt.total_ms;
    pt.tokens_per_s = pt.tokens_per_ms * 1000.0;
    pt.prefill = roofline_point("prefill", "prefill batch " + std::to_string(bs), quant, bs, bs * padded,
                                prefill_cost, prefill_ms, p.repeats);
    pt.decode = roofline_point("decode", "decode batch " + std::to_string(bs), quant, bs, bs, decode_cost,
                               decode_ms, decode_count);
    result.points.push_back(pt);
    if (control.sink) {
      control.sink->on_point("throughput", static_cast<double>(bs), pt.tokens_per_ms);
      control.sink->on_point("latency", static_cast<double>(bs), pt.step_ms);
      control.sink->on_progress(static_cast<double>(bi + 1) / static_cast<double>(p.batch_sizes.size()),
                                "batch size " + std::to_string(bs));
    }
  }
  return result;
}

}  // namespace servelab
