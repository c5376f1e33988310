#include "generate/step_executor.h"

#include <algorithm>

namespace servelab {

at::Tensor run_decodes(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan) {
  if (plan.decode.empty()) return {};
  const bool verifying = std::any_of(plan.drafts.begin(), plan.drafts.end(),
                                     [](const std::vector<int32_t>& d) { return !d.empty(); });
  if (verifying) {
    // Proposals to verify: each row feeds its last token and its proposals, and every one of
    // their positions gives logits (a plain row's only one).
    std::vector<StepSegment> segments;
    for (size_t i = 0; i < plan.decode.size(); ++i) {
      StepSegment sg{plan.decode[i], {core.request(plan.decode[i]).tokens.back()}, StepSegment::Logits::All};
      sg.tokens.insert(sg.tokens.end(), plan.drafts[i].begin(), plan.drafts[i].end());
      segments.push_back(std::move(sg));
    }
    return kv.extend(segments);
  }
  std::vector<int32_t> last;
  last.reserve(plan.decode.size());
  for (int64_t id : plan.decode) last.push_back(core.request(id).tokens.back());
  return kv.decode(plan.decode, last);
}

std::vector<int64_t> decode_rows(const SchedulePlan& plan) {
  std::vector<int64_t> at{0};
  for (size_t i = 0; i < plan.decode.size(); ++i)
    at.push_back(at.back() + 1 + static_cast<int64_t>(i < plan.drafts.size() ? plan.drafts[i].size() : 0));
  return at;
}

std::vector<int64_t> prefill_sampled_ids(const SchedulePlan& plan) {
  std::vector<int64_t> ids;
  for (const ScheduledChunk& c : plan.prefill)
    if (c.last) ids.push_back(c.id);
  return ids;
}

at::Tensor run_prefills(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan) {
  if (plan.prefill.empty()) return {};
  const bool whole = std::all_of(plan.prefill.begin(), plan.prefill.end(), [&](const ScheduledChunk& c) {
    const SchedulerCore::Request& r = core.request(c.id);
    return c.last && c.start == kv.computed(c.id) &&
           c.start + c.count == static_cast<int64_t>(r.tokens.size()) &&
           std::find(plan.admitted.begin(), plan.admitted.end(), c.id) != plan.admitted.end();
  });
  if (whole) {
    std::vector<PrefillRequest> admitted;
    for (const ScheduledChunk& c : plan.prefill) {
      const SchedulerCore::Request& r = core.request(c.id);
      admitted.push_back({c.id, &r.tokens, r.max_new_tokens - r.generated(), r.adapter_key});
    }
    return kv.prefill(admitted);
  }
  std::vector<StepSegment> segments;
  for (const ScheduledChunk& c : plan.prefill) {
    const std::vector<int32_t>& tokens = core.request(c.id).tokens;
    segments.push_back({c.id,
                        std::vector<int32_t>(tokens.begin() + c.start, tokens.begin() + c.start + c.count),
                        c.last ? StepSegment::Logits::Last : StepSegment::Logits::None});
  }
  return kv.extend(segments);
}

}  // namespace servelab
