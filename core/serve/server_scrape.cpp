#include "serve/server_scrape.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "util/errors.h"

namespace servelab {

namespace {

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

[[noreturn]] void bad_line(size_t line_no, const std::string& why) {
  throw InputError("/metrics line " + std::to_string(line_no) + ": " + why);
}

// A sample value: a float, NaN, +Inf or -Inf.
double parse_value(std::string_view v, size_t line_no) {
  if (v == "NaN") return std::nan("");
  if (v == "+Inf" || v == "Inf") return HUGE_VAL;
  if (v == "-Inf") return -HUGE_VAL;
  const std::string s(v);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) bad_line(line_no, "the value '" + s + "' is not a number");
  return d;
}

PromSample parse_sample(std::string_view line, size_t line_no) {
  PromSample s;
  size_t i = 0;
  while (i < line.size() && name_char(line[i], i == 0)) ++i;
  if (i == 0) bad_line(line_no, "a sample must start with a metric name");
  s.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const size_t start = i;
      while (i < line.size() && name_char(line[i], i == start)) ++i;
      if (i == start || i >= line.size() || line[i] != '=' || i + 1 >= line.size() || line[i + 1] != '"')
        bad_line(line_no, "a label must be name=\"value\"");
      std::string key(line.substr(start, i - start)), value;
      i += 2;
      for (;; ++i) {
        if (i >= line.size()) bad_line(line_no, "a label value is not closed");
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          if (++i >= line.size()) bad_line(line_no, "a label value ends in a backslash");
          const char e = line[i];
          if (e == 'n')
            value += '\n';
          else if (e == '\\' || e == '"')
            value += e;
          else
            bad_line(line_no, std::string("unknown escape \\") + e + " in a label value");
        } else {
          value += line[i];
        }
      }
      ++i;  // the closing quote
      s.labels.emplace_back(std::move(key), std::move(value));
      if (i >= line.size() || (line[i] != ',' && line[i] != '}' && line[i] != ' '))
        bad_line(line_no, "the label set is not closed (a label is followed by , or })");
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] != ',' && line[i] != '}')
        bad_line(line_no, "the label set is not closed (a label is followed by , or })");
    }
  }
  if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) bad_line(line_no, "no value after " + s.name);
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  const size_t v = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  s.value = parse_value(line.substr(v, i - v), line_no);
  return s;  // a timestamp may follow: the scrape's own time is what counts here
}

}  // namespace

std::vector<PromSample> parse_prometheus_text(std::string_view text) {
  if (text.size() > kMaxScrapeBytes)
    throw InputError("/metrics is " + std::to_string(text.size()) + " bytes: more than the " +
                     std::to_string(kMaxScrapeBytes) + " read");
  std::vector<PromSample> out;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    if (out.size() == kMaxScrapeSamples)
      throw InputError("/metrics holds more than " + std::to_string(kMaxScrapeSamples) + " samples");
    out.push_back(parse_sample(line.substr(first), line_no));
  }
  return out;
}

ServerLoad server_load(const std::vector<PromSample>& samples) {
  // Each engine's names for the four figures, in the order engines are recognised.
  struct Names {
    const char* engine;
    const char* running;
    const char* waiting;
    std::vector<const char*> kv;  // the first present wins (old and new names)
    const char* preemptions;
  };
  static const std::vector<Names> kEngines = {
      {"vllm",
       "vllm:num_requests_running",
       "vllm:num_requests_waiting",
       {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
       "vllm:num_preemptions_total"},
      {"sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs", {"sglang:token_usage"}, nullptr},
      {"tgi", "tgi_batch_current_size", "tgi_queue_size", {}, nullptr},
      {"llama.cpp",
       "llamacpp:requests_processing",
       "llamacpp:requests_deferred",
       {"llamacpp:kv_cache_usage_ratio"},
       nullptr},
  };
  std::map<std::string, std::vector<double>> by_name;
  for (const PromSample& s : samples) by_name[s.name].push_back(s.value);
  auto sum = [&](const char* name) -> std::optional<double> {
    if (!name) return std::nullopt;
    const auto it = by_name.find(name);
    if (it == by_name.end()) return std::nullopt;
    double t = 0;
    for (double v : it->second) t += v;
    return t;
  };
  ServerLoad load;
  for (const Names& n : kEngines) {
    load.running = sum(n.running);
    load.waiting = sum(n.waiting);
    if (!load.running && !load.waiting) continue;
    load.engine = n.engine;
    for (const char* kv : n.kv)
      if (const auto it = by_name.find(kv); it != by_name.end()) {
        load.kv_usage = *std::max_element(it->second.begin(), it->second.end());
        break;
      }
    load.preemptions_total = sum(n.preemptions);
    // Ours publishes vLLM's names and its own servelab:* beside them.
    if (load.engine == "vllm" && std::any_of(samples.begin(), samples.end(), [](const PromSample& s) {
          return s.name.rfind("servelab:", 0) == 0;
        }))
      load.engine = "servelab";
    return load;
  }
  return ServerLoad{};
}

}  // namespace servelab
