#include "experiments/course_benchmark.h"

#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "tokenizer/prompt.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

nlohmann::json CourseBenchmarkResult::to_json() const {
  nlohmann::json table = nlohmann::json::array();
  for (const CourseBenchmarkRow& r : rows)
    table.push_back({{"method", r.method},
                     {"queries", r.queries},
                     {"time_s", r.time_s},
                     {"throughput_vs_baseline", r.throughput_vs_baseline},
                     {"max_batch", r.max_batch},
                     {"avg_batch", r.avg_batch},
                     {"tokens", r.tokens},
                     {"inference_calls", r.inference_calls}});
  return {{"experiment", "course-benchmark"},
          {"rows", table},
          {"same_tokens", same_tokens},
          {"batched_tokens", batched_tokens}};
}

CourseBenchmarkResult run_course_benchmark(const Engine& engine, const CourseBenchmarkParams& p,
                                           const ExperimentControl& control) {
  // Counts first: the queries are built before the scheduler checks them.
  limits::check_range("queries", p.queries, 1, limits::kMaxRequests);
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
  limits::check_range("max batch", p.max_batch, 1, limits::kMaxBatch);
  if (p.prompts.empty()) throw InputError("the course benchmark needs at least one prompt");
  std::vector<BatchRequest> requests;
  for (int64_t i = 0; i < p.queries; ++i) {
    BatchRequest r;
    r.prompt_ids = encode_prompt(engine.tokenizer(), p.prompts[static_cast<size_t>(i) % p.prompts.size()]);
    r.max_new_tokens = p.new_tokens;
    r.stop_at_eos = false;  // every query yields exactly new_tokens tokens, as in the course's count
    requests.push_back(std::move(r));
  }
  BatchOptions o;
  o.max_batch = p.max_batch;
  o.cancel = control.cancel;
  check_batch_requests(engine.model(), requests, o);
  GenerateOptions g;
  g.max_new_tokens = p.new_tokens;
  g.stop_at_eos = false;
  g.report_top = 0;
  g.cancel = control.cancel;
  if (p.warmup) {
    GenerateOptions w = g;
    w.max_new_tokens = std::min<int64_t>(2, p.new_tokens);
    generate(engine.model(), engine.tokenizer(), {requests[0].prompt_ids}, w);
  }
  auto progress = [&](double f, const std::string& stage) {
    if (control.sink) control.sink->on_progress(f, stage);
  };

  // Baseline: one query at a time with the KV cache; each token is one forward pass.
  CourseBenchmarkRow base{"baseline (one query at a time, KV cache)", p.queries, 0, 1, 1, 1, 0, 0};
  std::vector<std::vector<int32_t>> base_tokens;
  const DeviceTimer timer(engine.model().device());
  for (int64_t i = 0; i < (p.baseline ? p.queries : 0); ++i) {
    GenerateResult r =
        generate(engine.model(), engine.tokenizer(), {requests[static_cast<size_t>(i)].prompt_ids}, g);
    base.tokens += static_cast<int64_t>(r.sequences[0].generated_ids.size());
    base.inference_calls += static_cast<int64_t>(r.step_ms.size());
    base_tokens.push_back(std::move(r.sequences[0].generated_ids));
    progress(0.5 * static_cast<double>(i + 1) / static_cast<double>(p.queries), "baseline");
  }
  base.time_s = timer.elapsed_ms() / 1000.0;

  class Progress : public ForwardingBatchSink {
   public:
    Progress(BatchSink* next, std::function<void(double, const std::string&)> f, int64_t n)
        : ForwardingBatchSink(next), f_(std::move(f)), n_(n) {}
    void on_retire(const RequestResult& r) override {
      ForwardingBatchSink::on_retire(r);
      f_(0.5 + 0.5 * static_cast<double>(++done_) / static_cast<double>(n_), "continuous batching");
    }

   private:
    std::function<void(double, const std::string&)> f_;
    int64_t n_, done_ = 0;
  } live(control.batch, progress, p.queries);
  BatchRunResult run = run_continuous_batching(engine.model(), engine.tokenizer(), requests, o, &live);
  if (run.cancelled) throw CancelledError("course benchmark cancelled");
  CourseBenchmarkRow batched{"batched (continuous, slot KV)",
                             p.queries,
                             run.total_ms / 1000.0,
                             0,
                             run.max_batch,
                             run.average_batch,
                             run.generated_tokens,
                             run.inference_calls};
  CourseBenchmarkResult result;
  for (const RequestResult& r : run.requests) result.batched_tokens.push_back(r.generated_ids);
  if (!p.baseline) {
    result.rows = {batched};
    return result;
  }
  batched.throughput_vs_baseline = batched.time_s > 0 ? base.time_s / batched.time_s : 0;
  for (size_t i = 0; i < requests.size(); ++i)
    if (run.requests[i].generated_ids != base_tokens[i]) result.same_tokens = false;
  result.rows = {base, batched};
  return result;
}

}  // namespace servelab
