#include "roofline_chart.h"

#include <QDir>
#include <QStandardPaths>
#include <algorithm>

namespace servelab::ui {

namespace {
constexpr double kGiga = 1e9;
}  // namespace

QString machineLimitsCachePath() {
  return QDir(QStandardPaths::writableLocation(QStandardPaths::CacheLocation))
      .filePath(QStringLiteral("machine_limits.json"));
}

RooflineLimits::RooflineLimits() : cache_(machineLimitsCachePath().toStdString()) {}

void RooflineLimits::measure(const servelab::Engine& engine) noexcept {
  try {
    limits_ = servelab::machine_limits(engine, cache_, false);
  } catch (const std::exception&) {
    limits_ = {};
  }
}

RooflineChart::RooflineChart(QWidget* parent) : ChartView(parent) {
  setTitle(tr("Roofline: arithmetic intensity against achieved FLOP/s"));
  setAxisLabels(tr("arithmetic intensity (FLOP per byte moved)"), tr("achieved GFLOP/s"));
  setLogXBase10(true);
  setLogY(true);
  // Under the plot: the roof and the steps leave no corner free, least of all in a narrow page.
  setLegendBelow(true);
}

QString RooflineChart::roofSeriesName() { return tr("this machine's roof (fp32)"); }
QString RooflineChart::int8RoofSeriesName() { return tr("int8 roof (jit-int8)"); }

QString RooflineChart::kindSeries(const servelab::RooflinePoint& point) {
  const QString kind = QString::fromStdString(point.kind);
  return quantShown(point) ? QStringLiteral("%1 · %2").arg(kind, QString::fromStdString(point.quant)) : kind;
}

bool RooflineChart::quantShown(const servelab::RooflinePoint& point) {
  return !point.quant.empty() && point.quant != "none" && point.quant != "stored";
}

int RooflineChart::seriesNamed(const QString& name) {
  int i = seriesIndex(name);
  if (i < 0) {
    i = addSeries(name);
    setSeriesStyle(i, SeriesStyle::Points);
  }
  return i;
}

void RooflineChart::startRun() {
  clearAll();
  machine_ = {};
  setSeriesStyle(addSeries(roofSeriesName()), SeriesStyle::Bound);
}

void RooflineChart::appendLive(const QString& series, double intensity, double flopPerSecond) {
  append(seriesNamed(series), intensity, flopPerSecond / kGiga);
}

void RooflineChart::drawRoof(double x0, double x1) {
  const servelab::MachineLimits& m = machine_;
  if (m.read_gb_s <= 0 || m.fp32_gflop_s <= 0) return;
  const int roof = seriesIndex(roofSeriesName());
  const double ridge = m.ridge();
  setSeriesData(roof, {x0, ridge, x1}, {m.read_gb_s * x0, m.fp32_gflop_s, m.fp32_gflop_s});
  setPointLabels(roof, {tr("bandwidth slope: %1 GB/s × intensity").arg(m.read_gb_s, 0, 'f', 1),
                        tr("ridge point: %1 FLOP/byte").arg(ridge, 0, 'f', 1),
                        tr("compute roof: %1 GFLOP/s fp32").arg(m.fp32_gflop_s, 0, 'f', 1)});
  addVerticalMarker(ridge, tr("ridge %1 FLOP/B").arg(ridge, 0, 'g', 3));
}

void RooflineChart::drawInt8Roof(double x0, double x1) {
  const servelab::MachineLimits& m = machine_;
  if (m.int8_gop_s <= 0 || m.read_gb_s <= 0) return;
  const int int8 = addSeries(int8RoofSeriesName());
  setSeriesStyle(int8, SeriesStyle::DashedBound);
  const double ridge = m.int8_gop_s / m.read_gb_s;
  setSeriesData(int8, {x0, ridge, std::max(x1, ridge * 4)}, {m.read_gb_s * x0, m.int8_gop_s, m.int8_gop_s});
  setPointLabels(int8, {QString(), tr("int8 ridge point: %1 OP/byte").arg(ridge, 0, 'f', 1),
                        tr("int8 roof: %1 GOP/s (%2)")
                            .arg(m.int8_gop_s, 0, 'f', 1)
                            .arg(QString::fromStdString(m.int8_kernel))});
}

void RooflineChart::showSteps(const servelab::MachineLimits& m,
                              const std::vector<servelab::RooflinePoint>& points, const SeriesOf& seriesOf) {
  clearAll();
  machine_ = m;
  setSeriesStyle(addSeries(roofSeriesName()), SeriesStyle::Bound);
  std::vector<servelab::RooflinePoint> shown;
  for (const servelab::RooflinePoint& pt : points)
    if (pt.flops > 0 && pt.bytes > 0 && pt.ms > 0) shown.push_back(pt);
  double lo = m.ridge() > 0 ? m.ridge() : (shown.empty() ? 1 : shown.front().intensity()), hi = lo;
  for (const servelab::RooflinePoint& pt : shown) {
    lo = std::min(lo, pt.intensity());
    hi = std::max(hi, pt.intensity());
  }
  const double x0 = lo / 4, x1 = hi * 4;  // the ridge and every step, with room around
  drawRoof(x0, x1);
  QStringList order;
  for (const servelab::RooflinePoint& pt : shown)
    if (!order.contains(seriesOf(pt))) order << seriesOf(pt);
  std::stable_sort(shown.begin(), shown.end(),
                   [](const auto& a, const auto& b) { return a.intensity() < b.intensity(); });
  for (const QString& series : order) {
    QVector<double> xs, ys;
    QStringList labels;
    for (const servelab::RooflinePoint& pt : shown) {
      if (seriesOf(pt) != series) continue;
      xs << pt.intensity();
      ys << pt.flop_s() / kGiga;
      const double attainable = std::min(m.fp32_gflop_s, m.read_gb_s * pt.intensity());
      labels << (attainable > 0 ? tr("%1, %2% of the roof here")
                                      .arg(QString::fromStdString(pt.label))
                                      .arg(100 * pt.flop_s() / kGiga / attainable, 0, 'f', 0)
                                : QString::fromStdString(pt.label));
    }
    const int i = seriesNamed(series);
    setSeriesData(i, xs, ys);
    setPointLabels(i, labels);
  }
  // After the steps, so that each kind keeps its colour from the live points.
  drawInt8Roof(x0, x1);
  rescale();
}

}  // namespace servelab::ui
