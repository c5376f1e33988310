// The load generator's scenarios: the options checked, then run_load's single, three_streams,
// adapters and structured scenarios (streams at once, one thread each) and its sweep (closed-loop
// clients or gamma/Poisson arrivals per level, a warm-up, a time bound), each level summarized.
// The requests themselves go through load_http.cpp; the report is written by load_report_write.cpp.
#include "serve/load_generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "serve/load_http.h"
#include "util/errors.h"
#include "util/utc_time.h"

namespace servelab {

using load_http::Clock;
using load_http::is_openai;
using load_http::ms_since;
using load_http::num;
using load_http::split_url;
using load_http::stop_clients;
using nlohmann::json;

namespace {

void check_seconds(double s, const char* flag, bool zero_ok) {
  if (!std::isfinite(s) || s < 0 || (!zero_ok && s == 0) || s > kMaxLoadSeconds)
    throw InputError(std::string(flag) + " must be " + (zero_ok ? "in [0, " : "in (0, ") +
                     num(kMaxLoadSeconds) + "] seconds, got " + num(s));
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

}  // namespace servelab
