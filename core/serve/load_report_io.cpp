#include "serve/load_report_io.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "util/errors.h"

namespace servelab {

using nlohmann::json;

namespace {

// Reads fields of one JSON object, each named with its place for the message when its type is wrong.
// An absent field or a null keeps the default (a NaN or an infinity is written as null).
class Fields {
 public:
  Fields(const json& object, std::string where) : o_(object), where_(std::move(where)) {
    if (!o_.is_object()) throw InputError(where_ + " is not a JSON object");
  }
  const json* get(const char* key) const {
    const auto it = o_.find(key);
    return it == o_.end() || it->is_null() ? nullptr : &*it;
  }
  double number(const char* key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) throw InputError(name(key) + " is not a number");
    return v->get<double>();
  }
  int64_t integer(const char* key, int64_t fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number_integer()) throw InputError(name(key) + " is not a whole number");
    return v->get<int64_t>();
  }
  bool flag(const char* key, bool fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) throw InputError(name(key) + " is not true or false");
    return v->get<bool>();
  }
  std::string text(const char* key) const {
    const json* v = get(key);
    if (!v) return {};
    if (!v->is_string()) throw InputError(name(key) + " is not a string");
    return v->get<std::string>();
  }
  template <typename T>
  std::vector<T> list(const char* key) const {
    const json* v = get(key);
    if (!v) return {};
    if (!v->is_array()) throw InputError(name(key) + " is not a list");
    std::vector<T> out;
    for (const json& item : *v) {
      const bool fits = std::is_same_v<T, std::string> ? item.is_string()
                        : std::is_integral_v<T>        ? item.is_number_integer()
                                                       : item.is_number();
      if (!fits) throw InputError(name(key) + " holds an item of the wrong type");
      out.push_back(item.get<T>());
    }
    return out;
  }
  const json* array(const char* key) const {
    const json* v = get(key);
    if (v && !v->is_array()) throw InputError(name(key) + " is not a list");
    return v;
  }
  std::string name(const char* key) const { return where_.empty() ? key : where_ + "." + key; }

 private:
  const json& o_;
  std::string where_;
};

// An enum's value by the name its writer gives it (InputError for a name none has).
template <typename E, size_t N>
E named(const Fields& f, const char* key, const E (&values)[N], const char* (*name)(E), E fallback) {
  if (!f.get(key)) return fallback;
  const std::string text = f.text(key);
  for (E v : values)
    if (text == name(v)) return v;
  throw InputError(f.name(key) + " '" + text + "' is none of the writer's names");
}

Distribution read_distribution(const Fields& f, const std::string& n,
                               const std::vector<double>& percentiles) {
  Distribution d;
  d.mean = f.number(("mean_" + n + "_ms").c_str(), 0);
  d.median = f.number(("median_" + n + "_ms").c_str(), 0);
  d.std = f.number(("std_" + n + "_ms").c_str(), 0);
  for (double p : percentiles) {
    const std::string key = percentile_key(p) + "_" + n + "_ms";
    if (f.get(key.c_str())) d.percentiles.emplace_back(p, f.number(key.c_str(), 0));
  }
  return d;
}

StreamTiming read_stream(const json& j, const std::string& where) {
  const Fields f(j, where);
  StreamTiming s;
  s.index = f.integer("index", 0);
  s.ok = f.flag("ok", false);
  s.warmup = f.flag("warmup", false);
  s.http_status = static_cast<int>(f.integer("http_status", 0));
  s.error = f.text("error");
  static const LoadErrorKind kKinds[] = {
      LoadErrorKind::None,       LoadErrorKind::Connect,     LoadErrorKind::Timeout,
      LoadErrorKind::Http,       LoadErrorKind::ServerError, LoadErrorKind::BadResponse,
      LoadErrorKind::Incomplete, LoadErrorKind::Cancelled,   LoadErrorKind::Client};
  s.error_kind = named(f, "error_kind", kKinds, &load_error_kind_name, LoadErrorKind::None);
  s.adapter = f.text("adapter");
  s.max_new_tokens = f.integer("max_new_tokens", 0);
  s.start_ms = f.number("start_ms", 0);
  s.ttft_ms = f.number("ttft_ms", -1);
  s.e2el_ms = f.number("e2el_ms", -1);
  s.tpot_ms = f.number("tpot_ms", -1);
  s.prompt_tokens = f.integer("prompt_tokens", -1);
  s.output_tokens = f.integer("output_tokens", -1);
  static const TokenCountSource kSources[] = {TokenCountSource::None, TokenCountSource::Usage,
                                              TokenCountSource::TokenEvents, TokenCountSource::Tokenizer};
  s.output_tokens_source =
      named(f, "output_tokens_source", kSources, &token_count_source_name, TokenCountSource::None);
  s.chunk_ms = f.list<double>("chunk_ms");
  s.chunk_tokens = f.list<int64_t>("chunk_tokens");
  s.itl_ms = f.list<double>("itl_ms");
  s.token_ms = f.list<double>("token_ms");
  s.text = f.text("text");
  s.finish_reason = f.text("finish_reason");
  s.json_valid = f.flag("json_valid", false);
  return s;
}

LoadLevel read_level(const json& j, const std::string& where, const std::vector<double>& percentiles) {
  const Fields f(j, where);
  LoadLevel l;
  l.arrival = f.text("arrival");
  if (l.arrival != "closed" && l.arrival != "poisson" && l.arrival != "gamma")
    throw InputError(f.name("arrival") + " is not closed, poisson or gamma");
  l.level = f.number(l.arrival == "closed" ? "clients" : "rate_per_s", 0);
  l.requests = f.integer("requests", 0);
  l.ok = f.integer("ok", 0);
  l.failed = f.integer("failed", 0);
  l.seconds = f.number("seconds", 0);
  l.generated_tokens = f.integer("generated_tokens", 0);
  l.tokens_per_s = f.number("tokens_per_s", 0);
  l.requests_per_s = f.number("requests_per_s", 0);
  l.ttft_p50_ms = f.number("ttft_p50_ms", 0);
  l.ttft_p99_ms = f.number("ttft_p99_ms", 0);
  l.itl_p50_ms = f.number("itl_p50_ms", 0);
  l.itl_p99_ms = f.number("itl_p99_ms", 0);
  l.e2e_p50_ms = f.number("e2e_p50_ms", 0);
  l.errors = f.list<std::string>("errors");
  l.warmup_requests = f.integer("warmup_requests", 0);
  l.time_bound = f.flag("time_bound", false);
  LoadMetrics& m = l.metrics;
  m.duration_s = f.number("duration", l.seconds);
  m.completed = f.integer("completed", l.ok);
  m.failed = l.failed;
  m.total_input_tokens = f.integer("total_input_tokens", 0);
  m.total_output_tokens = f.integer("total_output_tokens", 0);
  m.request_throughput = f.number("request_throughput", 0);
  m.request_goodput = f.number("request_goodput", -1);
  m.output_throughput = f.number("output_throughput", 0);
  m.total_token_throughput = f.number("total_token_throughput", 0);
  m.good = f.integer("good_requests", 0);
  m.max_output_tokens_per_s = f.number("max_output_tokens_per_s", 0);
  m.max_concurrent_requests = f.integer("max_concurrent_requests", 0);
  m.without_output_count = f.integer("requests_without_output_count", 0);
  m.without_prompt_count = f.integer("requests_without_prompt_count", 0);
  if (const json* kinds = f.get("errors_by_kind")) {
    const Fields k(*kinds, f.name("errors_by_kind"));
    for (const auto& [kind, n] : kinds->items())
      m.errors_by_kind.emplace_back(kind, k.integer(kind.c_str(), 0));
  }
  m.ttft = read_distribution(f, "ttft", percentiles);
  m.tpot = read_distribution(f, "tpot", percentiles);
  m.itl = read_distribution(f, "itl", percentiles);
  m.e2el = read_distribution(f, "e2el", percentiles);
  // The requests themselves when a writer kept them (load_report_json does not: --save-requests has them).
  if (const json* streams = f.array("streams"))
    for (size_t i = 0; i < streams->size(); ++i)
      l.streams.push_back(read_stream((*streams)[i], f.name("streams") + "[" + std::to_string(i) + "]"));
  return l;
}

}  // namespace

LoadReport parse_load_report_json(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) throw InputError("not JSON text");
  if (!j.is_object() || !j.contains("scenario") || !(j.contains("streams") || j.contains("levels")))
    throw InputError("not a saved load run (a load run's JSON names its scenario and has streams or levels)");
  const Fields f(j, "");
  LoadReport r;
  r.scenario = f.text("scenario");
  static const char* const kScenarios[] = {"single", "three_streams", "adapters", "structured", "sweep"};
  if (std::find(std::begin(kScenarios), std::end(kScenarios), r.scenario) == std::end(kScenarios))
    throw InputError("scenario '" + r.scenario + "' is none of the load generator's");
  r.url = f.text("url");
  r.api = f.text("api");
  r.model = f.text("model");
  r.timed_out = f.flag("timed_out", false);
  r.cancelled = f.flag("cancelled", false);
  r.started_at = f.text("date");
  LoadOptions& o = r.options;
  o.scenario = r.scenario;
  if (f.get("percentiles")) o.percentiles = f.list<double>("percentiles");
  if (const json* slo = f.get("goodput_slo_ms")) {
    const Fields s(*slo, "goodput_slo_ms");
    o.goodput.ttft_ms = s.number("ttft", -1);
    o.goodput.tpot_ms = s.number("tpot", -1);
    o.goodput.e2el_ms = s.number("e2el", -1);
  }
  o.tokenizer_name = f.text("tokenizer_id");
  // The run's options as its metadata gives them, so that a reopened run saved again says the same.
  if (const json* load = f.get("load")) {
    const Fields l(*load, "load");
    if (l.get("arrival")) o.arrival = l.text("arrival");
    o.levels = l.list<double>("levels");
    o.requests = l.integer("requests_per_level", o.requests);
    o.warmup = l.integer("warmup_per_level", o.warmup);
    o.level_seconds = l.number("duration_per_level_s", o.level_seconds);
    o.max_seconds = l.number("max_seconds", o.max_seconds);
    o.request.max_new_tokens = l.integer("max_new_tokens", o.request.max_new_tokens);
    o.request.ignore_eos = l.flag("ignore_eos", o.request.ignore_eos);
    o.seed = static_cast<uint64_t>(l.integer("seed", static_cast<int64_t>(o.seed)));
    o.burstiness = l.number("burstiness", o.burstiness);
  }
  if (const json* dataset = f.get("dataset")) {
    const Fields d(*dataset, "dataset");
    DatasetOptions& ds = o.dataset;
    if (d.get("name")) ds.name = d.text("name");
    ds.path = d.text("path");
    if (d.get("prompt")) ds.prompt = d.text("prompt");
    ds.input_len = d.integer("input_len", ds.input_len);
    ds.output_len = d.integer("output_len", ds.output_len);
    ds.range_ratio = d.number("range_ratio", ds.range_ratio);
    ds.prefix_len = d.integer("prefix_len", ds.prefix_len);
    ds.num_prefixes = d.integer("num_prefixes", ds.num_prefixes);
    ds.suffix_len = d.integer("suffix_len", ds.suffix_len);
    ds.seed = static_cast<uint64_t>(d.integer("seed", static_cast<int64_t>(ds.seed)));
  }
  if (const json* levels = f.array("levels"))
    for (size_t i = 0; i < levels->size(); ++i)
      r.levels.push_back(read_level((*levels)[i], "levels[" + std::to_string(i) + "]", o.percentiles));
  if (const json* streams = f.array("streams"))
    for (size_t i = 0; i < streams->size(); ++i)
      r.streams.push_back(read_stream((*streams)[i], "streams[" + std::to_string(i) + "]"));
  return r;
}

LoadReport read_load_report_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw InputError("cannot read '" + path + "'");
  const std::streamoff size = in.tellg();
  if (size < 0) throw InputError("cannot read '" + path + "'");
  if (static_cast<size_t>(size) > kMaxSavedRunBytes)
    throw InputError("'" + path + "' is larger than a saved load run may be (256 MiB)");
  in.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in.read(text.data(), size)) throw InputError("cannot read '" + path + "'");
  try {
    return parse_load_report_json(text);
  } catch (const InputError& e) {
    throw InputError("'" + path + "': " + e.what());
  }
}

}  // namespace servelab
