#include "spec_charts.h"

#include <QObject>
#include <QVector>

#include "chart_view.h"
#include "text_format.h"

namespace servelab::ui {

QString specProposedSeries() { return QObject::tr("proposed"); }
QString specGainedSeries() { return QObject::tr("tokens gained (accepted + 1)"); }
QString specPlainSeries() { return QObject::tr("plain decoding"); }
QString specSpeculativeSeries() { return QObject::tr("speculative"); }
QString specSpeedupSeries() { return QObject::tr("speed-up"); }
QString specBreakEvenSeries() { return QObject::tr("plain decoding (1×)"); }

namespace {

ChartView* makeChart(QWidget* parent, const QString& name, const QString& title) {
  auto* chart = new ChartView(parent);
  chart->setObjectName(name);
  chart->setTitle(title);
  return chart;
}

}  // namespace

ChartView* makeAcceptedLengthChart(QWidget* parent) {
  ChartView* c =
      makeChart(parent, QStringLiteral("speculativeAcceptedChart"), QObject::tr("Accepted length per step"));
  c->setAxisLabels(QObject::tr("scheduler step"), QObject::tr("tokens"));
  c->setIntegerTicks(true, true);
  c->setSeriesStyle(c->addSeries(specProposedSeries()), ChartView::SeriesStyle::Points);
  c->setSeriesStyle(c->addSeries(specGainedSeries()), ChartView::SeriesStyle::Steps);
  c->setLegendBelow(true);
  return c;
}

void drawAcceptedLength(ChartView* c, const servelab::BatchRunResult& run) {
  QVector<double> steps, proposed, gainedSteps, gained;
  for (const servelab::BatchStep& s : run.steps) {
    int64_t p = 0, g = 1;
    for (const servelab::SpecRow& row : s.speculation) {
      p = static_cast<int64_t>(row.proposed.size());
      g = row.accepted + 1;
    }
    if (p > 0) {
      steps << static_cast<double>(s.step);
      proposed << static_cast<double>(p);
    }
    gainedSteps << static_cast<double>(s.step);
    gained << static_cast<double>(g);
  }
  c->setSeriesData(c->seriesIndex(specProposedSeries()), steps, proposed);
  c->setSeriesData(c->seriesIndex(specGainedSeries()), gainedSteps, gained);
  c->rescale();
}

ChartView* makeThroughputChart(QWidget* parent) {
  ChartView* c = makeChart(parent, QStringLiteral("speculativeThroughputChart"),
                           QObject::tr("Tokens/s: speculative vs plain"));
  c->setAxisLabels(QObject::tr("generated tokens"), QObject::tr("tokens/s so far"));
  c->addSeries(specSpeculativeSeries());
  c->addSeries(specPlainSeries());
  c->setLegendBelow(true);
  return c;
}

namespace {

// Tokens/s after the first token at each later token: i / (t_i - t_0).
void tokensPerSecond(const servelab::RequestResult& r, QVector<double>& x, QVector<double>& y) {
  for (size_t i = 1; i < r.token_ms.size(); ++i) {
    const double ms = r.token_ms[i] - r.token_ms.front();
    if (ms <= 0) continue;
    x << static_cast<double>(i + 1);
    y << static_cast<double>(i) / ms * 1000.0;
  }
}

}  // namespace

void drawThroughput(ChartView* c, const servelab::SpeculativeDemoResult& r) {
  QVector<double> x, y;
  if (!r.speculative.requests.empty()) tokensPerSecond(r.speculative.requests[0], x, y);
  c->setSeriesData(c->seriesIndex(specSpeculativeSeries()), x, y);
  x.clear();
  y.clear();
  if (!r.plain.requests.empty()) tokensPerSecond(r.plain.requests[0], x, y);
  c->setSeriesData(c->seriesIndex(specPlainSeries()), x, y);
  c->rescale();
}

ChartView* makeSpeedupChart(QWidget* parent) {
  ChartView* c =
      makeChart(parent, QStringLiteral("speculativeSpeedupChart"), QObject::tr("Speed-up against k"));
  c->setAxisLabels(QObject::tr("k (proposed tokens per step)"), QObject::tr("speed-up (×)"));
  c->setLogXBase2(true);
  c->addSeries(specSpeedupSeries());
  c->addSeries(specBreakEvenSeries());
  c->setLegendBelow(true);
  return c;
}

void drawSpeedup(ChartView* c, const servelab::SpeculativeBenchResult& r) {
  QVector<double> ks, speedups;
  for (const servelab::SpeculativeBenchRun& run : r.runs) {
    if (run.method == servelab::SpeculativeMethod::None) continue;
    ks << static_cast<double>(run.k);
    speedups << run.speedup;
  }
  c->setSeriesData(c->seriesIndex(specSpeedupSeries()), ks, speedups);
  QVector<double> bx, by;
  if (!ks.isEmpty()) {
    bx << ks.front() << ks.back();
    by << 1.0 << 1.0;
  }
  c->setSeriesData(c->seriesIndex(specBreakEvenSeries()), bx, by);
  c->rescale();
}

ChartView* makeTimeSplitChart(QWidget* parent) {
  ChartView* c =
      makeChart(parent, QStringLiteral("speculativeTimeChart"), QObject::tr("Where the time went"));
  c->setAxisLabels(QString(), QObject::tr("time (ms)"));
  c->setLegendBelow(true);
  c->setLegendColumns(3);
  return c;
}

namespace {

double prefillMs(const servelab::BatchRunResult& run) {
  double ms = 0;
  for (const servelab::BatchStep& s : run.steps) ms += s.prefill_ms;
  return ms;
}

}  // namespace

void drawTimeSplit(ChartView* c, const servelab::SpeculativeDemoResult& r) {
  const double specPrefill = prefillMs(r.speculative), plainPrefill = prefillMs(r.plain);
  const double draft = r.speculative.speculative.draft_ms;
  const QStringList labels{QObject::tr("plain decoding"),
                           QObject::tr("%1, k = %2")
                               .arg(QString::fromUtf8(servelab::speculative_method_name(r.params.method)))
                               .arg(r.params.k)};
  const QVector<ChartView::BarSet> sets{
      {QObject::tr("prefill"), {plainPrefill, specPrefill}, QColor()},
      {QObject::tr("draft"), {0, draft}, QColor()},
      {QObject::tr("verify (plain: decode)"),
       {r.plain.total_ms - plainPrefill, r.speculative.total_ms - specPrefill - draft},
       QColor()},
  };
  c->setStackedBars(labels, sets, QObject::tr("time (ms)"),
                    {QObject::tr("%1 ms").arg(formatMsCoarse(r.plain.total_ms)),
                     QObject::tr("%1 ms").arg(formatMsCoarse(r.speculative.total_ms))});
  c->rescale();
}

}  // namespace servelab::ui
