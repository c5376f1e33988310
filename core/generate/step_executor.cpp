#include "generate/step_executor.h"

#include <algorithm>

namespace servelab {

namespace {

// Each decode row as a segment: its last token, then its proposals (with a logits row per position
// when it has any).
std::vector<StepSegment> decode_segments(const SchedulerCore& core, const SchedulePlan& plan) {
  static const std::vector<int32_t> none;
  std::vector<StepSegment> segments;
  for (size_t i = 0; i < plan.decode.size(); ++i) {
    const std::vector<int32_t>& draft = i < plan.drafts.size() ? plan.drafts[i] : none;
    StepSegment sg{plan.decode[i],
                   {core.request(plan.decode[i]).tokens.back()},
                   draft.empty() ? StepSegment::Logits::Last : StepSegment::Logits::All};
    sg.tokens.insert(sg.tokens.end(), draft.begin(), draft.end());
    segments.push_back(std::move(sg));
  }
  return segments;
}

// Each prompt chunk as a segment, with logits when it ends its prompt.
std::vector<StepSegment> chunk_segments(const SchedulerCore& core, const SchedulePlan& plan) {
  std::vector<StepSegment> segments;
  for (const ScheduledChunk& c : plan.prefill) {
    const std::vector<int32_t>& tokens = core.request(c.id).tokens;
    segments.push_back({c.id,
                        std::vector<int32_t>(tokens.begin() + c.start, tokens.begin() + c.start + c.count),
                        c.last ? StepSegment::Logits::Last : StepSegment::Logits::None});
  }
  return segments;
}

}  // namespace

at::Tensor run_decodes(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan) {
  if (plan.decode.empty()) return {};
  const bool verifying = std::any_of(plan.drafts.begin(), plan.drafts.end(),
                                     [](const std::vector<int32_t>& d) { return !d.empty(); });
  // Proposals to verify: each row feeds its last token and its proposals, and every one of their
  // positions gives logits.
  if (verifying) return kv.extend(decode_segments(core, plan));
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

bool runs_mixed(const KvMemoryManager& kv, const SchedulePlan& plan) {
  return !plan.decode.empty() && !plan.prefill.empty() && kv.extends();
}

StepLogits run_mixed(KvMemoryManager& kv, const SchedulerCore& core, const SchedulePlan& plan) {
  std::vector<StepSegment> segments = decode_segments(core, plan);
  for (StepSegment& sg : chunk_segments(core, plan)) segments.push_back(std::move(sg));
  const at::Tensor logits = kv.extend(segments);
  const int64_t rows = decode_rows(plan).back();
  StepLogits out;
  out.decode = logits.narrow(0, 0, rows);
  if (logits.size(0) > rows) out.prefill = logits.narrow(0, rows, logits.size(0) - rows);
  return out;
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
  return kv.extend(chunk_segments(core, plan));
}

}  // namespace servelab
