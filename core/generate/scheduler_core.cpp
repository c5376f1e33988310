#include "generate/scheduler_core.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "util/errors.h"

namespace servelab {

int64_t SchedulePlan::tokens() const {
  int64_t n = static_cast<int64_t>(decode.size());
  for (const std::vector<int32_t>& d : drafts) n += static_cast<int64_t>(d.size());
  for (const ScheduledChunk& c : prefill) n += c.count;
  return n;
}

SchedulerCore::SchedulerCore(KvBookkeeping& kv, SchedulerConfig config, Hooks hooks)
    : kv_(kv), config_(config), hooks_(std::move(hooks)) {
  if (config_.max_num_seqs < 1)
    throw InputError("max num seqs (max batch) must be at least 1, got " +
                     std::to_string(config_.max_num_seqs));
  if (config_.max_num_batched_tokens < 0)
    throw InputError("max num batched tokens must be at least 1 (or 0: no budget), got " +
                     std::to_string(config_.max_num_batched_tokens));
}

void SchedulerCore::add(int64_t id, std::vector<int32_t> prompt, int64_t max_new_tokens, double arrival_ms,
                        int64_t adapter_key) {
  if (requests_.count(id)) throw InputError("request " + std::to_string(id + 1) + " is already scheduled");
  if (prompt.empty()) throw InputError("request " + std::to_string(id + 1) + " has an empty prompt");
  Request r;
  r.id = id;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  r.tokens = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  r.arrival_ms = arrival_ms;
  r.adapter_key = adapter_key;
  requests_.emplace(id, std::move(r));
  // First come, first served: after every request that arrived no later.
  auto at = waiting_.end();
  while (at != waiting_.begin() && requests_.at(*std::prev(at)).arrival_ms > arrival_ms) --at;
  waiting_.insert(at, id);
}

double SchedulerCore::next_arrival_ms() const {
  return waiting_.empty() ? -1.0 : requests_.at(waiting_.front()).arrival_ms;
}

SchedulePlan SchedulerCore::schedule(double now_ms, bool admit, bool decode) {
  SchedulePlan plan;
  int64_t budget = config_.max_num_batched_tokens > 0 ? config_.max_num_batched_tokens
                                                      : std::numeric_limits<int64_t>::max();
  if (decode) schedule_decodes(plan, budget);
  if (admit) schedule_prefills(now_ms, plan, budget);
  return plan;
}

void SchedulerCore::schedule_decodes(SchedulePlan& plan, int64_t& budget) {
  // Every decoding request needs room for its next position. When the memory runs out, the latest
  // admitted running request is preempted (vLLM's recompute policy) until the older ones fit; the
  // oldest always fits, as every request fits the memory alone (never_fits() saw to that).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const int64_t id = running_[i];
    Request& r = requests_.at(id);
    if (r.prefilling()) continue;
    // Proposals to verify: as many as the budget leaves after the request's own token, and never
    // more than its remaining tokens minus the one the verification adds in any case.
    std::vector<int32_t> draft = std::exchange(r.draft, {});
    const int64_t room = std::min(budget - 1, r.max_new_tokens - r.generated() - 1);
    if (static_cast<int64_t>(draft.size()) > room)
      draft.resize(static_cast<size_t>(std::max<int64_t>(room, 0)));
    if (!draft.empty()) {
      std::vector<int32_t> fed{r.tokens.back()};
      fed.insert(fed.end(), draft.begin(), draft.end());
      // No room for the proposals: a plain decode rather than a preemption.
      if (!kv_.grow_tokens(id, fed)) draft.clear();
    }
    bool evicted = false;
    while (!kv_.grow(id, r.tokens.back())) {
      const int64_t victim = running_.back();
      preempt(victim, plan);
      if (victim == id) {
        evicted = true;
        break;
      }
    }
    if (evicted) break;  // it was the latest: nobody after it runs
    plan.decode.push_back(id);
    budget -= 1 + static_cast<int64_t>(draft.size());
    plan.drafts.push_back(std::move(draft));
  }
}

void SchedulerCore::plan_chunk(Request& r, SchedulePlan& plan, int64_t& budget) {
  const int64_t count = std::min(r.prefill_to - r.computed, budget);
  if (count <= 0) return;
  // Scheduled already this step (a call with admit after one with decode plans nothing twice).
  for (const ScheduledChunk& c : plan.prefill)
    if (c.id == r.id) return;
  plan.prefill.push_back({r.id, r.computed, count, r.computed + count == r.prefill_to});
  kv_.commit(r.id, r.computed + count);
  budget -= count;
}

void SchedulerCore::schedule_prefills(double now_ms, SchedulePlan& plan, int64_t& budget) {
  // A running request's unfinished prompt goes before anyone new (it holds memory already).
  for (int64_t id : running_) {
    if (budget <= 0) return;
    Request& r = requests_.at(id);
    if (r.prefilling()) plan_chunk(r, plan, budget);
  }
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    const int64_t id = waiting_.front();
    Request& r = requests_.at(id);
    if (r.arrival_ms > now_ms) break;
    const PrefillRequest pr{id, &r.tokens, r.max_new_tokens - r.generated(), r.adapter_key};
    if (std::string why = kv_.never_fits(pr); !why.empty()) {
      waiting_.pop_front();
      plan.rejected.emplace_back(id, std::move(why));
      requests_.erase(id);
      continue;
    }
    if (hooks_.acquire && !hooks_.acquire(id)) break;
    if (!kv_.reserve(pr)) {
      if (hooks_.release) hooks_.release(id);
      break;
    }
    waiting_.pop_front();
    running_.push_back(id);
    r.running = true;
    r.computed = kv_.computed(id);
    r.prefill_to = static_cast<int64_t>(r.tokens.size());
    plan.admitted.push_back(id);
    plan_chunk(r, plan, budget);
  }
}

void SchedulerCore::preempt(int64_t id, SchedulePlan& plan) {
  Request& r = requests_.at(id);
  kv_.retire({id});
  if (hooks_.release) hooks_.release(id);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  r.running = false;
  r.computed = r.prefill_to = 0;
  r.draft.clear();
  ++r.preemptions;
  // At the head of the queue; preemption goes latest admitted first, so the earliest admitted of
  // those preempted resumes first.
  waiting_.push_front(id);
  plan.preempted.push_back(id);
}

void SchedulerCore::ran(const SchedulePlan& plan) {
  for (size_t i = 0; i < plan.decode.size(); ++i)
    if (auto it = requests_.find(plan.decode[i]); it != requests_.end())
      it->second.computed += 1 + static_cast<int64_t>(i < plan.drafts.size() ? plan.drafts[i].size() : 0);
  for (const ScheduledChunk& c : plan.prefill)
    if (auto it = requests_.find(c.id); it != requests_.end()) it->second.computed = c.start + c.count;
}

void SchedulerCore::append(int64_t id, int32_t token) { requests_.at(id).tokens.push_back(token); }

void SchedulerCore::propose(int64_t id, std::vector<int32_t> draft) {
  Request& r = requests_.at(id);
  if (!r.running || r.prefilling())
    throw InputError("request " + std::to_string(id + 1) + " is not decoding: nothing to propose for");
  r.draft = std::move(draft);
}

void SchedulerCore::rewind(int64_t id, int64_t positions) {
  Request& r = requests_.at(id);
  if (positions == r.computed) return;
  kv_.truncate(id, positions);
  r.computed = positions;
}

void SchedulerCore::finish(int64_t id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return;
  if (it->second.running) {
    kv_.retire({id});
    if (hooks_.release) hooks_.release(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  requests_.erase(it);
}

}  // namespace servelab
