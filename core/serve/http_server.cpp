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
#include <iomanip>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <utility>

#include "serve/request_parser.h"
#include "serve/slow_request_guard.h"
#include "util/errors.h"
#include "util/hf_hub_cache.h"

namespace servelab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
// Connections the kernel completes before the accept thread takes them: more than the clients a
// load test opens at once (a closed loop of N clients reconnects N at a time).
constexpr int kListenBacklog = 4096;
}  // namespace

// When a request must be over (--request-timeout); never when none is set.
struct Deadline {
  std::optional<std::chrono::steady_clock::time_point> at;
  double seconds = 0;
  bool passed() const { return at && std::chrono::steady_clock::now() >= *at; }
  std::string message() const {
    std::ostringstream m;
    m << "the request ran longer than the server's --request-timeout of " << seconds
      << " s and was cancelled";
    return m.str();
  }
};

struct HttpServer::Impl {
  // Set once by attach(), before ready; read by connection threads only after ready.
  ServeScheduler* sched = nullptr;
  const Tokenizer* tok = nullptr;
  std::atomic<bool> ready{false};
  HttpServerOptions options;
  std::unique_ptr<httplib::Server> server;
  std::atomic<int64_t> next_id{0};
  std::atomic<int64_t> next_request_id{0};
  std::mutex log_mutex;
  // The listening socket, as httplib's socket-options hook last saw it (the one that bound).
  std::atomic<int> listen_fd{-1};
  // Times each connection's request from its accept (or previous answer) to its handler.
  std::unique_ptr<SlowRequestGuard> slow_guard;

  explicit Impl(HttpServerOptions o)
      : options(std::move(o)), slow_guard(std::make_unique<SlowRequestGuard>(options.read_timeout_s)) {}

  // A route's handler starts: its request arrived whole, however long the answer now streams.
  void answering(const httplib::Request& req) { slow_guard->answering(req.remote_addr, req.remote_port); }

  Deadline deadline() const {
    Deadline d;
    d.seconds = options.request_timeout_s;
    if (d.seconds > 0)
      d.at =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                 std::chrono::duration<double>(d.seconds));
    return d;
  }

  // The adapter a request names: one registered with --adapter, a local PEFT folder, or a Hub
  // repository in the local Hugging Face cache. Returns the scheduler's name for it.
  std::string resolve_adapter(const std::string& id, const std::string& source) {
    if (id.empty()) return "";
    if (source.empty() || source == "hub") {
      if (sched->knows_adapter(id)) return id;
      std::string searched;
      const std::string dir = hf_cache_snapshot(id, &searched);
      if (dir.empty() || !fs::exists(fs::path(dir) / "adapter_config.json"))
        throw ApiError(404, "not_found",
                       "unknown adapter '" + id + "': not registered with --adapter and not in the local " +
                           "Hugging Face cache (looked for " + searched +
                           "/snapshots/*/adapter_config.json)");
      AdapterSource a;
      a.name = id;
      a.peft_dir = dir;
      sched->register_adapter(a);
      return id;
    }
    if (source == "local") {
      if (sched->knows_adapter(id)) return id;
      std::error_code ec;
      if (!fs::exists(fs::path(id) / "adapter_config.json", ec))
        throw validation_error("adapter_id '" + id + "' with adapter_source local must be a PEFT folder " +
                               "(adapter_config.json + adapter_model.safetensors)");
      AdapterSource a;
      a.name = a.peft_dir = id;
      sched->register_adapter(a);
      return id;
    }
    throw validation_error("adapter_source '" + source + "' is not supported here: use local or hub");
  }

  RequestParserContext parser_context() {
    RequestParserContext ctx;
    ctx.tokenizer = tok;
    ctx.model_id = options.model_id;
    ctx.max_total_tokens = sched->max_total_tokens();
    if (StructuredOutput* so = sched->structured_output())
      ctx.json_constraint = [so](const std::string& schema) { return so->json(schema); };
    ctx.resolve_adapter = [this](const std::string& id, const std::string& source) {
      return resolve_adapter(id, source);
    };
    return ctx;
  }

  std::shared_ptr<RequestStream> submit(ParsedRequest& c) {
    try {
      return sched->submit(c.request, std::move(c.constraint));
    } catch (const OverloadedError& e) {
      ApiError err(e.shutting_down() ? 503 : 429, "overloaded", e.what());
      err.retry_after = 1;
      throw err;
    }
  }

  // Waits for the request's first token (or its end) and takes it; an ApiError (424) when it
  // failed before producing anything, so that the status line can still say so.
  static RequestStream::Update first_update(RequestStream& stream, const Deadline& deadline) {
    bool timed_out = false;
    while (!stream.wait_started(std::chrono::milliseconds(200))) {
      if (!timed_out && deadline.passed()) {
        timed_out = true;
        stream.cancel();  // a waiting request leaves the queue, a running one its slot
      }
    }
    RequestStream::Update u = stream.take(std::chrono::milliseconds(0));
    if (u.done && u.tokens.empty()) {
      if (!u.error.empty()) throw ApiError(424, u.error_type, u.error);
      if (timed_out) throw ApiError(504, "timeout", deadline.message());
      if (u.result.finish_reason == "cancelled")
        throw ApiError(503, "generation",
                       "the request was cancelled before it started (the server is stopping)");
    }
    return u;
  }

  // Everything: the tokens and the result. ApiError when it failed or was cancelled.
  static std::vector<ServeToken> collect(RequestStream& stream, RequestResult& result,
                                         const Deadline& deadline) {
    std::vector<ServeToken> tokens;
    bool timed_out = false;
    for (;;) {
      RequestStream::Update u = stream.take(std::chrono::milliseconds(200));
      for (ServeToken& t : u.tokens) tokens.push_back(std::move(t));
      if (!u.done) {
        if (!timed_out && deadline.passed()) {
          timed_out = true;
          stream.cancel();
        }
        continue;
      }
      if (!u.error.empty()) throw ApiError(424, u.error_type, u.error);
      if (timed_out) throw ApiError(504, "timeout", deadline.message());
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
                            RequestStream::Update first, Writer writer, const Deadline& deadline) {
    struct State {
      std::shared_ptr<RequestStream> stream;
      std::optional<RequestStream::Update> first;
      Writer writer;
      Deadline deadline;
      bool timed_out = false;
    };
    auto st = std::make_shared<State>(
        State{std::move(stream), std::move(first), std::move(writer), deadline, false});
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
            if (!u.done && !st->timed_out && st->deadline.passed()) {
              st->timed_out = true;
              st->stream->cancel();  // its last update (cancelled) then carries the reason
            }
            if (u.done && st->timed_out && u.error.empty()) {
              u.error = st->deadline.message();
              u.error_type = "timeout";
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

  static double finite(double v) { return std::isfinite(v) ? v : -1e30; }
  static json bytes_of(const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(ch);
    return b;
  }
  // TGI's top_tokens entry of a token: its alternatives as tokens.
  json top_tokens_json(const ServeToken& t) const {
    const std::vector<int32_t> stops = tok->stop_ids();
    json top = json::array();
    for (const auto& [id, lp] : t.top)
      top.push_back({{"id", id},
                     {"text", tok->token_bytes(id)},
                     {"logprob", finite(lp)},
                     {"special", std::find(stops.begin(), stops.end(), id) != stops.end()}});
    return top;
  }
  // OpenAI's logprobs of these tokens (stop tokens left out, as they are from the text): chat's
  // {"content": [{token, logprob, bytes, top_logprobs}]}, completions' {tokens, token_logprobs,
  // top_logprobs, text_offset}, offsets counted from `offset` in the returned text.
  json openai_logprobs(const std::vector<const ServeToken*>& tokens, bool chat, size_t offset) const {
    if (chat) {
      json content = json::array();
      for (const ServeToken* t : tokens) {
        if (t->special) continue;
        const std::string s = tok->token_bytes(t->id);
        json top = json::array();
        for (const auto& [id, lp] : t->top) {
          const std::string ts = tok->token_bytes(id);
          top.push_back({{"token", ts}, {"logprob", finite(lp)}, {"bytes", bytes_of(ts)}});
        }
        content.push_back(
            {{"token", s}, {"logprob", finite(t->logprob)}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    for (const ServeToken* t : tokens) {
      if (t->special) continue;
      toks.push_back(tok->token_bytes(t->id));
      lps.push_back(finite(t->logprob));
      json top = json::object();
      for (const auto& [id, lp] : t->top) top[tok->token_bytes(id)] = finite(lp);
      tops.push_back(top);
      offsets.push_back(offset);
      offset += t->text.size();
    }
    return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  json seed_json(const ParsedRequest& c) const { return c.seed ? json(*c.seed) : json(nullptr); }

  // ---- LoRAX / TGI ----
  void lorax(const httplib::Request& req, httplib::Response& res, ApiEndpoint endpoint) {
    const bool as_list = endpoint == ApiEndpoint::LoraxRoot;
    ParsedRequest c = parse_api_request(endpoint, req.body, parser_context());
    const Deadline deadline = this->deadline();
    std::shared_ptr<RequestStream> stream = submit(c);
    if (!c.stream) {
      RequestResult r;
      const std::vector<ServeToken> tokens = collect(*stream, r, deadline);
      json out = {{"generated_text", (c.full_text ? c.prompt_text : "") + r.text}};
      if (c.details) {
        json toks = json::array(), top = json::array();
        for (const ServeToken& t : tokens) {
          toks.push_back(token_json(t));
          top.push_back(top_tokens_json(t));
        }
        out["details"] = {{"finish_reason", tgi_finish(r.finish_reason)},
                          {"prompt_tokens", r.prompt_ids.size()},
                          {"generated_tokens", r.generated_ids.size()},
                          {"skipped_tokens", 0},
                          {"seed", seed_json(c)},
                          {"prefill", json::array()},
                          {"tokens", toks}};
        if (c.logprobs > 0) out["details"]["top_tokens"] = top;
      } else {
        out["details"] = nullptr;
      }
      res.set_content(
          (as_list ? json::array({out}) : out).dump(-1, ' ', false, json::error_handler_t::replace),
          "application/json");
      return;
    }
    RequestStream::Update first = first_update(*stream, deadline);
    auto held = std::make_shared<std::optional<ServeToken>>();
    const std::string prefix = c.full_text ? c.prompt_text : "";
    const json seed = seed_json(c);
    const bool top_tokens = c.logprobs > 0;
    stream_events(
        res, stream, std::move(first),
        [this, held, prefix, seed, top_tokens](RequestStream::Update& u) {
          std::vector<std::string> events;
          for (ServeToken& t : u.tokens) {
            // The last token carries the result, which follows it at once: hold it until then.
            if (t.final) {
              *held = std::move(t);
              continue;
            }
            json e = {{"token", token_json(t)}, {"generated_text", nullptr}, {"details", nullptr}};
            if (top_tokens) e["top_tokens"] = top_tokens_json(t);
            events.push_back(sse(e));
          }
          if (!u.done) return events;
          if (!u.error.empty()) {
            events.push_back(sse({{"error", u.error}, {"error_type", u.error_type}}));
          } else if (!held->has_value()) {
            events.push_back(
                sse({{"error", "the request was " + std::string(u.result.finish_reason == "cancelled"
                                                                    ? "cancelled"
                                                                    : "ended without a token")},
                     {"error_type", "generation"}}));
          } else {
            const RequestResult& r = u.result;
            json e = {{"token", token_json(**held)},
                      {"generated_text", prefix + r.text},
                      {"details",
                       {{"finish_reason", tgi_finish(r.finish_reason)},
                        {"prompt_tokens", r.prompt_ids.size()},
                        {"generated_tokens", r.generated_ids.size()},
                        {"seed", seed}}}};
            if (top_tokens) e["top_tokens"] = top_tokens_json(**held);
            events.push_back(sse(e));
          }
          return events;
        },
        deadline);
  }

  // ---- OpenAI ----
  void openai(const httplib::Request& req, httplib::Response& res, bool chat) {
    ParsedRequest c = parse_api_request(chat ? ApiEndpoint::ChatCompletions : ApiEndpoint::Completions,
                                        req.body, parser_context());
    const Deadline deadline = this->deadline();
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
      const std::vector<ServeToken> tokens = collect(*stream, r, deadline);
      const std::string prefix = c.full_text ? c.prompt_text : "";
      const std::string text = prefix + r.text;
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish(r.finish_reason)}};
      if (c.logprobs >= 0) {
        std::vector<const ServeToken*> all;
        for (const ServeToken& t : tokens) all.push_back(&t);
        choice["logprobs"] = openai_logprobs(all, chat, prefix.size());
      }
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      else
        choice["text"] = text;
      const json out = {{"id", id},         {"object", object},    {"created", created},
                        {"model", c.model}, {"choices", {choice}}, {"usage", usage(r)}};
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    RequestStream::Update first = first_update(*stream, deadline);
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    const json base = {{"id", id}, {"object", chunk_object}, {"created", created}, {"model", c.model}};
    auto started = std::make_shared<bool>(false);
    const bool include_usage = c.include_usage;
    const std::string echo = c.full_text ? c.prompt_text : "";
    const bool logprobs = c.logprobs >= 0;
    auto offset = std::make_shared<size_t>(echo.size());  // completions' text_offset so far
    stream_events(
        res, stream, std::move(first),
        [=, this](RequestStream::Update& u) {
          std::vector<std::string> events;
          auto chunk = [&](const std::string& text, const json& finish, bool role,
                           const std::vector<const ServeToken*>& tokens = {}) {
            json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
            if (logprobs && !tokens.empty()) {
              choice["logprobs"] = openai_logprobs(tokens, chat, *offset);
              *offset += text.size();
            }
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
          std::vector<const ServeToken*> group;
          for (const ServeToken& t : u.tokens) {
            if (!t.with_previous && !text.empty())
              events.push_back(chunk(std::exchange(text, {}), nullptr, false, std::exchange(group, {})));
            if (!t.special) {
              text += t.text;
              group.push_back(&t);
            }
          }
          if (!text.empty()) events.push_back(chunk(text, nullptr, false, group));
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
        },
        deadline);
  }

  void info(httplib::Response& res) {
    const ServeStats s = sched->stats();
    json j = {{"model_id", options.model_id},
              {"version", "servelab"},
              {"sha", nullptr},
              {"docker_label", nullptr},
              {"max_concurrent_requests", sched->options().max_batch + sched->options().max_queue},
              {"max_batch_size", sched->options().max_batch},
              {"max_queue", sched->options().max_queue},
              {"max_total_tokens", sched->max_total_tokens()},
              {"max_input_length", sched->max_total_tokens() - 1},
              {"max_body_bytes", options.max_body_bytes},
              {"adapters", sched->adapter_names()},
              {"adapter_cache", sched->options().adapter_cache_capacity},
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
    const ServeKvInfo kv = sched->kv_info();
    json j = {{"kind", kv.kind}, {"bytes", kv.bytes}};
    if (kv.kind == "paged") {
      j["blocks"] = kv.blocks;
      j["block_size"] = kv.block_size;
      j["prefix_caching"] = kv.prefix_caching;
    }
    return j;
  }

  json structured_json() const {
    const StructuredOutput* so = sched->structured_output();
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
    for (const std::string& a : sched->adapter_names())
      data.push_back({{"id", a},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "servelab"},
                      {"parent", options.model_id}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }

  // An error answer in the route's API: OpenAI's {"error": {message, type, param, code}} on /v1/*
  // and vLLM's /tokenize routes, where a malformed request is 400 as OpenAI answers it; LoRAX/TGI's
  // {"error", "error_type"} with its 422 elsewhere.
  static void reply_error(httplib::Response& res, bool openai, int status, const std::string& type,
                          const std::string& message, int retry_after = 0) {
    if (openai && status == 422) status = 400;
    res.status = status;
    if (retry_after > 0) res.set_header("Retry-After", std::to_string(retry_after));
    json body;
    if (openai) {
      const char* kind = status >= 500 || status == 429 ? "server_error"
                         : status == 401                ? "authentication_error"
                                                        : "invalid_request_error";
      body = {{"error", {{"message", message}, {"type", kind}, {"param", nullptr}, {"code", nullptr}}}};
    } else {
      body = {{"error", message}, {"error_type", type}};
    }
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  static bool openai_route(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
  }

  // Runs a handler; its errors become the API's error bodies.
  void guarded(httplib::Response& res, bool openai_errors, const std::function<void()>& handler) {
    try {
      handler();
    } catch (const ApiError& e) {
      reply_error(res, openai_errors, e.status(), e.type(), e.what(), e.retry_after);
    } catch (const InputError& e) {
      reply_error(res, openai_errors, 422, "validation", e.what());
    } catch (const TokenizerError& e) {
      reply_error(res, openai_errors, 422, "validation", e.what());
    } catch (const std::exception& e) {
      reply_error(res, openai_errors, 500, "generation", e.what());
    }
  }

  // The origin a CORS answer names: the request's Origin when allowed ("*" allows any), else "".
  std::string allowed_origin(const httplib::Request& req) const {
    const std::string origin = req.get_header_value("Origin");
    if (origin.empty()) return "";
    for (const std::string& o : options.allowed_origins)
      if (o == "*" || o == origin) return origin;
    return "";
  }

  // Whether the request carries the API key (compared in constant time).
  bool authorized(const httplib::Request& req) const {
    const std::string header = req.get_header_value("Authorization");
    const std::string want = "Bearer " + options.api_key;
    unsigned char diff = header.size() == want.size() ? 0 : 1;
    for (size_t i = 0; i < want.size(); ++i)
      diff |= static_cast<unsigned char>(i < header.size() ? header[i] ^ want[i] : 1);
    return diff == 0;
  }

  // Before any route: the request id, CORS, the loading state and the API key.
  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
    request_started = std::chrono::steady_clock::now();
    std::string id = req.get_header_value("X-Request-Id");
    const bool usable = !id.empty() && id.size() <= 128 &&
                        std::all_of(id.begin(), id.end(), [](char ch) { return ch > ' ' && ch < 127; });
    if (!usable) id = "req-" + std::to_string(next_request_id++);
    request_id = id;
    res.set_header("X-Request-Id", id);
    const bool openai = openai_route(req.path);
    const std::string origin = allowed_origin(req);
    if (!origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {  // a browser's CORS preflight: answered here, never needs the key
      if (origin.empty()) {
        reply_error(res, openai, 400, "validation",
                    options.allowed_origins.empty()
                        ? "cross-origin requests are off (serve --allowed-origins ORIGIN turns them on)"
                        : "origin '" + req.get_header_value("Origin") + "' is not in --allowed-origins");
        return httplib::Server::HandlerResponse::Handled;
      }
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id");
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!ready.load(std::memory_order_acquire)) {
      if (req.path == "/health") {
        res.status = 503;
        res.set_content(R"({"status":"loading"})", "application/json");
      } else {
        reply_error(res, openai, 503, "loading",
                    "the model is still loading: try again shortly (GET /health says when)", 5);
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool open = req.path == "/health" || (req.path == "/metrics" && !options.metrics_need_key);
    if (!options.api_key.empty() && !open && !authorized(req)) {
      res.set_header("WWW-Authenticate", "Bearer");
      reply_error(res, openai, 401, "unauthorized",
                  req.has_header("Authorization")
                      ? "the API key is not the server's (Authorization: Bearer KEY)"
                      : "this server needs an API key: send Authorization: Bearer KEY");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // The access log's line for an answered request.
  void log_access(const httplib::Request& req, const httplib::Response& res) {
    if (!options.access_log) return;
    if (req.remote_addr.empty()) {
      // httplib answered a request it could not read whole (malformed headers, or a connection
      // dropped for sending too slowly): no route, id or start of ours ran.
      std::lock_guard<std::mutex> lock(log_mutex);
      options.access_log("- - \"" + (req.method.empty() ? std::string("?") : req.method + ' ' + req.path) +
                         "\" " + std::to_string(res.status) + " (the request was not read whole)");
      return;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - request_started).count();
    std::ostringstream line;
    line << request_id << ' ' << req.remote_addr << ':' << req.remote_port << " \"" << req.method << ' '
         << req.path << "\" " << res.status << ' ' << std::fixed << std::setprecision(1) << ms << " ms";
    std::lock_guard<std::mutex> lock(log_mutex);
    options.access_log(line.str());
  }

  // A request's id and start, for the access log: httplib runs a request's routing, handler and
  // logger on one connection thread.
  static thread_local std::string request_id;
  static thread_local std::chrono::steady_clock::time_point request_started;

  void add_routes();
};

thread_local std::string HttpServer::Impl::request_id;
thread_local std::chrono::steady_clock::time_point HttpServer::Impl::request_started;

void HttpServer::Impl::add_routes() {
  Impl& m = *this;
  httplib::Server& s = *server;
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
  const auto whole_seconds = [](double s) { return static_cast<time_t>(s); };
  const auto microseconds = [](double s) {
    return static_cast<time_t>((s - static_cast<double>(static_cast<time_t>(s))) * 1e6);
  };
  s.set_read_timeout(whole_seconds(m.options.read_timeout_s), microseconds(m.options.read_timeout_s));
  s.set_write_timeout(whole_seconds(m.options.write_timeout_s), microseconds(m.options.write_timeout_s));
  s.set_pre_routing_handler(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.pre_route(req, res); });
  // After every answer, httplib's own refusals included: the connection's next request starts.
  s.set_logger([&m](const httplib::Request& req, const httplib::Response& res) {
    if (!req.remote_addr.empty()) m.slow_guard->answered(req.remote_addr, req.remote_port);
    m.log_access(req, res);
  });
  // The POST routes' bodies are read before their handlers run: a handler's start is the end of
  // its request. GET routes answer at once, and their answer restarts the clock (logger above).
  auto lorax = [&m](ApiEndpoint endpoint) {
    return [&m, endpoint](const httplib::Request& req, httplib::Response& res) {
      m.answering(req);
      m.guarded(res, false, [&] { m.lorax(req, res, endpoint); });
    };
  };
  s.Post("/", lorax(ApiEndpoint::LoraxRoot));
  s.Post("/generate", lorax(ApiEndpoint::Generate));
  s.Post("/generate_stream", lorax(ApiEndpoint::GenerateStream));
  s.Post("/v1/completions", [&m](const httplib::Request& req, httplib::Response& res) {
    m.answering(req);
    m.guarded(res, true, [&] { m.openai(req, res, false); });
  });
  s.Post("/v1/chat/completions", [&m](const httplib::Request& req, httplib::Response& res) {
    m.answering(req);
    m.guarded(res, true, [&] { m.openai(req, res, true); });
  });
  for (const bool detokenize : {false, true})
    s.Post(detokenize ? "/detokenize" : "/tokenize",
           [&m, detokenize](const httplib::Request& req, httplib::Response& res) {
             m.answering(req);
             m.guarded(res, true, [&] {
               res.set_content(tokenize_api(req.body, m.parser_context(), detokenize), "application/json");
             });
           });
  s.Get("/info", [&m](const httplib::Request&, httplib::Response& res) { m.info(res); });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [&m](const httplib::Request&, httplib::Response& res) { m.models(res); });
  s.Get("/metrics", [&m](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(m.sched->metrics(), m.options.model_id),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  // httplib's own refusals (413 body too large, 404, 400) get a JSON body too.
  s.set_error_handler([&m](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 413 ? "the body is larger than the server's limit of " +
                                                        std::to_string(m.options.max_body_bytes) + " bytes"
                                : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                                                    : "bad request (HTTP " + std::to_string(res.status) + ")";
    const int status = res.status;
    reply_error(res, openai_route(req.path), status, "validation", message);
    res.status = status;  // httplib's own status stands (a 400 stays 400, a 404 404)
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

namespace {
std::unique_ptr<httplib::Server> make_server(const HttpServerOptions& o) {
  if (o.ssl_certfile.empty() != o.ssl_keyfile.empty())
    throw InputError("HTTPS needs both a certificate (--ssl-certfile) and its key (--ssl-keyfile)");
  if (o.ssl_certfile.empty()) return std::make_unique<httplib::Server>();
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--ssl-certfile", o.ssl_certfile},
        std::pair<const char*, const std::string&>{"--ssl-keyfile", o.ssl_keyfile}}) {
    std::ifstream f(path);
    if (!f) throw InputError(std::string(flag) + ": cannot read '" + path + "'");
  }
  auto s = std::make_unique<httplib::SSLServer>(o.ssl_certfile.c_str(), o.ssl_keyfile.c_str());
  if (!s->is_valid())
    throw InputError("--ssl-certfile/--ssl-keyfile: '" + o.ssl_certfile + "' and '" + o.ssl_keyfile +
                     "' are not a PEM certificate and its private key");
  return s;
}
}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  if (m.options.threads <= 0)
    throw InputError("HttpServer: a server started before its model needs options.threads");
  m.server = make_server(m.options);
  const int threads = m.options.threads;
  m.server->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  m.add_routes();
}

void HttpServer::attach(ServeScheduler& scheduler, const Tokenizer& tokenizer, const std::string& model_id,
                        const std::string& model_info) {
  impl_->sched = &scheduler;
  impl_->tok = &tokenizer;
  impl_->options.model_id = model_id;
  impl_->options.model_info = model_info;
  impl_->ready.store(true, std::memory_order_release);
}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::tls() const { return !impl_->options.ssl_certfile.empty(); }

int HttpServer::bind() {
  httplib::Server& s = *impl_->server;
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

void HttpServer::serve() {
  impl_->slow_guard->start(port_);
  impl_->server->listen_after_bind();
  impl_->slow_guard->stop();
}

int64_t HttpServer::slow_connections_dropped() const { return impl_->slow_guard->dropped(); }

bool HttpServer::running() const { return impl_->server->is_running(); }

void HttpServer::stop() {
  if (impl_->server->is_running()) impl_->server->stop();
}

}  // namespace servelab
