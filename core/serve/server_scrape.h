#pragma once
// What a serving engine says about its own load on its Prometheus /metrics: running and waiting
// requests, KV-cache usage and preemptions, read under each engine's metric names (vLLM's, which
// ours publishes too; SGLang's; TGI's; llama.cpp's server's), so that the Serving tab can draw a
// remote server's side beside the client's figures (load_generator.h's scrape_server_load fetches
// it). Torch-, Qt- and network-free, so that the fuzzer runs exactly this code.
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace servelab {

// One sample of the Prometheus text exposition format (0.0.4).
struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

// Scrapes larger than this, or with more samples, are refused rather than read.
constexpr size_t kMaxScrapeBytes = 16u << 20;
constexpr size_t kMaxScrapeSamples = 200'000;

// The samples of a /metrics text: comment lines (# HELP, # TYPE) and blank lines skipped, an
// optional timestamp after the value ignored. InputError naming the line for anything else that is
// not a sample (a missing value, an unclosed label set, a bad escape, a value that is no number).
std::vector<PromSample> parse_prometheus_text(std::string_view text);

// An engine's load, as its metrics name it. Absent fields: the engine publishes no such metric.
// Several series of one metric (per model, per data-parallel engine) are summed, except KV usage:
// the fullest one.
struct ServerLoad {
  std::string engine;  // "vllm", "servelab" (vLLM's names and its own), "sglang", "tgi", "llama.cpp"; "" when
                       // none matched
  std::optional<double> running, waiting;
  std::optional<double> kv_usage;  // fraction of the KV cache in use, 0..1
  std::optional<double> preemptions_total;
};
ServerLoad server_load(const std::vector<PromSample>& samples);

}  // namespace servelab
