#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <utility>

#include "serve/request_parser.h"
#include "util/errors.h"

namespace servelab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// Connections the kernel completes before the accept thread takes them: more than the clients a
// load test opens at once (a closed loop of N clients reconnects N at a time).
constexpr int kListenBacklog = 4096;
}  // namespace

std::string hf_cache_snapshot(const std::string& repo_id, std::string* searched) {
  fs::path hub;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (!env("HF_HUB_CACHE").empty())
    hub = env("HF_HUB_CACHE");
  else if (!env("HF_HOME").empty())
    hub = fs::path(env("HF_HOME")) / "hub";
  else if (!env("XDG_CACHE_HOME").empty())
    hub = fs::path(env("XDG_CACHE_HOME")) / "huggingface" / "hub";
  else
    hub = fs::path(env("HOME")) / ".cache" / "huggingface" / "hub";
  std::string folder = "models--" + repo_id;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/', at + 2))
    folder.replace(at, 1, "--");
  const fs::path repo = hub / folder;
  if (searched) *searched = repo.string();
  std::error_code ec;
  if (repo_id.empty() || repo_id.find("..") != std::string::npos || !fs::is_directory(repo / "snapshots", ec))
    return "";
  std::ifstream ref(repo / "refs" / "main");
  std::string revision;
  if (ref && std::getline(ref, revision) && fs::is_directory(repo / "snapshots" / revision, ec))
    return (repo / "snapshots" / revision).string();
  fs::path newest;
  fs::file_time_type newest_time{};
  for (const auto& d : fs::directory_iterator(repo / "snapshots", ec)) {
    if (!d.is_directory(ec)) continue;
    const auto t = d.last_write_time(ec);
    if (newest.empty() || t > newest_time) {
      newest = d.path();
      newest_time = t;
    }
  }
  return newest.string();
}

struct HttpServer::Impl {
  ServeScheduler& scheduler;
  const Tokenizer& tokenizer;
  HttpServerOptions options;
  httplib::Server server;
  std::atomic<int64_t> next_id{0};
  // The listening socket, as httplib's socket-options hook last saw it (the one that bound).
  std::atomic<int> listen_fd{-1};

  Impl(ServeScheduler& s, const Tokenizer& t, HttpServerOptions o)
      : scheduler(s), tokenizer(t), options(std::move(o)) {}

  // The adapter a request names: one registered with --adapter, a local PEFT folder, or a Hub
  // repository in the local Hugging Face cache. Returns the scheduler's name for it.
  std::string resolve_adapter(const std::string& id, const std::string& source) {
    if (id.empty()) return "";
    if (source.empty() || source == "hub") {
      if (scheduler.knows_adapter(id)) return id;
      std::string searched;
      const std::string dir = hf_cache_snapshot(id, &searched);
      if (dir.empty() || !fs::exists(fs::path(dir) / "adapter_config.json"))
        throw validation_error(
            "unknown adapter '" + id + "': not registered with --adapter and not in the local " +
            "Hugging Face cache (looked for " + searched + "/snapshots/*/adapter_config.json)");
      AdapterSource a;
      a.name = id;
      a.peft_dir = dir;
      scheduler.register_adapter(a);
      return id;
    }
    if (source == "local") {
      if (scheduler.knows_adapter(id)) return id;
      std::error_code ec;
      if (!fs::exists(fs::path(id) / "adapter_config.json", ec))
        throw validation_error("adapter_id '" + id + "' with adapter_source local must be a PEFT folder " +
                               "(adapter_config.json + adapter_model.safetensors)");
      AdapterSource a;
      a.name = a.peft_dir = id;
      scheduler.register_adapter(a);
      return id;
    }
    throw validation_error("adapter_source '" + source + "' is not supported here: use local or hub");
  }

  RequestParserContext parser_context() {
    RequestParserContext ctx;
    ctx.tokenizer = &tokenizer;
    ctx.model_id = options.model_id;
    ctx.max_total_tokens = scheduler.max_total_tokens();
    if (StructuredOutput* so = scheduler.structured_output())
      ctx.json_constraint = [so](const std::string& schema) { return so->json(schema); };
    ctx.resolve_adapter = [this](const std::string& id, const std::string& source) {
      return resolve_adapter(id, source);
    };
    return ctx;
  }

  std::shared_ptr<RequestStream> submit(ParsedRequest& c) {
    try {
      return scheduler.submit(c.request, std::move(c.constraint));
    } catch (const OverloadedError& e) {
      ApiError err(e.shutting_down() ? 503 : 429, "overloaded", e.what());
      err.retry_after = 1;
      throw err;
    }
  }

  // Waits for the request's first token (or its end) and takes it; an ApiError (424) when it
  // failed before producing anything, so that the status line can still say so.
  static RequestStream::Update first_update(RequestStream& stream) {
    while (!stream.wait_started(std::chrono::milliseconds(200))) {
    }
    RequestStream::Update u = stream.take(std::chrono::milliseconds(0));
    if (u.done && u.tokens.empty()) {
      if (!u.error.empty()) throw ApiError(424, u.error_type, u.error);
      if (u.result.finish_reason == "cancelled")
        throw ApiError(503, "generation",
                       "the request was cancelled before it started (the server is stopping)");
    }
    return u;
  }

  // Everything: the tokens and the result. ApiError when it failed or was cancelled.
  static std::vector<ServeToken> collect(RequestStream& stream, RequestResult& result) {
    std::vector<ServeToken> tokens;
    for (;;) {
      RequestStream::Update u = stream.take(std::chrono::milliseconds(200));
      for (ServeToken& t : u.tokens) tokens.push_back(std::move(t));
      if (!u.done) continue;
      if (!u.error.empty()) throw ApiError(424, u.error_type, u.error);
      if (u.result.finish_reason == "cancelled")
        throw ApiError(503, "generation", "the request was cancelled (the server is stopping)");
      result = u.result;
      return tokens;
    }
  }

  // Streams events: writer turns an update into zero or more events (one chunk each); the last
  // update (done) must be turned into the last events.
  using Writer = std::function<std::vector<std::string>(RequestStream::Update&)>;
  static void stream_events(httplib::Response& res, std::shared_ptr<RequestStream> stream,
                            RequestStream::Update first, Writer writer) {
    struct State {
      std::shared_ptr<RequestStream> stream;
      std::optional<RequestStream::Update> first;
      Writer writer;
    };
    auto st = std::make_shared<State>(State{std::move(stream), std::move(first), std::move(writer)});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
          for (;;) {
            RequestStream::Update u;
            if (st->first) {
              u = std::move(*st->first);
              st->first.reset();
            } else {
              u = st->stream->take(std::chrono::milliseconds(100));
            }
            for (const std::string& e : st->writer(u)) {
              if (!sink.write(e.data(), e.size())) {
                st->stream->cancel();
                return false;
              }
            }
            if (u.done) {
              sink.done();
              return true;
            }
            if (!sink.is_writable()) {
              st->stream->cancel();
              return false;
            }
          }
        },
        [st](bool success) {
          if (!success) st->stream->cancel();
        });
  }

  static std::string sse(const json& j) {
    return "data:" + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  }

  static const char* tgi_finish(const std::string& reason) {
    if (reason == "eos") return "eos_token";
    if (reason == "stop") return "stop_sequence";
    return "length";
  }
  static const char* openai_finish(const std::string& reason) {
    return reason == "length" ? "length" : "stop";
  }

  static json token_json(const ServeToken& t) {
    return {{"id", t.id},
            {"text", t.text},
            {"logprob", std::isfinite(t.logprob) ? t.logprob : -1e30},
            {"special", t.special}};
  }

  json seed_json(const ParsedRequest& c) const { return c.seed ? json(*c.seed) : json(nullptr); }

  // ---- LoRAX / TGI ----
  void lorax(const httplib::Request& req, httplib::Response& res, ApiEndpoint endpoint) {
    const bool as_list = endpoint == ApiEndpoint::LoraxRoot;
    ParsedRequest c = parse_api_request(endpoint, req.body, parser_context());
    std::shared_ptr<RequestStream> stream = submit(c);
    if (!c.stream) {
      RequestResult r;
      const std::vector<ServeToken> tokens = collect(*stream, r);
      json out = {{"generated_text", (c.full_text ? c.prompt_text : "") + r.text}};
      if (c.details) {
        json toks = json::array();
        for (const ServeToken& t : tokens) toks.push_back(token_json(t));
        out["details"] = {{"finish_reason", tgi_finish(r.finish_reason)},
                          {"prompt_tokens", r.prompt_ids.size()},
                          {"generated_tokens", r.generated_ids.size()},
                          {"skipped_tokens", 0},
                          {"seed", seed_json(c)},
                          {"prefill", json::array()},
                          {"tokens", toks}};
      } else {
        out["details"] = nullptr;
      }
      res.set_content(
          (as_list ? json::array({out}) : out).dump(-1, ' ', false, json::error_handler_t::replace),
          "application/json");
      return;
    }
    RequestStream::Update first = first_update(*stream);
    auto held = std::make_shared<std::optional<ServeToken>>();
    const std::string prefix = c.full_text ? c.prompt_text : "";
    const json seed = seed_json(c);
    stream_events(res, stream, std::move(first), [held, prefix, seed](RequestStream::Update& u) {
      std::vector<std::string> events;
      for (ServeToken& t : u.tokens) {
        // The last token carries the result, which follows it at once: hold it until then.
        if (t.final) {
          *held = std::move(t);
          continue;
        }
        events.push_back(sse({{"token", token_json(t)}, {"generated_text", nullptr}, {"details", nullptr}}));
      }
      if (!u.done) return events;
      if (!u.error.empty()) {
        events.push_back(sse({{"error", u.error}, {"error_type", u.error_type}}));
      } else if (!held->has_value()) {
        events.push_back(sse({{"error", "the request was " + std::string(u.result.finish_reason == "cancelled"
                                                                             ? "cancelled"
                                                                             : "ended without a token")},
                              {"error_type", "generation"}}));
      } else {
        const RequestResult& r = u.result;
        events.push_back(sse({{"token", token_json(**held)},
                              {"generated_text", prefix + r.text},
                              {"details",
                               {{"finish_reason", tgi_finish(r.finish_reason)},
                                {"prompt_tokens", r.prompt_ids.size()},
                                {"generated_tokens", r.generated_ids.size()},
                                {"seed", seed}}}}));
      }
      return events;
    });
  }

  // ---- OpenAI ----
  void openai(const httplib::Request& req, httplib::Response& res, bool chat) {
    ParsedRequest c = parse_api_request(chat ? ApiEndpoint::ChatCompletions : ApiEndpoint::Completions,
                                        req.body, parser_context());
    std::shared_ptr<RequestStream> stream = submit(c);
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const char* object = chat ? "chat.completion" : "text_completion";
    auto usage = [](const RequestResult& r) {
      return json{{"prompt_tokens", r.prompt_ids.size()},
                  {"completion_tokens", r.generated_ids.size()},
                  {"total_tokens", r.prompt_ids.size() + r.generated_ids.size()}};
    };
    if (!c.stream) {
      RequestResult r;
      collect(*stream, r);
      const std::string text = (c.full_text ? c.prompt_text : "") + r.text;
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish(r.finish_reason)}};
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      else
        choice["text"] = text;
      const json out = {{"id", id},         {"object", object},    {"created", created},
                        {"model", c.model}, {"choices", {choice}}, {"usage", usage(r)}};
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    RequestStream::Update first = first_update(*stream);
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    const json base = {{"id", id}, {"object", chunk_object}, {"created", created}, {"model", c.model}};
    auto started = std::make_shared<bool>(false);
    const bool include_usage = c.include_usage;
    const std::string echo = c.full_text ? c.prompt_text : "";
    stream_events(res, stream, std::move(first), [=](RequestStream::Update& u) {
      std::vector<std::string> events;
      auto chunk = [&](const std::string& text, const json& finish, bool role) {
        json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
        if (chat) {
          json delta = {{"content", text}};
          if (role) delta["role"] = "assistant";
          choice["delta"] = delta;
        } else {
          choice["text"] = text;
        }
        json j = base;
        j["choices"] = json::array({choice});
        if (include_usage) j["usage"] = nullptr;
        return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
      };
      if (!*started) {
        *started = true;
        if (chat || !echo.empty()) events.push_back(chunk(echo, nullptr, true));
      }
      // One event per engine step: the tokens a speculative step accepted together go out together.
      std::string text;
      for (const ServeToken& t : u.tokens) {
        if (!t.with_previous && !text.empty())
          events.push_back(chunk(std::exchange(text, {}), nullptr, false));
        if (!t.special) text += t.text;
      }
      if (!text.empty()) events.push_back(chunk(text, nullptr, false));
      if (!u.done) return events;
      if (!u.error.empty() || u.result.finish_reason == "cancelled") {
        const json err = {{"error",
                           {{"message", u.error.empty() ? "the request was cancelled" : u.error},
                            {"type", "server_error"},
                            {"param", nullptr},
                            {"code", nullptr}}}};
        events.push_back("data: " + err.dump() + "\n\n");
      } else {
        events.push_back(chunk("", openai_finish(u.result.finish_reason), false));
        if (include_usage) {
          json j = base;
          j["choices"] = json::array();
          j["usage"] = usage(u.result);
          events.push_back("data: " + j.dump() + "\n\n");
        }
      }
      events.push_back("data: [DONE]\n\n");
      return events;
    });
  }

  void info(httplib::Response& res) {
    const ServeStats s = scheduler.stats();
    json j = {{"model_id", options.model_id},
              {"version", "servelab"},
              {"sha", nullptr},
              {"docker_label", nullptr},
              {"max_concurrent_requests", scheduler.options().max_batch + scheduler.options().max_queue},
              {"max_batch_size", scheduler.options().max_batch},
              {"max_queue", scheduler.options().max_queue},
              {"max_total_tokens", scheduler.max_total_tokens()},
              {"max_input_length", scheduler.max_total_tokens() - 1},
              {"max_body_bytes", options.max_body_bytes},
              {"adapters", scheduler.adapter_names()},
              {"adapter_cache", scheduler.options().adapter_cache_capacity},
              {"running", s.running},
              {"waiting", s.waiting},
              {"requests",
               {{"submitted", s.submitted},
                {"finished", s.finished},
                {"cancelled", s.cancelled},
                {"failed", s.failed}}},
              {"generated_tokens", s.generated_tokens},
              {"structured_output", structured_json()},
              {"kv_memory", kv_json()},
              {"steps", s.steps}};
    if (!options.model_info.empty()) j["model"] = json::parse(options.model_info, nullptr, false);
    res.set_content(j.dump(), "application/json");
  }

  static double quantile(std::vector<float> v, double q) {
    if (v.empty()) return 0;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }

  json kv_json() const {
    const ServeKvInfo kv = scheduler.kv_info();
    json j = {{"kind", kv.kind}, {"bytes", kv.bytes}};
    if (kv.kind == "paged") {
      j["blocks"] = kv.blocks;
      j["block_size"] = kv.block_size;
      j["prefix_caching"] = kv.prefix_caching;
    }
    return j;
  }

  json structured_json() const {
    const StructuredOutput* so = scheduler.structured_output();
    if (!so) return {{"available", false}};
    const StructuredOutputStats st = so->stats();
    return {
        {"available", true},
        {"grammars_compiled", st.grammars},
        {"compile_ms", st.compile_ms},
        {"masked_tokens", st.masked_tokens},
        {"mask_us_mean", st.masked_tokens ? st.mask_us_total / static_cast<double>(st.masked_tokens) : 0.0},
        {"mask_us_max", st.mask_us_max},
        {"fill_us_mean", st.masked_tokens ? st.fill_us_total / static_cast<double>(st.masked_tokens) : 0.0},
        {"mask_us_p50", quantile(st.mask_us, 0.5)},
        {"mask_us_p99", quantile(st.mask_us, 0.99)},
        {"fill_us_p50", quantile(st.fill_us, 0.5)},
        {"fill_us_p99", quantile(st.fill_us, 0.99)}};
  }

  void models(httplib::Response& res) {
    json data = json::array(
        {{{"id", options.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "servelab"}}});
    for (const std::string& a : scheduler.adapter_names())
      data.push_back({{"id", a},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "servelab"},
                      {"parent", options.model_id}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }

  // Runs a handler; its errors become the API's error bodies.
  void guarded(httplib::Response& res, bool openai_errors, const std::function<void()>& handler) {
    auto reply = [&](int status, const std::string& type, const std::string& message, int retry_after) {
      res.status = status;
      if (retry_after > 0) res.set_header("Retry-After", std::to_string(retry_after));
      json body;
      if (openai_errors) {
        body = {{"error",
                 {{"message", message},
                  {"type", status == 429 || status == 503 ? "server_error"
                           : status >= 500                ? "server_error"
                                                          : "invalid_request_error"},
                  {"param", nullptr},
                  {"code", nullptr}}}};
      } else {
        body = {{"error", message}, {"error_type", type}};
      }
      res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    };
    try {
      handler();
    } catch (const ApiError& e) {
      reply(e.status(), e.type(), e.what(), e.retry_after);
    } catch (const InputError& e) {
      reply(422, "validation", e.what(), 0);
    } catch (const TokenizerError& e) {
      reply(422, "validation", e.what(), 0);
    } catch (const std::exception& e) {
      reply(500, "generation", e.what(), 0);
    }
  }
};

HttpServer::HttpServer(ServeScheduler& scheduler, const Tokenizer& tokenizer, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(scheduler, tokenizer, std::move(options))) {
  Impl& m = *impl_;
  httplib::Server& s = m.server;
  const int threads =
      m.options.threads > 0
          ? m.options.threads
          : static_cast<int>(scheduler.options().max_batch + scheduler.options().max_queue + 8);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // httplib's default sets SO_REUSEPORT, with which a second server binds a port already in use
  // and the kernel splits the connections between the two: SO_REUSEADDR alone refuses that and
  // still lets a restarted server take its port back from TIME_WAIT.
  s.set_socket_options([&m](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    m.listen_fd = sock;
  });
  s.set_payload_max_length(static_cast<size_t>(m.options.max_body_bytes));
  // httplib waits this long for every request on a connection, the first one included, then
  // closes it without an answer. One second is TCP's initial retransmission timeout: a request
  // whose first segment was lost once arrived just too late and was dropped. Five seconds is
  // httplib's own default (and uvicorn's); an idle connection holds a pool thread that long.
  s.set_keep_alive_timeout(5);
  s.set_read_timeout(30);
  auto lorax = [&m](ApiEndpoint endpoint) {
    return [&m, endpoint](const httplib::Request& req, httplib::Response& res) {
      m.guarded(res, false, [&] { m.lorax(req, res, endpoint); });
    };
  };
  s.Post("/", lorax(ApiEndpoint::LoraxRoot));
  s.Post("/generate", lorax(ApiEndpoint::Generate));
  s.Post("/generate_stream", lorax(ApiEndpoint::GenerateStream));
  s.Post("/v1/completions", [&m](const httplib::Request& req, httplib::Response& res) {
    m.guarded(res, true, [&] { m.openai(req, res, false); });
  });
  s.Post("/v1/chat/completions", [&m](const httplib::Request& req, httplib::Response& res) {
    m.guarded(res, true, [&] { m.openai(req, res, true); });
  });
  s.Get("/info", [&m](const httplib::Request&, httplib::Response& res) { m.info(res); });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [&m](const httplib::Request&, httplib::Response& res) { m.models(res); });
  s.Get("/metrics", [&m](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(m.scheduler.metrics(), m.options.model_id),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  // httplib's own refusals (413 body too large, 404, 400) get a JSON body too.
  s.set_error_handler([&m](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool openai = req.path.rfind("/v1/", 0) == 0;
    std::string message = res.status == 413 ? "the body is larger than the server's limit of " +
                                                  std::to_string(m.options.max_body_bytes) + " bytes"
                          : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                                              : "bad request (HTTP " + std::to_string(res.status) + ")";
    const json body = openai ? json{{"error",
                                     {{"message", message},
                                      {"type", "invalid_request_error"},
                                      {"param", nullptr},
                                      {"code", nullptr}}}}
                             : json{{"error", message}, {"error_type", "validation"}};
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(json{{"error", message}, {"error_type", "generation"}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  httplib::Server& s = impl_->server;
  if (impl_->options.port == 0) {
    port_ = s.bind_to_any_port(impl_->options.host);
    if (port_ <= 0) throw InputError("cannot listen on " + impl_->options.host + " (any port)");
  } else {
    if (impl_->options.port < 0 || impl_->options.port > 65535 ||
        !s.bind_to_port(impl_->options.host, impl_->options.port))
      throw InputError("cannot listen on " + impl_->options.host + ":" + std::to_string(impl_->options.port) +
                       " (in use, or not an address of this machine)");
    port_ = impl_->options.port;
  }
  // httplib listens with a backlog of 5, compiled into Debian's libcpp-httplib. When more clients
  // connect at once than the accept thread takes in (64 closed-loop clients whose requests end in
  // the same step, on CPUs the engine keeps busy), Linux answers with SYN cookies and drops the
  // handshakes that overflow the accept queue: the client believes it is connected, its request
  // is never accepted, and its next segment fails the cookie check and is reset (the loadgen's
  // "cannot reach ... (Read)"). listen() again on a listening socket only resizes its queues; the
  // kernel caps the size at net.core.somaxconn.
  const int fd = impl_->listen_fd.load();
  int listening = 0;
  socklen_t len = sizeof listening;
  if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
      ::listen(fd, kListenBacklog) != 0)
    throw InputError("cannot set the listen backlog of " + impl_->options.host + ":" + std::to_string(port_));
  return port_;
}

void HttpServer::serve() { impl_->server.listen_after_bind(); }

bool HttpServer::running() const { return impl_->server.is_running(); }

void HttpServer::stop() {
  if (impl_->server.is_running()) impl_->server.stop();
}

}  // namespace servelab
