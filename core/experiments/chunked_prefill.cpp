#include "experiments/chunked_prefill.h"

#include <algorithm>

#include "experiments/sync_vs_continuous.h"
#include "model/engine.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

ChunkedPrefillRun measure(const BatchRunResult& run, const ChunkedPrefillParams& p, int64_t budget) {
  ChunkedPrefillRun r;
  r.budget = budget;
  std::vector<double> gaps = stream_gaps(run, p.streams);
  if (!gaps.empty()) {
    r.itl_p50_ms = percentile(gaps, 50);
    r.itl_p99_ms = percentile(gaps, 99);
    r.itl_max_ms = *std::max_element(gaps.begin(), gaps.end());
  }
  const RequestResult& longest = run.requests.back();
  r.long_ttft_ms = longest.ttft_ms;
  r.total_ms = run.total_ms;
  r.tokens_per_s = run.total_ms > 0 ? static_cast<double>(run.generated_tokens) / run.total_ms * 1000.0 : 0;
  r.steps = static_cast<int64_t>(run.steps.size());
  for (const BatchStep& s : run.steps)
    for (const PrefillChunk& c : s.chunks)
      if (c.request == longest.id) ++r.chunks;
  return r;
}

ChunkedPrefillRun medians(const std::vector<ChunkedPrefillRun>& rounds) {
  auto med = [&](double ChunkedPrefillRun::*f) {
    std::vector<double> v;
    for (const ChunkedPrefillRun& r : rounds) v.push_back(r.*f);
    return median_or_zero(v);
  };
  ChunkedPrefillRun m = rounds.back();
  m.itl_p50_ms = med(&ChunkedPrefillRun::itl_p50_ms);
  m.itl_p99_ms = med(&ChunkedPrefillRun::itl_p99_ms);
  m.itl_max_ms = med(&ChunkedPrefillRun::itl_max_ms);
  m.long_ttft_ms = med(&ChunkedPrefillRun::long_ttft_ms);
  m.total_ms = med(&ChunkedPrefillRun::total_ms);
  m.tokens_per_s = med(&ChunkedPrefillRun::tokens_per_s);
  return m;
}

nlohmann::json run_json(const ChunkedPrefillRun& r) {
  return {{"max_num_batched_tokens", r.budget}, {"itl_p50_ms", r.itl_p50_ms},
          {"itl_p99_ms", r.itl_p99_ms},         {"itl_max_ms", r.itl_max_ms},
          {"long_ttft_ms", r.long_ttft_ms},     {"total_ms", r.total_ms},
          {"tokens_per_s", r.tokens_per_s},     {"steps", r.steps},
          {"long_prompt_chunks", r.chunks}};
}

}  // namespace

std::vector<double> stream_gaps(const BatchRunResult& run, int64_t streams) {
  std::vector<double> gaps;
  for (const RequestResult& r : run.requests)
    if (r.id < streams)
      for (size_t i = 1; i < r.token_ms.size(); ++i) gaps.push_back(r.token_ms[i] - r.token_ms[i - 1]);
  return gaps;
}

std::vector<BatchRequest> make_chunked_prefill_requests(const Engine& engine, const ChunkedPrefillParams& p) {
  const int64_t context = engine.shape().context;
  limits::check_range("streams", p.streams, 1, limits::kMaxBatch - 1);
  limits::check_range("stream tokens", p.stream_tokens, 2, limits::kMaxTokens);
  limits::check_range("stream prompt tokens", p.stream_prompt_tokens, 1, context - p.stream_tokens);
  limits::check_range("long new tokens", p.long_new_tokens, 1, limits::kMaxTokens);
  limits::check_range("long prompt tokens", p.long_prompt_tokens, 1, context - p.long_new_tokens);
  std::vector<BatchRequest> out;
  for (int64_t i = 0; i < p.streams; ++i) {
    BatchRequest r;
    r.prompt_ids = tokens_of_length(
        engine.tokenizer(), "Stream " + std::to_string(i + 1) + ": tell me about the sea and the sky. ",
        p.stream_prompt_tokens);
    r.max_new_tokens = p.stream_tokens;
    r.stop_at_eos = false;
    out.push_back(std::move(r));
  }
  BatchRequest l;
  l.prompt_ids = tokens_of_length(engine.tokenizer(),
                                  "A long document arrives: the minutes of a meeting about serving language "
                                  "models, with every speaker's words, the figures they quoted and the "
                                  "decisions taken, to be summarised in one paragraph. ",
                                  p.long_prompt_tokens);
  l.max_new_tokens = p.long_new_tokens;
  l.stop_at_eos = false;
  l.arrival_step = p.arrive_after_tokens;
  out.push_back(std::move(l));
  return out;
}

ChunkedPrefillResult run_chunked_prefill(const Engine& engine, const ChunkedPrefillParams& p,
                                         const ExperimentControl& control) {
  limits::check_range("rounds", p.rounds, 1, 100);
  limits::check_range("arrive after tokens", p.arrive_after_tokens, 1, p.stream_tokens - 1);
  limits::check_range("max num batched tokens", p.budget, 1, engine.shape().context);
  if (p.kv == KvStrategy::NaiveMergeFilter)
    throw InputError("chunked prefill needs slot or paged KV, not the course's merge/filter");
  ChunkedPrefillResult result;
  result.params = p;
  BatchOptions o;
  o.kv = p.kv;
  o.max_batch = p.streams + 1;
  o.cancel = control.cancel;
  auto cancelled = [&] { return control.cancel && control.cancel->load(); };
  const std::vector<BatchRequest> requests = make_chunked_prefill_requests(engine, p);
  if (p.warmup) {
    std::vector<BatchRequest> w(requests.begin(), requests.begin() + 2);
    for (BatchRequest& r : w) r.max_new_tokens = 2;
    run_continuous_batching(engine.model(), engine.tokenizer(), w, o);
  }
  const double rounds = static_cast<double>(p.rounds);
  for (int64_t round = 0; round < p.rounds; ++round) {
    for (int way = 0; way < 2; ++way) {
      const int64_t budget = way == 0 ? 0 : p.budget;
      o.max_num_batched_tokens = budget;
      if (control.sink)
        control.sink->on_progress(
            (static_cast<double>(round) + way * 0.5) / rounds,
            budget ? "with a budget of " + std::to_string(budget) + " tokens" : "without a token budget");
      BatchRunResult run =
          run_continuous_batching(engine.model(), engine.tokenizer(), requests, o, control.batch);
      if (run.cancelled || cancelled()) throw CancelledError("chunked prefill cancelled");
      run.method = budget ? "chunked prefill (budget " + std::to_string(budget) + ")" : "whole prompts";
      (way == 0 ? result.rounds_unchunked : result.rounds_chunked).push_back(measure(run, p, budget));
      (way == 0 ? result.run_unchunked : result.run_chunked) = std::move(run);
    }
    for (size_t r = 0; r < requests.size(); ++r)
      if (result.run_unchunked.requests[r].generated_ids != result.run_chunked.requests[r].generated_ids)
        result.same_tokens = false;
  }
  result.arrival_ms = result.run_chunked.requests.back().arrival_ms;
  result.unchunked = medians(result.rounds_unchunked);
  result.chunked = medians(result.rounds_chunked);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  result.itl_max_cut = ratio(result.unchunked.itl_max_ms, result.chunked.itl_max_ms);
  result.itl_p99_cut = ratio(result.unchunked.itl_p99_ms, result.chunked.itl_p99_ms);
  result.ttft_cost = ratio(result.chunked.long_ttft_ms, result.unchunked.long_ttft_ms);
  result.throughput_ratio = ratio(result.chunked.tokens_per_s, result.unchunked.tokens_per_s);
  if (control.sink) control.sink->on_progress(1.0, "done");
  return result;
}

nlohmann::json ChunkedPrefillResult::to_json() const {
  nlohmann::json rounds_u = nlohmann::json::array(), rounds_c = nlohmann::json::array();
  for (const ChunkedPrefillRun& r : rounds_unchunked) rounds_u.push_back(run_json(r));
  for (const ChunkedPrefillRun& r : rounds_chunked) rounds_c.push_back(run_json(r));
  return {{"params",
           {{"streams", params.streams},
            {"stream_tokens", params.stream_tokens},
            {"stream_prompt_tokens", params.stream_prompt_tokens},
            {"long_prompt_tokens", params.long_prompt_tokens},
            {"long_new_tokens", params.long_new_tokens},
            {"arrive_after_tokens", params.arrive_after_tokens},
            {"max_num_batched_tokens", params.budget},
            {"kv", kv_strategy_name(params.kv)},
            {"rounds", params.rounds}}},
          {"arrival_ms", arrival_ms},
          {"unchunked", run_json(unchunked)},
          {"chunked", run_json(chunked)},
          {"rounds_unchunked", rounds_u},
          {"rounds_chunked", rounds_c},
          {"itl_max_cut", itl_max_cut},
          {"itl_p99_cut", itl_p99_cut},
          {"long_ttft_cost", ttft_cost},
          {"throughput_ratio", throughput_ratio},
          {"same_tokens", same_tokens}};
}

}  // namespace servelab
