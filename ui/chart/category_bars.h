#pragma once
// CategoryBars: one bar per category (ChartView::setBars).
#include <qcustomplot.h>

#include "chart_data.h"
#include "chart_style.h"
#include "chart_view.h"

namespace servelab::ui::chart {

// Categorical bars (setBars): one bar per category at x = 1, 2, ..., and their value labels.
class CategoryBars : public QCPBars, public ChartData {
 public:
  CategoryBars(QCPAxis* keyAxis, QCPAxis* valueAxis, const QStringList& labels, const QString& valueName)
      : QCPBars(keyAxis, valueAxis), labels(labels), valueName(valueName) {}

  QStringList labels;
  QString valueName;

  void addExtent(Range& keys, Range& values, bool, bool) const override {
    for (auto it = data()->constBegin(); it != data()->constEnd(); ++it) {
      keys.add(it->key);
      values.add(it->value);
    }
  }
  // The bar under the pointer (or the nearest one), named by its category.
  void pick(Pick& pick) const override {
    const QString name = valueName.isEmpty() ? QStringLiteral("value") : valueName;
    for (auto it = data()->constBegin(); it != data()->constEnd(); ++it) {
      if (!std::isfinite(it->value)) continue;
      const QRectF r = barRect(it->key, it->value);
      const double d = squaredDistanceToRect(pick.at, r.left(), r.right(), r.top(), r.bottom());
      const int index = static_cast<int>(std::lround(it->key)) - 1;
      const QString label = index < labels.size() ? displayLabel(labels[index]) : QString();
      pick.offerArea(d, QStringLiteral("%1: %2 = %3").arg(label, name, formatNumber(it->value)));
    }
  }
  double legendCost(const QRectF& box) const override {
    double total = 0;
    for (auto it = data()->constBegin(); it != data()->constEnd(); ++it)
      if (barRect(it->key, it->value).adjusted(0, -24, 0, 0).intersects(box)) total += 10;  // 24: the label
    return total;
  }

 private:
  QRectF barRect(double key, double value) const {
    return QRectF(QPointF(keyAxis()->coordToPixel(key - width() / 2), valueAxis()->coordToPixel(0)),
                  QPointF(keyAxis()->coordToPixel(key + width() / 2), valueAxis()->coordToPixel(value)))
        .normalized();
  }
};

}  // namespace servelab::ui::chart
