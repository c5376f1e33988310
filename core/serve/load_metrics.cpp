#include "serve/load_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "util/errors.h"

namespace servelab {

double StreamTiming::tokens_per_s() const { return tpot_ms > 0 ? 1000.0 / tpot_ms : 0.0; }

void finish_timing(StreamTiming& s) {
  s.itl_ms.clear();
  s.token_ms.clear();
  s.ttft_ms = -1;
  s.tpot_ms = -1;
  const bool known = s.output_tokens >= 0 && s.chunk_tokens.size() == s.chunk_ms.size();
  double last = -1;  // the last chunk that carried tokens
  for (size_t i = 0; i < s.chunk_ms.size(); ++i) {
    const int64_t k = known ? s.chunk_tokens[i] : -1;
    if (known && k <= 0) continue;  // its bytes arrive with the next chunk's tokens
    const double t = s.chunk_ms[i];
    if (s.ttft_ms < 0) {
      s.ttft_ms = t;
    } else if (k > 0) {
      for (int64_t j = 0; j < k; ++j) s.itl_ms.push_back((t - last) / static_cast<double>(k));
    }
    for (int64_t j = 0; j < std::max<int64_t>(k, 1); ++j) s.token_ms.push_back(t);
    last = t;
  }
  if (known && s.output_tokens > 1 && s.ttft_ms >= 0 && s.e2el_ms >= s.ttft_ms)
    s.tpot_ms = (s.e2el_ms - s.ttft_ms) / static_cast<double>(s.output_tokens - 1);
}

double interpolated_percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

Distribution distribution(const std::vector<double>& values, const std::vector<double>& percentiles) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (!values.empty()) {
    double sum = 0;
    for (double v : values) sum += v;
    d.mean = sum / static_cast<double>(values.size());
    double sq = 0;
    for (double v : values) sq += (v - d.mean) * (v - d.mean);
    d.std = std::sqrt(sq / static_cast<double>(values.size()));
    d.median = interpolated_percentile(values, 50);
  }
  for (double p : percentiles) d.percentiles.emplace_back(p, interpolated_percentile(values, p));
  return d;
}

namespace {

double parse_number(const std::string& text, const std::string& flag, const std::string& whole) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::logic_error&) {
  }
  throw InputError(flag + " takes numbers, got '" + whole + "'");
}

}  // namespace

GoodputSlo parse_goodput(const std::vector<std::string>& items) {
  GoodputSlo slo;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      throw InputError("--goodput takes KEY:MILLISECONDS (ttft, tpot or e2el), got '" + item + "'");
    const std::string key = item.substr(0, colon);
    const double ms = parse_number(item.substr(colon + 1), "--goodput", item);
    if (ms < 0 || ms > 1e9) throw InputError("--goodput " + item + ": the objective must be in [0, 1e9] ms");
    double* slot = key == "ttft"   ? &slo.ttft_ms
                   : key == "tpot" ? &slo.tpot_ms
                   : key == "e2el" ? &slo.e2el_ms
                                   : nullptr;
    if (!slot) throw InputError("--goodput: unknown objective '" + key + "' (use ttft, tpot or e2el)");
    if (*slot >= 0) throw InputError("--goodput names " + key + " twice");
    *slot = ms;
  }
  return slo;
}

std::vector<double> parse_percentiles(const std::string& list) {
  std::vector<double> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const double p = parse_number(item, "--percentiles", list);
    if (!(p > 0 && p <= 100)) throw InputError("--percentiles must be in (0, 100], got '" + item + "'");
    out.push_back(p);
  }
  if (out.empty()) throw InputError("--percentiles names no percentile");
  if (out.size() > 32) throw InputError("--percentiles names more than 32 percentiles");
  return out;
}

bool meets_slo(const StreamTiming& s, const GoodputSlo& slo) {
  if (!s.ok) return false;
  if (slo.ttft_ms >= 0 && !(s.ttft_ms >= 0 && s.ttft_ms <= slo.ttft_ms)) return false;
  if (slo.e2el_ms >= 0 && !(s.e2el_ms >= 0 && s.e2el_ms <= slo.e2el_ms)) return false;
  if (slo.tpot_ms >= 0) {
    if (s.output_tokens < 0) return false;
    const double tpot = s.output_tokens > 1 ? s.tpot_ms : 0.0;
    if (!(tpot >= 0 && tpot <= slo.tpot_ms)) return false;
  }
  return true;
}

LoadMetrics compute_metrics(const std::vector<StreamTiming>& streams, double duration_s,
                            const std::vector<double>& percentiles, const GoodputSlo& slo) {
  LoadMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  std::map<std::string, int64_t> kinds;
  for (const StreamTiming& s : streams) {
    if (!s.ok) {
      ++m.failed;
      ++kinds[load_error_kind_name(s.error_kind)];
      continue;
    }
    ++m.completed;
    if (s.output_tokens >= 0)
      m.total_output_tokens += s.output_tokens;
    else
      ++m.without_output_count;
    if (s.prompt_tokens >= 0)
      m.total_input_tokens += s.prompt_tokens;
    else
      ++m.without_prompt_count;
    if (s.ttft_ms >= 0) ttft.push_back(s.ttft_ms);
    if (s.tpot_ms >= 0) tpot.push_back(s.tpot_ms);
    itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
    if (s.e2el_ms >= 0) e2el.push_back(s.e2el_ms);
    if (slo.any() && meets_slo(s, slo)) ++m.good;
  }
  for (const auto& [kind, n] : kinds) m.errors_by_kind.emplace_back(kind, n);
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
    if (slo.any()) m.request_goodput = static_cast<double>(m.good) / duration_s;
  } else if (slo.any()) {
    m.request_goodput = 0;
  }
  // Per-second buckets from the first completed request's start (vLLM's max_output_tokens_per_s).
  double first = -1, last = -1;
  for (const StreamTiming& s : streams)
    if (s.ok && s.e2el_ms >= 0) {
      first = first < 0 ? s.start_ms : std::min(first, s.start_ms);
      last = std::max(last, s.start_ms + s.e2el_ms);
    }
  if (first >= 0) {
    const auto buckets = static_cast<size_t>(std::min(1e7, std::floor((last - first) / 1000.0) + 1));
    std::vector<double> tokens(buckets, 0.0);
    std::vector<int64_t> open(buckets, 0);
    for (const StreamTiming& s : streams) {
      if (!s.ok || s.e2el_ms < 0) continue;
      for (double t : s.token_ms) {
        const auto b = static_cast<size_t>(std::max(0.0, (s.start_ms + t - first) / 1000.0));
        if (b < buckets) tokens[b] += 1;
      }
      const auto from = static_cast<size_t>(std::max(0.0, (s.start_ms - first) / 1000.0));
      const auto to = static_cast<size_t>(std::max(0.0, (s.start_ms + s.e2el_ms - first) / 1000.0));
      for (size_t b = from; b <= to && b < buckets; ++b) ++open[b];
    }
    for (size_t b = 0; b < buckets; ++b)
      if (tokens[b] > m.max_output_tokens_per_s) {
        m.max_output_tokens_per_s = tokens[b];
        m.max_concurrent_requests = open[b];
      }
  }
  m.ttft = distribution(ttft, percentiles);
  m.tpot = distribution(tpot, percentiles);
  m.itl = distribution(itl, percentiles);
  m.e2el = distribution(e2el, percentiles);
  return m;
}

std::string percentile_key(double p) {
  if (p == std::floor(p)) return "p" + std::to_string(static_cast<int64_t>(p));
  std::ostringstream s;
  s.precision(10);
  s << "p" << p;
  return s.str();
}

}  // namespace servelab
