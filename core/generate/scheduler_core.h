#pragma once
// The scheduler of continuous batching, as vLLM's V1 engine splits it: schedule() decides who
// computes how many tokens this step and talks to the KV bookkeeping (never to the model); an
// executor runs the plan (generate/step_executor.h); the token picker picks every row's token
// (generate/token_picker.h), and the caller reports the tokens back (append, finish). Torch-free,
// so that its decisions are tested without a model (tests/core/test_scheduler_core.cpp).
//
// A step without a token budget is the course's: admitted requests prefill their whole prompt,
// then every running request (the just-admitted included) decodes one token: schedule() is then
// called twice per step (admit, then decode). With a budget (max_num_batched_tokens, chunked
// prefill), one call plans the step: decodes first, one token each, then prompt chunks fill what
// is left of the budget, a running request's unfinished prompt before a new admission's.
//
// Speculative decoding: a decoding request may carry proposed tokens (propose()); its decode then
// computes its last token and the proposals in one row (1 + k positions of the budget, k cut to
// what the budget and the request's remaining tokens allow), and after verification rewind()
// takes back the positions of the proposals that were rejected.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "generate/kv_bookkeeping.h"

namespace servelab {

struct SchedulerConfig {
  int64_t max_num_seqs = 8;  // requests running (holding KV memory) at once
  // Tokens one step computes, prompt chunks and decodes together (vLLM's max_num_batched_tokens);
  // 0: no budget, every prompt in one piece (the course's scheduler).
  int64_t max_num_batched_tokens = 0;
};

// One prompt chunk of a plan: positions [start, start + count) of the request's tokens.
struct ScheduledChunk {
  int64_t id = 0;
  int64_t start = 0;
  int64_t count = 0;
  bool last = false;  // the chunk ends the prompt: its logits give the request's next token
};

struct SchedulePlan {
  std::vector<int64_t> decode;  // running requests that feed their last token
  // Per decode row (same order): the proposed tokens it feeds after its last token, to verify
  // (empty: a plain decode).
  std::vector<std::vector<int32_t>> drafts;
  std::vector<ScheduledChunk> prefill;  // prompt chunks, whole prompts without a budget
  std::vector<int64_t> admitted;        // admitted by this call (their first chunk is in prefill)
  std::vector<int64_t> preempted;       // evicted by this call to be recomputed, at the queue's head
  // Requests that can never fit the KV memory, ended by this call with the reason.
  std::vector<std::pair<int64_t, std::string>> rejected;
  int64_t tokens() const;  // positions the plan computes
  bool empty() const { return decode.empty() && prefill.empty(); }
};

class SchedulerCore {
 public:
  struct Hooks {
    // Called before a waiting request is admitted (e.g. to load its adapter): false keeps it and
    // everyone behind it waiting this step.
    std::function<bool(int64_t id)> acquire;
    // Undoes acquire: an admission that did not fit, a preemption, a request leaving.
    std::function<void(int64_t id)> release;
  };
  struct Request {
    int64_t id = 0;
    std::vector<int32_t> tokens;  // the prompt, then every token generated so far
    int64_t prompt_tokens = 0;
    int64_t max_new_tokens = 0;
    int64_t adapter_key = 0;
    double arrival_ms = 0;
    // KV positions written; at admission, what the prefix cache held.
    int64_t computed = 0;
    // Positions to prefill since its last admission (the prompt, or prompt and tokens when it was
    // preempted); running while computed < prefill_to is prefilling, after it decoding.
    int64_t prefill_to = 0;
    int64_t preemptions = 0;
    bool running = false;
    std::vector<int32_t> draft;  // proposed tokens for its next decode (speculative decoding)
    int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_tokens; }
    bool prefilling() const { return computed < prefill_to; }
  };

  // InputError for max_num_seqs < 1 or a negative budget.
  SchedulerCore(KvBookkeeping& kv, SchedulerConfig config, Hooks hooks = {});

  // A new request, waiting from arrival_ms on; ties keep the order of add().
  void add(int64_t id, std::vector<int32_t> prompt, int64_t max_new_tokens, double arrival_ms,
           int64_t adapter_key = 0);

  // Plans the next piece of work of requests that have arrived by now_ms: admissions and prompt
  // chunks when `admit`, decodes when `decode` (both at once with a budget). The KV bookkeeping is
  // asked for room; the plan's preemptions and rejections have already happened.
  SchedulePlan schedule(double now_ms, bool admit, bool decode);
  // The plan ran: its chunks' and decodes' positions hold KV now.
  void ran(const SchedulePlan& plan);
  // A request's new token (it is fed back at its next decode).
  void append(int64_t id, int32_t token);
  // Proposed tokens for a decoding request's next decode, to be verified with it (speculative
  // decoding); used by the next schedule() only.
  void propose(int64_t id, std::vector<int32_t> draft);
  // After a verification: the request's KV keeps positions [0, positions) (its last token and the
  // accepted proposals), the rejected ones are taken back from the KV memory.
  void rewind(int64_t id, int64_t positions);
  // The request ends (stop, length, cancel, error): its memory and hooks are released.
  void finish(int64_t id);

  const Request& request(int64_t id) const { return requests_.at(id); }
  bool has(int64_t id) const { return requests_.count(id) != 0; }
  const std::vector<int64_t>& running() const { return running_; }  // in admission order
  const std::deque<int64_t>& waiting() const { return waiting_; }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  // The earliest arrival of a waiting request (the queue's head), or -1 with none waiting.
  double next_arrival_ms() const;
  const SchedulerConfig& config() const { return config_; }

 private:
  // Frees a running request's memory and puts it back at the head of the queue.
  void preempt(int64_t id, SchedulePlan& plan);
  void schedule_decodes(SchedulePlan& plan, int64_t& budget);
  void schedule_prefills(double now_ms, SchedulePlan& plan, int64_t& budget);
  // Plans the next chunk of a running request's prompt within the budget.
  void plan_chunk(Request& r, SchedulePlan& plan, int64_t& budget);

  KvBookkeeping& kv_;
  SchedulerConfig config_;
  Hooks hooks_;
  std::map<int64_t, Request> requests_;
  std::deque<int64_t> waiting_;
  std::vector<int64_t> running_;
};

}  // namespace servelab
