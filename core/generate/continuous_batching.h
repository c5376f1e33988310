#pragma once
// Serving a queue of requests: continuous batching (requests join and leave the running batch at
// every step) and the synchronous static batching it replaces (lesson 3). Torch-free: the GUI and
// the CLI include this; the scheduler and the KV memory managers live behind it in .cpp files and
// torch-side headers (generate/continuous_batch_scheduler.h, generate/kv_memory_manager.h).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "generate/sampling_params.h"
#include "generate/speculative_config.h"
#include "lora/lora_spec.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

class Model;  // model/model.h

// One request of the queue. Sampling is per request (each has its own seeded generator); greedy
// requests give exactly the tokens generate() gives for the prompt alone.
struct BatchRequest {
  std::vector<int32_t> prompt_ids;
  int64_t max_new_tokens = 10;
  SamplingParams sampling;
  bool stop_at_eos = true;
  std::vector<std::string> stop_strings;
  double arrival_ms = 0;  // offset from the start of the run; never admitted earlier
  // >= 0: the request joins the queue at the start of this scheduler step instead (arrival_ms is
  // then that step's start): a scenario tied to the scheduler's progress, not to this machine's
  // speed. Continuous batching only.
  int64_t arrival_step = -1;
  // An adapter of BatchOptions::adapters by name; empty runs the base model. Requests with
  // different adapters share decode steps (heterogeneous batching, as LoRAX does).
  std::string adapter;
};

// How the running batch's KV memory is kept.
enum class KvStrategy {
  // Ours: one preallocated row ("slot") per batch place, written in place; admitting or retiring a
  // request never touches the other requests' caches.
  SlotKv,
  // The course's: one left-padded cache; admitting re-pads and concatenates every cache, retiring
  // filters rows and trims padding, copying everything each time.
  NaiveMergeFilter,
  // vLLM's PagedAttention: a pool of fixed-size blocks handed out as a request grows, a block
  // table per request, full blocks shared between requests with the same prefix (prefix caching).
  // Admission waits for blocks; when decoding runs out, the latest admitted request is preempted
  // and recomputed later.
  Paged,
};

// How paged KV's decode attention reads the blocks: in place (CPU kernel), or gathered into a
// contiguous copy for SDPA (the baseline, and the CUDA path). Auto: in place on the CPU.
enum class PagedAttentionKernel { Auto, InPlace, Gather };
const char* kv_strategy_name(KvStrategy strategy);

struct BatchOptions {
  int64_t max_batch = 8;  // requests running at once (slots; vLLM's max_num_seqs)
  // Chunked prefill: tokens one step computes, decodes first and prompt chunks in what is left
  // (vLLM's max_num_batched_tokens), in [1, context]; 0: off, every prompt in one piece and
  // admitted requests decode in the step they prefill (the course's scheduler).
  int64_t max_num_batched_tokens = 0;
  KvStrategy kv = KvStrategy::SlotKv;
  const std::atomic<bool>* cancel = nullptr;  // checked before every step; the run then returns
  // Adapters requests may name, loaded on demand into a cache of adapter_cache_capacity adapters
  // (0: as many as there are); when it is full, the least recently used adapter no running
  // request needs is evicted, and a request whose adapter cannot be loaded waits.
  std::vector<AdapterSource> adapters;
  int64_t adapter_cache_capacity = 0;
  MultiLoraStrategy lora_strategy = MultiLoraStrategy::Segmented;
  // Paged KV: a pool of kv_blocks blocks of kv_block_size positions (0 blocks: enough for max_batch
  // requests of the longest, i.e. slot KV's memory), with or without prefix caching.
  int64_t kv_blocks = 0;
  int64_t kv_block_size = 16;
  bool prefix_caching = true;
  PagedAttentionKernel paged_attention = PagedAttentionKernel::Auto;
  // Speculative decoding (slot or paged KV): proposals verified in each decode (off by default).
  SpeculativeConfig speculative;
};

// One admission of a request and the batch place it ran in from then on. Paged KV preempts a
// request and admits it again later, often into another place.
struct RequestAdmission {
  int64_t step = -1;
  int64_t slot = -1;
};

// What happened to one request. Times are milliseconds since the start of the run.
struct RequestResult {
  int64_t id = 0;  // index in the request list
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;                          // decoded generated text (stop string cut off)
  std::string finish_reason;                 // "length", "eos", "stop" or "cancelled"
  int64_t slot = -1;                         // batch place it ran in first (-1: never admitted)
  std::vector<RequestAdmission> admissions;  // every admission in step order, readmissions included
  int64_t preemptions = 0;                   // times paged KV evicted it to be recomputed
  int64_t cached_tokens = 0;  // prompt positions found in the prefix cache at its (first) admission
  std::string error;          // why it never ran (finish_reason "error"), e.g. too big for the KV budget
  std::string adapter;        // as requested
  double arrival_ms = 0;
  double admitted_ms = -1;
  int64_t admitted_step = -1;
  int64_t finished_step = -1;
  double queue_wait_ms = 0;      // admitted - arrival
  double ttft_ms = 0;            // first token - arrival
  double latency_ms = 0;         // last token - arrival
  std::vector<double> token_ms;  // when each generated token was ready
};

// Paged KV: one running request's block table after a step (its blocks in position order).
struct KvBlockTable {
  int64_t request = 0;
  std::vector<int64_t> blocks;
};

// A piece of a prompt computed in one step (several, with chunked prefill).
struct PrefillChunk {
  int64_t request = 0;
  int64_t start = 0;  // first position
  int64_t count = 0;  // positions
  bool last = false;  // ends the prompt (the request's first token came from it)
};

// One scheduler step: admissions with their prefill, one decode for the running batch, retirement.
struct BatchStep {
  int64_t step = 0;
  double start_ms = 0;
  double ms = 0;                     // device-synchronised duration
  int64_t running = 0;               // requests in the batch this step
  int64_t prefill_tokens = 0;        // prompt positions computed (and found cached, for admissions)
  std::vector<PrefillChunk> chunks;  // the prompt pieces computed, whole prompts without a budget
  int64_t decode_tokens = 0;         // rows decoded
  int64_t forward_calls = 0;
  // KV memory moved between caches this step (admission and retirement bookkeeping): the course's
  // merge/filter re-pads and copies every running request; slot KV copies at most the admitted
  // requests' own prompts.
  int64_t kv_copy_bytes = 0;
  double kv_copy_ms = 0;
  // Of ms: the admitted prompts' forward pass (KV copies excluded). ms - prefill_ms is what the
  // running requests waited for this step beyond newcomers' prompts: decode, copies, bookkeeping.
  double prefill_ms = 0;
  std::vector<int64_t> admitted, retired;
  // Paged KV: requests evicted this step to be recomputed later (the latest admitted first), and
  // of prefill_tokens, the prompt positions found cached (their prefill skipped).
  std::vector<int64_t> preempted;
  int64_t prefix_hit_tokens = 0;
  // KV memory after the step: held for running requests (slots, or blocks), holding real
  // positions (the rest is reserved but unused: fragmentation), and the whole pool or cache.
  int64_t kv_reserved_bytes = 0;
  int64_t kv_used_bytes = 0;
  int64_t kv_total_bytes = 0;
  int64_t kv_blocks_used = 0;    // paged: blocks referenced by running requests
  int64_t kv_blocks_cached = 0;  // paged: blocks kept for the prefix cache that nobody uses
  int64_t kv_blocks_total = 0;   // paged: blocks in the pool
  // Paged: the pool after the step, for the KV memory view: every running request's block table
  // (a shared prefix block appears in several) and the cached blocks nobody uses, least recently
  // used first. Taken after ms is measured, so the snapshot is not part of the step's time.
  std::vector<KvBlockTable> kv_block_tables;
  std::vector<int64_t> kv_cached_blocks;
  // Speculative decoding: the decode rows that verified proposals this step.
  std::vector<SpecRow> speculation;
  int64_t adapters_in_step = 0;     // distinct adapters among the running requests
  AdapterCacheStats adapter_cache;  // counters after this step
};

struct BatchRunResult {
  std::string method;  // "continuous (slot KV)", "continuous (merge/filter)", "synchronous"
  std::vector<RequestResult> requests;
  std::vector<BatchStep> steps;
  int64_t inference_calls = 0;   // forward passes
  int64_t max_batch = 0;         // most rows in one forward pass
  double average_batch = 0;      // rows per forward pass
  int64_t generated_tokens = 0;  // sum over requests
  double total_ms = 0;
  int64_t kv_cache_bytes = 0;  // largest KV memory held at once
  int64_t kv_copy_bytes = 0;   // KV memory moved between caches, over all steps
  int64_t max_running = 0;     // most requests holding KV memory at once
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;        // prompt positions admitted (recomputations included)
  int64_t prefix_hit_tokens = 0;    // of which found in the prefix cache
  AdapterCacheStats adapter_cache;  // at the end of the run
  SpecDecodeStats speculative;      // speculative decoding's counters (zero when off)
  bool cancelled = false;
};

// Live progress for a Gantt chart. Calls come from the engine thread, in step order.
class BatchSink {
 public:
  virtual ~BatchSink() = default;
  // A run begins: its method name, the number of requests and of batch places (slots).
  virtual void on_run_start(const std::string& /*method*/, int64_t /*requests*/, int64_t /*slots*/) {}
  virtual void on_admit(int64_t /*request*/, int64_t /*slot*/, int64_t /*step*/, double /*ms*/) {}
  virtual void on_token(int64_t /*request*/, int32_t /*id*/, const std::string& /*piece*/, int64_t /*step*/,
                        double /*ms*/) {}
  virtual void on_retire(const RequestResult&) {}
  virtual void on_step(const BatchStep&) {}
  // Paged KV: a running request evicted to be recomputed (its tokens so far are kept), and an
  // admission whose first cached_tokens prompt positions came from the prefix cache.
  virtual void on_preempt(int64_t /*request*/, int64_t /*step*/, double /*ms*/) {}
  virtual void on_prefix_hit(int64_t /*request*/, int64_t /*cached_tokens*/, int64_t /*step*/) {}
};

// Passes every event on to another sink (when there is one); experiments derive from it to watch
// a run and still let the caller see it live.
class ForwardingBatchSink : public BatchSink {
 public:
  explicit ForwardingBatchSink(BatchSink* next) : next_(next) {}
  void on_run_start(const std::string& method, int64_t requests, int64_t slots) override {
    if (next_) next_->on_run_start(method, requests, slots);
  }
  void on_admit(int64_t request, int64_t slot, int64_t step, double ms) override {
    if (next_) next_->on_admit(request, slot, step, ms);
  }
  void on_token(int64_t request, int32_t id, const std::string& piece, int64_t step, double ms) override {
    if (next_) next_->on_token(request, id, piece, step, ms);
  }
  void on_retire(const RequestResult& r) override {
    if (next_) next_->on_retire(r);
  }
  void on_step(const BatchStep& s) override {
    if (next_) next_->on_step(s);
  }
  void on_preempt(int64_t request, int64_t step, double ms) override {
    if (next_) next_->on_preempt(request, step, ms);
  }
  void on_prefix_hit(int64_t request, int64_t cached_tokens, int64_t step) override {
    if (next_) next_->on_prefix_hit(request, cached_tokens, step);
  }

 private:
  BatchSink* next_;
};

// InputError naming the request and value at fault: no requests, max batch < 1, an empty prompt,
// ids outside the vocabulary, max new tokens < 1, prompt + new tokens over the context, a negative
// arrival time, bad sampling parameters.
void check_batch_requests(const Model& model, const std::vector<BatchRequest>& requests,
                          const BatchOptions& options);

// Continuous batching with options.kv memory. On cancel, returns what it has: finished requests
// whole, the others "cancelled" with the tokens they got.
BatchRunResult run_continuous_batching(const Model& model, const Tokenizer& tokenizer,
                                       const std::vector<BatchRequest>& requests, const BatchOptions& options,
                                       BatchSink* sink = nullptr);

}  // namespace servelab
