#include "serving/load_result_charts.h"

#include <QCoreApplication>
#include <algorithm>
#include <vector>

#include "chart_view.h"

namespace servelab::ui {

namespace {

QString tr(const char* text) { return QCoreApplication::translate("LoadResultCharts", text); }

QString ms(double v, int decimals = 0) {
  return v < 0 ? QStringLiteral("–") : QString::number(v, 'f', decimals);
}

QString prefixed(const NamedRun& run, const QString& name) {
  return run.name.isEmpty() ? name : run.name + QStringLiteral(": ") + name;
}

// One curve of a distribution: the values measured, or (a sweep saved without its requests) the
// (percentile, value) pairs it saved.
struct Curve {
  QString name;
  std::vector<double> values;
  std::vector<std::pair<double, double>> saved;
};

enum class Measure { Ttft, Itl };

std::vector<double> measured(const std::vector<servelab::StreamTiming>& streams, Measure m) {
  std::vector<double> v;
  for (const servelab::StreamTiming& s : streams) {
    if (!s.ok || s.warmup) continue;
    if (m == Measure::Ttft && s.ttft_ms >= 0) v.push_back(s.ttft_ms);
    if (m == Measure::Itl) v.insert(v.end(), s.itl_ms.begin(), s.itl_ms.end());
  }
  return v;
}

std::vector<Curve> curvesOf(const QVector<NamedRun>& runs, Measure m) {
  std::vector<Curve> out;
  for (const NamedRun& run : runs) {
    const servelab::LoadReport& r = *run.report;
    if (!r.streams.empty())
      out.push_back({prefixed(run, QString::fromStdString(r.scenario)), measured(r.streams, m), {}});
    for (const servelab::LoadLevel& l : r.levels) {
      Curve c{prefixed(run, levelLabel(l)), measured(l.streams, m), {}};
      if (l.streams.empty()) {
        const servelab::Distribution& d = m == Measure::Ttft ? l.metrics.ttft : l.metrics.itl;
        c.saved = d.percentiles;
        c.name += tr(", saved percentiles");
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

void setupDistribution(ChartView* chart, const QVector<NamedRun>& runs, Measure m) {
  chart->clearAll();
  const bool ttft = m == Measure::Ttft;
  chart->setTitle(ttft ? tr("Time to first token (client, every request)")
                       : tr("Inter-token latency (client, every token)"));
  chart->setAxisLabels(ttft ? tr("TTFT (ms)") : tr("inter-token latency (ms)"),
                       ttft ? tr("requests within (%)") : tr("gaps within (%)"));
  chart->setLegendBelow(true);
  const std::vector<Curve> curves = curvesOf(runs, m);
  chart->setLegendColumns(curves.size() <= 2 ? 1 : 2);
  const bool marks = curves.size() == 1 && !curves.front().values.empty();
  for (const Curve& c : curves) {
    QVector<double> x, y;
    QString name = c.name;
    if (!c.values.empty()) {
      std::vector<double> v = c.values;
      std::sort(v.begin(), v.end());
      for (size_t i = 0; i < v.size(); ++i) {
        x << v[i];
        y << 100.0 * static_cast<double>(i + 1) / static_cast<double>(v.size());
      }
      const double p50 = servelab::nearest_rank(v, 0.5), p90 = servelab::nearest_rank(v, 0.9),
                   p99 = servelab::nearest_rank(v, 0.99);
      if (marks) {
        chart->addVerticalMarker(p50, tr("p50 %1 ms").arg(ms(p50, 1)));
        chart->addVerticalMarker(p90, tr("p90 %1 ms").arg(ms(p90, 1)));
        chart->addVerticalMarker(p99, tr("p99 %1 ms").arg(ms(p99, 1)));
      } else {
        name += tr(": p50 %1, p99 %2 ms").arg(ms(p50, 1), ms(p99, 1));
      }
    }
    for (const auto& [p, v] : c.saved) {
      x << v;
      y << p;
    }
    const int series = chart->addSeries(name);
    if (!c.saved.empty()) chart->setSeriesStyle(series, ChartView::SeriesStyle::Points);
    chart->setSeriesData(series, x, y);
  }
}

}  // namespace

QString levelLabel(const servelab::LoadLevel& l) {
  return l.arrival == "closed" ? QStringLiteral("c=%1").arg(l.level)
                               : QStringLiteral("\u03bb=%1/s").arg(l.level);
}

void setupTtftDistribution(ChartView* chart, const QVector<NamedRun>& runs) {
  setupDistribution(chart, runs, Measure::Ttft);
}

void setupItlDistribution(ChartView* chart, const QVector<NamedRun>& runs) {
  setupDistribution(chart, runs, Measure::Itl);
}

void setupLatencyThroughput(ChartView* chart, const QVector<NamedRun>& runs) {
  chart->clearAll();
  chart->setAxisLabels(tr("throughput (tokens/s)"), tr("latency (ms)"));
  chart->setLogY(true);
  // The sweep's points reach every corner: its series go in rows under the plot.
  chart->setLegendColumns(runs.size() > 1 ? 2 : 4);
  chart->setLegendBelow(true);
  QStringList unordered;
  for (const NamedRun& run : runs) {
    // The levels in the order of their throughput, the order the chart keeps points in.
    std::vector<const servelab::LoadLevel*> levels;
    for (const servelab::LoadLevel& l : run.report->levels) levels.push_back(&l);
    std::stable_sort(levels.begin(), levels.end(),
                     [](const auto* a, const auto* b) { return a->tokens_per_s < b->tokens_per_s; });
    // A line joins the points in that order: it is the order of the load only while throughput
    // rose with the load. Where it fell (a server past its peak), the points stand alone, each
    // named by its level, rather than a line that would join them out of load order.
    const bool inLoadOrder = std::is_sorted(levels.begin(), levels.end(), [](const auto* a, const auto* b) {
      return a->arrival == b->arrival && a->level < b->level;
    });
    if (!inLoadOrder) unordered << (run.name.isEmpty() ? tr("this run") : run.name);
    QStringList labels;
    for (const servelab::LoadLevel* l : levels) labels << levelLabel(*l);
    const std::pair<QString, double servelab::LoadLevel::*> figures[] = {
        {tr("TTFT p50"), &servelab::LoadLevel::ttft_p50_ms},
        {tr("TTFT p99"), &servelab::LoadLevel::ttft_p99_ms},
        {tr("ITL p50"), &servelab::LoadLevel::itl_p50_ms},
        {tr("ITL p99"), &servelab::LoadLevel::itl_p99_ms}};
    for (const auto& [name, field] : figures) {
      const int series = chart->addSeries(prefixed(run, name));
      QVector<double> x, y;
      for (const servelab::LoadLevel* l : levels) {
        x << l->tokens_per_s;
        y << l->*field;
      }
      chart->setSeriesData(series, x, y);
      chart->setPointLabels(series, labels);
      if (!inLoadOrder) chart->setSeriesStyle(series, ChartView::SeriesStyle::Points);
    }
    // One run: each level's throughput marked with its name as well.
    if (runs.size() == 1)
      for (const servelab::LoadLevel* l : levels) chart->addVerticalMarker(l->tokens_per_s, levelLabel(*l));
  }
  chart->setTitle(unordered.isEmpty() ? tr("Throughput against latency")
                                      : tr("Throughput against latency (%1: throughput fell as load rose)")
                                            .arg(unordered.join(QStringLiteral(", "))));
}

void appendLevel(ChartView* chart, const servelab::LoadLevel& l) {
  chart->append(0, l.tokens_per_s, l.ttft_p50_ms);
  chart->append(1, l.tokens_per_s, l.ttft_p99_ms);
  chart->append(2, l.tokens_per_s, l.itl_p50_ms);
  chart->append(3, l.tokens_per_s, l.itl_p99_ms);
  // Which level each point is: the sweep's x is what the server did, not what was asked.
  chart->addVerticalMarker(l.tokens_per_s, levelLabel(l));
}

void setupGoodput(ChartView* chart, const QVector<NamedRun>& runs) {
  chart->clearAll();
  chart->setTitle(tr("Goodput against load"));
  chart->setAxisLabels(tr("load (clients or requests/s)"), tr("requests/s"));
  chart->setLegendBelow(true);
  chart->setLegendColumns(2);
  bool any = false, sweeps = false;
  for (const NamedRun& run : runs) {
    if (run.report->levels.empty()) continue;
    sweeps = true;
    const int thr = chart->addSeries(prefixed(run, tr("requests/s")));
    QVector<double> x, y, gx, gy;
    for (const servelab::LoadLevel& l : run.report->levels) {
      x << l.level;
      y << l.requests_per_s;
      if (l.metrics.request_goodput >= 0) {
        gx << l.level;
        gy << l.metrics.request_goodput;
      }
    }
    chart->setSeriesData(thr, x, y);
    if (!gx.isEmpty()) {
      any = true;
      const int good = chart->addSeries(prefixed(run, tr("goodput (met every SLO)")));
      chart->setSeriesData(good, gx, gy);
    }
  }
  // What is missing goes in the title: the footnote is the model's.
  if (!sweeps)
    chart->setTitle(tr("Goodput against load (sweeps only)"));
  else if (!any)
    chart->setTitle(tr("Requests/s against load (no SLOs given: no goodput)"));
}

void setupTokenTimes(ChartView* chart, const QString& scenario) {
  chart->clearAll();
  chart->setTitle(tr("Per-token times (%1)").arg(scenario));
  chart->setAxisLabels(tr("token index"), tr("ms since the request was sent"));
  chart->setLogY(false);
  chart->setLegendColumns(0);
  chart->setLegendBelow(false);
}

void addStreamTimes(ChartView* chart, const servelab::StreamTiming& s) {
  QString name = tr("stream %1").arg(s.index);
  if (!s.adapter.empty()) name += QStringLiteral(" (%1)").arg(QString::fromStdString(s.adapter));
  if (!s.ok) name += tr(" failed");
  const int series = chart->addSeries(name);
  QVector<double> x, y;
  for (size_t i = 0; i < s.token_ms.size(); ++i) {
    x << static_cast<double>(i);
    y << s.token_ms[i];
  }
  chart->setSeriesData(series, x, y);
}

QStringList runSummaryLines(const servelab::LoadReport& report, int64_t* failed, int64_t* total) {
  *failed = *total = 0;
  QStringList lines;
  for (const servelab::StreamTiming& s : report.streams) {
    ++*total;
    if (!s.ok) {
      ++*failed;
      lines << tr("stream %1: %2").arg(s.index).arg(QString::fromStdString(s.error));
      continue;
    }
    lines << tr("stream %1%2: %3 tokens, TTFT %4 ms, %5 tokens/s%6")
                 .arg(s.index)
                 .arg(s.adapter.empty() ? QString()
                                        : QStringLiteral(" [%1]").arg(QString::fromStdString(s.adapter)))
                 .arg(s.tokens())
                 .arg(ms(s.ttft_ms))
                 .arg(s.tokens_per_s(), 0, 'f', 1)
                 .arg(report.scenario == "structured"
                          ? (s.json_valid ? tr(", valid JSON") : tr(", NOT valid JSON"))
                          : QString());
  }
  for (const servelab::LoadLevel& l : report.levels) {
    *total += l.requests;
    *failed += l.failed;
    lines << tr("%1 %2: %3 tokens/s, TTFT p50 %4 / p99 %5 ms, inter-token p50 %6 / p99 %7 ms%8%9")
                 .arg(QString::fromStdString(l.arrival))
                 .arg(l.level)
                 .arg(l.tokens_per_s, 0, 'f', 1)
                 .arg(ms(l.ttft_p50_ms))
                 .arg(ms(l.ttft_p99_ms))
                 .arg(ms(l.itl_p50_ms, 1))
                 .arg(ms(l.itl_p99_ms, 1))
                 .arg(l.metrics.request_goodput >= 0
                          ? tr(", goodput %1 req/s").arg(l.metrics.request_goodput, 0, 'f', 2)
                          : QString())
                 .arg(l.failed ? tr(", %1 failed").arg(l.failed) : QString());
  }
  return lines;
}

}  // namespace servelab::ui
