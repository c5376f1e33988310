// The desktop app end to end on the offscreen platform: the window on the built-in model, tabs,
// the KV-cache and Generate runs, Stop, a corrupt model folder, export, settings, responsiveness
// no engine call on the GUI thread, and the scripted --run/--screenshot mode.
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QtWidgets>
#include <filesystem>
#include <memory>

#include "about_dialog.h"
#include "chart_view.h"
#include "engine_controller.h"
#include "engine_session.h"
#include "generate_tab.h"
#include "job_spy.h"
#include "kv_cache_tab.h"
#include "main_window.h"
#include "model/engine.h"
#include "roofline_check.h"
#include "tiny_model.h"
#include "util/cpu_features.h"

using namespace servelab::ui;
namespace fs = std::filesystem;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

// Parses ChartView CSV rows "series,x,y" (header skipped) into per-series points.
QMap<QString, QVector<QPointF>> parseSeriesCsv(const QString& csv) {
  QMap<QString, QVector<QPointF>> out;
  const QStringList lines = csv.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  for (qsizetype i = 1; i < lines.size(); ++i) {
    const QString line = lines[i];
    const qsizetype lastComma = line.lastIndexOf(QLatin1Char(','));
    const qsizetype midComma = line.lastIndexOf(QLatin1Char(','), lastComma - 1);
    QString name = line.left(midComma);
    if (name.startsWith(QLatin1Char('"')))
      name = name.mid(1, name.size() - 2).replace(QStringLiteral("\"\""), QStringLiteral("\""));
    out[name].push_back(
        {line.mid(midComma + 1, lastComma - midComma - 1).toDouble(), line.mid(lastComma + 1).toDouble()});
  }
  return out;
}

}  // namespace

class TestMainWindow : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString tiny_;  // a tiny GPT-2-vocabulary model folder
  QString settingsPath(const QString& name) { return tmp_.filePath(name + QStringLiteral(".ini")); }

  std::unique_ptr<MainWindow> makeWindow(const QString& settingsName) {
    auto w = std::make_unique<MainWindow>(
        std::make_unique<QSettings>(settingsPath(settingsName), QSettings::IniFormat));
    w->show();
    return w;
  }
  bool waitLoaded(MainWindow& w) {
    QSignalSpy ready(&w, &MainWindow::modelReady);
    return ready.wait(kLoadTimeoutMs);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    tiny_ = tmp_.filePath(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  // No test of this suite made an engine call on the GUI thread (see engineNeverRunsOnTheGuiThread).
  void cleanupTestCase() { QCOMPARE(engineCallCount().onGuiThread, 0); }

  void opensOnBuiltInModel() {
    // The built-in model is real: SmolLM2-135M-Instruct from its GGUF, no caveat, chat available.
    auto w = makeWindow(QStringLiteral("builtin"));
    w->loadInitialModel();
    QVERIFY(waitLoaded(*w));
    const ModelSummary& m = w->engine()->model();
    QVERIFY(!m.demo);
    QCOMPARE(m.architecture, QStringLiteral("llama"));
    QCOMPARE(m.format, QStringLiteral("gguf"));
    QCOMPARE(m.parameters, 134515008);
    QVERIFY(m.caveat.isEmpty());
    auto* label = w->findChild<QLabel*>(QStringLiteral("modelLabel"));
    QVERIFY(label && label->text().contains(QStringLiteral("SmolLM2-135M-Instruct")));
    QVERIFY(!label->text().contains(QStringLiteral("random weights")));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("stateStatus"))->text().contains(QStringLiteral("ready")));
    auto* caveat = w->findChild<QLabel*>(QStringLiteral("generateCaveat"));
    QVERIFY(caveat && caveat->isHidden());
    auto* chat = w->findChild<QCheckBox*>(QStringLiteral("generateChat"));
    QVERIFY(chat && chat->isEnabled());
  }

  void gpt2RandomShapeIsOneClickAway() {
    auto w = makeWindow(QStringLiteral("demo"));
    w->findChild<QAction*>(QStringLiteral("demoModelAction"))->trigger();
    QVERIFY(waitLoaded(*w));
    const ModelSummary& m = w->engine()->model();
    QVERIFY(m.demo);
    QCOMPARE(m.parameters, 124439808);
    QVERIFY(m.caveat.contains(QStringLiteral("random weights: timings are real, text is noise")));
    auto* label = w->findChild<QLabel*>(QStringLiteral("modelLabel"));
    QVERIFY(label && label->text().contains(QStringLiteral("random weights")));
    // Issue 21: the tooltip names the ISA the kernels dispatch to, as the engine reports it.
    const QString isa = QString::fromLatin1(servelab::isa_name(servelab::active_isa()));
    QCOMPARE(m.cpuIsa, isa);
    QVERIFY(!m.cpuModel.isEmpty());
    QVERIFY(label->toolTip().contains(QStringLiteral("dispatch to ISA %1 on %2").arg(isa, m.cpuModel)));
    QVERIFY(label->toolTip().contains(QStringLiteral("fp32_blocked: ")));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("deviceStatus"))->text().contains(QStringLiteral("cpu")));
    // CUDA graphs are a GPU matter: on the CPU the engine says so, and the status bar's tooltip shows it.
    QVERIFY(!m.cudaGraphs);
    QVERIFY(m.cudaGraphsWhyNot.contains(QStringLiteral("need a GPU")));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("deviceStatus"))
                ->toolTip()
                .contains(QStringLiteral("need a GPU")));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("memoryStatus"))->text().contains(QStringLiteral("MiB")));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("stateStatus"))->text().contains(QStringLiteral("ready")));
    // The Generate tab labels the demo model's text as noise; GPT-2 has no chat template.
    auto* caveat = w->findChild<QLabel*>(QStringLiteral("generateCaveat"));
    QVERIFY(caveat && caveat->text().contains(QStringLiteral("text is noise")));
    QVERIFY(!w->findChild<QCheckBox*>(QStringLiteral("generateChat"))->isEnabled());
    // The choice is remembered: the next start opens on it again.
    w->close();  // saves the settings
    auto again = makeWindow(QStringLiteral("demo"));
    again->loadInitialModel();
    QVERIFY(waitLoaded(*again));
    QVERIFY(again->engine()->model().demo);
  }

  void switchesTabs() {
    auto w = makeWindow(QStringLiteral("tabs"));
    QCOMPARE(w->tabIds(),
             (QStringList{QStringLiteral("generate"), QStringLiteral("kv-cache"), QStringLiteral("batching"),
                          QStringLiteral("continuous"), QStringLiteral("speculative"),
                          QStringLiteral("quantization"), QStringLiteral("multi-lora"),
                          QStringLiteral("serving"), QStringLiteral("roofline")}));
    auto* tabs = w->findChild<QTabWidget*>(QStringLiteral("tabs"));
    QVERIFY(tabs);
    QVERIFY(w->selectTab(QStringLiteral("kv-cache")));
    QCOMPARE(w->currentTab()->tabId(), QStringLiteral("kv-cache"));
    tabs->setCurrentIndex(0);
    QCOMPARE(w->currentTab()->tabId(), QStringLiteral("generate"));
    QVERIFY(!w->selectTab(QStringLiteral("no-such-tab")));
    QCOMPARE(w->currentTab()->tabId(), QStringLiteral("generate"));
  }

  void kvCacheRunDrawsBothSeries() {
    auto w = makeWindow(QStringLiteral("kv"));
    w->loadFolder(tiny_);
    QVERIFY(waitLoaded(*w));
    auto* tab = qobject_cast<KvCacheTab*>(w->tab(QStringLiteral("kv-cache")));
    QVERIFY(tab);
    w->selectTab(QStringLiteral("kv-cache"));
    tab->setNewTokens(12);
    tab->setRepeats(2);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    JobSpy points(w->engine(), &EngineJob::point);
    QVERIFY(tab->run());
    QVERIFY(w->engine()->isBusy());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), true);
    // Live points streamed while it ran: 2 repeats x 2 ways x 12 tokens, then the 2 x 12 medians.
    QCOMPARE(points.size(), 2 * 2 * 12 + 2 * 12);
    const servelab::KvCacheTimingResult& r = tab->result();
    QCOMPARE(r.tokens.size(), size_t(12));
    ChartView* chart = tab->primaryChart();
    QCOMPARE(chart->seriesCount(), 2);
    for (int s = 0; s < 2; ++s) {
      const QVector<QPointF> pts = chart->seriesPoints(s);
      QCOMPARE(pts.size(), 12);
      const auto& expected =
          chart->seriesName(s) == QStringLiteral("with KV cache") ? r.cache_ms : r.no_cache_ms;
      for (int i = 0; i < 12; ++i) {
        QCOMPARE(pts[i].x(), double(i));
        QCOMPARE(pts[i].y(), expected[size_t(i)]);
      }
    }
    QVERIFY(r.speedup > 0);
    QVERIFY(tab->summaryText().contains(QStringLiteral("Speed-up %1").arg(r.speedup, 0, 'f', 2)));
    // Beside the memory: the prefill, the cached steps and the recomputing ones under the roof; a
    // cached step reads every weight for one position, far left of the others.
    auto* roofline = tab->findChild<RooflineChart*>(QStringLiteral("kvRooflineChart"));
    QVERIFY(roofline && tab->charts().contains(roofline));
    QCOMPARE(r.roofline.size(), size_t(3));
    const QString mismatch = servelab::ui::test::roofline_mismatch(*roofline, r.roofline);
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    QVERIFY(r.roofline[1].intensity() < r.roofline[0].intensity());
    QVERIFY(r.roofline[1].intensity() < r.roofline[2].intensity());
    QVERIFY(!w->engine()->isBusy());
  }

  void generateStreamsWhatTheCliProduces_data() {
    QTest::addColumn<bool>("greedy");
    QTest::newRow("greedy") << true;
    QTest::newRow("sampling") << false;
  }
  void generateStreamsWhatTheCliProduces() {
    QFETCH(bool, greedy);
    auto w = makeWindow(QStringLiteral("gen"));
    w->loadFolder(tiny_);
    QVERIFY(waitLoaded(*w));
    auto* tab = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
    const QString prompt = QStringLiteral("The rain in Spain falls");
    tab->setPrompt(prompt);
    tab->setMaxNewTokens(24);
    tab->setGreedy(greedy);
    // The tab's sampling defaults: temperature 0.8, top-k 50, top-p 0.95, seed 42.
    JobSpy streamed(w->engine(), &EngineJob::token);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));

    QStringList args{QStringLiteral("generate"),
                     QStringLiteral("--model"),
                     tiny_,
                     QStringLiteral("--prompt"),
                     prompt,
                     QStringLiteral("--max-new-tokens"),
                     QStringLiteral("24"),
                     QStringLiteral("--json")};
    if (greedy)
      args << QStringLiteral("--greedy");
    else
      args << QStringLiteral("--temperature") << QStringLiteral("0.8") << QStringLiteral("--top-k")
           << QStringLiteral("50") << QStringLiteral("--top-p") << QStringLiteral("0.95")
           << QStringLiteral("--seed") << QStringLiteral("42");
    QProcess cli;
    cli.start(QStringLiteral(SERVELAB_CLI), args);
    QVERIFY(cli.waitForFinished(kRunTimeoutMs));
    QCOMPARE(cli.exitCode(), 0);
    const QJsonObject line = QJsonDocument::fromJson(cli.readAllStandardOutput().trimmed()).object();
    QVector<int> cliIds;
    for (const auto& v : line[QStringLiteral("generated_ids")].toArray()) cliIds << v.toInt();
    QVERIFY(!cliIds.isEmpty());
    QCOMPARE(tab->summary().generatedIds, cliIds);
    // Every token was streamed, in order, before the run finished.
    QCOMPARE(streamed.size(), cliIds.size());
    QCOMPARE(tab->tokens().size(), cliIds.size());
    for (qsizetype i = 0; i < cliIds.size(); ++i) QCOMPARE(tab->tokens()[i].id, cliIds[i]);
    QCOMPARE(tab->summary().text, line[QStringLiteral("text")].toString());
    // The output view shows the prompt followed by the generated text.
    QCOMPARE(tab->outputText(), prompt + line[QStringLiteral("text")].toString());
    QVERIFY(tab->metricsText().contains(QStringLiteral("Time to first token")));
    // The bar chart holds the last step's top-10 probabilities, most likely first.
    const QVector<double> probs = tab->primaryChart()->barValues();
    QCOMPARE(probs.size(), 10);
    double sum = 0;
    for (qsizetype i = 0; i < probs.size(); ++i) {
      QVERIFY(probs[i] > 0 && probs[i] <= 1);
      if (i) QVERIFY(probs[i] <= probs[i - 1]);
      sum += probs[i];
    }
    QVERIFY(sum <= 1.0 + 1e-5);
    if (greedy) QCOMPARE(tab->tokens().back().top.front().id, cliIds.back());
    // Inspecting an earlier step shows that step's candidates.
    tab->inspectStep(0);
    QCOMPARE(tab->primaryChart()->barLabels().front(), tab->tokens()[0].top.front().text);
  }

  void stopKeepsPartialResultsAndTheAppUsable() {
    auto w = makeWindow(QStringLiteral("stop"));
    w->loadDemo();
    QVERIFY(waitLoaded(*w));
    auto* tab = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
    tab->setMaxNewTokens(400);
    tab->setGreedy(true);
    // Stop as soon as the third token reaches the GUI.
    int seen = 0;
    onEveryJob(w->engine(), &EngineJob::token, w.get(), [&] {
      if (++seen == 3) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), false);
    QVERIFY(tab->tokens().size() >= 3);
    QVERIFY2(tab->tokens().size() < 400, "Stop did not stop the run");
    QVERIFY(tab->metricsText().contains(QStringLiteral("Stopped")));
    QVERIFY(tab->outputText().size() > QStringLiteral("The quick brown fox jumped over the").size() - 1);
    QVERIFY(w->errorText().isEmpty());  // a stop is not an error
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    // Usable again: a short run completes.
    tab->setMaxNewTokens(3);
    QSignalSpy again(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(again.wait(kRunTimeoutMs));
    QCOMPARE(again.front().at(0).toBool(), true);
    QCOMPARE(tab->tokens().size(), 3);
  }

  void shortcutsRunAndStop() {
    auto w = makeWindow(QStringLiteral("keys"));
    w->loadFolder(tiny_);
    QVERIFY(waitLoaded(*w));
    w->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(w.get()));
    auto* kv = w->tab(QStringLiteral("kv-cache"));
    w->selectTab(QStringLiteral("kv-cache"));
    QSignalSpy done(kv, &ExperimentTab::runFinished);
    QTest::keyClick(w.get(), Qt::Key_Return, Qt::ControlModifier);  // Run
    QVERIFY(kv->isRunning());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), true);
    // Esc stops a long run on the Generate tab.
    w->selectTab(QStringLiteral("generate"));
    auto* gen = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
    gen->setMaxNewTokens(250);
    QSignalSpy genDone(gen, &ExperimentTab::runFinished);
    QTest::keyClick(w.get(), Qt::Key_Return, Qt::ControlModifier);
    QVERIFY(gen->isRunning());
    QTest::keyClick(w.get(), Qt::Key_Escape);
    QVERIFY(genDone.wait(kRunTimeoutMs));
    QCOMPARE(genDone.front().at(0).toBool(), false);
    QVERIFY(gen->tokens().size() < 250);
  }

  void busyEngineRejectsASecondRun() {
    auto w = makeWindow(QStringLiteral("busy"));
    w->loadDemo();
    QVERIFY(waitLoaded(*w));
    auto* gen = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
    auto* kv = qobject_cast<KvCacheTab*>(w->tab(QStringLiteral("kv-cache")));
    gen->setMaxNewTokens(200);
    QSignalSpy rejected(w->engine(), &EngineController::rejected);
    QSignalSpy done(gen, &ExperimentTab::runFinished);
    QVERIFY(gen->run());
    QVERIFY(!kv->run());
    QCOMPARE(rejected.size(), 1);
    QVERIFY(rejected.front().at(0).toString().contains(QStringLiteral("busy")));
    w->stopCurrent();
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY(!kv->isRunning());
  }

  void corruptFolderKeepsThePreviousModel() {
    auto w = makeWindow(QStringLiteral("corrupt"));
    w->loadFolder(tiny_);
    QVERIFY(waitLoaded(*w));
    const QString good = w->engine()->model().name;
    // A copy of the tiny model whose weights file is cut in half.
    const QString bad = tmp_.filePath(QStringLiteral("truncated"));
    fs::create_directories(bad.toStdString());
    for (const char* f : {"config.json", "vocab.json", "merges.txt", "model.safetensors"})
      fs::copy_file(fs::path(tiny_.toStdString()) / f, fs::path(bad.toStdString()) / f,
                    fs::copy_options::overwrite_existing);
    const auto weights = fs::path(bad.toStdString()) / "model.safetensors";
    fs::resize_file(weights, fs::file_size(weights) / 2);

    QSignalSpy failed(w->engine(), &EngineController::modelLoadFailed);
    w->loadFolder(bad);
    QVERIFY(failed.wait(kLoadTimeoutMs));
    QVERIFY2(w->errorText().contains(QStringLiteral("model.safetensors")), qPrintable(w->errorText()));
    QVERIFY(w->errorText().contains(QStringLiteral("Still using")));
    QCOMPARE(w->engine()->model().name, good);
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    // The old model still generates.
    auto* tab = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
    tab->setMaxNewTokens(4);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), true);
    QVERIFY(w->errorText().isEmpty());  // a new run clears the banner

    // A folder that does not exist, and one without tokenizer files, fail the same way.
    QSignalSpy failed2(w->engine(), &EngineController::modelLoadFailed);
    w->loadFolder(tmp_.filePath(QStringLiteral("missing")));
    QVERIFY(failed2.wait(kLoadTimeoutMs));
    QVERIFY(w->errorText().contains(QStringLiteral("not found")));
    QCOMPARE(w->engine()->model().name, good);
  }

  void exportsMatchTheChart() {
    auto w = makeWindow(QStringLiteral("export"));
    w->loadFolder(tiny_);
    QVERIFY(waitLoaded(*w));
    auto* tab = qobject_cast<KvCacheTab*>(w->tab(QStringLiteral("kv-cache")));
    tab->setNewTokens(8);
    tab->setRepeats(1);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    ChartView* chart = tab->primaryChart();
    QString error;
    const QString png = tmp_.filePath(QStringLiteral("kv.png")),
                  svg = tmp_.filePath(QStringLiteral("kv.svg")),
                  csv = tmp_.filePath(QStringLiteral("kv.csv"));
    QVERIFY2(chart->exportImage(png, &error), qPrintable(error));
    QVERIFY2(chart->exportImage(svg, &error), qPrintable(error));
    QVERIFY2(chart->exportCsv(csv, &error), qPrintable(error));
    QImage image(png);
    QVERIFY(!image.isNull());
    QVERIFY(image.width() >= 1280);
    QFile svgFile(svg);
    QVERIFY(svgFile.open(QIODevice::ReadOnly));
    const QByteArray svgText = svgFile.readAll();
    QVERIFY(svgText.contains("<svg"));
    QVERIFY(svgText.contains("KV cache"));
    QFile csvFile(csv);
    QVERIFY(csvFile.open(QIODevice::ReadOnly));
    const auto series = parseSeriesCsv(QString::fromUtf8(csvFile.readAll()));
    const servelab::KvCacheTimingResult& r = tab->result();
    QCOMPARE(series.size(), 2);
    QCOMPARE(series[QStringLiteral("with KV cache")].size(), 8);
    for (int i = 0; i < 8; ++i) {
      QCOMPARE(series[QStringLiteral("with KV cache")][i].y(), r.cache_ms[size_t(i)]);
      QCOMPARE(series[QStringLiteral("without KV cache")][i].y(), r.no_cache_ms[size_t(i)]);
    }
    // Scripted export through the window uses the same chart.
    QVERIFY(!chart->exportImage(tmp_.filePath(QStringLiteral("no/such/dir/kv.png")), &error));
    QVERIFY(error.contains(QStringLiteral("no/such/dir")));
  }

  // View → Presenter mode: the application's text and the charts' fonts larger, the log hidden,
  // and everything back as it was when it is switched off; saved with the settings.
  void presenterMode() {
    {
      auto w = makeWindow(QStringLiteral("presenter"));
      w->show();
      auto* log = w->findChild<QDockWidget*>(QStringLiteral("logDock"));
      QVERIFY(log && log->isVisible());
      ChartView* chart = w->tab(QStringLiteral("kv-cache"))->primaryChart();
      const double appPoints = qApp->font().pointSizeF();
      const double tickPoints = chart->tickLabelFont().pointSizeF();
      QVERIFY(!chart->presenter());
      w->findChild<QAction*>(QStringLiteral("presenterAction"))->trigger();
      QVERIFY(w->presenter());
      QVERIFY(chart->presenter());
      QVERIFY(qApp->font().pointSizeF() > appPoints * 1.3);
      QVERIFY(chart->tickLabelFont().pointSizeF() > tickPoints * 1.4);
      QCOMPARE(chart->tickLabelColor(), QColor(Qt::black));
      QVERIFY(!log->isVisible());
      w->close();  // saved on: the next window opens in presenter mode
    }
    auto w = makeWindow(QStringLiteral("presenter"));
    w->show();
    QVERIFY(w->presenter());
    QVERIFY(w->tab(QStringLiteral("generate"))->primaryChart()->presenter());
    const double presenterPoints = qApp->font().pointSizeF();
    w->setPresenter(false);
    QVERIFY(!w->findChild<QAction*>(QStringLiteral("presenterAction"))->isChecked());
    QVERIFY(qApp->font().pointSizeF() < presenterPoints);
    QVERIFY(w->findChild<QDockWidget*>(QStringLiteral("logDock"))->isVisible());
    QVERIFY(!w->tab(QStringLiteral("generate"))->primaryChart()->presenter());
  }

  void settingsPersist() {
    {
      auto w = makeWindow(QStringLiteral("persist"));
      auto* gen = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
      gen->setPrompt(QStringLiteral("Persisted prompt"));
      gen->setMaxNewTokens(77);
      auto* kv = qobject_cast<KvCacheTab*>(w->tab(QStringLiteral("kv-cache")));
      kv->setNewTokens(123);
      kv->setPromptTokens(50);
      w->selectTab(QStringLiteral("kv-cache"));
      w->setTheme(ChartTheme::Dark);
      auto* graphs = w->findChild<QCheckBox*>(QStringLiteral("cudaGraphsCheck"));
      QVERIFY(graphs && graphs->isChecked());  // on by default
      graphs->setChecked(false);
      w->close();
    }
    auto w = makeWindow(QStringLiteral("persist"));
    // Every key the app saved (each tab's, the window's) it takes back without a warning.
    QVERIFY2(w->settingsWarningText().isEmpty(), qPrintable(w->settingsWarningText()));
    QCOMPARE(w->currentTab()->tabId(), QStringLiteral("kv-cache"));
    QCOMPARE(w->theme(), ChartTheme::Dark);
    QCOMPARE(w->tab(QStringLiteral("kv-cache"))->primaryChart()->theme(), ChartTheme::Dark);
    QSettings s(settingsPath(QStringLiteral("persist")), QSettings::IniFormat);
    QCOMPARE(s.value(QStringLiteral("generate/prompt")).toString(), QStringLiteral("Persisted prompt"));
    QCOMPARE(s.value(QStringLiteral("generate/maxNewTokens")).toInt(), 77);
    QCOMPARE(s.value(QStringLiteral("kv-cache/newTokens")).toInt(), 123);
    QCOMPARE(s.value(QStringLiteral("kv-cache/promptTokens")).toInt(), 50);
    QCOMPARE(s.value(QStringLiteral("model/cudaGraphs")).toBool(), false);
    QVERIFY(!w->findChild<QCheckBox*>(QStringLiteral("cudaGraphsCheck"))->isChecked());
    // The restored window shows the saved values.
    w->close();  // saves again: the values must survive a round trip
    QSettings again(settingsPath(QStringLiteral("persist")), QSettings::IniFormat);
    QCOMPARE(again.value(QStringLiteral("generate/prompt")).toString(), QStringLiteral("Persisted prompt"));
    QCOMPARE(again.value(QStringLiteral("kv-cache/newTokens")).toInt(), 123);
    w->setTheme(ChartTheme::Light);
  }

  void settingsGarbageIsShownInTheWindow() {
    // A bool, an enumerated and a text value the app cannot take: interactively each keeps its
    // default and is named in the window (the banner and the log), where a model load does not hide it.
    {
      QFile f(settingsPath(QStringLiteral("garbage")));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("[generate]\nchat=banana\nprompt=@Size(3 4)\n[ui]\ntheme=purple\n[model]\ncudaGraphs=maybe\n");
    }
    auto w = makeWindow(QStringLiteral("garbage"));
    const QString banner = w->settingsWarningText();
    for (const char* expected : {"generate/chat", "banana", "generate/prompt", "QSize", "ui/theme", "purple",
                                 "model/cudaGraphs", "maybe"})
      QVERIFY2(banner.contains(QLatin1String(expected)), qPrintable(banner));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("settingsBanner"))->isVisible());
    QVERIFY(w->logText().contains(QStringLiteral("generate/chat = \"banana\" is not true or false")));
    QVERIFY(w->findChild<QCheckBox*>(QStringLiteral("generateChat"))->isChecked());
    QVERIFY(w->findChild<QCheckBox*>(QStringLiteral("cudaGraphsCheck"))->isChecked());
    QCOMPARE(w->theme(), ChartTheme::Light);
    QVERIFY(!w->findChild<QPlainTextEdit*>(QStringLiteral("generatePrompt"))->toPlainText().isEmpty());
    w->loadFolder(tiny_);
    QVERIFY(waitLoaded(*w));
    QVERIFY(w->settingsWarningText().contains(QStringLiteral("generate/chat")));
    // A clean file shows nothing.
    auto clean = makeWindow(QStringLiteral("clean"));
    QVERIFY(clean->settingsWarningText().isEmpty());
  }

  // The window stays responsive because no engine code ever runs on the GUI thread: every call
  // into the engine (engine_session's functions, the engine host's load and answer, every job's
  // JobContext::engine()) notes its thread, and a load and a generation make such calls, none of
  // them on the GUI thread. This holds however busy the machine is; the test used to time a 10 ms
  // timer and fail over a 50 ms gap, which measured the machine's load as much as the app. The
  // timer stays as a diagnostic line only. cleanupTestCase checks the same over the whole suite.
  void engineNeverRunsOnTheGuiThread() {
    const EngineCallCount before = engineCallCount();
    auto w = makeWindow(QStringLiteral("responsive"));
    w->loadDemo();
    QVERIFY(waitLoaded(*w));
    const EngineCallCount loaded = engineCallCount();
    QVERIFY(loaded.total > before.total);  // the load and its summary went through the engine host
    auto* tab = qobject_cast<GenerateTab*>(w->tab(QStringLiteral("generate")));
    tab->setMaxNewTokens(25);
    QElapsedTimer clock;
    qint64 last = 0, worst = 0;
    QTimer timer;
    timer.setInterval(10);
    connect(&timer, &QTimer::timeout, this, [&] {
      const qint64 now = clock.elapsed();
      worst = std::max(worst, now - last);
      last = now;
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    clock.start();
    timer.start();
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    timer.stop();
    qInfo("run took %lld ms; longest gap between 10 ms timer ticks %lld ms (a diagnostic, not asserted)",
          static_cast<long long>(clock.elapsed()), static_cast<long long>(worst));
    QVERIFY(!tab->tokens().isEmpty());
    const EngineCallCount after = engineCallCount();
    QVERIFY(after.total > loaded.total);  // the generation's job body took the engine
    QCOMPARE(after.onGuiThread, before.onGuiThread);
    QCOMPARE(after.onGuiThread, 0);
  }

  // Help → About ServeLab: the version, GPL-3.0-or-later with the main dependencies' licences,
  // and the CPU and ISA as the engine reports them. SERVELAB_ABOUT_SCREENSHOT=path.png saves the
  // dialog (run the suite under xvfb-run with QT_QPA_PLATFORM=xcb for real fonts).
  void aboutDialogNamesVersionLicencesAndMachine() {
    auto w = makeWindow(QStringLiteral("about"));
    w->loadDemo();
    QVERIFY(waitLoaded(*w));
    auto* action = w->findChild<QAction*>(QStringLiteral("aboutAction"));
    QVERIFY(action);
    action->trigger();
    auto* dialog = w->findChild<AboutDialog*>(QStringLiteral("aboutDialog"));
    QVERIFY(dialog && dialog->isVisible());
    QVERIFY(dialog->versionText().contains(QStringLiteral("ServeLab")));
    for (const char* part : {"GPL-3.0-or-later", "QCustomPlot", "LGPL-3.0", "BSD-3-Clause", "Apache-2.0",
                             "SmolLM2-135M-Instruct"})
      QVERIFY2(dialog->licenceText().contains(QLatin1String(part)), part);
    const ModelSummary& m = w->engine()->model();
    QVERIFY(!m.cpuModel.isEmpty());
    QCOMPARE(m.cpuModel, QString::fromStdString(servelab::cpu_model_name()));
    QCOMPARE(m.cpuIsa, QString::fromUtf8(servelab::isa_name(servelab::active_isa())));
    QVERIFY2(dialog->machineText().contains(m.cpuModel.toHtmlEscaped()), qPrintable(dialog->machineText()));
    QVERIFY2(dialog->machineText().contains(m.cpuIsa), qPrintable(dialog->machineText()));
    const QString shot = qEnvironmentVariable("SERVELAB_ABOUT_SCREENSHOT");
    if (!shot.isEmpty()) {
      dialog->adjustSize();
      QTest::qWait(200);
      QVERIFY(dialog->grab().save(shot));
    }
    dialog->close();
  }

  void scriptedRunSavesScreenshotChartAndReport() {
    const QString shot = tmp_.filePath(QStringLiteral("shot.png")),
                  csv = tmp_.filePath(QStringLiteral("chart.csv")),
                  report = tmp_.filePath(QStringLiteral("report.json"));
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI),
              {QStringLiteral("--settings"), settingsPath(QStringLiteral("script")),
               QStringLiteral("--model"), tiny_, QStringLiteral("--tab"), QStringLiteral("kv-cache"),
               QStringLiteral("--run"), QStringLiteral("--screenshot"), shot,
               QStringLiteral("--export-chart"), csv, QStringLiteral("--report"), report});
    QVERIFY(app.waitForFinished(kRunTimeoutMs));
    QVERIFY2(app.exitCode() == 0, app.readAllStandardError().constData());
    QVERIFY(!QImage(shot).isNull());
    QFile rf(report);
    QVERIFY(rf.open(QIODevice::ReadOnly));
    const QJsonObject r = QJsonDocument::fromJson(rf.readAll()).object();
    QCOMPARE(r[QStringLiteral("ok")].toBool(), true);
    QCOMPARE(r[QStringLiteral("cache_ms")].toArray().size(), 10);  // the course's 10 tokens by default
    QFile cf(csv);
    QVERIFY(cf.open(QIODevice::ReadOnly));
    const auto series = parseSeriesCsv(QString::fromUtf8(cf.readAll()));
    QCOMPARE(series[QStringLiteral("with KV cache")].size(), 10);
    QCOMPARE(series[QStringLiteral("with KV cache")][3].y(),
             r[QStringLiteral("cache_ms")].toArray()[3].toDouble());
  }

  // --page brings the Roofline page to the front; --export-chart then saves its chart: the run's
  // cached decode steps as one point at the intensity the report gives.
  void scriptedRunExportsThePageInFront() {
    const QString csv = tmp_.filePath(QStringLiteral("roofline.csv")),
                  report = tmp_.filePath(QStringLiteral("roofline.json"));
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI),
              {QStringLiteral("--settings"), settingsPath(QStringLiteral("page")), QStringLiteral("--model"),
               tiny_, QStringLiteral("--tab"), QStringLiteral("kv-cache"), QStringLiteral("--page"),
               QStringLiteral("roofline"), QStringLiteral("--run"), QStringLiteral("--export-chart"), csv,
               QStringLiteral("--report"), report});
    QVERIFY(app.waitForFinished(kRunTimeoutMs));
    QVERIFY2(app.exitCode() == 0, app.readAllStandardError().constData());
    QFile rf(report);
    QVERIFY(rf.open(QIODevice::ReadOnly));
    const QJsonArray steps =
        QJsonDocument::fromJson(rf.readAll()).object()[QStringLiteral("roofline")].toArray();
    QCOMPARE(steps.size(), 3);
    QFile cf(csv);
    QVERIFY(cf.open(QIODevice::ReadOnly));
    const auto series = parseSeriesCsv(QString::fromUtf8(cf.readAll()));
    QCOMPARE(series[QStringLiteral("decode")].size(), 1);
    QVERIFY(qFuzzyCompare(series[QStringLiteral("decode")][0].x(),
                          steps[1].toObject()[QStringLiteral("intensity")].toDouble()));
    QCOMPARE(series[QStringLiteral("this machine's roof (fp32)")].size(), 3);
  }

  void scriptedRunFailsWithOneLine_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::addColumn<int>("code");  // 1: the run failed; 2: the command line is wrong
    QTest::newRow("unknown tab") << QStringList{QStringLiteral("--demo"), QStringLiteral("--tab"),
                                                QStringLiteral("nope"), QStringLiteral("--run")}
                                 << QStringLiteral("unknown tab") << 1;
    QTest::newRow("unknown page") << QStringList{QStringLiteral("--demo"),   QStringLiteral("--tab"),
                                                 QStringLiteral("kv-cache"), QStringLiteral("--page"),
                                                 QStringLiteral("nope"),     QStringLiteral("--run")}
                                  << QStringLiteral(
                                         "no page \"nope\" in this tab (pages: KV memory, Roofline)")
                                  << 1;
    QTest::newRow("missing model") << QStringList{QStringLiteral("--model"),
                                                  QStringLiteral("/nonexistent/model"),
                                                  QStringLiteral("--tab"), QStringLiteral("kv-cache"),
                                                  QStringLiteral("--run")}
                                   << QStringLiteral("not found") << 1;
    QTest::newRow("bad theme") << QStringList{QStringLiteral("--theme"), QStringLiteral("purple")}
                               << QStringLiteral("--theme must be light or dark") << 2;
    QTest::newRow("bad presenter") << QStringList{QStringLiteral("--presenter"), QStringLiteral("maybe")}
                                   << QStringLiteral("--presenter must be on or off") << 2;
  }
  void scriptedRunFailsWithOneLine() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    QFETCH(int, code);
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI),
              QStringList{QStringLiteral("--settings"), settingsPath(QStringLiteral("fail"))} + args);
    QVERIFY(app.waitForFinished(kRunTimeoutMs));
    QCOMPARE(app.exitStatus(), QProcess::NormalExit);
    QCOMPARE(app.exitCode(), code);
    const QString err = QString::fromUtf8(app.readAllStandardError());
    QStringList ours;
    for (const QString& l : err.split(QLatin1Char('\n'), Qt::SkipEmptyParts))
      if (l.startsWith(QStringLiteral("servelab: "))) ours << l;
    QCOMPARE(ours.size(), 1);
    QVERIFY2(ours.front().contains(message), qPrintable(ours.front()));
  }
};

QTEST_MAIN(TestMainWindow)
#include "test_main_window.moc"
