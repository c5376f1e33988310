// A load run written out: load_report_json (the run's metadata and, per level, vLLM's field names;
// per stream, its times), load_requests_jsonl and load_requests_csv (every request, one a line).
// load_report_io.cpp reads the JSON back.
#include <nlohmann/json.hpp>
#include <sstream>

#include "serve/load_generator.h"

#ifndef SERVELAB_VERSION
#define SERVELAB_VERSION "unknown"
#endif

namespace servelab {

using nlohmann::json;

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

}  // namespace servelab
