// ChartView, the chart every tab uses: data round trips (series, bars, CSV), exports (PNG, SVG, PDF and
// their failures), the hover readout, log2 axes, themes and the auto-fit/user-zoom contract.
// Runs on the offscreen platform. With SERVELAB_CHART_DEMO_DIR set, demoImages writes two sample
// charts there for a person to look at.
#include <QApplication>
#include <QFile>
#include <QImage>
#include <QMouseEvent>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QWheelEvent>
#include <QXmlStreamReader>
#include <QtTest>
#include <cmath>
#include <limits>

#include "chart_view.h"

using servelab::ui::ChartTheme;
using servelab::ui::ChartView;

namespace {

// RFC 4180 records: quoted fields may hold commas, quotes ("") and line breaks.
QVector<QStringList> parseCsv(const QString& text) {
  QVector<QStringList> rows;
  QStringList row;
  QString field;
  bool quoted = false;
  bool rowStarted = false;
  for (qsizetype i = 0; i < text.size(); ++i) {
    const QChar c = text[i];
    if (quoted) {
      if (c == QLatin1Char('"')) {
        if (i + 1 < text.size() && text[i + 1] == QLatin1Char('"')) {
          field += QLatin1Char('"');
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
    } else if (c == QLatin1Char('"')) {
      quoted = true;
      rowStarted = true;
    } else if (c == QLatin1Char(',')) {
      row << field;
      field.clear();
      rowStarted = true;
    } else if (c == QLatin1Char('\n')) {
      if (rowStarted || !field.isEmpty()) row << field;
      rows << row;  // an empty line comes out as an empty row
      row.clear();
      field.clear();
      rowStarted = false;
    } else {
      field += c;
      rowStarted = true;
    }
  }
  if (rowStarted || !field.isEmpty()) {
    row << field;
    rows << row;
  }
  return rows;
}

bool isUniform(const QImage& image) {
  const QRgb first = image.pixel(0, 0);
  for (int y = 0; y < image.height(); y += 7) {
    for (int x = 0; x < image.width(); x += 7) {
      if (image.pixel(x, y) != first) return false;
    }
  }
  return true;
}

QWidget* plotWidget(ChartView& chart) {
  QWidget* plot = chart.findChild<QWidget*>(QStringLiteral("chartPlot"));
  if (!plot) qFatal("ChartView has no child named chartPlot");
  return plot;
}

void sendWheel(QWidget* target, const QPoint& pos, int steps) {
  QWheelEvent event(QPointF(pos), QPointF(target->mapToGlobal(pos)), QPoint(), QPoint(0, 120 * steps),
                    Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(target, &event);
}

void sendDrag(QWidget* target, const QPoint& from, const QPoint& to) {
  QMouseEvent press(QEvent::MouseButtonPress, QPointF(from), QPointF(target->mapToGlobal(from)),
                    Qt::LeftButton, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(target, &press);
  for (int step = 1; step <= 4; ++step) {
    const QPoint at = from + (to - from) * step / 4;
    QMouseEvent move(QEvent::MouseMove, QPointF(at), QPointF(target->mapToGlobal(at)), Qt::NoButton,
                     Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(target, &move);
  }
  QMouseEvent release(QEvent::MouseButtonRelease, QPointF(to), QPointF(target->mapToGlobal(to)),
                      Qt::LeftButton, Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(target, &release);
}

// Replots are coalesced on a short timer; this lets a pending one run.
void settle() { QTest::qWait(100); }

}  // namespace

class ChartViewTest : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;

  QString file(const QString& name) const { return dir_.filePath(name); }

  // A shown chart with a laid-out plot, so pixel positions mean something.
  static void showChart(ChartView& chart) {
    chart.resize(900, 560);
    chart.show();
    QVERIFY(QTest::qWaitForWindowExposed(&chart));
    settle();
  }

  static void fillTypical(ChartView& chart) {
    chart.setTitle(QStringLiteral("Per-token latency, GPT-2 124M"));
    chart.setFootnote(QStringLiteral("gpt2 · CPU · float32"));
    chart.setAxisLabels(QStringLiteral("token index"), QStringLiteral("latency (ms)"));
    const int without = chart.addSeries(QStringLiteral("without KV cache"));
    const int with = chart.addSeries(QStringLiteral("with KV cache"));
    for (int i = 0; i < 10; ++i) {
      chart.append(without, i, 48.0 + 6.5 * i + (i == 0 ? 30 : 0));
      chart.append(with, i, i == 0 ? 78.0 : 11.0 + 0.3 * i);
    }
    chart.addVerticalMarker(0, QStringLiteral("prefill"));
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  void seriesRoundTrip() {
    ChartView chart;
    QCOMPARE(chart.seriesCount(), 0);
    const int a = chart.addSeries(QStringLiteral("alpha"));
    const int b = chart.addSeries(QStringLiteral("beta"), ChartView::Axis::Right);
    QCOMPARE(a, 0);
    QCOMPARE(b, 1);
    QCOMPARE(chart.seriesCount(), 2);
    QCOMPARE(chart.seriesIndex(QStringLiteral("beta")), 1);
    QCOMPARE(chart.seriesIndex(QStringLiteral("gamma")), -1);
    QCOMPARE(chart.seriesName(0), QStringLiteral("alpha"));
    QCOMPARE(chart.seriesName(7), QString());

    const QVector<QPointF> expected = {{0, 1.5}, {1, -2.25}, {2, 1e-9}, {3, 123456.75}};
    for (const QPointF& p : expected) chart.append(a, p.x(), p.y());
    chart.append(b, 10, 20);
    QCOMPARE(chart.seriesPoints(a), expected);
    QCOMPARE(chart.seriesPoints(b), (QVector<QPointF>{{10, 20}}));

    chart.setSeriesData(b, {1, 2, 3}, {4, 5, 6});
    QCOMPARE(chart.seriesPoints(b), (QVector<QPointF>{{1, 4}, {2, 5}, {3, 6}}));
    chart.clearSeries(b);
    QVERIFY(chart.seriesPoints(b).isEmpty());
    QCOMPARE(chart.seriesPoints(a), expected);

    // Out-of-range series: a warning, no crash, nothing changes.
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QStringLiteral("no series 5")));
    chart.append(5, 1, 1);
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QStringLiteral("no series -1")));
    chart.clearSeries(-1);
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QStringLiteral("no series 2")));
    QVERIFY(chart.seriesPoints(2).isEmpty());
    QCOMPARE(chart.seriesCount(), 2);
  }

  void nonFiniteValuesAreSkipped() {
    ChartView chart;
    showChart(chart);
    const int s = chart.addSeries(QStringLiteral("s"));
    chart.append(s, 0, 1);
    chart.append(s, 1, std::numeric_limits<double>::quiet_NaN());
    chart.append(s, std::numeric_limits<double>::infinity(), 3);
    chart.append(s, 2, -std::numeric_limits<double>::infinity());
    chart.append(s, 3, 4);
    QCOMPARE(chart.seriesPoints(s), (QVector<QPointF>{{0, 1}, {3, 4}}));
    settle();
    // Autoscale still works: both points are on screen.
    QVERIFY(chart.pixelFor(s, 0).x() >= 0);
    QVERIFY(chart.pixelFor(s, 1).x() >= 0);
    QVERIFY(chart.pixelFor(s, 1).x() > chart.pixelFor(s, 0).x());
  }

  void csvMatchesSeriesData() {
    ChartView chart;
    chart.setAxisLabels(QStringLiteral("token index"), QStringLiteral("latency (ms), median"));
    const QStringList names = {QStringLiteral("plain"), QStringLiteral("with, comma"),
                               QStringLiteral("say \"hi\"")};
    const QVector<QVector<QPointF>> data = {
        {{0, 0.1}, {1, 1.0 / 3.0}, {2, 1e-300}},
        {{-5, 123456789.123456789}, {0.5, -2.5}},
        {{1e10, 6.02214076e23}},
    };
    for (int i = 0; i < names.size(); ++i) {
      const int s = chart.addSeries(names[i], i == 2 ? ChartView::Axis::Right : ChartView::Axis::Left);
      for (const QPointF& p : data[i]) chart.append(s, p.x(), p.y());
    }
    const QVector<QStringList> rows = parseCsv(chart.toCsv());
    QCOMPARE(rows.size(), 1 + 3 + 2 + 1);
    QCOMPARE(rows[0], (QStringList{QStringLiteral("series"), QStringLiteral("token index"),
                                   QStringLiteral("latency (ms), median")}));
    int row = 1;
    for (int i = 0; i < names.size(); ++i) {
      for (const QPointF& p : data[i]) {
        QCOMPARE(rows[row].size(), 3);
        QCOMPARE(rows[row][0], names[i]);
        bool okX = false, okY = false;
        QCOMPARE(rows[row][1].toDouble(&okX), p.x());  // exact: full precision
        QCOMPARE(rows[row][2].toDouble(&okY), p.y());
        QVERIFY(okX && okY);
        ++row;
      }
    }

    // Round trip through the file, as UTF-8.
    QSignalSpy exported(&chart, &ChartView::exported);
    QString error;
    QVERIFY2(chart.exportCsv(file(QStringLiteral("series.csv")), &error), qPrintable(error));
    QCOMPARE(exported.size(), 1);
    QFile f(file(QStringLiteral("series.csv")));
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), chart.toCsv());

    // Empty axis labels fall back to x and y.
    ChartView bare;
    bare.append(bare.addSeries(QStringLiteral("s")), 1, 2);
    QCOMPARE(bare.toCsv(), QStringLiteral("series,x,y\ns,1,2\n"));
  }

  void barsCsvKeepsLabelsExactly() {
    ChartView chart;
    const QStringList labels = {QStringLiteral(" the"),       QStringLiteral("\n"),    QStringLiteral("a,b"),
                                QStringLiteral("say \"hi\""), QStringLiteral("plain"), QStringLiteral("  "),
                                QStringLiteral("naïve ✓")};
    const QVector<double> values = {0.41, 0.2, 0.1, 0.05, 0.025, 1e-7, 0.0};
    chart.setBars(labels, values, QStringLiteral("probability"));
    QCOMPARE(chart.barLabels(), labels);
    QCOMPARE(chart.barValues(), values);

    const QVector<QStringList> rows = parseCsv(chart.toCsv());
    QCOMPARE(rows.size(), 1 + labels.size());
    QCOMPARE(rows[0], (QStringList{QStringLiteral("label"), QStringLiteral("probability")}));
    for (int i = 0; i < labels.size(); ++i) {
      QCOMPARE(rows[i + 1].size(), 2);
      QCOMPARE(rows[i + 1][0], labels[i]);
      QCOMPARE(rows[i + 1][1].toDouble(), values[i]);
    }

    // Replacing bars replaces everything.
    chart.setBars({QStringLiteral("x")}, {1.0}, QString());
    QCOMPARE(chart.barLabels(), QStringList{QStringLiteral("x")});
    QCOMPARE(chart.toCsv(), QStringLiteral("label,value\nx,1\n"));
  }

  void csvWithSeriesAndBars() {
    ChartView chart;
    chart.append(chart.addSeries(QStringLiteral("s")), 1, 2);
    chart.setBars({QStringLiteral("a")}, {0.5}, QStringLiteral("p"));
    QCOMPARE(chart.toCsv(), QStringLiteral("series,x,y\ns,1,2\n\nlabel,p\na,0.5\n"));
  }

  void exportPng() {
    ChartView chart;
    fillTypical(chart);
    QSignalSpy exported(&chart, &ChartView::exported);
    QSignalSpy failed(&chart, &ChartView::exportFailed);
    const QString path = file(QStringLiteral("chart.PNG"));  // suffix case does not matter
    QString error;
    QVERIFY2(chart.exportImage(path, &error), qPrintable(error));
    QCOMPARE(exported.size(), 1);
    QCOMPARE(exported[0][0].toString(), path);
    QCOMPARE(failed.size(), 0);
    QImage image;
    QVERIFY(image.load(path, "PNG"));
    QCOMPARE(image.size(), QSize(2560, 1440));
    QVERIFY(!isUniform(image));
    QCOMPARE(QColor(image.pixel(4, 4)), QColor(Qt::white));  // light theme
  }

  void exportSvg() {
    ChartView chart;
    fillTypical(chart);
    const QString path = file(QStringLiteral("chart.svg"));
    QString error;
    QVERIFY2(chart.exportImage(path, &error), qPrintable(error));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray svg = f.readAll();
    QVERIFY(svg.size() > 1000);
    QVERIFY(svg.contains("<svg"));
    QVERIFY(svg.contains("Per-token latency, GPT-2 124M"));
    QVERIFY(svg.contains("without KV cache"));
    // The data is clipped to the plot area (Qt's generator cannot; ChartView adds a clipPath), and
    // the markers used for that are gone.
    QVERIFY(svg.contains("<clipPath id=\"plotArea\">"));
    QCOMPARE(svg.count("clip-path=\"url(#plotArea)\""), 1);
    QVERIFY(!svg.contains("servelab-svg-clip"));
    const qsizetype clipStart = svg.indexOf("clip-path=\"url(#plotArea)\"");
    QVERIFY(svg.indexOf("#0072b2", clipStart) > clipStart);  // the first series is inside the clip
    QVERIFY(svg.indexOf("Per-token latency") > 0);
    QXmlStreamReader xml(svg);
    bool sawSvg = false;
    while (!xml.atEnd()) {
      xml.readNext();
      if (xml.isStartElement() && xml.name() == QLatin1String("svg")) sawSvg = true;
    }
    QVERIFY2(!xml.hasError(), qPrintable(xml.errorString()));
    QVERIFY(sawSvg);
  }

  void exportPdf() {
    ChartView chart;
    fillTypical(chart);
    const QString path = file(QStringLiteral("chart.pdf"));
    QString error;
    QVERIFY2(chart.exportImage(path, &error), qPrintable(error));
    QFile f(path);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray pdf = f.readAll();
    QVERIFY(pdf.startsWith("%PDF"));
    QVERIFY(pdf.size() > 1000);
  }

  void exportFailuresNameThePath() {
    ChartView chart;
    fillTypical(chart);
    QSignalSpy exported(&chart, &ChartView::exported);
    QSignalSpy failed(&chart, &ChartView::exportFailed);

    const QString missingDir = file(QStringLiteral("no/such/folder/chart.png"));
    QVERIFY(QDir(dir_.path()).mkdir(QStringLiteral("folder.png")));
    const QString folder = file(QStringLiteral("folder.png"));
    const QString unknown = file(QStringLiteral("chart.bmp"));
    const QString noSuffix = file(QStringLiteral("chart"));
    int expectedFailures = 0;
    for (const QString& path : {missingDir, folder, unknown, noSuffix}) {
      QString error;
      QVERIFY2(!chart.exportImage(path, &error), qPrintable(path));
      QVERIFY2(error.startsWith(QStringLiteral("cannot write chart to ") + path + QStringLiteral(": ")),
               qPrintable(error));
      QVERIFY2(error.size() > QStringLiteral("cannot write chart to ").size() + path.size() + 3,
               qPrintable(error));
      QCOMPARE(failed.size(), ++expectedFailures);
      QCOMPARE(failed.last()[0].toString(), error);
    }
    QVERIFY(!QFile::exists(unknown));
    QString error;
    QVERIFY(!chart.exportImage(missingDir));  // no error pointer: still fails cleanly
    QVERIFY(!chart.exportCsv(folder, &error));
    QVERIFY2(error.contains(folder), qPrintable(error));
    QVERIFY(!chart.exportCsv(missingDir, &error));
    QVERIFY2(error.contains(missingDir), qPrintable(error));
    QCOMPARE(exported.size(), 0);
  }

  void renderImageSize() {
    ChartView chart;
    fillTypical(chart);
    const QImage image = chart.renderImage(400, 300, 1.5);
    QCOMPARE(image.size(), QSize(600, 450));
    QVERIFY(!isUniform(image));
  }

  void readoutNearPointsOnly() {
    ChartView chart;
    const int a = chart.addSeries(QStringLiteral("without KV cache"));
    const int b = chart.addSeries(QStringLiteral("with KV cache"));
    for (int i = 0; i < 10; ++i) {
      chart.append(a, i, 40.0 + 10 * i);
      chart.append(b, i, 12.3456 + i);
    }
    showChart(chart);

    const QPoint p = chart.pixelFor(a, 7);
    QVERIFY(p.x() >= 0);
    QString text = chart.readoutAt(p);
    QCOMPARE(text, QStringLiteral("without KV cache: x = 7, y = 110"));
    text = chart.readoutAt(chart.pixelFor(b, 0) + QPoint(5, -4));  // near enough
    QCOMPARE(text, QStringLiteral("with KV cache: x = 0, y = 12.35"));

    // Far from every point: nothing; outside the plot area: nothing.
    const QPoint between = (chart.pixelFor(a, 9) + chart.pixelFor(b, 9)) / 2;
    QVERIFY((between - chart.pixelFor(a, 9)).manhattanLength() > 60);
    QCOMPARE(chart.readoutAt(between), QString());
    QCOMPARE(chart.readoutAt(QPoint(1, 1)), QString());
    QCOMPARE(chart.pixelFor(a, 10), QPoint(-1, -1));
    QCOMPARE(chart.pixelFor(3, 0), QPoint(-1, -1));

    // A hover over the plot does not crash and leaves the data alone.
    QWidget* plot = plotWidget(chart);
    QTest::mouseMove(plot, plot->mapFrom(&chart, p));
    QTest::mouseMove(plot, plot->mapFrom(&chart, between));
    QCOMPARE(chart.seriesPoints(a).size(), 10);
  }

  void readoutOverBars() {
    ChartView chart;
    chart.setBars({QStringLiteral(" the"), QStringLiteral("\n"), QStringLiteral("cat")}, {0.5, 0.25, 0.125},
                  QStringLiteral("probability"));
    showChart(chart);
    const QPoint top = chart.barPixelFor(0);
    QVERIFY(top.x() >= 0);
    QCOMPARE(chart.readoutAt(top + QPoint(0, 20)), QStringLiteral("␣the: probability = 0.5"));  // inside
    QCOMPARE(chart.readoutAt(chart.barPixelFor(1) + QPoint(0, -10)),
             QStringLiteral("\\n: probability = 0.25"));
    QVERIFY(chart.readoutAt(chart.barPixelFor(2) + QPoint(0, -100)).isEmpty());
    QCOMPARE(chart.barPixelFor(3), QPoint(-1, -1));
  }

  void barsWithAnEmptyCategory() {
    ChartView chart;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    chart.setBars({QStringLiteral("a"), QStringLiteral("b"), QStringLiteral("c")}, {1.0, nan, 3.0},
                  QStringLiteral("ms"));
    showChart(chart);
    const QVector<double> values = chart.barValues();
    QCOMPARE(values.size(), 3);
    QCOMPARE(values[0], 1.0);
    QVERIFY(std::isnan(values[1]));
    QCOMPARE(values[2], 3.0);
    QCOMPARE(chart.toCsv(), QStringLiteral("label,ms\na,1\nc,3\n"));  // the empty category has no row
    QCOMPARE(chart.barPixelFor(1), QPoint(-1, -1));
    QVERIFY(chart.barPixelFor(2).x() > chart.barPixelFor(0).x());
    QCOMPARE(chart.readoutAt(chart.barPixelFor(2) + QPoint(0, 10)), QStringLiteral("c: ms = 3"));
  }

  void stackedBarsWithTicks() {
    ChartView chart;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    chart.setAxisLabels(QStringLiteral("mode"), QString());
    const int resident = chart.addSeries(QStringLiteral("resident"));
    chart.setSeriesStyle(resident, ChartView::SeriesStyle::Ticks);
    QCOMPARE(chart.seriesStyle(resident), ChartView::SeriesStyle::Ticks);
    chart.setStackedBars(
        {QStringLiteral("a"), QStringLiteral("b")},
        {{QStringLiteral("p"), {1.0, 2.0}, QColor()}, {QStringLiteral("q"), {3.0, nan}, QColor(Qt::red)}},
        QStringLiteral("MB"), {QStringLiteral("x, 1"), QStringLiteral("y")});
    chart.setSeriesData(resident, {1, 2}, {2.5, 8});
    QCOMPARE(chart.barSetCount(), 2);
    QCOMPARE(chart.barSetName(1), QStringLiteral("q"));
    QCOMPARE(chart.barSetValues(0), (QVector<double>{1.0, 2.0}));
    QVERIFY(std::isnan(chart.barSetValues(1)[1]));
    QVERIFY(chart.barValues().isEmpty());  // no plain bars
    QCOMPARE(chart.barLabels(), (QStringList{QStringLiteral("a"), QStringLiteral("b")}));
    QCOMPARE(chart.barAnnotations(), (QStringList{QStringLiteral("x, 1"), QStringLiteral("y")}));
    QCOMPARE(chart.toCsv(), QStringLiteral("series,mode,y\nresident,1,2.5\nresident,2,8\n\n"
                                           "label,p,q,note\na,1,3,\"x, 1\"\nb,2,,y\n"));
    showChart(chart);
    // The tick of a sits at 2.5, inside q's part of the stack (from 1 to 4): along the tick the
    // readout names the tick, a little below it the part.
    const QPoint tick = chart.pixelFor(resident, 0);
    QVERIFY(tick.x() >= 0);
    QCOMPARE(chart.readoutAt(tick), QStringLiteral("a: resident = 2.5"));
    QCOMPARE(chart.readoutAt(tick + QPoint(25, 2)), QStringLiteral("a: resident = 2.5"));
    QCOMPARE(chart.readoutAt(tick + QPoint(0, 25)), QStringLiteral("a: q = 3 (MB)"));
    // The axis fits the tallest stack and the highest tick.
    QVERIFY(chart.pixelFor(resident, 1).y() >= 0);
    const QString png = file(QStringLiteral("stacked.png"));
    QString error;
    QVERIFY2(chart.exportImage(png, &error), qPrintable(error));
    QVERIFY(!isUniform(QImage(png)));
    // Plain bars replace the stacks.
    chart.setBars({QStringLiteral("z")}, {1.0}, QString());
    QCOMPARE(chart.barSetCount(), 0);
    QVERIFY(chart.barAnnotations().isEmpty());
  }

  void logYSpacesDecadesEvenly() {
    ChartView chart;
    chart.setLogY(true);
    QVERIFY(chart.logY());
    const int s = chart.addSeries(QStringLiteral("count"));
    chart.setSeriesStyle(s, ChartView::SeriesStyle::Steps);
    chart.setSeriesData(s, {0, 1, 2, 3}, {0, 1, 10, 100});
    showChart(chart);
    QCOMPARE(chart.pixelFor(s, 0), QPoint(-1, -1));  // a zero count has no place on a log axis
    const int y1 = chart.pixelFor(s, 1).y(), y10 = chart.pixelFor(s, 2).y(), y100 = chart.pixelFor(s, 3).y();
    QVERIFY(y1 > y10 && y10 > y100);
    QVERIFY(std::abs((y1 - y10) - (y10 - y100)) <= 1);
    chart.setLogY(false);
    settle();
    const int l1 = chart.pixelFor(s, 1).y(), l10 = chart.pixelFor(s, 2).y(), l100 = chart.pixelFor(s, 3).y();
    QVERIFY((l1 - l10) * 5 < (l10 - l100));  // linear again
  }

  // A roofline's axes: log10 on both, decades evenly spaced, at least two decades shown; a bound
  // series (no markers) and points named one by one in the hover readout.
  void log10AxesBoundsAndPointLabels() {
    ChartView chart;
    chart.setLogXBase10(true);
    chart.setLogY(true);
    const int roof = chart.addSeries(QStringLiteral("roof"));
    chart.setSeriesStyle(roof, ChartView::SeriesStyle::Bound);
    QCOMPARE(chart.seriesStyle(roof), ChartView::SeriesStyle::Bound);
    chart.setSeriesData(roof, {0.5, 5, 500}, {10, 100, 100});
    const int steps = chart.addSeries(QStringLiteral("decode"));
    chart.setSeriesStyle(steps, ChartView::SeriesStyle::Points);
    chart.setSeriesData(steps, {1, 10}, {15, 60});
    chart.setPointLabels(steps, {QStringLiteral("decode batch 1"), QStringLiteral("decode batch 8")});
    showChart(chart);
    const int x1 = chart.pixelFor(steps, 0).x(), x10 = chart.pixelFor(steps, 1).x();
    const int x05 = chart.pixelFor(roof, 0).x(), x5 = chart.pixelFor(roof, 1).x();
    QVERIFY(x1 >= 0 && x10 > x1);
    QVERIFY(std::abs((x10 - x1) - (x5 - x05)) <= 1);  // a decade is a decade anywhere
    QVERIFY2(chart.readoutAt(chart.pixelFor(steps, 1)).startsWith(QStringLiteral("decode batch 8: ")),
             qPrintable(chart.readoutAt(chart.pixelFor(steps, 1))));
    chart.clearSeries(steps);
    chart.setSeriesData(steps, {1}, {15});
    QVERIFY(
        chart.readoutAt(chart.pixelFor(steps, 0)).startsWith(QStringLiteral("decode: ")));  // labels cleared
    QVERIFY(!isUniform(chart.renderImage(640, 360, 1.0)));
  }

  void log2AxisSpacesPowersEvenly() {
    ChartView chart;
    chart.setAxisLabels(QStringLiteral("batch size"), QStringLiteral("tokens/s"));
    chart.setLogXBase2(true);
    const int s = chart.addSeries(QStringLiteral("throughput"));
    for (int x = 1; x <= 128; x *= 2) chart.append(s, x, 100.0 * std::sqrt(x));
    showChart(chart);
    QVector<int> xs;
    for (int i = 0; i < 8; ++i) {
      const QPoint p = chart.pixelFor(s, i);
      QVERIFY2(p.x() >= 0, qPrintable(QString::number(i)));
      xs << p.x();
    }
    const int step = xs[1] - xs[0];
    QVERIFY(step > 20);
    for (int i = 2; i < xs.size(); ++i) QVERIFY(std::abs((xs[i] - xs[i - 1]) - step) <= 1);
    QVERIFY(!isUniform(chart.renderImage(640, 360, 1.0)));

    // Back to linear: 1..128 no longer evenly spaced per doubling.
    chart.setLogXBase2(false);
    settle();
    QVERIFY(chart.pixelFor(s, 7).x() - chart.pixelFor(s, 6).x() >
            4 * (chart.pixelFor(s, 1).x() - chart.pixelFor(s, 0).x()));
  }

  void darkThemeExport() {
    ChartView chart;
    fillTypical(chart);
    chart.setTheme(ChartTheme::Dark);
    QCOMPARE(chart.theme(), ChartTheme::Dark);
    const QString path = file(QStringLiteral("dark.png"));
    QString error;
    QVERIFY2(chart.exportImage(path, &error), qPrintable(error));
    QImage image(path);
    QCOMPARE(image.size(), QSize(2560, 1440));
    const QColor corner = image.pixelColor(4, 4);
    QVERIFY2(corner.lightness() < 50, qPrintable(corner.name()));
    QCOMPARE(corner, QColor(0x1e, 0x1e, 0x1e));
    QVERIFY(!isUniform(image));

    chart.setTheme(ChartTheme::Light);
    QCOMPARE(chart.renderImage(320, 200, 1.0).pixelColor(2, 2), QColor(Qt::white));
  }

  void clearAllEmptiesEverything() {
    ChartView chart;
    fillTypical(chart);
    chart.setBars({QStringLiteral("a"), QStringLiteral("b")}, {1, 2}, QStringLiteral("p"));
    showChart(chart);
    const QPoint p = chart.pixelFor(0, 3);
    QVERIFY(!chart.readoutAt(p).isEmpty());

    chart.clearAll();
    QCOMPARE(chart.seriesCount(), 0);
    QCOMPARE(chart.seriesIndex(QStringLiteral("with KV cache")), -1);
    QVERIFY(chart.barLabels().isEmpty());
    QVERIFY(chart.barValues().isEmpty());
    QCOMPARE(chart.toCsv(), QStringLiteral("series,token index,latency (ms)\n"));
    QCOMPARE(chart.readoutAt(p), QString());
    // Titles and labels stay; the chart is usable again.
    QCOMPARE(chart.title(), QStringLiteral("Per-token latency, GPT-2 124M"));
    QCOMPARE(chart.footnote(), QStringLiteral("gpt2 · CPU · float32"));
    const int s = chart.addSeries(QStringLiteral("again"));
    QCOMPARE(s, 0);
    chart.append(s, 1, 1);
    QCOMPARE(chart.seriesPoints(s), (QVector<QPointF>{{1, 1}}));
  }

  void userZoomStopsAutoFitUntilRescale() {
    ChartView chart;
    const int s = chart.addSeries(QStringLiteral("s"));
    for (int i = 0; i <= 10; ++i) chart.append(s, i, i);
    showChart(chart);
    const QPoint before = chart.pixelFor(s, 5);
    QVERIFY(before.x() >= 0);

    // Auto-fit on append while the user has not touched the chart.
    chart.append(s, 20, 20);
    settle();
    QVERIFY(chart.pixelFor(s, 11).x() >= 0);
    const QPoint fitted = chart.pixelFor(s, 5);
    QVERIFY(fitted.x() < before.x());

    // Wheel zoom: the range is the user's now.
    QWidget* plot = plotWidget(chart);
    sendWheel(plot, plot->mapFrom(&chart, fitted), 1);
    settle();
    const QPoint zoomed = chart.pixelFor(s, 5);
    chart.append(s, 1000, 1000);
    settle();
    QCOMPARE(chart.pixelFor(s, 5), zoomed);
    QCOMPARE(chart.pixelFor(s, 12), QPoint(-1, -1));  // off screen: no refit

    chart.rescale();
    settle();
    QVERIFY(chart.pixelFor(s, 12).x() >= 0);
    chart.append(s, 2000, 5);
    settle();
    QVERIFY(chart.pixelFor(s, 13).x() >= 0);

    // A drag pans and also stops the auto-fit; the Fit button resumes it.
    const QPoint from = plot->mapFrom(&chart, chart.pixelFor(s, 13)) + QPoint(-200, -100);
    sendDrag(plot, from, from + QPoint(120, 40));
    settle();
    const QPoint panned = chart.pixelFor(s, 0);
    chart.append(s, 8000, 1);
    settle();
    QCOMPARE(chart.pixelFor(s, 0), panned);
    QCOMPARE(chart.pixelFor(s, 14), QPoint(-1, -1));
    auto* fit = chart.findChild<QToolButton*>(QStringLiteral("chartFitButton"));
    QVERIFY(fit);
    fit->click();
    settle();
    QVERIFY(chart.pixelFor(s, 14).x() >= 0);
  }

  void toolbarButtons() {
    ChartView chart;
    for (const char* name : {"chartExportButton", "chartCopyButton", "chartFitButton"}) {
      QVERIFY2(chart.findChild<QToolButton*>(QLatin1String(name)), name);
    }
  }

  void exportDoesNotDisturbTheWidget() {
    ChartView chart;
    fillTypical(chart);
    showChart(chart);
    const QPoint before = chart.pixelFor(1, 4);
    QVERIFY(before.x() >= 0);
    QString error;
    QVERIFY2(chart.exportImage(file(QStringLiteral("same.png")), &error), qPrintable(error));
    QCOMPARE(chart.pixelFor(1, 4), before);
    QVERIFY2(chart.exportImage(file(QStringLiteral("same.svg")), &error), qPrintable(error));
    QCOMPARE(chart.pixelFor(1, 4), before);
    chart.renderImage(300, 200, 1.0);
    QCOMPARE(chart.pixelFor(1, 4), before);
    QCOMPARE(chart.readoutAt(before), QStringLiteral("with KV cache: x = 4, y = 12.2"));
  }

  void emptyTitleLeavesNoGap() {
    ChartView plain;
    ChartView cleared;
    for (ChartView* chart : {&plain, &cleared}) {
      chart->append(chart->addSeries(QStringLiteral("s")), 0, 0);
      chart->append(0, 10, 10);
    }
    cleared.setTitle(QStringLiteral("A title"));
    cleared.setFootnote(QStringLiteral("a footnote"));
    showChart(plain);
    showChart(cleared);
    QVERIFY(cleared.pixelFor(0, 1).y() > plain.pixelFor(0, 1).y());  // the title row takes room
    cleared.setTitle(QString());
    cleared.setFootnote(QString());
    settle();
    QCOMPARE(cleared.pixelFor(0, 1), plain.pixelFor(0, 1));
    QCOMPARE(cleared.pixelFor(0, 0), plain.pixelFor(0, 0));
  }

  // Presenter mode: larger fonts and full-contrast text; a footnote part too wide for the chart at
  // those sizes breaks at its spaces instead of running off the chart's left edge.
  void presenterModeScalesAndWraps() {
    ChartView chart;
    fillTypical(chart);
    chart.setFootnote(
        QStringLiteral("a seven token prompt, ten new tokens, median of three runs each way · gpt2"));
    showChart(chart);
    const double points = chart.tickLabelFont().pointSizeF();
    chart.setPresenter(true);
    QVERIFY(chart.presenter());
    QVERIFY(chart.tickLabelFont().pointSizeF() >= points * 1.45);
    QCOMPARE(chart.tickLabelColor(), QColor(Qt::black));
    chart.resize(380, 420);
    settle();
    chart.grab();  // lays the chart out at its new size
    const QStringList lines = chart.footnoteAsDrawn().split(QLatin1Char('\n'));
    QVERIFY2(lines.size() >= 3, qPrintable(chart.footnoteAsDrawn()));  // the long part broke at spaces
    QCOMPARE(lines.join(QLatin1Char(' ')).remove(QStringLiteral(" ·")),
             chart.footnote().remove(QStringLiteral(" ·")));
    chart.setPresenter(false);
    QCOMPARE(chart.tickLabelFont().pointSizeF(), points);
  }

  void markersSurviveRescaleAndTheme() {
    ChartView chart;
    const int s = chart.addSeries(QStringLiteral("s"));
    for (int i = 5; i <= 10; ++i) chart.append(s, i, i);
    chart.addVerticalMarker(0, QStringLiteral("prefill"));
    showChart(chart);
    // The fit includes the marker, so x = 5 is well right of the left edge.
    const QImage withMarker = chart.renderImage(600, 400, 1.0);
    chart.setTheme(ChartTheme::Dark);
    chart.setTheme(ChartTheme::Light);
    chart.rescale();
    QCOMPARE(chart.renderImage(600, 400, 1.0), withMarker);
    chart.clearAll();
    chart.append(chart.addSeries(QStringLiteral("s")), 5, 5);
    chart.append(0, 10, 10);
    for (int i = 6; i < 10; ++i) chart.append(0, i, i);
    QVERIFY(chart.renderImage(600, 400, 1.0) != withMarker);  // marker gone, range from 5
  }

  // Not a check: writes sample charts for a person to look at (SERVELAB_CHART_DEMO_DIR=/tmp).
  void timelineCells() {
    using Cell = ChartView::Cell;
    using Style = ChartView::CellStyle;
    ChartView chart;
    chart.setTitle(QStringLiteral("Requests over scheduler steps"));
    chart.setAxisLabels(QStringLiteral("scheduler step"), QString());
    chart.setCellRows({QStringLiteral("slot 0"), QStringLiteral("slot 1")});
    chart.setCellKeys({{QStringLiteral("prefill"), QColor(Qt::red), Style::Solid},
                       {QStringLiteral("decode"), QColor(Qt::red), Style::Tint},
                       {QStringLiteral("padding"), QColor(Qt::gray), Style::Muted}});
    const QVector<Cell> cells = {
        {-0.5, 0.5, 0, QColor(Qt::red), Style::Solid, QString(), QStringLiteral("request 0 prefill")},
        {0.5, 20.5, 0, QColor(Qt::red), Style::Tint, QStringLiteral("#0"),
         QStringLiteral("request 0 decode")},
        {-0.5, 0.5, 1, QColor(Qt::blue), Style::Solid, QString(), QStringLiteral("request 1 prefill")},
        {0.5, 4.5, 1, QColor(Qt::blue), Style::Tint, QStringLiteral("#1"),
         QStringLiteral("request 1, \"decode\"")},
        {4.5, 20.5, 1, QColor(Qt::blue), Style::Muted, QString(), QStringLiteral("padding")}};
    chart.setCells(cells);
    QCOMPARE(chart.cells().size(), cells.size());
    QCOMPARE(chart.cells()[3].label, QStringLiteral("#1"));
    QCOMPARE(chart.cellRows(), (QStringList{QStringLiteral("slot 0"), QStringLiteral("slot 1")}));
    showChart(chart);

    // Slot 0 on top, later steps to the right; the readout tells what a cell is.
    const QPoint prefill0 = chart.cellPixelFor(0), prefill1 = chart.cellPixelFor(2);
    const QPoint padding = chart.cellPixelFor(4);
    QVERIFY(prefill0.x() >= 0 && prefill1.x() >= 0 && padding.x() >= 0);
    QVERIFY(prefill0.y() < prefill1.y());
    QVERIFY(padding.x() > prefill1.x());
    QCOMPARE(chart.readoutAt(prefill0), QStringLiteral("request 0 prefill"));
    QCOMPARE(chart.readoutAt(padding), QStringLiteral("padding"));
    QCOMPARE(chart.readoutAt(QPoint(1, 1)), QString());

    // CSV: a row per cell, labels and descriptions quoted as needed.
    const QVector<QStringList> csv = parseCsv(chart.toCsv());
    QCOMPARE(csv.size(), 1 + cells.size());
    QCOMPARE(csv[0], (QStringList{QStringLiteral("row"), QStringLiteral("start"), QStringLiteral("end"),
                                  QStringLiteral("label"), QStringLiteral("info")}));
    QCOMPARE(csv[4], (QStringList{QStringLiteral("slot 1"), QStringLiteral("0.5"), QStringLiteral("4.5"),
                                  QStringLiteral("#1"), QStringLiteral("request 1, \"decode\"")}));

    // Exports draw the cells and the legend of their styles.
    QString error;
    const QString png = file(QStringLiteral("timeline.png")), svgPath = file(QStringLiteral("timeline.svg"));
    QVERIFY2(chart.exportImage(png, &error), qPrintable(error));
    QVERIFY2(chart.exportImage(svgPath, &error), qPrintable(error));
    QImage image(png);
    QVERIFY(!image.isNull() && !isUniform(image));
    QFile f(svgPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray svg = f.readAll();
    QVERIFY(svg.contains("slot 1"));
    QVERIFY(svg.contains("padding"));
    QVERIFY(svg.contains("#0"));  // wide enough for its label
    QVERIFY(svg.contains("<clipPath id=\"plotArea\">"));

    // Live growth: a longer list replaces the cells; clearAll empties them but keeps the rows.
    QVector<Cell> more = cells;
    more.push_back({20.5, 30.5, 0, QColor(Qt::green), Style::Tint, QStringLiteral("#2"), QString()});
    chart.setCells(more);
    settle();
    QCOMPARE(chart.cells().size(), more.size());
    QVERIFY(chart.cellPixelFor(5).x() > padding.x());
    chart.clearAll();
    QVERIFY(chart.cells().isEmpty());
    QCOMPARE(chart.cellRows().size(), 2);
    // Leaving timeline mode gives an ordinary chart again.
    chart.setCellRows({});
    const int s = chart.addSeries(QStringLiteral("line"));
    chart.append(s, 1, 2);
    chart.append(s, 2, 3);
    settle();
    QCOMPARE(chart.readoutAt(chart.pixelFor(s, 1)), QStringLiteral("line: x = 2, y = 3"));
    QVERIFY(chart.pixelFor(s, 1).y() < chart.pixelFor(s, 0).y());  // the y axis points up again
  }

  void demoImages() {
    const QString out = qEnvironmentVariable("SERVELAB_CHART_DEMO_DIR");
    if (out.isEmpty()) QSKIP("set SERVELAB_CHART_DEMO_DIR to write sample charts");
    ChartView light;
    fillTypical(light);
    QString error;
    QVERIFY2(light.exportImage(QDir(out).filePath(QStringLiteral("chart_light.png")), &error),
             qPrintable(error));
    QVERIFY2(light.exportImage(QDir(out).filePath(QStringLiteral("chart_light.svg")), &error),
             qPrintable(error));
    QVERIFY2(light.exportImage(QDir(out).filePath(QStringLiteral("chart_light.pdf")), &error),
             qPrintable(error));

    // The widget as it shows on screen, with the hover readout over a point.
    light.resize(900, 560);
    light.show();
    QVERIFY(QTest::qWaitForWindowExposed(&light));
    settle();
    QWidget* plot = plotWidget(light);
    QTest::mouseMove(plot, plot->mapFrom(&light, light.pixelFor(0, 6)));
    settle();
    light.grab().save(QDir(out).filePath(QStringLiteral("chart_widget.png")));

    ChartView bars;
    bars.setTheme(ChartTheme::Dark);
    bars.setTitle(QStringLiteral("Next-token probabilities after \"The quick brown\""));
    bars.setFootnote(QStringLiteral("gpt2 · CPU · float32 · temperature 1.0"));
    bars.setAxisLabels(QStringLiteral("token"), QStringLiteral("probability"));
    bars.setBars({QStringLiteral(" fox"), QStringLiteral(" dog"), QStringLiteral(","), QStringLiteral("\n"),
                  QStringLiteral(" and"), QStringLiteral(" bear"), QStringLiteral("ish"),
                  QStringLiteral(" the"), QStringLiteral("-"), QStringLiteral(" cat")},
                 {0.412, 0.137, 0.061, 0.048, 0.033, 0.021, 0.018, 0.012, 0.009, 0.0072},
                 QStringLiteral("probability"));
    QVERIFY2(bars.exportImage(QDir(out).filePath(QStringLiteral("chart_bars_dark.png")), &error),
             qPrintable(error));
    bars.renderImage(560, 360, 1.0).save(QDir(out).filePath(QStringLiteral("chart_bars_small.png")));
    bars.setBars({QStringLiteral(" transformer"), QStringLiteral(" attention"), QStringLiteral("\n\n"),
                  QStringLiteral(" is all you need"), QStringLiteral("ization")},
                 {0.3, 0.2, 0.1, 0.05, 0.01}, QStringLiteral("probability"));
    bars.renderImage(560, 360, 1.0).save(QDir(out).filePath(QStringLiteral("chart_bars_long.png")));
    light.renderImage(560, 360, 1.0).save(QDir(out).filePath(QStringLiteral("chart_light_small.png")));

    ChartView log;
    log.setTitle(QStringLiteral("Throughput vs batch size"));
    log.setAxisLabels(QStringLiteral("batch size"), QStringLiteral("tokens/s"),
                      QStringLiteral("latency (ms)"));
    log.setLogXBase2(true);
    const int t = log.addSeries(QStringLiteral("throughput"));
    const int l = log.addSeries(QStringLiteral("latency"), ChartView::Axis::Right);
    for (int x = 1; x <= 128; x *= 2) {
      log.append(t, x, 90.0 * x / (1 + x / 32.0));
      log.append(l, x, 11.0 + 0.4 * x);
    }
    QVERIFY2(log.exportImage(QDir(out).filePath(QStringLiteral("chart_log.png")), &error), qPrintable(error));
  }
};

QTEST_MAIN(ChartViewTest)
#include "test_chart_view.moc"
