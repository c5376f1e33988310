#include "generate/request_tracker.h"

#include <algorithm>

namespace servelab {

RequestTracker::RequestTracker(const Tokenizer& tokenizer, const BatchRequest& request, int64_t id,
                               std::vector<int32_t> stop_ids)
    : request_(request), decoder_(tokenizer), stop_ids_(std::move(stop_ids)) {
  result_.id = id;
  result_.prompt_ids = request.prompt_ids;
  result_.arrival_ms = request.arrival_ms;
}

void RequestTracker::admitted(int64_t slot, int64_t step, double ms) {
  result_.admissions.push_back({step, slot});
  if (result_.admitted_step >= 0) return;  // a readmission after a preemption: its wait was counted
  result_.slot = slot;
  result_.admitted_step = step;
  result_.admitted_ms = ms;
  result_.queue_wait_ms = ms - result_.arrival_ms;
}

std::string RequestTracker::push(int32_t token, double ms) {
  RequestResult& r = result_;
  r.generated_ids.push_back(token);
  r.token_ms.push_back(ms);
  if (r.token_ms.size() == 1) r.ttft_ms = ms - r.arrival_ms;
  r.latency_ms = ms - r.arrival_ms;
  std::string piece;
  if (request_.stop_at_eos && std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    r.finish_reason = "eos";
  } else {
    piece = decoder_.push(token);
    r.text += piece;
    for (const std::string& s : request_.stop_strings) {
      const size_t at = s.empty() ? std::string::npos : r.text.find(s);
      if (at != std::string::npos) {
        r.text.resize(at);
        r.finish_reason = "stop";
        return piece;
      }
    }
  }
  if (!finished() && static_cast<int64_t>(r.generated_ids.size()) >= request_.max_new_tokens)
    r.finish_reason = "length";
  if (finished() && r.finish_reason != "stop") r.text += decoder_.flush();
  return piece;
}

void RequestTracker::finish(const std::string& reason) {
  if (finished()) return;
  result_.finish_reason = reason;
  result_.text += decoder_.flush();
}

}  // namespace servelab
