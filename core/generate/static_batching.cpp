// The synchronous baseline of lesson 3: fixed batches, each run to its longest request.
#include "generate/static_batching.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "generate/generator.h"
#include "generate/request_tracker.h"
#include "lora/adapter_cache.h"
#include "lora/lora_adapter.h"
#include "model/model.h"
#include "util/device.h"
#include "util/errors.h"

namespace servelab {

namespace {

// Hands generate()'s tokens to the batch's requests as they come, so a cancel loses nothing.
class BatchRecorder : public GenerationSink {
 public:
  BatchRecorder(std::vector<RequestTracker*> rows, const DeviceTimer& clock, BatchRunResult& result,
                BatchSink* sink, const StepCostModel& cost)
      : rows_(std::move(rows)), clock_(clock), result_(result), sink_(sink), cost_(cost) {}

  void on_token(const TokenEvent& e) override {
    RequestTracker& t = *rows_[e.row];
    if (t.finished()) return;  // past its own max, EOS or stop string: the batch computes it anyway
    const std::string piece = t.push(e.id, now());
    if (sink_) sink_->on_token(t.result().id, e.id, piece, step_index(), now());
  }
  void on_step(const StepEvent& e) override {
    BatchStep s;
    s.step = step_index();
    s.ms = e.ms;
    s.start_ms = now() - e.ms;
    s.running = static_cast<int64_t>(rows_.size());
    if (e.step == 0) {
      for (RequestTracker* t : rows_) {
        s.admitted.push_back(t->result().id);
        s.prefill_tokens += static_cast<int64_t>(t->request().prompt_ids.size());
      }
      s.prefill_ms = e.ms;
    } else {
      s.decode_tokens = static_cast<int64_t>(rows_.size());
    }
    // Every row of the padded batch is computed, padding included: the prompts at the batch's width,
    // then one position a row.
    const auto batch = static_cast<int64_t>(rows_.size());
    if (e.step == 0) width_ = batch > 0 ? e.positions / batch : 0;
    const CostRow row = e.step == 0 ? CostRow{0, width_, 1} : CostRow{width_ + e.step - 1, 1, 1};
    s.cost = cost_.forward(std::vector<CostRow>(rows_.size(), row));
    s.forward_calls = 1;
    result_.inference_calls += 1;
    result_.max_batch = std::max(result_.max_batch, s.running);
    rows_in_calls += s.running;
    if (sink_) sink_->on_step(s);
    result_.steps.push_back(std::move(s));
  }
  int64_t rows_in_calls = 0;

 private:
  double now() const { return clock_.elapsed_ms(); }
  int64_t step_index() const { return static_cast<int64_t>(result_.steps.size()); }

  std::vector<RequestTracker*> rows_;
  const DeviceTimer& clock_;
  BatchRunResult& result_;
  BatchSink* sink_;
  const StepCostModel& cost_;
  int64_t width_ = 0;  // the padded prompts' width
};

}  // namespace

BatchRunResult run_static_batching(const Model& model, const Tokenizer& tokenizer,
                                   const std::vector<BatchRequest>& requests, const BatchOptions& options,
                                   BatchSink* sink) {
  check_batch_requests(model, requests, options);
  const std::vector<int32_t> stops = generation_stop_ids(model, tokenizer);
  std::vector<RequestTracker> trackers;
  for (size_t i = 0; i < requests.size(); ++i)
    trackers.emplace_back(tokenizer, requests[i], static_cast<int64_t>(i), stops);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].arrival_ms < requests[b].arrival_ms; });

  BatchRunResult result;
  result.method = "synchronous";
  if (sink)
    sink->on_run_start(result.method, static_cast<int64_t>(requests.size()),
                       std::min<int64_t>(options.max_batch, static_cast<int64_t>(requests.size())));
  int64_t rows_in_calls = 0;
  // Adapters: each batch holds its rows' adapters while it runs (the cache's limit applies as in
  // continuous batching, so a batch needs room for all of its distinct adapters).
  std::unique_ptr<AdapterCache> adapters;
  if (!options.adapters.empty())
    adapters = std::make_unique<AdapterCache>(model, options.adapters, options.adapter_cache_capacity);
  const DeviceTimer clock(model.device());
  const StepCostModel cost = model.cost_model();
  const size_t batch = static_cast<size_t>(options.max_batch);
  for (size_t first = 0; first < order.size() && !result.cancelled; first += batch) {
    const size_t last = std::min(order.size(), first + batch);
    std::vector<RequestTracker*> rows;
    std::vector<std::vector<int32_t>> prompts;
    GenerateOptions o;
    o.max_new_tokens = 0;
    for (size_t i = first; i < last; ++i) {
      rows.push_back(&trackers[order[i]]);
      prompts.push_back(requests[order[i]].prompt_ids);
      o.max_new_tokens = std::max(o.max_new_tokens, requests[order[i]].max_new_tokens);
    }
    o.sampling = requests[order[first]].sampling;
    std::vector<std::string> pinned;
    if (adapters) {
      o.lora_strategy = options.lora_strategy;
      for (size_t i = first; i < last; ++i) {
        const std::string& name = requests[order[i]].adapter;
        trackers[order[i]].result().adapter = name;
        if (name.empty()) {
          o.adapters.push_back(nullptr);
          continue;
        }
        std::shared_ptr<const LoraAdapter> a = adapters->acquire(name);
        if (!a)
          throw InputError("a batch of " + std::to_string(last - first) +
                           " requests needs more distinct adapters than the adapter cache holds (" +
                           std::to_string(options.adapter_cache_capacity) + ")");
        pinned.push_back(name);
        o.adapters.push_back(std::move(a));
      }
    }
    o.stop_at_eos = false;  // the course's batches run to their longest request
    o.report_top = 0;
    o.cancel = options.cancel;
    // The batch is formed when its last request has arrived.
    const double ready = requests[order[last - 1]].arrival_ms;
    while (clock.elapsed_ms() < ready && !(options.cancel && options.cancel->load()))
      std::this_thread::sleep_for(
          std::chrono::duration<double, std::milli>(std::min(10.0, ready - clock.elapsed_ms())));
    if (options.cancel && options.cancel->load()) {
      result.cancelled = true;
      break;
    }
    const double start = clock.elapsed_ms();
    const int64_t step = static_cast<int64_t>(result.steps.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i]->admitted(static_cast<int64_t>(i), step, start);
      if (sink) sink->on_admit(rows[i]->result().id, static_cast<int64_t>(i), step, start);
    }
    BatchRecorder recorder(rows, clock, result, sink, cost);
    try {
      generate(model, tokenizer, prompts, o, &recorder);
    } catch (const CancelledError&) {
      result.cancelled = true;
    }
    rows_in_calls += recorder.rows_in_calls;
    for (const std::string& name : pinned) adapters->release(name);
    if (adapters) result.adapter_cache = adapters->stats();
    if (result.cancelled) break;
    // The whole batch leaves together.
    if (!result.steps.empty()) {
      for (RequestTracker* t : rows) {
        t->result().finished_step = result.steps.size() - 1;
        result.steps.back().retired.push_back(t->result().id);
        if (sink) sink->on_retire(t->result());
      }
    }
    result.kv_cache_bytes = std::max(
        result.kv_cache_bytes,
        model.kv_cache_bytes(
            static_cast<int64_t>(rows.size()),
            static_cast<int64_t>(std::max_element(prompts.begin(), prompts.end(),
                                                  [](auto& a, auto& b) { return a.size() < b.size(); })
                                     ->size()) +
                o.max_new_tokens));
  }
  result.total_ms = clock.elapsed_ms();
  result.average_batch = result.inference_calls ? static_cast<double>(rows_in_calls) /
                                                      static_cast<double>(result.inference_calls)
                                                : 0;
  for (RequestTracker& t : trackers) {
    t.finish("cancelled");
    result.generated_tokens += static_cast<int64_t>(t.result().generated_ids.size());
    result.requests.push_back(t.result());
  }
  return result;
}

}  // namespace servelab
