#pragma once
// A tab's roofline after a run: this machine's roof drawn (the slope's foot, the ridge, the roof's
// end) and each of the run's steps at its intensity and achieved GFLOP/s, in its series.
#include <QString>
#include <vector>

#include "roofline_chart.h"

namespace servelab::ui::test {

// Empty when the chart shows exactly the roof and the steps; else what differs.
inline QString roofline_mismatch(const RooflineChart& chart,
                                 const std::vector<servelab::RooflinePoint>& steps,
                                 const RooflineChart::SeriesOf& seriesOf = RooflineChart::kindSeries) {
  const servelab::MachineLimits& m = chart.machine();
  if (m.read_gb_s <= 0 || m.fp32_gflop_s <= 0) return QStringLiteral("no machine limits behind the roof");
  const QVector<QPointF> roof = chart.seriesPoints(chart.seriesIndex(RooflineChart::roofSeriesName()));
  if (roof.size() != 3 || !qFuzzyCompare(roof[1].x(), m.ridge()) ||
      !qFuzzyCompare(roof[1].y(), m.fp32_gflop_s))
    return QStringLiteral("the roof is not the machine's");
  if (steps.empty()) return QStringLiteral("the run has no steps");
  for (const servelab::RooflinePoint& p : steps) {
    if (p.flops <= 0 || p.bytes <= 0 || p.ms <= 0)
      return QStringLiteral("step %1 has no cost or time").arg(QString::fromStdString(p.label));
    const int series = chart.seriesIndex(seriesOf(p));
    if (series < 0) return QStringLiteral("no series %1").arg(seriesOf(p));
    bool found = false;
    for (const QPointF& q : chart.seriesPoints(series))
      found = found || (qFuzzyCompare(q.x(), p.intensity()) && qFuzzyCompare(q.y(), p.flop_s() / 1e9));
    if (!found) return QStringLiteral("step %1 is not on the chart").arg(QString::fromStdString(p.label));
  }
  return QString();
}

}  // namespace servelab::ui::test
