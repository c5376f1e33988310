#pragma once
// StackedBars: parts of a whole per category (ChartView::setStackedBars).
#include <qcustomplot.h>

#include <QVector>

#include "chart_data.h"
#include "chart_style.h"
#include "chart_view.h"

namespace servelab::ui::chart {

// Stacked bars (setStackedBars): one QCPBars per set, stacked bottom first, and the parts' values
// per category (NaN where a part is empty).
class StackedBars : public ChartData {
 public:
  StackedBars(QCPAxis* keyAxis, QCPAxis* valueAxis) : keyAxis_(keyAxis), valueAxis_(valueAxis) {}

  QStringList labels;
  QString valueName;
  QVector<ChartView::BarSet> sets;
  QVector<QCPBars*> parts;  // owned by the plot

  void addExtent(Range& keys, Range& values, bool, bool) const override {
    for (qsizetype i = 0; i < labels.size() && !sets.isEmpty(); ++i) {
      double up = 0, down = 0;
      for (const ChartView::BarSet& set : sets) {
        const double v = set.values[i];
        if (!std::isfinite(v)) continue;
        (v > 0 ? up : down) += v;
      }
      keys.add(static_cast<double>(i + 1));
      values.add(up);
      values.add(down);
    }
  }
  // The part under the pointer: its set and value.
  void pick(Pick& pick) const override {
    for (qsizetype i = 0; i < labels.size() && !sets.isEmpty(); ++i) {
      double up = 0, down = 0;
      const double x0 = keyAxis_->coordToPixel(i + 1 - 0.35);
      const double x1 = keyAxis_->coordToPixel(i + 1 + 0.35);
      for (const ChartView::BarSet& set : sets) {
        const double v = set.values[i];
        if (!std::isfinite(v)) continue;
        double& base = v > 0 ? up : down;
        const double y0 = valueAxis_->coordToPixel(base);
        const double y1 = valueAxis_->coordToPixel(base + v);
        base += v;
        pick.offerArea(squaredDistanceToRect(pick.at, x0, x1, y0, y1),
                       QStringLiteral("%1: %2 = %3%4")
                           .arg(displayLabel(labels[i]), set.name, formatNumber(v),
                                valueName.isEmpty() ? QString() : QStringLiteral(" (%1)").arg(valueName)));
      }
    }
  }
  double legendCost(const QRectF& box) const override {
    double total = 0;
    for (qsizetype i = 0; i < labels.size() && !sets.isEmpty(); ++i) {
      const QRectF bar(
          QPointF(keyAxis_->coordToPixel(i + 1 - 0.35), valueAxis_->coordToPixel(0)),
          QPointF(keyAxis_->coordToPixel(i + 1 + 0.35), valueAxis_->coordToPixel(positiveTotal(i))));
      if (bar.normalized().adjusted(0, -24, 0, 0).intersects(box)) total += 10;
    }
    return total;
  }
  // The height of category i's stack above zero (where its annotation sits).
  double positiveTotal(qsizetype i) const {
    double top = 0;
    for (const ChartView::BarSet& set : sets)
      if (std::isfinite(set.values[i]) && set.values[i] > 0) top += set.values[i];
    return top;
  }

 private:
  QCPAxis* keyAxis_;
  QCPAxis* valueAxis_;
};

}  // namespace servelab::ui::chart
