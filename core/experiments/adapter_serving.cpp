#include "experiments/adapter_serving.h"

#include <algorithm>

#include "lora/lora_adapter.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

bool runs_base(const AdapterServingParams& p, int64_t request) {
  return p.base_every > 0 && (request + 1) % p.base_every == 0;
}

int64_t adapter_requests(const AdapterServingParams& p) {
  int64_t n = 0;
  for (int64_t i = 0; i < p.requests; ++i) n += runs_base(p, i) ? 0 : 1;
  return n;
}

}  // namespace

void check_adapter_serving_params(const Engine& engine, const AdapterServingParams& p) {
  limits::check_range("requests", p.requests, 1, limits::kMaxRequests);
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
  limits::check_range("max batch", p.max_batch, 1, limits::kMaxBatch);
  limits::check_range("cache capacity", p.cache_capacity, 0, limits::kMaxAdapters);
  if (p.base_every < 0)
    throw InputError("base-every must be 0 (none) or more, got " + std::to_string(p.base_every));
  limits::check_range("adapters", static_cast<int64_t>(p.adapters.size()), 0, limits::kMaxAdapters);
  if (p.adapters.empty()) {
    limits::check_range("random adapters", p.random_adapters, 1, limits::kMaxAdapters);
    limits::check_range("rank", p.random_rank, 1, limits::kMaxRank);
    // The adapters held at once: the cache's capacity, or all of them.
    const int64_t held =
        p.cache_capacity > 0 ? std::min(p.cache_capacity, p.random_adapters) : p.random_adapters;
    limits::check_fits_in_memory(std::to_string(held) + " adapters of rank " + std::to_string(p.random_rank),
                                 held * lora_adapter_bytes(engine.model(), p.random_rank));
  }
}

std::vector<AdapterSource> adapter_serving_adapters(const AdapterServingParams& p) {
  std::vector<AdapterSource> out = p.adapters;
  if (out.empty()) {
    for (int64_t i = 1; i <= p.random_adapters; ++i) {
      AdapterSource s;
      s.name = "rand-r" + std::to_string(p.random_rank) + "-" + std::to_string(i);
      s.rank = p.random_rank;
      s.alpha = 2.0 * static_cast<double>(p.random_rank);
      s.seed = static_cast<uint64_t>(i);
      out.push_back(s);
    }
  }
  // Adapters no request names would only be loaded for nothing.
  const auto named = static_cast<size_t>(std::max<int64_t>(0, adapter_requests(p)));
  if (out.size() > named) out.resize(named);
  return out;
}

std::vector<std::string> adapter_serving_assignment(const AdapterServingParams& p) {
  const std::vector<AdapterSource> adapters = adapter_serving_adapters(p);
  std::vector<std::string> out;
  size_t next = 0;
  for (int64_t i = 0; i < p.requests; ++i)
    out.push_back(runs_base(p, i) || adapters.empty() ? std::string()
                                                      : adapters[next++ % adapters.size()].name);
  return out;
}

nlohmann::json AdapterServingResult::to_json() const {
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestResult& q : run.requests)
    requests.push_back({{"id", q.id},
                        {"adapter", q.adapter},
                        {"generated_ids", q.generated_ids},
                        {"text", q.text},
                        {"latency_ms", q.latency_ms}});
  std::vector<int64_t> per_step;
  for (const BatchStep& s : run.steps) per_step.push_back(s.adapters_in_step);
  const AdapterCacheStats& c = run.adapter_cache;
  return {{"method", run.method},
          {"strategy", strategy},
          {"total_ms", run.total_ms},
          {"generated_tokens", run.generated_tokens},
          {"inference_calls", run.inference_calls},
          {"average_batch", run.average_batch},
          {"adapters_per_step", per_step},
          {"adapter_cache",
           {{"capacity", c.capacity},
            {"loads", c.loads},
            {"hits", c.hits},
            {"evictions", c.evictions},
            {"resident", c.resident},
            {"resident_bytes", c.resident_bytes}}},
          {"requests", requests}};
}

AdapterServingResult run_adapter_serving(const Engine& engine, const AdapterServingParams& p,
                                         const ExperimentControl& control) {
  if (p.requests < 1)
    throw InputError("the queue needs at least 1 request, got " + std::to_string(p.requests));
  check_adapter_serving_params(engine, p);
  const std::vector<int32_t> ids = encode_prompt(engine.tokenizer(), p.prompt);
  if (ids.empty()) throw InputError("the prompt is empty: type at least one character");
  AdapterServingResult result;
  result.strategy = multi_lora_strategy_name(p.strategy);
  result.adapters = adapter_serving_adapters(p);
  result.request_adapters = adapter_serving_assignment(p);
  std::vector<BatchRequest> requests;
  for (const std::string& adapter : result.request_adapters) {
    BatchRequest r;
    r.prompt_ids = ids;
    r.max_new_tokens = p.new_tokens;
    r.stop_at_eos = false;  // every request its full budget
    r.adapter = adapter;
    requests.push_back(std::move(r));
  }
  BatchOptions o;
  o.max_batch = p.max_batch;
  o.cancel = control.cancel;
  o.adapters = result.adapters;
  o.adapter_cache_capacity = p.cache_capacity;
  o.lora_strategy = p.strategy;
  result.run = run_continuous_batching(engine.model(), engine.tokenizer(), requests, o, control.batch);
  if (result.run.cancelled) throw CancelledError("serving with adapters was stopped");
  return result;
}

}  // namespace servelab
