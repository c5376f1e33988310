#include "serve/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "util/errors.h"
#include "util/utc_time.h"

#ifndef SERVELAB_VERSION
#define SERVELAB_VERSION "unknown"
#endif

namespace servelab {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

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

bool is_openai(LoadApi api) { return api == LoadApi::OpenAI || api == LoadApi::OpenAIChat; }

StreamProtocol protocol_of(LoadApi api) {
  return api == LoadApi::OpenAI       ? StreamProtocol::OpenAICompletions
         : api == LoadApi::OpenAIChat ? StreamProtocol::OpenAIChat
                                      : StreamProtocol::Tgi;
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void check_seconds(double s, const char* flag, bool zero_ok) {
  if (!std::isfinite(s) || s < 0 || (!zero_ok && s == 0) || s > kMaxLoadSeconds)
    throw InputError(std::string(flag) + " must be " + (zero_ok ? "in [0, " : "in (0, ") +
                     num(kMaxLoadSeconds) + "] seconds, got " + num(s));
}

// The clients of streams in flight, by the cancel flag they watch: a stream whose server is silent
// sits in a blocking read that the flag cannot interrupt, so whoever raises the flag also calls
// stop_clients(), which shuts the sockets down (httplib's Client::stop, safe from another thread).
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

void stop_clients(const std::atomic<bool>* cancel) {
  std::lock_guard lock(g_clients_mutex);
  for (auto [it, end] = g_clients.equal_range(cancel); it != end; ++it) it->second->stop();
}

}  // namespace

const char* load_api_name(LoadApi api) {
  switch (api) {
    case LoadApi::Lorax:
      return "lorax";
    case LoadApi::Tgi:
      return "tgi";
    case LoadApi::OpenAI:
      return "openai";
    case LoadApi::OpenAIChat:
      return "openai-chat";
  }
  return "?";
}

LoadApi parse_load_api(const std::string& name) {
  if (name == "lorax") return LoadApi::Lorax;
  if (name == "tgi") return LoadApi::Tgi;
  if (name == "openai") return LoadApi::OpenAI;
  if (name == "openai-chat") return LoadApi::OpenAIChat;
  throw InputError("--api: unknown API '" + name + "': use lorax, tgi, openai or openai-chat");
}

const std::string& person_schema() {
  static const std::string schema =
      R"({"properties": {"name": {"maxLength": 10, "title": "Name", "type": "string"}, )"
      R"("age": {"title": "Age", "type": "integer"}}, "required": ["name", "age"], "title": "Person", )"
      R"("type": "object"})";
  return schema;
}

double nearest_rank(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return v[std::min(i, v.size() - 1)];
}

void check_load_options(const LoadTarget& target, const LoadOptions& o) {
  split_url(target.url);
  if (!target.ca_file.empty() || target.insecure) {
    if (target.url.rfind("https://", 0) != 0)
      throw InputError(std::string(target.insecure ? "--insecure" : "--ca-file") +
                       " is for https:// servers, and the URL is '" + target.url + "'");
    if (!target.ca_file.empty() && target.insecure)
      throw InputError("give --ca-file or --insecure, not both");
    if (!target.ca_file.empty() && !std::ifstream(target.ca_file))
      throw InputError("--ca-file: cannot read '" + target.ca_file + "'");
  }
  check_seconds(target.read_timeout_s, "--timeout", false);
  check_seconds(target.connect_timeout_s, "the connect timeout", false);
  check_seconds(o.max_seconds, "--max-seconds", false);
  check_seconds(o.level_seconds, "--duration", true);
  if (o.request.max_new_tokens < 1)
    throw InputError("--max-new-tokens: max new tokens must be at least 1, got " +
                     std::to_string(o.request.max_new_tokens));
  if (o.request.max_new_tokens > kMaxOutputLen)
    throw InputError("--max-new-tokens: at most " + std::to_string(kMaxOutputLen) + ", got " +
                     std::to_string(o.request.max_new_tokens));
  if (!o.request.json_schema.empty() && json::parse(o.request.json_schema, nullptr, false).is_discarded())
    throw InputError("--schema: the JSON schema is not valid JSON");
  if (o.percentiles.empty()) throw InputError("--percentiles names no percentile");
  for (double p : o.percentiles)
    if (!(p > 0 && p <= 100)) throw InputError("--percentiles must be in (0, 100]");
  if (target.api == LoadApi::Tgi && (!o.adapters.empty() || !o.request.adapter.empty()))
    throw InputError("--adapter: the tgi API has no adapters: use --api lorax, openai or openai-chat");
  if (o.scenario != "sweep") return;
  if (o.arrival != "closed" && o.arrival != "poisson" && o.arrival != "gamma")
    throw InputError("--arrival must be closed, poisson or gamma, got '" + o.arrival + "'");
  if (!(std::isfinite(o.burstiness) && o.burstiness >= 0.01 && o.burstiness <= 100))
    throw InputError("--burstiness must be in [0.01, 100], got " + num(o.burstiness));
  if (o.levels.empty()) throw InputError("--clients: the sweep needs at least one level");
  if (o.levels.size() > 64) throw InputError("--clients: at most 64 levels");
  for (double level : o.levels) {
    if (o.arrival == "closed") {
      if (!(level >= 1 && level <= kMaxLoadClients) || level != std::floor(level))
        throw InputError("--clients: clients must be whole numbers in [1, " +
                         std::to_string(kMaxLoadClients) + "], got " + num(level));
      continue;
    }
    if (!(std::isfinite(level) && level > 0 && level <= kMaxLoadRate))
      throw InputError("--clients: rates must be > 0 and at most " +
                       std::to_string(static_cast<int64_t>(kMaxLoadRate)) + " requests per second");
    // A rate whose mean gap outlasts the run would sit silent, then stop having sent one request.
    const double bound = o.level_seconds > 0 ? std::min(o.level_seconds, o.max_seconds) : o.max_seconds;
    if (1.0 / level > bound) {
      std::ostringstream m;
      m << "--clients: at " << level << " requests per second the mean gap between requests (" << 1.0 / level
        << " s) exceeds the time bound (" << bound << " s, --max-seconds or --duration)";
      throw InputError(m.str());
    }
  }
  if (o.requests < 1) throw InputError("--requests: requests per level must be at least 1");
  if (o.requests > kMaxLoadRequests)
    throw InputError("--requests: at most " + std::to_string(kMaxLoadRequests) + " requests per level, got " +
                     std::to_string(o.requests));
  if (o.warmup < 0 || o.warmup > kMaxLoadRequests)
    throw InputError("--warmup must be in [0, " + std::to_string(kMaxLoadRequests) + "]");
}

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

namespace {

// run_stream for a worker thread, where an exception would end the process.
StreamTiming guarded_stream(const LoadTarget& target, const LoadRequest& request,
                            const std::atomic<bool>* cancel, const Tokenizer* tokenizer) {
  try {
    return run_stream(target, request, cancel, tokenizer);
  } catch (const std::exception& e) {
    StreamTiming st;
    st.adapter = request.adapter;
    st.max_new_tokens = request.max_new_tokens;
    st.error_kind = LoadErrorKind::Client;
    st.error = e.what();
    return st;
  }
}

// Streams run at once, one thread each; results in the order given.
std::vector<StreamTiming> run_together(const LoadTarget& target, const std::vector<LoadRequest>& requests,
                                       const std::atomic<bool>* cancel, LoadSink* sink, Clock::time_point t0,
                                       const Tokenizer* tokenizer) {
  std::vector<StreamTiming> out(requests.size());
  std::mutex sink_mutex;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] {
      const double start = ms_since(t0);
      out[i] = guarded_stream(target, requests[i], cancel, tokenizer);
      out[i].index = static_cast<int64_t>(i);
      out[i].start_ms = start;
      std::lock_guard lock(sink_mutex);
      if (sink) sink->on_stream(out[i]);
    });
  for (std::thread& t : threads) t.join();
  return out;
}

void summarize(LoadLevel& l, const LoadOptions& o) {
  l.metrics = compute_metrics(l.streams, l.seconds, o.percentiles, o.goodput);
  const LoadMetrics& m = l.metrics;
  l.requests = static_cast<int64_t>(l.streams.size());
  l.ok = m.completed;
  l.failed = m.failed;
  l.generated_tokens = m.total_output_tokens;
  l.tokens_per_s = m.output_throughput;
  l.requests_per_s = m.request_throughput;
  std::vector<double> ttft, itl, e2e;
  for (const StreamTiming& s : l.streams) {
    if (!s.ok) {
      if (l.errors.size() < 5) l.errors.push_back(s.error);
      continue;
    }
    if (s.ttft_ms >= 0) ttft.push_back(s.ttft_ms);
    itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
    if (s.e2el_ms >= 0) e2e.push_back(s.e2el_ms);
  }
  l.ttft_p50_ms = m.ttft.median;
  l.ttft_p99_ms = interpolated_percentile(ttft, 99);
  l.itl_p50_ms = m.itl.median;
  l.itl_p99_ms = interpolated_percentile(itl, 99);
  l.e2e_p50_ms = m.e2el.median;
}

// One phase of a level (its warm-up, or its measured requests): `count` requests at most, none sent
// after `seconds` (0: no bound). Returns the requests sent, in the order they were sent.
struct Phase {
  std::vector<StreamTiming> streams;
  double seconds = 0;
  bool time_bound = false;
};

Phase run_phase(const LoadTarget& target, const LoadOptions& o, const LoadDataset& dataset, double level,
                int64_t count, double seconds, int64_t& next_index, std::mt19937_64& rng, bool warmup,
                std::atomic<bool>& stop, LoadSink* sink, Clock::time_point t0) {
  Phase phase;
  std::mutex mutex;
  const int64_t base = next_index;
  std::atomic<int64_t> issued{0};
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline =
      seconds > 0
          ? start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))
          : Clock::time_point::max();
  std::atomic<bool> time_up{false};
  auto one = [&](int64_t i) {
    const DatasetEntry e = dataset.at(base + i);
    LoadRequest r = o.request;
    r.prompt = e.prompt;
    r.prompt_tokens = e.prompt_tokens;
    if (e.output_tokens > 0) r.max_new_tokens = e.output_tokens;
    if (!o.adapters.empty())
      r.adapter = o.adapters[static_cast<size_t>((base + i) % static_cast<int64_t>(o.adapters.size()))];
    const double at = ms_since(t0);
    StreamTiming s = guarded_stream(target, r, &stop, o.tokenizer);
    s.index = i;
    s.start_ms = at;
    s.warmup = warmup;
    std::lock_guard lock(mutex);
    phase.streams.push_back(s);
    if (sink) sink->on_stream(phase.streams.back());
  };
  auto may_send = [&] {
    if (stop) return false;
    if (Clock::now() >= deadline) {
      time_up = true;
      return false;
    }
    return true;
  };
  if (o.arrival == "closed") {
    // Each client sends its next request when its last one ended.
    std::vector<std::thread> threads;
    const auto clients = static_cast<int64_t>(level);
    for (int64_t c = 0; c < std::min(clients, count); ++c)
      threads.emplace_back([&] {
        for (int64_t i; may_send() && (i = issued++) < count;) one(i);
      });
    for (std::thread& t : threads) t.join();
  } else {
    // Open loop: arrivals at gamma-distributed gaps (shape b, mean 1/rate; b = 1 is Poisson), whatever
    // the server's pace. Finished requests' threads are joined as the run goes.
    const double shape = o.arrival == "poisson" ? 1.0 : o.burstiness;
    std::gamma_distribution<double> gap(shape, 1.0 / (level * shape));
    struct Worker {
      std::thread thread;
      std::shared_ptr<std::atomic<bool>> done;
    };
    std::list<Worker> workers;
    auto reap = [&] {
      for (auto it = workers.begin(); it != workers.end();)
        if (it->done->load()) {
          it->thread.join();
          it = workers.erase(it);
        } else {
          ++it;
        }
    };
    for (int64_t i = 0; i < count; ++i) {
      if (i > 0) {
        const auto wake =
            Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(std::min(gap(rng), kMaxLoadSeconds)));
        while (!stop && Clock::now() < wake && Clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          reap();
        }
      }
      if (!may_send()) break;
      // At most kMaxLoadClients requests in flight: later arrivals wait for one to end.
      while (!stop && static_cast<int64_t>(workers.size()) >= kMaxLoadClients) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        reap();
      }
      if (stop) break;
      auto done = std::make_shared<std::atomic<bool>>(false);
      workers.push_back({std::thread([&, i, done] {
                           one(i);
                           *done = true;
                         }),
                         done});
      issued = i + 1;
    }
    for (Worker& w : workers) w.thread.join();
  }
  phase.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  phase.time_bound = time_up;
  next_index = base + std::min<int64_t>(issued.load(), count);
  std::sort(phase.streams.begin(), phase.streams.end(),
            [](const StreamTiming& a, const StreamTiming& b) { return a.index < b.index; });
  return phase;
}

}  // namespace

LoadReport run_load(const LoadTarget& target_in, const LoadOptions& o, const std::atomic<bool>* cancel,
                    LoadSink* sink) {
  LoadTarget target = target_in;
  check_load_options(target, o);
  if (o.scenario != "single" && o.scenario != "three_streams" && o.scenario != "adapters" &&
      o.scenario != "structured" && o.scenario != "sweep")
    throw InputError("unknown scenario '" + o.scenario +
                     "': use single, three_streams, adapters, structured or sweep");
  LoadReport report;
  report.scenario = o.scenario;
  report.url = target.url;
  report.api = load_api_name(target.api);
  report.started_at = utc_now_iso8601();
  report.options = o;
  report.options.tokenizer = nullptr;
  report.options.dataset.output_len = o.request.max_new_tokens;
  // The sweep's prompts (made before anything is sent: a bad dataset is refused first).
  std::unique_ptr<LoadDataset> dataset;
  if (o.scenario == "sweep") {
    DatasetOptions d = o.dataset;
    d.output_len = o.request.max_new_tokens;
    if (d.name == "fixed" && d.prompt.empty()) d.prompt = o.request.prompt;
    d.seed = o.seed;
    dataset = std::make_unique<LoadDataset>(d, o.tokenizer);
  }
  if (is_openai(target.api) && target.model.empty()) target.model = list_models(target).front();
  report.model = target.model;

  // The run's own stop: the caller's, or the time limit (checked by a watcher thread).
  std::atomic<bool> stop{false}, done{false};
  std::thread watcher([&] {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(o.max_seconds));
    while (!done) {
      if (cancel && cancel->load()) {
        report.cancelled = true;
        stop = true;
      }
      if (Clock::now() >= until && !stop) {
        report.timed_out = true;
        stop = true;
      }
      if (stop) stop_clients(&stop);  // again each time: a stream may have started meanwhile
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  // The watcher writes report.cancelled / timed_out: it is joined before the report is returned
  // (and on an exception).
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    void now() {
      done = true;
      if (t.joinable()) t.join();
    }
    ~Join() { now(); }
  } join{done, watcher};

  const Clock::time_point t0 = Clock::now();
  auto with = [&](int64_t max_new, const std::string& adapter = "", const std::string& schema = "") {
    LoadRequest r = o.request;
    r.max_new_tokens = max_new;
    r.adapter = adapter;
    if (!schema.empty()) r.json_schema = schema;
    return r;
  };
  if (o.scenario == "single") {
    report.streams = run_together(target, {o.request}, &stop, sink, t0, o.tokenizer);
  } else if (o.scenario == "three_streams") {
    // The lesson's: one long stream and two short ones at once; continuous batching ends the
    // short ones while the long one still runs.
    report.streams = run_together(target, {with(100), with(10), with(10)}, &stop, sink, t0, o.tokenizer);
  } else if (o.scenario == "adapters") {
    std::vector<std::string> names = o.adapters;
    if (names.empty()) {
      names = list_models(target);
      names.erase(names.begin());
      if (names.empty())
        throw InputError("the server lists no adapters on /v1/models: name them with --adapter");
    }
    std::vector<LoadRequest> rs;
    for (const std::string& n : names) rs.push_back(with(o.request.max_new_tokens, n));
    report.streams = run_together(target, rs, &stop, sink, t0, o.tokenizer);
  } else if (o.scenario == "structured") {
    report.streams = run_together(target,
                                  {with(o.request.max_new_tokens, o.request.adapter,
                                        o.request.json_schema.empty() ? person_schema() : "")},
                                  &stop, sink, t0, o.tokenizer);
  } else {
    std::mt19937_64 rng(o.seed);
    int64_t next_index = 0;  // the dataset's: no prompt repeats between warm-up and levels
    for (double level : o.levels) {
      if (stop) break;
      const int64_t n = o.arrival == "closed" && o.level_seconds <= 0
                            ? std::max<int64_t>(o.requests, static_cast<int64_t>(level))
                            : o.requests;
      LoadLevel l;
      l.arrival = o.arrival;
      l.level = level;
      if (o.warmup > 0) {
        Phase w =
            run_phase(target, o, *dataset, level, o.warmup, 0, next_index, rng, true, stop, nullptr, t0);
        l.warmup_streams = std::move(w.streams);
        l.warmup_requests = static_cast<int64_t>(l.warmup_streams.size());
        if (stop) break;
      }
      Phase p =
          run_phase(target, o, *dataset, level, n, o.level_seconds, next_index, rng, false, stop, sink, t0);
      l.streams = std::move(p.streams);
      l.seconds = p.seconds;
      l.time_bound = p.time_bound;
      summarize(l, o);
      report.levels.push_back(std::move(l));
      if (sink) sink->on_level(report.levels.back());
    }
  }
  join.now();
  return report;
}

namespace {

void distribution_fields(json& out, const char* name, const Distribution& d) {
  const std::string n = name;
  out["mean_" + n + "_ms"] = d.mean;
  out["median_" + n + "_ms"] = d.median;
  out["std_" + n + "_ms"] = d.std;
  for (const auto& [p, v] : d.percentiles) out[percentile_key(p) + "_" + n + "_ms"] = v;
}

json stream_json(const StreamTiming& s, bool with_times) {
  json j = {{"index", s.index},
            {"ok", s.ok},
            {"http_status", s.http_status},
            {"adapter", s.adapter},
            {"max_new_tokens", s.max_new_tokens},
            {"start_ms", s.start_ms},
            {"ttft_ms", s.ttft_ms},
            {"tpot_ms", s.tpot_ms},
            {"e2el_ms", s.e2el_ms},
            {"tokens", s.tokens()},
            {"output_tokens", s.output_tokens},
            {"output_tokens_source", token_count_source_name(s.output_tokens_source)},
            {"prompt_tokens", s.prompt_tokens},
            {"chunks", s.chunk_ms.size()},
            {"tokens_per_s", s.tokens_per_s()},
            {"finish_reason", s.finish_reason},
            {"text", s.text}};
  if (with_times) {
    j["token_ms"] = s.token_ms;
    j["chunk_ms"] = s.chunk_ms;
    j["chunk_tokens"] = s.chunk_tokens;
    j["itl_ms"] = s.itl_ms;
  }
  if (s.warmup) j["warmup"] = true;
  if (!s.ok) {
    j["error"] = s.error;
    j["error_kind"] = load_error_kind_name(s.error_kind);
  }
  return j;
}

json level_json(const LoadLevel& l, const LoadOptions& o) {
  const LoadMetrics& m = l.metrics;
  json j = {{"arrival", l.arrival},
            {l.arrival == "closed" ? "clients" : "rate_per_s", l.level},
            {"requests", l.requests},
            {"ok", l.ok},
            {"failed", l.failed},
            {"seconds", l.seconds},
            {"generated_tokens", l.generated_tokens},
            {"tokens_per_s", l.tokens_per_s},
            {"requests_per_s", l.requests_per_s},
            {"ttft_p50_ms", l.ttft_p50_ms},
            {"ttft_p99_ms", l.ttft_p99_ms},
            {"itl_p50_ms", l.itl_p50_ms},
            {"itl_p99_ms", l.itl_p99_ms},
            {"e2e_p50_ms", l.e2e_p50_ms},
            {"errors", l.errors},
            {"warmup_requests", l.warmup_requests},
            {"time_bound", l.time_bound},
            // vLLM's names (vllm bench serve --save-result)
            {"duration", m.duration_s},
            {"completed", m.completed},
            {"total_input_tokens", m.total_input_tokens},
            {"total_output_tokens", m.total_output_tokens},
            {"request_throughput", m.request_throughput},
            {"request_goodput", m.request_goodput >= 0 ? json(m.request_goodput) : json(nullptr)},
            {"output_throughput", m.output_throughput},
            {"total_token_throughput", m.total_token_throughput},
            {"good_requests", m.good},
            {"max_output_tokens_per_s", m.max_output_tokens_per_s},
            {"max_concurrent_requests", m.max_concurrent_requests},
            {"requests_without_output_count", m.without_output_count},
            {"requests_without_prompt_count", m.without_prompt_count}};
  if (l.arrival == "closed") {
    j["max_concurrency"] = l.level;
  } else {
    j["request_rate"] = l.level;
    j["burstiness"] = l.arrival == "poisson" ? 1.0 : o.burstiness;
  }
  json kinds = json::object();
  for (const auto& [kind, n] : m.errors_by_kind) kinds[kind] = n;
  j["errors_by_kind"] = kinds;
  distribution_fields(j, "ttft", m.ttft);
  distribution_fields(j, "tpot", m.tpot);
  distribution_fields(j, "itl", m.itl);
  distribution_fields(j, "e2el", m.e2el);
  return j;
}

json run_metadata(const LoadReport& r) {
  const LoadOptions& o = r.options;
  const DatasetOptions& d = o.dataset;
  json dataset = {{"name", d.name}, {"seed", o.seed}};
  if (d.name == "random") {
    dataset["input_len"] = d.input_len;
    dataset["output_len"] = d.output_len;
    dataset["range_ratio"] = d.range_ratio;
    dataset["prefix_len"] = d.prefix_len;
    dataset["unit"] = o.tokenizer_name.empty() ? "words" : "tokens";
  } else if (d.name == "prefix-repetition") {
    dataset["prefix_len"] = d.prefix_len;
    dataset["suffix_len"] = d.suffix_len;
    dataset["num_prefixes"] = d.num_prefixes;
    dataset["output_len"] = d.output_len;
    dataset["unit"] = o.tokenizer_name.empty() ? "words" : "tokens";
  } else if (d.name == "file") {
    dataset["path"] = d.path;
  } else if (d.name == "fixed") {
    dataset["prompt"] = d.prompt.empty() ? o.request.prompt : d.prompt;
  }
  json load = {{"arrival", o.arrival},
               {"levels", o.levels},
               {"requests_per_level", o.requests},
               {"warmup_per_level", o.warmup},
               {"duration_per_level_s", o.level_seconds},
               {"max_seconds", o.max_seconds},
               {"max_new_tokens", o.request.max_new_tokens},
               {"ignore_eos", o.request.ignore_eos},
               {"seed", o.seed}};
  if (o.arrival == "gamma") load["burstiness"] = o.burstiness;
  json slo = json::object();
  if (o.goodput.ttft_ms >= 0) slo["ttft"] = o.goodput.ttft_ms;
  if (o.goodput.tpot_ms >= 0) slo["tpot"] = o.goodput.tpot_ms;
  if (o.goodput.e2el_ms >= 0) slo["e2el"] = o.goodput.e2el_ms;
  const std::string api = r.api;
  const char* endpoint = api == "openai"        ? "/v1/completions"
                         : api == "openai-chat" ? "/v1/chat/completions"
                                                : "/generate_stream";
  return {{"date", r.started_at},
          {"servelab_version", SERVELAB_VERSION},
          {"client", "servelab-cli loadgen"},
          {"target", {{"url", r.url}, {"api", r.api}, {"endpoint", endpoint}, {"model", r.model}}},
          {"model_id", r.model},
          {"tokenizer_id", o.tokenizer_name.empty() ? json(nullptr) : json(o.tokenizer_name)},
          {"dataset", dataset},
          {"load", load},
          {"percentiles", o.percentiles},
          {"goodput_slo_ms", slo}};
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string number(double v) {
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

}  // namespace

std::string load_report_json(const LoadReport& r) {
  json out = {{"scenario", r.scenario},
              {"url", r.url},
              {"api", r.api},
              {"model", r.model},
              {"timed_out", r.timed_out},
              {"cancelled", r.cancelled}};
  out.update(run_metadata(r));
  if (r.scenario == "sweep") {
    json levels = json::array();
    for (const LoadLevel& l : r.levels) levels.push_back(level_json(l, r.options));
    out["levels"] = levels;
  } else {
    json streams = json::array();
    for (const StreamTiming& s : r.streams) {
      json j = stream_json(s, true);
      if (r.scenario == "structured") j["json_valid"] = s.json_valid;
      streams.push_back(j);
    }
    out["streams"] = streams;
  }
  int64_t failed = 0;
  for (const StreamTiming& s : r.streams) failed += s.ok ? 0 : 1;
  for (const LoadLevel& l : r.levels) failed += l.failed;
  out["failed"] = failed;
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string load_requests_jsonl(const LoadReport& r) {
  std::string out;
  auto line = [&](const StreamTiming& s, const LoadLevel* l) {
    json j = stream_json(s, true);
    if (l) {
      j["level"] = l->level;
      j["arrival"] = l->arrival;
    }
    out += j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  };
  for (const StreamTiming& s : r.streams) line(s, nullptr);
  for (const LoadLevel& l : r.levels) {
    for (const StreamTiming& s : l.warmup_streams) line(s, &l);
    for (const StreamTiming& s : l.streams) line(s, &l);
  }
  return out;
}

std::string load_requests_csv(const LoadReport& r) {
  std::string out =
      "arrival,level,index,warmup,ok,error_kind,http_status,start_ms,ttft_ms,tpot_ms,e2el_ms,prompt_tokens,"
      "output_tokens,output_tokens_source,chunks,finish_reason,error\n";
  auto row = [&](const StreamTiming& s, const LoadLevel* l) {
    out += (l ? l->arrival : r.scenario) + "," + (l ? number(l->level) : "") + "," + std::to_string(s.index) +
           "," + (s.warmup ? "1" : "0") + "," + (s.ok ? "1" : "0") + "," +
           load_error_kind_name(s.error_kind) + "," + std::to_string(s.http_status) + "," +
           number(s.start_ms) + "," + number(s.ttft_ms) + "," + number(s.tpot_ms) + "," + number(s.e2el_ms) +
           "," + std::to_string(s.prompt_tokens) + "," + std::to_string(s.output_tokens) + "," +
           token_count_source_name(s.output_tokens_source) + "," + std::to_string(s.chunk_ms.size()) + "," +
           csv_field(s.finish_reason) + "," + csv_field(s.error) + "\n";
  };
  for (const StreamTiming& s : r.streams) row(s, nullptr);
  for (const LoadLevel& l : r.levels) {
    for (const StreamTiming& s : l.warmup_streams) row(s, &l);
    for (const StreamTiming& s : l.streams) row(s, &l);
  }
  return out;
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
