// The Continuous batching tab end to end on the offscreen platform (the tiny model): the Gantt
// timeline of every method against the scheduler's per-request result, the comparison table, paged
// KV's block pool against the block tables at every step, the presets (how many fit, a shared
// system prompt, a long prompt's chunked prefill), preemption and prefix-hit marks, Stop, the course
// benchmark, exports, settings and the scripted --tab continuous --run mode. No assertion depends on
// how long anything takes.
#include <QImage>
#include <QJsonArray>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTest>
#include <QtWidgets>
#include <algorithm>
#include <memory>

#include "batch_timeline.h"
#include "batching_tabs_fixture.h"
#include "chart_view.h"
#include "continuous/kv_memory_view.h"
#include "continuous_tab.h"
#include "engine_controller.h"
#include "job_spy.h"
#include "main_window.h"
#include "text_format.h"

using namespace servelab::ui;
using Cell = ChartView::Cell;
using Style = ChartView::CellStyle;

namespace {

// The cells of one request: those whose description names it.
QVector<Cell> cellsOf(const QVector<Cell>& cells, qint64 request) {
  const QString name = QStringLiteral("request #%1 ·").arg(request);
  QVector<Cell> out;
  for (const Cell& c : cells)
    if (c.info.startsWith(name)) out << c;
  std::sort(out.begin(), out.end(), [](const Cell& a, const Cell& b) { return a.x0 < b.x0; });
  return out;
}

QString cellsText(const QVector<Cell>& cells) {
  QStringList parts;
  for (const Cell& c : cells)
    parts << QStringLiteral("[%1, %2] row %3 style %4").arg(c.x0).arg(c.x1).arg(c.row).arg(int(c.style));
  return parts.join(QStringLiteral("; "));
}

// Per block of a paged step: the requests whose block tables hold it (ascending), from the
// scheduler's snapshot; and which blocks are cached but unused.
QVector<QVector<qint64>> holdersOf(const servelab::BatchStep& s) {
  QVector<QVector<qint64>> h(static_cast<int>(s.kv_blocks_total));
  for (const servelab::KvBlockTable& t : s.kv_block_tables)
    for (int64_t b : t.blocks)
      if (!h[static_cast<int>(b)].contains(t.request)) h[static_cast<int>(b)] << t.request;
  for (QVector<qint64>& v : h) std::sort(v.begin(), v.end());
  return h;
}
QVector<bool> cachedOf(const servelab::BatchStep& s) {
  QVector<bool> c(static_cast<int>(s.kv_blocks_total), false);
  for (int64_t b : s.kv_cached_blocks) c[static_cast<int>(b)] = true;
  return c;
}

// The comparison table's cell for a figure (its row header) and a method column.
QString tableCell(QTableWidget* table, const QString& figure, int column) {
  for (int row = 0; row < table->rowCount(); ++row)
    if (table->verticalHeaderItem(row) && table->verticalHeaderItem(row)->text() == figure)
      return table->item(row, column) ? table->item(row, column)->text() : QString();
  return QStringLiteral("<no row %1>").arg(figure);
}

}  // namespace

class TestContinuousTab : public QObject, private BatchingTabsFixture {
  Q_OBJECT
  static ContinuousTab* continuousTab(MainWindow& w) {
    return qobject_cast<ContinuousTab*>(w.tab(QStringLiteral("continuous")));
  }
  static void smallQueue(ContinuousTab* tab) {
    tab->setRequests(6);
    tab->setMaxBatch(2);
    tab->setLongEvery(3);
    tab->setLongTokens(8);
    tab->setShortTokens(3);
  }

  // Every request's cells lie on one row (its slot; the course's merge/filter renumbers its rows as
  // requests leave, so there the first free row), cover its steps from admission to leaving
  // without a gap, and start with exactly one prefill cell; no two cells of a row overlap.
  static void checkTimelineMatches(const QVector<Cell>& cells, const servelab::BatchRunResult& run) {
    const bool rowIsSlot = run.method != "continuous (merge/filter)";
    int prefills = 0;
    for (const Cell& c : cells) prefills += c.style == Style::Solid || c.style == Style::Cached ? 1 : 0;
    QCOMPARE(prefills, static_cast<int>(run.requests.size()));
    for (const servelab::RequestResult& r : run.requests) {
      const QVector<Cell> mine = cellsOf(cells, r.id);
      QVERIFY2(!mine.isEmpty(), qPrintable(QStringLiteral("no cells for request %1").arg(r.id)));
      QCOMPARE(mine.front().x0, r.admitted_step - 0.5);
      QCOMPARE(mine.back().x1, r.finished_step + 0.5);
      QCOMPARE(mine.front().style, Style::Solid);
      QCOMPARE(mine.front().x1, r.admitted_step + 0.5);
      if (rowIsSlot) QCOMPARE(mine.front().row, static_cast<int>(r.slot));
      for (qsizetype i = 0; i < mine.size(); ++i) {
        QCOMPARE(mine[i].row, mine.front().row);
        if (i > 0) QVERIFY2(mine[i].x0 == mine[i - 1].x1, qPrintable(cellsText(mine)));
        if (i > 0) QVERIFY(mine[i].style != Style::Solid);
      }
    }
    checkNoOverlap(cells);
  }
  static void checkNoOverlap(const QVector<Cell>& cells) {
    QVector<Cell> sorted = cells;
    std::sort(sorted.begin(), sorted.end(),
              [](const Cell& a, const Cell& b) { return a.row != b.row ? a.row < b.row : a.x0 < b.x0; });
    for (qsizetype i = 1; i < sorted.size(); ++i)
      if (sorted[i].row == sorted[i - 1].row)
        QVERIFY2(sorted[i].x0 >= sorted[i - 1].x1,
                 qPrintable(QStringLiteral("overlap on row %1: %2")
                                .arg(sorted[i].row)
                                .arg(cellsText({sorted[i - 1], sorted[i]}))));
  }

 private Q_SLOTS:
  void initTestCase() { initTiny(); }

  void continuousRunDrawsTheGantt() {
    auto w = tinyWindow(QStringLiteral("gantt"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    smallQueue(tab);
    tab->setNaive(true);
    // A timeline of our own from the live events, one per run, to compare with the results.
    QVector<BatchTimeline> live;
    EngineController* e = w->engine();
    onEveryJob(e, &EngineJob::batchRunStarted, this, [&](const QString& m, qint64 n, qint64 s) {
      live.push_back({});
      live.back().start(m, n, s);
    });
    onEveryJob(e, &EngineJob::batchAdmitted, this,
               [&](qint64 r, qint64 slot, qint64 step, double) { live.back().admit(r, slot, step); });
    onEveryJob(e, &EngineJob::batchToken, this,
               [&](qint64 r, int, const QString&, qint64 step, double) { live.back().token(r, step); });
    onEveryJob(e, &EngineJob::batchRetired, this,
               [&](const servelab::RequestResult& r) { live.back().retire(r); });
    onEveryJob(e, &EngineJob::batchStep, this, [&](const servelab::BatchStep& s) { live.back().step(s); });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(!tab->run());  // one run at a time
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasResult());
    const servelab::SyncVsContinuousResult& r = tab->result();
    QCOMPARE(r.methods.size(), size_t(3));
    QCOMPARE(r.runs.size(), size_t(3));
    QVERIFY(r.same_tokens);
    QCOMPARE(live.size(), 3);

    // A timeline per method; each drawn Gantt matches that method's per-request result.
    QCOMPARE(tab->timelineNames(),
             (QStringList{QStringLiteral("synchronous"), QStringLiteral("continuous (slot KV)"),
                          QStringLiteral("continuous (merge/filter)")}));
    QCOMPARE(tab->shownTimeline(), 1);  // continuous batching first
    ChartView* gantt = tab->primaryChart();
    for (int m = 0; m < 3; ++m) {
      tab->showTimeline(m);
      QCOMPARE(tab->shownTimeline(), m);
      QVERIFY(gantt->title().contains(QString::fromStdString(r.runs[size_t(m)].method)));
      QCOMPARE(gantt->cellRows().size(), 2);
      const QVector<Cell> cells = gantt->cells();
      checkTimelineMatches(cells, r.runs[size_t(m)]);
      if (QTest::currentTestFailed()) return;
      // What was drawn live equals what the result gives.
      const QVector<Cell> fromLive = live[m].cells();
      QCOMPARE(fromLive.size(), cells.size());
      for (qsizetype i = 0; i < cells.size(); ++i) {
        QCOMPARE(fromLive[i].x0, cells[i].x0);
        QCOMPARE(fromLive[i].x1, cells[i].x1);
        QCOMPARE(fromLive[i].row, cells[i].row);
        QCOMPARE(fromLive[i].style, cells[i].style);
      }
      QCOMPARE(live[m].occupancy(), tab->drawnTimeline().occupancy());
      // Padding only where a synchronous batch waits for its longest request.
      const bool padded =
          std::any_of(cells.begin(), cells.end(), [](const Cell& c) { return c.style == Style::Muted; });
      QCOMPARE(padded, m == 0);
    }
    // Synchronous: request 1 (3 tokens) shares its batch with request 0 (8 tokens) and pads until it ends.
    tab->showTimeline(0);
    const QVector<Cell> request1 = cellsOf(gantt->cells(), 1);
    QCOMPARE(request1.back().style, Style::Muted);
    QCOMPARE(request1.back().x0, r.runs[0].requests[1].admitted_step + 3 - 0.5);
    QVERIFY(tab->streamText().contains(QStringLiteral("#5 ")));

    // Occupancy per step and latency per request, a series per method.
    auto* occupancy = w->findChild<ChartView*>(QStringLiteral("continuousOccupancy"));
    auto* latency = w->findChild<ChartView*>(QStringLiteral("continuousLatency"));
    for (size_t m = 0; m < 3; ++m) {
      const QString name = QString::fromStdString(r.methods[m].method);
      const QVector<QPointF> occ = occupancy->seriesPoints(occupancy->seriesIndex(name));
      QCOMPARE(occ.size(), static_cast<qsizetype>(r.runs[m].steps.size()));
      for (const QPointF& p : occ) QVERIFY(p.y() >= 1 && p.y() <= 2);
      const QVector<QPointF> lat = latency->seriesPoints(latency->seriesIndex(name));
      QCOMPARE(lat.size(), 6);
      for (int i = 0; i < 6; ++i) QCOMPARE(lat[i].y(), r.methods[m].latency_ms[size_t(i)]);
    }

    // Methods side by side.
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("continuousComparison"));
    QCOMPARE(table->columnCount(), 3);
    QCOMPARE(table->horizontalHeaderItem(0)->text(), QStringLiteral("synchronous"));
    QCOMPARE(table->horizontalHeaderItem(1)->text(), QStringLiteral("continuous\n(slot KV)"));
    QCOMPARE(table->rowCount(), 17);
    QCOMPARE(table->item(2, 0)->text(), QStringLiteral("1.00×"));  // speed-up of synchronous over itself
    QCOMPARE(table->item(9, 1)->text(), QString::number(r.methods[1].inference_calls));
    for (int row = 0; row < table->rowCount(); ++row)
      for (int c = 0; c < 3; ++c) QVERIFY(table->item(row, c) && !table->item(row, c)->text().isEmpty());
    QVERIFY(tab->summaryText().contains(QStringLiteral("same tokens")));
    QCOMPARE(tab->lastResult()[QStringLiteral("methods")].toArray().size(), 3);

    // The Gantt exports like every chart.
    QString error;
    for (const char* suffix : {"png", "svg"}) {
      const QString path = tmp_.filePath(QStringLiteral("gantt.%1").arg(QLatin1String(suffix)));
      QVERIFY2(gantt->exportImage(path, &error), qPrintable(error));
      QVERIFY(readAll(path).size() > 1000);
    }
    QVERIFY(!QImage(tmp_.filePath(QStringLiteral("gantt.png"))).isNull());
    QVERIFY(readAll(tmp_.filePath(QStringLiteral("gantt.svg"))).contains("slot 1"));
  }

  // Paged KV in the tab: the KV memory view shows, at every step, exactly the block tables the
  // scheduler recorded (checked live, one step behind, and at the last step from the result);
  // the snapshot agrees with the step's own block counters; the prefix cache is visible.
  void pagedRunShowsTheBlockPool() {
    auto w = tinyWindow(QStringLiteral("paged"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    smallQueue(tab);
    tab->setPromptTokens(12, 12);  // equal prompts: their full blocks are shared or cached
    tab->setNaive(false);
    tab->setPaged(true, 4, 0, true);
    QCOMPARE(tab->params().paged, true);
    QCOMPARE(tab->params().kv_block_size, int64_t{4});
    const KvMemoryView& view = tab->kvMemoryView();
    QVector<servelab::BatchStep> paged;
    int checkedLive = 0;
    onEveryJob(w->engine(), &EngineJob::batchStep, this, [&](const servelab::BatchStep& s) {
      // This handler runs before the tab's: the view shows the previous paged step.
      if (!paged.isEmpty() && view.step() == paged.back().step) {
        if (view.holders() == holdersOf(paged.back()) && view.cachedUnused() == cachedOf(paged.back()))
          ++checkedLive;
      }
      if (s.kv_blocks_total > 0) paged << s;
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    const servelab::SyncVsContinuousResult& r = tab->result();
    QCOMPARE(r.methods.size(), size_t(3));
    QVERIFY(r.same_tokens);
    const servelab::BatchRunResult& run = r.runs.back();
    QCOMPARE(static_cast<size_t>(paged.size()), run.steps.size());
    QCOMPARE(checkedLive, static_cast<int>(paged.size()) - 1);
    bool shared = false, cachedUnused = false;
    for (qsizetype i = 0; i < paged.size(); ++i) {
      const servelab::BatchStep& s = paged[i];
      QCOMPARE(holdersOf(s), holdersOf(run.steps[static_cast<size_t>(i)]));
      const QVector<QVector<qint64>> h = holdersOf(s);
      const QVector<bool> c = cachedOf(s);
      int held = 0, cached = 0;
      for (qsizetype b = 0; b < h.size(); ++b) {
        QVERIFY(!(c[b] && !h[b].isEmpty()));  // a cached-unused block has no holder
        held += h[b].isEmpty() ? 0 : 1;
        cached += c[b] ? 1 : 0;
        shared = shared || h[b].size() > 1;
      }
      cachedUnused = cachedUnused || cached > 0;
      QCOMPARE(held, static_cast<int>(s.kv_blocks_used));
      QCOMPARE(cached, static_cast<int>(s.kv_blocks_cached));
      for (const servelab::KvBlockTable& t : s.kv_block_tables)
        QVERIFY(std::find(s.retired.begin(), s.retired.end(), t.request) == s.retired.end());
    }
    QVERIFY(run.prefix_hit_tokens > 0);
    QVERIFY(shared);
    QVERIFY(cachedUnused);
    // After the run the paged run is shown, its pool at its fullest step (the first of the most
    // blocks held).
    const servelab::BatchStep* fullest = &run.steps.front();
    for (const servelab::BatchStep& s : run.steps)
      if (s.kv_blocks_used > fullest->kv_blocks_used) fullest = &s;
    QCOMPARE(tab->shownTimeline(), 2);
    QCOMPARE(view.step(), fullest->step);
    QCOMPARE(view.holders(), holdersOf(*fullest));
    QCOMPARE(view.cachedUnused(), cachedOf(*fullest));
    for (int b = 0; b < view.holders().size(); ++b)
      QVERIFY(view.describeBlock(b).startsWith(QStringLiteral("Block %1: ").arg(b)));
    // Another run's timeline has no blocks; choosing the paged one again brings them back.
    tab->showTimeline(1);
    QCOMPARE(view.step(), qint64{-1});
    tab->showTimeline(2);
    QCOMPARE(view.holders(), holdersOf(*fullest));
    // Settings keep the paged choice.
    QSettings saved(settingsPath(QStringLiteral("paged-saved")), QSettings::IniFormat);
    tab->setSlotsInBudget(true);
    tab->setPagedUncachedToo(true);
    tab->saveSettings(saved);
    tab->setPaged(false);
    tab->setSlotsInBudget(false);
    tab->setPagedUncachedToo(false);
    tab->loadSettings(saved);
    QCOMPARE(tab->params().paged, true);
    QCOMPARE(tab->params().slots_in_budget, true);
    QCOMPARE(tab->params().paged_uncached_too, true);
    QCOMPARE(tab->params().kv_block_size, int64_t{4});
  }

  // "How many requests fit in N MB?": the preset keeps the budget in the box, sets the course's mix
  // with slot KV held to that budget and no prefix caching, and runs; the summary line, the
  // comparison table and the KV utilisation chart show the engine's own figures.
  void presetHowManyFit() {
    auto w = tinyWindow(QStringLiteral("preset-fit"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    tab->setNaive(true);
    tab->setPaged(false, 4, 0, true);
    tab->applyPreset(ContinuousTab::Preset::FitInBudget);
    QCOMPARE(tab->params().kv_budget_mb, ContinuousTab::kPresetBudgetMb);  // 0 in the box: the default
    // The tiny model's KV is 512 bytes a position: 0.08 MB holds two slots of the longest request
    // (20 + 48 positions) and nine blocks of 16.
    tab->setPaged(true, 16, 0.08, true);
    tab->applyPreset(ContinuousTab::Preset::FitInBudget);
    const servelab::SyncVsContinuousParams p = tab->params();
    QCOMPARE(p.requests, int64_t{24});
    QCOMPARE(p.max_batch, int64_t{16});
    QCOMPARE(p.long_every, int64_t{6});
    QCOMPARE(p.long_tokens, int64_t{48});
    QCOMPARE(p.short_tokens, int64_t{8});
    QCOMPARE(p.prompt_tokens_min, int64_t{4});
    QCOMPARE(p.prompt_tokens_max, int64_t{20});
    QCOMPARE(p.naive, false);
    QCOMPARE(p.paged, true);
    QCOMPARE(p.kv_block_size, int64_t{16});
    QCOMPARE(p.kv_budget_mb, 0.08);
    QCOMPARE(p.prefix_caching, false);
    QCOMPARE(p.slots_in_budget, true);
    QCOMPARE(p.paged_uncached_too, false);

    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->runPreset(ContinuousTab::Preset::FitInBudget));
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    const servelab::SyncVsContinuousResult& r = tab->result();
    QCOMPARE(r.runs.size(), size_t{3});
    QVERIFY(r.same_tokens);
    const servelab::BatchRunResult& slot = r.runs[1];
    const servelab::BatchRunResult& paged = r.runs[2];
    QCOMPARE(slot.method, std::string("continuous (slot KV)"));
    QCOMPARE(paged.method, std::string("continuous (paged KV)"));
    QCOMPARE(slot.max_running, int64_t{2});
    QVERIFY(paged.max_running > slot.max_running);
    const QString line = QStringLiteral(
                             "In the same 0.08 MB of KV memory: slot KV held at most %1 requests at once, "
                             "paged KV %2.</b> Average batch %3 vs %4; paged KV preempted %5 times.")
                             .arg(slot.max_running)
                             .arg(paged.max_running)
                             .arg(slot.average_batch, 0, 'f', 2)
                             .arg(paged.average_batch, 0, 'f', 2)
                             .arg(paged.preemptions);
    QVERIFY2(tab->summaryText().contains(line), qPrintable(tab->summaryText()));
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("continuousComparison"));
    // Synchronous batching counts neither (its batch is max batch requests): a dash.
    QCOMPARE(tableCell(table, QStringLiteral("most requests at once"), 0), QStringLiteral("—"));
    QCOMPARE(tableCell(table, QStringLiteral("prefix-cache hits (tokens)"), 0), QStringLiteral("—"));
    for (int c = 0; c < 3; ++c) {
      const servelab::BatchRunResult& run = r.runs[static_cast<size_t>(c)];
      if (c > 0) {
        QCOMPARE(tableCell(table, QStringLiteral("most requests at once"), c),
                 QString::number(run.max_running));
        QCOMPARE(tableCell(table, QStringLiteral("preemptions"), c), QString::number(run.preemptions));
      }
      QCOMPARE(tableCell(table, QStringLiteral("average batch"), c),
               QString::number(run.average_batch, 'f', 2));
    }
    // Utilisation over time: one point per scheduler step of each continuous run, equal to its
    // snapshots (paged KV's blocks held are its held bytes over the block size).
    const ChartView& usage = tab->kvUsageChart();
    QCOMPARE(usage.seriesIndex(QStringLiteral("synchronous: held")), -1);
    for (const servelab::BatchRunResult* run : {&slot, &paged}) {
      const QString m = QString::fromStdString(run->method);
      // The legend drops "continuous (...)" around the method: "paged KV: held".
      const QString shortName = m.mid(QStringLiteral("continuous (").size()).chopped(1);
      QCOMPARE(ContinuousTab::kvUsageSeries(m, false), shortName + QStringLiteral(": held"));
      const QVector<QPointF> held =
          usage.seriesPoints(usage.seriesIndex(shortName + QStringLiteral(": held")));
      const QVector<QPointF> used =
          usage.seriesPoints(usage.seriesIndex(shortName + QStringLiteral(": used")));
      QCOMPARE(held.size(), static_cast<qsizetype>(run->steps.size()));
      QCOMPARE(used.size(), static_cast<qsizetype>(run->steps.size()));
      for (size_t i = 0; i < run->steps.size(); ++i) {
        const servelab::BatchStep& s = run->steps[i];
        QCOMPARE(held[static_cast<qsizetype>(i)].x(), static_cast<double>(s.step));
        QCOMPARE(held[static_cast<qsizetype>(i)].y(),
                 static_cast<double>(s.kv_reserved_bytes) / (1024.0 * 1024.0));
        QCOMPARE(used[static_cast<qsizetype>(i)].y(),
                 static_cast<double>(s.kv_used_bytes) / (1024.0 * 1024.0));
      }
    }
    QCOMPARE(usage.seriesCount(), 4);
    // Its many preemptions leave no two cells on one row of the paged run's Gantt.
    tab->showTimeline(2);
    checkNoOverlap(tab->primaryChart()->cells());
    // The exported result carries the same counts.
    const QJsonArray runs = tab->lastResult()[QStringLiteral("runs")].toArray();
    QCOMPARE(runs[2].toObject()[QStringLiteral("max_running")].toInteger(), paged.max_running);
  }

  // "Shared system prompt": prompts that share 128 tokens, paged KV without and with prefix caching;
  // the hits in tokens and both median TTFTs come from the result.
  void presetSharedSystemPrompt() {
    auto w = tinyWindow(QStringLiteral("preset-shared"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    tab->setNaive(true);
    tab->setPaged(false, 4, 3, false);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->runPreset(ContinuousTab::Preset::SharedSystemPrompt));
    const servelab::SyncVsContinuousParams p = tab->params();
    QCOMPARE(p.requests, int64_t{16});
    QCOMPARE(p.max_batch, int64_t{4});
    QCOMPARE(p.prompt_tokens_min, int64_t{128});
    QCOMPARE(p.prompt_tokens_max, int64_t{160});
    QVERIFY(QString::fromStdString(p.prompt).startsWith(QStringLiteral("You are a careful assistant")));
    QCOMPARE(p.naive, false);
    QCOMPARE(p.paged, true);
    QCOMPARE(p.kv_block_size, int64_t{16});
    QCOMPARE(p.kv_budget_mb, 0.0);
    QCOMPARE(p.prefix_caching, true);
    QCOMPARE(p.paged_uncached_too, true);
    QCOMPARE(p.slots_in_budget, false);
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    const servelab::SyncVsContinuousResult& r = tab->result();
    QCOMPARE(r.runs.size(), size_t{4});
    QVERIFY(r.same_tokens);
    const servelab::BatchRunResult& uncached = r.runs[2];
    const servelab::BatchRunResult& cached = r.runs[3];
    QCOMPARE(uncached.method, std::string("continuous (paged KV, no prefix cache)"));
    QCOMPARE(cached.method, std::string("continuous (paged KV + prefix cache)"));
    QCOMPARE(uncached.prefix_hit_tokens, int64_t{0});
    QVERIFY(cached.prefix_hit_tokens >= 12 * 112);  // every request after the first 4 hits 7 blocks or more
    const QString line =
        QStringLiteral(
            "Prefix cache: %1 of %2 prompt tokens were hits</b> (without it: 0); median "
            "time to first token %3 → %4 ms.")
            .arg(cached.prefix_hit_tokens)
            .arg(cached.prompt_tokens)
            .arg(formatMsCoarse(r.methods[2].ttft_p50), formatMsCoarse(r.methods[3].ttft_p50));
    QVERIFY2(tab->summaryText().contains(line), qPrintable(tab->summaryText()));
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("continuousComparison"));
    QCOMPARE(table->horizontalHeaderItem(3)->text(), QStringLiteral("continuous\n(paged KV + prefix cache)"));
    QCOMPARE(tableCell(table, QStringLiteral("prefix-cache hits (tokens)"), 3),
             QStringLiteral("%1 / %2").arg(cached.prefix_hit_tokens).arg(cached.prompt_tokens));
    QCOMPARE(tableCell(table, QStringLiteral("TTFT p50 (ms)"), 2), formatMsCoarse(r.methods[2].ttft_p50));
    QCOMPARE(tab->timelineNames().size(), 4);
    QCOMPARE(tab->timelineNames()[2], QStringLiteral("continuous (paged KV, no prefix cache)"));
    // On the Gantt, the cached run's prefills are hatched where the cache served part of the prompt,
    // the hover text giving the result's count; the uncached run has none.
    tab->showTimeline(3);
    const QVector<Cell> cells = tab->primaryChart()->cells();
    int hits = 0;
    for (const servelab::RequestResult& rr : cached.requests) {
      const QVector<Cell> mine = cellsOf(cells, rr.id);
      QVERIFY(!mine.isEmpty());
      QCOMPARE(mine.front().style, rr.cached_tokens > 0 ? Style::Cached : Style::Solid);
      if (rr.cached_tokens > 0) {
        ++hits;
        QVERIFY2(mine.front().info.contains(
                     QStringLiteral("%1 of its %2 prompt tokens came from the prefix cache: only %3 computed")
                         .arg(rr.cached_tokens)
                         .arg(rr.prompt_ids.size())
                         .arg(static_cast<qint64>(rr.prompt_ids.size()) - rr.cached_tokens)),
                 qPrintable(mine.front().info));
      }
    }
    QVERIFY(hits >= 12);
    tab->showTimeline(2);
    for (const Cell& c : tab->primaryChart()->cells()) QVERIFY(c.style != Style::Cached);
  }

  // Chunked prefill: streams decoding when a long prompt arrives, without and with a token budget.
  // Both ways give the same tokens; with the budget the long prompt runs in several chunks, each a
  // Gantt cell in the step that computed it; the ITL chart has a point per stream gap both ways.
  void presetLongPromptChunksThePrefill() {
    auto w = tinyWindow(QStringLiteral("preset-long"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    tab->setTokenBudget(32);
    QVERIFY(tab->presetIds().contains(QStringLiteral("long-prompt")));
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->runPresetId(QStringLiteral("long-prompt")));
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasLongPromptResult());
    const servelab::ChunkedPrefillResult& r = tab->longPromptResult();
    QVERIFY(r.same_tokens);
    QCOMPARE(r.chunked.budget, int64_t{32});
    QCOMPARE(r.unchunked.chunks, int64_t{1});
    QVERIFY2(r.chunked.chunks > 1, qPrintable(QString::number(r.chunked.chunks)));
    const int64_t streams = r.params.streams, longId = streams;
    for (const servelab::BatchStep& s : r.run_chunked.steps) {
      int64_t tokens = s.decode_tokens;
      for (const servelab::PrefillChunk& c : s.chunks) tokens += c.count;
      QVERIFY(tokens <= 32);
    }
    const ChartView& itl = tab->itlChart();
    QCOMPARE(itl.seriesCount(), 2);
    QCOMPARE(itl.seriesPoints(0).size(),
             static_cast<qsizetype>(servelab::stream_gaps(r.run_unchunked, streams).size()));
    QCOMPARE(itl.seriesPoints(1).size(),
             static_cast<qsizetype>(servelab::stream_gaps(r.run_chunked, streams).size()));
    QVERIFY2(tab->summaryText().contains(QStringLiteral("longest gap between tokens")),
             qPrintable(tab->summaryText()));
    QCOMPARE(tab->timelineNames().size(), 2);
    QCOMPARE(tab->shownTimeline(), 1);
    int chunkCells = 0;
    for (const Cell& c : cellsOf(tab->primaryChart()->cells(), longId))
      if (c.info.contains(QStringLiteral("of its prompt, positions"))) ++chunkCells;
    QCOMPARE(chunkCells, static_cast<int>(r.chunked.chunks));
    tab->showTimeline(0);
    for (const Cell& c : cellsOf(tab->primaryChart()->cells(), longId))
      QVERIFY(!c.info.contains(QStringLiteral("of its prompt, positions")));
    // An unknown preset is refused by name, listing the ones there are.
    QVERIFY(!tab->runPresetId(QStringLiteral("no-such-preset")));
    QVERIFY2(tab->refusal().contains(QStringLiteral("long-prompt")), qPrintable(tab->refusal()));
  }

  // A KV budget too small for three requests at once: paged KV preempts the latest admitted one; its
  // bar stops at that step with a crossed-out mark (the hover text says so) and resumes when it is
  // admitted again, on the live timeline and on the one rebuilt from the result alike.
  void preemptionIsMarkedOnTheGantt() {
    auto w = tinyWindow(QStringLiteral("preempt"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    smallQueue(tab);
    tab->setPromptTokens(12, 12);
    tab->setNaive(false);
    tab->setMaxBatch(3);
    // 512 bytes a position: 0.02 MB holds 9 blocks of 4 positions. Three 12-token prompts take all 9
    // at admission, and the first decode needs a fourth block each.
    tab->setPaged(true, 4, 0.02, false);
    // The same events the tab gets, into a timeline of the test's own: the last run's is paged KV's.
    BatchTimeline live;
    onEveryJob(w->engine(), &EngineJob::batchRunStarted, this,
               [&](const QString& m, qint64 n, qint64 slots) { live.start(m, n, slots); });
    onEveryJob(w->engine(), &EngineJob::batchAdmitted, this,
               [&](qint64 id, qint64 slot, qint64 step, double) { live.admit(id, slot, step); });
    onEveryJob(w->engine(), &EngineJob::batchToken, this,
               [&](qint64 id, int, const QString&, qint64 step, double) { live.token(id, step); });
    onEveryJob(w->engine(), &EngineJob::batchRetired, this,
               [&](const servelab::RequestResult& rr) { live.retire(rr); });
    onEveryJob(w->engine(), &EngineJob::batchStep, this, [&](const servelab::BatchStep& s) { live.step(s); });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    const servelab::SyncVsContinuousResult& r = tab->result();
    QVERIFY(r.same_tokens);
    const servelab::BatchRunResult& run = r.runs.back();
    QVERIFY(run.preemptions > 0);
    QCOMPARE(tab->shownTimeline(), 2);
    const QVector<Cell> cells = tab->primaryChart()->cells();
    int marks = 0;
    for (const servelab::BatchStep& s : run.steps)
      for (int64_t id : s.preempted) {
        const QVector<Cell> mine = cellsOf(cells, id);
        const auto mark = std::find_if(mine.begin(), mine.end(), [&](const Cell& c) {
          return c.style == Style::Preempted && c.x0 <= s.step && c.x1 == s.step + 0.5;
        });
        QVERIFY2(mark != mine.end(), qPrintable(cellsText(mine)));
        QVERIFY(mark->info.contains(QStringLiteral("preempted at step %1").arg(s.step)));
        ++marks;
      }
    QCOMPARE(marks, static_cast<int>(run.preemptions));
    for (const servelab::RequestResult& rr : run.requests) {
      const QVector<Cell> mine = cellsOf(cells, rr.id);
      QCOMPARE(static_cast<int64_t>(std::count_if(mine.begin(), mine.end(),
                                                  [](const Cell& c) { return c.style == Style::Preempted; })),
               rr.preemptions);
      QCOMPARE(mine.back().x1, rr.finished_step + 0.5);  // it still finishes, on its last run's row
    }
    const auto marksOf = [](const QVector<Cell>& all) {
      QStringList out;
      for (const Cell& c : all)
        if (c.style == Style::Preempted)
          out << QStringLiteral("%1 %2").arg(c.x0).arg(c.info.section(u'·', 0, 0));
      out.sort();
      return out;
    };
    QCOMPARE(live.method(), QStringLiteral("continuous (paged KV)"));
    QCOMPARE(marksOf(live.cells()), marksOf(cells));
    checkNoOverlap(cells);
    checkNoOverlap(live.cells());
    // Every admission, readmissions included, starts on the row of the slot the engine gave it, on
    // both timelines: the result keeps each admission's slot, not only the first.
    const QVector<Cell> liveCells = live.cells();
    int readmissions = 0, movedSlot = 0;
    for (const servelab::RequestResult& rr : run.requests) {
      QCOMPARE(static_cast<int64_t>(rr.admissions.size()), rr.preemptions + 1);
      QCOMPARE(rr.admissions.front().step, rr.admitted_step);
      QCOMPARE(rr.admissions.front().slot, rr.slot);
      for (const servelab::RequestAdmission& a : rr.admissions) {
        const auto startsAt = [&](const Cell& c) { return c.x0 == a.step - 0.5; };
        const QVector<Cell> rebuiltMine = cellsOf(cells, rr.id), liveMine = cellsOf(liveCells, rr.id);
        const auto rebuilt = std::find_if(rebuiltMine.begin(), rebuiltMine.end(), startsAt);
        const auto seen = std::find_if(liveMine.begin(), liveMine.end(), startsAt);
        QVERIFY2(rebuilt != rebuiltMine.end() && seen != liveMine.end(), qPrintable(cellsText(rebuiltMine)));
        QCOMPARE(rebuilt->row, static_cast<int>(a.slot));
        QCOMPARE(seen->row, static_cast<int>(a.slot));
      }
      readmissions += static_cast<int>(rr.admissions.size()) - 1;
      for (const servelab::RequestAdmission& a : rr.admissions) movedSlot += a.slot != rr.slot ? 1 : 0;
    }
    QVERIFY(readmissions > 0);
    QVERIFY2(movedSlot > 0, "the workload should readmit some request into another slot than its first");
  }

  // A readmission into another slot than the first free row (the engine's choice, whatever its
  // policy): the rebuilt timeline puts it where the live one does, on the slot that admission got.
  void readmissionKeepsItsSlotWhenRebuilt() {
    servelab::BatchRunResult run;
    run.method = "continuous (paged KV)";
    run.requests.resize(2);
    for (int64_t id : {0, 1}) {
      servelab::RequestResult& r = run.requests[static_cast<size_t>(id)];
      r.id = id;
      r.prompt_ids = {1, 2, 3};
      r.finish_reason = "length";
      r.slot = id;
      r.admitted_step = 0;
    }
    // Request 0: slot 0 at step 0, preempted at step 2, readmitted at step 3 into slot 1 although
    // slot 0 is free then; request 1: slot 1 at step 0, finished at step 1.
    run.requests[0].generated_ids = {5, 6, 7, 8, 9};
    run.requests[0].preemptions = 1;
    run.requests[0].finished_step = 3;
    run.requests[0].admissions = {{0, 0}, {3, 1}};
    run.requests[1].generated_ids = {5, 6, 7};
    run.requests[1].finished_step = 1;
    run.requests[1].admissions = {{0, 1}};
    run.steps.resize(4);
    for (int64_t s = 0; s < 4; ++s) run.steps[static_cast<size_t>(s)].step = s;
    run.steps[0].admitted = {0, 1};
    run.steps[1].retired = {1};
    run.steps[2].preempted = {0};
    run.steps[3].admitted = {0};
    run.steps[3].retired = {0};
    BatchTimeline live;
    live.start(QString::fromStdString(run.method), 2, 2);
    live.admit(0, 0, 0);
    live.admit(1, 1, 0);
    for (qint64 id : {0, 0, 1, 1}) live.token(id, 0);
    live.step(run.steps[0]);
    live.token(0, 1);
    live.token(1, 1);
    live.retire(run.requests[1]);
    live.step(run.steps[1]);
    live.step(run.steps[2]);
    live.admit(0, 1, 3);
    live.token(0, 3);
    live.token(0, 3);
    live.retire(run.requests[0]);
    live.step(run.steps[3]);
    const BatchTimeline rebuilt = BatchTimeline::fromResult(run);
    for (const BatchTimeline* t : {static_cast<const BatchTimeline*>(&live), &rebuilt}) {
      const QVector<Cell> mine = cellsOf(t->cells(), 0);
      const auto readmission =
          std::find_if(mine.begin(), mine.end(), [](const Cell& c) { return c.x0 == 2.5; });
      QVERIFY2(readmission != mine.end(), qPrintable(cellsText(mine)));
      QCOMPARE(readmission->row, 1);
      QCOMPARE(mine.front().row, 0);
      QCOMPARE(mine.back().x1, 3.5);
    }
  }

  // Stop during the paged run: the view keeps the last step it was shown.
  void stopKeepsThePagedPool() {
    auto w = tinyWindow(QStringLiteral("paged-stop"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    tab->setRequests(16);
    tab->setMaxBatch(4);
    tab->setLongEvery(2);
    tab->setLongTokens(100);
    tab->setShortTokens(40);
    tab->setNaive(false);
    tab->setPaged(true, 4, 0, true);
    QVector<servelab::BatchStep> paged;
    onEveryJob(w->engine(), &EngineJob::batchStep, w.get(), [&](const servelab::BatchStep& s) {
      if (s.kv_blocks_total <= 0) return;
      paged << s;
      if (paged.size() == 5) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), false);
    QVERIFY(!tab->hasResult());
    QVERIFY(paged.size() >= 5);
    const KvMemoryView& view = tab->kvMemoryView();
    QCOMPARE(view.step(), paged.back().step);
    QCOMPARE(view.holders(), holdersOf(paged.back()));
    QCOMPARE(view.cachedUnused(), cachedOf(paged.back()));
  }

  void stopLeavesTheTabUsable() {
    auto w = tinyWindow(QStringLiteral("stop"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    tab->setRequests(64);  // far more work than the GUI needs to see five tokens and say stop
    tab->setMaxBatch(4);
    tab->setLongEvery(2);
    tab->setLongTokens(240);
    tab->setShortTokens(60);
    tab->setNaive(false);
    int tokens = 0;
    onEveryJob(w->engine(), &EngineJob::batchToken, w.get(), [&] {
      if (++tokens == 5) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), false);
    QVERIFY(!tab->isRunning());
    QVERIFY(!tab->hasResult());
    QVERIFY(tab->summaryText().contains(QStringLiteral("Stopped")));
    QVERIFY(w->errorText().isEmpty());
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    QVERIFY(!tab->primaryChart()->cells().isEmpty());  // how far it got stays drawn
    QVERIFY(tab->findChild<QPushButton*>(QStringLiteral("continuousRun"))->isEnabled());
    QVERIFY(tab->findChild<QPushButton*>(QStringLiteral("continuousCourseRun"))->isEnabled());

    // A second run completes.
    smallQueue(tab);
    QSignalSpy again(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(again.wait(kRunTimeoutMs));
    QVERIFY2(again.front().at(0).toBool(), qPrintable(again.front().at(1).toString()));
    QVERIFY(tab->hasResult());
    QCOMPARE(tab->timelineNames().size(), 2);
    checkTimelineMatches(tab->primaryChart()->cells(), tab->result().runs[1]);
  }

  void courseBenchmarkFillsItsTable() {
    auto w = tinyWindow(QStringLiteral("seed"));
    QVERIFY(w);
    ContinuousTab* tab = continuousTab(*w);
    w->selectTab(QStringLiteral("continuous"));
    tab->setCourseQueries(6);
    tab->setCourseNewTokens(4);
    tab->setCourseMaxBatch(3);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    auto* button = tab->findChild<QPushButton*>(QStringLiteral("continuousCourseRun"));
    QVERIFY(button && button->isEnabled());
    button->click();
    QVERIFY(tab->isRunning());
    QVERIFY(!button->isEnabled());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasCourseResult());
    const servelab::CourseBenchmarkResult& r = tab->courseResult();
    QVERIFY(r.same_tokens);
    QCOMPARE(r.rows.size(), size_t(2));
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("continuousCourseTable"));
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->columnCount(), 8);
    for (int row = 0; row < 2; ++row) {
      QCOMPARE(table->item(row, 1)->text(), QStringLiteral("6"));
      QCOMPARE(table->item(row, 6)->text(), QString::number(r.rows[size_t(row)].tokens));
      QCOMPARE(table->item(row, 7)->text(), QString::number(r.rows[size_t(row)].inference_calls));
    }
    QVERIFY(table->item(0, 0)->text().startsWith(QStringLiteral("baseline")));
    QCOMPARE(r.rows[1].tokens, 6 * 4);
    // Its batched run streamed into the Gantt: one prefill per query, on three slots.
    QVERIFY(tab->timelineNames().back().startsWith(QStringLiteral("course benchmark")));
    const QVector<Cell> cells = tab->primaryChart()->cells();
    QCOMPARE(std::count_if(cells.begin(), cells.end(), [](const Cell& c) { return c.style == Style::Solid; }),
             6);
    QCOMPARE(tab->primaryChart()->cellRows().size(), 3);
    QVERIFY(tab->lastResult().contains(QStringLiteral("course_benchmark")));
  }

  void settingsPersist() {
    {
      auto w = makeWindow(QStringLiteral("persist"));
      ContinuousTab* c = continuousTab(*w);
      c->setRequests(12);
      c->setArrivalRate(2.5);
      c->setPromptTokens(3, 9);
      c->setCourseQueries(7);
      w->close();
    }
    auto w = makeWindow(QStringLiteral("persist"));
    const servelab::SyncVsContinuousParams p = continuousTab(*w)->params();
    QCOMPARE(p.requests, 12);
    QCOMPARE(p.arrival_rate, 2.5);
    QCOMPARE(p.prompt_tokens_min, 3);
    QCOMPARE(p.prompt_tokens_max, 9);
    QCOMPARE(continuousTab(*w)->courseParams().queries, 7);
  }

  void scriptedRunsExitZero_data() {
    QTest::addColumn<QString>("tab");
    QTest::newRow("continuous") << QStringLiteral("continuous");
  }
  void scriptedRunsExitZero() {
    QFETCH(QString, tab);
    QJsonObject r;
    QByteArray chart;
    runScripted(tab, &r, &chart);
    if (QTest::currentTestFailed()) return;
    QCOMPARE(r[QStringLiteral("methods")].toArray().size(), 2);
    QCOMPARE(r[QStringLiteral("same_tokens")].toBool(), true);
    QVERIFY(chart.contains("slot 1"));
  }
};

QTEST_MAIN(TestContinuousTab)
#include "test_continuous_tab.moc"
