// The Roofline tab on the offscreen platform, on the tiny test model: a quick run draws this
// machine's roof (bandwidth slope, ridge, compute roof) from the measured limits and every step as
// a point at its intensity and achieved FLOP/s, coloured by kind and named by the hover readout;
// the limits are cached; bad sizes are refused by name; settings round-trip. No assertion depends
// on how long anything takes.
#include <QFile>
#include <QJsonArray>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QtWidgets>
#include <memory>

#include "chart_view.h"
#include "engine_controller.h"
#include "main_window.h"
#include "roofline_tab.h"
#include "tiny_model.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

}  // namespace

class TestRooflineTab : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString tiny_;

  std::unique_ptr<MainWindow> makeWindow(const QString& name) {
    auto w = std::make_unique<MainWindow>(
        std::make_unique<QSettings>(tmp_.filePath(name + QStringLiteral(".ini")), QSettings::IniFormat));
    w->show();
    return w;
  }
  std::unique_ptr<MainWindow> tinyWindow(const QString& name) {
    auto w = windowWithModel(tmp_.filePath(name + QStringLiteral(".ini")), tiny_, kLoadTimeoutMs);
    if (w) w->selectTab(QStringLiteral("roofline"));
    return w;
  }
  static RooflineTab* rooflineTab(MainWindow& w) {
    return qobject_cast<RooflineTab*>(w.tab(QStringLiteral("roofline")));
  }

 private Q_SLOTS:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(tmp_.isValid());
    tiny_ = tmp_.filePath(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_, 7);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  void runDrawsRoofAndSteps() {
    auto w = tinyWindow(QStringLiteral("run"));
    QVERIFY(w);
    RooflineTab* tab = rooflineTab(*w);
    QVERIFY(tab);
    const QString cache = tmp_.filePath(QStringLiteral("limits.json"));
    tab->setLimitsCachePath(cache);
    tab->setWorkload(QStringLiteral("8, 32"), QStringLiteral("1,4"), 16, 2);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasResult());
    QVERIFY(QFile::exists(cache));

    const servelab::RooflineResult& r = tab->result();
    QCOMPARE(r.points.size(), size_t(4));
    QVERIFY(r.machine.read_gb_s > 0);
    QVERIFY(r.machine.fp32_gflop_s > 0);

    ChartView* chart = tab->primaryChart();
    // The roof (and the int8 roof where our integer kernel runs), prefill, decode batch 1 and 4.
    QCOMPARE(chart->seriesCount(), r.machine.int8_gop_s > 0 ? 5 : 4);
    if (r.machine.int8_gop_s > 0) {
      const int int8 = chart->seriesIndex(RooflineTab::int8RoofSeriesName());
      QCOMPARE(chart->seriesStyle(int8), ChartView::SeriesStyle::DashedBound);
      QVERIFY(qFuzzyCompare(chart->seriesPoints(int8).last().y(), r.machine.int8_gop_s));
    }
    const int roof = chart->seriesIndex(RooflineTab::roofSeriesName());
    QCOMPARE(roof, 0);
    QCOMPARE(chart->seriesStyle(roof), ChartView::SeriesStyle::Bound);
    const QVector<QPointF> line = chart->seriesPoints(roof);
    QCOMPARE(line.size(), 3);
    // The slope is bandwidth x intensity up to the ridge; the roof is flat after it.
    QVERIFY(qFuzzyCompare(line[0].y(), r.machine.read_gb_s * line[0].x()));
    QVERIFY(qFuzzyCompare(line[1].x(), r.machine.ridge()));
    QVERIFY(qFuzzyCompare(line[1].y(), r.machine.fp32_gflop_s));
    QVERIFY(qFuzzyCompare(line[2].y(), r.machine.fp32_gflop_s));

    const int prefill = chart->seriesIndex(QStringLiteral("prefill"));
    QVERIFY(prefill > 0);
    QCOMPARE(chart->seriesStyle(prefill), ChartView::SeriesStyle::Points);
    const QVector<QPointF> pts = chart->seriesPoints(prefill);
    QCOMPARE(pts.size(), 2);
    QVERIFY(qFuzzyCompare(pts[0].x(), r.points[0].intensity()));  // 8 tokens: the lower intensity
    QVERIFY(qFuzzyCompare(pts[0].y(), r.points[0].flop_s() / 1e9));
    const int decode4 = chart->seriesIndex(QStringLiteral("decode batch 4"));
    QVERIFY(decode4 > 0);
    QCOMPARE(chart->seriesPoints(decode4).size(), 1);

    // Hover names the step.
    chart->resize(900, 600);
    chart->rescale();
    QCoreApplication::processEvents();
    const QPoint at = chart->pixelFor(decode4, 0);
    QVERIFY(at.x() >= 0);
    QVERIFY2(chart->readoutAt(at).startsWith(QStringLiteral("decode batch 4")),
             qPrintable(chart->readoutAt(at)));

    QVERIFY(tab->summaryText().contains(QStringLiteral("prefill 32 tokens")));
    const QJsonObject json = tab->lastResult();
    QCOMPARE(json[QStringLiteral("experiment")].toString(), QStringLiteral("roofline"));
    QCOMPARE(json[QStringLiteral("points")].toArray().size(), 4);
  }

  void refusesBadSizes() {
    auto w = makeWindow(QStringLiteral("bad"));
    RooflineTab* tab = rooflineTab(*w);
    QVERIFY(tab);
    tab->setWorkload(QStringLiteral("8, x"), QStringLiteral("1"), 8, 1);
    QVERIFY(!tab->run());
    QVERIFY2(tab->refusal().contains(QStringLiteral("prefill lengths")), qPrintable(tab->refusal()));
    tab->setWorkload(QStringLiteral("8"), QStringLiteral(""), 8, 1);
    QVERIFY(!tab->run());
    QVERIFY2(tab->refusal().contains(QStringLiteral("decode batches")), qPrintable(tab->refusal()));
  }

  void settingsRoundTrip() {
    QSettings s(tmp_.filePath(QStringLiteral("rt.ini")), QSettings::IniFormat);
    {
      auto w = makeWindow(QStringLiteral("rt-a"));
      RooflineTab* tab = rooflineTab(*w);
      tab->setWorkload(QStringLiteral("16, 64"), QStringLiteral("2, 16"), 24, 3);
      tab->saveSettings(s);
    }
    auto w = makeWindow(QStringLiteral("rt-b"));
    RooflineTab* tab = rooflineTab(*w);
    tab->loadSettings(s);
    QSettings check(tmp_.filePath(QStringLiteral("rt-check.ini")), QSettings::IniFormat);
    tab->saveSettings(check);
    check.beginGroup(QStringLiteral("roofline"));
    QCOMPARE(check.value(QStringLiteral("prefillLengths")).toString(), QStringLiteral("16, 64"));
    QCOMPARE(check.value(QStringLiteral("decodeBatches")).toString(), QStringLiteral("2, 16"));
    QCOMPARE(check.value(QStringLiteral("decodeContext")).toInt(), 24);
    QCOMPARE(check.value(QStringLiteral("decodeSteps")).toInt(), 3);
  }
};

QTEST_MAIN(TestRooflineTab)
#include "test_roofline_tab.moc"
