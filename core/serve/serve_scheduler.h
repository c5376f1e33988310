#pragma once
// The serving scheduler: continuous batching over requests that arrive at any time, from any
// number of connections. One engine thread owns the model, the KV memory and the adapters; it
// admits waiting requests into free batch places at every step, runs one prefill + decode step,
// and hands each request's tokens to its RequestStream as they are produced. Connection threads
// only submit requests, read their streams and cancel them; they never touch the model.
// Torch-free header (the scheduler's state lives in the .cpp).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "generate/continuous_batching.h"
#include "lora/lora_spec.h"
#include "serve/serve_metrics.h"
#include "serve/structured_output.h"

namespace servelab {

class Model;
class Tokenizer;

// One generated token as a client sees it.
struct ServeToken {
  int32_t id = 0;
  std::string text;      // the text it completes ("" while a UTF-8 character is incomplete)
  double logprob = 0;    // log-softmax of the model's logits at this token
  bool special = false;  // a stop token (EOS)
  bool final = false;    // the request's last token (its result follows at once)
  // Came out of the same engine step as the token before it (speculative decoding accepts several
  // at once): a streaming client gets them in one event.
  bool with_previous = false;
};

// A request's side of the conversation between the engine thread and its connection.
class RequestStream {
 public:
  // What arrived since the last take(), and whether the request has ended.
  struct Update {
    std::vector<ServeToken> tokens;
    bool done = false;  // finished (result set) or failed (error set)
    std::string error, error_type;
    RequestResult result;  // when done without error: finish_reason "length", "eos", "stop", "cancelled"
  };

  // Engine thread.
  void push(ServeToken token);
  void finish(const RequestResult& result);
  void fail(const std::string& message, const std::string& type);

  // Connection thread: waits until something new arrived or timeout passed.
  Update take(std::chrono::milliseconds timeout);
  // Waits until the request started (first token) or ended, or timeout passed; true then.
  bool wait_started(std::chrono::milliseconds timeout);

  // Any thread: the engine drops the request at its next step (its slot is then free).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<ServeToken> tokens_;
  bool started_ = false, done_ = false;
  std::string error_, error_type_;
  RequestResult result_;
  std::atomic<bool> cancelled_{false};
};

// The waiting queue is full (HTTP 429) or the server is shutting down (HTTP 503).
class OverloadedError : public std::runtime_error {
 public:
  OverloadedError(const std::string& m, bool shutting_down)
      : std::runtime_error(m), shutting_down_(shutting_down) {}
  bool shutting_down() const { return shutting_down_; }

 private:
  bool shutting_down_;
};

struct ServeOptions {
  int64_t max_batch = 8;  // requests running at once (KV slots; vLLM's max_num_seqs)
  // Chunked prefill: tokens one engine step computes, decodes first and prompt chunks in what is
  // left (vLLM's max_num_batched_tokens), in [1, context]; 0: every prompt in one step.
  int64_t max_num_batched_tokens = 0;
  int64_t max_queue = 64;  // requests waiting at most; one more is refused
  // Positions per request, prompt + new tokens (each KV slot holds this many); 0: the model's
  // context, at most 2048.
  int64_t max_total_tokens = 0;
  std::vector<AdapterSource> adapters;  // registered at start (--adapter NAME=DIR)
  int64_t adapter_cache_capacity = 8;   // adapters loaded at once (0: no limit)
  MultiLoraStrategy lora_strategy = MultiLoraStrategy::Segmented;
  // KV memory: paged (vLLM's blocks, admission by free blocks, preemption by recompute, prefix
  // caching) or slot (a row of max_total_tokens positions per batch place).
  KvStrategy kv = KvStrategy::Paged;
  // Paged pool: kv_blocks blocks, else kv_budget_bytes' worth, else slot KV's memory (max batch x
  // max total tokens).
  int64_t kv_blocks = 0;
  int64_t kv_budget_bytes = 0;
  int64_t kv_block_size = 16;
  bool prefix_caching = true;
  // Who runs the engine: a thread the scheduler starts (false), or the caller, through run()
  // (true). OpenMP gives every thread that enters a parallel region a team of its own, and libgomp
  // sleeps at every barrier once its teams' threads outnumber the CPUs: a process that already ran
  // the model on one thread (the app's engine thread) serves on that same thread.
  bool engine_on_caller = false;
  // Speculative decoding (its draft model outlives the scheduler). Requests with a grammar
  // (structured output) decode without it.
  SpeculativeConfig speculative;
};

// The KV memory a server runs on, as /info names it.
struct ServeKvInfo {
  std::string kind;  // "paged" or "slot"
  int64_t bytes = 0;
  int64_t blocks = 0, block_size = 0;  // paged only
  bool prefix_caching = false;
};

// Counters, read by /info and the log.
struct ServeStats {
  int64_t running = 0, waiting = 0;
  int64_t submitted = 0, finished = 0, cancelled = 0, failed = 0;
  int64_t steps = 0, generated_tokens = 0;
};

// One request as the Serving tab's table shows it.
struct ServeRequestInfo {
  int64_t id = 0;
  std::string state;  // "waiting", "running", "finished", "cancelled", "failed"
  std::string adapter;
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
  double submitted_s = 0;     // since the scheduler started
  double ttft_ms = -1;        // -1: no token yet
  double elapsed_ms = 0;      // submit -> last token (or now, while waiting)
  double tokens_per_s = 0;    // after the first token: (generated - 1) / (last - first token)
  std::string finish_reason;  // "length", "eos", "stop", "cancelled", or the error
};

class ServeScheduler {
 public:
  // Starts the engine thread (unless options.engine_on_caller). InputError for bad options.
  ServeScheduler(const Model& model, const Tokenizer& tokenizer, ServeOptions options);
  // Cancels whatever still runs and joins the engine thread.
  ~ServeScheduler();
  ServeScheduler(const ServeScheduler&) = delete;
  ServeScheduler& operator=(const ServeScheduler&) = delete;

  // Any thread. Checks the request (InputError naming the value: empty prompt, ids outside the
  // vocabulary, max new tokens < 1, prompt + new tokens over max_total_tokens(), bad sampling, an
  // unknown adapter) and queues it; OverloadedError when the queue is full or the server stops.
  // request.arrival_ms is ignored. constraint (structured output), when given, masks every token
  // of the request; the request then always ends at a stop token.
  std::shared_ptr<RequestStream> submit(BatchRequest request,
                                        std::unique_ptr<TokenConstraint> constraint = nullptr);

  // Any thread: makes an adapter known under name (a hub adapter resolved to a folder); loading
  // happens on the engine thread when a request needs it. No-op when the name is known.
  void register_adapter(const AdapterSource& source);
  bool knows_adapter(const std::string& name) const;
  std::vector<std::string> adapter_names() const;

  // Shutting down: refuse new requests, let the running and waiting ones finish for up to grace,
  // then cancel what is left. Returns the number of requests cancelled.
  int64_t drain(std::chrono::milliseconds grace);

  // With engine_on_caller: runs the engine on this thread until stop_engine() (from another
  // thread); InputError otherwise. Any exception of the engine's leaves through here.
  void run();
  // Ends run() after its current step (the destructor does the same for an engine thread).
  void stop_engine();

  // JSON-schema constraints for this model's vocabulary; nullptr when the build has none.
  StructuredOutput* structured_output() const { return structured_.get(); }

  int64_t max_total_tokens() const { return max_total_tokens_; }
  ServeKvInfo kv_info() const { return kv_info_; }
  const ServeOptions& options() const { return options_; }
  ServeStats stats() const;
  // What /metrics shows, as of the engine's last step.
  ServeMetrics metrics() const;
  // The waiting and running requests and the last ended ones (at most keep_ended), by id.
  std::vector<ServeRequestInfo> requests(size_t keep_ended = 256) const;

 private:
  struct Impl;
  void loop();

  const Model& model_;
  const Tokenizer& tokenizer_;
  ServeOptions options_;
  int64_t max_total_tokens_ = 0;
  ServeKvInfo kv_info_;
  std::unique_ptr<StructuredOutput> structured_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab
