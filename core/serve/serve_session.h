#pragma once
// One serving session: the HTTP server, its connection thread, the scheduler it feeds and the
// shutdown order between them. `servelab-cli serve` and the app's Serving tab both run one, so
// that binding before the model loads, attaching, stopping and draining happen the same way.
// Torch-free header.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "serve/http_server.h"
#include "serve/serve_scheduler.h"

namespace servelab {

class ServeSession {
 public:
  // Binds host:port and serves at once (InputError when the port or the TLS files cannot be used);
  // until attach(), /health answers 503 "loading" and every other route 503.
  explicit ServeSession(HttpServerOptions options);
  // Stops whatever still runs: no grace for running requests.
  ~ServeSession();
  ServeSession(const ServeSession&) = delete;
  ServeSession& operator=(const ServeSession&) = delete;

  int port() const { return port_; }
  // http[s]://host:port
  const std::string& url() const { return url_; }

  // The model has loaded: builds the scheduler over it, and the routes answer from now on. The
  // model and tokenizer must outlive the session.
  ServeScheduler& attach(const Model& model, const Tokenizer& tokenizer, const ServeOptions& options,
                         const std::string& model_id, const std::string& model_info);
  // Null before attach().
  ServeScheduler* scheduler() { return scheduler_.get(); }

  // Stops accepting connections; with a grace, lets the running requests finish for that long and
  // cancels the rest (ServeScheduler::drain) — without one (an engine that failed), drains nothing;
  // then waits for the open connections to end. Returns the requests cancelled by the drain.
  // Idempotent; any thread but the HTTP server's.
  int64_t stop(std::optional<std::chrono::milliseconds> drain_grace);

 private:
  std::string host_;
  HttpServer server_;
  std::unique_ptr<ServeScheduler> scheduler_;
  std::thread http_;
  int port_ = 0;
  std::string url_;
  bool stopped_ = false;
};

}  // namespace servelab
