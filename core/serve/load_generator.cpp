#include "serve/load_generator.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "util/errors.h"

namespace servelab {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// http(s)://host[:port][/prefix] -> ("http(s)://host[:port]", "/prefix" without a trailing '/').
std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const std::string s = scheme == std::string::npos ? "" : url.substr(0, scheme);
  if (s != "http" && s != "https")
    throw InputError("the URL must start with http:// or https://, got '" + url + "'");
  const size_t host_start = scheme + 3;
  const size_t slash = url.find('/', host_start);
  const std::string origin = url.substr(0, slash);
  if (origin.size() <= host_start) throw InputError("the URL names no host: '" + url + "'");
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
  return cli;
}

httplib::Headers headers_of(const LoadTarget& t) {
  httplib::Headers h;
  for (const auto& [k, v] : t.headers) h.emplace(k, v);
  return h;
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
  std::string line = body.substr(0, 200);
  std::replace(line.begin(), line.end(), '\n', ' ');
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

}  // namespace

const char* load_api_name(LoadApi api) {
  switch (api) {
    case LoadApi::Lorax:
      return "lorax";
    case LoadApi::Tgi:
      return "tgi";
    case LoadApi::OpenAI:
      return "openai";
  }
  return "?";
}

LoadApi parse_load_api(const std::string& name) {
  if (name == "lorax") return LoadApi::Lorax;
  if (name == "tgi") return LoadApi::Tgi;
  if (name == "openai") return LoadApi::OpenAI;
  throw InputError("unknown API '" + name + "': use lorax, tgi or openai");
}

const std::string& person_schema() {
  static const std::string schema =
      R"({"properties": {"name": {"maxLength": 10, "title": "Name", "type": "string"}, )"
      R"("age": {"title": "Age", "type": "integer"}}, "required": ["name", "age"], "title": "Person", )"
      R"("type": "object"})";
  return schema;
}

double StreamTiming::tokens_per_s() const {
  if (token_ms.size() < 2) return 0;
  const double span = token_ms.back() - token_ms.front();
  return span > 0 ? static_cast<double>(token_ms.size() - 1) * 1000.0 / span : 0.0;
}

double nearest_rank(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size()));
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return v[std::min(i, v.size() - 1)];
}

StreamTiming run_stream(const LoadTarget& target, const LoadRequest& request,
                        const std::atomic<bool>* cancel) {
  StreamTiming st;
  st.adapter = request.adapter;
  st.max_new_tokens = request.max_new_tokens;
  const auto [origin, prefix] = split_url(target.url);
  const bool openai = target.api == LoadApi::OpenAI;
  json body;
  if (openai) {
    body = {{"model", request.adapter.empty() ? target.model : request.adapter},
            {"prompt", request.prompt},
            {"max_tokens", request.max_new_tokens},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
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
        throw InputError("the tgi API has no adapters: use --api lorax or openai");
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
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + (openai ? "/v1/completions" : "/generate_stream");
  req.headers = headers_of(target);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.body = body.dump();

  std::string pending, error_body;
  bool ended = false;  // the last event arrived
  const Clock::time_point sent = Clock::now();
  auto on_event = [&](const std::string& data) {
    if (openai && data == "[DONE]") {
      ended = true;
      return;
    }
    const json e = json::parse(data, nullptr, false);
    if (!e.is_object()) {
      st.error = "an event is not JSON: " + data.substr(0, 120);
      return;
    }
    if (e.contains("error") && !e["error"].is_null()) {
      st.error = "the server ended the stream with an error: " + error_message(data);
      return;
    }
    const double t = ms_since(sent);
    if (openai) {
      const json& choices = e.value("choices", json::array());
      if (!choices.is_array() || choices.empty()) return;  // the usage chunk
      const json& c = choices[0];
      std::string piece;
      if (c.contains("text") && c["text"].is_string()) piece = c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
          c["delta"]["content"].is_string())
        piece = c["delta"]["content"].get<std::string>();
      if (!piece.empty()) {
        st.token_ms.push_back(t);
        st.text += piece;
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string())
        st.finish_reason = c["finish_reason"].get<std::string>();
      return;
    }
    if (e.contains("token") && e["token"].is_object()) {
      st.token_ms.push_back(t);
      const json& tok = e["token"];
      if (!tok.value("special", false) && tok.contains("text") && tok["text"].is_string())
        st.text += tok["text"].get<std::string>();
    }
    if (e.contains("generated_text") && e["generated_text"].is_string()) {
      ended = true;
      st.text = e["generated_text"].get<std::string>();
      if (e.contains("details") && e["details"].is_object() && e["details"].contains("finish_reason") &&
          e["details"]["finish_reason"].is_string())
        st.finish_reason = e["details"]["finish_reason"].get<std::string>();
    }
  };
  req.response_handler = [&](const httplib::Response& res) {
    st.http_status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancel && cancel->load()) return false;
    if (st.http_status != 200) {
      if (error_body.size() < 4096) error_body.append(data, n);
      return true;
    }
    pending.append(data, n);
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) != 0) continue;
      std::string d = line.substr(5);
      if (!d.empty() && d.front() == ' ') d.erase(0, 1);
      on_event(d);
      if (!st.error.empty()) return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent_ok = client->send(req, res, err);
  if (!st.token_ms.empty()) st.ttft_ms = st.token_ms.front();
  if (!st.error.empty()) return st;
  if (cancel && cancel->load()) {
    st.error = "cancelled after " + std::to_string(st.tokens()) + " tokens";
    return st;
  }
  if (st.http_status != 0 && st.http_status != 200) {
    st.error = "HTTP " + std::to_string(st.http_status) + ": " + error_message(error_body);
    return st;
  }
  if (!sent_ok || !ended) {
    st.error = st.http_status == 0 ? "cannot reach " + target.url + " (" + httplib::to_string(err) + ")"
                                   : "the stream from " + target.url + " ended after " +
                                         std::to_string(st.tokens()) + " tokens without its last event (" +
                                         (sent_ok ? "connection closed" : httplib::to_string(err)) + ")";
    return st;
  }
  st.ok = true;
  if (!request.json_schema.empty()) st.json_valid = valid_for(st.text, request.json_schema);
  return st;
}

namespace {

// The adapters a server lists on GET /v1/models (all but the base model, which comes first).
std::vector<std::string> listed_models(const LoadTarget& target) {
  const auto [origin, prefix] = split_url(target.url);
  auto client = make_client(target, origin);
  auto res = client->Get(prefix + "/v1/models", headers_of(target));
  if (!res) throw InputError("cannot reach " + target.url + " (" + httplib::to_string(res.error()) + ")");
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

// run_stream for a worker thread, where an exception would end the process.
StreamTiming guarded_stream(const LoadTarget& target, const LoadRequest& request,
                            const std::atomic<bool>* cancel) {
  try {
    return run_stream(target, request, cancel);
  } catch (const std::exception& e) {
    StreamTiming st;
    st.adapter = request.adapter;
    st.max_new_tokens = request.max_new_tokens;
    st.error = e.what();
    return st;
  }
}

// Streams run at once, one thread each; results in the order given.
std::vector<StreamTiming> run_together(const LoadTarget& target, const std::vector<LoadRequest>& requests,
                                       const std::atomic<bool>* cancel, LoadSink* sink,
                                       Clock::time_point t0) {
  std::vector<StreamTiming> out(requests.size());
  std::mutex sink_mutex;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] {
      const double start = ms_since(t0);
      out[i] = guarded_stream(target, requests[i], cancel);
      out[i].index = static_cast<int64_t>(i);
      out[i].start_ms = start;
      std::lock_guard lock(sink_mutex);
      if (sink) sink->on_stream(out[i]);
    });
  for (std::thread& t : threads) t.join();
  return out;
}

LoadLevel summarize(const std::string& arrival, double level, const std::vector<StreamTiming>& streams,
                    double seconds) {
  LoadLevel l;
  l.arrival = arrival;
  l.level = level;
  l.requests = static_cast<int64_t>(streams.size());
  l.seconds = seconds;
  std::vector<double> ttft, itl, e2e;
  for (const StreamTiming& s : streams) {
    if (!s.ok) {
      ++l.failed;
      if (l.errors.size() < 5) l.errors.push_back(s.error);
      continue;
    }
    ++l.ok;
    l.generated_tokens += s.tokens();
    if (s.ttft_ms >= 0) ttft.push_back(s.ttft_ms);
    for (size_t i = 1; i < s.token_ms.size(); ++i) itl.push_back(s.token_ms[i] - s.token_ms[i - 1]);
    if (!s.token_ms.empty()) e2e.push_back(s.token_ms.back());
  }
  if (seconds > 0) {
    l.tokens_per_s = static_cast<double>(l.generated_tokens) / seconds;
    l.requests_per_s = static_cast<double>(l.ok) / seconds;
  }
  l.ttft_p50_ms = nearest_rank(ttft, 0.5);
  l.ttft_p99_ms = nearest_rank(ttft, 0.99);
  l.itl_p50_ms = nearest_rank(itl, 0.5);
  l.itl_p99_ms = nearest_rank(itl, 0.99);
  l.e2e_p50_ms = nearest_rank(e2e, 0.5);
  return l;
}

}  // namespace

LoadReport run_load(const LoadTarget& target_in, const LoadOptions& o, const std::atomic<bool>* cancel,
                    LoadSink* sink) {
  LoadTarget target = target_in;
  split_url(target.url);  // InputError before anything is sent
  if (o.request.max_new_tokens < 1)
    throw InputError("max new tokens must be at least 1, got " + std::to_string(o.request.max_new_tokens));
  if (!(o.max_seconds > 0)) throw InputError("max seconds must be > 0");
  if (!o.request.json_schema.empty() && json::parse(o.request.json_schema, nullptr, false).is_discarded())
    throw InputError("the JSON schema is not valid JSON");
  LoadReport report;
  report.scenario = o.scenario;
  report.url = target.url;
  report.api = load_api_name(target.api);
  if (target.api == LoadApi::OpenAI && target.model.empty()) target.model = listed_models(target).front();
  report.model = target.model;

  // The run's own stop: the caller's, or the time limit (checked by a watcher thread).
  std::atomic<bool> stop{false}, done{false};
  std::thread watcher([&] {
    const auto until = Clock::now() + std::chrono::duration<double>(o.max_seconds);
    while (!done) {
      if (cancel && cancel->load()) {
        report.cancelled = true;
        stop = true;
      }
      if (Clock::now() >= until && !stop) {
        report.timed_out = true;
        stop = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done = true;
      t.join();
    }
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
    report.streams = run_together(target, {o.request}, &stop, sink, t0);
  } else if (o.scenario == "three_streams") {
    // The lesson's: one long stream and two short ones at once; continuous batching ends the
    // short ones while the long one still runs.
    report.streams = run_together(target, {with(100), with(10), with(10)}, &stop, sink, t0);
  } else if (o.scenario == "adapters") {
    std::vector<std::string> names = o.adapters;
    if (names.empty()) {
      names = listed_models(target);
      names.erase(names.begin());
      if (names.empty())
        throw InputError("the server lists no adapters on /v1/models: name them with --adapter");
    }
    std::vector<LoadRequest> rs;
    for (const std::string& n : names) rs.push_back(with(o.request.max_new_tokens, n));
    report.streams = run_together(target, rs, &stop, sink, t0);
  } else if (o.scenario == "structured") {
    report.streams = run_together(target,
                                  {with(o.request.max_new_tokens, o.request.adapter,
                                        o.request.json_schema.empty() ? person_schema() : "")},
                                  &stop, sink, t0);
  } else if (o.scenario == "sweep") {
    if (o.arrival != "closed" && o.arrival != "poisson")
      throw InputError("arrival must be closed or poisson, got '" + o.arrival + "'");
    if (o.levels.empty()) throw InputError("the sweep needs at least one level");
    for (double level : o.levels)
      if (!(level > 0) || (o.arrival == "closed" && (level != std::floor(level) || level > 1024)))
        throw InputError(o.arrival == "closed" ? "clients must be whole numbers in [1, 1024]"
                                               : "Poisson rates must be > 0 requests per second");
    if (o.requests < 1) throw InputError("requests per level must be at least 1");
    std::mt19937_64 rng(o.seed);
    for (double level : o.levels) {
      if (stop) break;
      const int64_t n =
          o.arrival == "closed" ? std::max<int64_t>(o.requests, static_cast<int64_t>(level)) : o.requests;
      std::vector<StreamTiming> streams(static_cast<size_t>(n));
      std::atomic<int64_t> next{0};
      std::mutex sink_mutex;
      const Clock::time_point start = Clock::now();
      auto one = [&](int64_t i) {
        const double at = ms_since(t0);
        StreamTiming s = guarded_stream(target, o.request, &stop);
        s.index = i;
        s.start_ms = at;
        streams[static_cast<size_t>(i)] = s;
        std::lock_guard lock(sink_mutex);
        if (sink) sink->on_stream(s);
      };
      std::vector<std::thread> threads;
      if (o.arrival == "closed") {
        // Each client sends its next request when its last one ended.
        for (int64_t c = 0; c < static_cast<int64_t>(level); ++c)
          threads.emplace_back([&] {
            for (int64_t i; !stop && (i = next++) < n;) one(i);
          });
      } else {
        // Open loop: arrivals at exponential gaps, whatever the server's pace.
        std::exponential_distribution<double> gap(level);
        for (int64_t i = 0; i < n && !stop; ++i) {
          if (i > 0) {
            const auto wake = Clock::now() + std::chrono::duration<double>(gap(rng));
            while (!stop && Clock::now() < wake) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
          if (!stop) threads.emplace_back(one, i);
        }
      }
      for (std::thread& t : threads) t.join();
      // Requests never sent (the run stopped) are not counted.
      std::vector<StreamTiming> sent;
      for (int64_t i = 0; i < n; ++i)
        if (!(streams[static_cast<size_t>(i)].error.empty() && !streams[static_cast<size_t>(i)].ok))
          sent.push_back(streams[static_cast<size_t>(i)]);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      report.levels.push_back(summarize(o.arrival, level, sent, seconds));
      if (sink) sink->on_level(report.levels.back());
    }
  } else {
    throw InputError("unknown scenario '" + o.scenario +
                     "': use single, three_streams, adapters, structured or sweep");
  }
  return report;
}

std::string load_report_json(const LoadReport& r) {
  auto stream_json = [](const StreamTiming& s) {
    json j = {{"index", s.index},
              {"ok", s.ok},
              {"http_status", s.http_status},
              {"adapter", s.adapter},
              {"max_new_tokens", s.max_new_tokens},
              {"start_ms", s.start_ms},
              {"ttft_ms", s.ttft_ms},
              {"tokens", s.tokens()},
              {"tokens_per_s", s.tokens_per_s()},
              {"finish_reason", s.finish_reason},
              {"token_ms", s.token_ms},
              {"text", s.text}};
    if (!s.ok) j["error"] = s.error;
    return j;
  };
  json streams = json::array(), levels = json::array();
  for (const StreamTiming& s : r.streams) {
    json j = stream_json(s);
    if (r.scenario == "structured") j["json_valid"] = s.json_valid;
    streams.push_back(j);
  }
  for (const LoadLevel& l : r.levels)
    levels.push_back({{"arrival", l.arrival},
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
                      {"errors", l.errors}});
  json out = {{"scenario", r.scenario},
              {"url", r.url},
              {"api", r.api},
              {"model", r.model},
              {"timed_out", r.timed_out},
              {"cancelled", r.cancelled}};
  if (r.scenario == "sweep")
    out["levels"] = levels;
  else
    out["streams"] = streams;
  int64_t failed = 0;
  for (const StreamTiming& s : r.streams) failed += s.ok ? 0 : 1;
  for (const LoadLevel& l : r.levels) failed += l.failed;
  out["failed"] = failed;
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace servelab
