#include "serve/serve_session.h"

#include <utility>

namespace servelab {

ServeSession::ServeSession(HttpServerOptions options) : host_(options.host), server_(std::move(options)) {
  port_ = server_.bind();
  url_ = std::string(server_.tls() ? "https://" : "http://") + host_ + ":" + std::to_string(port_);
  http_ = std::thread([this] { server_.serve(); });
  // serve() starts listening on its thread: wait for it, so that a stop() right after has
  // something to stop.
  for (int i = 0; i < 500 && !server_.running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

ServeSession::~ServeSession() { stop(std::nullopt); }

ServeScheduler& ServeSession::attach(const Model& model, const Tokenizer& tokenizer,
                                     const ServeOptions& options, const std::string& model_id,
                                     const std::string& model_info) {
  scheduler_ = std::make_unique<ServeScheduler>(model, tokenizer, options);
  server_.attach(*scheduler_, tokenizer, model_id, model_info);
  return *scheduler_;
}

int64_t ServeSession::stop(std::optional<std::chrono::milliseconds> drain_grace) {
  if (stopped_) return 0;
  stopped_ = true;
  server_.stop();
  int64_t cancelled = 0;
  if (drain_grace && scheduler_) cancelled = scheduler_->drain(*drain_grace);
  if (http_.joinable()) http_.join();
  return cancelled;
}

}  // namespace servelab
