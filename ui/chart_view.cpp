// ChartView: QCustomPlot with live append, a hover readout, themes and exports. See chart_view.h.
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

namespace servelab::ui {

namespace {

constexpr int kExportWidth = 1280;
constexpr int kExportHeight = 720;
constexpr double kPngScale = 2.0;
constexpr double kReadoutRadius = 20.0;  // pixels
constexpr int kReplotIntervalMs = 50;    // coalesces live appends to at most 20 replots a second

// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
const char* const kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                "#E69F00", "#56B4E9", "#F0E442", "#000000"};
constexpr int kPaletteSize = static_cast<int>(sizeof(kPalette) / sizeof(kPalette[0]));

QColor seriesColor(int index, ChartTheme theme) {
  const int i = index % kPaletteSize;
  if (theme == ChartTheme::Dark && i == kPaletteSize - 1) return QColor(0xc8, 0xc8, 0xc8);
  return QColor(kPalette[i]);
}

struct ThemeColors {
  QColor background, text, axis, grid, zeroLine, muted;
};

ThemeColors colorsFor(ChartTheme theme) {
  if (theme == ChartTheme::Dark) {
    return {QColor(0x1e, 0x1e, 0x1e), QColor(0xe0, 0xe0, 0xe0), QColor(0xe0, 0xe0, 0xe0),
            QColor(0x3a, 0x3a, 0x3a), QColor(0x60, 0x60, 0x60), QColor(0xa8, 0xa8, 0xa8)};
  }
  return {QColor(Qt::white),        QColor(0x20, 0x20, 0x20), QColor(0x20, 0x20, 0x20),
          QColor(0xe2, 0xe2, 0xe2), QColor(0xb4, 0xb4, 0xb4), QColor(0x5a, 0x5a, 0x5a)};
}

QColor withAlpha(QColor c, int alpha) {
  c.setAlpha(alpha);
  return c;
}

QFont chartFont(double points, bool bold = false) {
  QFont f = QGuiApplication::font();
  // The resolved family, not an alias like "Sans Serif": SVG files name it and other programs read them.
  f.setFamily(QFontInfo(f).family());
  f.setPointSizeF(points);
  f.setBold(bold);
  return f;
}

// Up to 4 significant digits; integers without decimals.
QString formatNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return QString::number(static_cast<qlonglong>(v));
  }
  return QString::number(v, 'g', 4);
}

// A CSV field per RFC 4180: quoted when it holds a comma, a quote or a line break.
QString csvField(const QString& s) {
  if (!s.contains(QLatin1Char(',')) && !s.contains(QLatin1Char('"')) && !s.contains(QLatin1Char('\n')) &&
      !s.contains(QLatin1Char('\r'))) {
    return s;
  }
  QString quoted = s;
  quoted.replace(QLatin1String("\""), QLatin1String("\"\""));
  return QLatin1Char('"') + quoted + QLatin1Char('"');
}

QString csvNumber(double v) { return QString::number(v, 'g', 17); }

// Token pieces made visible: line breaks and tabs escaped, leading/trailing spaces as an open box.
QString displayLabel(const QString& label) {
  if (label.isEmpty()) return QStringLiteral("(empty)");
  QString s = label;
  s.replace(QLatin1String("\\"), QLatin1String("\\\\"));
  s.replace(QLatin1String("\r"), QLatin1String("\\r"));
  s.replace(QLatin1String("\n"), QLatin1String("\\n"));
  s.replace(QLatin1String("\t"), QLatin1String("\\t"));
  const QChar openBox(0x2423);
  int lead = 0;
  while (lead < s.size() && s[lead] == QLatin1Char(' ')) s[lead++] = openBox;
  for (int i = static_cast<int>(s.size()) - 1; i >= lead && s[i] == QLatin1Char(' '); --i) s[i] = openBox;
  if (s.size() > 24) s = s.left(23) + QChar(0x2026);
  return s;
}

QString slugify(const QString& title) {
  QString slug;
  bool dash = false;
  for (const QChar c : title.toLower()) {
    if (c.isLetterOrNumber() && c.unicode() < 128) {
      slug += c;
      dash = false;
    } else if (!dash && !slug.isEmpty()) {
      slug += QLatin1Char('-');
      dash = true;
    }
  }
  while (slug.endsWith(QLatin1Char('-'))) slug.chop(1);
  if (slug.size() > 60) slug = slug.left(60);
  return slug.isEmpty() ? QStringLiteral("chart") : slug;
}

// Why a file cannot be written at path, when that can be told before trying; empty otherwise.
QString writeProblem(const QString& path) {
  if (path.isEmpty()) return QStringLiteral("no file name given");
  const QFileInfo info(path);
  if (info.isDir()) return QStringLiteral("it is a folder");
  const QFileInfo dir(info.absolutePath());
  if (!dir.exists())
    return QStringLiteral("the folder %1 does not exist").arg(QDir::toNativeSeparators(dir.filePath()));
  if (!dir.isDir()) return QStringLiteral("%1 is not a folder").arg(QDir::toNativeSeparators(dir.filePath()));
  if (info.exists() && !info.isWritable()) return QStringLiteral("the file is read-only");
  if (!info.exists() && !dir.isWritable()) {
    return QStringLiteral("the folder %1 is not writable").arg(QDir::toNativeSeparators(dir.filePath()));
  }
  return QString();
}

// Whether the segment a-b crosses or touches the rectangle.
bool segmentHits(const QPointF& a, const QPointF& b, const QRectF& r) {
  if (std::max(a.x(), b.x()) < r.left() || std::min(a.x(), b.x()) > r.right() ||
      std::max(a.y(), b.y()) < r.top() || std::min(a.y(), b.y()) > r.bottom()) {
    return false;
  }
  if (r.contains(a) || r.contains(b)) return true;
  const QLineF segment(a, b);
  const QLineF edges[] = {QLineF(r.topLeft(), r.topRight()), QLineF(r.topRight(), r.bottomRight()),
                          QLineF(r.bottomRight(), r.bottomLeft()), QLineF(r.bottomLeft(), r.topLeft())};
  for (const QLineF& edge : edges) {
    if (segment.intersects(edge, nullptr) == QLineF::BoundedIntersection) return true;
  }
  return false;
}

double squaredDistance(const QPointF& a, const QPointF& b) {
  const double dx = a.x() - b.x();
  const double dy = a.y() - b.y();
  return dx * dx + dy * dy;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool valid() const { return lo <= hi; }
};

// Breaks text into lines no wider than width, at the separator (" · " in footnotes, " " in titles).
QString wrapToWidth(const QString& text, const QFont& font, double width, const QString& separator) {
  const QFontMetricsF metrics(font);
  if (width <= 0 || metrics.horizontalAdvance(text) <= width) return text;
  const QStringList parts = text.split(separator);
  QStringList lines;
  QString line;
  for (const QString& part : parts) {
    const QString candidate = line.isEmpty() ? part : line + separator + part;
    if (!line.isEmpty() && metrics.horizontalAdvance(candidate) > width) {
      lines << line;
      line = part;
    } else {
      line = candidate;
    }
  }
  if (!line.isEmpty()) lines << line;
  return lines.join(QLatin1Char('\n'));
}

// Value range with 0 included below (latencies, probabilities) and a little headroom.
QCPRange valueRange(const Range& r, double headroom = 0.06) {
  double lo = std::min(0.0, r.lo);
  double hi = r.hi;
  if (hi <= lo) hi = lo + std::max(1.0, std::fabs(lo) * 0.1);
  const double pad = (hi - lo) * headroom;
  return QCPRange(lo < 0 ? lo - pad : lo, hi + pad);
}

// Draws a token that svgDocument finds and replaces; visible only while an SVG is written.
class SvgClipMarker : public QCPLayerable {
 public:
  SvgClipMarker(QCustomPlot* plot, const QString& token) : QCPLayerable(plot), token_(token) {
    setVisible(false);
  }

 protected:
  void applyDefaultAntialiasingHint(QCPPainter*) const override {}
  void draw(QCPPainter* painter) override {
    painter->setPen(QColor(1, 2, 3));  // a pen nothing else uses, so the token gets a group of its own
    painter->drawText(QPointF(0, 0), token_);
  }

 private:
  QString token_;
};

// Ticks on whole numbers only (steps of a timeline).
class IntegerTicker : public QCPAxisTicker {
 protected:
  double getTickStep(const QCPRange& range) override {
    return std::max(1.0, std::round(QCPAxisTicker::getTickStep(range)));
  }
  int getSubTickCount(double tickStep) override {
    const int n = static_cast<int>(std::round(tickStep));
    return n > 1 && n <= 5 ? n - 1 : 0;
  }
};

// c mixed with background: amount 1 is c itself, 0 the background.
QColor blend(const QColor& c, const QColor& background, double amount) {
  const auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a * amount + b * (1 - amount))); };
  return QColor(mix(c.red(), background.red()), mix(c.green(), background.green()),
                mix(c.blue(), background.blue()));
}

}  // namespace

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
double squaredDistanceToRect(const QPointF& p, double x0, double x1, double y0, double y1) {
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
    const auto pointText = [&](double key, double value) {
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
          pick.tickText = pointText(it->key, it->value);
        }
        continue;
      }
      const double d = squaredDistance(pick.at, q);
      if (d < pick.best) {
        pick.best = d;
        pick.text = pointText(it->key, it->value);
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
  if (logX_ == on) return;
  logX_ = on;
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
  if (!userZoomed_) fitPending_ = true;
  replotSoon();
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
    const double factor = keys.hi > keys.lo ? std::pow(2.0, 0.25) : 2.0;
    xRange = QCPRange(keys.lo / factor, keys.hi * factor);
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
    const double upper = std::max(left.hi * std::sqrt(10.0), lower * 10);
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
    ticker->setLogBase(2);
    ticker->setSubTickCount(0);
    ticker->setTickCount(12);
    x->setTicker(ticker);
    x->setScaleType(QCPAxis::stLogarithmic);
    x->setNumberFormat(QStringLiteral("g"));
    x->setNumberPrecision(9);
    x->setTickLabelRotation(0);
    x->setSubTicks(false);
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
  const QColor color = style == SeriesStyle::Ticks ? colorsFor(theme_).text : seriesColor(series, theme_);
  QPen pen(color, style == SeriesStyle::Ticks ? 3.0 : 2.0);
  pen.setJoinStyle(Qt::RoundJoin);
  pen.setCapStyle(style == SeriesStyle::Ticks ? Qt::FlatCap : Qt::RoundCap);
  auto* graph = static_cast<SeriesGraph*>(graphs_[series]);
  graph->setPen(pen);
  graph->ticks = style == SeriesStyle::Ticks;
  graph->setBrush(Qt::NoBrush);
  graph->setLineStyle(QCPGraph::lsLine);
  graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(color, 1.5), QBrush(color), 6));
  switch (style) {
    case SeriesStyle::Line:
    case SeriesStyle::Ticks:  // drawn by SeriesGraph
      break;
    case SeriesStyle::Points:
      graph->setLineStyle(QCPGraph::lsNone);
      graph->setScatterStyle(
          QCPScatterStyle(QCPScatterStyle::ssDiamond, QPen(color.darker(120), 1.5), QBrush(color), 11));
      break;
    case SeriesStyle::Steps:
      graph->setLineStyle(QCPGraph::lsStepCenter);
      graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssNone));
      graph->setPen(QPen(color, 1.5));
      graph->setBrush(QBrush(withAlpha(color, theme_ == ChartTheme::Dark ? 110 : 80)));
      break;
  }
}

void ChartView::applyTheme() {
  const ThemeColors c = colorsFor(theme_);
  plot_->setBackground(QBrush(c.background));
  plot_->axisRect()->setBackground(Qt::NoBrush);

  const QFont tickFont = chartFont(10.5);
  const QFont labelFont = chartFont(11.5);
  for (QCPAxis* axis : plot_->axisRect()->axes()) {
    axis->setBasePen(QPen(c.axis, 1));
    axis->setTickPen(QPen(c.axis, 1));
    axis->setSubTickPen(QPen(c.axis, 1));
    axis->setTickLabelColor(c.text);
    axis->setLabelColor(c.text);
    axis->setTickLabelFont(tickFont);
    axis->setLabelFont(labelFont);
    axis->grid()->setPen(QPen(c.grid, 1, Qt::SolidLine));
    axis->grid()->setSubGridPen(QPen(c.grid, 1, Qt::DotLine));
    axis->grid()->setZeroLinePen(QPen(c.zeroLine, 1, Qt::SolidLine));
  }

  QCPLegend* legend = plot_->legend;
  legend->setBrush(QBrush(withAlpha(c.background, 215)));
  legend->setBorderPen(QPen(withAlpha(c.muted, 140), 1));
  legend->setTextColor(c.text);
  legend->setFont(chartFont(10.5));
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
    titleElement_->setFont(chartFont(14.5, true));
  }
  if (footnoteElement_) {
    footnoteElement_->setTextColor(c.muted);
    footnoteElement_->setFont(chartFont(10));
  }

  readout_->setColor(c.text);
  readout_->setFont(chartFont(10));
  readout_->setBrush(QBrush(withAlpha(c.background, 240)));
  readout_->setPen(QPen(c.muted, 1));

  for (QCPItemStraightLine* line : markerLines_) line->setPen(QPen(c.muted, 1.5, Qt::DashLine));
  for (QCPItemText* text : markerTexts_) {
    text->setColor(c.text);
    text->setFont(chartFont(10));
    text->setBrush(QBrush(withAlpha(c.background, 200)));
    text->setPen(Qt::NoPen);
  }

  for (QCPItemText* text : barTexts_) {
    text->setColor(c.text);
    text->setFont(chartFont(9.5));
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

// ---------------------------------------------------------------------------------------------
// Hover readout

QString ChartView::readoutAt(const QPoint& pos) const {
  Pick pick;
  pick.at = plot_->mapFrom(this, pos);
  pick.area = QRectF(plot_->axisRect()->rect()).adjusted(-4, -4, 4, 4);
  if (!pick.area.contains(pick.at)) return QString();
  if (categorical()) pick.categories = barLabels_;
  for (const ChartData* item : dataItems()) item->pick(pick);
  return pick.tickText.isEmpty() ? pick.text : pick.tickText;
}

QPoint ChartView::pixelFor(int series, int index) const {
  if (series < 0 || series >= seriesCount()) return QPoint(-1, -1);
  const QCPGraph* graph = graphs_[series];
  const auto data = graph->data();
  if (index < 0 || index >= data->size()) return QPoint(-1, -1);
  const auto it = data->at(index);
  const QPointF q(graph->keyAxis()->coordToPixel(it->key), graph->valueAxis()->coordToPixel(it->value));
  if (!QRectF(plot_->axisRect()->rect()).contains(q)) return QPoint(-1, -1);
  return plot_->mapTo(this, q.toPoint());
}

QPoint ChartView::barPixelFor(int index) const {
  if (!bars_ || index < 0 || index >= barLabels_.size()) return QPoint(-1, -1);
  const auto it = bars_->data()->findBegin(index + 1 - 0.25, false);
  if (it == bars_->data()->constEnd() || std::fabs(it->key - (index + 1)) > 0.25) return QPoint(-1, -1);
  const QPointF q(plot_->xAxis->coordToPixel(it->key), plot_->yAxis->coordToPixel(it->value));
  if (!QRectF(plot_->axisRect()->rect()).contains(q)) return QPoint(-1, -1);
  return plot_->mapTo(this, q.toPoint());
}

QPoint ChartView::cellPixelFor(int index) const {
  if (!cells_ || index < 0 || index >= cells_->cells.size()) return QPoint(-1, -1);
  const QPointF q = cells_->pixelRect(cells_->cells[index]).center();
  if (!QRectF(plot_->axisRect()->rect()).contains(q)) return QPoint(-1, -1);
  return plot_->mapTo(this, q.toPoint());
}

void ChartView::setReadout(const QPoint& plotPos) {
  const QString text = readoutAt(plot_->mapTo(this, plotPos));
  if (text.isEmpty()) {
    hideReadout();
    return;
  }
  Qt::Alignment align;
  QPointF at(plotPos);
  if (plotPos.x() > plot_->width() * 0.6) {
    align |= Qt::AlignRight;
    at.rx() -= 14;
  } else {
    align |= Qt::AlignLeft;
    at.rx() += 14;
  }
  if (plotPos.y() > plot_->height() * 0.6) {
    align |= Qt::AlignBottom;
    at.ry() -= 12;
  } else {
    align |= Qt::AlignTop;
    at.ry() += 16;
  }
  readout_->setText(text);
  readout_->setPositionAlignment(align);
  readout_->position->setPixelPosition(at);
  readout_->setVisible(true);
  readout_->layer()->replot();
}

void ChartView::hideReadout() {
  if (!readout_->visible()) return;
  readout_->setVisible(false);
  readout_->layer()->replot();
}

bool ChartView::eventFilter(QObject* watched, QEvent* event) {
  if (watched != plot_) return QWidget::eventFilter(watched, event);
  switch (event->type()) {
    case QEvent::MouseButtonPress: {
      auto* e = static_cast<QMouseEvent*>(event);
      dragging_ = e->button() == Qt::LeftButton;
      dragStart_ = e->position().toPoint();
      break;
    }
    case QEvent::MouseMove: {
      auto* e = static_cast<QMouseEvent*>(event);
      if (dragging_ && (e->buttons() & Qt::LeftButton)) {
        if ((e->position().toPoint() - dragStart_).manhattanLength() > 2) {
          userZoomed_ = true;
          hideReadout();
        }
      } else if (e->buttons() == Qt::NoButton) {
        setReadout(e->position().toPoint());
      }
      break;
    }
    case QEvent::MouseButtonRelease:
      dragging_ = false;
      break;
    case QEvent::MouseButtonDblClick:
      if (static_cast<QMouseEvent*>(event)->button() == Qt::LeftButton) rescale();
      break;
    case QEvent::Wheel:
      if (plot_->axisRect()->rect().contains(static_cast<QWheelEvent*>(event)->position().toPoint())) {
        userZoomed_ = true;
        hideReadout();
      }
      break;
    case QEvent::Leave:
      hideReadout();
      break;
    case QEvent::Resize:
      replotSoon();  // bar labels and the legend corner depend on the size
      break;
    case QEvent::Show:
    case QEvent::ScreenChangeInternal:
      if (!qFuzzyCompare(plot_->bufferDevicePixelRatio(), plot_->devicePixelRatioF())) {
        plot_->setBufferDevicePixelRatio(plot_->devicePixelRatioF());
      }
      if (replotPending_) replotSoon();
      break;
    default:
      break;
  }
  return QWidget::eventFilter(watched, event);
}

// ---------------------------------------------------------------------------------------------
// Export

bool ChartView::failExport(const QString& path, const QString& reason, QString* error) const {
  const QString message =
      QStringLiteral("cannot write chart to %1: %2").arg(QDir::toNativeSeparators(path), reason);
  if (error) *error = message;
  Q_EMIT const_cast<ChartView*>(this)->exportFailed(message);
  return false;
}

bool ChartView::exportImage(const QString& path, QString* error) {
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix != QLatin1String("png") && suffix != QLatin1String("svg") && suffix != QLatin1String("pdf")) {
    return failExport(
        path,
        suffix.isEmpty()
            ? QStringLiteral("no file suffix (use .png, .svg or .pdf)")
            : QStringLiteral("unknown image format \".%1\" (use .png, .svg or .pdf)").arg(suffix),
        error);
  }
  if (const QString problem = writeProblem(path); !problem.isEmpty()) return failExport(path, problem, error);

  flushPending();
  const bool readoutShown = readout_->visible();
  readout_->setVisible(false);
  const QRect viewport = plot_->viewport();
  plot_->setViewport(QRect(0, 0, kExportWidth, kExportHeight));
  adaptToSize();
  bool ok = false;
  QString reason;
  if (suffix == QLatin1String("png")) {
    ok = plot_->savePng(path, kExportWidth, kExportHeight, kPngScale);
    if (!ok) reason = QStringLiteral("the PNG writer failed (disk full?)");
  } else if (suffix == QLatin1String("pdf")) {
    ok = plot_->savePdf(path, kExportWidth, kExportHeight, QCP::epAllowCosmetic, QStringLiteral("ServeLab"),
                        title_);
    if (!ok) reason = QStringLiteral("the PDF writer failed");
  } else {
    const QByteArray svg = svgDocument(&reason);
    if (!svg.isEmpty()) {
      QSaveFile file(path);
      if (!file.open(QIODevice::WriteOnly)) {
        reason = file.errorString();
      } else {
        file.write(svg);
        ok = file.commit();
        if (!ok) reason = file.errorString();
      }
    }
  }
  restoreAfterExport(viewport, readoutShown);
  if (!ok) return failExport(path, reason, error);
  Q_EMIT exported(path);
  return true;
}

QByteArray ChartView::svgDocument(QString* reason) {
  // The markers go last on the grid layer and last on the main (data) layer.
  svgClipBegin_->setLayer(QStringLiteral("main"));
  svgClipBegin_->setLayer(QStringLiteral("grid"));
  svgClipEnd_->setLayer(QStringLiteral("grid"));
  svgClipEnd_->setLayer(QStringLiteral("main"));
  svgClipBegin_->setVisible(true);
  svgClipEnd_->setVisible(true);
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  QSvgGenerator generator;
  generator.setOutputDevice(&buffer);
  generator.setSize(QSize(kExportWidth, kExportHeight));
  generator.setViewBox(QRect(0, 0, kExportWidth, kExportHeight));
  generator.setResolution(96);  // fonts in points come out at the same size as in PNG and PDF
  generator.setTitle(title_.isEmpty() ? QStringLiteral("ServeLab chart") : title_);
  generator.setDescription(footnote_);
  QCPPainter painter;
  const bool begun = painter.begin(&generator);
  if (begun) {
    plot_->toPainter(&painter, kExportWidth, kExportHeight);
    painter.end();
  }
  svgClipBegin_->setVisible(false);
  svgClipEnd_->setVisible(false);
  if (!begun) {
    if (reason) *reason = QStringLiteral("the SVG writer failed");
    return QByteArray();
  }
  const QRect clip = plot_->axisRect()->rect().translated(0, -1);  // as QCustomPlot clips plottables

  QString svg = QString::fromUtf8(buffer.data());
  // Each marker sits in a state group of its own (its pen is unique), a sibling of the groups of the
  // data, so replacing the marker groups by <g clip-path> and </g> nests correctly.
  static const QRegularExpression markerGroup(
      QStringLiteral("<g [^>]*>\\s*<text[^>]*>servelab-svg-clip-(begin|end)</text>\\s*</g>"));
  QStringList found;
  for (auto it = markerGroup.globalMatch(svg); it.hasNext();) found << it.next().captured(1);
  const bool clipped = found == QStringList{QStringLiteral("begin"), QStringLiteral("end")};
  qsizetype at = 0;
  for (QRegularExpressionMatch m = markerGroup.match(svg); m.hasMatch(); m = markerGroup.match(svg, at)) {
    const QString replacement = !clipped ? QString()
                                : m.captured(1) == QLatin1String("begin")
                                    ? QStringLiteral("<g clip-path=\"url(#plotArea)\">")
                                    : QStringLiteral("</g>");
    svg.replace(m.capturedStart(), m.capturedLength(), replacement);
    at = m.capturedStart() + replacement.size();
  }
  if (clipped) {
    svg.replace(QStringLiteral("<defs>\n</defs>"),
                QStringLiteral(
                    "<defs>\n<clipPath id=\"plotArea\"><rect x=\"%1\" y=\"%2\" width=\"%3\" height=\"%4\"/>"
                    "</clipPath>\n</defs>")
                    .arg(clip.x())
                    .arg(clip.y())
                    .arg(clip.width())
                    .arg(clip.height()));
    // clipPath is SVG 1.1 (the generator declares SVG Tiny 1.2, which has none).
    svg.replace(QStringLiteral("version=\"1.2\" baseProfile=\"tiny\""), QStringLiteral("version=\"1.1\""));
  }
  // A generic fallback after each font family, for programs without the font.
  static const QRegularExpression family(QStringLiteral("font-family=\"([^\"]*)\""));
  svg.replace(family, QStringLiteral("font-family=\"\\1, sans-serif\""));
  return svg.toUtf8();
}

QString ChartView::toCsv() const {
  QString out;
  if (!graphs_.isEmpty() || (!categorical() && cellRows_.isEmpty())) {
    out += QStringLiteral("series,%1,%2\n")
               .arg(csvField(xLabel_.isEmpty() ? QStringLiteral("x") : xLabel_),
                    csvField(yLabel_.isEmpty() ? QStringLiteral("y") : yLabel_));
    for (int i = 0; i < graphs_.size(); ++i) {
      const QString name = csvField(seriesNames_[i]);
      const auto data = graphs_[i]->data();
      for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
        out += name + QLatin1Char(',') + csvNumber(it->key) + QLatin1Char(',') + csvNumber(it->value) +
               QLatin1Char('\n');
      }
    }
  }
  if (cells_ && !cellRows_.isEmpty()) {
    if (!out.isEmpty()) out += QLatin1Char('\n');
    out += QStringLiteral("row,start,end,label,info\n");
    for (const Cell& c : cells_->cells) {
      out += csvField(c.row >= 0 && c.row < cellRows_.size() ? cellRows_[c.row] : QString::number(c.row)) +
             QLatin1Char(',') + csvNumber(c.x0) + QLatin1Char(',') + csvNumber(c.x1) + QLatin1Char(',') +
             csvField(c.label) + QLatin1Char(',') + csvField(c.info) + QLatin1Char('\n');
    }
  }
  if (bars_) {
    if (!out.isEmpty()) out += QLatin1Char('\n');
    out += QStringLiteral("label,%1\n")
               .arg(csvField(barValueName_.isEmpty() ? QStringLiteral("value") : barValueName_));
    const QVector<double> values = barValues();
    for (int i = 0; i < barLabels_.size() && i < values.size(); ++i) {
      if (!std::isfinite(values[i])) continue;
      out += csvField(barLabels_[i]) + QLatin1Char(',') + csvNumber(values[i]) + QLatin1Char('\n');
    }
  }
  if (!stack_->sets.isEmpty()) {
    if (!out.isEmpty()) out += QLatin1Char('\n');
    out += QStringLiteral("label");
    for (const BarSet& set : stack_->sets) out += QLatin1Char(',') + csvField(set.name);
    if (!stackAnnotations_.isEmpty()) out += QStringLiteral(",note");
    out += QLatin1Char('\n');
    for (qsizetype i = 0; i < barLabels_.size(); ++i) {
      out += csvField(barLabels_[i]);
      for (const BarSet& set : stack_->sets)
        out += QLatin1Char(',') + (std::isfinite(set.values[i]) ? csvNumber(set.values[i]) : QString());
      if (!stackAnnotations_.isEmpty())
        out += QLatin1Char(',') + csvField(stackAnnotations_.value(static_cast<int>(i)));
      out += QLatin1Char('\n');
    }
  }
  return out;
}

bool ChartView::exportCsv(const QString& path, QString* error) const {
  if (const QString problem = writeProblem(path); !problem.isEmpty()) return failExport(path, problem, error);
  QSaveFile file(path);
  if (!file.open(QIODevice::WriteOnly)) return failExport(path, file.errorString(), error);
  file.write(toCsv().toUtf8());
  if (!file.commit()) return failExport(path, file.errorString(), error);
  Q_EMIT const_cast<ChartView*>(this)->exported(path);
  return true;
}

QImage ChartView::renderImage(int width, int height, double scale) {
  flushPending();
  const bool readoutShown = readout_->visible();
  readout_->setVisible(false);
  const QRect viewport = plot_->viewport();
  plot_->setViewport(QRect(0, 0, width, height));
  adaptToSize();
  QImage image = plot_->toPixmap(width, height, scale).toImage();
  restoreAfterExport(viewport, readoutShown);
  return image;
}

// An export lays the plot out at its own size; this lays it out for the widget again.
void ChartView::restoreAfterExport(const QRect& viewport, bool readoutShown) {
  plot_->setViewport(viewport);
  adaptToSize();
  readout_->setVisible(readoutShown);
  plot_->replot();
}

void ChartView::copyImageToClipboard() {
  if (QClipboard* clipboard = QGuiApplication::clipboard()) clipboard->setImage(renderImage());
}

void ChartView::showContextMenu(const QPoint& pos) {
  hideReadout();
  QMenu menu(this);
  connect(menu.addAction(tr("Export image…")), &QAction::triggered, this,
          [this] { exportWithDialogAs(false); });
  connect(menu.addAction(tr("Export data (CSV)…")), &QAction::triggered, this,
          [this] { exportWithDialogAs(true); });
  menu.addSeparator();
  connect(menu.addAction(tr("Copy image")), &QAction::triggered, this, &ChartView::copyImageToClipboard);
  connect(menu.addAction(tr("Fit to data")), &QAction::triggered, this, &ChartView::rescale);
  menu.exec(plot_->mapToGlobal(pos));
}

void ChartView::exportWithDialog() { exportWithDialogAs(false); }

void ChartView::exportWithDialogAs(bool csv) {
  static QString lastDir;
  static QString lastImageFilter;
  if (lastDir.isEmpty()) {
    lastDir = QStandardPaths::writableLocation(QStandardPaths::PicturesLocation);
    if (lastDir.isEmpty() || !QFileInfo(lastDir).isDir()) lastDir = QDir::homePath();
  }
  const QStringList filters = {tr("PNG image (*.png)"), tr("SVG vector image (*.svg)"),
                               tr("PDF document (*.pdf)"), tr("CSV data (*.csv)")};
  const QStringList suffixes = {QStringLiteral("png"), QStringLiteral("svg"), QStringLiteral("pdf"),
                                QStringLiteral("csv")};
  QString selected = csv ? filters[3] : (lastImageFilter.isEmpty() ? filters[0] : lastImageFilter);
  const auto suffixOf = [&](const QString& filter) {
    const qsizetype i = filters.indexOf(filter);
    return suffixes[i < 0 ? 0 : i];
  };
  const QString suggested = QDir(lastDir).filePath(slugify(title_) + QLatin1Char('.') + suffixOf(selected));
  QString path = QFileDialog::getSaveFileName(this, tr("Export chart"), suggested,
                                              filters.join(QLatin1String(";;")), &selected);
  if (path.isEmpty()) return;
  if (!suffixes.contains(QFileInfo(path).suffix().toLower())) path += QLatin1Char('.') + suffixOf(selected);
  lastDir = QFileInfo(path).absolutePath();
  const QString suffix = QFileInfo(path).suffix().toLower();
  if (suffix != QLatin1String("csv")) lastImageFilter = filters[suffixes.indexOf(suffix)];

  QString error;
  const bool ok = suffix == QLatin1String("csv") ? exportCsv(path, &error) : exportImage(path, &error);
  if (!ok) QMessageBox::warning(this, tr("Export failed"), error);
}

}  // namespace servelab::ui
