#pragma once
// Continuous batching as an experiment runs it: the requests of a queue through the scheduler core
// (generate/scheduler_core.h), the KV memory of the options, the token picker; every step
// recorded for the charts (BatchStep) and reported live to a BatchSink. A request moves waiting ->
// running -> finished (and, on paged KV, back to waiting when preempted).
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "generate/continuous_batching.h"
#include "generate/kv_memory_manager.h"
#include "generate/request_tracker.h"
#include "generate/sampling.h"
#include "generate/scheduler_core.h"
#include "generate/speculative.h"
#include "util/device.h"

namespace servelab {

class AdapterCache;
class LoraAdapter;

class ContinuousBatchScheduler {
 public:
  // Checks the requests (InputError) and sets up the KV memory for options.max_batch of them.
  ContinuousBatchScheduler(const Model& model, const Tokenizer& tokenizer,
                           const std::vector<BatchRequest>& requests, const BatchOptions& options,
                           BatchSink* sink);
  ~ContinuousBatchScheduler();
  BatchRunResult run();

 private:
  // Runs one step; false when there was nothing to run yet (no request has arrived).
  bool step(const DeviceTimer& clock);
  // What a plan decided before it runs: rejections, admissions, preemptions, onto the step.
  void note_plan(const SchedulePlan& plan, BatchStep& step, double ms);
  // Runs the plan's decode rows, then its prompt chunks, picking every row's token.
  void execute(const SchedulePlan& plan, const DeviceTimer& clock, BatchStep& step);
  // Picks each row's next token and hands it to its request; ends the requests that finished.
  void take_tokens(const at::Tensor& logits, const std::vector<int64_t>& ids, double ms, BatchStep& step);
  // Speculative decoding: proposals for the decoding requests' next decode.
  void propose();
  // Verifies the plan's decode rows that carried proposals (and picks the plain ones' tokens),
  // handing each request its tokens; the rejected proposals' KV is taken back after ran().
  void take_verified(const at::Tensor& logits, const SchedulePlan& plan, double ms, BatchStep& step);
  // After the core ran a plan: the verified rows' rejected proposals are taken back.
  void settle();
  // Hands a request the tokens of one step in order until it finishes; true when it did.
  bool hand_over(int64_t id, const std::vector<int32_t>& tokens, double ms, BatchStep& step);
  // Ends a request that can never fit the KV memory, with the reason, without running it.
  void reject(int64_t id, const std::string& why, BatchStep& step);
  int64_t adapter_key(const std::string& adapter) const;

  const Model& model_;
  const Tokenizer& tokenizer_;
  const std::vector<BatchRequest>& requests_;
  BatchOptions options_;
  BatchSink* sink_;
  std::unique_ptr<KvMemoryManager> kv_;
  std::unique_ptr<SchedulerCore> core_;
  std::unique_ptr<Speculator> spec_;  // speculative decoding, when on
  // Verified rows of the step in flight, settled once the core has run the plan: request, its
  // computed positions before the step, its accepted proposals.
  struct Settle {
    int64_t id, start, accepted;
  };
  std::vector<Settle> settling_;
  std::vector<RequestTracker> trackers_;
  std::map<int64_t, Sampler> samplers_;  // per request, kept across preemptions
  // Requests that join the queue at a scheduler step (BatchRequest::arrival_step), by step.
  std::multimap<int64_t, int64_t> joining_;
  // Adds the requests whose step has come (all of them when nothing else is left to run).
  void join(int64_t step, double ms, bool all);
  BatchRunResult result_;
  int64_t forward_rows_ = 0;  // rows over every forward pass (prompt chunks and decodes)
  // Adapters of the run (when it has any), the one each running request holds, and those that
  // ran in the current step.
  std::unique_ptr<AdapterCache> adapters_;
  std::map<int64_t, std::shared_ptr<const LoraAdapter>> held_;
  std::set<const LoraAdapter*> step_adapters_;
};

}  // namespace servelab
