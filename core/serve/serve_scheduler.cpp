#include "serve/serve_scheduler.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "generate/generation.h"
#include "generate/kv_memory_manager.h"
#include "generate/request_tracker.h"
#include "generate/sampling.h"
#include "generate/scheduler_core.h"
#include "generate/speculative.h"
#include "generate/step_executor.h"
#include "generate/token_picker.h"
#include "lora/adapter_cache.h"
#include "lora/lora_adapter.h"
#include "model/model.h"
#include "util/device.h"
#include "util/errors.h"

namespace servelab {

// ---- RequestStream ----------------------------------------------------------------------------

void RequestStream::push(ServeToken token) {
  {
    std::lock_guard lock(mutex_);
    tokens_.push_back(std::move(token));
    started_ = true;
  }
  changed_.notify_all();
}

void RequestStream::finish(const RequestResult& result) {
  {
    std::lock_guard lock(mutex_);
    result_ = result;
    done_ = started_ = true;
  }
  changed_.notify_all();
}

void RequestStream::fail(const std::string& message, const std::string& type) {
  {
    std::lock_guard lock(mutex_);
    error_ = message;
    error_type_ = type;
    done_ = started_ = true;
  }
  changed_.notify_all();
}

RequestStream::Update RequestStream::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !tokens_.empty() || done_; });
  Update u;
  u.tokens.assign(std::make_move_iterator(tokens_.begin()), std::make_move_iterator(tokens_.end()));
  tokens_.clear();
  // Done only once every token has been handed out.
  u.done = done_;
  if (done_) {
    u.error = error_;
    u.error_type = error_type_;
    u.result = result_;
  }
  return u;
}

bool RequestStream::wait_started(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return started_; });
}

// ---- ServeScheduler ---------------------------------------------------------------------------

namespace {

struct Entry {
  int64_t id = 0;
  BatchRequest request;  // the tracker keeps a reference: an Entry never moves (unique_ptr)
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<RequestTracker> tracker;
  std::optional<Sampler> sampler;
  std::shared_ptr<const LoraAdapter> adapter;
  std::unique_ptr<TokenConstraint> constraint;
  std::string acquire_error;  // its adapter could not be loaded: it fails instead of running
  // What the table and /metrics see.
  ServeRequestInfo info;
  std::chrono::steady_clock::time_point submitted, first_token, last_token;
};

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

RequestResult unstarted_result(const Entry& e, const std::string& reason) {
  RequestResult r;
  r.id = e.id;
  r.prompt_ids = e.request.prompt_ids;
  r.adapter = e.request.adapter;
  r.finish_reason = reason;
  return r;
}

}  // namespace

struct ServeScheduler::Impl {
  // Shared with connection threads, under mutex.
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::unique_ptr<Entry>> inbox;  // submitted, not yet taken by the engine thread
  std::vector<AdapterSource> new_sources;    // registered, not yet given to the adapter cache
  std::set<std::string> adapter_names;
  bool stopping = false;    // refuse new requests
  bool cancel_all = false;  // the engine cancels everything it holds
  bool quit = false;        // the engine thread ends
  int64_t next_id = 0;
  ServeStats stats;                      // running / waiting as of the engine's last look
  ServeMetrics metrics;                  // as of the engine's last look
  int64_t rejected = 0;                  // refused at submit (queue full)
  std::vector<ServeRequestInfo> active;  // waiting and running, as of the engine's last look
  std::deque<ServeRequestInfo> ended;    // the last ones to end, oldest first

  // The engine thread's own: the scheduler core over the KV memory, and every request it holds
  // (waiting or running) by id.
  std::unique_ptr<KvMemoryManager> kv;
  std::unique_ptr<SchedulerCore> core;
  std::unique_ptr<Speculator> spec;  // speculative decoding, when on
  std::map<int64_t, std::unique_ptr<Entry>> entries;
  std::unique_ptr<AdapterCache> adapters;
  std::map<int64_t, const LoraAdapter*> held;   // running request -> its adapter, for the routing
  std::map<std::string, int64_t> adapter_keys;  // prefix caching shares blocks per adapter only
  std::vector<int32_t> stop_ids;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::thread thread;

  double now_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
};

ServeScheduler::ServeScheduler(const Model& model, const Tokenizer& tokenizer, ServeOptions options)
    : model_(model), tokenizer_(tokenizer), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  const int64_t context = model.shape().context;
  if (options_.max_batch < 1)
    throw InputError("max batch must be at least 1, got " + std::to_string(options_.max_batch));
  if (options_.max_queue < 0)
    throw InputError("max queue must be 0 or more, got " + std::to_string(options_.max_queue));
  if (options_.adapter_cache_capacity < 0)
    throw InputError("adapter cache must be 0 (no limit) or more, got " +
                     std::to_string(options_.adapter_cache_capacity));
  if (options_.max_total_tokens < 0 || options_.max_total_tokens > context)
    throw InputError("max total tokens must be in [1, " + std::to_string(context) +
                     "] (the model's context), got " + std::to_string(options_.max_total_tokens));
  max_total_tokens_ =
      options_.max_total_tokens > 0 ? options_.max_total_tokens : std::min<int64_t>(context, 2048);
  if (options_.max_num_batched_tokens < 0 || options_.max_num_batched_tokens > context)
    throw InputError("max num batched tokens must be in [1, " + std::to_string(context) +
                     "] (the model's context), or 0 for no budget, got " +
                     std::to_string(options_.max_num_batched_tokens));
  Impl& s = *impl_;
  s.stop_ids = generation_stop_ids(model, tokenizer);
  if (StructuredOutput::available())
    structured_ = std::make_unique<StructuredOutput>(tokenizer, model.shape().vocab_size, s.stop_ids);
  if (options_.kv != KvStrategy::Paged && options_.kv != KvStrategy::SlotKv)
    throw InputError(std::string("the server's KV memory must be paged or slot, got ") +
                     kv_strategy_name(options_.kv));
  PagedKvConfig paged;
  kv_info_.kind = options_.kv == KvStrategy::Paged ? "paged" : "slot";
  if (options_.kv == KvStrategy::Paged) {
    if (options_.kv_block_size < 1 || options_.kv_block_size > 4096)
      throw InputError("KV block size must be in [1, 4096] positions, got " +
                       std::to_string(options_.kv_block_size));
    if (options_.kv_blocks < 0 || options_.kv_budget_bytes < 0)
      throw InputError("the KV budget must be positive (0: slot KV's memory)");
    const int64_t block_bytes = model.kv_cache_bytes(1, options_.kv_block_size);
    paged.block_size = options_.kv_block_size;
    paged.prefix_caching = options_.prefix_caching;
    paged.num_blocks =
        options_.kv_blocks > 0 ? options_.kv_blocks
        : options_.kv_budget_bytes > 0
            ? options_.kv_budget_bytes / block_bytes
            : options_.max_batch * ((max_total_tokens_ + paged.block_size - 1) / paged.block_size);
    if (paged.num_blocks < 1)
      throw InputError("a KV budget of " + std::to_string(options_.kv_budget_bytes) +
                       " bytes holds no block of " + std::to_string(paged.block_size) + " positions (" +
                       std::to_string(block_bytes) + " bytes for this model)");
    if (paged.num_blocks > (int64_t{1} << 24))
      throw InputError("a KV pool of " + std::to_string(paged.num_blocks) +
                       " blocks is more than 16M blocks");
    kv_info_.blocks = paged.num_blocks;
    kv_info_.block_size = paged.block_size;
    kv_info_.prefix_caching = paged.prefix_caching;
  }
  s.kv = make_kv_memory_manager(options_.kv, model, options_.max_batch, max_total_tokens_,
                                padding_id(model, tokenizer), paged);
  kv_info_.bytes = s.kv->usage().total_bytes;
  const int64_t capacity = options_.adapter_cache_capacity > 0 ? options_.adapter_cache_capacity
                                                               : std::numeric_limits<int32_t>::max();
  s.adapters = std::make_unique<AdapterCache>(model, options_.adapters, capacity);
  for (const AdapterSource& a : options_.adapters) s.adapter_names.insert(a.name);
  KvMemoryManager::LoraRouting routing;
  routing.adapter_of = [&s](int64_t id) -> const LoraAdapter* {
    const auto it = s.held.find(id);
    return it == s.held.end() ? nullptr : it->second;
  };
  routing.strategy = options_.lora_strategy;
  routing.stack = [&s] { return s.adapters->stack(); };
  s.kv->set_lora(std::move(routing));
  // A request's adapter is loaded (or found in the cache) before it is admitted; while the cache
  // is full of adapters running requests need, the queue waits. One that cannot be loaded fails.
  SchedulerCore::Hooks hooks;
  hooks.acquire = [&s](int64_t id) {
    Entry& e = *s.entries.at(id);
    if (e.request.adapter.empty()) return true;
    try {
      e.adapter = s.adapters->acquire(e.request.adapter);
    } catch (const std::exception& ex) {
      e.acquire_error = "adapter '" + e.request.adapter + "' could not be loaded: " + ex.what();
      return false;
    }
    if (!e.adapter) return false;
    s.held[id] = e.adapter.get();
    return true;
  };
  hooks.release = [&s](int64_t id) {
    Entry& e = *s.entries.at(id);
    if (s.held.erase(id)) {
      s.adapters->release(e.request.adapter);
      e.adapter.reset();
    }
  };
  s.core = std::make_unique<SchedulerCore>(
      *s.kv, SchedulerConfig{options_.max_batch, options_.max_num_batched_tokens}, std::move(hooks));
  if (options_.speculative.enabled()) {
    s.spec = std::make_unique<Speculator>(options_.speculative, model, options_.max_batch, max_total_tokens_,
                                          padding_id(model, tokenizer));
  }
  if (!options_.engine_on_caller) s.thread = std::thread([this] { loop(); });
}

void ServeScheduler::run() {
  if (!options_.engine_on_caller)
    throw InputError("this scheduler runs its own engine thread (ServeOptions::engine_on_caller is off)");
  loop();
}

void ServeScheduler::stop_engine() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->quit = true;
  }
  impl_->wake.notify_all();
}

ServeScheduler::~ServeScheduler() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = impl_->quit = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Nobody waits forever on a request the engine never saw or never finished.
  for (auto& e : impl_->inbox) e->stream->finish(unstarted_result(*e, "cancelled"));
  for (auto& [id, e] : impl_->entries) {
    if (e->tracker) {  // running, or preempted with tokens already
      e->tracker->finish("cancelled");
      e->stream->finish(e->tracker->result());
    } else {
      e->stream->finish(unstarted_result(*e, "cancelled"));
    }
  }
}

std::shared_ptr<RequestStream> ServeScheduler::submit(BatchRequest request,
                                                      std::unique_ptr<TokenConstraint> constraint) {
  const int64_t vocab = model_.shape().vocab_size;
  const int64_t prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (prompt == 0) throw InputError("the prompt is empty: it needs at least one token");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= vocab)
      throw InputError("token id " + std::to_string(id) + " is outside the vocabulary of " +
                       std::to_string(vocab));
  if (request.max_new_tokens < 1)
    throw InputError("max new tokens must be at least 1, got " + std::to_string(request.max_new_tokens));
  if (prompt + request.max_new_tokens > max_total_tokens_)
    throw InputError(
        "the prompt has " + std::to_string(prompt) + " tokens and " + std::to_string(request.max_new_tokens) +
        " new tokens are asked for: " + std::to_string(prompt + request.max_new_tokens) + " exceeds the " +
        std::to_string(max_total_tokens_) + " positions a request may use (model context " +
        std::to_string(model_.shape().context) + ")");
  if (kv_info_.blocks > 0) {
    // The last generated token is never fed back, so it needs no position.
    const int64_t positions = std::max<int64_t>(prompt, prompt + request.max_new_tokens - 1);
    const int64_t need = (positions + kv_info_.block_size - 1) / kv_info_.block_size;
    if (need > kv_info_.blocks)
      throw InputError("the request needs " + std::to_string(need) + " KV blocks of " +
                       std::to_string(kv_info_.block_size) + " positions (" + std::to_string(prompt) +
                       " prompt + " + std::to_string(request.max_new_tokens) +
                       " new tokens); the server's KV budget holds " + std::to_string(kv_info_.blocks));
  }
  request.sampling.validate();
  request.arrival_ms = 0;
  if (constraint) request.stop_at_eos = true;  // a complete JSON text leaves only the stop tokens
  auto entry = std::make_unique<Entry>();
  entry->constraint = std::move(constraint);
  entry->stream = std::make_shared<RequestStream>();
  std::shared_ptr<RequestStream> stream = entry->stream;
  {
    std::lock_guard lock(impl_->mutex);
    if (!request.adapter.empty() && !impl_->adapter_names.count(request.adapter))
      throw InputError("unknown adapter '" + request.adapter + "'");
    if (impl_->stopping) throw OverloadedError("the server is shutting down", true);
    const int64_t queued = impl_->stats.waiting + static_cast<int64_t>(impl_->inbox.size());
    const int64_t free_slots = options_.max_batch - impl_->stats.running;
    if (queued >= options_.max_queue + std::max<int64_t>(free_slots, 0)) {
      ++impl_->rejected;
      throw OverloadedError("the queue is full: " + std::to_string(queued) + " requests waiting (max queue " +
                                std::to_string(options_.max_queue) + ")",
                            false);
    }
    entry->id = impl_->next_id++;
    entry->submitted = Clock::now();
    entry->info.id = entry->id;
    entry->info.state = "waiting";
    entry->info.adapter = request.adapter;
    entry->info.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
    entry->info.submitted_s = seconds_between(impl_->start, entry->submitted);
    entry->request = std::move(request);
    impl_->inbox.push_back(std::move(entry));
    ++impl_->stats.submitted;
  }
  impl_->wake.notify_all();
  return stream;
}

void ServeScheduler::register_adapter(const AdapterSource& source) {
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->adapter_names.insert(source.name).second) return;
    impl_->new_sources.push_back(source);
  }
  impl_->wake.notify_all();
}

bool ServeScheduler::knows_adapter(const std::string& name) const {
  std::lock_guard lock(impl_->mutex);
  return impl_->adapter_names.count(name) > 0;
}

std::vector<std::string> ServeScheduler::adapter_names() const {
  std::lock_guard lock(impl_->mutex);
  return {impl_->adapter_names.begin(), impl_->adapter_names.end()};
}

ServeStats ServeScheduler::stats() const {
  std::lock_guard lock(impl_->mutex);
  ServeStats s = impl_->stats;
  s.waiting += static_cast<int64_t>(impl_->inbox.size());
  return s;
}

ServeMetrics ServeScheduler::metrics() const {
  std::lock_guard lock(impl_->mutex);
  ServeMetrics m = impl_->metrics;
  m.waiting += static_cast<int64_t>(impl_->inbox.size());
  m.rejected = impl_->rejected;
  return m;
}

std::vector<ServeRequestInfo> ServeScheduler::requests(size_t keep_ended) const {
  std::lock_guard lock(impl_->mutex);
  std::vector<ServeRequestInfo> out;
  const size_t skip = impl_->ended.size() > keep_ended ? impl_->ended.size() - keep_ended : 0;
  out.insert(out.end(), impl_->ended.begin() + static_cast<std::ptrdiff_t>(skip), impl_->ended.end());
  out.insert(out.end(), impl_->active.begin(), impl_->active.end());
  for (const auto& e : impl_->inbox) out.push_back(e->info);
  const double now_s = seconds_between(impl_->start, Clock::now());
  for (ServeRequestInfo& r : out)
    if (r.state == "waiting") r.elapsed_ms = (now_s - r.submitted_s) * 1000;
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

int64_t ServeScheduler::drain(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  const auto until = std::chrono::steady_clock::now() + grace;
  auto idle = [&] {
    std::lock_guard lock(impl_->mutex);
    return impl_->inbox.empty() && impl_->stats.running == 0 && impl_->stats.waiting == 0;
  };
  while (!idle() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  int64_t before = 0;
  {
    std::lock_guard lock(impl_->mutex);
    before = impl_->stats.cancelled;
    impl_->cancel_all = true;
  }
  impl_->wake.notify_all();
  // The engine cancels within one step; bounded anyway.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!idle() && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::lock_guard lock(impl_->mutex);
  return impl_->stats.cancelled - before;
}

void ServeScheduler::loop() {
  at::init_num_threads();  // this thread takes the engine's thread count (OpenMP's is per thread)
  c10::InferenceMode guard;
  Impl& s = *impl_;
  SchedulerCore& core = *s.core;
  int64_t cancelled = 0, finished = 0, failed = 0, generated = 0, steps = 0;
  ServeMetrics em;  // the engine's own, published under the lock
  em.max_batch = options_.max_batch;
  em.max_queue = options_.max_queue;
  em.kv_positions_total =
      kv_info_.blocks > 0 ? kv_info_.blocks * kv_info_.block_size : options_.max_batch * max_total_tokens_;
  const bool chunked = options_.max_num_batched_tokens > 0;
  std::vector<ServeRequestInfo> ended;  // since the last publish
  // The phase clock: lap(p) books the time since the last lap to phase p.
  Clock::time_point lap_start = Clock::now();
  auto lap = [&](size_t phase) {
    const Clock::time_point now = Clock::now();
    em.engine_phase_seconds[phase] += seconds_between(lap_start, now);
    lap_start = now;
  };
  enum : size_t { kIdle, kSchedule, kPrefill, kDecode, kKv, kSample, kFinish };

  // A request leaves the scheduler: its row in the table and its counters.
  auto ended_as = [&](Entry& e, const std::string& state, const std::string& reason) {
    e.info.state = state;
    e.info.finish_reason = reason;
    if (state == "failed") {
      ++em.failed;
    } else {
      ++em.finished[state == "cancelled" ? "abort" : reason == "length" ? "length" : "stop"];
      if (state == "finished" && e.info.generated > 0)
        em.e2e.observe(seconds_between(e.submitted, e.last_token));
    }
    if (e.info.generated == 0) e.info.elapsed_ms = seconds_between(e.submitted, Clock::now()) * 1000;
    ended.push_back(e.info);
  };
  // Takes a request out of the core (its memory and adapter pin) and out of the engine's hands.
  auto remove = [&](int64_t id) {
    core.finish(id);
    if (s.spec) s.spec->finish(id);
    std::unique_ptr<Entry> e = std::move(s.entries.at(id));
    s.entries.erase(id);
    return e;
  };
  std::vector<std::unique_ptr<Entry>> done;  // finished this step; their streams end after publish
  auto fail = [&](int64_t id, const std::string& message) {
    std::unique_ptr<Entry> e = remove(id);
    e->stream->fail(message, "generation");
    ended_as(*e, "failed", message);
    ++failed;
  };
  auto fail_running = [&](const std::string& message) {
    const std::vector<int64_t> running = core.running();
    for (int64_t id : running) fail(id, message);
  };
  // Hands a request the tokens one step gave it (one, or a verified row's accepted proposals and
  // the target's own), each with its log-probability; stops where the request finishes.
  auto hand_over = [&](int64_t rid, const std::vector<PickedToken>& picked) {
    Entry& e = *s.entries.at(rid);
    const double ms = s.now_ms();
    const Clock::time_point now = Clock::now();
    for (size_t k = 0; k < picked.size(); ++k) {
      if (e.info.generated == 0) {
        e.first_token = now;
        e.info.ttft_ms = seconds_between(e.submitted, now) * 1000;
        em.ttft.observe(seconds_between(e.submitted, now));
      } else {
        em.inter_token.observe(seconds_between(e.last_token, now));
      }
      e.last_token = now;
      ++e.info.generated;
      e.info.elapsed_ms = seconds_between(e.submitted, now) * 1000;
      const double decode_s = seconds_between(e.first_token, now);
      e.info.tokens_per_s = decode_s > 0 ? static_cast<double>(e.info.generated - 1) / decode_s : 0.0;
      ++em.generation_tokens;
      const int32_t id = picked[k].id;
      ServeToken t;
      t.id = id;
      t.text = e.tracker->push(id, ms);
      t.logprob = picked[k].logprob;
      t.top = picked[k].top;
      t.special = e.tracker->result().finish_reason == "eos";
      if (t.special) t.text = tokenizer_.token_bytes(id);
      t.final = e.tracker->finished();
      t.with_previous = k > 0;
      e.stream->push(std::move(t));
      core.append(rid, id);
      ++generated;
      if (e.tracker->finished()) {
        std::unique_ptr<Entry> gone = remove(rid);
        ended_as(*gone, "finished", gone->tracker->result().finish_reason);
        ++finished;
        done.push_back(std::move(gone));
        return;
      }
    }
  };
  auto pick_row = [&](int64_t id) {
    Entry& e = *s.entries.at(id);
    return PickRow{&e.request.sampling,   &*e.sampler,
                   &e.request.prompt_ids, &e.tracker->result().generated_ids,
                   e.constraint.get(),    true};
  };
  // Picks each row's next token and hands it to its request.
  auto take_tokens = [&](const at::Tensor& logits, const std::vector<int64_t>& ids) {
    std::vector<PickRow> rows;
    for (int64_t id : ids) rows.push_back(pick_row(id));
    const std::vector<PickedToken> picked =
        pick_tokens(logits, rows,
                    "server step " + std::to_string(steps + 1) + " (request " +
                        std::to_string(ids.front() + 1) + " and its batch)");
    for (size_t i = 0; i < ids.size(); ++i) hand_over(ids[i], {picked[i]});
  };
  // Decode rows that verified proposals (speculative decoding): each row's accepted tokens; the
  // rejected proposals' KV is taken back once the core has run the plan (settle).
  struct Settle {
    int64_t id, start, accepted;
  };
  std::vector<Settle> settling;
  auto take_verified = [&](const at::Tensor& logits, const SchedulePlan& plan) {
    const std::vector<int64_t> at = decode_rows(plan);
    for (size_t i = 0; i < plan.decode.size(); ++i) {
      const int64_t id = plan.decode[i];
      const std::vector<int32_t>& draft = plan.drafts[i];
      const std::string where =
          "server step " + std::to_string(steps + 1) + " (request " + std::to_string(id + 1) + ")";
      const at::Tensor rows = logits.narrow(0, at[i], at[i + 1] - at[i]);
      const int64_t start = core.request(id).computed;
      const Verification v = draft.empty() ? verify_proposal(rows, draft, {}, pick_row(id), where)
                                           : s.spec->verify(id, rows, draft, pick_row(id), where);
      if (!draft.empty()) settling.push_back({id, start, v.accepted});
      hand_over(id, v.tokens);
    }
  };
  // What a plan decided before it runs: preemptions (back to waiting, their streams untouched),
  // admissions (a request's first admission starts its tracker), failed adapter loads.
  auto note_plan = [&](const SchedulePlan& plan) {
    for (const auto& [id, why] : plan.rejected) {
      // submit() refuses what can never fit; a rejection here is the KV memory's last word.
      std::unique_ptr<Entry> e = std::move(s.entries.at(id));
      s.entries.erase(id);
      e->stream->fail(why, "generation");
      ended_as(*e, "failed", why);
      ++failed;
    }
    for (int64_t id : plan.preempted) {
      s.entries.at(id)->info.state = "waiting";
      ++em.preemptions;
      if (s.spec) s.spec->finish(id);
    }
    for (int64_t id : plan.admitted) {
      Entry& e = *s.entries.at(id);
      const SchedulerCore::Request& r = core.request(id);
      if (kv_info_.prefix_caching) {
        em.prefix_cache_queries += static_cast<int64_t>(r.tokens.size());
        em.prefix_cache_hits += s.kv->cached_tokens(id);
      }
      e.info.state = "running";
      if (!e.tracker) {
        e.tracker = std::make_unique<RequestTracker>(tokenizer_, e.request, e.id, s.stop_ids);
        em.queue_time.observe(seconds_between(e.submitted, Clock::now()));
        em.prompt_tokens += e.info.prompt_tokens;
        e.sampler.emplace(e.request.sampling);
        e.tracker->admitted(-1, steps, s.now_ms());
      }
    }
    std::vector<int64_t> unloadable;
    for (const auto& [id, e] : s.entries)
      if (!e->acquire_error.empty()) unloadable.push_back(id);
    for (int64_t id : unloadable) fail(id, s.entries.at(id)->acquire_error);
  };
  // Decodes first (the running streams' tokens go out before a prompt chunk runs), then chunks.
  auto execute = [&](const SchedulePlan& plan) {
    lap(kKv);
    auto take_decoded = [&](const at::Tensor& logits) {
      if (std::any_of(plan.drafts.begin(), plan.drafts.end(), [](const auto& d) { return !d.empty(); }))
        take_verified(logits, plan);
      else
        take_tokens(logits, plan.decode);
    };
    const std::vector<int64_t> sampled = prefill_sampled_ids(plan);
    if (runs_mixed(*s.kv, plan)) {
      // Chunked prefill's step: the decode rows and the prompt chunks in one forward.
      const StepLogits logits = run_mixed(*s.kv, core, plan);
      lap(kDecode);
      take_decoded(logits.decode);
      if (!sampled.empty()) take_tokens(logits.prefill, sampled);
      lap(kSample);
    } else {
      if (!plan.decode.empty()) {
        const at::Tensor logits = run_decodes(*s.kv, core, plan);
        lap(kDecode);
        take_decoded(logits);
        lap(kSample);
      }
      if (!plan.prefill.empty()) {
        const at::Tensor logits = run_prefills(*s.kv, core, plan);
        lap(kPrefill);
        if (!sampled.empty()) take_tokens(logits, sampled);
        lap(kSample);
      }
    }
    core.ran(plan);
    for (const Settle& st : std::exchange(settling, {})) s.spec->settle(core, st.id, st.start, st.accepted);
  };
  // Proposals for the decoding requests (speculative decoding). A request under a grammar gets
  // them too: the drafter does not know the grammar, verification masks each row with it.
  auto propose = [&] {
    if (!s.spec) return;
    s.spec->propose(core,
                    [&](int64_t id) -> const SamplingParams* { return &s.entries.at(id)->request.sampling; });
  };

  // The counters connection threads read (the queue limit among them); under the lock.
  auto publish = [&] {
    s.stats.running = static_cast<int64_t>(core.running().size());
    s.stats.waiting = static_cast<int64_t>(core.waiting().size());
    s.stats.cancelled = cancelled;
    s.stats.finished = finished;
    s.stats.failed = failed;
    s.stats.generated_tokens = generated;
    s.stats.steps = steps;
    em.running = s.stats.running;
    em.waiting = s.stats.waiting;
    em.steps = steps;
    em.kv_bytes = s.kv->bytes();
    const KvMemoryManager::Usage usage = s.kv->usage();
    em.kv_paged = kv_info_.kind == "paged";
    em.kv_blocks_total = usage.blocks_total;
    em.kv_blocks_used = usage.blocks_used;
    em.kv_blocks_cached = usage.blocks_cached;
    em.kv_positions_used = 0;
    for (int64_t id : core.running()) {
      const Entry& e = *s.entries.at(id);
      em.kv_positions_used += e.info.prompt_tokens + e.info.generated;
    }
    em.adapters = s.adapters->stats();
    if (s.spec) {
      em.speculative = true;
      em.spec_decode = s.spec->stats();
    }
    s.metrics = em;
    s.active.clear();
    for (int64_t id : core.waiting()) s.active.push_back(s.entries.at(id)->info);
    for (int64_t id : core.running()) s.active.push_back(s.entries.at(id)->info);
    for (ServeRequestInfo& r : ended) s.ended.push_back(std::move(r));
    ended.clear();
    while (s.ended.size() > 1024) s.ended.pop_front();
  };

  for (;;) {
    bool cancel_all = false;
    {
      std::unique_lock lock(s.mutex);
      publish();
      lap(kSchedule);
      s.wake.wait(lock, [&] {
        return s.quit || s.cancel_all || !s.inbox.empty() || !s.new_sources.empty() || !core.idle();
      });
      lap(kIdle);
      if (s.quit) break;
      for (auto& e : s.inbox) {
        const int64_t id = e->id;
        int64_t& key = s.adapter_keys[e->request.adapter];
        if (key == 0 && !e->request.adapter.empty()) key = static_cast<int64_t>(s.adapter_keys.size());
        core.add(id, e->request.prompt_ids, e->request.max_new_tokens, s.now_ms(), key);
        s.entries.emplace(id, std::move(e));
      }
      s.inbox.clear();
      publish();
      for (AdapterSource& a : s.new_sources) s.adapters->add_source(std::move(a));
      s.new_sources.clear();
      cancel_all = s.cancel_all;
    }

    // Cancelled requests leave first: a waiting one never runs, a running one frees its memory now.
    std::vector<int64_t> cancelling;
    for (const auto& [id, e] : s.entries)
      if (cancel_all || e->stream->cancelled()) cancelling.push_back(id);
    for (int64_t id : cancelling) {
      std::unique_ptr<Entry> e = remove(id);
      if (e->tracker) {  // running, or preempted with tokens already
        e->tracker->finish("cancelled");
        e->stream->finish(e->tracker->result());
      } else {
        e->stream->finish(unstarted_result(*e, "cancelled"));
      }
      ended_as(*e, "cancelled", "cancelled");
      ++cancelled;
    }
    if (core.idle()) continue;

    lap(kSchedule);
    try {
      // Without a budget, the course's step: admissions prefill, then everyone decodes (the
      // just-admitted included); with one, a single plan of decodes and prompt chunks.
      if (chunked) propose();
      const SchedulePlan plan = core.schedule(s.now_ms(), /*admit=*/true, /*decode=*/chunked);
      note_plan(plan);
      {
        std::lock_guard lock(s.mutex);
        publish();
      }
      if (plan.empty() && core.running().empty()) continue;
      execute(plan);
      if (!chunked) {
        propose();
        const SchedulePlan decodes = core.schedule(s.now_ms(), /*admit=*/false, /*decode=*/true);
        note_plan(decodes);
        execute(decodes);
      }
    } catch (const c10::Error& e) {
      fail_running(is_out_of_memory(e)
                       ? "out of memory serving a batch of " + std::to_string(core.running().size())
                       : std::string("libtorch error: ") + e.what_without_backtrace());
      continue;
    } catch (const std::exception& e) {
      fail_running(e.what());
      continue;
    }
    ++steps;
    em.batch_rows += static_cast<int64_t>(core.running().size() + done.size());
    lap(kFinish);
    if (done.empty()) continue;
    // The counters first: a client that has its answer finds it counted in /metrics.
    {
      std::lock_guard lock(s.mutex);
      publish();
    }
    for (auto& e : done) e->stream->finish(e->tracker->result());
    done.clear();
  }
}

}  // namespace servelab
