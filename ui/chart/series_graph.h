#pragma once
// SeriesGraph: a line, point, step or level-mark series (ChartView::addSeries).
#include <qcustomplot.h>

#include "chart_data.h"
#include "chart_style.h"
#include "chart_view.h"

namespace servelab::ui::chart {

// A series: QCPGraph, except that a Ticks series draws a level mark across each point's category
// (no line between points) and shows that mark as its legend icon.
class SeriesGraph : public QCPGraph, public ChartData {
 public:
  SeriesGraph(QCPAxis* keyAxis, QCPAxis* valueAxis, const QString& seriesName, bool right)
      : QCPGraph(keyAxis, valueAxis), seriesName(seriesName), right(right) {}

  static constexpr double kTickHalfWidth = 0.42;  // in categories (bars are 0.7 wide)
  QString seriesName;                             // without the "(right axis)" of the legend
  bool right = false;
  bool ticks = false;
  QStringList pointLabels;  // ChartView::setPointLabels

  bool onRightAxis() const override { return right; }
  // QCustomPlot's own extents: the keys (positive ones on a log axis), and the values of the points
  // among those keys.
  void addExtent(Range& keys, Range& values, bool positiveKeys, bool positiveValues) const override {
    bool found = false;
    const QCPRange k = getKeyRange(found, positiveKeys ? QCP::sdPositive : QCP::sdBoth);
    if (!found) return;
    keys.add(k.lower);
    keys.add(k.upper);
    const QCPRange v =
        getValueRange(found, positiveValues ? QCP::sdPositive : QCP::sdBoth, positiveKeys ? k : QCPRange());
    if (!found) return;
    values.add(v.lower);
    values.add(v.upper);
  }
  void pick(Pick& pick) const override {
    const QCPAxis* k = keyAxis();
    const QCPAxis* v = valueAxis();
    // A point on a bar chart is named by its category.
    const auto pointText = [&](double key, double value, qsizetype index) {
      if (index < pointLabels.size() && !pointLabels[index].isEmpty())
        return QStringLiteral("%1: x = %2, y = %3")
            .arg(pointLabels[index], formatNumber(key), formatNumber(value));
      const long category = std::lround(key) - 1;
      if (!pick.categories.isEmpty() && key == std::round(key) && category >= 0 &&
          category < pick.categories.size())
        return QStringLiteral("%1: %2 = %3")
            .arg(displayLabel(pick.categories[category]), seriesName, formatNumber(value));
      return QStringLiteral("%1: x = %2, y = %3").arg(seriesName, formatNumber(key), formatNumber(value));
    };
    for (auto it = data()->constBegin(); it != data()->constEnd(); ++it) {
      const QPointF q(k->coordToPixel(it->key), v->coordToPixel(it->value));
      if (!pick.area.contains(q)) continue;
      if (ticks) {
        const double x0 = k->coordToPixel(it->key - kTickHalfWidth);
        const double x1 = k->coordToPixel(it->key + kTickHalfWidth);
        const double d = squaredDistanceToRect(pick.at, x0, x1, q.y(), q.y());
        if (d < pick.tickBest) {
          pick.tickBest = d;
          pick.tickText = pointText(it->key, it->value, it - data()->constBegin());
        }
        continue;
      }
      const double d = squaredDistance(pick.at, q);
      if (d < pick.best) {
        pick.best = d;
        pick.text = pointText(it->key, it->value, it - data()->constBegin());
      }
    }
  }
  double legendCost(const QRectF& box) const override {
    double total = 0;
    QPointF previous;
    bool first = true;
    for (auto it = data()->constBegin(); it != data()->constEnd(); ++it) {
      const QPointF q(keyAxis()->coordToPixel(it->key), valueAxis()->coordToPixel(it->value));
      if (box.contains(q)) total += 10;
      if (!first && segmentHits(previous, q, box)) total += 1;
      previous = q;
      first = false;
    }
    return total;
  }

 protected:
  void draw(QCPPainter* painter) override {
    if (!ticks) {
      QCPGraph::draw(painter);
      return;
    }
    const QCPAxis* k = keyAxis();
    const QCPAxis* v = valueAxis();
    if (!k || !v) return;
    applyDefaultAntialiasingHint(painter);
    painter->setPen(pen());
    for (auto it = data()->constBegin(); it != data()->constEnd(); ++it) {
      if (!std::isfinite(it->key) || !std::isfinite(it->value)) continue;
      const double y = v->coordToPixel(it->value);
      painter->drawLine(
          QLineF(k->coordToPixel(it->key - kTickHalfWidth), y, k->coordToPixel(it->key + kTickHalfWidth), y));
    }
  }
  void drawLegendIcon(QCPPainter* painter, const QRectF& rect) const override {
    if (!ticks) {
      QCPGraph::drawLegendIcon(painter, rect);
      return;
    }
    painter->setPen(pen());
    painter->drawLine(QLineF(rect.left(), rect.center().y(), rect.right(), rect.center().y()));
  }
};

}  // namespace servelab::ui::chart
