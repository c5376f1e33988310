#pragma once
// ChartData: what every kind of data on a chart answers for itself; Pick: the hover readout's search.
#include <QPointF>
#include <QRectF>
#include <QString>
#include <QStringList>
#include <algorithm>

#include "chart_style.h"

namespace servelab::ui::chart {

// The nearest data under the pointer so far, for the hover readout: squared pixel distances and
// texts. Level marks (ticks) are hit along their whole width and win over everything else.
struct Pick {
  QPointF at;              // the pointer, in plot pixels
  QRectF area;             // the plot area (a little larger): data outside it is not hit
  QStringList categories;  // the bar chart's categories (x = 1, 2, ...), empty without bars
  double best = kReadoutRadius * kReadoutRadius;
  QString text;
  double tickBest = 6.0 * 6.0;
  QString tickText;
  // A hit on a rectangle (zero inside it) at squared distance d replaces the best one when it is
  // nearer, or when it contains the pointer and the best one does not.
  void offerArea(double d, const QString& hitText) {
    if (d < best || (d == 0 && best > 0)) {
      best = d;
      text = hitText;
    }
  }
};

// Squared pixel distance from p to the rectangle spanned by (x0, y0) and (x1, y1); zero inside.
inline double squaredDistanceToRect(const QPointF& p, double x0, double x1, double y0, double y1) {
  const double dx = std::max({std::min(x0, x1) - p.x(), 0.0, p.x() - std::max(x0, x1)});
  const double dy = std::max({std::min(y0, y1) - p.y(), 0.0, p.y() - std::max(y0, y1)});
  return dx * dx + dy * dy;
}

// What every kind of data on a chart answers for itself, so that ChartView iterates its data
// instead of switching on what it shows: the extent a fit must show, what is under the pointer,
// and how much of it a legend box would hide.
class ChartData {
 public:
  virtual ~ChartData() = default;
  // Adds the data's keys to keys and its values to values (those of the axis it is drawn on).
  // positiveKeys / positiveValues: the axis is logarithmic, values <= 0 stay out.
  virtual void addExtent(Range& keys, Range& values, bool positiveKeys, bool positiveValues) const = 0;
  virtual bool onRightAxis() const { return false; }
  virtual void pick(Pick& pick) const = 0;
  // Points under the box count most, lines through it less.
  virtual double legendCost(const QRectF& box) const = 0;
};

}  // namespace servelab::ui::chart
