#pragma once
// Speculative decoding on the scheduler core: a drafter proposes up to k tokens after each
// decoding request's last token, the step executor feeds them with it (one forward over 1 + k
// positions), and the verification keeps the longest prefix the target agrees with plus one token
// of the target's own, so that every verified row gives 1 to k + 1 tokens. Greedy requests get
// exactly the tokens plain greedy decoding gives; sampled ones keep the target's distribution by
// the standard rejection rule (Leviathan et al., Chen et al.): a proposal d drawn from the draft's
// q is accepted with probability min(1, p(d) / q(d)), and a rejection draws from max(p - q, 0)
// normalised. Prompt lookup proposes deterministically (q is a point mass at d). A draft model
// drafts with its base weights even for a request with a LoRA adapter: the target verifies with
// the adapter, so the tokens are the adapter's, only fewer proposals are accepted.
#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generate/sampling.h"
#include "generate/scheduler_core.h"
#include "generate/speculative_config.h"
#include "generate/token_picker.h"

namespace servelab {

class KvMemoryManager;
class Model;

class Drafter {
 public:
  struct Row {
    int64_t id = 0;
    const std::vector<int32_t>* tokens = nullptr;  // the prompt and every token generated so far
    int64_t k = 0;                                 // proposals wanted, at least 1
    const SamplingParams* params = nullptr;
  };
  struct Proposal {
    std::vector<int32_t> tokens;
    // [tokens, vocab] fp32 on the CPU: the distribution each token was drawn from (a draft
    // model's sampled rows); undefined: each token was chosen outright (greedy, prompt lookup).
    at::Tensor probs;
  };
  virtual ~Drafter() = default;
  virtual std::vector<Proposal> propose(const std::vector<Row>& rows) = 0;
  // The request's tokens before position `positions` are settled (the rest of what was drafted
  // was rejected): a drafter with its own KV memory takes the rest back.
  virtual void keep(int64_t /*id*/, int64_t /*positions*/) {}
  // The request left (or was preempted): its memory goes.
  virtual void finish(int64_t /*id*/) {}
};

// The drafter of config: prompt lookup, or config.draft_model decoding through its own slot KV
// memory of `slots` requests of `capacity` positions. InputError when the draft model's
// vocabulary is not the target's.
std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config, const Model& target, int64_t slots,
                                      int64_t capacity, int32_t pad_id);

// What verifying one decode row gave: the tokens to hand to the request in order (the accepted
// proposals, then the target's own), and how many proposals were accepted.
struct Verification {
  std::vector<PickedToken> tokens;
  int64_t accepted = 0;
};

// logits [1 + k, vocab]: row i is the target's next-token distribution after the request's tokens
// and the first i proposals. `row` is the request's picking context (its output so far: each row's
// penalties count the proposals before it). Under a grammar (row.constraint) each row is masked in
// the state the accepted proposals before it left, and the grammar is advanced over the tokens
// returned only.
Verification verify_proposal(const at::Tensor& logits, const std::vector<int32_t>& draft,
                             const at::Tensor& draft_probs, const PickRow& row, const std::string& where);

// Speculation for a scheduler: the drafter, the proposals in flight, and the run's counters.
class Speculator {
 public:
  Speculator(const SpeculativeConfig& config, const Model& target, int64_t slots, int64_t capacity,
             int32_t pad_id);
  ~Speculator();
  // Proposals for every decoding request of the core that has tokens left to draft, handed to the
  // core (SchedulerCore::propose) for its next schedule().
  // params_of(id): the request's sampling, or null for a request that decodes without speculation.
  void propose(SchedulerCore& core, const std::function<const SamplingParams*(int64_t)>& params_of);
  // Verifies a decode row of the plan that carried `draft` (logits [1 + draft.size(), vocab]).
  Verification verify(int64_t id, const at::Tensor& logits, const std::vector<int32_t>& draft,
                      const PickRow& row, const std::string& where);
  // After the core ran the plan: the request's KV keeps its last token's position and the accepted
  // proposals' (start: its computed positions before the step), the rest is taken back.
  void settle(SchedulerCore& core, int64_t id, int64_t start, int64_t accepted);
  void finish(int64_t id);
  const SpecDecodeStats& stats() const { return stats_; }
  const SpeculativeConfig& config() const { return config_; }

 private:
  SpeculativeConfig config_;
  std::unique_ptr<Drafter> drafter_;
  std::map<int64_t, at::Tensor> probs_;  // the draft distributions of proposals in flight
  SpecDecodeStats stats_;
};

}  // namespace servelab
