#include "experiments/kv_cache_timing.h"

#include <algorithm>
#include <numeric>

#include "experiments/batch_sweep.h"
#include "generate/generator.h"
#include "model/decode_graphs.h"
#include "model/model.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

nlohmann::json KvCacheTimingResult::to_json() const {
  const auto field = [](const std::vector<StepCost>& costs, double (*of)(const StepCost&)) {
    std::vector<double> v;
    for (const StepCost& c : costs) v.push_back(of(c));
    return v;
  };
  const auto flops = [](const StepCost& c) { return c.flops; };
  const auto bytes = [](const StepCost& c) { return c.bytes(); };
  return {{"experiment", "kv-cache"},
          {"prompt_ids", prompt_ids},
          {"tokens", tokens},
          {"cache_tokens", cache_tokens},
          {"comparison", comparison},
          {"comparison_note", comparison == "exact"
                                  ? "both runs must produce the same greedy tokens (checked)"
                                  : "activations are quantized at run time (native int8: one scale per "
                                    "call, so a cache-free step scales the whole prefix's activations, a "
                                    "cached one only the new token's; jit-int8: per 32 columns of a row, "
                                    "where the two ways' different orders of summation can round a value "
                                    "the other way), so the tokens may part; each run is checked against "
                                    "its own first repeat and the agreement reported"},
          {"tokens_agree", tokens_agree},
          {"agreeing_prefix", agreeing_prefix},
          {"text", text},
          {"no_cache_ms", no_cache_ms},
          {"cache_ms", cache_ms},
          {"no_cache_total_ms", no_cache_total_ms},
          {"cache_total_ms", cache_total_ms},
          {"speedup", speedup},
          {"decode_speedup", decode_speedup},
          {"kv_cache_bytes", kv_cache_bytes},
          {"kv_bytes_per_token", kv_bytes_per_token},
          {"repeats", repeats},
          {"cuda_graphs", cuda_graphs.to_json()},
          {"cuda_graphs_warmup", cuda_graphs_warmup.to_json()},
          {"no_cache_flops", field(no_cache_cost, flops)},
          {"no_cache_bytes", field(no_cache_cost, bytes)},
          {"cache_flops", field(cache_cost, flops)},
          {"cache_bytes", field(cache_cost, bytes)},
          {"roofline", roofline_json(roofline)},
          {"statistic", "median per token over repeats"}};
}

KvCacheTimingResult run_kv_cache_timing(const Engine& engine, const KvCacheTimingParams& p,
                                        const ExperimentControl& control) {
  limits::check_range("repeats", p.repeats, 1, limits::kMaxRepeats);
  // The prompt is built to this length before generation checks it against the context.
  limits::check_range("prompt length (tokens)", p.prompt_tokens, 0, limits::kMaxTokens);
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
  KvCacheTimingResult r;
  r.prompt_ids = encode_prompt(engine.tokenizer(), p.prompt);
  if (p.prompt_tokens > 0) {
    if (r.prompt_ids.empty())
      throw InputError("the prompt is empty: nothing to repeat to " + std::to_string(p.prompt_tokens) +
                       " tokens");
    std::vector<int32_t> ids;
    while (static_cast<int64_t>(ids.size()) < p.prompt_tokens)
      ids.push_back(r.prompt_ids[ids.size() % r.prompt_ids.size()]);
    r.prompt_ids = std::move(ids);
  }
  r.kv_bytes_per_token = engine.shape().kv_bytes_per_token(engine.dtype_bytes());
  GenerateOptions o;
  o.max_new_tokens = p.new_tokens;
  o.stop_at_eos = false;  // both runs must produce exactly new_tokens tokens
  o.report_top = 0;
  o.cancel = control.cancel;
  const std::vector<std::vector<int32_t>> prompts{r.prompt_ids};
  const auto series = [](bool cache) { return cache ? "with KV cache" : "without KV cache"; };
  // Streams each step of a run to the experiment sink as it is measured, so charts draw live.
  class LiveSteps : public GenerationSink {
   public:
    LiveSteps(ExperimentSink* sink, std::string name, double done, double share, int64_t steps)
        : sink_(sink), name_(std::move(name)), done_(done), share_(share), steps_(steps) {}
    void on_step(const StepEvent& e) override {
      sink_->on_point(name_, static_cast<double>(e.step), e.ms);
      sink_->on_progress(done_ + share_ * static_cast<double>(e.step + 1) / static_cast<double>(steps_),
                         name_);
    }

   private:
    ExperimentSink* sink_;
    std::string name_;
    double done_, share_;
    int64_t steps_;
  };
  const double runs = static_cast<double>(2 * p.repeats);
  int64_t run_index = 0;
  auto run = [&](bool cache) {
    o.use_kv_cache = cache;
    if (!control.sink) return generate(engine.model(), engine.tokenizer(), prompts, o);
    control.sink->on_reset(series(cache));
    LiveSteps live(control.sink, series(cache), static_cast<double>(run_index) / runs, 1.0 / runs,
                   p.new_tokens);
    ++run_index;
    return generate(engine.model(), engine.tokenizer(), prompts, o, &live);
  };
  if (p.warmup) {
    GenerateOptions w = o;
    // On a GPU the cached runs' CUDA graphs are captured here, outside the timed runs: a warm-up as
    // long as they are has their cache's shape and reaches every key width they do.
    const bool graphs = cuda_graphs_usable(engine.model());
    w.max_new_tokens = graphs ? p.new_tokens : std::min<int64_t>(2, p.new_tokens);
    w.use_kv_cache = true;
    r.cuda_graphs_warmup = generate(engine.model(), engine.tokenizer(), prompts, w).cuda_graphs;
  }
  std::vector<std::vector<double>> without(static_cast<size_t>(p.new_tokens)),
      with(static_cast<size_t>(p.new_tokens));
  const bool exact = !engine.activations_quantized_per_call();
  r.comparison = exact ? "exact" : "agreement";
  for (int64_t rep = 0; rep < p.repeats; ++rep) {
    for (bool cache : {false, true}) {
      GenerateResult g = run(cache);
      const auto& seq = g.sequences.front();
      std::vector<int32_t>& first = cache ? r.cache_tokens : r.tokens;
      if (rep == 0) {
        first = seq.generated_ids;
        if (!cache) r.text = seq.text;
      } else if (seq.generated_ids != first) {
        throw InputError(std::string(cache ? "KV-cache" : "cache-free") +
                         " generation produced different tokens from one repeat to the next");
      }
      if (rep == 0 && cache && exact && r.cache_tokens != r.tokens)
        throw InputError("KV-cache and cache-free generation produced different tokens");
      if (cache) {
        r.kv_cache_bytes = g.kv_cache_bytes;
        r.cuda_graphs.add(g.cuda_graphs);
      }
      auto& dst = cache ? with : without;
      for (size_t i = 0; i < g.step_ms.size(); ++i) dst[i].push_back(g.step_ms[i]);
    }
  }
  for (size_t i = 0; i < without.size(); ++i) {
    r.no_cache_ms.push_back(median(without[i]));
    r.cache_ms.push_back(median(with[i]));
  }
  if (control.sink) {
    // The live runs give way to the medians the result reports.
    for (bool cache : {false, true}) {
      control.sink->on_reset(series(cache));
      const auto& v = cache ? r.cache_ms : r.no_cache_ms;
      for (size_t i = 0; i < v.size(); ++i)
        control.sink->on_point(series(cache), static_cast<double>(i), v[i]);
    }
    control.sink->on_progress(1.0, "medians");
  }
  r.tokens_agree = r.cache_tokens == r.tokens;
  while (r.agreeing_prefix < static_cast<int64_t>(std::min(r.tokens.size(), r.cache_tokens.size())) &&
         r.tokens[static_cast<size_t>(r.agreeing_prefix)] ==
             r.cache_tokens[static_cast<size_t>(r.agreeing_prefix)])
    ++r.agreeing_prefix;
  r.no_cache_total_ms = std::accumulate(r.no_cache_ms.begin(), r.no_cache_ms.end(), 0.0);
  r.cache_total_ms = std::accumulate(r.cache_ms.begin(), r.cache_ms.end(), 0.0);
  r.speedup = r.no_cache_total_ms / r.cache_total_ms;
  const double nc_decode = r.no_cache_total_ms - r.no_cache_ms.front();
  const double c_decode = r.cache_total_ms - r.cache_ms.front();
  r.decode_speedup = c_decode > 0 ? nc_decode / c_decode : 0;
  r.repeats = p.repeats;
  const StepCostModel cost = engine.model().cost_model();
  const auto prompt = static_cast<int64_t>(r.prompt_ids.size());
  for (int64_t i = 0; i < p.new_tokens; ++i) {
    r.no_cache_cost.push_back(cost.forward({{0, prompt + i, 1}}));
    r.cache_cost.push_back(cost.forward({i == 0 ? CostRow{0, prompt, 1} : CostRow{prompt + i - 1, 1, 1}}));
  }
  const std::string quant = roofline_quant(engine);
  r.roofline.push_back(roofline_point("prefill", "prefill " + std::to_string(prompt) + " tokens", quant, 1,
                                      prompt, r.cache_cost.front(), r.cache_ms.front(), 1));
  if (p.new_tokens > 1) {
    StepCost cached, recomputed;
    for (int64_t i = 1; i < p.new_tokens; ++i) {
      cached += r.cache_cost[static_cast<size_t>(i)];
      recomputed += r.no_cache_cost[static_cast<size_t>(i)];
    }
    const int64_t steps = p.new_tokens - 1;
    r.roofline.push_back(roofline_point("decode", "decode with the KV cache", quant, 1, 1, cached,
                                        r.cache_total_ms - r.cache_ms.front(), steps));
    r.roofline.push_back(
        roofline_point("recompute", "each token without the cache (the whole sequence again)", quant, 1,
                       prompt + steps / 2, recomputed, r.no_cache_total_ms - r.no_cache_ms.front(), steps));
  }
  return r;
}

}  // namespace servelab
