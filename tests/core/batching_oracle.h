#pragma once
// The continuous-batching check the oracle suites share: a queue of the fixture prompts, every other
// request 3 tokens shorter, served two at a time, so requests join and leave a running batch.
// `options` sets the rest (chunked prefill, the paged kernel and block size).
#include <vector>

#include "generate/continuous_batching.h"
#include "model/model.h"

namespace servelab::test {

// Runs the queue; budgets receives each request's token budget (to cut the solo tokens to).
inline BatchRunResult run_staggered_queue(const Model& model, const Tokenizer& tokenizer,
                                          const std::vector<std::vector<int32_t>>& prompts,
                                          int64_t new_tokens, KvStrategy kv, std::vector<int64_t>* budgets,
                                          BatchOptions o = {}) {
  std::vector<BatchRequest> requests;
  budgets->clear();
  for (size_t i = 0; i < prompts.size(); ++i) {
    BatchRequest r;
    r.prompt_ids = prompts[i];
    r.max_new_tokens = new_tokens - static_cast<int64_t>(i % 2) * 3;
    r.stop_at_eos = false;
    budgets->push_back(r.max_new_tokens);
    requests.push_back(r);
  }
  o.max_batch = 2;
  o.kv = kv;
  return run_continuous_batching(model, tokenizer, requests, o);
}

}  // namespace servelab::test
