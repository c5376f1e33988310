#include "continuous/run_summary.h"

#include <QCoreApplication>

#include "text_format.h"

namespace servelab::ui {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

QString tr(const char* text) { return QCoreApplication::translate("ContinuousTab", text); }

}  // namespace

QString compareSummary(const servelab::SyncVsContinuousResult& r, const servelab::SyncVsContinuousParams& p) {
  const servelab::ServeSummary* sync = nullptr;
  const servelab::ServeSummary* cont = nullptr;
  const servelab::ServeSummary* naive = nullptr;
  for (const servelab::ServeSummary& m : r.methods) {
    if (m.method == "synchronous") sync = &m;
    if (m.method == "continuous (slot KV)") cont = &m;
    if (m.method == "continuous (merge/filter)") naive = &m;
  }
  QString text;
  if (sync && cont) {
    text = tr("<p><b>Continuous batching: %1 ms, synchronous: %2 ms, speed-up %3×.</b> %4 instead of %5 "
              "average rows per forward pass.</p>"
              "<p>Median latency %6 → %7 ms · median time to first token %8 → %9 ms.</p>")
               .arg(formatMsCoarse(cont->total_ms), formatMsCoarse(sync->total_ms))
               .arg(r.speedup, 0, 'f', 2)
               .arg(cont->average_batch, 0, 'f', 1)
               .arg(sync->average_batch, 0, 'f', 1)
               .arg(formatMsCoarse(sync->latency_p50), formatMsCoarse(cont->latency_p50),
                    formatMsCoarse(sync->ttft_p50), formatMsCoarse(cont->ttft_p50));
  }
  if (naive && cont) {
    text += tr("<p>The course's merge/filter copied %1 MiB of KV cache (slot KV: %2 MiB) and took %3 ms.</p>")
                .arg(static_cast<double>(naive->kv_copy_bytes) / kMiB, 0, 'f', 1)
                .arg(static_cast<double>(cont->kv_copy_bytes) / kMiB, 0, 'f', 1)
                .arg(formatMsCoarse(naive->total_ms));
  }
  text += pagedSummary(r, p);
  text += r.same_tokens ? tr("<p>Every method generated the same tokens ✓</p>")
                        : tr("<p><b>The methods generated different tokens.</b></p>");
  return text;
}

QString pagedSummary(const servelab::SyncVsContinuousResult& r, const servelab::SyncVsContinuousParams& p) {
  const servelab::BatchRunResult* slot = nullptr;
  const servelab::BatchRunResult* paged = nullptr;
  const servelab::BatchRunResult* uncached = nullptr;
  const servelab::ServeSummary* pagedSummary = nullptr;
  const servelab::ServeSummary* uncachedSummary = nullptr;
  for (size_t i = 0; i < r.runs.size() && i < r.methods.size(); ++i) {
    const std::string& m = r.runs[i].method;
    if (m == "continuous (slot KV)") slot = &r.runs[i];
    if (m == "continuous (paged KV)" || m == "continuous (paged KV + prefix cache)") {
      paged = &r.runs[i];
      pagedSummary = &r.methods[i];
    }
    if (m == "continuous (paged KV, no prefix cache)") {
      uncached = &r.runs[i];
      uncachedSummary = &r.methods[i];
    }
  }
  QString text;
  if (slot && paged) {
    const QString budget = p.kv_budget_mb > 0 && p.slots_in_budget
                               ? tr("In the same %1 MB of KV memory").arg(p.kv_budget_mb, 0, 'g', 4)
                               : tr("With max batch %1").arg(p.max_batch);
    text += tr("<p><b>%1: slot KV held at most %2 requests at once, paged KV %3.</b> Average batch %4 vs %5; "
               "paged KV preempted %6 times.</p>")
                .arg(budget)
                .arg(slot->max_running)
                .arg(paged->max_running)
                .arg(slot->average_batch, 0, 'f', 2)
                .arg(paged->average_batch, 0, 'f', 2)
                .arg(paged->preemptions);
  }
  if (paged && uncached && pagedSummary && uncachedSummary) {
    text += tr("<p><b>Prefix cache: %1 of %2 prompt tokens were hits</b> (without it: %3); median time to "
               "first token %4 → %5 ms.</p>")
                .arg(paged->prefix_hit_tokens)
                .arg(paged->prompt_tokens)
                .arg(uncached->prefix_hit_tokens)
                .arg(formatMsCoarse(uncachedSummary->ttft_p50), formatMsCoarse(pagedSummary->ttft_p50));
  }
  return text;
}

QString courseSummary(const servelab::CourseBenchmarkResult& r, int newTokens) {
  const servelab::CourseBenchmarkRow& base = r.rows[0];
  const servelab::CourseBenchmarkRow& batched = r.rows[1];
  return tr("<p><b>Course benchmark: batched %1× the baseline's throughput</b> (%2 s instead of "
            "%3 s for %4 queries of %5 tokens; %6 inference calls instead of %7).</p><p>%8</p>")
      .arg(batched.throughput_vs_baseline, 0, 'f', 2)
      .arg(batched.time_s, 0, 'f', 2)
      .arg(base.time_s, 0, 'f', 2)
      .arg(batched.queries)
      .arg(newTokens)
      .arg(batched.inference_calls)
      .arg(base.inference_calls)
      .arg(r.same_tokens ? tr("Batched tokens equal the baseline's ✓")
                         : tr("<b>Batched tokens differ from the baseline's.</b>"));
}

}  // namespace servelab::ui
