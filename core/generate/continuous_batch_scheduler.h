#pragma once
// Continuous batching's scheduler: at every step it admits arrived requests into free batch
// places, has the KV memory manager prefill them and decode one token for every running request,
// and retires the requests that finished. A request moves waiting -> running -> finished.
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generate/continuous_batching.h"
#include "generate/kv_memory_manager.h"
#include "generate/request_tracker.h"
#include "generate/sampling.h"
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
  struct Running {
    int64_t id;
    Sampler sampler;
    bool evicted = false;  // preempted this step (paged KV)
  };
  // Runs one step; false when there was nothing to run yet (no request has arrived).
  bool step(const DeviceTimer& clock);
  // Picks each row's next token and hands it to its request; ms: when the tokens were ready.
  void take_tokens(const at::Tensor& logits, const std::vector<Running*>& rows, double ms, BatchStep& step);
  // Paged KV: frees a running request's memory and puts it back at the head of the queue, to be
  // recomputed (prompt + tokens so far) when memory allows.
  void preempt(Running& r, BatchStep& step, double ms);
  // Ends a request that can never fit the KV memory, with the reason, without running it.
  void reject(int64_t id, const std::string& why, BatchStep& step);
  int64_t adapter_key(const std::string& adapter) const;

  const Model& model_;
  const Tokenizer& tokenizer_;
  const std::vector<BatchRequest>& requests_;
  BatchOptions options_;
  BatchSink* sink_;
  std::unique_ptr<KvMemoryManager> kv_;
  std::vector<RequestTracker> trackers_;
  std::deque<int64_t> waiting_;  // request ids in arrival order
  std::vector<Running> running_;
  BatchRunResult result_;
  // Adapters of the run (when it has any) and the one each running request holds.
  std::unique_ptr<AdapterCache> adapters_;
  std::map<int64_t, std::shared_ptr<const LoraAdapter>> held_;
  // Preempted requests: their samplers (state kept) and what their recomputation prefills.
  std::map<int64_t, Sampler> preempted_;
  std::map<int64_t, std::vector<int32_t>> contexts_;
};

}  // namespace servelab
