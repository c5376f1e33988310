#include "generate/continuous_batch_scheduler.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <thread>

#include "generate/generation.h"
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
  std::vector<int64_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return requests[a].arrival_ms < requests[b].arrival_ms; });
  waiting_.assign(order.begin(), order.end());
  const int64_t slots = std::min<int64_t>(options.max_batch, static_cast<int64_t>(requests.size()));
  kv_ = make_kv_memory_manager(options.kv, model, slots, capacity, padding_id(model, tokenizer),
                               PagedKvConfig{options.kv_blocks, options.kv_block_size, options.prefix_caching,
                                             options.paged_attention});
  result_.method = std::string("continuous (") + kv_strategy_name(options.kv) + ")";
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
  }
}

ContinuousBatchScheduler::~ContinuousBatchScheduler() = default;

void ContinuousBatchScheduler::take_tokens(const at::Tensor& logits, const std::vector<Running*>& rows,
                                           double ms, BatchStep& step) {
  check_finite_logits(logits, "scheduler step " + std::to_string(step.step + 1) + " (request " +
                                  std::to_string(rows.front()->id + 1) + " and its batch)");
  const at::Tensor greedy = logits.argmax(-1).to(at::kCPU);
  const auto greedy_a = greedy.accessor<int64_t, 1>();
  for (size_t i = 0; i < rows.size(); ++i) {
    RequestTracker& t = trackers_[static_cast<size_t>(rows[i]->id)];
    const int64_t row = static_cast<int64_t>(i);
    const int32_t id = static_cast<int32_t>(
        t.request().sampling.greedy ? greedy_a[row]
                                    : rows[i]->sampler.next(logits.narrow(0, row, 1))[0].item<int64_t>());
    const std::string piece = t.push(id, ms);
    if (sink_) sink_->on_token(rows[i]->id, id, piece, step.step, ms);
  }
}

bool ContinuousBatchScheduler::step(const DeviceTimer& clock) {
  BatchStep s;
  s.step = static_cast<int64_t>(result_.steps.size());
  s.start_ms = clock.elapsed_ms();
  // Admit: arrived requests, in arrival order, into free batch places (and, for paged KV, only
  // when their prompt's blocks fit: the queue then waits, first come first served).
  std::vector<PrefillRequest> admitted;
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < options_.max_batch &&
         requests_[static_cast<size_t>(waiting_.front())].arrival_ms <= s.start_ms) {
    const int64_t id = waiting_.front();
    const BatchRequest& r = requests_[static_cast<size_t>(id)];
    RequestTracker& t = trackers_[static_cast<size_t>(id)];
    // A preempted request recomputes its prompt and the tokens it has so far.
    const auto context = contexts_.find(id);
    const std::vector<int32_t>& prompt = context == contexts_.end() ? r.prompt_ids : context->second;
    const int64_t left = r.max_new_tokens - static_cast<int64_t>(t.result().generated_ids.size());
    const PrefillRequest pr{id, &prompt, left, adapter_key(r.adapter)};
    if (const std::string why = kv_->never_fits(pr); !why.empty()) {
      waiting_.pop_front();
      reject(id, why, s);
      continue;
    }
    if (!r.adapter.empty()) {
      // Its adapter must be loaded first; when the cache is full of adapters running requests
      // need, the queue waits for a retirement (first come, first served).
      std::shared_ptr<const LoraAdapter> adapter = adapters_->acquire(r.adapter);
      if (!adapter) break;
      held_[id] = std::move(adapter);
    }
    if (!kv_->reserve(pr)) {
      if (held_.erase(id)) adapters_->release(r.adapter);
      break;
    }
    t.result().adapter = r.adapter;
    waiting_.pop_front();
    if (const auto p = preempted_.find(id); p != preempted_.end()) {
      running_.push_back({id, std::move(p->second)});
      preempted_.erase(p);
    } else {
      running_.push_back({id, Sampler(r.sampling)});
    }
    admitted.push_back(pr);
    s.admitted.push_back(id);
    s.prefill_tokens += static_cast<int64_t>(prompt.size());
    const int64_t cached = kv_->cached_tokens(id);
    s.prefix_hit_tokens += cached;
    result_.prompt_tokens += static_cast<int64_t>(prompt.size());
    result_.prefix_hit_tokens += cached;
    if (t.result().admitted_step < 0) t.result().cached_tokens = cached;
    if (cached > 0 && sink_) sink_->on_prefix_hit(id, cached, s.step);
  }
  if (running_.empty()) return false;
  s.running = static_cast<int64_t>(running_.size());
  const DeviceTimer timer(model_.device());
  auto rows_of = [&](auto&& pick) {
    std::vector<Running*> rows;
    for (Running& r : running_)
      if (pick(r)) rows.push_back(&r);
    return rows;
  };
  KvMemoryManager::CopyStats copied;
  if (!admitted.empty()) {
    const DeviceTimer prefill_timer(model_.device());
    at::Tensor logits = kv_->prefill(admitted);
    copied = kv_->take_copy_stats();
    s.prefill_ms = prefill_timer.elapsed_ms() - copied.ms;
    ++s.forward_calls;
    result_.max_batch = std::max(result_.max_batch, static_cast<int64_t>(admitted.size()));
    auto rows = rows_of([&](const Running& r) {
      return std::find(s.admitted.begin(), s.admitted.end(), r.id) != s.admitted.end();
    });
    const double ms = clock.elapsed_ms();
    for (Running* r : rows) {
      const int64_t slot = kv_->slot_of(r->id);
      RequestTracker& t = trackers_[static_cast<size_t>(r->id)];
      t.admitted(slot, s.step, s.start_ms);
      if (sink_) sink_->on_admit(r->id, slot, s.step, s.start_ms);
    }
    take_tokens(logits, rows, ms, s);
    for (int64_t id : s.admitted) contexts_.erase(id);  // a recomputation's context served its prefill
  }
  // Decode: the merged batch, the just-admitted included (the course's prefill, merge, decode).
  auto decoding = rows_of([&](const Running& r) { return !trackers_[static_cast<size_t>(r.id)].finished(); });
  if (options_.kv == KvStrategy::Paged) {
    // Requests that finished in their prefill need no more memory: free it before anyone grows.
    std::vector<int64_t> done;
    for (const Running& r : running_)
      if (trackers_[static_cast<size_t>(r.id)].finished()) done.push_back(r.id);
    kv_->retire(done);
    // Every decoding request needs room for its next position. When the pool runs out, the
    // latest admitted running request is preempted (vLLM's recompute policy) until the older ones
    // fit; the oldest always fits, as it fits the pool alone.
    for (Running* r : decoding) {
      if (r->evicted) continue;
      const int32_t last = trackers_[static_cast<size_t>(r->id)].result().generated_ids.back();
      while (!kv_->grow(r->id, last)) {
        Running* victim = nullptr;
        for (Running& c : running_)
          if (!c.evicted && !trackers_[static_cast<size_t>(c.id)].finished()) victim = &c;
        preempt(*victim, s, clock.elapsed_ms());
        if (victim == r) break;
      }
    }
    decoding = rows_of(
        [&](const Running& r) { return !r.evicted && !trackers_[static_cast<size_t>(r.id)].finished(); });
  }
  if (!decoding.empty()) {
    std::vector<int64_t> ids;
    std::vector<int32_t> last;
    for (Running* r : decoding) {
      ids.push_back(r->id);
      last.push_back(trackers_[static_cast<size_t>(r->id)].result().generated_ids.back());
    }
    at::Tensor logits = kv_->decode(ids, last);
    ++s.forward_calls;
    s.decode_tokens = static_cast<int64_t>(ids.size());
    result_.max_batch = std::max(result_.max_batch, s.decode_tokens);
    take_tokens(logits, decoding, clock.elapsed_ms(), s);
  }
  result_.kv_cache_bytes = std::max(result_.kv_cache_bytes, kv_->bytes());
  result_.max_running = std::max(result_.max_running, s.running - static_cast<int64_t>(s.preempted.size()));
  // Retire: finished requests leave the batch and free their memory.
  for (const Running& r : running_)
    if (trackers_[static_cast<size_t>(r.id)].finished()) s.retired.push_back(r.id);
  if (adapters_) {
    std::set<const LoraAdapter*> distinct;
    for (const Running& r : running_)
      if (const auto it = held_.find(r.id); it != held_.end()) distinct.insert(it->second.get());
    s.adapters_in_step = static_cast<int64_t>(distinct.size());
    for (int64_t id : s.retired) {
      if (held_.erase(id)) adapters_->release(requests_[static_cast<size_t>(id)].adapter);
    }
    s.adapter_cache = adapters_->stats();
    result_.adapter_cache = s.adapter_cache;
  }
  kv_->retire(s.retired);
  for (Running& r : running_)
    if (r.evicted) preempted_.emplace(r.id, std::move(r.sampler));
  std::erase_if(running_, [&](const Running& r) {
    return r.evicted || trackers_[static_cast<size_t>(r.id)].finished();
  });
  const KvMemoryManager::Usage usage = kv_->usage();
  s.kv_reserved_bytes = usage.reserved_bytes;
  s.kv_used_bytes = usage.used_bytes;
  s.kv_total_bytes = usage.total_bytes;
  s.kv_blocks_used = usage.blocks_used;
  s.kv_blocks_cached = usage.blocks_cached;
  s.ms = timer.elapsed_ms();
  kv_->snapshot_blocks(s);
  const KvMemoryManager::CopyStats later = kv_->take_copy_stats();
  s.kv_copy_bytes = copied.bytes + later.bytes;
  s.kv_copy_ms = copied.ms + later.ms;
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

void ContinuousBatchScheduler::preempt(Running& r, BatchStep& step, double ms) {
  RequestTracker& t = trackers_[static_cast<size_t>(r.id)];
  r.evicted = true;
  kv_->retire({r.id});
  std::vector<int32_t> context = t.request().prompt_ids;
  context.insert(context.end(), t.result().generated_ids.begin(), t.result().generated_ids.end());
  contexts_[r.id] = std::move(context);
  waiting_.push_front(r.id);
  if (held_.erase(r.id)) adapters_->release(t.request().adapter);
  ++t.result().preemptions;
  ++result_.preemptions;
  step.preempted.push_back(r.id);
  if (sink_) sink_->on_preempt(r.id, step.step, ms);
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
    while (!waiting_.empty() || !running_.empty()) {
      if (options_.cancel && options_.cancel->load()) {
        result_.cancelled = true;
        break;
      }
      if (!step(clock)) {
        // Nothing has arrived yet: wait for the next arrival, a little at a time to see a cancel.
        const double wait = requests_[static_cast<size_t>(waiting_.front())].arrival_ms - clock.elapsed_ms();
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(std::clamp(wait, 0.0, 10.0)));
      }
    }
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemoryError("out of memory on " + dev.str() + " serving a batch of " +
                           std::to_string(options_.max_batch) + "; try a smaller max batch");
  }
  result_.total_ms = clock.elapsed_ms();
  int64_t rows = 0;
  for (const BatchStep& s : result_.steps)
    rows += s.prefill_tokens > 0 ? static_cast<int64_t>(s.admitted.size()) : 0;
  for (const BatchStep& s : result_.steps) rows += s.decode_tokens;
  result_.average_batch =
      result_.inference_calls ? static_cast<double>(rows) / static_cast<double>(result_.inference_calls) : 0;
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
