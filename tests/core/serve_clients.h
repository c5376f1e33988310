#pragma once
// Clients of a ServeScheduler that runs its engine on the caller (ServeOptions::engine_on_caller):
// every request submitted at once, each stream read to its end on a client thread, then the
// engine stopped; and the log-probabilities a full forward gives, to check the streamed ones.
#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "model/model.h"
#include "serve/serve_scheduler.h"

namespace servelab::test {

struct ServedRun {
  std::vector<std::vector<ServeToken>> tokens;  // per request, as streamed
  std::vector<RequestResult> results;
};

inline ServedRun serve_all(ServeScheduler& scheduler, const std::vector<BatchRequest>& requests) {
  ServedRun run;
  run.tokens.resize(requests.size());
  run.results.resize(requests.size());
  std::thread clients([&] {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const BatchRequest& r : requests) streams.push_back(scheduler.submit(r));
    for (size_t i = 0; i < streams.size(); ++i)
      for (;;) {
        RequestStream::Update u = streams[i]->take(std::chrono::milliseconds(60000));
        run.tokens[i].insert(run.tokens[i].end(), u.tokens.begin(), u.tokens.end());
        if (u.done) {
          run.results[i] = u.result;
          break;
        }
      }
    scheduler.stop_engine();
  });
  scheduler.run();
  clients.join();
  return run;
}

// The largest difference between the streamed tokens' log-probabilities and the log-softmax of
// one full forward over the prompt and the generated tokens.
inline double max_logprob_error(const Model& m, const std::vector<int32_t>& prompt,
                                const std::vector<ServeToken>& streamed) {
  std::vector<int32_t> seq = prompt;
  for (const ServeToken& t : streamed) seq.push_back(t.id);
  const int64_t n = static_cast<int64_t>(seq.size());
  ForwardInput in;
  in.input_ids = at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), at::kLong).view({1, n});
  in.position_ids = at::arange(n, at::kLong).view({1, n});
  in.all_logits = true;
  const at::Tensor ref = at::log_softmax(m.forward(in).squeeze(0), -1);
  double worst = 0;
  for (size_t k = 0; k < streamed.size(); ++k) {
    const int64_t pos = static_cast<int64_t>(prompt.size() + k) - 1;
    worst = std::max(worst, std::abs(streamed[k].logprob - ref[pos][streamed[k].id].item<double>()));
  }
  return worst;
}

}  // namespace servelab::test
