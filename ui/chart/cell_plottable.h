#pragma once
// CellPlottable: the cells of a timeline (ChartView::setCells).
#include <qcustomplot.h>

#include "chart_data.h"
#include "chart_style.h"
#include "chart_view.h"

namespace servelab::ui::chart {

// The cells of a timeline, drawn as one plottable (hundreds of cells stay cheap to replot); a
// legend-only instance holds no cells and draws its key's style as its legend icon.
class CellPlottable : public QCPAbstractPlottable, public ChartData {
 public:
  CellPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis) : QCPAbstractPlottable(keyAxis, valueAxis) {
    setSelectable(QCP::stNone);
  }

  // The keys only: a timeline's rows are its value axis, fitted from the row labels.
  void addExtent(Range& keys, Range&, bool positiveKeys, bool) const override {
    bool found = false;
    const QCPRange r = getKeyRange(found, positiveKeys ? QCP::sdPositive : QCP::sdBoth);
    if (!found) return;
    keys.add(r.lower);
    keys.add(r.upper);
  }
  // A cell under the pointer, unless a series point is nearer.
  void pick(Pick& pick) const override {
    if (!pick.text.isEmpty()) return;
    for (const ChartView::Cell& c : cells) {
      if (pixelRect(c).adjusted(-1, -1, 1, 1).contains(pick.at)) {
        pick.text = c.info.isEmpty() ? c.label : c.info;
        pick.best = 0;
      }
    }
  }
  // A timeline's legend sits below the plot, never on the cells.
  double legendCost(const QRectF&) const override { return 0; }

  QVector<ChartView::Cell> cells;
  ChartView::CellKey key;  // legend-only instances
  QColor background = Qt::white, text = Qt::black, muted = Qt::gray;

  double selectTest(const QPointF&, bool, QVariant*) const override { return -1; }
  QCPRange getKeyRange(bool& found, QCP::SignDomain domain) const override {
    Range r;
    for (const ChartView::Cell& c : cells) {
      for (double x : {c.x0, c.x1})
        if (domain == QCP::sdBoth || (domain == QCP::sdPositive) == (x > 0)) r.add(x);
    }
    found = r.valid();
    return found ? QCPRange(r.lo, r.hi) : QCPRange();
  }
  QCPRange getValueRange(bool& found, QCP::SignDomain, const QCPRange&) const override {
    Range r;
    for (const ChartView::Cell& c : cells) {
      r.add(c.row - 0.5);
      r.add(c.row + 0.5);
    }
    found = r.valid();
    return found ? QCPRange(r.lo, r.hi) : QCPRange();
  }

  // Where a cell is drawn, in plot pixels.
  QRectF pixelRect(const ChartView::Cell& c) const {
    const QCPAxis* k = keyAxis();
    const QCPAxis* v = valueAxis();
    return QRectF(QPointF(k->coordToPixel(c.x0), v->coordToPixel(c.row - 0.4)),
                  QPointF(k->coordToPixel(c.x1), v->coordToPixel(c.row + 0.4)))
        .normalized();
  }

  void styleFor(ChartView::CellStyle style, const QColor& color, QPen* pen, QBrush* brush,
                QColor* label) const {
    switch (style) {
      case ChartView::CellStyle::Solid:
        *pen = QPen(color.darker(150), 1);
        *brush = QBrush(color);
        *label = color.lightnessF() > 0.6 ? QColor(0x20, 0x20, 0x20) : QColor(Qt::white);
        break;
      case ChartView::CellStyle::Tint:
        *pen = QPen(color, 1);
        *brush = QBrush(blend(color, background, 0.42));
        *label = text;
        break;
      case ChartView::CellStyle::Muted:
        *pen = QPen(muted, 1, Qt::DashLine);
        *brush = QBrush(blend(muted, background, 0.22));
        *label = muted;
        break;
      case ChartView::CellStyle::Cached:
        *pen = QPen(color.darker(150), 1);
        *brush = QBrush(color.darker(170), Qt::BDiagPattern);
        *label = text;
        break;
      case ChartView::CellStyle::Preempted:
        *pen = QPen(QColor(0xc0, 0x20, 0x20), 1.5);
        *brush = QBrush(QColor(0xc0, 0x20, 0x20), Qt::DiagCrossPattern);
        *label = text;
        break;
    }
  }

  // Pattern brushes are transparent between their lines: the cell's tint goes underneath.
  void fillUnder(QCPPainter* painter, ChartView::CellStyle style, const QColor& color,
                 const QRectF& r) const {
    if (style != ChartView::CellStyle::Cached && style != ChartView::CellStyle::Preempted) return;
    painter->setPen(Qt::NoPen);
    painter->setBrush(style == ChartView::CellStyle::Cached
                          ? blend(color, background, 0.42)
                          : blend(QColor(0xc0, 0x20, 0x20), background, 0.15));
    painter->drawRect(r);
  }

 protected:
  void draw(QCPPainter* painter) override {
    if (cells.isEmpty()) return;
    const QRectF clip = clipRect();
    const QFont font = chartFont(9.5);
    const QFontMetricsF metrics(font);
    painter->setFont(font);
    for (const ChartView::Cell& c : cells) {
      QRectF r = pixelRect(c);
      if (!r.intersects(clip)) continue;
      if (r.width() < 1) r.setWidth(1);
      QPen pen;
      QBrush brush;
      QColor labelColor;
      styleFor(c.style, c.color, &pen, &brush, &labelColor);
      applyDefaultAntialiasingHint(painter);
      fillUnder(painter, c.style, c.color, r);
      painter->setPen(r.width() > 3 ? pen : Qt::NoPen);
      painter->setBrush(brush);
      painter->drawRect(r);
      if (!c.label.isEmpty() && metrics.horizontalAdvance(c.label) + 6 <= r.width() &&
          metrics.height() <= r.height() + 2) {
        painter->setPen(labelColor);
        painter->drawText(r, Qt::AlignCenter, c.label);
      }
    }
  }
  void drawLegendIcon(QCPPainter* painter, const QRectF& rect) const override {
    QPen pen;
    QBrush brush;
    QColor label;
    styleFor(key.style, key.color, &pen, &brush, &label);
    painter->setPen(pen);
    painter->setBrush(brush);
    const QRectF box(rect.left(), rect.center().y() - rect.height() * 0.35, rect.width(),
                     rect.height() * 0.7);
    fillUnder(painter, key.style, key.color, box);
    painter->setPen(pen);
    painter->setBrush(brush);
    painter->drawRect(box);
  }
};

}  // namespace servelab::ui::chart
