// ChartView: QCustomPlot with live append, a hover readout, themes and exports. See chart_view.h.
// This file: construction, text, series, bars, markers and timeline cells; chart_layout.cpp fits and
// themes, chart_readout.cpp answers the pointer, chart_export.cpp writes files.
#include "chart_view.h"

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

namespace servelab::ui {

using namespace chart;

ChartView::ChartView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(0);

  auto* toolbar = new QHBoxLayout;
  toolbar->setContentsMargins(4, 2, 4, 0);
  toolbar->setSpacing(2);
  toolbar->addStretch(1);
  auto addButton = [&](const QString& text, const char* name, const QString& tip) {
    auto* button = new QToolButton(this);
    button->setText(text);
    button->setObjectName(QLatin1String(name));
    button->setToolTip(tip);
    button->setAutoRaise(true);
    button->setFocusPolicy(Qt::NoFocus);
    QFont f = button->font();
    if (f.pointSizeF() > 0) f.setPointSizeF(f.pointSizeF() * 0.9);
    button->setFont(f);
    toolbar->addWidget(button);
    return button;
  };
  connect(addButton(tr("Export…"), "chartExportButton", tr("Save the chart as PNG, SVG, PDF or CSV")),
          &QToolButton::clicked, this, &ChartView::exportWithDialog);
  connect(addButton(tr("Copy"), "chartCopyButton", tr("Copy the chart image to the clipboard")),
          &QToolButton::clicked, this, &ChartView::copyImageToClipboard);
  connect(addButton(tr("Fit"), "chartFitButton", tr("Fit the axes to the data (or double-click the chart)")),
          &QToolButton::clicked, this, &ChartView::rescale);
  layout->addLayout(toolbar);

  plot_ = new QCustomPlot(this);
  plot_->setObjectName(QStringLiteral("chartPlot"));
  stack_ = std::make_unique<StackedBars>(plot_->xAxis, plot_->yAxis);
  plot_->setMinimumSize(240, 160);
  layout->addWidget(plot_, 1);

  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->setNoAntialiasingOnDrag(true);
  QCPAxisRect* rect = plot_->axisRect();
  rect->setRangeDrag(Qt::Horizontal | Qt::Vertical);
  rect->setRangeZoom(Qt::Horizontal | Qt::Vertical);
  rect->setRangeDragAxes(QList<QCPAxis*>{plot_->xAxis}, QList<QCPAxis*>{plot_->yAxis, plot_->yAxis2});
  rect->setRangeZoomAxes(QList<QCPAxis*>{plot_->xAxis}, QList<QCPAxis*>{plot_->yAxis, plot_->yAxis2});
  rect->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  plot_->legend->setVisible(false);
  plot_->legend->setRowSpacing(0);
  plot_->yAxis2->setVisible(false);
  plot_->xAxis2->setVisible(false);
  for (QCPAxis* axis : rect->axes()) {
    axis->setPadding(6);
    axis->setLabelPadding(6);
    axis->setTickLengthIn(4);
    axis->setTickLengthOut(0);
    axis->setSubTickLengthIn(2);
    axis->setSubTickLengthOut(0);
  }
  plot_->plotLayout()->setRowSpacing(0);

  // The readout lives on the buffered overlay layer, so hovering redraws only that layer.
  if (QCPLayer* overlay = plot_->layer(QStringLiteral("overlay"))) overlay->setMode(QCPLayer::lmBuffered);
  readout_ = new QCPItemText(plot_);
  readout_->setLayer(QStringLiteral("overlay"));
  readout_->setClipToAxisRect(false);
  readout_->position->setType(QCPItemPosition::ptAbsolute);
  readout_->setPadding(QMargins(7, 4, 7, 4));
  readout_->setTextAlignment(Qt::AlignLeft);
  readout_->setVisible(false);

  svgClipBegin_ = new SvgClipMarker(plot_, QStringLiteral("servelab-svg-clip-begin"));
  svgClipEnd_ = new SvgClipMarker(plot_, QStringLiteral("servelab-svg-clip-end"));

  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, &ChartView::showContextMenu);
  connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this,
          [this](const QCPRange&) { placeMarkerLabels(); });
  plot_->setMouseTracking(true);
  plot_->installEventFilter(this);

  replotTimer_ = new QTimer(this);
  replotTimer_->setSingleShot(true);
  replotTimer_->setInterval(kReplotIntervalMs);
  connect(replotTimer_, &QTimer::timeout, this, &ChartView::flushPending);

  applyXAxisMode();
  applyTheme();
}

ChartView::~ChartView() {
  replotTimer_->stop();
  plot_->removeEventFilter(this);  // the plot outlives this part of the object by a little
}

// ---------------------------------------------------------------------------------------------
// Text

void ChartView::setTitle(const QString& title) {
  title_ = title;
  QCPLayoutGrid* grid = plot_->plotLayout();
  if (title.isEmpty()) {
    if (titleElement_) {
      grid->remove(titleElement_);
      grid->simplify();
      titleElement_ = nullptr;
    }
  } else {
    if (!titleElement_) {
      titleElement_ = new QCPTextElement(plot_);
      titleElement_->setMargins(QMargins(10, 10, 10, 2));
      titleElement_->setLayer(QStringLiteral("axes"));
      grid->insertRow(0);
      grid->addElement(0, 0, titleElement_);
    }
    titleElement_->setText(title);
  }
  applyTheme();
  replotSoon();
}

QString ChartView::title() const { return title_; }

void ChartView::setFootnote(const QString& footnote) {
  footnote_ = footnote;
  QCPLayoutGrid* grid = plot_->plotLayout();
  if (footnote.isEmpty()) {
    if (footnoteElement_) {
      grid->remove(footnoteElement_);
      grid->simplify();
      footnoteElement_ = nullptr;
    }
  } else {
    if (!footnoteElement_) {
      footnoteElement_ = new QCPTextElement(plot_);
      footnoteElement_->setMargins(QMargins(10, 0, 10, 6));
      footnoteElement_->setLayer(QStringLiteral("axes"));
      footnoteElement_->setTextFlags(Qt::AlignRight | Qt::AlignVCenter);
      grid->addElement(grid->rowCount(), 0, footnoteElement_);
    }
    footnoteElement_->setText(footnote);
  }
  applyTheme();
  replotSoon();
}

QString ChartView::footnote() const { return footnote_; }

void ChartView::setAxisLabels(const QString& x, const QString& y, const QString& y2) {
  xLabel_ = x;
  yLabel_ = y;
  y2Label_ = y2;
  plot_->xAxis->setLabel(x);
  plot_->yAxis->setLabel(y.isEmpty() && categorical() ? barValueName_ : y);
  plot_->yAxis2->setLabel(y2);
  const bool right = !y2.isEmpty() || seriesAxis_.contains(static_cast<int>(Axis::Right));
  plot_->yAxis2->setVisible(right);
  plot_->yAxis2->setTickLabels(right);
  replotSoon();
}

void ChartView::setLogXBase2(bool on) {
  if (logX_ == on && logXBase_ == 2) return;
  logX_ = on;
  logXBase_ = 2;
  applyXAxisMode();
  fitPending_ = true;
  if (!userZoomed_) fitToData();
  replotSoon();
}

void ChartView::setLogXBase10(bool on) {
  if (logX_ == on && logXBase_ == 10) return;
  logX_ = on;
  logXBase_ = 10;
  applyXAxisMode();
  fitPending_ = true;
  if (!userZoomed_) fitToData();
  replotSoon();
}

void ChartView::setIntegerTicks(bool x, bool y) {
  integerX_ = x;
  integerY_ = y;
  applyXAxisMode();
  applyYAxisMode();
  replotSoon();
}

void ChartView::setLogY(bool on) {
  if (logY_ == on) return;
  logY_ = on;
  applyYAxisMode();
  fitPending_ = true;
  if (!userZoomed_) fitToData();
  replotSoon();
}

void ChartView::setTheme(ChartTheme theme) {
  theme_ = theme;
  applyTheme();
  replotSoon();
}

ChartTheme ChartView::theme() const { return theme_; }

QString ChartView::footnoteAsDrawn() const { return footnoteElement_ ? footnoteElement_->text() : QString(); }

QFont ChartView::tickLabelFont() const { return plot_->xAxis->tickLabelFont(); }

QColor ChartView::tickLabelColor() const { return plot_->xAxis->tickLabelColor(); }

void ChartView::setPresenter(bool on) {
  presenter_ = on;
  applyTheme();
  replotSoon();
}

// ---------------------------------------------------------------------------------------------
// Series

int ChartView::addSeries(const QString& name, Axis axis) {
  QCPAxis* valueAxis = axis == Axis::Right ? plot_->yAxis2 : plot_->yAxis;
  if (axis == Axis::Right) {
    plot_->yAxis2->setVisible(true);
    plot_->yAxis2->setTickLabels(true);
  }
  QCPGraph* graph = new SeriesGraph(plot_->xAxis, valueAxis, name, axis == Axis::Right);
  graph->setName(axis == Axis::Right ? tr("%1 (right axis)").arg(name) : name);
  graph->setLineStyle(QCPGraph::lsLine);
  graphs_.append(graph);
  seriesNames_.append(name);
  seriesAxis_.append(static_cast<int>(axis));
  seriesStyles_.append(SeriesStyle::Line);
  const int index = static_cast<int>(graphs_.size()) - 1;
  styleGraph(index);
  updateLegendVisibility();
  replotSoon();
  return index;
}

void ChartView::setSeriesStyle(int series, SeriesStyle style) {
  if (!validSeries(series, "setSeriesStyle")) return;
  seriesStyles_[series] = style;
  styleGraph(series);
  replotSoon();
}

ChartView::SeriesStyle ChartView::seriesStyle(int series) const {
  return series >= 0 && series < seriesCount() ? seriesStyles_[series] : SeriesStyle::Line;
}

int ChartView::seriesIndex(const QString& name) const { return static_cast<int>(seriesNames_.indexOf(name)); }

int ChartView::seriesCount() const { return static_cast<int>(graphs_.size()); }

QString ChartView::seriesName(int series) const {
  return series >= 0 && series < seriesCount() ? seriesNames_[series] : QString();
}

QVector<QPointF> ChartView::seriesPoints(int series) const {
  QVector<QPointF> points;
  if (!validSeries(series, "seriesPoints")) return points;
  const auto data = graphs_[series]->data();
  points.reserve(data->size());
  for (auto it = data->constBegin(); it != data->constEnd(); ++it) points.append(QPointF(it->key, it->value));
  return points;
}

void ChartView::append(int series, double x, double y) {
  if (!validSeries(series, "append")) return;
  if (!std::isfinite(x) || !std::isfinite(y)) return;
  graphs_[series]->addData(x, y);
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
}

void ChartView::setSeriesData(int series, const QVector<double>& x, const QVector<double>& y) {
  if (!validSeries(series, "setSeriesData")) return;
  if (x.size() != y.size()) {
    qWarning("ChartView::setSeriesData: %lld x values but %lld y values; using the shorter",
             static_cast<long long>(x.size()), static_cast<long long>(y.size()));
  }
  const qsizetype n = std::min(x.size(), y.size());
  QVector<double> keys, values;
  keys.reserve(n);
  values.reserve(n);
  for (qsizetype i = 0; i < n; ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    keys.append(x[i]);
    values.append(y[i]);
  }
  graphs_[series]->setData(keys, values);
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
}

void ChartView::clearSeries(int series) {
  if (!validSeries(series, "clearSeries")) return;
  graphs_[series]->data()->clear();
  static_cast<SeriesGraph*>(graphs_[series])->pointLabels.clear();
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
}

void ChartView::setPointLabels(int series, const QStringList& labels) {
  if (!validSeries(series, "setPointLabels")) return;
  static_cast<SeriesGraph*>(graphs_[series])->pointLabels = labels;
}

bool ChartView::validSeries(int series, const char* where) const {
  if (series >= 0 && series < seriesCount()) return true;
  qWarning("ChartView::%s: no series %d (the chart has %d)", where, series, seriesCount());
  return false;
}

// ---------------------------------------------------------------------------------------------
// Bars and markers

void ChartView::setBars(const QStringList& labels, const QVector<double>& values, const QString& valueName) {
  if (labels.size() != values.size()) {
    qWarning("ChartView::setBars: %lld labels but %lld values; using the shorter",
             static_cast<long long>(labels.size()), static_cast<long long>(values.size()));
  }
  const qsizetype n = std::min(labels.size(), values.size());
  removeBars();
  barLabels_ = labels.mid(0, n);
  barValueName_ = valueName;
  if (n > 0) {
    bars_ = new CategoryBars(plot_->xAxis, plot_->yAxis, barLabels_, valueName);
    bars_->setWidth(0.7);
    bars_->setName(valueName.isEmpty() ? QStringLiteral("value") : valueName);
    bars_->removeFromLegend();  // the y axis says what the bars are
    QVector<double> keys, shown;
    for (qsizetype i = 0; i < n; ++i) {
      if (!std::isfinite(values[i])) continue;  // an empty category
      keys.append(static_cast<double>(i + 1));
      shown.append(values[i]);
    }
    bars_->setData(keys, shown, true);
    raiseSeries();
    // Value labels above the bars (hidden by adaptToSize when the bars are too narrow for them).
    for (qsizetype i = 0; i < n && n <= 40; ++i) {
      if (!std::isfinite(values[i])) continue;
      auto* text = new QCPItemText(plot_);
      text->setLayer(QStringLiteral("main"));
      text->position->setAxes(plot_->xAxis, plot_->yAxis);
      text->position->setCoords(static_cast<double>(i + 1), values[i]);
      text->setPositionAlignment(Qt::AlignHCenter | (values[i] < 0 ? Qt::AlignTop : Qt::AlignBottom));
      text->setPadding(QMargins(1, 1, 1, 3));
      text->setText(formatNumber(values[i]));
      barTexts_.append(text);
    }
  }
  plot_->yAxis->setLabel(yLabel_.isEmpty() && bars_ ? barValueName_ : yLabel_);
  applyXAxisMode();
  applyTheme();
  updateLegendVisibility();
  userZoomed_ = false;
  fitToData();
  fitPending_ = false;
  replotSoon();
}

void ChartView::raiseSeries() {
  // Moving to another layer and back puts a series last on the data layer, above the new bars.
  for (QCPGraph* graph : graphs_) {
    graph->setLayer(QStringLiteral("grid"));
    graph->setLayer(QStringLiteral("main"));
  }
}

void ChartView::removeBars() {
  if (bars_) {
    plot_->removePlottable(bars_);
    bars_ = nullptr;
  }
  for (QCPBars* stack : stack_->parts) plot_->removePlottable(stack);
  stack_->parts.clear();
  stack_->sets.clear();
  stack_->labels.clear();
  stackAnnotations_.clear();
  for (QCPItemText* text : barTexts_) plot_->removeItem(text);
  barTexts_.clear();
  barLabels_.clear();
  barValueName_.clear();
}

void ChartView::setStackedBars(const QStringList& labels, const QVector<BarSet>& sets,
                               const QString& valueName, const QStringList& annotations) {
  removeBars();
  barLabels_ = labels;
  barValueName_ = valueName;
  stack_->labels = labels;
  stack_->valueName = valueName;
  stackAnnotations_ = annotations.mid(0, labels.size());
  const qsizetype n = labels.size();
  QCPBars* below = nullptr;
  for (const BarSet& set : sets) {
    if (set.values.size() != n) {
      qWarning("ChartView::setStackedBars: set \"%s\" has %lld values for %lld categories",
               qPrintable(set.name), static_cast<long long>(set.values.size()), static_cast<long long>(n));
    }
    BarSet kept = set;
    kept.values.resize(n, std::numeric_limits<double>::quiet_NaN());
    auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
    bars->setWidth(0.7);
    bars->setName(set.name);
    QVector<double> keys, values;
    for (qsizetype i = 0; i < n; ++i) {
      if (!std::isfinite(kept.values[i])) continue;
      keys.append(static_cast<double>(i + 1));
      values.append(kept.values[i]);
    }
    bars->setData(keys, values, true);
    if (below) bars->moveAbove(below);
    below = bars;
    stack_->parts.append(bars);
    stack_->sets.append(kept);
  }
  // Annotations above the stacks (hidden by adaptToSize when the bars are too narrow for them).
  for (qsizetype i = 0; i < stackAnnotations_.size() && !stack_->parts.isEmpty(); ++i) {
    auto* text = new QCPItemText(plot_);
    text->setLayer(QStringLiteral("main"));
    text->position->setAxes(plot_->xAxis, plot_->yAxis);
    text->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
    text->setPadding(QMargins(1, 1, 1, 3));
    text->setText(stackAnnotations_[i]);
    barTexts_.append(text);
  }
  placeStackAnnotations();
  // The parts of the bars first in the legend, then the series drawn over them.
  for (QCPGraph* graph : graphs_)
    if (graph->removeFromLegend()) graph->addToLegend();
  raiseSeries();
  plot_->yAxis->setLabel(yLabel_.isEmpty() ? barValueName_ : yLabel_);
  applyXAxisMode();
  applyTheme();
  updateLegendVisibility();
  userZoomed_ = false;
  fitToData();
  fitPending_ = false;
  replotSoon();
}

void ChartView::placeStackAnnotations() {
  if (stack_->parts.isEmpty()) return;
  for (qsizetype i = 0; i < barTexts_.size(); ++i) {
    barTexts_[i]->position->setCoords(static_cast<double>(i + 1), stack_->positiveTotal(i));
    barTexts_[i]->setVisible(!barTexts_[i]->text().isEmpty());
  }
}

int ChartView::barSetCount() const { return static_cast<int>(stack_->sets.size()); }

QString ChartView::barSetName(int set) const {
  return set >= 0 && set < barSetCount() ? stack_->sets[set].name : QString();
}

QVector<double> ChartView::barSetValues(int set) const {
  return set >= 0 && set < barSetCount() ? stack_->sets[set].values : QVector<double>();
}

QStringList ChartView::barAnnotations() const { return stackAnnotations_; }

QStringList ChartView::barLabels() const { return barLabels_; }

QVector<double> ChartView::barValues() const {
  QVector<double> values;
  if (!bars_) return values;
  values.fill(std::numeric_limits<double>::quiet_NaN(), barLabels_.size());
  const auto data = bars_->data();
  for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
    const qsizetype i = std::lround(it->key) - 1;
    if (i >= 0 && i < values.size()) values[i] = it->value;
  }
  return values;
}

void ChartView::addVerticalMarker(double x, const QString& label) {
  if (!std::isfinite(x)) return;
  markers_.append(Marker{x, label});
  auto* line = new QCPItemStraightLine(plot_);
  line->setLayer(QStringLiteral("main"));
  line->point1->setAxes(plot_->xAxis, plot_->yAxis);
  line->point2->setAxes(plot_->xAxis, plot_->yAxis);
  line->point1->setCoords(x, 0);
  line->point2->setCoords(x, 1);
  markerLines_.append(line);

  auto* text = new QCPItemText(plot_);
  text->setLayer(QStringLiteral("main"));
  text->position->setAxes(plot_->xAxis, plot_->yAxis);
  text->position->setAxisRect(plot_->axisRect());
  text->position->setTypeX(QCPItemPosition::ptPlotCoords);
  text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  text->position->setCoords(x, 0.0);
  text->setPadding(QMargins(5, 3, 5, 3));
  text->setText(label);
  text->setVisible(!label.isEmpty());
  markerTexts_.append(text);

  applyTheme();
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
}

void ChartView::placeMarkerLabels() {
  const QCPRange range = plot_->xAxis->range();
  for (int i = 0; i < markerTexts_.size(); ++i) {
    const double x = markers_[i].x;
    double fraction = 0;
    if (plot_->xAxis->scaleType() == QCPAxis::stLogarithmic && x > 0 && range.lower > 0) {
      fraction = std::log(x / range.lower) / std::log(range.upper / range.lower);
    } else if (range.size() > 0) {
      fraction = (x - range.lower) / range.size();
    }
    // Right of the line, unless that would run off the right edge; stacked when markers are many.
    const Qt::Alignment h = fraction > 0.7 ? Qt::AlignRight : Qt::AlignLeft;
    markerTexts_[i]->setPositionAlignment(h | Qt::AlignTop);
    markerTexts_[i]->position->setCoords(x, 0.01 + 0.07 * (i % 4));
  }
}

// ---------------------------------------------------------------------------------------------
// Timeline cells

void ChartView::setCellRows(const QStringList& labels) {
  const bool wasTimeline = !cellRows_.isEmpty();
  cellRows_ = labels;
  cellRowStride_ = 1;
  if (!labels.isEmpty() && !cells_) {
    cells_ = new CellPlottable(plot_->xAxis, plot_->yAxis);
    cells_->setName(QStringLiteral("cells"));
    cells_->removeFromLegend();
  }
  if (wasTimeline != !labels.isEmpty()) {
    applyXAxisMode();
    placeLegendBelow(!labels.isEmpty() || legendBelowWanted_);
  }
  applyYAxisMode();
  applyTheme();
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
}

QStringList ChartView::cellRows() const { return cellRows_; }

void ChartView::setCells(const QVector<Cell>& cells) {
  if (cellRows_.isEmpty()) {
    qWarning("ChartView::setCells: call setCellRows first");
    return;
  }
  cells_->cells = cells;
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
}

QVector<ChartView::Cell> ChartView::cells() const { return cells_ ? cells_->cells : QVector<Cell>(); }

void ChartView::setCellKeys(const QVector<CellKey>& keys) {
  for (CellPlottable* key : cellKeys_) plot_->removePlottable(key);
  cellKeys_.clear();
  for (const CellKey& k : keys) {
    auto* key = new CellPlottable(plot_->xAxis, plot_->yAxis);
    key->key = k;
    key->setName(k.name);
    cellKeys_.append(key);
  }
  applyTheme();
  updateLegendVisibility();
  replotSoon();
}

void ChartView::setLegendBelow(bool on) {
  legendBelowWanted_ = on;
  placeLegendBelow(on || !cellRows_.isEmpty());
  replotSoon();
}

void ChartView::setLegendColumns(int columns) {
  legendColumns_ = std::max(0, columns);
  if (legendBelow_) {
    plot_->legend->setWrap(legendColumns_ > 0 ? legendColumns_ : cellRows_.isEmpty() ? 2 : 4);
    // The wrap applies to entries added later: lay out those already there again.
    plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
    replotSoon();
  }
}

void ChartView::placeLegendBelow(bool below) {
  if (below == legendBelow_) return;
  legendBelow_ = below;
  QCPLegend* legend = plot_->legend;
  QCPLayoutGrid* grid = plot_->plotLayout();
  if (below) {
    plot_->axisRect()->insetLayout()->take(legend);
    int axisRow = 0;
    for (int r = 0; r < grid->rowCount(); ++r)
      if (grid->element(r, 0) == plot_->axisRect()) axisRow = r;
    grid->insertRow(axisRow + 1);
    grid->addElement(axisRow + 1, 0, legend);
    grid->setRowStretchFactor(axisRow + 1, 0.001);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    legend->setWrap(legendColumns_ > 0    ? legendColumns_
                    : cellRows_.isEmpty() ? 2
                                          : 4);  // a timeline's keys are short
    legend->setMargins(QMargins(8, 2, 8, 2));
  } else {
    grid->take(legend);
    grid->simplify();
    legend->setFillOrder(QCPLayoutGrid::foRowsFirst);
    legend->setWrap(0);
    plot_->axisRect()->insetLayout()->addElement(legend, Qt::AlignTop | Qt::AlignRight);
  }
  applyTheme();
}

void ChartView::applyYAxisMode() {
  QCPAxis* y = plot_->yAxis;
  if (!cellRows_.isEmpty()) {
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int i = 0; i < cellRows_.size(); i += cellRowStride_) ticker->addTick(i, cellRows_[i]);
    ticker->setSubTickCount(0);
    y->setTicker(ticker);
    y->setRangeReversed(true);
    y->setSubTicks(false);
    y->setTickLengthIn(0);
    y->setTickLengthOut(3);
    y->grid()->setVisible(false);
  } else {
    if (logY_) {
      auto ticker = QSharedPointer<QCPAxisTickerLog>::create();
      ticker->setLogBase(10);
      ticker->setSubTickCount(8);
      y->setTicker(ticker);
      y->setScaleType(QCPAxis::stLogarithmic);
      y->setNumberFormat(QStringLiteral("eb"));
      y->setNumberPrecision(0);
    } else {
      if (integerY_)
        y->setTicker(QSharedPointer<IntegerTicker>::create());
      else
        y->setTicker(QSharedPointer<QCPAxisTicker>::create());
      y->setScaleType(QCPAxis::stLinear);
      y->setNumberFormat(QStringLiteral("gbd"));
      y->setNumberPrecision(6);
    }
    y->setRangeReversed(false);
    y->setSubTicks(true);
    y->setTickLengthIn(4);
    y->setTickLengthOut(0);
    y->grid()->setVisible(true);
  }
}

void ChartView::labelCellRows() {
  if (cellRows_.isEmpty()) return;
  const double spacing = std::fabs(plot_->yAxis->coordToPixel(1) - plot_->yAxis->coordToPixel(0));
  const double needed = QFontMetricsF(plot_->yAxis->tickLabelFont()).height() + 2;
  int stride = 1;
  for (int s : {1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100}) {
    stride = s;
    if (spacing * s >= needed) break;
  }
  if (stride == cellRowStride_) return;
  cellRowStride_ = stride;
  applyYAxisMode();
}

}  // namespace servelab::ui
