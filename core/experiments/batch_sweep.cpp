#include "experiments/batch_sweep.h"

#include <algorithm>

#include "generate/generator.h"
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
                   {"tokens_per_s", p.tokens_per_s}});
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
    for (int64_t rep = 0; rep < p.repeats; ++rep) {
      GenerateResult g = generate(engine.model(), engine.tokenizer(), batch, o);
      totals.push_back(g.total_ms);
      for (size_t i = 1; i < g.step_ms.size(); ++i) decode_steps.push_back(g.step_ms[i]);
    }
    BatchSweepPoint pt;
    pt.batch_size = bs;
    pt.total_ms = median(totals);
    pt.step_ms = pt.total_ms / static_cast<double>(p.new_tokens);
    pt.decode_step_ms = decode_steps.empty() ? pt.step_ms : median(decode_steps);
    pt.tokens_per_ms = static_cast<double>(bs * p.new_tokens) / pt.total_ms;
    pt.tokens_per_s = pt.tokens_per_ms * 1000.0;
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
