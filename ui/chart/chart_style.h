#pragma once
// What every part of a chart draws with: the palette, theme colours, fonts, number and label
// formats, extents and hit geometry. Internal to the chart component (ui/chart_view.h is its face).
#include <qcustomplot.h>

#include <QColor>
#include <QFont>
#include <QFontInfo>
#include <QFontMetricsF>
#include <QGuiApplication>
#include <QLineF>
#include <QPointF>
#include <QRectF>
#include <QString>
#include <QStringList>
#include <algorithm>
#include <cmath>
#include <limits>

#include "chart_view.h"

namespace servelab::ui::chart {

constexpr double kReadoutRadius = 20.0;  // pixels
constexpr int kReplotIntervalMs = 50;    // coalesces live appends to at most 20 replots a second

// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
inline constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                           "#E69F00", "#56B4E9", "#F0E442", "#000000"};
constexpr int kPaletteSize = static_cast<int>(sizeof(kPalette) / sizeof(kPalette[0]));

inline QColor seriesColor(int index, ChartTheme theme) {
  const int i = index % kPaletteSize;
  if (theme == ChartTheme::Dark && i == kPaletteSize - 1) return QColor(0xc8, 0xc8, 0xc8);
  return QColor(kPalette[i]);
}

struct ThemeColors {
  QColor background, text, axis, grid, zeroLine, muted;
};

inline ThemeColors colorsFor(ChartTheme theme) {
  if (theme == ChartTheme::Dark) {
    return {QColor(0x1e, 0x1e, 0x1e), QColor(0xe0, 0xe0, 0xe0), QColor(0xe0, 0xe0, 0xe0),
            QColor(0x3a, 0x3a, 0x3a), QColor(0x60, 0x60, 0x60), QColor(0xa8, 0xa8, 0xa8)};
  }
  return {QColor(Qt::white),        QColor(0x20, 0x20, 0x20), QColor(0x20, 0x20, 0x20),
          QColor(0xe2, 0xe2, 0xe2), QColor(0xb4, 0xb4, 0xb4), QColor(0x5a, 0x5a, 0x5a)};
}

// The theme's colours, in presenter mode with text, axes and the muted labels at full strength for a
// projector.
inline ThemeColors colorsFor(ChartTheme theme, bool presenter) {
  ThemeColors c = colorsFor(theme);
  if (!presenter) return c;
  const QColor ink = theme == ChartTheme::Dark ? QColor(Qt::white) : QColor(Qt::black);
  c.text = ink;
  c.axis = ink;
  c.muted = theme == ChartTheme::Dark ? QColor(0xd0, 0xd0, 0xd0) : QColor(0x30, 0x30, 0x30);
  return c;
}

inline QColor withAlpha(QColor c, int alpha) {
  c.setAlpha(alpha);
  return c;
}

inline QFont chartFont(double points, bool bold = false) {
  QFont f = QGuiApplication::font();
  // The resolved family, not an alias like "Sans Serif": SVG files name it and other programs read them.
  f.setFamily(QFontInfo(f).family());
  f.setPointSizeF(points);
  f.setBold(bold);
  return f;
}

// Up to 4 significant digits; integers without decimals.
inline QString formatNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return QString::number(static_cast<qlonglong>(v));
  }
  return QString::number(v, 'g', 4);
}

// Token pieces made visible: line breaks and tabs escaped, leading/trailing spaces as an open box.
inline QString displayLabel(const QString& label) {
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

// Whether the segment a-b crosses or touches the rectangle.
inline bool segmentHits(const QPointF& a, const QPointF& b, const QRectF& r) {
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

inline double squaredDistance(const QPointF& a, const QPointF& b) {
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

// Breaks text into lines no wider than width, at the separator (" · " in footnotes, " " in titles),
// and a part still too wide at its spaces.
inline QString wrapToWidth(const QString& text, const QFont& font, double width, const QString& separator) {
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
  // A part wider than the chart on its own (presenter mode's larger fonts) breaks at its spaces.
  if (separator != QLatin1String(" ")) {
    for (QString& l : lines)
      if (metrics.horizontalAdvance(l) > width) l = wrapToWidth(l, font, width, QStringLiteral(" "));
  }
  return lines.join(QLatin1Char('\n'));
}

// Value range with 0 included below (latencies, probabilities) and a little headroom.
inline QCPRange valueRange(const Range& r, double headroom = 0.06) {
  double lo = std::min(0.0, r.lo);
  double hi = r.hi;
  if (hi <= lo) hi = lo + std::max(1.0, std::fabs(lo) * 0.1);
  const double pad = (hi - lo) * headroom;
  return QCPRange(lo < 0 ? lo - pad : lo, hi + pad);
}

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
inline QColor blend(const QColor& c, const QColor& background, double amount) {
  const auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a * amount + b * (1 - amount))); };
  return QColor(mix(c.red(), background.red()), mix(c.green(), background.green()),
                mix(c.blue(), background.blue()));
}

}  // namespace servelab::ui::chart
