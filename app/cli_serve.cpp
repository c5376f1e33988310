// `servelab-cli serve`; see cli_serve.h.
#include "cli_serve.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <future>
#include <iostream>
#include <thread>

#include "cli_usage.h"
#include "lora/builtin_adapters.h"
#include "model/builtin_model.h"
#include "serve/serve_session.h"
#include "util/data_paths.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

bool loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

void ServeCommand::add_to(CLI::App* serve) {
  ServeArgs& a = args;
  serve->add_option("--host", a.host, "address to listen on (default 127.0.0.1: this machine only)");
  serve->add_option("--port", a.port, "port (0: a free one; the line printed when ready names it)");
  serve->add_option("--max-batch,--max-num-seqs", a.max_batch, "requests running at once");
  serve->add_option("--max-num-batched-tokens", a.max_num_batched_tokens,
                    "chunked prefill: tokens one engine step computes, decodes first (off by default)");
  serve->add_option("--max-queue", a.max_queue, "requests waiting at most; more get 429");
  serve->add_option("--max-total-tokens", a.max_total_tokens,
                    "prompt + new tokens per request (0: the model's context, at most 2048)");
  serve->add_option("--adapter", a.adapters, "NAME=PEFT_DIR: a LoRA adapter requests may name (repeatable)");
  serve->add_flag(
      "--no-builtin-adapters", a.no_builtin_adapters,
      "on the built-in model, leave out its three adapters (predibase/conllpp, predibase/cnn, "
      "predibase/hellaswag_processed: docs/adapters.md), registered by default when no --adapter is "
      "given");
  serve->add_option("--adapter-cache", a.adapter_cache, "adapters loaded at once (0: no limit)");
  serve->add_option("--http-threads", a.http_threads,
                    "connection threads; each open stream holds one (0: max batch + max queue + 8)");
  serve->add_option("--max-body-bytes", a.max_body_bytes, "larger request bodies get 413");
  serve->add_option("--kv", a.kv, "KV memory: paged (blocks, prefix caching; default) or slot");
  a.speculative.add_to(serve);
  auto* kv_mb = serve->add_option("--kv-budget-mb", a.kv_budget_mb,
                                  "paged KV pool in megabytes (1e6 bytes; default: slot KV's memory)");
  serve->add_option("--kv-budget-blocks", a.kv_budget_blocks, "paged KV pool in blocks")->excludes(kv_mb);
  serve->add_option("--block-size", a.block_size, "positions per paged KV block");
  serve->add_flag("--no-prefix-cache", a.no_prefix_cache, "paged KV without prefix caching");
  serve->add_option(
      "--shutdown-grace", a.grace_s,
      "seconds running requests may take to finish after SIGINT/SIGTERM before they are cancelled");
  serve
      ->add_option("--api-key", a.api_key,
                   "requests need 'Authorization: Bearer KEY' (default: $SERVELAB_API_KEY); /health and "
                   "/metrics stay open")
      ->envname("SERVELAB_API_KEY");
  serve->add_flag("--metrics-need-key", a.metrics_need_key, "/metrics needs the API key too");
  serve
      ->add_option("--allowed-origins", a.allowed_origins,
                   "CORS: origins web pages may call the server from, or '*' (repeatable; default: none)")
      ->delimiter(',');
  serve->add_option("--ssl-certfile", a.ssl_certfile, "HTTPS: the PEM certificate (chain)");
  serve->add_option("--ssl-keyfile", a.ssl_keyfile, "HTTPS: the certificate's PEM private key");
  serve->add_flag(
      "--access-log", a.access_log,
      "one line per request on stderr: its id (X-Request-Id), client, route, status, milliseconds");
  serve->add_option("--request-timeout", a.request_timeout_s,
                    "seconds a request may take, queued and running, before it is cancelled (0: no limit)");
  serve->add_option("--read-timeout", a.read_timeout_s,
                    "seconds a connection may take to send a whole request (line, headers, body) before it "
                    "is dropped, and the longest wait for any one read (default 30)");
  serve->add_option("--write-timeout", a.write_timeout_s,
                    "seconds one write of an answer may wait for the client to read (default 5)");
}

int ServeCommand::run(const std::function<std::unique_ptr<Engine>()>& load, const EngineOptions& options) {
  const ServeArgs& a = args;
  // SIGINT and SIGTERM are blocked here, so in every thread started below, and taken by sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that leaves must not end the server
  ServeOptions so;
  so.max_batch = a.max_batch;
  so.max_num_batched_tokens = a.max_num_batched_tokens;
  so.max_queue = a.max_queue;
  so.max_total_tokens = a.max_total_tokens;
  so.adapter_cache_capacity = a.adapter_cache;
  if (a.kv != "paged" && a.kv != "slot") throw UsageError("--kv must be paged or slot, got '" + a.kv + "'");
  so.kv = a.kv == "paged" ? KvStrategy::Paged : KvStrategy::SlotKv;
  if (so.kv == KvStrategy::SlotKv && (a.kv_budget_mb > 0 || a.kv_budget_blocks > 0 || a.no_prefix_cache))
    throw UsageError("--kv-budget-mb, --kv-budget-blocks and --no-prefix-cache are paged KV's (--kv paged)");
  limits::check_range("--kv-budget-mb", a.kv_budget_mb, 0.0, 1e7);
  so.kv_budget_bytes = static_cast<int64_t>(a.kv_budget_mb * 1e6);
  so.kv_blocks = a.kv_budget_blocks;
  so.kv_block_size = a.block_size;
  so.prefix_caching = !a.no_prefix_cache;
  for (const std::string& spec : a.adapters) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw InputError("--adapter takes NAME=PEFT_DIR, got '" + spec + "'");
    AdapterSource source;
    source.name = spec.substr(0, eq);
    source.peft_dir = spec.substr(eq + 1);
    so.adapters.push_back(source);
  }
  limits::check_range("--request-timeout", a.request_timeout_s, 0.0, 1e7);
  limits::check_range("--read-timeout", a.read_timeout_s, 0.1, 1e6);
  limits::check_range("--write-timeout", a.write_timeout_s, 0.1, 1e6);
  if (a.ssl_certfile.empty() != a.ssl_keyfile.empty())
    throw UsageError("HTTPS needs both --ssl-certfile and --ssl-keyfile");
  if (a.metrics_need_key && a.api_key.empty()) throw UsageError("--metrics-need-key needs --api-key");
  for (const std::string& origin : a.allowed_origins)
    if (origin.empty() || (origin != "*" && origin.find("://") == std::string::npos))
      throw UsageError("--allowed-origins takes origins such as https://example.org, or '*', got '" + origin +
                       "'");
  HttpServerOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.threads = a.http_threads > 0 ? a.http_threads : default_http_threads(a.max_batch, a.max_queue);
  ho.max_body_bytes = a.max_body_bytes;
  ho.api_key = a.api_key;
  ho.metrics_need_key = a.metrics_need_key;
  ho.allowed_origins = a.allowed_origins;
  ho.ssl_certfile = a.ssl_certfile;
  ho.ssl_keyfile = a.ssl_keyfile;
  ho.request_timeout_s = a.request_timeout_s;
  ho.read_timeout_s = a.read_timeout_s;
  ho.write_timeout_s = a.write_timeout_s;
  if (a.access_log)
    ho.access_log = [](const std::string& line) {
      std::cerr << "servelab-cli serve: access: " << line << std::endl;
    };
  // Bound and answering before the model loads: /health says 503 {"status": "loading"} until then.
  ServeSession session(ho);
  std::cerr << "servelab-cli serve: listening at " << session.url()
            << "; loading the model (/health answers 503 until it is ready)" << std::endl;
  if (a.api_key.empty() && !loopback_host(a.host))
    std::cerr << "servelab-cli serve: warning: listening on " << a.host
              << " without --api-key: anyone who reaches this address can use the server" << std::endl;
  // The model is loaded and the KV memory allocated on a thread that then exits. libgomp keeps an
  // OpenMP thread team per thread that ran a parallel region, and once its threads outnumber the
  // CPUs it stops spinning at barriers and sleeps (about 50 us per wake-up, a hundred-odd regions
  // a step): the loading thread's idle team beside the engine thread's made one stream's decode
  // step twice `generate`'s. With the loader gone, the engine thread's team is the only one.
  std::unique_ptr<Engine> engine;
  SpeculativeSetup spec;
  std::string model_id;
  std::async(std::launch::async, [&] {
    engine = load();  // an error ends the command, and the session with it
    spec = resolve_speculative(a.speculative, *engine, options);
    so.speculative = spec.config;
    model_id = engine->is_demo() ? "servelab-demo-gpt2" : engine->name();
    // The built-in model's own adapters, under the course's ids, unless the user chose adapters.
    if (a.adapters.empty() && !a.no_builtin_adapters && is_builtin_model(*engine)) {
      std::vector<AdapterSource> builtin = builtin_adapter_sources();
      std::string names;
      for (const AdapterSource& b : builtin) names += (names.empty() ? "" : ", ") + b.name;
      if (builtin.empty())
        std::cerr << "servelab-cli serve: the built-in adapters were not found (looked for adapters/ in "
                  << data_dirs_text() << "); serving without them" << std::endl;
      else
        std::cerr << "servelab-cli serve: built-in adapters " << names
                  << " (--no-builtin-adapters leaves them out)" << std::endl;
      so.adapters = std::move(builtin);
    }
    session.attach(*spec.target, engine->tokenizer(), so, model_id, engine->info().dump());
  }).get();
  ServeScheduler& scheduler = *session.scheduler();
  std::cout << "servelab-cli serve: " << model_id << " at " << session.url() << " (max batch " << a.max_batch
            << ", max queue " << a.max_queue << ", " << scheduler.max_total_tokens()
            << " positions per request"
            << (so.speculative.enabled() ? ", speculative decoding: " + spec.description + ", k " +
                                               std::to_string(so.speculative.num_speculative_tokens)
                                         : std::string())
            << ")" << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  const ServeStats before = scheduler.stats();
  std::cerr << "servelab-cli serve: " << strsignal(sig) << ": not accepting connections; finishing "
            << before.running << " running and " << before.waiting << " waiting requests (up to " << a.grace_s
            << " s)" << std::endl;
  const int64_t cancelled =
      session.stop(std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, a.grace_s) * 1000)));
  const ServeStats after = scheduler.stats();
  std::cerr << "servelab-cli serve: stopped: " << after.finished << " requests finished, " << cancelled
            << " cancelled at shutdown (" << after.cancelled << " cancelled in all), " << after.failed
            << " failed" << std::endl;
  return 0;
}

}  // namespace servelab
