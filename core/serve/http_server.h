#pragma once
// The HTTP face of the serving scheduler: LoRAX/TGI's API (POST / with a list answer or an event
// stream, /generate, /generate_stream, /info, /health) and an OpenAI subset (/v1/models,
// /v1/completions, /v1/chat/completions) with vLLM's /tokenize and /detokenize, on cpp-httplib;
// serve_session.h runs it beside its scheduler. Connection threads parse, validate and
// tokenize a request, submit it to the one ServeScheduler, and write its tokens as they come
// (chunked server-sent events); a connection that goes away cancels its request.
// Torch-free header; httplib stays inside the .cpp.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/serve_scheduler.h"

namespace servelab {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: a free port, see HttpServer::port()
  int threads = 0;  // connection threads (each open stream holds one): default_http_threads() by default
  int64_t max_body_bytes = 2 << 20;  // larger bodies get 413
  std::string model_id;              // what /info and /v1/models call the base model
  std::string model_info;            // more of /info (the engine's info() as JSON text), may be empty
  // Non-empty: every route but /health (and /metrics, unless metrics_need_key) answers 401 without
  // "Authorization: Bearer <api_key>", as vLLM's --api-key does.
  std::string api_key;
  bool metrics_need_key = false;
  // CORS: the origins a web page may call the server from ("*": any). Empty: no CORS headers, so a
  // browser refuses cross-origin calls; a preflight from an origin not listed gets 400.
  std::vector<std::string> allowed_origins;
  // Both set: HTTPS with this PEM certificate (chain) and private key.
  std::string ssl_certfile, ssl_keyfile;
  // A request (queued and running) cancelled after this long, with 504 or an error event; 0: none.
  double request_timeout_s = 0;
  // A connection must deliver each request whole (line, headers, body) within read_timeout_s of
  // its accept or its previous answer, else it is dropped (a client sending a byte a second);
  // each read waits at most that long too. An answer's every write waits at most write_timeout_s
  // for the client to take it.
  double read_timeout_s = 30;
  double write_timeout_s = 5;
  // One line per answered request (its id, the client, method, path, status, milliseconds); the
  // access log is off when empty. Called from connection threads, one call at a time.
  std::function<void(const std::string& line)> access_log;
};

// Connection threads by default: every running and waiting request's stream holds one, and a few
// more answer /health, /metrics and new requests meanwhile.
inline int default_http_threads(int64_t max_batch, int64_t max_queue) {
  return static_cast<int>(max_batch + max_queue + 8);
}

class HttpServer {
 public:
  // A server whose model is still loading: it binds and serves at once, /health answers 503
  // {"status": "loading"} and every other route 503 with Retry-After until attach(). options.threads
  // must be set (the scheduler's sizes are not known yet).
  explicit HttpServer(HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The loaded model: from now on the routes answer. model_id and model_info as in the options.
  void attach(ServeScheduler& scheduler, const Tokenizer& tokenizer, const std::string& model_id,
              const std::string& model_info);

  // Binds host:port; InputError when it cannot (or when the TLS certificate or key is unusable).
  // Returns the port (the real one for port 0).
  int bind();
  // Serves until stop(); call from one thread after bind().
  void serve();
  // Stops accepting connections; serve() returns once the open connections are done.
  void stop();
  // Whether serve() has started listening (stop() before then has nothing to stop).
  bool running() const;
  int port() const { return port_; }
  bool tls() const;
  // Connections dropped so far for not delivering a request within read_timeout_s.
  int64_t slow_connections_dropped() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace servelab
