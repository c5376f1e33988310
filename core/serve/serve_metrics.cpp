#include "serve/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace servelab {

LatencyHistogram::LatencyHistogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void LatencyHistogram::observe(double seconds) {
  const auto it = std::lower_bound(bounds.begin(), bounds.end(), seconds);
  ++counts[static_cast<size_t>(it - bounds.begin())];
  sum += seconds;
  ++count;
}

double LatencyHistogram::quantile_bound(double q) const {
  if (count == 0) return 0;
  const double rank = std::clamp(q, 0.0, 1.0) * static_cast<double>(count);
  int64_t seen = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    seen += counts[i];
    if (static_cast<double>(seen) >= rank && seen > 0) return bounds[i];
  }
  return bounds.empty() ? 0 : bounds.back();
}

// Bucket bounds in seconds: time to first token spans a queue wait (seconds) down to one prefill
// (milliseconds); inter-token latency is one decode step, tens of milliseconds on a CPU.
ServeMetrics::ServeMetrics()
    : ttft(
          {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}),
      inter_token({0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 10}),
      e2e({0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480}),
      queue_time({0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80}),
      engine_phase_seconds(kEnginePhaseCount, 0.0) {}

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Writer {
 public:
  explicit Writer(const std::string& model) : model_("model_name=\"" + escape_label(model) + "\"") {}

  void head(const std::string& name, const char* type, const std::string& help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, double value, const std::string& labels = "") {
    out_ << name << '{' << model_ << (labels.empty() ? "" : ",") << labels << "} " << number(value) << '\n';
  }
  void gauge(const std::string& name, double value, const std::string& help) {
    head(name, "gauge", help);
    sample(name, value);
  }
  void counter(const std::string& name, double value, const std::string& help) {
    head(name, "counter", help);
    sample(name, value);
  }
  void histogram(const std::string& name, const LatencyHistogram& h, const std::string& help) {
    head(name, "histogram", help);
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      sample(name + "_bucket", static_cast<double>(cumulative), "le=\"" + number(h.bounds[i]) + "\"");
    }
    sample(name + "_bucket", static_cast<double>(h.count), "le=\"+Inf\"");
    sample(name + "_sum", h.sum);
    sample(name + "_count", static_cast<double>(h.count));
  }
  std::string str() const { return out_.str(); }

 private:
  std::string model_;
  std::ostringstream out_;
};

}  // namespace

std::string prometheus_text(const ServeMetrics& m, const std::string& model_name) {
  Writer w(model_name);
  auto d = [](int64_t v) { return static_cast<double>(v); };
  w.gauge("vllm:num_requests_running", d(m.running), "Requests in the running batch (vLLM's name).");
  w.gauge("vllm:num_requests_waiting", d(m.waiting), "Requests waiting for a batch place (vLLM's name).");
  // Paged: blocks some request references over all blocks (cached blocks nobody uses are free, as
  // in vLLM); slot KV: positions holding a running request's token over all positions.
  const double usage = m.kv_paged
                           ? (m.kv_blocks_total ? d(m.kv_blocks_used) / d(m.kv_blocks_total) : 0.0)
                           : (m.kv_positions_total ? d(m.kv_positions_used) / d(m.kv_positions_total) : 0.0);
  w.gauge("vllm:kv_cache_usage_perc", usage, "KV cache in use, 0..1 (vLLM's name).");
  w.gauge("vllm:gpu_cache_usage_perc", usage, "The same, by vLLM's older name (before 0.10).");
  w.counter("vllm:num_preemptions_total", d(m.preemptions),
            "Running requests evicted when KV blocks ran out, recomputed later (vLLM's name).");
  w.counter("vllm:prefix_cache_queries_total", d(m.prefix_cache_queries),
            "Prompt tokens looked up in the prefix cache (vLLM's name).");
  w.counter("vllm:prefix_cache_hits_total", d(m.prefix_cache_hits),
            "Prompt tokens found in the prefix cache (vLLM's name).");
  w.gauge("servelab:kv_blocks_total", d(m.kv_blocks_total),
          "KV blocks in the pool (paged KV; 0 for slot KV).");
  w.gauge("servelab:kv_blocks_used", d(m.kv_blocks_used), "KV blocks referenced by a running request.");
  w.gauge("servelab:kv_blocks_cached", d(m.kv_blocks_cached),
          "KV blocks nobody references, kept for the prefix cache (evicted least recently used).");
  if (m.speculative) {
    const SpecDecodeStats& sd = m.spec_decode;
    w.counter("vllm:spec_decode_num_drafts_total", d(sd.num_drafts),
              "Decode rows that verified proposed tokens (vLLM's name).");
    w.counter("vllm:spec_decode_num_draft_tokens_total", d(sd.num_draft_tokens),
              "Tokens proposed and verified (vLLM's name).");
    w.counter("vllm:spec_decode_num_accepted_tokens_total", d(sd.num_accepted_tokens),
              "Proposed tokens the target accepted (vLLM's name).");
    w.head("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Accepted tokens by their position in the draft, 0 first (vLLM's name).");
    for (size_t i = 0; i < sd.accepted_per_position.size(); ++i)
      w.sample("vllm:spec_decode_num_accepted_tokens_per_pos_total", d(sd.accepted_per_position[i]),
               "position=\"" + std::to_string(i) + "\"");
  }
  w.counter("vllm:prompt_tokens_total", d(m.prompt_tokens), "Prompt tokens prefilled (vLLM's name).");
  w.counter("vllm:generation_tokens_total", d(m.generation_tokens), "Tokens generated (vLLM's name).");
  w.head("vllm:request_success_total", "counter",
         "Requests ended, by finished_reason stop, length or abort (cancelled) (vLLM's name).");
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = m.finished.find(reason);
    w.sample("vllm:request_success_total", it == m.finished.end() ? 0.0 : d(it->second),
             std::string("finished_reason=\"") + reason + "\"");
  }
  w.histogram("vllm:time_to_first_token_seconds", m.ttft,
              "Time from a request's arrival to its first token, seconds (vLLM's name).");
  w.histogram("vllm:inter_token_latency_seconds", m.inter_token,
              "Time between a request's consecutive tokens, seconds (vLLM's name; formerly "
              "vllm:time_per_output_token_seconds).");
  w.histogram("vllm:e2e_request_latency_seconds", m.e2e,
              "Time from a request's arrival to its last token, seconds (vLLM's name).");
  w.histogram("vllm:request_queue_time_seconds", m.queue_time,
              "Time a request waited before admission, seconds (vLLM's name).");
  w.counter("servelab:request_failure_total", d(m.failed),
            "Requests ended by an error (adapter load, engine failure); vLLM has no such counter.");
  w.counter("servelab:request_rejected_total", d(m.rejected),
            "Requests refused with 429 because the queue was full.");
  w.gauge("servelab:max_batch", d(m.max_batch), "Batch places (KV slots).");
  w.gauge("servelab:max_queue", d(m.max_queue), "Waiting requests allowed beyond the free batch places.");
  w.counter("servelab:engine_steps_total", d(m.steps), "Engine steps (one prefill and/or one decode each).");
  w.counter("servelab:batch_rows_total", d(m.batch_rows),
            "Running requests summed over steps; / engine_steps_total is the mean batch occupancy.");
  w.head("servelab:engine_phase_seconds_total", "counter",
         "The engine thread's time by phase, seconds: idle, schedule, prefill, decode (the forwards), kv, "
         "sample, finish.");
  for (size_t i = 0; i < kEnginePhaseCount; ++i)
    w.sample("servelab:engine_phase_seconds_total",
             i < m.engine_phase_seconds.size() ? m.engine_phase_seconds[i] : 0.0,
             std::string("phase=\"") + kEnginePhases[i] + "\"");
  w.gauge("servelab:kv_cache_bytes", d(m.kv_bytes), "KV memory held, bytes (slot KV allocates it up front).");
  w.gauge("servelab:kv_cache_positions_used", d(m.kv_positions_used),
          "KV positions holding a running request's token.");
  w.gauge("servelab:kv_cache_positions_total", d(m.kv_positions_total), "KV positions in all batch places.");
  w.gauge("servelab:lora_cache_capacity", d(m.adapters.capacity), "LoRA adapters held at most.");
  w.gauge("servelab:lora_cache_resident", d(m.adapters.resident), "LoRA adapters loaded now.");
  w.gauge("servelab:lora_cache_resident_bytes", d(m.adapters.resident_bytes),
          "Bytes of the loaded adapters.");
  w.counter("servelab:lora_cache_loads_total", d(m.adapters.loads), "Adapters read from a folder.");
  w.counter("servelab:lora_cache_hits_total", d(m.adapters.hits), "Adapter requests served by the cache.");
  w.counter("servelab:lora_cache_evictions_total", d(m.adapters.evictions), "Adapters evicted.");
  return w.str();
}

}  // namespace servelab
