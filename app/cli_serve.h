#pragma once
// `servelab-cli serve`: the LoRAX/TGI + OpenAI HTTP server (core/serve) until SIGINT or SIGTERM. The
// port is bound before the model loads, so that a client can tell "loading" (/health 503) from
// "down" (no answer).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli_speculative.h"
#include "model/engine.h"

namespace servelab {

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t max_batch = 8, max_queue = 64, max_total_tokens = 0, adapter_cache = 8, max_body_bytes = 2 << 20;
  int64_t max_num_batched_tokens = 0;
  std::vector<std::string> adapters;  // NAME=PEFT_DIR
  bool no_builtin_adapters = false;   // the built-in model without its three adapters
  int http_threads = 0;
  double grace_s = 10;
  std::string kv = "paged";
  double kv_budget_mb = 0;
  int64_t kv_budget_blocks = 0, block_size = 16;
  bool no_prefix_cache = false;
  SpeculativeArgs speculative;
  // Exposing the server.
  std::string api_key;  // also SERVELAB_API_KEY
  bool metrics_need_key = false;
  std::vector<std::string> allowed_origins;
  std::string ssl_certfile, ssl_keyfile;
  bool access_log = false;
  double request_timeout_s = 0;
  double read_timeout_s = 30, write_timeout_s = 5;
};

struct ServeCommand {
  ServeArgs args;
  // Adds serve's options (the caller adds the model options).
  void add_to(CLI::App* serve);
  // Binds, loads the model, serves until SIGINT/SIGTERM, drains; the exit code.
  int run(const std::function<std::unique_ptr<Engine>()>& load, const EngineOptions& options);
};

// Whether host is this machine only (127.0.0.0/8, ::1, localhost).
bool loopback_host(const std::string& host);

}  // namespace servelab
