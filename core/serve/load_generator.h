#pragma once
// A load generator for any LoRAX/TGI- or OpenAI-compatible server (ours, another machine's, a vLLM,
// TGI or LoRAX cluster): it replays the course's serving scenarios over HTTP and measures what a
// client sees: time to first token, the time of every token, throughput. Torch-free and Qt-free
// (the CLI's loadgen and the Serving tab run it); cpp-httplib's client stays inside the .cpp.
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace servelab {

enum class LoadApi {
  Lorax,   // POST /generate_stream; adapters as adapter_id, schemas as response_format
  Tgi,     // the same route; schemas as TGI's grammar, no adapters
  OpenAI,  // POST /v1/completions with stream; adapters as model, schemas as response_format json_schema
};
const char* load_api_name(LoadApi api);
LoadApi parse_load_api(const std::string& name);  // InputError for an unknown name

struct LoadTarget {
  std::string url;  // http(s)://host[:port][/prefix]
  LoadApi api = LoadApi::Lorax;
  std::vector<std::pair<std::string, std::string>> headers;  // with every request (an API key)
  std::string model;  // OpenAI: the base model's name; empty: the first of GET /v1/models
  double connect_timeout_s = 10;
  double read_timeout_s = 120;  // the longest silence within a stream
};

// One streamed request.
struct LoadRequest {
  std::string prompt = "What is deep learning?";
  int64_t max_new_tokens = 32;
  std::string adapter;      // empty: the base model
  std::string json_schema;  // JSON Schema text; non-empty asks for structured output
  bool ignore_eos = false;  // LoRAX/TGI's ignore_eos_token (vLLM's ignore_eos): every stream its budget
};

// What one stream's client saw. Times are milliseconds.
struct StreamTiming {
  int64_t index = 0;  // within its scenario or level
  bool ok = false;
  int http_status = 0;  // 0: no answer (cannot connect, connection lost)
  std::string error;    // one line, when not ok
  std::string adapter;
  int64_t max_new_tokens = 0;
  double start_ms = 0;           // since the run began
  double ttft_ms = -1;           // request sent -> first token; -1: none
  std::vector<double> token_ms;  // each token's arrival, since the request was sent
  std::string text;
  std::string finish_reason;  // as the server names it
  bool json_valid = false;    // structured output: the text parses and has the schema's required keys

  int64_t tokens() const { return static_cast<int64_t>(token_ms.size()); }
  double tokens_per_s() const;  // after the first token
};

// One level of a concurrency sweep.
struct LoadLevel {
  std::string arrival;  // "closed" or "poisson"
  double level = 0;     // closed: clients; poisson: requests per second
  int64_t requests = 0, ok = 0, failed = 0;
  double seconds = 0;            // first request sent -> last answer
  int64_t generated_tokens = 0;  // over the ok streams
  double tokens_per_s = 0, requests_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;  // every gap between a stream's consecutive tokens
  double e2e_p50_ms = 0;
  std::vector<std::string> errors;  // the first few, as they came
};

struct LoadOptions {
  // single (one stream: TTFT and per-token times), three_streams (100/10/10 tokens at once),
  // adapters (the prompt through several adapters at once), structured (the course's Person
  // schema), sweep (closed-loop or Poisson levels).
  std::string scenario = "single";
  LoadRequest request;
  std::vector<std::string> adapters;       // adapters scenario; empty: those GET /v1/models lists
  std::vector<double> levels = {1, 2, 4};  // sweep: clients (closed) or requests/s (poisson)
  std::string arrival = "closed";
  int64_t requests = 8;      // per sweep level (at least the level's clients)
  double max_seconds = 300;  // the whole run; streams still open then are cut off
  uint64_t seed = 1;         // Poisson arrivals
};

struct LoadReport {
  std::string scenario, url, api, model;
  std::vector<StreamTiming> streams;  // every scenario but sweep
  std::vector<LoadLevel> levels;      // sweep
  bool timed_out = false;             // max_seconds cut the run short
  bool cancelled = false;
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

// One streamed request; never throws for what the server does (errors land in the result).
StreamTiming run_stream(const LoadTarget& target, const LoadRequest& request,
                        const std::atomic<bool>* cancel = nullptr);

// A scenario. InputError for bad options or a URL that is not http(s)://host[:port][/path];
// errors of the target land in the streams (a stream that failed says why).
LoadReport run_load(const LoadTarget& target, const LoadOptions& options,
                    const std::atomic<bool>* cancel = nullptr, LoadSink* sink = nullptr);

// The report as JSON text (what servelab-cli loadgen --json prints).
std::string load_report_json(const LoadReport& report);

// The q-quantile (0..1) of values by nearest rank; 0 when empty.
double nearest_rank(std::vector<double> values, double q);

}  // namespace servelab
