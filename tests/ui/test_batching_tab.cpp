// The Batching tab end to end on the offscreen platform: the course's padded tensors in its tables
// (built-in model, real GPT-2 tokenizer), the batch sweep's live chart against its result and its
// roofline, exports, settings and the scripted --tab batching --run mode; also that both batching
// tabs are registered. The Continuous batching tab has its own suite (test_continuous_tab). No
// assertion depends on how long anything takes.
#include <QJsonArray>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTest>
#include <QtWidgets>
#include <memory>
#include <vector>

#include "batching_tab.h"
#include "batching_tabs_fixture.h"
#include "chart_view.h"
#include "engine_controller.h"
#include "job_spy.h"
#include "main_window.h"
#include "roofline_check.h"

using namespace servelab::ui;

class TestBatchingTab : public QObject, private BatchingTabsFixture {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() { initTiny(); }

  void tabsAreRegistered() {
    auto w = makeWindow(QStringLiteral("ids"));
    QVERIFY(w->tabIds().contains(QStringLiteral("batching")));
    QVERIFY(w->tabIds().contains(QStringLiteral("continuous")));
    QCOMPARE(w->tab(QStringLiteral("batching"))->title(), QStringLiteral("Batching"));
    QCOMPARE(w->tab(QStringLiteral("continuous"))->title(), QStringLiteral("Continuous batching"));
    QVERIFY(w->selectTab(QStringLiteral("continuous")));
    QCOMPARE(w->currentTab()->primaryChart()->objectName(), QStringLiteral("continuousGantt"));
  }

  void paddedTablesShowTheCourseTensors() {
    auto w = makeWindow(QStringLiteral("padding"));
    auto* tab = qobject_cast<BatchingTab*>(w->tab(QStringLiteral("batching")));
    QVERIFY(tab);
    w->selectTab(QStringLiteral("batching"));
    QSignalSpy padded(tab, &BatchingTab::paddingUpdated);
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadDemo();  // the real GPT-2 tokenizer
    QVERIFY(ready.wait(kLoadTimeoutMs));
    QVERIFY(padded.size() > 0 || padded.wait(kRunTimeoutMs));
    QVERIFY2(tab->hasPadded(), qPrintable(tab->padError()));

    const QVector<QVector<qint64>> ids = {{464, 2068, 7586, 21831, 11687, 625, 262},
                                          {50256, 50256, 464, 6290, 287, 8602, 8953},
                                          {50256, 50256, 50256, 2061, 2058, 510, 1276}};
    const QVector<QVector<qint64>> mask = {
        {1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1, 1}, {0, 0, 0, 1, 1, 1, 1}};
    const QVector<QVector<qint64>> pos = {
        {0, 1, 2, 3, 4, 5, 6}, {1, 1, 0, 1, 2, 3, 4}, {1, 1, 1, 0, 1, 2, 3}};
    const std::pair<const char*, const QVector<QVector<qint64>>*> expected[] = {
        {"batchingInputIds", &ids}, {"batchingAttentionMask", &mask}, {"batchingPositionIds", &pos}};
    for (const auto& [name, values] : expected) {
      auto* table = tab->findChild<QTableWidget*>(QLatin1String(name));
      QVERIFY2(table, name);
      QCOMPARE(table->rowCount(), 3);
      QCOMPARE(table->columnCount(), 7);
      for (int r = 0; r < 3; ++r) {
        for (int c = 0; c < 7; ++c) {
          const QTableWidgetItem* item = table->item(r, c);
          QVERIFY(item);
          QCOMPARE(item->text(), QString::number((*values)[r][c]));
          // Padding looks different: a background, muted italic text and a tooltip that says so.
          const bool pad = mask[r][c] == 0;
          QCOMPARE(item->background().style() != Qt::NoBrush, pad);
          QCOMPARE(item->font().italic(), pad);
          QCOMPARE(item->toolTip().contains(QStringLiteral("padding")), pad);
        }
      }
    }
    auto* inputIds = tab->findChild<QTableWidget*>(QStringLiteral("batchingInputIds"));
    QVERIFY2(inputIds->item(0, 2)->toolTip().contains(QStringLiteral("\u2423brown")),
             qPrintable(inputIds->item(0, 2)->toolTip()));
    QVERIFY(inputIds->item(1, 0)->background().color() != inputIds->item(1, 2)->background().color());
    QVERIFY(tab->findChild<QLabel*>(QStringLiteral("batchingPadCaption"))
                ->text()
                .contains(QStringLiteral("50256")));

    // Editing the prompts refreshes the tables (after a short pause in typing).
    QSignalSpy again(tab, &BatchingTab::paddingUpdated);
    auto* editor = tab->findChild<QPlainTextEdit*>(QStringLiteral("batchingPrompts"));
    editor->setPlainText(QStringLiteral("Hello\n\nThe rain in Spain falls mainly"));
    QVERIFY(again.wait(kRunTimeoutMs));
    QCOMPARE(inputIds->rowCount(), 2);  // the blank line is skipped
    const int columns = inputIds->columnCount();
    QCOMPARE(static_cast<size_t>(columns), tab->padded().input_ids.front().size());
    QVERIFY(columns > 1);
    QCOMPARE(inputIds->item(0, columns - 1)->text(), QStringLiteral("15496"));  // "Hello", right-aligned
    QCOMPARE(inputIds->item(0, 0)->text(), QStringLiteral("50256"));
    QVERIFY(inputIds->item(0, 0)->font().italic());
    QVERIFY(!inputIds->item(1, 0)->font().italic());
    auto* positions = tab->findChild<QTableWidget*>(QStringLiteral("batchingPositionIds"));
    QCOMPARE(positions->item(0, columns - 1)->text(), QStringLiteral("0"));
    QCOMPARE(positions->item(0, 0)->text(), QStringLiteral("1"));
    // No prompt at all: the caption says why there is no batch.
    QSignalSpy empty(tab, &BatchingTab::paddingUpdated);
    editor->setPlainText(QStringLiteral("  \n"));
    QVERIFY(empty.wait(kRunTimeoutMs));
    QVERIFY(!tab->hasPadded());
    QCOMPARE(inputIds->rowCount(), 0);
  }

  void batchSweepDrawsOnePointPerBatchSize() {
    auto w = tinyWindow(QStringLiteral("sweep"));
    QVERIFY(w);
    auto* tab = qobject_cast<BatchingTab*>(w->tab(QStringLiteral("batching")));
    w->selectTab(QStringLiteral("batching"));
    // Sizes that do not parse are refused before the engine is asked.
    tab->setBatchSizes(QStringLiteral("0, 2"));
    QVERIFY(!tab->run());
    QVERIFY(tab->summaryText().contains(QStringLiteral("Cannot run")));
    QVERIFY(!w->engine()->isBusy());

    tab->setBatchSizes(QStringLiteral("1, 2,4"));
    tab->setNewTokens(3);
    tab->setRepeats(1);
    JobSpy points(w->engine(), &EngineJob::point);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QCOMPARE(points.size(), 2 * 3);  // throughput and latency per batch size, streamed live
    const servelab::BatchSweepResult& r = tab->result();
    QCOMPARE(r.points.size(), size_t(3));
    ChartView* chart = tab->primaryChart();
    const int throughput = chart->seriesIndex(QStringLiteral("throughput (tokens/ms)"));
    const int latency = chart->seriesIndex(QStringLiteral("latency (ms per step)"));
    QVERIFY(throughput >= 0 && latency >= 0);
    const QVector<QPointF> t = chart->seriesPoints(throughput), l = chart->seriesPoints(latency);
    QCOMPARE(t.size(), 3);
    QCOMPARE(l.size(), 3);
    const qint64 sizes[] = {1, 2, 4};
    for (int i = 0; i < 3; ++i) {
      QCOMPARE(r.points[size_t(i)].batch_size, sizes[i]);
      QCOMPARE(t[i].x(), double(sizes[i]));
      QCOMPARE(t[i].y(), r.points[size_t(i)].tokens_per_ms);
      QCOMPARE(l[i].x(), double(sizes[i]));
      QCOMPARE(l[i].y(), r.points[size_t(i)].step_ms);
    }
    auto* table = tab->findChild<QTableWidget*>(QStringLiteral("batchingPoints"));
    QCOMPARE(table->rowCount(), 3);
    QCOMPARE(table->item(2, 0)->text(), QStringLiteral("4"));
    QVERIFY(tab->summaryText().contains(QStringLiteral("throughput")));
    const QJsonObject report = tab->lastResult();
    QCOMPARE(report[QStringLiteral("points")].toArray().size(), 3);
    QVERIFY(report.contains(QStringLiteral("padded")));

    // The sweep chart exports like every chart.
    QString error;
    for (const char* suffix : {"png", "svg"}) {
      const QString path = tmp_.filePath(QStringLiteral("sweep.%1").arg(QLatin1String(suffix)));
      QVERIFY2(chart->exportImage(path, &error), qPrintable(error));
      QVERIFY(readAll(path).size() > 1000);
    }
    QVERIFY(readAll(tmp_.filePath(QStringLiteral("sweep.svg"))).contains("throughput"));

    // Behind it, the roofline: each batch size's prefill and decode step under the machine's roof;
    // a bigger batch's decode moves right (the same weights read for more rows).
    auto* roofline = tab->findChild<RooflineChart*>(QStringLiteral("batchingRooflineChart"));
    QVERIFY(roofline);
    QVERIFY(tab->charts().contains(roofline));
    std::vector<servelab::RooflinePoint> steps;
    for (const servelab::BatchSweepPoint& p : r.points) steps.insert(steps.end(), {p.prefill, p.decode});
    const QString mismatch = servelab::ui::test::roofline_mismatch(*roofline, steps);
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    QVERIFY(r.points[2].decode.intensity() > 2 * r.points[0].decode.intensity());
  }

  void settingsPersist() {
    {
      auto w = makeWindow(QStringLiteral("persist"));
      auto* batching = qobject_cast<BatchingTab*>(w->tab(QStringLiteral("batching")));
      batching->setPrompts({QStringLiteral("One"), QStringLiteral("Two prompts")});
      batching->setBatchSizes(QStringLiteral("1,8"));
      w->close();
    }
    auto w = makeWindow(QStringLiteral("persist"));
    auto* batching = qobject_cast<BatchingTab*>(w->tab(QStringLiteral("batching")));
    QCOMPARE(batching->prompts(), (QStringList{QStringLiteral("One"), QStringLiteral("Two prompts")}));
    QCOMPARE(batching->batchSizes(), (QVector<qint64>{1, 8}));
  }

  void scriptedRunsExitZero_data() {
    QTest::addColumn<QString>("tab");
    QTest::newRow("batching") << QStringLiteral("batching");
  }
  void scriptedRunsExitZero() {
    QFETCH(QString, tab);
    QJsonObject r;
    QByteArray chart;
    runScripted(tab, &r, &chart);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(r[QStringLiteral("points")].toArray().size(), 2);
    QCOMPARE(r[QStringLiteral("padded")].toObject()[QStringLiteral("input_ids")].toArray().size(), 3);
  }
};

QTEST_MAIN(TestBatchingTab)
#include "test_batching_tab.moc"
