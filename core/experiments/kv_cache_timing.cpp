#include "experiments/kv_cache_timing.h"

#include <numeric>

#include "experiments/batch_sweep.h"
#include "generate/generator.h"
#include "util/errors.h"

namespace servelab {

nlohmann::json KvCacheTimingResult::to_json() const {
  return {{"experiment", "kv-cache"},
          {"prompt_ids", prompt_ids},
          {"tokens", tokens},
          {"text", text},
          {"no_cache_ms", no_cache_ms},
          {"cache_ms", cache_ms},
          {"no_cache_total_ms", no_cache_total_ms},
          {"cache_total_ms", cache_total_ms},
          {"speedup", speedup},
          {"decode_speedup", decode_speedup},
          {"kv_cache_bytes", kv_cache_bytes},
          {"repeats", repeats},
          {"statistic", "median per token over repeats"}};
}

KvCacheTimingResult run_kv_cache_timing(const Engine& engine, const KvCacheTimingParams& p,
                                        const ExperimentControl& control) {
  if (p.repeats < 1) throw InputError("repeats must be at least 1");
  KvCacheTimingResult r;
  r.prompt_ids = engine.tokenizer().encode(p.prompt);
  GenerateOptions o;
  o.max_new_tokens = p.new_tokens;
  o.stop_at_eos = false;  // both runs must produce exactly new_tokens tokens
  o.report_top = 0;
  o.cancel = control.cancel;
  const std::vector<std::vector<int32_t>> prompts{r.prompt_ids};
  auto run = [&](bool cache) {
    o.use_kv_cache = cache;
    return generate(engine.model(), engine.tokenizer(), prompts, o);
  };
  if (p.warmup) {
    GenerateOptions w = o;
    w.max_new_tokens = std::min<int64_t>(2, p.new_tokens);
    generate(engine.model(), engine.tokenizer(), prompts, w);
  }
  std::vector<std::vector<double>> without(static_cast<size_t>(p.new_tokens)),
      with(static_cast<size_t>(p.new_tokens));
  for (int64_t rep = 0; rep < p.repeats; ++rep) {
    for (bool cache : {false, true}) {
      GenerateResult g = run(cache);
      const auto& seq = g.sequences.front();
      if (rep == 0 && !cache) {
        r.tokens = seq.generated_ids;
        r.text = seq.text;
      } else if (seq.generated_ids != r.tokens) {
        throw InputError("KV-cache and cache-free generation produced different tokens");
      }
      if (cache) r.kv_cache_bytes = g.kv_cache_bytes;
      auto& dst = cache ? with : without;
      for (size_t i = 0; i < g.step_ms.size(); ++i) {
        dst[i].push_back(g.step_ms[i]);
        if (control.sink && rep == p.repeats - 1)
          control.sink->on_point(cache ? "with KV cache" : "without KV cache", static_cast<double>(i),
                                 g.step_ms[i]);
      }
      if (control.sink)
        control.sink->on_progress(
            static_cast<double>(2 * rep + (cache ? 2 : 1)) / static_cast<double>(2 * p.repeats),
            cache ? "with KV cache" : "without KV cache");
    }
  }
  for (size_t i = 0; i < without.size(); ++i) {
    r.no_cache_ms.push_back(median(without[i]));
    r.cache_ms.push_back(median(with[i]));
  }
  r.no_cache_total_ms = std::accumulate(r.no_cache_ms.begin(), r.no_cache_ms.end(), 0.0);
  r.cache_total_ms = std::accumulate(r.cache_ms.begin(), r.cache_ms.end(), 0.0);
  r.speedup = r.no_cache_total_ms / r.cache_total_ms;
  const double nc_decode = r.no_cache_total_ms - r.no_cache_ms.front();
  const double c_decode = r.cache_total_ms - r.cache_ms.front();
  r.decode_speedup = c_decode > 0 ? nc_decode / c_decode : 0;
  r.repeats = p.repeats;
  return r;
}

}  // namespace servelab
