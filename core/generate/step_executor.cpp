#include "generate/step_executor.h"

#include <algorithm>

namespace servelab {

at::Tensor run_decodes(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan) {
  if (plan.decode.empty()) return {};
  std::vector<int32_t> last;
  last.reserve(plan.decode.size());
  for (int64_t id : plan.decode) last.push_back(core.request(id).tokens.back());
  return kv.decode(plan.decode, last);
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
