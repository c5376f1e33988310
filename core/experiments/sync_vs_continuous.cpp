#include "experiments/sync_vs_continuous.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "generate/static_batching.h"
#include "model/model.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

// Retired requests as progress through the whole experiment.
class Progress : public ForwardingBatchSink {
 public:
  Progress(const ExperimentControl& control, std::string stage, double done, double share, size_t requests)
      : ForwardingBatchSink(control.batch),
        sink_(control.sink),
        stage_(std::move(stage)),
        done_(done),
        share_(share),
        requests_(requests) {}
  // The run's own name for the live views, when the scheduler's (its KV memory) is not enough.
  void rename(std::string method) { method_ = std::move(method); }
  void on_run_start(const std::string& method, int64_t requests, int64_t slots) override {
    ForwardingBatchSink::on_run_start(method_.empty() ? method : method_, requests, slots);
  }
  void on_retire(const RequestResult& r) override {
    ForwardingBatchSink::on_retire(r);
    ++retired_;
    if (sink_)
      sink_->on_progress(done_ + share_ * static_cast<double>(retired_) / static_cast<double>(requests_),
                         stage_);
  }

 private:
  ExperimentSink* sink_;
  std::string stage_;
  double done_, share_;
  size_t requests_, retired_ = 0;
  std::string method_;
};

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) throw InputError("percentile of no values");
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(v.size()));
  return v[static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(v.size()))) - 1];
}

double median_or_zero(std::vector<double> v) { return v.empty() ? 0 : percentile(std::move(v), 50); }

ServeSummary summarize(const BatchRunResult& run) {
  ServeSummary s;
  s.method = run.method;
  s.total_ms = run.total_ms;
  s.inference_calls = run.inference_calls;
  s.max_batch = run.max_batch;
  s.generated_tokens = run.generated_tokens;
  s.steps = static_cast<int64_t>(run.steps.size());
  s.average_batch = run.average_batch;
  s.tokens_per_s = run.total_ms > 0 ? 1000.0 * static_cast<double>(run.generated_tokens) / run.total_ms : 0;
  s.kv_cache_bytes = run.kv_cache_bytes;
  s.kv_copy_bytes = run.kv_copy_bytes;
  std::vector<double> waits;
  for (const RequestResult& r : run.requests) {
    s.ttft_ms.push_back(r.ttft_ms);
    s.latency_ms.push_back(r.latency_ms);
    waits.push_back(r.queue_wait_ms);
  }
  if (!run.requests.empty()) {
    s.ttft_p50 = percentile(s.ttft_ms, 50);
    s.ttft_p90 = percentile(s.ttft_ms, 90);
    s.ttft_p99 = percentile(s.ttft_ms, 99);
    s.latency_p50 = percentile(s.latency_ms, 50);
    s.latency_p90 = percentile(s.latency_ms, 90);
    s.latency_p99 = percentile(s.latency_ms, 99);
    s.queue_wait_p50 = percentile(waits, 50);
  }
  return s;
}

nlohmann::json batch_run_json(const BatchRunResult& run) {
  nlohmann::json reqs = nlohmann::json::array(), steps = nlohmann::json::array();
  for (const RequestResult& r : run.requests)
    reqs.push_back({{"id", r.id},
                    {"prompt_tokens", r.prompt_ids.size()},
                    {"generated_ids", r.generated_ids},
                    {"text", r.text},
                    {"finish_reason", r.finish_reason},
                    {"slot", r.slot},
                    {"arrival_ms", r.arrival_ms},
                    {"admitted_ms", r.admitted_ms},
                    {"admitted_step", r.admitted_step},
                    {"finished_step", r.finished_step},
                    {"queue_wait_ms", r.queue_wait_ms},
                    {"ttft_ms", r.ttft_ms},
                    {"latency_ms", r.latency_ms},
                    {"token_ms", r.token_ms}});
  for (const BatchStep& s : run.steps)
    steps.push_back({{"step", s.step},
                     {"start_ms", s.start_ms},
                     {"ms", s.ms},
                     {"running", s.running},
                     {"prefill_tokens", s.prefill_tokens},
                     {"decode_tokens", s.decode_tokens},
                     {"forward_calls", s.forward_calls},
                     {"kv_copy_bytes", s.kv_copy_bytes},
                     {"kv_copy_ms", s.kv_copy_ms},
                     {"prefill_ms", s.prefill_ms},
                     {"flops", s.cost.flops},
                     {"bytes", s.cost.bytes()},
                     {"admitted", s.admitted},
                     {"retired", s.retired}});
  return {{"method", run.method},
          {"inference_calls", run.inference_calls},
          {"max_batch", run.max_batch},
          {"average_batch", run.average_batch},
          {"generated_tokens", run.generated_tokens},
          {"total_ms", run.total_ms},
          {"kv_cache_bytes", run.kv_cache_bytes},
          {"kv_copy_bytes", run.kv_copy_bytes},
          {"max_running", run.max_running},
          {"preemptions", run.preemptions},
          {"prompt_tokens", run.prompt_tokens},
          {"prefix_hit_tokens", run.prefix_hit_tokens},
          {"cancelled", run.cancelled},
          {"requests", reqs},
          {"steps", steps}};
}

nlohmann::json SyncVsContinuousResult::to_json() const {
  nlohmann::json ms = nlohmann::json::array();
  for (const ServeSummary& s : methods)
    ms.push_back(
        {{"method", s.method},
         {"total_ms", s.total_ms},
         {"inference_calls", s.inference_calls},
         {"max_batch", s.max_batch},
         {"average_batch", s.average_batch},
         {"generated_tokens", s.generated_tokens},
         {"steps", s.steps},
         {"tokens_per_s", s.tokens_per_s},
         {"kv_cache_bytes", s.kv_cache_bytes},
         {"kv_copy_bytes", s.kv_copy_bytes},
         {"ttft_ms", {{"p50", s.ttft_p50}, {"p90", s.ttft_p90}, {"p99", s.ttft_p99}, {"all", s.ttft_ms}}},
         {"latency_ms",
          {{"p50", s.latency_p50}, {"p90", s.latency_p90}, {"p99", s.latency_p99}, {"all", s.latency_ms}}},
         {"queue_wait_p50_ms", s.queue_wait_p50}});
  nlohmann::json detail = nlohmann::json::array();
  for (const BatchRunResult& r : runs) detail.push_back(batch_run_json(r));
  return {{"experiment", "sync-vs-continuous"},
          {"methods", ms},
          {"same_tokens", same_tokens},
          {"speedup", speedup},
          {"runs", detail}};
}

namespace {

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::vector<BatchRequest> make_sync_vs_continuous_requests(const Engine& engine,
                                                           const SyncVsContinuousParams& p) {
  // Counts first: the queue is built before the scheduler checks it.
  const int64_t context = engine.shape().context;
  limits::check_range("requests", p.requests, 1, limits::kMaxRequests);
  limits::check_range("max batch", p.max_batch, 1, limits::kMaxBatch);
  if (p.long_every < 1)
    throw InputError("long-every must be at least 1, got " + std::to_string(p.long_every));
  limits::check_range("long tokens", p.long_tokens, 1, limits::kMaxTokens);
  limits::check_range("short tokens", p.short_tokens, 1, limits::kMaxTokens);
  limits::check_range("prompt tokens min", p.prompt_tokens_min, 0, context);
  limits::check_range("prompt tokens max", p.prompt_tokens_max, 0, context);
  if (p.prompt_tokens_max < p.prompt_tokens_min)
    throw InputError("prompt token range [" + std::to_string(p.prompt_tokens_min) + ", " +
                     std::to_string(p.prompt_tokens_max) + "] is not a range of lengths");
  limits::check_range("arrival rate (requests/s)", p.arrival_rate, 0.0, 1e9);
  // A run waits in real time for its arrivals: refuse a rate whose queue would take longer than a
  // run may wait (the expected span first, then the drawn one below).
  if (p.arrival_rate > 0 && static_cast<double>(p.requests - 1) / p.arrival_rate > limits::kMaxWaitSeconds)
    throw InputError("arrival rate " + fmt(p.arrival_rate) + " requests/s spreads " +
                     std::to_string(p.requests) + " requests over about " +
                     fmt(static_cast<double>(p.requests - 1) / p.arrival_rate) + " s, more than the " +
                     std::to_string(static_cast<int64_t>(limits::kMaxWaitSeconds)) +
                     " s a run may wait; raise the rate or use fewer requests");
  const std::vector<int32_t> base = encode_prompt(engine.tokenizer(), p.prompt);
  if (base.empty()) throw InputError("the prompt is empty");
  std::mt19937_64 rng(p.seed);
  std::vector<BatchRequest> out;
  double t = 0;
  for (int64_t i = 0; i < p.requests; ++i) {
    BatchRequest r;
    r.prompt_ids = base;
    if (p.prompt_tokens_max > 0) {
      const int64_t len = std::uniform_int_distribution<int64_t>(std::max<int64_t>(1, p.prompt_tokens_min),
                                                                 p.prompt_tokens_max)(rng);
      r.prompt_ids.clear();
      while (static_cast<int64_t>(r.prompt_ids.size()) < len)
        r.prompt_ids.push_back(base[r.prompt_ids.size() % base.size()]);
    }
    r.max_new_tokens = i % p.long_every == 0 ? p.long_tokens : p.short_tokens;
    r.stop_at_eos = false;  // the course's requests run to their token budget
    if (p.arrival_rate > 0 && i > 0) t += std::exponential_distribution<double>(p.arrival_rate)(rng) * 1000.0;
    if (t > limits::kMaxWaitSeconds * 1000.0)
      throw InputError("arrival rate " + fmt(p.arrival_rate) + " requests/s with seed " +
                       std::to_string(p.seed) + " puts request " + std::to_string(i + 1) + " at " +
                       fmt(t / 1000.0) + " s, later than the " +
                       std::to_string(static_cast<int64_t>(limits::kMaxWaitSeconds)) +
                       " s a run may wait; raise the rate");
    r.arrival_ms = t;
    out.push_back(std::move(r));
  }
  return out;
}

SyncVsContinuousResult run_sync_vs_continuous(const Engine& engine, const SyncVsContinuousParams& p,
                                              const ExperimentControl& control) {
  const std::vector<BatchRequest> requests = make_sync_vs_continuous_requests(engine, p);
  BatchOptions o;
  o.max_batch = p.max_batch;
  o.max_num_batched_tokens = p.max_num_batched_tokens;
  o.cancel = control.cancel;
  int64_t paged_blocks = 0;
  int64_t slot_batch = p.max_batch;  // the methods other than paged KV
  if (p.paged) {
    limits::check_range("KV block size", p.kv_block_size, int64_t{1}, engine.shape().context);
    limits::check_range("KV budget (MB)", p.kv_budget_mb, 0.0, 1e7);
    if (p.kv_budget_mb > 0) {
      const int64_t block_bytes = engine.model().kv_cache_bytes(1, p.kv_block_size);
      paged_blocks = static_cast<int64_t>(p.kv_budget_mb * 1e6) / block_bytes;
      if (paged_blocks < 1)
        throw InputError("a KV budget of " + fmt(p.kv_budget_mb) + " MB holds no block of " +
                         std::to_string(block_bytes) + " bytes");
      if (p.slots_in_budget) {
        // A slot is sized for the longest request, as slot KV reserves it.
        int64_t longest = 0;
        for (const BatchRequest& r : requests)
          longest = std::max(longest, static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens);
        const int64_t slot_bytes = engine.model().kv_cache_bytes(1, longest);
        const int64_t slots = static_cast<int64_t>(p.kv_budget_mb * 1e6) / slot_bytes;
        if (slots < 1)
          throw InputError("a KV budget of " + fmt(p.kv_budget_mb) + " MB holds no slot KV slot of " +
                           std::to_string(longest) + " positions (" + std::to_string(slot_bytes) + " bytes)");
        slot_batch = std::min(p.max_batch, slots);
      }
    }
  }
  check_batch_requests(engine.model(), requests, o);
  if (p.warmup) {
    std::vector<BatchRequest> w(requests.begin(), requests.begin() + std::min<int64_t>(2, p.requests));
    for (auto& r : w) {
      r.max_new_tokens = std::min<int64_t>(2, r.max_new_tokens);
      r.arrival_ms = 0;
    }
    run_continuous_batching(engine.model(), engine.tokenizer(), w, o);
  }
  std::vector<std::pair<bool, KvStrategy>> plan = {{false, KvStrategy::SlotKv}, {true, KvStrategy::SlotKv}};
  if (p.naive) plan.push_back({true, KvStrategy::NaiveMergeFilter});
  const bool uncached_too = p.paged && p.prefix_caching && p.paged_uncached_too;
  if (uncached_too) plan.push_back({true, KvStrategy::Paged});
  if (p.paged) plan.push_back({true, KvStrategy::Paged});
  SyncVsContinuousResult result;
  for (size_t i = 0; i < plan.size(); ++i) {
    o.kv = plan[i].second;
    o.max_batch = o.kv == KvStrategy::Paged ? p.max_batch : slot_batch;
    // The course's merge/filter runs whole prompts only (and the synchronous baseline has no steps
    // to share): the budget is the slot and paged runs'.
    o.max_num_batched_tokens = o.kv == KvStrategy::NaiveMergeFilter ? 0 : p.max_num_batched_tokens;
    if (o.kv == KvStrategy::Paged) {
      o.kv_blocks = paged_blocks;
      o.kv_block_size = p.kv_block_size;
      // The uncached run comes first: the last run is the one the budget and options describe.
      o.prefix_caching = p.prefix_caching && !(uncached_too && i + 1 < plan.size());
    }
    std::string stage =
        plan[i].first ? std::string("continuous (") + kv_strategy_name(o.kv) + ")" : "synchronous";
    if (uncached_too && o.kv == KvStrategy::Paged)
      stage = o.prefix_caching ? "continuous (paged KV + prefix cache)"
                               : "continuous (paged KV, no prefix cache)";
    Progress progress(control, stage, static_cast<double>(i) / static_cast<double>(plan.size()),
                      1.0 / static_cast<double>(plan.size()), requests.size());
    if (uncached_too && o.kv == KvStrategy::Paged) progress.rename(stage);
    BatchRunResult run =
        plan[i].first ? run_continuous_batching(engine.model(), engine.tokenizer(), requests, o, &progress)
                      : run_static_batching(engine.model(), engine.tokenizer(), requests, o, &progress);
    if (run.cancelled) throw CancelledError("sync-vs-continuous cancelled during " + stage);
    run.method = stage;
    result.methods.push_back(summarize(run));
    result.runs.push_back(std::move(run));
  }
  for (size_t m = 1; m < result.runs.size(); ++m)
    for (size_t r = 0; r < requests.size(); ++r)
      if (result.runs[m].requests[r].generated_ids != result.runs[0].requests[r].generated_ids)
        result.same_tokens = false;
  result.speedup =
      result.methods[1].total_ms > 0 ? result.methods[0].total_ms / result.methods[1].total_ms : 0;
  return result;
}

}  // namespace servelab
