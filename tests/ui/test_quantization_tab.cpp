// The Quantization tab end to end on the offscreen platform, on the tiny test model (32 wide, so
// int4 uses groups of 32): a run fills the memory chart, the speed chart, the table, the error
// charts and the greedy text from each mode's result; the greedy view marks exactly the differing
// tokens; dequantize-once shows fp32's bytes resident again; Stop, a refused combination, settings
// and the scripted --tab/--run mode. No assertion depends on how long anything takes.
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QtWidgets>
#include <memory>

#include "chart_view.h"
#include "engine_controller.h"
#include "job_spy.h"
#include "main_window.h"
#include "quantization_tab.h"
#include "roofline_check.h"
#include "tiny_model.h"
#include "util/cpu_features.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

// The token spans of one table row of greedyComparisonHtml: (position, is it marked as differing).
QVector<QPair<int, bool>> spansOfRow(const QString& html, int row) {
  const QStringList rows = html.split(QStringLiteral("<tr>"));
  QVector<QPair<int, bool>> out;
  if (row + 1 >= rows.size()) return out;
  static const QRegularExpression span(QStringLiteral("<span class=\"(tok|diff)\" title=\"token (\\d+): id"));
  for (auto it = span.globalMatch(rows[row + 1]); it.hasNext();) {
    const auto m = it.next();
    out.append({m.captured(2).toInt(), m.captured(1) == QLatin1String("diff")});
  }
  return out;
}

double mb(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

}  // namespace

class TestQuantizationTab : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString tiny_;
  QString settingsPath(const QString& name) { return tmp_.filePath(name + QStringLiteral(".ini")); }

  std::unique_ptr<MainWindow> makeWindow(const QString& settingsName) {
    auto w = std::make_unique<MainWindow>(
        std::make_unique<QSettings>(settingsPath(settingsName), QSettings::IniFormat));
    w->show();
    return w;
  }
  std::unique_ptr<MainWindow> tinyWindow(const QString& settingsName) {
    auto w = windowWithModel(settingsPath(settingsName), tiny_, kLoadTimeoutMs);
    if (w) w->selectTab(QStringLiteral("quantization"));
    return w;
  }
  static QuantizationTab* quantTab(MainWindow& w) {
    return qobject_cast<QuantizationTab*>(w.tab(QStringLiteral("quantization")));
  }
  // A quick run: few tokens, one repeat, small speed workloads.
  static void quick(QuantizationTab* tab) {
    tab->setNewTokens(6);
    tab->setRepeats(1);
    tab->setSpeedWorkload(4, 4, 3);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    tiny_ = tmp_.filePath(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  void tabIsRegistered() {
    auto w = makeWindow(QStringLiteral("ids"));
    QVERIFY(w->tabIds().contains(QStringLiteral("quantization")));
    QCOMPARE(w->tab(QStringLiteral("quantization"))->title(), QStringLiteral("Quantization"));
    QVERIFY(w->selectTab(QStringLiteral("quantization")));
    QCOMPARE(w->currentTab()->primaryChart()->objectName(), QStringLiteral("quantMemoryChart"));
    QCOMPARE(w->currentTab()->charts().size(), 5);  // memory, speed, histogram, per block, roofline
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("quantExplanation"))
                ->text()
                .contains(QStringLiteral("zero point")));
  }

  void greedyHtmlMarksExactlyTheDifferingPositions() {
    servelab::GreedyComparison g;
    g.prompt = "Tom & <Jerry>";
    g.reference_tokens = {10, 11, 12, 13, 14};
    g.reference_pieces = {"\u2423a", "b", "<c>", "d", "e&"};
    g.tokens = {10, 11, 99, 13, 98, 97};  // longer than fp32's: the extra token differs too
    g.pieces = {"\u2423a", "b", "X", "d", "<i>", "\\n"};
    QCOMPARE(differingPositions(g), (QVector<int>{2, 4, 5}));
    const QString html = greedyComparisonHtml(g, QStringLiteral("int4-g32"), false);
    const QVector<QPair<int, bool>> fp32 = spansOfRow(html, 0), mode = spansOfRow(html, 1);
    QCOMPARE(fp32.size(), 5);
    QCOMPARE(mode.size(), 6);
    for (int k = 0; k < 5; ++k) {
      QCOMPARE(fp32[k].first, k);
      QCOMPARE(fp32[k].second, k == 2 || k == 4);
    }
    for (int k = 0; k < 6; ++k) {
      QCOMPARE(mode[k].first, k);
      QCOMPARE(mode[k].second, k == 2 || k == 4 || k == 5);
    }
    // Everything escaped; the open box of a leading space is a space again.
    QVERIFY(html.contains(QStringLiteral("Tom &amp; &lt;Jerry&gt;")));
    QVERIFY(html.contains(QStringLiteral("&lt;c&gt;")));
    QVERIFY(html.contains(QStringLiteral("&lt;i&gt;")));
    QVERIFY(html.contains(QStringLiteral("e&amp;")));
    QVERIFY(!html.contains(QStringLiteral("<i>")));
    QVERIFY(!html.contains(QStringLiteral("<Jerry>")));
    QVERIFY(html.contains(QStringLiteral("id 10\"> a</span>")));
    QVERIFY(!html.contains(QChar(0x2423)));
    QVERIFY(html.contains(QStringLiteral("differs from token 2")));

    // Identical continuations: nothing marked.
    g.tokens = g.reference_tokens;
    g.pieces = g.reference_pieces;
    QVERIFY(differingPositions(g).isEmpty());
    const QString same = greedyComparisonHtml(g, QStringLiteral("fp16"), true);
    QVERIFY(!same.contains(QStringLiteral("class=\"diff\"")));
    QCOMPARE(spansOfRow(same, 1).size(), 5);
    QVERIFY(same.contains(QStringLiteral("same tokens as fp32")));
  }

  void runFillsChartsTableAndText() {
    auto w = tinyWindow(QStringLiteral("run"));
    QVERIFY(w);
    QuantizationTab* tab = quantTab(*w);
    tab->setModes({QStringLiteral("int8-channel"), QStringLiteral("int4-g32"), QStringLiteral("bf16")});
    QCOMPARE(tab->exec(), QStringLiteral("jit"));  // the default
    tab->setMeasureSpeed(true);
    quick(tab);
    JobSpy modes(w->engine(), &EngineJob::quantizationMode);
    JobSpy points(w->engine(), &EngineJob::point);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(tab->isRunning());
    QVERIFY(!tab->run());  // one run at a time
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasResult());
    const servelab::QuantizationResult& r = tab->result();
    QCOMPARE(r.modes.size(), size_t(4));
    QCOMPARE(modes.size(), 4);       // each mode arrived live, fp32 first
    QCOMPARE(points.size(), 2 * 4);  // decode ms and batch tokens/s per mode
    QCOMPARE(qvariant_cast<servelab::QuantModeResult>(modes.front().at(0)).mode, std::string("none"));
    const QStringList labels = {QStringLiteral("fp32"), QStringLiteral("int8-channel"),
                                QStringLiteral("int4-g32"), QStringLiteral("bf16")};

    // Memory: stacked bars equal to each mode's bytes, the resident bytes as marks, % of fp32 above.
    ChartView* memory = tab->primaryChart();
    QCOMPARE(memory->barLabels(), labels);
    QCOMPARE(memory->barSetCount(), 3);
    const QVector<QPointF> resident =
        memory->seriesPoints(memory->seriesIndex(QStringLiteral("resident while running")));
    QCOMPARE(resident.size(), 4);
    for (int i = 0; i < 4; ++i) {
      const servelab::QuantMemory& m = r.modes[size_t(i)].memory;
      QCOMPARE(memory->barSetValues(0)[i], mb(m.quantized_bytes));
      QCOMPARE(memory->barSetValues(1)[i], mb(m.state_bytes));
      QCOMPARE(memory->barSetValues(2)[i], mb(m.other_bytes));
      QCOMPARE(m.quantized_bytes + m.state_bytes + m.other_bytes, m.total_bytes);
      QCOMPARE(resident[i], QPointF(i + 1, mb(m.resident_bytes)));
    }
    QCOMPARE(memory->barAnnotations().front(), QStringLiteral("100%"));
    QVERIFY(r.modes[1].memory.total_bytes < r.modes[0].memory.total_bytes);
    QVERIFY(memory->barAnnotations()[2].endsWith(QLatin1Char('%')));

    // Speed: decode bars, throughput points, memory floors.
    auto* speed = w->findChild<ChartView*>(QStringLiteral("quantSpeedChart"));
    QCOMPARE(speed->barLabels(), labels);
    const QVector<double> decode = speed->barValues();
    const QVector<QPointF> tokens =
        speed->seriesPoints(speed->seriesIndex(QStringLiteral("batched tokens/s")));
    const QVector<QPointF> floors =
        speed->seriesPoints(speed->seriesIndex(QStringLiteral("memory floor (ms)")));
    QCOMPARE(tokens.size(), 4);
    QCOMPARE(floors.size(), 4);
    for (int i = 0; i < 4; ++i) {
      const servelab::QuantSpeed& s = *r.modes[size_t(i)].speed;
      QCOMPARE(decode[i], s.decode_ms);
      QCOMPARE(tokens[i], QPointF(i + 1, s.batch_tokens_per_s));
      QCOMPARE(floors[i], QPointF(i + 1, s.floor_ms));
    }
    // The roofline page: fp32's decode step and each quantized mode's, the same FLOPs over fewer
    // bytes for int8 and int4 (the point moves right).
    auto* roofline = tab->findChild<RooflineChart*>(QStringLiteral("quantRooflineChart"));
    QVERIFY(roofline && tab->charts().contains(roofline));
    std::vector<servelab::RooflinePoint> steps{r.modes[0].speed->fp32_decode};
    for (size_t i = 1; i < 4; ++i) steps.push_back(r.modes[i].speed->decode);
    const QString mismatch =
        servelab::ui::test::roofline_mismatch(*roofline, steps, [](const servelab::RooflinePoint& p) {
          return p.quant == "none" ? QStringLiteral("fp32") : QString::fromStdString(p.quant);
        });
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    for (size_t i : {size_t(1), size_t(2)}) {
      QCOMPARE(steps[i].flops, steps[0].flops);
      QVERIFY(steps[i].bytes < steps[0].bytes / 2);
    }

    // The table: a column per mode, fp32 first.
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("quantTable"));
    QCOMPARE(table->columnCount(), 4);
    for (int c = 0; c < 4; ++c) {
      QCOMPARE(table->horizontalHeaderItem(c)->text(), labels[c]);
      QCOMPARE(table->item(0, c)->text(), QString::fromStdString(r.modes[size_t(c)].exec));
      QCOMPARE(table->item(1, c)->text(), QString::fromStdString(r.modes[size_t(c)].kernel));
      for (int row = 0; row < table->rowCount(); ++row)
        QVERIFY(table->item(row, c) && !table->item(row, c)->text().isEmpty());
    }
    QCOMPARE(table->item(3, 0)->text(), QStringLiteral("100%"));  // of fp32
    QCOMPARE(table->item(8, 0)->text(), QStringLiteral("100%"));  // fp32 agrees with itself
    // Perplexity when the model is a checkpoint (the tiny one is, random as it is); fp32's in the tip.
    QVERIFY(r.fp32_perplexity.has_value());
    QCOMPARE(table->item(13, 1)->text(), QString::number(*r.modes[1].perplexity, 'f', 2));
    QVERIFY(table->item(13, 1)->toolTip().contains(QString::number(*r.fp32_perplexity, 'f', 2)));

    // Details: the first quantized mode, then another one picked.
    QCOMPARE(tab->detailMode(), 1);
    auto* histogram = w->findChild<ChartView*>(QStringLiteral("quantHistogram"));
    auto* blocks = w->findChild<ChartView*>(QStringLiteral("quantBlocks"));
    QVERIFY(histogram->logY());
    for (int mode : {1, 2}) {
      tab->showDetailMode(mode);
      QCOMPARE(tab->detailMode(), mode);
      const servelab::QuantModeResult& m = r.modes[size_t(mode)];
      const QVector<QPointF> bins = histogram->seriesPoints(0);
      QCOMPARE(bins.size(), static_cast<qsizetype>(m.histogram.counts.size()));
      int64_t total = 0;
      for (int k = 0; k < bins.size(); ++k) {
        QCOMPARE(bins[k].y(), static_cast<double>(m.histogram.counts[size_t(k)]));
        QVERIFY(bins[k].x() > m.histogram.lo && bins[k].x() < m.histogram.hi);
        total += m.histogram.counts[size_t(k)];
      }
      int64_t elements = 0;
      for (const servelab::TensorError& t : m.tensors) elements += t.numel;
      QCOMPARE(total, elements);  // every quantized weight is in one bin
      QStringList blockNames;
      for (const servelab::BlockError& b : m.blocks) blockNames << QString::fromStdString(b.block);
      QCOMPARE(blocks->barLabels(), blockNames);
      QCOMPARE(blockNames.mid(0, 4), (QStringList{QStringLiteral("wte"), QStringLiteral("wpe"),
                                                  QStringLiteral("h.0"), QStringLiteral("h.1")}));
      for (int b = 0; b < blocks->barLabels().size(); ++b)
        QCOMPARE(blocks->barValues()[b], m.blocks[size_t(b)].rel_rms * 100);
      QVERIFY(histogram->title().contains(QString::fromStdString(m.mode)));

      // The greedy text: every prompt, fp32 beside the mode, the differing tokens marked.
      const QString html = tab->greedyHtml();
      int marked = 0;
      for (const servelab::GreedyComparison& g : m.greedy) {
        QCOMPARE(g.pieces.size(), g.tokens.size());
        QVERIFY(html.contains(QString::fromStdString(g.prompt).toHtmlEscaped()));
        QVERIFY(html.contains(greedyComparisonHtml(g, QString::fromStdString(m.mode), false)));
        QVERIFY(!QString::fromStdString(g.pieces.front()).startsWith(QStringLiteral("\u0120")));
        marked += 2 * static_cast<int>(differingPositions(g).size());
      }
      QCOMPARE(static_cast<int>(html.count(QStringLiteral("class=\"diff\""))), marked);
    }
    // Clicking a mode's column shows that mode.
    table->setCurrentCell(4, 3);
    QCOMPARE(tab->detailMode(), 3);

    const QJsonObject report = tab->lastResult();
    QCOMPARE(report[QStringLiteral("experiment")].toString(), QStringLiteral("quantization"));
    QCOMPARE(report[QStringLiteral("modes")].toArray().size(), 4);
    QCOMPARE(report.contains(QStringLiteral("caveat")), !r.caveat.empty());

    // The primary chart exports.
    QString error;
    const QString png = tmp_.filePath(QStringLiteral("memory.png"));
    QVERIFY2(memory->exportImage(png, &error), qPrintable(error));
    QVERIFY(fileBytes(png).size() > 1000);
    QVERIFY(!QImage(png).isNull());
    // So do the others.
    for (ChartView* chart : tab->charts()) {
      const QString path = tmp_.filePath(chart->objectName() + QStringLiteral(".png"));
      QVERIFY2(chart->exportImage(path, &error), qPrintable(error));
      const QImage image(path);
      QCOMPARE(image.size(), QSize(2560, 1440));
    }
    const QString csv = memory->toCsv();
    QVERIFY(csv.contains(QStringLiteral("label,quantized values,")));
    QVERIFY(csv.contains(QStringLiteral("int4-g32,")));
  }

  void dequantizeOnceHoldsFp32Again() {
    auto w = tinyWindow(QStringLiteral("dequant"));
    QVERIFY(w);
    QuantizationTab* tab = quantTab(*w);
    tab->setModes({QStringLiteral("zp-uint8"), QStringLiteral("int8-channel")});
    tab->setExec(QStringLiteral("dequant-once"));
    tab->setMeasureSpeed(false);
    quick(tab);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    const servelab::QuantizationResult& r = tab->result();
    QCOMPARE(r.modes.size(), size_t(3));
    const QVector<QPointF> resident = tab->primaryChart()->seriesPoints(
        tab->primaryChart()->seriesIndex(QStringLiteral("resident while running")));
    QCOMPARE(resident.size(), 3);
    for (int i = 1; i < 3; ++i) {
      QCOMPARE(r.modes[size_t(i)].exec, std::string("dequant-once"));
      QVERIFY(r.modes[size_t(i)].memory.total_bytes < r.modes[0].memory.total_bytes);
      QCOMPARE(resident[i].y(), resident[0].y());  // stored smaller, resident as large as fp32
    }
    QVERIFY(tab->summaryText().contains(QStringLiteral("Dequantized once")));
    // No speed measured: the speed chart stays empty and the table says so.
    auto* speed = w->findChild<ChartView*>(QStringLiteral("quantSpeedChart"));
    for (double v : speed->barValues()) QVERIFY(!std::isfinite(v));
    QCOMPARE(w->findChild<QTableWidget*>(QStringLiteral("quantTable"))->item(9, 1)->text(),
             QStringLiteral("not measured"));
  }

  void jitInt8IsOfferedAndRuns() {
    // --quant-exec jit-int8 from the tab: int4-g32 runs with int8 activations, and the table's
    // execution and kernel rows say so.
    auto w = tinyWindow(QStringLiteral("jit-int8"));
    QVERIFY(w);
    QuantizationTab* tab = quantTab(*w);
    tab->setModes({QStringLiteral("int4-g32")});
    tab->setExec(QStringLiteral("jit-int8"));
    QCOMPARE(tab->exec(), QStringLiteral("jit-int8"));
    tab->setMeasureSpeed(false);
    quick(tab);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    const servelab::QuantizationResult& r = tab->result();
    QCOMPARE(r.modes.size(), size_t(2));
    QCOMPARE(r.modes[1].exec, std::string("jit-int8"));
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("quantTable"));
    QCOMPARE(table->item(0, 1)->text(), QStringLiteral("jit-int8"));
    if (servelab::active_isa() != servelab::Isa::Generic)
      QVERIFY2(table->item(1, 1)->text().contains(QStringLiteral("int8 activations")),
               qPrintable(table->item(1, 1)->text()));
  }

  void stopShowsStoppedAndASecondRunSucceeds() {
    auto w = tinyWindow(QStringLiteral("stop"));
    QVERIFY(w);
    QuantizationTab* tab = quantTab(*w);
    // Far more work after fp32's result than the GUI needs to see it and say stop.
    tab->setModes({QStringLiteral("zp-uint8"), QStringLiteral("int8-channel"), QStringLiteral("int4-g32"),
                   QStringLiteral("fp16"), QStringLiteral("bf16")});
    tab->setExec(QStringLiteral("jit"));
    tab->setMeasureSpeed(true);
    tab->setNewTokens(40);
    tab->setRepeats(8);
    tab->setSpeedWorkload(64, 16, 32);
    int arrived = 0;
    onEveryJob(w->engine(), &EngineJob::quantizationMode, w.get(), [&] {
      if (++arrived == 1) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), false);
    QVERIFY(!tab->isRunning());
    QVERIFY(!tab->hasResult());
    QCOMPARE(w->findChild<QProgressBar*>(QStringLiteral("quantProgress"))->format(),
             QStringLiteral("stopped"));
    QVERIFY(tab->summaryText().contains(QStringLiteral("Stopped")));
    QVERIFY(w->errorText().isEmpty());
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    // What was measured stays: fp32's bar and its column.
    QVERIFY(!tab->modeResults().isEmpty());
    QVERIFY(tab->modeResults().size() < 6);
    QCOMPARE(tab->primaryChart()->barSetValues(2).front(), mb(tab->modeResults().front().memory.other_bytes));
    QVERIFY(tab->findChild<QPushButton*>(QStringLiteral("quantRun"))->isEnabled());
    QVERIFY(!tab->findChild<QPushButton*>(QStringLiteral("quantStop"))->isEnabled());
    QCOMPARE(tab->lastResult()[QStringLiteral("experiment")].toString(), QStringLiteral("quantization"));

    // A second run completes.
    tab->setModes({QStringLiteral("fp16")});
    quick(tab);
    QSignalSpy again(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(again.wait(kRunTimeoutMs));
    QVERIFY2(again.front().at(0).toBool(), qPrintable(again.front().at(1).toString()));
    QVERIFY(tab->hasResult());
    QCOMPARE(tab->result().modes.size(), size_t(2));
    QCOMPARE(tab->primaryChart()->barLabels(), (QStringList{QStringLiteral("fp32"), QStringLiteral("fp16")}));
    QCOMPARE(w->findChild<QProgressBar*>(QStringLiteral("quantProgress"))->format(), QStringLiteral("done"));
  }

  void refusedCombinationShowsTheErrorAndTheTabStaysUsable() {
    auto w = tinyWindow(QStringLiteral("refused"));
    QVERIFY(w);
    QuantizationTab* tab = quantTab(*w);
    // Nothing chosen: refused before the engine is asked.
    tab->setModes({});
    QVERIFY(!tab->run());
    QVERIFY(tab->summaryText().contains(QStringLiteral("Cannot run")));
    QVERIFY(!w->engine()->isBusy());

    // The course's zero-point mode has no native kernel: the engine says so.
    tab->setModes({QStringLiteral("zp-uint8")});
    tab->setExec(QStringLiteral("native"));
    quick(tab);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), false);
    const QString message = done.front().at(1).toString();
    QVERIFY2(message.contains(QStringLiteral("native zp-uint8")), qPrintable(message));
    QVERIFY2(tab->summaryText().contains(QStringLiteral("Failed")), qPrintable(tab->summaryText()));
    QVERIFY(tab->summaryText().contains(QStringLiteral("native zp-uint8")));
    QCOMPARE(w->findChild<QProgressBar*>(QStringLiteral("quantProgress"))->format(),
             QStringLiteral("failed"));
    QVERIFY(w->errorText().contains(QStringLiteral("native zp-uint8")));
    QCOMPARE(tab->lastResult()[QStringLiteral("error")].toString(), message);
    QVERIFY(tab->findChild<QPushButton*>(QStringLiteral("quantRun"))->isEnabled());

    // int4 groups wider than the tiny model's rows are refused too, naming the problem.
    tab->setModes({QStringLiteral("int4-g64")});
    tab->setExec(QStringLiteral("jit"));
    QSignalSpy wide(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(wide.wait(kRunTimeoutMs));
    QCOMPARE(wide.front().at(0).toBool(), false);
    QVERIFY2(tab->summaryText().contains(QStringLiteral("divides by 64")), qPrintable(tab->summaryText()));

    // Then a good combination runs.
    tab->setModes({QStringLiteral("int8-channel")});
    tab->setMeasureSpeed(false);
    QSignalSpy ok(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(ok.wait(kRunTimeoutMs));
    QVERIFY2(ok.front().at(0).toBool(), qPrintable(ok.front().at(1).toString()));
    QCOMPARE(tab->result().modes.size(), size_t(2));
  }

  // Auto picks the native int4 kernel, whose packing wants the output rows in multiples of 16; the
  // tied lm_head of every GPT-2 vocabulary has 50257. A core bug (native_quant_available does not
  // check shapes), so the run fails; the tab shows the engine's message and stays usable.
  void autoInt4OnGpt2Vocabulary() {
    auto w = tinyWindow(QStringLiteral("auto-int4"));
    QVERIFY(w);
    QuantizationTab* tab = quantTab(*w);
    tab->setModes({QStringLiteral("int4-g32")});
    tab->setExec(QStringLiteral("auto"));
    tab->setMeasureSpeed(false);
    quick(tab);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    // Auto picks torch's native int4 kernel, whose packing needs a multiple of 16 rows; the engine
    // pads GPT-2's 50257-row LM head, so the run completes and the tab shows the native kernel.
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    const QJsonObject report = tab->lastResult();
    const QJsonArray modes = report.value(QStringLiteral("modes")).toArray();
    QCOMPARE(modes.size(), 2);
    QCOMPARE(modes.at(1).toObject().value(QStringLiteral("exec")).toString(), QStringLiteral("native"));
  }

  void settingsPersist() {
    {
      auto w = makeWindow(QStringLiteral("persist"));
      QuantizationTab* tab = quantTab(*w);
      tab->setModes({QStringLiteral("zp-uint8"), QStringLiteral("int4-g128"), QStringLiteral("fp16")});
      tab->setExec(QStringLiteral("dequant-once"));
      tab->setNewTokens(7);
      tab->setRepeats(2);
      tab->setMeasureSpeed(false);
      w->close();
    }
    {
      auto w = makeWindow(QStringLiteral("persist"));
      QuantizationTab* tab = quantTab(*w);
      QCOMPARE(tab->modes(), (QStringList{QStringLiteral("zp-uint8"), QStringLiteral("int4-g128"),
                                          QStringLiteral("fp16")}));
      const servelab::QuantizationParams p = tab->params();
      QCOMPARE(p.exec, std::string("dequant-once"));
      QCOMPARE(p.new_tokens, 7);
      QCOMPARE(p.repeats, 2);
      QCOMPARE(p.measure_speed, false);
      QCOMPARE(p.modes, (std::vector<std::string>{"zp-uint8", "int4-g128", "fp16"}));
    }
    // A settings file written by hand (as scripts/screenshots does): modes as one comma list.
    const QString ini = settingsPath(QStringLiteral("by-hand"));
    {
      QFile f(ini);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("[quantization]\nmodes=zp-uint8,int8-channel,int4-g64,bf16\nnewTokens=10\nrepeats=1\n");
    }
    auto w = makeWindow(QStringLiteral("by-hand"));
    QCOMPARE(quantTab(*w)->modes(), (QStringList{QStringLiteral("zp-uint8"), QStringLiteral("int8-channel"),
                                                 QStringLiteral("int4-g64"), QStringLiteral("bf16")}));
    QCOMPARE(quantTab(*w)->params().new_tokens, 10);
    QCOMPARE(quantTab(*w)->params().exec, std::string("jit"));  // the default
  }

  void scriptedRunExitsZero() {
    const QString ini = settingsPath(QStringLiteral("script"));
    {
      QSettings s(ini, QSettings::IniFormat);
      s.setValue(QStringLiteral("quantization/modes"),
                 QStringList{QStringLiteral("int8-channel"), QStringLiteral("fp16")});
      s.setValue(QStringLiteral("quantization/newTokens"), 4);
      s.setValue(QStringLiteral("quantization/repeats"), 1);
      s.setValue(QStringLiteral("quantization/measureSpeed"), false);
      s.setValue(QStringLiteral("quantization/exec"),
                 QStringLiteral("auto"));  // our JIT int8 on the CPU, native half kernels
    }
    const QString shot = tmp_.filePath(QStringLiteral("quant.png")),
                  chart = tmp_.filePath(QStringLiteral("quant-chart.png")),
                  report = tmp_.filePath(QStringLiteral("quant.json"));
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI),
              {QStringLiteral("--settings"), ini, QStringLiteral("--model"), tiny_, QStringLiteral("--tab"),
               QStringLiteral("quantization"), QStringLiteral("--run"), QStringLiteral("--screenshot"), shot,
               QStringLiteral("--export-chart"), chart, QStringLiteral("--report"), report});
    QVERIFY(app.waitForFinished(kRunTimeoutMs));
    QVERIFY2(app.exitCode() == 0, app.readAllStandardError().constData());
    QVERIFY(!QImage(shot).isNull());
    const QImage exported(chart);
    QVERIFY(!exported.isNull());
    QVERIFY(exported.width() >= 1280);
    const QJsonObject r = QJsonDocument::fromJson(fileBytes(report)).object();
    QCOMPARE(r[QStringLiteral("ok")].toBool(), true);
    QCOMPARE(r[QStringLiteral("experiment")].toString(), QStringLiteral("quantization"));
    const QJsonArray modes = r[QStringLiteral("modes")].toArray();
    QCOMPARE(modes.size(), 3);
    QCOMPARE(modes[1].toObject()[QStringLiteral("mode")].toString(), QStringLiteral("int8-channel"));
    QCOMPARE(modes[2].toObject()[QStringLiteral("mode")].toString(), QStringLiteral("fp16"));
    QCOMPARE(modes[1].toObject()[QStringLiteral("exec")].toString(), QStringLiteral("jit"));
    QCOMPARE(modes[2].toObject()[QStringLiteral("exec")].toString(), QStringLiteral("native"));
  }
};

QTEST_MAIN(TestQuantizationTab)
#include "test_quantization_tab.moc"
