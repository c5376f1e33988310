#include "generate/continuous_batch_scheduler.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <thread>

#include "generate/generation.h"
#include "generate/step_executor.h"
#include "generate/token_picker.h"
#include "lora/adapter_cache.h"
#include "lora/lora_adapter.h"
#include "model/model.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

const char* kv_strategy_name(KvStrategy strategy) {
  return strategy == KvStrategy::SlotKv  ? "slot KV"
         : strategy == KvStrategy::Paged ? "paged KV"
                                         : "merge/filter";
}

void check_batch_requests(const Model& model, const std::vector<BatchRequest>& requests,
                          const BatchOptions& options) {
  const ModelShape& c = model.shape();
  limits::check_range("max batch", options.max_batch, 1, limits::kMaxBatch);
  if (options.max_num_batched_tokens != 0) {
    if (options.max_num_batched_tokens < 1 || options.max_num_batched_tokens > c.context)
      throw InputError("max num batched tokens must be in [1, " + std::to_string(c.context) +
                       "] (the model's context), got " + std::to_string(options.max_num_batched_tokens));
    if (options.kv == KvStrategy::NaiveMergeFilter)
      throw InputError(
          "chunked prefill (max num batched tokens) needs slot or paged KV; the course's "
          "merge/filter runs whole prompts only");
  }
  if (options.speculative.enabled()) {
    options.speculative.validate();
    if (options.kv == KvStrategy::NaiveMergeFilter)
      throw InputError(
          "speculative decoding needs slot or paged KV; the course's merge/filter feeds one token per "
          "request and step");
  }
  if (requests.empty()) throw InputError("no requests given");
  limits::check_range("requests", static_cast<int64_t>(requests.size()), 1, limits::kMaxRequests);
  if (options.adapter_cache_capacity < 0)
    throw InputError("adapter cache capacity must be 0 (all) or more, got " +
                     std::to_string(options.adapter_cache_capacity));
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    const std::string name = "request " + std::to_string(i + 1);
    if (r.prompt_ids.empty()) throw InputError(name + " has an empty prompt: it needs at least one token");
    for (int32_t id : r.prompt_ids)
      if (id < 0 || id >= c.vocab_size)
        throw InputError(name + " has token id " + std::to_string(id) + " outside the vocabulary of " +
                         std::to_string(c.vocab_size));
    if (r.max_new_tokens < 1)
      throw InputError(name + ": max new tokens must be at least 1, got " + std::to_string(r.max_new_tokens));
    if (static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens > c.context)
      throw InputError(name + " has " + std::to_string(r.prompt_ids.size()) + " prompt tokens; with " +
                       std::to_string(r.max_new_tokens) + " new tokens that exceeds the context of " +
                       std::to_string(c.context) + " positions");
    if (!(r.arrival_ms >= 0 && r.arrival_ms <= limits::kMaxWaitSeconds * 1000.0))
      throw InputError(name + ": arrival time must be between 0 and " +
                       std::to_string(static_cast<int64_t>(limits::kMaxWaitSeconds * 1000.0)) + " ms, got " +
                       std::to_string(r.arrival_ms));
    r.sampling.validate();
    if (r.arrival_step < -1 || r.arrival_step > limits::kMaxTokens * limits::kMaxRequests)
      throw InputError(name + ": arrival step must be -1 (arrival time) or a scheduler step, got " +
                       std::to_string(r.arrival_step));
    if (!r.adapter.empty() && std::none_of(options.adapters.begin(), options.adapters.end(),
                                           [&](const AdapterSource& a) { return a.name == r.adapter; })) {
      std::string known;
      for (const AdapterSource& a : options.adapters) known += (known.empty() ? "" : ", ") + a.name;
      throw InputError(name + " names adapter '" + r.adapter + "', which is not among the run's adapters (" +
                       (known.empty() ? "none given" : known) + ")");
    }
  }
  // The KV memory the run preallocates: a place per running request, each as long as the longest.
  int64_t longest = 0;
  for (const BatchRequest& r : requests)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens);
  const int64_t slots = std::min<int64_t>(options.max_batch, static_cast<int64_t>(requests.size()));
  if (options.kv == KvStrategy::Paged) {
    limits::check_range("KV block size", options.kv_block_size, 1, 4096);
    if (options.kv_blocks < 0)
      throw InputError("KV blocks must be 0 (as much as slot KV) or more, got " +
                       std::to_string(options.kv_blocks));
    if (options.kv_blocks > 0) {
      if (model.device().is_cpu())
        limits::check_fits_in_memory("a paged KV pool of " + std::to_string(options.kv_blocks) + " blocks",
                                     model.kv_cache_bytes(options.kv_blocks, options.kv_block_size));
      return;
    }
  }
  if (model.device().is_cpu())
    limits::check_fits_in_memory(
        "a KV cache for max batch " + std::to_string(slots) + " x " + std::to_string(longest) + " positions",
        model.kv_cache_bytes(slots, longest));
}

ContinuousBatchScheduler::ContinuousBatchScheduler(const Model& model, const Tokenizer& tokenizer,
                                                   const std::vector<BatchRequest>& requests,
                                                   const BatchOptions& options, BatchSink* sink)
    : model_(model), tokenizer_(tokenizer), requests_(requests), options_(options), sink_(sink) {
  check_batch_requests(model, requests, options);
  const std::vector<int32_t> stops = generation_stop_ids(model, tokenizer);
  int64_t capacity = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    trackers_.emplace_back(tokenizer, requests[i], static_cast<int64_t>(i), stops);
    capacity = std::max<int64_t>(
        capacity, static_cast<int64_t>(requests[i].prompt_ids.size()) + requests[i].max_new_tokens);
  }
  const int64_t slots = std::min<int64_t>(options.max_batch, static_cast<int64_t>(requests.size()));
  kv_ = make_kv_memory_manager(options.kv, model, slots, capacity, padding_id(model, tokenizer),
                               PagedKvConfig{options.kv_blocks, options.kv_block_size, options.prefix_caching,
                                             options.paged_attention});
  result_.method = std::string("continuous (") + kv_strategy_name(options.kv) + ")";
  if (options.speculative.enabled())
    spec_ = std::make_unique<Speculator>(options.speculative, model, slots, capacity,
                                         padding_id(model, tokenizer));
  SchedulerCore::Hooks hooks;
  if (!options.adapters.empty()) {
    adapters_ = std::make_unique<AdapterCache>(model, options.adapters, options.adapter_cache_capacity);
    KvMemoryManager::LoraRouting routing;
    routing.adapter_of = [this](int64_t id) -> const LoraAdapter* {
      const auto it = held_.find(id);
      return it == held_.end() ? nullptr : it->second.get();
    };
    routing.strategy = options.lora_strategy;
    routing.stack = [this] { return adapters_->stack(); };
    kv_->set_lora(std::move(routing));
    // A request's adapter must be loaded before it runs; when the cache is full of adapters running
    // requests need, the queue waits for a retirement (first come, first served).
    hooks.acquire = [this](int64_t id) {
      const std::string& name = requests_[static_cast<size_t>(id)].adapter;
      if (name.empty()) return true;
      std::shared_ptr<const LoraAdapter> adapter = adapters_->acquire(name);
      if (!adapter) return false;
      held_[id] = std::move(adapter);
      return true;
    };
    hooks.release = [this](int64_t id) {
      if (held_.erase(id)) adapters_->release(requests_[static_cast<size_t>(id)].adapter);
    };
  }
  core_ = std::make_unique<SchedulerCore>(
      *kv_, SchedulerConfig{options.max_batch, options.max_num_batched_tokens}, std::move(hooks));
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].arrival_step >= 0) {
      joining_.emplace(requests[i].arrival_step, static_cast<int64_t>(i));
      continue;
    }
    core_->add(static_cast<int64_t>(i), requests[i].prompt_ids, requests[i].max_new_tokens,
               requests[i].arrival_ms, adapter_key(requests[i].adapter));
  }
}

void ContinuousBatchScheduler::join(int64_t step, double ms, bool all) {
  while (!joining_.empty() && (all || joining_.begin()->first <= step)) {
    const int64_t id = joining_.begin()->second;
    joining_.erase(joining_.begin());
    const BatchRequest& r = requests_[static_cast<size_t>(id)];
    trackers_[static_cast<size_t>(id)].result().arrival_ms = ms;
    core_->add(id, r.prompt_ids, r.max_new_tokens, ms, adapter_key(r.adapter));
  }
}

ContinuousBatchScheduler::~ContinuousBatchScheduler() = default;

void ContinuousBatchScheduler::take_tokens(const at::Tensor& logits, const std::vector<int64_t>& ids,
                                           double ms, BatchStep& step) {
  std::vector<PickRow> rows;
  rows.reserve(ids.size());
  for (int64_t id : ids) {
    RequestTracker& t = trackers_[static_cast<size_t>(id)];
    auto sampler = samplers_.try_emplace(id, t.request().sampling).first;
    rows.push_back(
        {&t.request().sampling, &sampler->second, &t.request().prompt_ids, &t.result().generated_ids});
  }
  const std::vector<PickedToken> picked =
      pick_tokens(logits, rows,
                  "scheduler step " + std::to_string(step.step + 1) + " (request " +
                      std::to_string(ids.front() + 1) + " and its batch)");
  for (size_t i = 0; i < ids.size(); ++i) hand_over(ids[i], {picked[i].id}, ms, step);
}

bool ContinuousBatchScheduler::hand_over(int64_t id, const std::vector<int32_t>& tokens, double ms,
                                         BatchStep& step) {
  RequestTracker& t = trackers_[static_cast<size_t>(id)];
  for (int32_t token : tokens) {
    const std::string piece = t.push(token, ms);
    core_->append(id, token);
    if (sink_) sink_->on_token(id, token, piece, step.step, ms);
    if (!t.finished()) continue;
    // A stop, EOS or the last token inside an accepted run: the rest is dropped with the request.
    step.retired.push_back(id);
    core_->finish(id);
    samplers_.erase(id);
    if (spec_) spec_->finish(id);
    return true;
  }
  return false;
}

void ContinuousBatchScheduler::take_verified(const at::Tensor& logits, const SchedulePlan& plan, double ms,
                                             BatchStep& step) {
  const std::vector<int64_t> at = decode_rows(plan);
  for (size_t i = 0; i < plan.decode.size(); ++i) {
    const int64_t id = plan.decode[i];
    RequestTracker& t = trackers_[static_cast<size_t>(id)];
    auto sampler = samplers_.try_emplace(id, t.request().sampling).first;
    const PickRow row{&t.request().sampling, &sampler->second, &t.request().prompt_ids,
                      &t.result().generated_ids};
    const at::Tensor rows = logits.narrow(0, at[i], at[i + 1] - at[i]);
    const std::string where =
        "scheduler step " + std::to_string(step.step + 1) + " (request " + std::to_string(id + 1) + ")";
    const std::vector<int32_t>& draft = plan.drafts[i];
    const int64_t start = core_->request(id).computed;
    const Verification v = draft.empty() ? verify_proposal(rows, draft, {}, row, where)
                                         : spec_->verify(id, rows, draft, row, where);
    if (!draft.empty()) {
      step.speculation.push_back({id, draft, v.accepted});
      settling_.push_back({id, start, v.accepted});
    }
    std::vector<int32_t> ids;
    for (const PickedToken& p : v.tokens) ids.push_back(p.id);
    hand_over(id, ids, ms, step);
  }
}

void ContinuousBatchScheduler::propose() {
  if (!spec_) return;
  spec_->propose(*core_, [this](int64_t id) { return &requests_[static_cast<size_t>(id)].sampling; });
}

void ContinuousBatchScheduler::note_plan(const SchedulePlan& plan, BatchStep& s, double ms) {
  for (const auto& [id, why] : plan.rejected) reject(id, why, s);
  for (int64_t id : plan.preempted) {
    RequestTracker& t = trackers_[static_cast<size_t>(id)];
    ++t.result().preemptions;
    ++result_.preemptions;
    s.preempted.push_back(id);
    if (spec_) spec_->finish(id);
    if (sink_) sink_->on_preempt(id, s.step, ms);
  }
  for (int64_t id : plan.admitted) {
    RequestTracker& t = trackers_[static_cast<size_t>(id)];
    const SchedulerCore::Request& r = core_->request(id);
    t.result().adapter = t.request().adapter;
    s.admitted.push_back(id);
    const int64_t cached = kv_->cached_tokens(id);
    s.prefill_tokens += cached;
    s.prefix_hit_tokens += cached;
    result_.prompt_tokens += static_cast<int64_t>(r.tokens.size());
    result_.prefix_hit_tokens += cached;
    if (t.result().admitted_step < 0) t.result().cached_tokens = cached;
    if (cached > 0 && sink_) sink_->on_prefix_hit(id, cached, s.step);
  }
  for (const ScheduledChunk& c : plan.prefill) {
    s.prefill_tokens += c.count;
    s.chunks.push_back({c.id, c.start, c.count, c.last});
  }
  s.running =
      std::max<int64_t>(s.running, static_cast<int64_t>(core_->running().size() + plan.preempted.size()));
}

void ContinuousBatchScheduler::execute(const SchedulePlan& plan, const DeviceTimer& clock, BatchStep& s) {
  auto note_adapters = [&](const std::vector<int64_t>& ids) {
    for (int64_t id : ids)
      if (const auto it = held_.find(id); it != held_.end()) step_adapters_.insert(it->second.get());
  };
  auto note_admissions = [&] {
    for (int64_t id : plan.admitted) {
      const int64_t slot = kv_->slot_of(id);
      RequestTracker& t = trackers_[static_cast<size_t>(id)];
      t.admitted(slot, s.step, s.start_ms);
      if (sink_) sink_->on_admit(id, slot, s.step, s.start_ms);
    }
  };
  auto note_decodes = [&] {
    note_adapters(plan.decode);
    s.decode_tokens += static_cast<int64_t>(plan.decode.size());
    forward_rows_ += static_cast<int64_t>(plan.decode.size());
  };
  auto take_decoded = [&](const at::Tensor& logits) {
    if (std::any_of(plan.drafts.begin(), plan.drafts.end(), [](const auto& d) { return !d.empty(); }))
      take_verified(logits, plan, clock.elapsed_ms(), s);
    else
      take_tokens(logits, plan.decode, clock.elapsed_ms(), s);
  };
  std::vector<int64_t> chunk_rows;
  for (const ScheduledChunk& c : plan.prefill) chunk_rows.push_back(c.id);
  const std::vector<int64_t> sampled = prefill_sampled_ids(plan);
  if (runs_mixed(*kv_, plan)) {
    // Chunked prefill's step: the decode rows and the prompt chunks in one forward.
    note_decodes();
    note_adapters(chunk_rows);
    const StepLogits logits = run_mixed(*kv_, *core_, plan);
    ++s.forward_calls;
    forward_rows_ += static_cast<int64_t>(plan.prefill.size());
    result_.max_batch =
        std::max(result_.max_batch, static_cast<int64_t>(plan.decode.size() + plan.prefill.size()));
    note_admissions();
    take_decoded(logits.decode);
    if (!sampled.empty()) take_tokens(logits.prefill, sampled, clock.elapsed_ms(), s);
    core_->ran(plan);
    settle();
    return;
  }
  // Decodes first: the running streams' tokens are out before a prompt runs.
  if (!plan.decode.empty()) {
    note_decodes();
    const at::Tensor logits = run_decodes(*kv_, *core_, plan);
    ++s.forward_calls;
    result_.max_batch = std::max(result_.max_batch, static_cast<int64_t>(plan.decode.size()));
    take_decoded(logits);
  }
  if (!plan.prefill.empty()) {
    note_adapters(chunk_rows);
    const DeviceTimer prefill_timer(model_.device());
    const at::Tensor logits = run_prefills(*kv_, *core_, plan);
    const KvMemoryManager::CopyStats copied = kv_->take_copy_stats();
    s.prefill_ms += prefill_timer.elapsed_ms() - copied.ms;
    s.kv_copy_bytes += copied.bytes;
    s.kv_copy_ms += copied.ms;
    ++s.forward_calls;
    forward_rows_ += static_cast<int64_t>(plan.prefill.size());
    result_.max_batch = std::max(result_.max_batch, static_cast<int64_t>(plan.prefill.size()));
    note_admissions();
    if (!sampled.empty()) take_tokens(logits, sampled, clock.elapsed_ms(), s);
  }
  core_->ran(plan);
  settle();
}

void ContinuousBatchScheduler::settle() {
  for (const Settle& st : std::exchange(settling_, {})) spec_->settle(*core_, st.id, st.start, st.accepted);
}

bool ContinuousBatchScheduler::step(const DeviceTimer& clock) {
  BatchStep s;
  s.step = static_cast<int64_t>(result_.steps.size());
  s.start_ms = clock.elapsed_ms();
  step_adapters_.clear();
  join(s.step, s.start_ms, /*all=*/core_->idle());
  const bool chunked = options_.max_num_batched_tokens > 0;
  const DeviceTimer timer(model_.device());
  // Without a budget, the course's step: admissions prefill, then everyone decodes (the
  // just-admitted included); with one, a single plan of decodes and prompt chunks.
  if (chunked) propose();
  SchedulePlan plan = core_->schedule(s.start_ms, /*admit=*/true, /*decode=*/chunked);
  note_plan(plan, s, s.start_ms);
  if (plan.empty() && core_->running().empty()) return false;
  execute(plan, clock, s);
  if (!chunked) {
    // ran() and the tokens above told the core who decodes now.
    propose();
    const SchedulePlan decodes = core_->schedule(clock.elapsed_ms(), /*admit=*/false, /*decode=*/true);
    note_plan(decodes, s, clock.elapsed_ms());
    execute(decodes, clock, s);
  }
  result_.kv_cache_bytes = std::max(result_.kv_cache_bytes, kv_->bytes());
  result_.max_running = std::max(result_.max_running, s.running - static_cast<int64_t>(s.preempted.size()));
  if (adapters_) {
    s.adapters_in_step = static_cast<int64_t>(step_adapters_.size());
    s.adapter_cache = adapters_->stats();
    result_.adapter_cache = s.adapter_cache;
  }
  const KvMemoryManager::Usage usage = kv_->usage();
  s.kv_reserved_bytes = usage.reserved_bytes;
  s.kv_used_bytes = usage.used_bytes;
  s.kv_total_bytes = usage.total_bytes;
  s.kv_blocks_used = usage.blocks_used;
  s.kv_blocks_cached = usage.blocks_cached;
  s.ms = timer.elapsed_ms();
  kv_->snapshot_blocks(s);
  const KvMemoryManager::CopyStats later = kv_->take_copy_stats();
  s.kv_copy_bytes += later.bytes;
  s.kv_copy_ms += later.ms;
  result_.kv_copy_bytes += s.kv_copy_bytes;
  result_.inference_calls += s.forward_calls;
  for (int64_t id : s.retired) {
    trackers_[static_cast<size_t>(id)].result().finished_step = s.step;
    if (sink_) sink_->on_retire(trackers_[static_cast<size_t>(id)].result());
  }
  if (sink_) sink_->on_step(s);
  result_.steps.push_back(std::move(s));
  return true;
}

int64_t ContinuousBatchScheduler::adapter_key(const std::string& adapter) const {
  for (size_t i = 0; i < options_.adapters.size(); ++i)
    if (options_.adapters[i].name == adapter) return static_cast<int64_t>(i) + 1;
  return 0;
}

void ContinuousBatchScheduler::reject(int64_t id, const std::string& why, BatchStep& step) {
  RequestTracker& t = trackers_[static_cast<size_t>(id)];
  t.result().error = why;
  t.finish("error");
  t.result().finished_step = step.step;
  if (sink_) sink_->on_retire(t.result());
}

BatchRunResult ContinuousBatchScheduler::run() {
  c10::InferenceMode guard;
  const at::Device dev = model_.device();
  if (sink_)
    sink_->on_run_start(result_.method, static_cast<int64_t>(requests_.size()),
                        std::min<int64_t>(options_.max_batch, static_cast<int64_t>(requests_.size())));
  const DeviceTimer clock(dev);
  try {
    while (!core_->idle() || !joining_.empty()) {
      if (options_.cancel && options_.cancel->load()) {
        result_.cancelled = true;
        break;
      }
      if (!step(clock)) {
        // Nothing has arrived yet: wait for the next arrival, a little at a time to see a cancel.
        const double wait = core_->next_arrival_ms() - clock.elapsed_ms();
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(std::clamp(wait, 0.0, 10.0)));
      }
    }
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemoryError("out of memory on " + dev.str() + " serving a batch of " +
                           std::to_string(options_.max_batch) + "; try a smaller max batch");
  }
  result_.total_ms = clock.elapsed_ms();
  if (spec_) result_.speculative = spec_->stats();
  result_.average_batch = result_.inference_calls ? static_cast<double>(forward_rows_) /
                                                        static_cast<double>(result_.inference_calls)
                                                  : 0;
  for (RequestTracker& t : trackers_) {
    t.finish("cancelled");
    result_.generated_tokens += static_cast<int64_t>(t.result().generated_ids.size());
    result_.requests.push_back(t.result());
  }
  return result_;
}

BatchRunResult run_continuous_batching(const Model& model, const Tokenizer& tokenizer,
                                       const std::vector<BatchRequest>& requests, const BatchOptions& options,
                                       BatchSink* sink) {
  return ContinuousBatchScheduler(model, tokenizer, requests, options, sink).run();
}

}  // namespace servelab
