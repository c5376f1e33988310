// The load generator's requests over HTTP (cpp-httplib): one streamed request to a LoRAX/TGI or
// OpenAI route, read by the event-stream parser (load_stream.h) and timed, every failure landing in
// the result by kind; GET /v1/models and GET /metrics; and the registry of clients in flight that a
// cancelled run shuts down.
#include "serve/load_http.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/errors.h"

namespace servelab {

using nlohmann::json;

namespace load_http {

// http(s)://host[:port][/prefix] -> ("http(s)://host[:port]", "/prefix" without a trailing '/').
std::pair<std::string, std::string> split_url(const std::string& url) {
  if (url.empty()) throw InputError("--url: no server given (http://host:port)");
  const size_t scheme = url.find("://");
  const std::string s = scheme == std::string::npos ? "" : url.substr(0, scheme);
  if (s != "http" && s != "https")
    throw InputError("--url: the URL must start with http:// or https://, got '" + url + "'");
  const size_t host_start = scheme + 3;
  const size_t slash = url.find('/', host_start);
  const std::string origin = url.substr(0, slash);
  if (origin.size() <= host_start || origin[host_start] == ':')
    throw InputError("--url: the URL names no host: '" + url + "'");
  std::string prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {origin, prefix};
}

bool is_openai(LoadApi api) { return api == LoadApi::OpenAI || api == LoadApi::OpenAIChat; }

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

namespace {

// The clients of streams in flight, by the cancel flag they watch (stop_clients, load_http.h).
std::mutex g_clients_mutex;
std::multimap<const std::atomic<bool>*, httplib::Client*> g_clients;

struct RegisteredClient {
  const std::atomic<bool>* cancel;
  httplib::Client* client;
  RegisteredClient(const std::atomic<bool>* c, httplib::Client* cl) : cancel(c), client(cl) {
    if (!cancel) return;
    std::lock_guard lock(g_clients_mutex);
    g_clients.emplace(cancel, client);
  }
  ~RegisteredClient() {
    if (!cancel) return;
    std::lock_guard lock(g_clients_mutex);
    for (auto [it, end] = g_clients.equal_range(cancel); it != end; ++it)
      if (it->second == client) {
        g_clients.erase(it);
        break;
      }
  }
  RegisteredClient(const RegisteredClient&) = delete;
  RegisteredClient& operator=(const RegisteredClient&) = delete;
};

}  // namespace

void stop_clients(const std::atomic<bool>* cancel) {
  std::lock_guard lock(g_clients_mutex);
  for (auto [it, end] = g_clients.equal_range(cancel); it != end; ++it) it->second->stop();
}

}  // namespace load_http

namespace {

using load_http::Clock;
using load_http::is_openai;
using load_http::ms_since;
using load_http::num;
using load_http::RegisteredClient;
using load_http::split_url;

std::unique_ptr<httplib::Client> make_client(const LoadTarget& t, const std::string& origin) {
  auto cli = std::make_unique<httplib::Client>(origin);
  auto whole = [](double s) { return static_cast<time_t>(s); };
  auto micro = [](double s) { return static_cast<time_t>((s - std::floor(s)) * 1e6); };
  cli->set_connection_timeout(whole(t.connect_timeout_s), micro(t.connect_timeout_s));
  cli->set_read_timeout(whole(t.read_timeout_s), micro(t.read_timeout_s));
  cli->set_write_timeout(whole(t.connect_timeout_s), micro(t.connect_timeout_s));
  if (!t.ca_file.empty()) cli->set_ca_cert_path(t.ca_file.c_str());
  if (t.insecure) cli->enable_server_certificate_verification(false);
  return cli;
}

// Why a request never got an answer, for a person: the TLS cases say what to do about them.
std::string unreachable(const LoadTarget& t, httplib::Error err) {
  const std::string why = httplib::to_string(err);
  if (err == httplib::Error::SSLServerVerification)
    return "cannot reach " + t.url + ": its certificate is not trusted (SSL server verification failed; " +
           "--ca-file PEM trusts it, --insecure skips the check)";
  if (err == httplib::Error::SSLConnection)
    return "cannot reach " + t.url + ": the TLS handshake failed (is it an HTTPS server?) (" + why + ")";
  return "cannot reach " + t.url + " (" + why + ")";
}

httplib::Headers headers_of(const LoadTarget& t) {
  httplib::Headers h;
  for (const auto& [k, v] : t.headers) h.emplace(k, v);
  return h;
}

std::string one_line(std::string s, size_t max = 200) {
  if (s.size() > max) s.resize(max);
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// The message of an error body, LoRAX's {"error": "..."} or OpenAI's {"error": {"message"}}.
std::string error_message(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
  }
  const std::string line = one_line(body);
  return line.empty() ? "(no body)" : line;
}

// A JSON text that holds an object with every key the schema requires.
bool valid_for(const std::string& text, const std::string& schema_text) {
  const json value = json::parse(text, nullptr, false);
  if (value.is_discarded() || !value.is_object()) return false;
  const json schema = json::parse(schema_text, nullptr, false);
  if (schema.is_object() && schema.contains("required") && schema["required"].is_array())
    for (const json& key : schema["required"])
      if (!key.is_string() || !value.contains(key.get<std::string>())) return false;
  return true;
}

StreamProtocol protocol_of(LoadApi api) {
  return api == LoadApi::OpenAI       ? StreamProtocol::OpenAICompletions
         : api == LoadApi::OpenAIChat ? StreamProtocol::OpenAIChat
                                      : StreamProtocol::Tgi;
}

}  // namespace

StreamTiming run_stream(const LoadTarget& target, const LoadRequest& request, const std::atomic<bool>* cancel,
                        const Tokenizer* tokenizer) {
  StreamTiming st;
  st.adapter = request.adapter;
  st.max_new_tokens = request.max_new_tokens;
  st.prompt_tokens = request.prompt_tokens;
  const auto [origin, prefix] = split_url(target.url);
  const bool openai = is_openai(target.api);
  const bool chat = target.api == LoadApi::OpenAIChat;
  auto client_error = [&](const std::string& what) {
    st.error_kind = LoadErrorKind::Client;
    st.error = what;
    return st;
  };
  json body;
  if (openai) {
    body = {{"model", request.adapter.empty() ? target.model : request.adapter},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", request.prompt}}});
      body["max_completion_tokens"] = request.max_new_tokens;
    } else {
      body["prompt"] = request.prompt;
      body["max_tokens"] = request.max_new_tokens;
    }
    if (request.ignore_eos) body["ignore_eos"] = true;
    if (!request.json_schema.empty())
      body["response_format"] = {
          {"type", "json_schema"},
          {"json_schema", {{"name", "schema"}, {"schema", json::parse(request.json_schema)}}}};
  } else {
    json p = {{"max_new_tokens", request.max_new_tokens}, {"details", true}};
    if (request.ignore_eos) p["ignore_eos_token"] = true;
    if (!request.adapter.empty()) {
      if (target.api == LoadApi::Tgi)
        return client_error("the tgi API has no adapters: use --api lorax, openai or openai-chat");
      p["adapter_id"] = request.adapter;
    }
    if (!request.json_schema.empty()) {
      const json schema = json::parse(request.json_schema);
      if (target.api == LoadApi::Tgi)
        p["grammar"] = {{"type", "json"}, {"value", schema}};
      else
        p["response_format"] = {{"type", "json_object"}, {"schema", schema}};
    }
    body = {{"inputs", request.prompt}, {"parameters", p}, {"stream", true}};
  }

  auto client = make_client(target, origin);
  const RegisteredClient registered(cancel, client.get());
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + (chat ? "/v1/chat/completions" : openai ? "/v1/completions" : "/generate_stream");
  req.headers = headers_of(target);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);

  const StreamProtocol protocol = protocol_of(target.api);
  StreamParser parser(protocol);
  std::string error_body;
  double last_byte_ms = 0;
  const Clock::time_point sent = Clock::now();
  req.response_handler = [&](const httplib::Response& res) {
    st.http_status = res.status;
    last_byte_ms = ms_since(sent);
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancel && cancel->load()) return false;
    last_byte_ms = ms_since(sent);
    if (st.http_status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
      return true;
    }
    return parser.feed(std::string_view(data, n), last_byte_ms);
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent_ok = client->send(req, res, err);
  st.e2el_ms = ms_since(sent);
  if (!parser.failed() && st.http_status == 200) parser.finish(st.e2el_ms);
  st.text = parser.text();
  st.finish_reason = parser.finish_reason();
  for (const StreamChunk& c : parser.chunks()) st.chunk_ms.push_back(c.ms);
  auto fail = [&](LoadErrorKind kind, const std::string& message) {
    st.error_kind = kind;
    st.error = one_line(message, 400);
    st.chunk_tokens.assign(st.chunk_ms.size(), -1);
    finish_timing(st);
    return st;
  };
  if (cancel && cancel->load())
    return fail(LoadErrorKind::Cancelled,
                "cancelled after " + std::to_string(st.chunk_ms.size()) + " chunks");
  if (parser.failed()) return fail(parser.error_kind(), parser.error());
  if (st.http_status != 0 && st.http_status != 200)
    return fail(LoadErrorKind::Http,
                "HTTP " + std::to_string(st.http_status) + ": " + error_message(error_body));
  if (!sent_ok || !parser.ended()) {
    const bool silent =
        err == httplib::Error::Read && st.e2el_ms - last_byte_ms >= target.read_timeout_s * 950;
    if (st.http_status == 0) {
      switch (err) {
        case httplib::Error::Connection:
        case httplib::Error::ConnectionTimeout:
        case httplib::Error::BindIPAddress:
        case httplib::Error::SSLConnection:
        case httplib::Error::SSLLoadingCerts:
        case httplib::Error::SSLServerVerification:
          return fail(LoadErrorKind::Connect, unreachable(target, err));
        default:
          if (silent)
            return fail(LoadErrorKind::Timeout, "no answer from " + target.url + " within --timeout " +
                                                    num(target.read_timeout_s) + " s");
          // httplib cannot tell a connection closed before the status line (a server that died)
          // from an answer that is not HTTP (a wrong port): both are an answer that never came.
          return fail(
              LoadErrorKind::Incomplete,
              "cannot reach " + target.url +
                  ": no HTTP answer (the connection closed before a status line, or what came back is "
                  "not HTTP: " +
                  httplib::to_string(err) + ")");
      }
    }
    if (silent)
      return fail(LoadErrorKind::Timeout, "the stream from " + target.url + " went silent for --timeout " +
                                              num(target.read_timeout_s) + " s");
    return fail(LoadErrorKind::Incomplete,
                "the stream from " + target.url + " ended after " + std::to_string(st.chunk_ms.size()) +
                    " chunks without its last event (" +
                    (sent_ok ? "connection closed" : httplib::to_string(err)) + ")");
  }
  TokenCountSource source = TokenCountSource::None;
  st.output_tokens = assign_chunk_tokens(protocol, parser, tokenizer, &source);
  st.output_tokens_source = source;
  for (const StreamChunk& c : parser.chunks()) st.chunk_tokens.push_back(c.tokens);
  if (parser.usage_prompt_tokens() >= 0) st.prompt_tokens = parser.usage_prompt_tokens();
  finish_timing(st);
  st.ok = true;
  if (!request.json_schema.empty()) st.json_valid = valid_for(st.text, request.json_schema);
  return st;
}

std::vector<std::string> list_models(const LoadTarget& target) {
  const auto [origin, prefix] = split_url(target.url);
  auto client = make_client(target, origin);
  auto res = client->Get(prefix + "/v1/models", headers_of(target));
  if (!res) throw InputError(unreachable(target, res.error()));
  if (res->status != 200)
    throw InputError("GET /v1/models answered HTTP " + std::to_string(res->status) + ": " +
                     error_message(res->body));
  const json j = json::parse(res->body, nullptr, false);
  std::vector<std::string> ids;
  if (j.is_object() && j.contains("data") && j["data"].is_array())
    for (const json& m : j["data"])
      if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"].get<std::string>());
  if (ids.empty()) throw InputError("GET /v1/models on " + target.url + " lists no models");
  return ids;
}

ServerLoad scrape_server_load(const LoadTarget& target) {
  const auto [origin, prefix] = split_url(target.url);
  LoadTarget t = target;
  t.read_timeout_s = t.connect_timeout_s;  // a scrape is one small answer: no stream's long silences
  const auto client = make_client(t, origin);
  const auto res = client->Get(prefix + "/metrics", headers_of(t));
  if (!res) throw InputError(unreachable(t, res.error()) + ": no /metrics");
  if (res->status != 200)
    throw InputError(origin + prefix + "/metrics answered HTTP " + std::to_string(res->status));
  return server_load(parse_prometheus_text(res->body));
}

}  // namespace servelab