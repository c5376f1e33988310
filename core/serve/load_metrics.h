#pragma once
// What one streamed request's client saw, and the figures of many, with the definitions of vLLM's
// `vllm bench serve`: TTFT, TPOT = (E2EL - TTFT) / (output tokens - 1), ITL (every gap between tokens;
// a chunk that carried k tokens gives k gaps of its gap / k), E2EL; mean, median, population standard
// deviation and percentiles with linear interpolation (numpy's); request, output and total token
// throughput over the level's duration; goodput (DistServe): requests per second that met every SLO.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "serve/load_stream.h"

namespace servelab {

// What one stream's client saw. Times are milliseconds.
struct StreamTiming {
  int64_t index = 0;  // within its scenario or level
  bool ok = false;
  bool warmup = false;  // a warm-up request: in the per-request records, never in the figures
  int http_status = 0;  // 0: no answer (cannot connect, connection lost)
  LoadErrorKind error_kind = LoadErrorKind::None;
  std::string error;  // one line, when not ok
  std::string adapter;
  int64_t max_new_tokens = 0;
  double start_ms = 0;         // since the run began
  double ttft_ms = -1;         // request sent -> the first chunk that carried a token; -1: none
  double e2el_ms = -1;         // request sent -> the stream's end
  double tpot_ms = -1;         // (e2el - ttft) / (output tokens - 1); -1: fewer than 2 tokens, or unknown
  int64_t prompt_tokens = -1;  // as the server reported them, else as the dataset knew; -1: unknown
  int64_t output_tokens = -1;  // -1: unknown (no usage from the server and no tokenizer)
  TokenCountSource output_tokens_source = TokenCountSource::None;
  std::vector<double> chunk_ms;       // each chunk that carried output, since the request was sent
  std::vector<int64_t> chunk_tokens;  // the tokens each carried (-1: unknown)
  std::vector<double> itl_ms;         // one per token after the first chunk: its chunk's gap / its tokens
  std::vector<double> token_ms;       // each token's arrival (a chunk's tokens share its time)
  std::string text;
  std::string finish_reason;  // as the server names it
  bool json_valid = false;    // structured output: the text parses and has the schema's required keys

  int64_t tokens() const { return output_tokens > 0 ? output_tokens : 0; }
  double tokens_per_s() const;  // after the first token: 1000 / TPOT
};

// Fills ttft_ms, itl_ms, tpot_ms and token_ms from chunk_ms, chunk_tokens, e2el_ms and output_tokens.
void finish_timing(StreamTiming& s);

struct Distribution {
  int64_t count = 0;
  double mean = 0, median = 0, std = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p in 0..100, value)
};
// The p-th percentile (0..100) with linear interpolation between closest ranks; 0 when empty.
double interpolated_percentile(std::vector<double> values, double p);
Distribution distribution(const std::vector<double>& values, const std::vector<double>& percentiles);

// Service-level objectives in milliseconds; < 0: not set.
struct GoodputSlo {
  double ttft_ms = -1, tpot_ms = -1, e2el_ms = -1;
  bool any() const { return ttft_ms >= 0 || tpot_ms >= 0 || e2el_ms >= 0; }
};
// "ttft:500", "tpot:50", "e2el:2000" (vLLM's --goodput KEY:VALUE); InputError naming --goodput.
GoodputSlo parse_goodput(const std::vector<std::string>& items);
// "50,90,95,99"; InputError naming --percentiles.
std::vector<double> parse_percentiles(const std::string& list);
// A completed request meets every SLO set (a request of one token has TPOT 0, as in vLLM; one whose
// token count is unknown cannot show it met a TPOT objective).
bool meets_slo(const StreamTiming& s, const GoodputSlo& slo);

struct LoadMetrics {
  double duration_s = 0;  // the level's first request sent -> its last answer
  int64_t completed = 0, failed = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  int64_t without_output_count = 0;  // completed requests whose output token count is unknown
  int64_t without_prompt_count = 0;  // ... whose prompt token count is unknown
  int64_t good = 0;                  // completed requests that met every SLO
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  double request_goodput = -1;  // -1: no SLO given
  Distribution ttft, tpot, itl, e2el;
  // vLLM's peak: the most output tokens that arrived within one second (seconds counted from the
  // first completed request's start), and how many requests were open in that second.
  double max_output_tokens_per_s = 0;
  int64_t max_concurrent_requests = 0;
  std::vector<std::pair<std::string, int64_t>> errors_by_kind;  // kind name, count; kinds that occurred
};
// The figures of a level's measured requests (warm-up requests are left out by the caller).
LoadMetrics compute_metrics(const std::vector<StreamTiming>& streams, double duration_s,
                            const std::vector<double>& percentiles, const GoodputSlo& slo);

// vLLM's name of a percentile key: 99 -> "p99", 99.9 -> "p99.9".
std::string percentile_key(double p);

}  // namespace servelab
