#include "continuous/long_prompt.h"

#include <QCoreApplication>
#include <algorithm>

#include "chart_view.h"
#include "text_format.h"

namespace servelab::ui {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("ContinuousTab", text); }

QString wayName(const servelab::ChunkedPrefillRun& run) {
  return run.budget > 0 ? tr("budget %1").arg(run.budget) : tr("no budget");
}

}  // namespace

servelab::ChunkedPrefillParams longPromptParams(int budget, int context) {
  servelab::ChunkedPrefillParams p;
  if (budget > 0) p.budget = budget;
  // The course's models have 1,024 (GPT-2) or 8,192 positions (SmolLM2): the long prompt takes
  // what fits beside its new tokens.
  p.long_prompt_tokens =
      std::min<int64_t>(p.long_prompt_tokens, std::max(context, 64) - p.long_new_tokens - 8);
  p.stream_tokens = std::min<int64_t>(p.stream_tokens, std::max(context, 64) / 2);
  p.budget = std::min<int64_t>(p.budget, std::max(context, 1));
  p.rounds = 1;
  return p;
}

void setupItlChart(ChartView* chart) {
  chart->setObjectName(QStringLiteral("continuousItl"));
  chart->setTitle(tr("Inter-token latency of the decoding streams"));
  chart->setAxisLabels(tr("time since the run began (ms)"), tr("gap before the token (ms)"));
  chart->setLegendBelow(true);
}

void drawItl(ChartView* chart, const servelab::ChunkedPrefillResult& r) {
  chart->clearAll();
  for (const auto* run : {&r.run_unchunked, &r.run_chunked}) {
    const servelab::ChunkedPrefillRun& figures = run == &r.run_unchunked ? r.unchunked : r.chunked;
    // Every stream's gaps in time order, one series per way.
    QVector<QPair<double, double>> points;
    for (const servelab::RequestResult& q : run->requests)
      if (q.id < r.params.streams)
        for (size_t i = 1; i < q.token_ms.size(); ++i)
          points.push_back({q.token_ms[i], q.token_ms[i] - q.token_ms[i - 1]});
    std::sort(points.begin(), points.end());
    QVector<double> x, y;
    for (const auto& [t, gap] : points) {
      x << t;
      y << gap;
    }
    // Points, not a line: no token came between two gaps, so nothing lies between them to draw.
    const int series = chart->addSeries(wayName(figures));
    chart->setSeriesStyle(series, ChartView::SeriesStyle::Points);
    chart->setSeriesData(series, x, y);
  }
  chart->addVerticalMarker(r.arrival_ms, tr("long prompt arrives"));
  chart->rescale();
}

QString longPromptSummary(const servelab::ChunkedPrefillResult& r) {
  const servelab::ChunkedPrefillRun& u = r.unchunked;
  const servelab::ChunkedPrefillRun& c = r.chunked;
  QString text =
      tr("<p><b>%1 streams decoding, a %2-token prompt arriving at scheduler step %3</b> (%4 ms in). With a "
         "budget of %5 tokens per step its prefill ran in %6 chunks beside the streams' decodes.</p>")
          .arg(r.params.streams)
          .arg(r.params.long_prompt_tokens)
          .arg(r.params.arrive_after_tokens)
          .arg(formatMsCoarse(r.arrival_ms))
          .arg(c.budget)
          .arg(c.chunks);
  text += tr("<p>The streams' longest gap between tokens: <b>%1 → %2 ms</b> (%3× lower); p99 %4 → %5 ms, "
             "median %6 → %7 ms.</p>")
              .arg(formatMsCoarse(u.itl_max_ms), formatMsCoarse(c.itl_max_ms))
              .arg(r.itl_max_cut, 0, 'f', 1)
              .arg(formatMsCoarse(u.itl_p99_ms), formatMsCoarse(c.itl_p99_ms), formatMsCoarse(u.itl_p50_ms),
                   formatMsCoarse(c.itl_p50_ms));
  text += tr("<p>The price: the long request's first token came after %1 instead of %2 ms (%3×); "
             "throughput %4 vs %5 tokens/s.</p>")
              .arg(formatMsCoarse(c.long_ttft_ms), formatMsCoarse(u.long_ttft_ms))
              .arg(r.ttft_cost, 0, 'f', 2)
              .arg(c.tokens_per_s, 0, 'f', 1)
              .arg(u.tokens_per_s, 0, 'f', 1);
  text += r.same_tokens ? tr("<p>Both ways generated the same tokens ✓</p>")
                        : tr("<p><b>The two ways generated different tokens.</b></p>");
  return text;
}

}  // namespace servelab::ui
