#pragma once
// A load generator for any LoRAX/TGI- or OpenAI-compatible server (ours, another machine's, a vLLM,
// TGI or LoRAX cluster): it replays the course's serving scenarios over HTTP and benchmarks a server
// the way `vllm bench serve` does, measuring what a client sees. Tokens are counted from what the
// server reports (OpenAI's usage chunk, TGI's details) or with the model's tokenizer, never by
// counting chunks. Torch-free and Qt-free (the CLI's loadgen and the Serving tab run it);
// cpp-httplib's client stays inside load_http.cpp (the requests); load_generator.cpp runs the
// scenarios, load_report_write.cpp writes the report. The parts: load_stream.h (the event-stream
// parser), load_metrics.h (the figures), load_dataset.h (the prompts).
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "serve/load_dataset.h"
#include "serve/load_metrics.h"
#include "serve/load_stream.h"
#include "serve/server_scrape.h"

namespace servelab {

class Tokenizer;

enum class LoadApi {
  Lorax,       // POST /generate_stream; adapters as adapter_id, schemas as response_format
  Tgi,         // the same route; schemas as TGI's grammar, no adapters
  OpenAI,      // POST /v1/completions with stream; adapters as model, schemas as response_format json_schema
  OpenAIChat,  // POST /v1/chat/completions, the prompt as one user message; otherwise as OpenAI
};
const char* load_api_name(LoadApi api);
LoadApi parse_load_api(const std::string& name);  // InputError for an unknown name

struct LoadTarget {
  std::string url;  // http(s)://host[:port][/prefix]
  LoadApi api = LoadApi::Lorax;
  std::vector<std::pair<std::string, std::string>> headers;  // with every request (an API key)
  std::string model;  // OpenAI: the base model's name; empty: the first of GET /v1/models
  // HTTPS: a PEM file of the certificate authorities to trust (a self-signed server's own
  // certificate) instead of the system's; insecure: no verification at all.
  std::string ca_file;
  bool insecure = false;
  double connect_timeout_s = 10;
  double read_timeout_s = 120;  // the longest silence within a stream
};

// One streamed request.
struct LoadRequest {
  std::string prompt = "What is deep learning?";
  int64_t max_new_tokens = 32;
  std::string adapter;         // empty: the base model
  std::string json_schema;     // JSON Schema text; non-empty asks for structured output
  bool ignore_eos = false;     // LoRAX/TGI's ignore_eos_token (vLLM's ignore_eos): every stream its budget
  int64_t prompt_tokens = -1;  // when the dataset knows them; the server's count wins
};

// One level of a sweep (a concurrency or a rate).
struct LoadLevel {
  std::string arrival;                       // "closed", "poisson" or "gamma"
  double level = 0;                          // closed: clients; poisson, gamma: requests per second
  int64_t requests = 0, ok = 0, failed = 0;  // measured requests (warm-up ones not counted)
  double seconds = 0;                        // first measured request sent -> last answer
  int64_t generated_tokens = 0;              // over the ok streams
  double tokens_per_s = 0, requests_per_s = 0;
  // The figures the Serving tab draws (from `metrics`; p50 is the median).
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
  double e2e_p50_ms = 0;
  std::vector<std::string> errors;  // the first few, as they came
  LoadMetrics metrics;              // vLLM's figures
  int64_t warmup_requests = 0;
  bool time_bound = false;                   // --duration ended the level's sending
  std::vector<StreamTiming> streams;         // the measured requests, in the order they were sent
  std::vector<StreamTiming> warmup_streams;  // the warm-up requests
};

// Bounds on the options (beyond them, InputError naming the flag).
constexpr int64_t kMaxLoadRequests = 1'000'000;  // per level
constexpr int64_t kMaxLoadClients = 1024;
constexpr double kMaxLoadRate = 100'000;       // requests per second
constexpr double kMaxLoadSeconds = 7 * 86400;  // --max-seconds, --duration, --timeout

struct LoadOptions {
  // single (one stream: TTFT and per-token times), three_streams (100/10/10 tokens at once),
  // adapters (the prompt through several adapters at once), structured (the course's Person
  // schema), sweep (a benchmark: closed-loop clients or arrivals at a rate, per level).
  std::string scenario = "single";
  LoadRequest request;  // the scenarios' request; the sweep's template (its prompt from `dataset`)
  std::vector<std::string> adapters;       // adapters scenario; empty: those GET /v1/models lists
  std::vector<double> levels = {1, 2, 4};  // sweep: clients (closed) or requests/s (poisson, gamma)
  std::string arrival = "closed";          // closed, poisson or gamma
  double burstiness = 1;     // gamma: the shape of the gaps' gamma distribution (< 1 burstier, 1 Poisson)
  int64_t requests = 8;      // per sweep level (closed: at least the level's clients)
  double level_seconds = 0;  // per level: no request is sent after this many seconds (0: no bound)
  int64_t warmup = 0;        // per level: requests sent first, with the same load, and left out
  double max_seconds = 300;  // the whole run; streams still open then are cut off
  uint64_t seed = 1;         // arrivals and the dataset
  DatasetOptions dataset;    // sweep: the prompts (output_len: --max-new-tokens unless the entry says)
  std::vector<double> percentiles = {50, 90, 95, 99};
  GoodputSlo goodput;
  const Tokenizer* tokenizer = nullptr;  // the model's: counts tokens where the server reports none
  std::string tokenizer_name;            // for the report
};

struct LoadReport {
  std::string scenario, url, api, model;
  std::vector<StreamTiming> streams;  // every scenario but sweep
  std::vector<LoadLevel> levels;      // sweep
  bool timed_out = false;             // max_seconds cut the run short
  bool cancelled = false;
  std::string started_at;  // ISO 8601 UTC
  LoadOptions options;     // as run (tokenizer pointer cleared)
};

// Live progress (the Serving tab); called from the generator's threads, one call at a time.
class LoadSink {
 public:
  virtual ~LoadSink() = default;
  virtual void on_stream(const StreamTiming& /*stream*/) {}
  virtual void on_level(const LoadLevel& /*level*/) {}
};

// The course's Person schema (pydantic's JSON Schema of {name: str <= 10 chars, age: int}).
const std::string& person_schema();

// The options checked, before anything is sent: InputError with one line naming the flag.
void check_load_options(const LoadTarget& target, const LoadOptions& options);

// One streamed request; never throws for what the server does (errors land in the result, by kind).
// `tokenizer` counts tokens where the server reports none.
StreamTiming run_stream(const LoadTarget& target, const LoadRequest& request,
                        const std::atomic<bool>* cancel = nullptr, const Tokenizer* tokenizer = nullptr);

// A scenario. InputError for bad options (check_load_options) or a target that cannot list its models
// when it must; errors of the target land in the streams (a stream that failed says why).
LoadReport run_load(const LoadTarget& target, const LoadOptions& options,
                    const std::atomic<bool>* cancel = nullptr, LoadSink* sink = nullptr);

// The report as JSON text (what servelab-cli loadgen --json prints): the run's metadata, and per
// level vLLM's field names (mean_ttft_ms, p99_tpot_ms, request_throughput, output_throughput,
// total_token_throughput, request_goodput, ...).
std::string load_report_json(const LoadReport& report);
// Every request (warm-up ones flagged), one JSON object a line.
std::string load_requests_jsonl(const LoadReport& report);
// Every request, one CSV row each, with a header row.
std::string load_requests_csv(const LoadReport& report);

// The q-quantile (0..1) of values by nearest rank; 0 when empty.
double nearest_rank(std::vector<double> values, double q);

// GET <target.url>/v1/models with the target's headers, CA file or insecure and timeouts: the model
// ids it lists (the base model first). InputError saying why when it cannot be had (no answer, an
// untrusted certificate, a status other than 200, no models).
std::vector<std::string> list_models(const LoadTarget& target);

// GET <target.url>/metrics with the target's headers and connect timeout, read as the engine's load
// (server_scrape.h): InputError saying why when it cannot be had (no answer, a status other than
// 200, not Prometheus text).
ServerLoad scrape_server_load(const LoadTarget& target);

}  // namespace servelab
