// ChartView: fitting the axes to the data, laying the plot out for its size, and the theme.
#include <qcustomplot.h>

#include <QBuffer>
#include <QClipboard>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QRegularExpression>
#include <QSaveFile>
#include <QStandardPaths>
#include <QSvgGenerator>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <limits>

#include "chart/category_bars.h"
#include "chart/cell_plottable.h"
#include "chart/chart_data.h"
#include "chart/chart_style.h"
#include "chart/series_graph.h"
#include "chart/stacked_bars.h"
#include "chart/svg_clip_marker.h"
#include "chart_view.h"

namespace servelab::ui {

using namespace chart;

// ---------------------------------------------------------------------------------------------
// Fitting and replots

void ChartView::clearAll() {
  for (QCPGraph* graph : graphs_) plot_->removeGraph(graph);
  graphs_.clear();
  seriesNames_.clear();
  seriesAxis_.clear();
  seriesStyles_.clear();
  removeBars();
  for (QCPItemStraightLine* line : markerLines_) plot_->removeItem(line);
  for (QCPItemText* text : markerTexts_) plot_->removeItem(text);
  markerLines_.clear();
  markerTexts_.clear();
  markers_.clear();
  if (cells_) cells_->cells.clear();
  for (CellPlottable* key : cellKeys_) plot_->removePlottable(key);
  cellKeys_.clear();
  fitLeft_ = FitRange{};
  fitRight_ = FitRange{};
  hideReadout();
  plot_->yAxis->setLabel(yLabel_);
  plot_->yAxis2->setVisible(!y2Label_.isEmpty());
  plot_->yAxis2->setTickLabels(!y2Label_.isEmpty());
  applyXAxisMode();
  updateLegendVisibility();
  userZoomed_ = false;
  fitPending_ = false;
  replotSoon();
}

void ChartView::rescale() {
  userZoomed_ = false;
  fitToData();
  fitPending_ = false;
  replotSoon();
}

bool ChartView::categorical() const { return bars_ || !stack_->parts.isEmpty(); }

QVector<const ChartData*> ChartView::dataItems() const {
  QVector<const ChartData*> items;
  for (const QCPGraph* graph : graphs_) items << static_cast<const SeriesGraph*>(graph);
  if (cells_) items << cells_;
  if (bars_) items << bars_;
  items << stack_.get();
  return items;
}

void ChartView::fitToData() {
  const bool logX = logX_ && !categorical();
  // Each item adds its own extent; the axes' kinds decide the padding below.
  Range keys, left, right;
  for (const ChartData* item : dataItems()) {
    const bool onRight = item->onRightAxis();
    item->addExtent(keys, onRight ? right : left, logX, !onRight && logY_);
  }
  if (categorical() && !barLabels_.isEmpty()) {
    keys.add(1);
    keys.add(static_cast<double>(barLabels_.size()));
  }
  const bool timeline = !cellRows_.isEmpty();
  fitLeft_ = FitRange{};
  fitRight_ = FitRange{};
  if (timeline) {  // every row, the first on top (the axis is reversed)
    fitLeft_ = FitRange{true, -0.5, static_cast<double>(cellRows_.size()) - 0.5};
    plot_->yAxis->setRange(fitLeft_.lower, fitLeft_.upper);
  }
  if (!keys.valid()) {  // no data: keep the current ranges (a log axis starts on 1 to 128)
    if (logX) plot_->xAxis->setRange(1 / std::pow(2.0, 0.25), 128 * std::pow(2.0, 0.25));
    return;
  }
  for (const Marker& marker : markers_) {
    if (!logX || marker.x > 0) keys.add(marker.x);
  }

  QCPRange xRange;
  if (categorical()) {
    xRange = QCPRange(keys.lo - 0.6, keys.hi + 0.6);
  } else if (logX) {
    const double factor = keys.hi > keys.lo ? std::pow(static_cast<double>(logXBase_), 0.25) : 2.0;
    xRange = QCPRange(keys.lo / factor, keys.hi * factor);
    // At least two decades on a log10 axis: under 1.6 QCustomPlot's log ticker falls back to linear
    // ticks, which the axis then labels in rounded powers ("2·10²" twice).
    if (logXBase_ == 10) xRange.upper = std::max(xRange.upper, xRange.lower * 100);
  } else if (timeline) {
    const double pad = std::max(0.5, (keys.hi - keys.lo) * 0.01);
    xRange = QCPRange(keys.lo - pad, std::max(keys.hi + pad, keys.lo + 8));
  } else {
    const double span = keys.hi - keys.lo;
    const double pad = span > 0 ? span * 0.03 : std::max(0.5, std::fabs(keys.lo) * 0.05);
    xRange = QCPRange(keys.lo - pad, keys.hi + pad);
  }
  plot_->xAxis->setRange(xRange);
  if (left.valid() && !timeline && logY_ && left.lo > 0) {
    // Whole decades below, half a decade of air above.
    const double lower = std::pow(10.0, std::floor(std::log10(left.lo)));
    // At least two decades (see the log10 x axis above).
    const double upper = std::max(left.hi * std::sqrt(10.0), lower * 100);
    fitLeft_ = FitRange{true, lower, upper};
    plot_->yAxis->setRange(lower, upper);
  } else if (left.valid() && !timeline) {
    const QCPRange r = valueRange(left, categorical() && !barTexts_.isEmpty() ? 0.12 : 0.06);
    fitLeft_ = FitRange{true, r.lower, r.upper};
    plot_->yAxis->setRange(r);
  }
  if (right.valid()) {
    const QCPRange r = valueRange(right);
    fitRight_ = FitRange{true, r.lower, r.upper};
    plot_->yAxis2->setRange(r);
  }
  placeMarkerLabels();
}

void ChartView::replotSoon() {
  replotPending_ = true;
  if (!replotTimer_->isActive()) replotTimer_->start();
}

void ChartView::flushPending() {
  replotTimer_->stop();
  if (fitPending_ && !userZoomed_) fitToData();
  fitPending_ = false;
  // A hidden chart (a tab in the background) replots when it is shown again.
  if (!plot_->isVisible()) return;
  replotPending_ = false;
  adaptToSize();
  plot_->replot();
}

void ChartView::adaptToSize() {
  QCPLayoutGrid* grid = plot_->plotLayout();
  const auto relayout = [grid] {
    grid->update(QCPLayoutElement::upPreparation);
    grid->update(QCPLayoutElement::upMargins);
    grid->update(QCPLayoutElement::upLayout);
  };
  if (!userZoomed_) {  // start from the fitted ranges; placeLegend may add headroom again
    if (fitLeft_.valid) plot_->yAxis->setRange(fitLeft_.lower, fitLeft_.upper);
    if (fitRight_.valid) plot_->yAxis2->setRange(fitRight_.lower, fitRight_.upper);
  }
  // Title and footnote wrap rather than run off a narrow chart.
  const double textWidth = plot_->viewport().width() - 24;
  if (titleElement_)
    titleElement_->setText(wrapToWidth(title_, titleElement_->font(), textWidth, QStringLiteral(" ")));
  if (footnoteElement_)
    footnoteElement_->setText(
        wrapToWidth(footnote_, footnoteElement_->font(), textWidth, QStringLiteral(" · ")));
  relayout();
  if (!cellRows_.isEmpty()) {
    const int stride = cellRowStride_;
    labelCellRows();
    if (stride != cellRowStride_) relayout();
  }
  if (categorical()) {
    // Bar labels: level while they fit side by side, slanted when they do not, upright when even
    // slanted ones would collide.
    QCPAxis* x = plot_->xAxis;
    const double spacing = std::fabs(x->coordToPixel(2) - x->coordToPixel(1));
    const QFontMetricsF metrics(x->tickLabelFont());
    double widest = 0;
    for (const QString& label : barLabels_)
      widest = std::max(widest, metrics.horizontalAdvance(displayLabel(label)));
    double rotation = 0;
    if (widest + 10 > spacing) rotation = metrics.height() * 1.6 < spacing ? -45 : -90;
    if (x->tickLabelRotation() != rotation) {
      x->setTickLabelRotation(rotation);
      relayout();
    }
    if (!barTexts_.isEmpty()) {  // all value labels or none
      const QFontMetricsF valueMetrics(barTexts_.first()->font());
      double widestValue = 0;
      for (const QCPItemText* text : barTexts_) {
        widestValue = std::max(widestValue, valueMetrics.horizontalAdvance(text->text()));
      }
      for (QCPItemText* text : barTexts_) text->setVisible(widestValue + 4 <= spacing);
    }
  }
  placeLegend();
  keepBarLabelsInside();
}

void ChartView::keepBarLabelsInside() {
  QCPAxis* y = plot_->yAxis;
  if (userZoomed_ || y->scaleType() != QCPAxis::stLinear || y->rangeReversed()) return;
  double top = -std::numeric_limits<double>::infinity();
  for (const QCPItemText* text : barTexts_)
    if (text->visible() && !text->text().isEmpty()) top = std::max(top, text->position->coords().y());
  if (!std::isfinite(top) || top <= y->range().lower) return;
  // Room for the label above the tallest bar: its height and a little air, in pixels.
  const double need = QFontMetricsF(barTexts_.first()->font()).height() + 6;
  const double height = plot_->axisRect()->height();
  if (height < 3 * need) return;
  const QCPRange r = y->range();
  const double upper = r.lower + (top - r.lower) * height / (height - need);
  if (upper > r.upper) y->setRangeUpper(upper);
}

void ChartView::placeLegend() {
  QCPLegend* legend = plot_->legend;
  if (!legend->visible() || legendBelow_) return;
  const QRectF area = plot_->axisRect()->rect();
  const QSizeF size = legend->minimumOuterSizeHint();
  constexpr double kInset = 12;  // the inset layout's margin, and some air around the box
  if (area.width() < size.width() + 2 * kInset || area.height() < size.height() * 1.5) return;
  const QRectF topRight(area.right() - size.width() - kInset, area.top(), size.width() + kInset,
                        size.height() + kInset);
  const QRectF topLeft(area.left(), area.top(), size.width() + kInset, size.height() + kInset);
  const QRectF bottomRight(topRight.left(), area.bottom() - topRight.height(), topRight.width(),
                           topRight.height());
  const QRectF bottomLeft(area.left(), bottomRight.top(), topLeft.width(), topLeft.height());
  const std::pair<Qt::Alignment, QRectF> corners[] = {{Qt::AlignTop | Qt::AlignRight, topRight},
                                                      {Qt::AlignTop | Qt::AlignLeft, topLeft},
                                                      {Qt::AlignBottom | Qt::AlignRight, bottomRight},
                                                      {Qt::AlignBottom | Qt::AlignLeft, bottomLeft}};
  // What each item's data would lose under the box, and the vertical markers; top right wins ties.
  const QVector<const ChartData*> items = dataItems();
  const auto cost = [&](const QRectF& box) {
    double total = 0;
    for (const ChartData* item : items) total += item->legendCost(box);
    for (int i = 0; i < markerLines_.size(); ++i) {
      const double x = plot_->xAxis->coordToPixel(markers_[i].x);
      if (x >= box.left() && x <= box.right()) total += 2;
      const QCPItemText* label = markerTexts_[i];
      if (!label->visible()) continue;
      const QFontMetricsF metrics(label->font());
      const QSizeF textSize(metrics.horizontalAdvance(label->text()) + 10, metrics.height() + 6);
      const QPointF anchor = label->position->pixelPosition();
      const QRectF textRect(
          label->positionAlignment() & Qt::AlignRight ? anchor.x() - textSize.width() : anchor.x(),
          anchor.y(), textSize.width(), textSize.height());
      if (textRect.intersects(box)) total += 20;
    }
    return total;
  };
  Qt::Alignment best = corners[0].first;
  double bestCost = std::numeric_limits<double>::infinity();
  for (const auto& [alignment, box] : corners) {
    const double c = cost(box);
    if (c < bestCost) {
      bestCost = c;
      best = alignment;
    }
    if (c == 0) break;
  }
  // No free corner: while the axes follow the data, raise the fitted value ranges so the data passes
  // below a legend in the top right (as long as that costs less than half the height).
  const double f = (size.height() + kInset + 4) / area.height();
  if (bestCost > 0 && !userZoomed_ && f < 0.45 && (fitLeft_.valid || fitRight_.valid)) {
    for (const auto& [axis, fit] : {std::pair{plot_->yAxis, fitLeft_}, std::pair{plot_->yAxis2, fitRight_}}) {
      if (!fit.valid) continue;
      if (axis->scaleType() == QCPAxis::stLogarithmic && fit.lower > 0)
        axis->setRange(fit.lower, fit.lower * std::pow(fit.upper / fit.lower, 1 / (1 - f)));
      else
        axis->setRange(fit.lower, (fit.upper - fit.lower * f) / (1 - f));
    }
    best = Qt::AlignTop | Qt::AlignRight;
  }
  plot_->axisRect()->insetLayout()->setInsetAlignment(0, best);
}

void ChartView::applyXAxisMode() {
  QCPAxis* x = plot_->xAxis;
  if (categorical()) {
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    bool longLabel = false;
    for (int i = 0; i < barLabels_.size(); ++i) {
      const QString shown = displayLabel(barLabels_[i]);
      longLabel = longLabel || shown.size() > 6;
      ticker->addTick(i + 1, shown);
    }
    ticker->setSubTickCount(0);
    x->setTicker(ticker);
    x->setScaleType(QCPAxis::stLinear);
    // A first guess; adaptToSize decides from the space the labels actually have.
    x->setTickLabelRotation(barLabels_.size() > 6 || longLabel ? -45 : 0);
    x->setSubTicks(false);
    x->setTickLengthIn(0);  // ticks point out of the plot, not into the bars
    x->setTickLengthOut(4);
    x->grid()->setVisible(false);
  } else if (!cellRows_.isEmpty()) {
    x->setTicker(QSharedPointer<IntegerTicker>::create());
    x->setScaleType(QCPAxis::stLinear);
    x->setNumberFormat(QStringLiteral("f"));
    x->setNumberPrecision(0);
    x->setTickLabelRotation(0);
    x->setSubTicks(true);
    x->setTickLengthIn(4);
    x->setTickLengthOut(0);
    x->grid()->setVisible(true);
  } else if (logX_) {
    auto ticker = QSharedPointer<QCPAxisTickerLog>::create();
    ticker->setLogBase(logXBase_);
    ticker->setSubTickCount(logXBase_ == 10 ? 8 : 0);
    ticker->setTickCount(12);
    x->setTicker(ticker);
    x->setScaleType(QCPAxis::stLogarithmic);
    x->setNumberFormat(QStringLiteral("g"));
    x->setNumberPrecision(9);
    x->setTickLabelRotation(0);
    x->setSubTicks(logXBase_ == 10);
    x->setTickLengthIn(4);
    x->setTickLengthOut(0);
    x->grid()->setVisible(true);
  } else {
    if (integerX_)
      x->setTicker(QSharedPointer<IntegerTicker>::create());
    else
      x->setTicker(QSharedPointer<QCPAxisTicker>::create());
    x->setScaleType(QCPAxis::stLinear);
    x->setNumberFormat(QStringLiteral("gb"));
    x->setNumberPrecision(6);
    x->setTickLabelRotation(0);
    x->setSubTicks(true);
    x->setTickLengthIn(4);
    x->setTickLengthOut(0);
    x->grid()->setVisible(true);
  }
}

void ChartView::updateLegendVisibility() { plot_->legend->setVisible(plot_->legend->itemCount() > 0); }

// ---------------------------------------------------------------------------------------------
// Theme

void ChartView::styleGraph(int series) {
  const SeriesStyle style = seriesStyles_[series];
  const bool textColored =
      style == SeriesStyle::Ticks || style == SeriesStyle::Bound || style == SeriesStyle::DashedBound;
  const double w = presenter_ ? 1.75 : 1.0;  // presenter mode: wider lines and markers
  const ThemeColors c = colorsFor(theme_, presenter_);
  const QColor color = textColored ? c.text : seriesColor(series, theme_);
  QPen pen(color, (style == SeriesStyle::Ticks ? 3.0 : 2.0) * w);
  pen.setJoinStyle(Qt::RoundJoin);
  pen.setCapStyle(style == SeriesStyle::Ticks ? Qt::FlatCap : Qt::RoundCap);
  auto* graph = static_cast<SeriesGraph*>(graphs_[series]);
  graph->setPen(pen);
  graph->ticks = style == SeriesStyle::Ticks;
  graph->setBrush(Qt::NoBrush);
  graph->setLineStyle(QCPGraph::lsLine);
  graph->setScatterStyle(
      QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(color, 1.5 * w), QBrush(color), 6 * w));
  switch (style) {
    case SeriesStyle::Line:
    case SeriesStyle::Ticks:  // drawn by SeriesGraph
      break;
    case SeriesStyle::Points:
      graph->setLineStyle(QCPGraph::lsNone);
      graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, QPen(color.darker(120), 1.5 * w),
                                             QBrush(color), 11 * w));
      break;
    case SeriesStyle::Bound:
    case SeriesStyle::DashedBound:
      graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
      graph->setPen(
          QPen(withAlpha(color, 170), 2.5 * w, style == SeriesStyle::Bound ? Qt::SolidLine : Qt::DashLine));
      break;
    case SeriesStyle::Steps:
      graph->setLineStyle(QCPGraph::lsStepCenter);
      graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
      graph->setPen(QPen(color, 1.5 * w));
      graph->setBrush(QBrush(withAlpha(color, theme_ == ChartTheme::Dark ? 110 : 80)));
      break;
  }
}

void ChartView::applyTheme() {
  const ThemeColors c = colorsFor(theme_, presenter_);
  // Presenter mode: every font half again as large, axes and grid lines wider.
  const double k = presenter_ ? 1.5 : 1.0, w = presenter_ ? 1.5 : 1.0;
  auto font = [k](double points, bool bold = false) { return chartFont(points * k, bold); };
  plot_->setBackground(QBrush(c.background));
  plot_->axisRect()->setBackground(Qt::NoBrush);

  const QFont tickFont = font(10.5);
  const QFont labelFont = font(11.5);
  for (QCPAxis* axis : plot_->axisRect()->axes()) {
    axis->setBasePen(QPen(c.axis, w));
    axis->setTickPen(QPen(c.axis, w));
    axis->setSubTickPen(QPen(c.axis, w));
    axis->setTickLabelColor(c.text);
    axis->setLabelColor(c.text);
    axis->setTickLabelFont(tickFont);
    axis->setLabelFont(labelFont);
    axis->grid()->setPen(QPen(c.grid, w, Qt::SolidLine));
    axis->grid()->setSubGridPen(QPen(c.grid, w, Qt::DotLine));
    axis->grid()->setZeroLinePen(QPen(c.zeroLine, w, Qt::SolidLine));
  }

  QCPLegend* legend = plot_->legend;
  legend->setBrush(QBrush(withAlpha(c.background, 215)));
  legend->setBorderPen(QPen(withAlpha(c.muted, 140), 1));
  legend->setTextColor(c.text);
  legend->setFont(font(10.5));
  legend->setIconBorderPen(Qt::NoPen);
  legend->setIconTextPadding(12);  // the line icon overshoots its box by 5 px where nothing clips it (SVG)
  legend->setMargins(QMargins(8, 5, 10, 5));
  for (int i = 0; i < legend->itemCount(); ++i) {
    if (auto* item = legend->item(i)) {
      item->setTextColor(c.text);
      item->setFont(legend->font());
    }
  }

  if (titleElement_) {
    titleElement_->setTextColor(c.text);
    titleElement_->setFont(font(14.5, true));
  }
  if (footnoteElement_) {
    footnoteElement_->setTextColor(c.muted);
    footnoteElement_->setFont(font(10));
  }

  readout_->setColor(c.text);
  readout_->setFont(font(10));
  readout_->setBrush(QBrush(withAlpha(c.background, 240)));
  readout_->setPen(QPen(c.muted, 1));

  for (QCPItemStraightLine* line : markerLines_) line->setPen(QPen(c.muted, 1.5 * w, Qt::DashLine));
  for (QCPItemText* text : markerTexts_) {
    text->setColor(c.text);
    text->setFont(font(10));
    text->setBrush(QBrush(withAlpha(c.background, 200)));
    text->setPen(Qt::NoPen);
  }

  for (QCPItemText* text : barTexts_) {
    text->setColor(c.text);
    text->setFont(font(9.5));
  }
  for (int i = 0; i < graphs_.size(); ++i) styleGraph(i);
  QVector<CellPlottable*> cellLayers = cellKeys_;
  if (cells_) cellLayers.append(cells_);
  for (CellPlottable* layer : cellLayers) {
    layer->background = c.background;
    layer->text = c.text;
    layer->muted = c.muted;
  }
  if (legendBelow_) {
    legend->setBrush(Qt::NoBrush);
    legend->setBorderPen(Qt::NoPen);
  }
  if (bars_) {
    const QColor color = seriesColor(theme_ == ChartTheme::Dark ? 5 : 0, theme_);
    bars_->setPen(QPen(theme_ == ChartTheme::Dark ? color.lighter(120) : color.darker(130), 1));
    bars_->setBrush(QBrush(withAlpha(color, theme_ == ChartTheme::Dark ? 200 : 215)));
  }
  for (int k = 0; k < stack_->parts.size(); ++k) {
    const QColor color = stack_->sets[k].color.isValid() ? stack_->sets[k].color : seriesColor(k, theme_);
    stack_->parts[k]->setPen(QPen(theme_ == ChartTheme::Dark ? color.lighter(120) : color.darker(130), 1));
    stack_->parts[k]->setBrush(QBrush(withAlpha(color, theme_ == ChartTheme::Dark ? 200 : 215)));
  }
}

}  // namespace servelab::ui
