// ChartView: export to PNG, SVG, PDF and CSV, the clipboard and the export dialog.
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

namespace {

constexpr int kExportWidth = 1280;
constexpr int kExportHeight = 720;
constexpr double kPngScale = 2.0;

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

}  // namespace

QString fileWriteProblem(const QString& path) {
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
  if (const QString problem = fileWriteProblem(path); !problem.isEmpty())
    return failExport(path, problem, error);

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
    const QByteArray svg = svgDocument(QSize(kExportWidth, kExportHeight), &reason);
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

QByteArray ChartView::svgDocument(const QSize& size, QString* reason) {
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
  generator.setSize(size);
  generator.setViewBox(QRect(QPoint(0, 0), size));
  generator.setResolution(96);  // fonts in points come out at the same size as in PNG and PDF
  generator.setTitle(title_.isEmpty() ? QStringLiteral("ServeLab chart") : title_);
  generator.setDescription(footnote_);
  QCPPainter painter;
  const bool begun = painter.begin(&generator);
  if (begun) {
    plot_->toPainter(&painter, size.width(), size.height());
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
  if (const QString problem = fileWriteProblem(path); !problem.isEmpty())
    return failExport(path, problem, error);
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

ChartView::Snapshot ChartView::snapshot(const QSize& size) {
  Snapshot s;
  s.title = title_;
  s.size = size;
  const ChartTheme theme = theme_;
  if (theme != ChartTheme::Light) setTheme(ChartTheme::Light);  // a report is printed on white
  flushPending();
  const bool readoutShown = readout_->visible();
  readout_->setVisible(false);
  const QRect viewport = plot_->viewport();
  plot_->setViewport(QRect(QPoint(0, 0), size));
  adaptToSize();
  QString reason;
  s.svg = svgDocument(size, &reason);
  QCPPainter painter;
  if (painter.begin(&s.picture)) {
    plot_->toPainter(&painter, size.width(), size.height());
    painter.end();
  }
  s.picture.setBoundingRect(QRect(QPoint(0, 0), size));
  restoreAfterExport(viewport, readoutShown);
  if (theme != ChartTheme::Light) setTheme(theme);
  return s;
}

bool ChartView::hasData() const {
  for (const QCPGraph* g : graphs_)
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
      if (std::isfinite(it->value)) return true;
  if (cells_ && !cells_->cells.isEmpty()) return true;
  // Bars: a category with a value (NaN leaves one empty, a result still to come).
  const auto anyFinite = [](const QVector<double>& values) {
    return std::any_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
  };
  if (bars_ && anyFinite(barValues())) return true;
  for (const BarSet& set : stack_->sets)
    if (anyFinite(set.values)) return true;
  return false;
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
