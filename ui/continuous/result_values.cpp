#include "continuous/result_values.h"

namespace servelab::ui {

QStringList continuousValueNames() {
  return {// Run: the queue served synchronously and continuously (and paged, when on).
          QStringLiteral("requests"), QStringLiteral("speedup"), QStringLiteral("synchronous_s"),
          QStringLiteral("continuous_s"), QStringLiteral("synchronous_steps"),
          QStringLiteral("continuous_steps"), QStringLiteral("synchronous_latency_p50_s"),
          QStringLiteral("continuous_latency_p50_s"), QStringLiteral("slot_max_running"),
          QStringLiteral("slot_kv_mib"), QStringLiteral("paged_s"), QStringLiteral("paged_max_running"),
          QStringLiteral("paged_kv_mib"), QStringLiteral("paged_preemptions"),
          QStringLiteral("paged_vs_slot_running"), QStringLiteral("prefix_hit_percent"),
          QStringLiteral("prefix_speedup"),
          // The long-prompt preset (chunked prefill).
          QStringLiteral("unchunked_itl_max_ms"), QStringLiteral("chunked_itl_max_ms"),
          QStringLiteral("itl_max_cut"), QStringLiteral("itl_p99_cut"), QStringLiteral("ttft_cost"),
          QStringLiteral("throughput_ratio"), QStringLiteral("chunks"),
          // The course benchmark.
          QStringLiteral("course_speedup"), QStringLiteral("course_avg_batch")};
}

QMap<QString, double> continuousValues(const servelab::SyncVsContinuousResult* compare,
                                       const servelab::ChunkedPrefillResult* longPrompt,
                                       const servelab::CourseBenchmarkResult* course) {
  constexpr double kMiB = 1024.0 * 1024.0;
  QMap<QString, double> v;
  if (compare && compare->runs.size() >= 2) {
    const servelab::SyncVsContinuousResult& result = *compare;
    const servelab::ServeSummary &sync = result.methods[0], &cont = result.methods[1];
    const servelab::BatchRunResult& slot = result.runs[1];
    v[QStringLiteral("requests")] = static_cast<double>(result.runs[0].requests.size());
    v[QStringLiteral("speedup")] = result.speedup;
    v[QStringLiteral("synchronous_s")] = sync.total_ms / 1000;
    v[QStringLiteral("continuous_s")] = cont.total_ms / 1000;
    v[QStringLiteral("synchronous_steps")] = static_cast<double>(sync.inference_calls);
    v[QStringLiteral("continuous_steps")] = static_cast<double>(cont.inference_calls);
    v[QStringLiteral("synchronous_latency_p50_s")] = sync.latency_p50 / 1000;
    v[QStringLiteral("continuous_latency_p50_s")] = cont.latency_p50 / 1000;
    v[QStringLiteral("slot_max_running")] = static_cast<double>(slot.max_running);
    v[QStringLiteral("slot_kv_mib")] = static_cast<double>(slot.kv_cache_bytes) / kMiB;
    const servelab::BatchRunResult& last = result.runs.back();
    if (QString::fromStdString(last.method).contains(QLatin1String("paged"))) {
      v[QStringLiteral("paged_s")] = last.total_ms / 1000;
      v[QStringLiteral("paged_max_running")] = static_cast<double>(last.max_running);
      v[QStringLiteral("paged_kv_mib")] = static_cast<double>(last.kv_cache_bytes) / kMiB;
      v[QStringLiteral("paged_preemptions")] = static_cast<double>(last.preemptions);
      if (slot.max_running > 0)
        v[QStringLiteral("paged_vs_slot_running")] =
            static_cast<double>(last.max_running) / static_cast<double>(slot.max_running);
      if (last.prompt_tokens > 0)
        v[QStringLiteral("prefix_hit_percent")] =
            100.0 * static_cast<double>(last.prefix_hit_tokens) / static_cast<double>(last.prompt_tokens);
      const servelab::BatchRunResult& before = result.runs[result.runs.size() - 2];
      if (QString::fromStdString(before.method).contains(QLatin1String("no prefix cache")) &&
          last.total_ms > 0)
        v[QStringLiteral("prefix_speedup")] = before.total_ms / last.total_ms;
    }
  }
  if (longPrompt) {
    const servelab::ChunkedPrefillResult& r = *longPrompt;
    v[QStringLiteral("unchunked_itl_max_ms")] = r.unchunked.itl_max_ms;
    v[QStringLiteral("chunked_itl_max_ms")] = r.chunked.itl_max_ms;
    v[QStringLiteral("itl_max_cut")] = r.itl_max_cut;
    v[QStringLiteral("itl_p99_cut")] = r.itl_p99_cut;
    v[QStringLiteral("ttft_cost")] = r.ttft_cost;
    v[QStringLiteral("throughput_ratio")] = r.throughput_ratio;
    v[QStringLiteral("chunks")] = static_cast<double>(r.chunked.chunks);
  }
  if (course && course->rows.size() == 2) {
    v[QStringLiteral("course_speedup")] = course->rows[1].throughput_vs_baseline;
    v[QStringLiteral("course_avg_batch")] = course->rows[1].avg_batch;
  }
  return v;
}

}  // namespace servelab::ui
