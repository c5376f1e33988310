#pragma once
// One request's output as tokens arrive: text, stop conditions, timestamps. Shared by the
// continuous scheduler and the static baseline so both end requests the same way.
#include <optional>
#include <vector>

#include "generate/continuous_batching.h"
#include "tokenizer/stream_decoder.h"

namespace servelab {

class RequestTracker {
 public:
  // stop_ids: the tokens that end a request whose stop_at_eos is set (generation_stop_ids()).
  RequestTracker(const Tokenizer& tokenizer, const BatchRequest& request, int64_t id,
                 std::vector<int32_t> stop_ids);

  // Records a generated token ready at ms; returns the text it completes. Sets finish_reason
  // ("eos", "stop", "length") when this token ends the request.
  std::string push(int32_t token, double ms);
  bool finished() const { return !result_.finish_reason.empty(); }
  // Ends an unfinished request (e.g. "cancelled") and flushes held-back text.
  void finish(const std::string& reason);
  // Every admission is recorded; the first one sets the slot, the step and the queue wait.
  void admitted(int64_t slot, int64_t step, double ms);

  const BatchRequest& request() const { return request_; }
  const RequestResult& result() const { return result_; }
  RequestResult& result() { return result_; }

 private:
  const BatchRequest& request_;
  StreamDecoder decoder_;
  std::vector<int32_t> stop_ids_;
  RequestResult result_;
};

}  // namespace servelab
