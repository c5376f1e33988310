// The Multi-LoRA tab end to end on the offscreen platform, on the built-in model: the math panel's
// shapes and parameter ratio against values computed here, the adapter list (random adapters with
// distinct seeds, a PEFT folder the engine refuses), the strategy sweep on the course's toy model and
// on GPT-2 (every live point equal to the result's medians, the ratio chart, the text per adapter,
// the strategies' agreement), Stop, serving a queue whose requests name adapters through a cache
// of one adapter, settings and the scripted --tab/--run mode. Small workloads, one repeat; no
// assertion depends on how long anything takes.
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QtWidgets>
#include <cmath>
#include <memory>
#include <set>

#include "chart_view.h"
#include "engine_controller.h"
#include "job_spy.h"
#include "lora/builtin_adapters.h"
#include "main_window.h"
#include "multi_lora/lora_math_panel.h"
#include "multi_lora_tab.h"
#include "tiny_model.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

// "1.39%": the percentage of a ratio with two decimals (the ratios checked here lie in [0.1%, 10%)).
QString percent2(double ratio) { return QString::number(ratio * 100, 'f', 2) + QLatin1Char('%'); }

QString seriesName(const std::string& strategy) {
  return strategy == "base" ? QStringLiteral("base model") : QString::fromStdString(strategy);
}

}  // namespace

class TestMultiLoraTab : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString settingsPath(const QString& name) { return tmp_.filePath(name + QStringLiteral(".ini")); }

  std::unique_ptr<MainWindow> makeWindow(const QString& settingsName) {
    auto w = std::make_unique<MainWindow>(
        std::make_unique<QSettings>(settingsPath(settingsName), QSettings::IniFormat));
    w->show();
    return w;
  }
  // A window on the built-in model with the Multi-LoRA tab in front.
  std::unique_ptr<MainWindow> demoWindow(const QString& settingsName) {
    auto w = makeWindow(settingsName);
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadDemo();
    if (!ready.wait(kLoadTimeoutMs)) return nullptr;
    w->selectTab(QStringLiteral("multi-lora"));
    return w;
  }
  static MultiLoraTab* loraTab(MainWindow& w) {
    return qobject_cast<MultiLoraTab*>(w.tab(QStringLiteral("multi-lora")));
  }
  // Waits until every adapter asked for has been described (or refused).
  static bool settle(MultiLoraTab* tab) {
    return QTest::qWaitFor([tab] { return tab->pendingAdapters() == 0; }, kRunTimeoutMs);
  }
  static bool runToEnd(MultiLoraTab* tab, bool serve, QString* message) {
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    if (!(serve ? tab->serve() : tab->runSweep())) {
      *message = QStringLiteral("the run did not start");
      return false;
    }
    if (!done.wait(kRunTimeoutMs)) {
      *message = QStringLiteral("the run did not finish");
      return false;
    }
    *message = done.front().at(1).toString();
    return done.front().at(0).toBool();
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  void tabIsRegistered() {
    auto w = makeWindow(QStringLiteral("ids"));
    QVERIFY(w->tabIds().contains(QStringLiteral("multi-lora")));
    // The course's lesson order: Multi-LoRA (lessons 5 and 6), then Serving (lesson 7).
    const QStringList ids = w->tabIds();
    QCOMPARE(ids.indexOf(QStringLiteral("serving")), ids.indexOf(QStringLiteral("multi-lora")) + 1);
    ExperimentTab* tab = w->tab(QStringLiteral("multi-lora"));
    QVERIFY(tab);
    QCOMPARE(tab->title(), QStringLiteral("Multi-LoRA"));
    QVERIFY(w->selectTab(QStringLiteral("multi-lora")));
    QCOMPARE(w->currentTab()->primaryChart()->objectName(), QStringLiteral("loraLatencyChart"));
    QCOMPARE(w->currentTab()->charts().size(), 3);
    const QString explanation = w->findChild<QLabel*>(QStringLiteral("loraExplanation"))->text();
    for (const char* word : {"LoRA", "loop", "gathered", "segmented"})
      QVERIFY2(explanation.contains(QLatin1String(word)), word);
    // An empty list: the hint says the experiment makes its own adapters.
    QVERIFY(
        w->findChild<QLabel*>(QStringLiteral("loraAdapterHint"))->text().contains(QStringLiteral("random")));
  }

  void mathPanelShowsShapesAndRatio() {
    auto w = demoWindow(QStringLiteral("math"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    const ModelSummary& m = w->engine()->model();
    QCOMPARE(m.width, 768);
    QCOMPARE(m.inner, 4 * 768);

    // The course's example: hidden 1024, rank 2 trains 0.39% of the layer.
    tab->setMathModule(QStringLiteral("course-1024"));
    tab->setMathRank(2);
    QCOMPARE(tab->math().in, qint64(1024));
    QCOMPARE(tab->math().out, qint64(1024));
    const double courseRatio = 2.0 * (1024 + 1024) / (1024.0 * 1024.0);
    QCOMPARE(percent2(courseRatio), QStringLiteral("0.39%"));
    QVERIFY2(tab->mathText().contains(QStringLiteral("= 0.39%")), qPrintable(tab->mathText()));
    QVERIFY(tab->mathText().contains(QStringLiteral("1024 × 2")));  // A
    QVERIFY(tab->mathText().contains(QStringLiteral("2 × 1024")));  // B

    // GPT-2's shapes from the loaded model, updated as the module and rank change.
    const struct {
      const char* module;
      qint64 in, out;
      int rank;
    } cases[] = {{"attn.c_attn", m.width, 3 * m.width, 8},
                 {"attn.c_proj", m.width, m.width, 4},
                 {"mlp.c_fc", m.width, m.inner, 16},
                 {"mlp.c_proj", m.inner, m.width, 2}};
    for (const auto& c : cases) {
      tab->setMathModule(QLatin1String(c.module));
      tab->setMathRank(c.rank);
      QCOMPARE(tab->math().in, c.in);
      QCOMPARE(tab->math().out, c.out);
      const double ratio = static_cast<double>(c.rank * (c.in + c.out)) / static_cast<double>(c.in * c.out);
      QCOMPARE(tab->math().ratio(), ratio);
      const QString text = tab->mathText();
      QVERIFY2(text.contains(QStringLiteral("= ") + percent2(ratio)), qPrintable(text));
      QVERIFY2(text.contains(QStringLiteral("%1 × %2").arg(c.in).arg(c.out)), qPrintable(text));
      QVERIFY2(text.contains(QStringLiteral("%1 × %2").arg(c.in).arg(c.rank)), qPrintable(text));
      QVERIFY2(text.contains(QStringLiteral("%1 × %2").arg(c.rank).arg(c.out)), qPrintable(text));
    }
    QCOMPARE(percent2(8.0 * (768 + 2304) / (768.0 * 2304.0)), QStringLiteral("1.39%"));
    tab->setMathAlpha(32);
    tab->setMathRank(8);
    QVERIFY2(tab->mathText().contains(QStringLiteral("α/r = 32/8 = 4")), qPrintable(tab->mathText()));
  }

  void mathPanelFollowsLlamaMatrices() {
    // A Llama model's own seven matrices (SmolLM2's shapes: width 576, 3 KV heads of 64, SwiGLU
    // 1536), as summarize() reads them from Engine::info()'s projection table.
    LoraMathPanel panel;
    ModelSummary llama;
    llama.name = QStringLiteral("llama-shaped");
    llama.architecture = QStringLiteral("llama");
    llama.layers = 30;
    llama.parameters = 134515008;
    llama.projections = {
        {QStringLiteral("self_attn.q_proj"), 576, 576}, {QStringLiteral("self_attn.k_proj"), 576, 192},
        {QStringLiteral("self_attn.v_proj"), 576, 192}, {QStringLiteral("self_attn.o_proj"), 576, 576},
        {QStringLiteral("mlp.gate_proj"), 576, 1536},   {QStringLiteral("mlp.up_proj"), 576, 1536},
        {QStringLiteral("mlp.down_proj"), 1536, 576}};
    panel.setModel(llama);
    auto* modules = panel.findChild<QComboBox*>(QStringLiteral("loraMathModule"));
    QCOMPARE(modules->count(), 8);  // the seven matrices and the course's example
    QCOMPARE(modules->itemText(1), QStringLiteral("self_attn.k_proj (key)"));
    QVERIFY(modules->findData(QStringLiteral("attn.c_attn")) < 0);  // no GPT-2 names on a Llama
    panel.setRank(8);
    panel.setModule(QStringLiteral("self_attn.k_proj"));
    QCOMPARE(panel.math().in, qint64(576));
    QCOMPARE(panel.math().out, qint64(192));
    QVERIFY2(panel.text().contains(QStringLiteral("576 × 192")), qPrintable(panel.text()));
    panel.setModule(QStringLiteral("mlp.down_proj"));
    QCOMPARE(panel.math().in, qint64(1536));
    // Every matrix of every layer: 8 * (1152 + 768 + 768 + 1152 + 2112 * 3) * 30 = 2,442,240.
    QVERIFY2(panel.text().contains(QStringLiteral("All 210 matrices at r = 8: 2.44 M")),
             qPrintable(panel.text()));
    // Back to GPT-2: its own names again, and the module choice falls back to the first.
    ModelSummary gpt2;
    gpt2.name = QStringLiteral("gpt2-shaped");
    gpt2.layers = 12;
    gpt2.projections = {{QStringLiteral("attn.c_attn"), 768, 2304},
                        {QStringLiteral("attn.c_proj"), 768, 768},
                        {QStringLiteral("mlp.c_fc"), 768, 3072},
                        {QStringLiteral("mlp.c_proj"), 3072, 768}};
    panel.setModel(gpt2);
    QCOMPARE(modules->count(), 5);
    QCOMPARE(modules->currentData().toString(), QStringLiteral("attn.c_attn"));
    QCOMPARE(panel.math().out, qint64(2304));
  }

  void sweepOnTheToyModel() {
    auto w = demoWindow(QStringLiteral("toy"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    tab->setWorkload(QStringLiteral("toy"));
    tab->setToySamples(4);
    tab->setBatchSizes(QStringLiteral("1, 2"));
    tab->setRepeats(1);
    tab->setStrategies({QStringLiteral("loop"), QStringLiteral("gathered"), QStringLiteral("segmented")});
    QCOMPARE(tab->params().workload, std::string("toy"));
    JobSpy points(w->engine(), &EngineJob::point);
    QString message;
    QVERIFY2(runToEnd(tab, false, &message), qPrintable(message));
    QVERIFY(tab->hasResult());
    const servelab::MultiLoraResult& r = tab->result();
    QCOMPARE(r.workload, std::string("toy"));
    ChartView* chart = tab->primaryChart();
    int drawn = 0;
    // The course's toy model is timed without adapters too (the base series).
    for (const std::string s : {"base", "loop", "gathered", "segmented"}) {
      const QVector<QPointF> pts = chart->seriesPoints(chart->seriesIndex(seriesName(s)));
      QCOMPARE(pts.size(), 2);
      for (const servelab::MultiLoraPoint& p : r.points)
        if (p.strategy == s) QVERIFY(pts.contains(QPointF(static_cast<double>(p.batch), p.ms)));
      drawn += static_cast<int>(pts.size());
    }
    QCOMPARE(drawn, static_cast<int>(r.points.size()));
    QVERIFY(points.size() >= drawn);  // they came live
    QVERIFY(!tab->agreementText().isEmpty());
    QCOMPARE(tab->findChild<QProgressBar*>(QStringLiteral("loraProgress"))->format(), QStringLiteral("done"));
  }

  void sweepOnGpt2FillsChartsAndOutputs() {
    auto w = demoWindow(QStringLiteral("gpt2"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    tab->addRandomAdapters(4, 8, 2);
    QVERIFY(settle(tab));
    QCOMPARE(tab->adapterCount(), 2);
    const QVector<servelab::AdapterSource> sources = tab->adapterSources();
    QCOMPARE(sources[0].name, std::string("rand-r4-1"));
    QCOMPARE(sources[1].name, std::string("rand-r4-2"));
    QVERIFY(sources[0].seed != sources[1].seed);
    for (int i = 0; i < 2; ++i) {
      const std::optional<servelab::AdapterInfo> info = tab->adapterInfo(i);
      QVERIFY(info.has_value());
      QCOMPARE(info->rank, int64_t(4));
      QVERIFY(info->parameters > 0);
      QVERIFY(info->parameters < info->base_parameters);
    }
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("loraAdapterTable"));
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->item(1, 0)->text(), QStringLiteral("rand-r4-2"));
    QCOMPARE(table->item(1, 2)->text(), QStringLiteral("4"));

    tab->setWorkload(QStringLiteral("gpt2"));
    tab->setAssignment(QStringLiteral("distinct"));
    tab->setBatchSizes(QStringLiteral("1,2"));
    tab->setDecodeSteps(1);
    tab->setRepeats(1);
    tab->setContext(8);
    tab->setNewTokens(4);
    tab->setStrategies({QStringLiteral("loop"), QStringLiteral("gathered"), QStringLiteral("segmented")});
    const servelab::MultiLoraParams p = tab->params();
    QCOMPARE(p.adapters.size(), size_t(2));
    QCOMPARE(p.batch_sizes, (std::vector<int64_t>{1, 2}));
    JobSpy points(w->engine(), &EngineJob::point);
    QString message;
    QVERIFY2(runToEnd(tab, false, &message), qPrintable(message));
    const servelab::MultiLoraResult& r = tab->result();
    QCOMPARE(r.workload, std::string("gpt2"));

    // One series per strategy and the base model, two batch sizes each, equal to the medians.
    ChartView* latency = tab->primaryChart();
    auto* ratio = w->findChild<ChartView*>(QStringLiteral("loraRatioChart"));
    for (const std::string s : {"base", "loop", "gathered", "segmented"}) {
      const QVector<QPointF> pts = latency->seriesPoints(latency->seriesIndex(seriesName(s)));
      const QVector<QPointF> ratios = ratio->seriesPoints(ratio->seriesIndex(seriesName(s)));
      QCOMPARE(pts.size(), 2);
      QCOMPARE(ratios.size(), 2);
      for (const servelab::MultiLoraPoint& pt : r.points) {
        if (pt.strategy != s) continue;
        QVERIFY(pts.contains(QPointF(static_cast<double>(pt.batch), pt.ms)));
        QVERIFY(
            ratios.contains(QPointF(static_cast<double>(pt.batch), s == "base" ? 1.0 : pt.ratio_to_base)));
      }
    }
    QCOMPARE(r.points.size(), size_t(8));
    QVERIFY(points.size() >= 8);
    auto* pointsTable = w->findChild<QTableWidget*>(QStringLiteral("loraPoints"));
    QCOMPARE(pointsTable->rowCount(), 2);
    QCOMPARE(pointsTable->item(1, 0)->text(), QStringLiteral("2"));
    auto* shapes = w->findChild<QTableWidget*>(QStringLiteral("loraShapes"));
    QCOMPARE(shapes->rowCount(), static_cast<int>(r.shapes.size()));
    QVERIFY(!r.shapes.empty());

    // Text per adapter, base first; the strategies agree on every token.
    QCOMPARE(r.outputs.size(), size_t(3));
    QVERIFY(r.outputs.front().adapter.empty());
    QCOMPARE(r.outputs[1].adapter, std::string("rand-r4-1"));
    const QString html = tab->outputsHtml();
    QVERIFY(html.contains(QStringLiteral("base model")));
    for (const servelab::AdapterOutput& o : r.outputs) {
      QCOMPARE(o.pieces.size(), o.tokens.size());
      if (!o.adapter.empty()) QVERIFY(html.contains(QString::fromStdString(o.adapter)));
      for (int32_t id : o.tokens) QVERIFY(html.contains(QStringLiteral("title='id %1'").arg(id)));
    }
    QVERIFY(r.strategies_agree);
    QVERIFY2(tab->agreementText().contains(QStringLiteral("identical")), qPrintable(tab->agreementText()));
    auto* caveat = w->findChild<QLabel*>(QStringLiteral("loraCaveat"));
    QVERIFY(caveat->isVisibleTo(tab));
    QVERIFY(caveat->text().contains(QStringLiteral("random weights")));
    QVERIFY(tab->summaryText().contains(QStringLiteral("At batch 2")));

    const QJsonObject report = tab->lastResult();
    QVERIFY(!report.isEmpty());
    QVERIFY(!report.contains(QStringLiteral("error")));
    // The charts export.
    QString error;
    const QString png = tmp_.filePath(QStringLiteral("lora.png"));
    QVERIFY2(latency->exportImage(png, &error), qPrintable(error));
    QCOMPARE(QImage(png).size(), QSize(2560, 1440));
    QVERIFY(latency->toCsv().contains(QStringLiteral("segmented,")));
  }

  void badPeftFolderIsRefusedAndTheListKept() {
    auto w = demoWindow(QStringLiteral("peft"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    tab->addRandomAdapters(2, 4, 2);
    QVERIFY(settle(tab));
    QCOMPARE(tab->adapterCount(), 2);
    QVERIFY(tab->adapterError().isEmpty());

    QTemporaryDir empty;
    QVERIFY(empty.isValid());
    QSignalSpy changed(tab, &MultiLoraTab::adaptersChanged);
    tab->loadPeftFolder(empty.path());
    QVERIFY(changed.wait(kRunTimeoutMs));
    QVERIFY(settle(tab));
    QCOMPARE(tab->adapterCount(), 2);
    const QString error = tab->adapterError();
    QVERIFY2(error.contains(QDir::toNativeSeparators(QDir::cleanPath(empty.path()))), qPrintable(error));
    QVERIFY(error.size() > empty.path().size() + 16);  // the engine's reason follows the path
    QVERIFY(w->errorText().isEmpty());                 // the tab's own error area, not the window's
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);

    // A folder that does not exist either.
    tab->loadPeftFolder(tmp_.filePath(QStringLiteral("no-such-adapter")));
    QVERIFY(settle(tab));
    QCOMPARE(tab->adapterCount(), 2);
    QVERIFY(!tab->adapterError().isEmpty());

    // The tab stays usable: another adapter joins and the error goes.
    tab->addRandomAdapters(2, 4, 1);
    QVERIFY(settle(tab));
    QCOMPARE(tab->adapterCount(), 3);
    QVERIFY(tab->adapterError().isEmpty());
    std::set<uint64_t> seeds;
    for (const servelab::AdapterSource& s : tab->adapterSources()) seeds.insert(s.seed);
    QCOMPARE(seeds.size(), size_t(3));
    tab->removeAdapter(0);
    QCOMPARE(tab->adapterCount(), 2);
    QCOMPARE(tab->adapterSources().front().name, std::string("rand-r2-2"));
  }

  // Adapters that peft itself wrote (tests/oracle/make_lora_fixtures.py, a CTest fixture) on the
  // tiny base model they belong to: described as peft configured them, timed, and served.
  void peftFoldersFromPeft() {
    const QString oracle = qEnvironmentVariable("SERVELAB_LORA_ORACLE_DIR");
    if (oracle.isEmpty() || !QFileInfo::exists(oracle + QStringLiteral("/reference.json")))
      QSKIP("SERVELAB_LORA_ORACLE_DIR is not set (ctest sets it after the lora_oracle_fixtures test)");
    const QJsonObject reference =
        QJsonDocument::fromJson(fileBytes(oracle + QStringLiteral("/reference.json"))).object();
    const QJsonObject cases =
        QJsonDocument::fromJson(fileBytes(oracle + QStringLiteral("/bad/cases.json"))).object();
    auto w = makeWindow(QStringLiteral("peft-oracle"));
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadFolder(oracle + QStringLiteral("/base"));
    QVERIFY(ready.wait(kLoadTimeoutMs));
    w->selectTab(QStringLiteral("multi-lora"));
    MultiLoraTab* tab = loraTab(*w);
    const QStringList names = {QStringLiteral("all"), QStringLiteral("attn_r2")};
    for (const QString& name : names) tab->loadPeftFolder(oracle + QStringLiteral("/adapters/") + name);
    QVERIFY(settle(tab));
    QVERIFY2(tab->adapterError().isEmpty(), qPrintable(tab->adapterError()));
    QCOMPARE(tab->adapterCount(), 2);
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("loraAdapterTable"));
    for (int i = 0; i < 2; ++i) {
      const QJsonObject want = reference[QStringLiteral("adapters")].toObject()[names[i]].toObject();
      const std::optional<servelab::AdapterInfo> info = tab->adapterInfo(i);
      QVERIFY(info.has_value());
      QCOMPARE(tab->adapterSources()[i].name, names[i].toStdString());
      QCOMPARE(info->rank, static_cast<int64_t>(want[QStringLiteral("r")].toInt()));
      QCOMPARE(info->alpha, want[QStringLiteral("lora_alpha")].toDouble());
      QCOMPARE(info->scale, want[QStringLiteral("scale")].toDouble());
      QCOMPARE(static_cast<qsizetype>(info->modules.size()),
               want[QStringLiteral("targets")].toArray().size());
      QCOMPARE(table->item(i, 0)->text(), names[i]);
      QCOMPARE(table->item(i, 2)->text(), QString::number(want[QStringLiteral("r")].toInt()));
      QCOMPARE(table->item(i, 5)->text(), QString::number(want[QStringLiteral("targets")].toArray().size()));
    }
    // A broken copy is refused with the reason peft's format gives, naming what is wrong.
    for (const QString& bad :
         {QStringLiteral("wrong_shape"), QStringLiteral("missing_b"), QStringLiteral("dora")}) {
      tab->loadPeftFolder(oracle + QStringLiteral("/bad/") + bad);
      QVERIFY(settle(tab));
      QCOMPARE(tab->adapterCount(), 2);
      const QString expected = cases[bad].toString();
      QVERIFY2(tab->adapterError().contains(expected),
               qPrintable(QStringLiteral("%1: %2").arg(expected, tab->adapterError())));
    }

    // The two adapters in one batch, every strategy, then served through a one-adapter cache.
    tab->setWorkload(QStringLiteral("gpt2"));
    tab->setAssignment(QStringLiteral("rows"));
    tab->setRowAdapters({QString(), QStringLiteral("all"), QStringLiteral("attn_r2")});
    tab->setBatchSizes(QStringLiteral("1,3"));
    tab->setDecodeSteps(1);
    tab->setRepeats(1);
    tab->setContext(4);
    tab->setNewTokens(4);
    QString message;
    QVERIFY2(runToEnd(tab, false, &message), qPrintable(message));
    const servelab::MultiLoraResult& r = tab->result();
    QCOMPARE(r.assignment, std::string("rows"));
    QCOMPARE(r.outputs.size(), size_t(3));
    QCOMPARE(r.outputs[2].adapter, std::string("attn_r2"));
    QVERIFY(r.strategies_agree);
    QCOMPARE(tab->primaryChart()
                 ->seriesPoints(tab->primaryChart()->seriesIndex(QStringLiteral("segmented")))
                 .size(),
             2);

    tab->setServeRequests(4);
    tab->setServeMaxBatch(2);
    tab->setServeNewTokens(2);
    tab->setCacheCapacity(1);
    QVERIFY2(runToEnd(tab, true, &message), qPrintable(message));
    QVERIFY(tab->serveResult().adapter_cache.evictions > 0);
    for (const servelab::RequestResult& rr : tab->serveResult().requests)
      QCOMPARE(rr.adapter, names[static_cast<int>(rr.id % 2)].toStdString());
  }

  void stopKeepsWhatWasMeasured() {
    auto w = demoWindow(QStringLiteral("stop"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    tab->setWorkload(QStringLiteral("gpt2"));
    tab->setRandomAdapters(4, 4);
    // Far more work after the first point than the GUI needs to see it and say stop.
    tab->setBatchSizes(QStringLiteral("1,2,4,8,16,32,64"));
    tab->setRepeats(5);
    tab->setDecodeSteps(4);
    int seen = 0;
    const QMetaObject::Connection stopper = onEveryJob(w->engine(), &EngineJob::point, w.get(), [&] {
      if (++seen == 1) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->runSweep());
    QVERIFY(tab->isRunning());
    QVERIFY(!tab->runSweep());  // one run at a time
    QVERIFY(done.wait(kRunTimeoutMs));
    QCOMPARE(done.front().at(0).toBool(), false);
    QVERIFY(!tab->isRunning());
    QVERIFY(!tab->hasResult());
    QCOMPARE(tab->findChild<QProgressBar*>(QStringLiteral("loraProgress"))->format(),
             QStringLiteral("stopped"));
    QVERIFY(tab->summaryText().contains(QStringLiteral("Stopped")));
    QVERIFY(w->errorText().isEmpty());
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    int kept = 0;
    for (int i = 0; i < tab->primaryChart()->seriesCount(); ++i)
      kept += static_cast<int>(tab->primaryChart()->seriesPoints(i).size());
    QVERIFY(kept >= 1);
    QVERIFY(tab->findChild<QPushButton*>(QStringLiteral("loraRun"))->isEnabled());
    QVERIFY(!tab->findChild<QPushButton*>(QStringLiteral("loraStop"))->isEnabled());

    // A second run completes.
    disconnect(stopper);
    tab->setWorkload(QStringLiteral("toy"));
    tab->setToySamples(2);
    tab->setBatchSizes(QStringLiteral("2"));
    tab->setRepeats(1);
    QString message;
    QVERIFY2(runToEnd(tab, false, &message), qPrintable(message));
    QVERIFY(tab->hasResult());
  }

  void servingWithAOneAdapterCacheEvicts() {
    auto w = demoWindow(QStringLiteral("serve"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    tab->addRandomAdapters(4, 8, 2);
    QVERIFY(settle(tab));
    tab->setServeRequests(6);
    tab->setServeMaxBatch(4);
    tab->setServeNewTokens(3);
    tab->setCacheCapacity(1);
    tab->setServeStrategy(QStringLiteral("segmented"));
    const servelab::AdapterServingParams p = tab->serveParams();
    const std::vector<std::string> requestAdapters = servelab::adapter_serving_assignment(p);
    QCOMPARE(servelab::adapter_serving_adapters(p).size(), size_t(2));
    QCOMPARE(requestAdapters, (std::vector<std::string>{"rand-r4-1", "rand-r4-2", "rand-r4-1", "rand-r4-2",
                                                        "rand-r4-1", "rand-r4-2"}));
    QCOMPARE(p.cache_capacity, qint64(1));
    JobSpy steps(w->engine(), &EngineJob::batchStep);
    // Ctrl+Return runs what the view in front shows.
    tab->showView(QStringLiteral("serve"));
    QCOMPARE(tab->primaryChart()->objectName(), QStringLiteral("loraCacheChart"));  // what Ctrl+E exports
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->run());
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasServeResult());
    QVERIFY(!tab->hasResult());  // not the sweep
    const servelab::BatchRunResult& r = tab->serveResult();
    QCOMPARE(r.requests.size(), size_t(6));
    QCOMPARE(r.adapter_cache.capacity, int64_t(1));
    QVERIFY(r.adapter_cache.evictions > 0);
    QVERIFY(r.adapter_cache.loads >= 2);
    QVERIFY(r.adapter_cache.resident <= 1);
    QCOMPARE(steps.size(), static_cast<qsizetype>(r.steps.size()));
    // The counters as the last step reported them.
    const servelab::AdapterCacheStats& last =
        qvariant_cast<servelab::BatchStep>(steps.last().at(0)).adapter_cache;
    QCOMPARE(tab->liveCache().evictions, r.adapter_cache.evictions);
    QCOMPARE(last.evictions, r.adapter_cache.evictions);
    const QString evictions = w->findChild<QLabel*>(QStringLiteral("loraCacheEvictions"))->text();
    QVERIFY2(evictions.contains(QStringLiteral(">%1<").arg(r.adapter_cache.evictions)),
             qPrintable(evictions));
    const QString resident = w->findChild<QLabel*>(QStringLiteral("loraCacheResident"))->text();
    QVERIFY2(resident.contains(QStringLiteral("%1 / 1").arg(r.adapter_cache.resident)), qPrintable(resident));
    // Each request's adapter in the table.
    auto* requests = w->findChild<QTableWidget*>(QStringLiteral("loraRequests"));
    QCOMPARE(requests->rowCount(), 6);
    for (const servelab::RequestResult& rr : r.requests) {
      QCOMPARE(rr.adapter, requestAdapters[size_t(rr.id)]);
      QCOMPARE(requests->item(static_cast<int>(rr.id), 1)->text(), QString::fromStdString(rr.adapter));
      QCOMPARE(requests->item(static_cast<int>(rr.id), 6)->text(), QString::number(rr.generated_ids.size()));
    }
    // The cache chart ends on the result's counters.
    auto* chart = w->findChild<ChartView*>(QStringLiteral("loraCacheChart"));
    const QVector<QPointF> ev = chart->seriesPoints(chart->seriesIndex(QStringLiteral("evictions")));
    QCOMPARE(ev.size(), static_cast<qsizetype>(r.steps.size()));
    QCOMPARE(ev.last().y(), static_cast<double>(r.adapter_cache.evictions));
    QVERIFY(tab->serveSummaryText().contains(QStringLiteral("evictions")));
    const QJsonObject report = tab->lastResult();
    QCOMPARE(report[QStringLiteral("serve")]
                 .toObject()[QStringLiteral("adapter_cache")]
                 .toObject()[QStringLiteral("evictions")]
                 .toInteger(),
             static_cast<qint64>(r.adapter_cache.evictions));

    // An empty list serves random adapters with distinct seeds.
    tab->clearAdapters();
    tab->setRandomAdapters(3, 2);
    const servelab::AdapterServingParams random = tab->serveParams();
    const std::vector<servelab::AdapterSource> randomAdapters = servelab::adapter_serving_adapters(random);
    QCOMPARE(randomAdapters.size(), size_t(3));
    std::set<uint64_t> seeds;
    for (const servelab::AdapterSource& s : randomAdapters) seeds.insert(s.seed);
    QCOMPARE(seeds.size(), size_t(3));
    QCOMPARE(servelab::adapter_serving_assignment(random)[3], randomAdapters[0].name);
  }

  void stopWhileServing() {
    auto w = demoWindow(QStringLiteral("serve-stop"));
    QVERIFY(w);
    MultiLoraTab* tab = loraTab(*w);
    tab->setRandomAdapters(3, 4);  // an empty list: three random adapters
    tab->setServeRequests(64);     // far more work than the GUI needs to see a step and say stop
    tab->setServeMaxBatch(2);
    tab->setServeNewTokens(20);
    tab->setCacheCapacity(1);
    int steps = 0;
    const QMetaObject::Connection stopper = onEveryJob(w->engine(), &EngineJob::batchStep, w.get(), [&] {
      if (++steps == 2) w->stopCurrent();
    });
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY(tab->serve());
    QCOMPARE(tab->currentView(), QStringLiteral("serve"));
    QVERIFY(done.wait(kRunTimeoutMs));
    disconnect(stopper);
    QCOMPARE(done.front().at(0).toBool(), false);
    QVERIFY(!tab->hasServeResult());
    QCOMPARE(tab->findChild<QProgressBar*>(QStringLiteral("loraServeProgress"))->format(),
             QStringLiteral("stopped"));
    QVERIFY(tab->serveSummaryText().contains(QStringLiteral("Stopped")));
    QVERIFY(w->errorText().isEmpty());
    QCOMPARE(w->engine()->state(), EngineController::State::Idle);
    // What was seen stays: the cache counters and the queue, the first requests running or done.
    QVERIFY(tab->liveCache().loads >= 1);
    auto* requests = w->findChild<QTableWidget*>(QStringLiteral("loraRequests"));
    QCOMPARE(requests->rowCount(), 64);
    QVERIFY(requests->item(0, 2)->text() != QStringLiteral("waiting"));
    QCOMPARE(requests->item(63, 2)->text(), QStringLiteral("waiting"));
    QVERIFY(tab->findChild<QPushButton*>(QStringLiteral("loraServe"))->isEnabled());
    QVERIFY(!tab->findChild<QPushButton*>(QStringLiteral("loraServeStop"))->isEnabled());

    // And serving again completes.
    tab->setServeRequests(3);
    tab->setServeNewTokens(2);
    QString message;
    QVERIFY2(runToEnd(tab, true, &message), qPrintable(message));
    QCOMPARE(tab->serveResult().requests.size(), size_t(3));
  }

  void builtinAdaptersByDefault() {
    // On the built-in model, with no adapters chosen, the list holds the three built-in adapters
    // under the course's ids, each with its prompt format; the text per adapter shows each one
    // doing its own job on its own prompt, the base model beside it; another model drops them.
    if (!QFileInfo::exists(QStringLiteral(SERVELAB_SOURCE_DIR
                                          "/.venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf")))
      QSKIP("the built-in model is absent (scripts/bootstrap installs it)");
    QVERIFY2(!servelab::builtin_adapters_dir().empty(), "resources/adapters/ was not found");
    auto w = makeWindow(QStringLiteral("builtin-adapters"));
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadBuiltin();
    QVERIFY(ready.wait(kLoadTimeoutMs));
    QVERIFY(w->engine()->model().builtin);
    w->selectTab(QStringLiteral("multi-lora"));
    MultiLoraTab* tab = loraTab(*w);
    QVERIFY(QTest::qWaitFor([tab] { return tab->adapterCount() == 3; }, kRunTimeoutMs));
    QVERIFY(settle(tab));
    const QStringList ids = {QStringLiteral("predibase/hellaswag_processed"), QStringLiteral("predibase/cnn"),
                             QStringLiteral("predibase/conllpp")};
    auto* table = w->findChild<QTableWidget*>(QStringLiteral("loraAdapterTable"));
    for (int r = 0; r < 3; ++r) {
      QCOMPARE(QString::fromStdString(tab->adapterSources()[r].name), ids[r]);
      QVERIFY(QTest::qWaitFor([tab, r] { return tab->adapterInfo(r).has_value(); }, kRunTimeoutMs));
      QCOMPARE(tab->adapterInfo(r)->rank, int64_t(16));
      QCOMPARE(tab->adapterInfo(r)->modules.size(), size_t(7 * 30));
    }
    QVERIFY(tab->adapterError().isEmpty());
    QVERIFY(table->item(2, 8)->text().contains(QStringLiteral("named entities as JSON")));
    QVERIFY(table->item(2, 8)->toolTip().contains(QStringLiteral("Input: {input} Output:")));
    QVERIFY(table->item(1, 8)->toolTip().contains(QStringLiteral("### Article: {input}")));
    QVERIFY(w->findChild<QLabel*>(QStringLiteral("loraAdapterHint"))
                ->text()
                .contains(QStringLiteral("Built-in adapters")));
    const servelab::MultiLoraParams p = tab->params();
    QCOMPARE(p.adapter_prompts.size(), size_t(3));
    QVERIFY(p.new_tokens >= 64);

    // One short sweep: the text per adapter, each adapter on its own prompt.
    tab->setWorkload(QStringLiteral("gpt2"));
    tab->setAssignment(QStringLiteral("distinct"));
    tab->setBatchSizes(QStringLiteral("1"));
    tab->setStrategies({QStringLiteral("segmented")});
    tab->setRepeats(1);
    tab->setDecodeSteps(1);
    QString message;
    QVERIFY2(runToEnd(tab, false, &message), qPrintable(message));
    const servelab::MultiLoraResult& r = tab->result();
    QCOMPARE(r.outputs.size(), size_t(6));  // each adapter, then the base model on its prompt
    const servelab::AdapterOutput* ner = nullptr;
    const servelab::AdapterOutput* nerBase = nullptr;
    for (const servelab::AdapterOutput& o : r.outputs) {
      if (o.adapter == "predibase/conllpp") ner = &o;
      if (ner && o.adapter.empty() && o.prompt == ner->prompt) nerBase = &o;
    }
    QVERIFY(ner && nerBase);
    QVERIFY(ner->prompt.find("Input: Only France and Britain backed Fischler 's proposal . Output:") !=
            std::string::npos);
    QCOMPARE(ner->text, std::string(" {\"person\": [\"Fischler\"], \"organization\": [], \"location\": "
                                    "[\"France\", \"Britain\"], \"miscellaneous\": []}"));
    QVERIFY(nerBase->text != ner->text);
    const QString html = tab->outputsHtml();
    QVERIFY(html.contains(QStringLiteral("through the adapter")));
    QVERIFY(html.contains(QStringLiteral("base model, same prompt")));
    QVERIFY(html.contains(QStringLiteral("Fischler")));

    // Another model: the built-in adapters would not fit, the list goes back to random ones.
    QSignalSpy demoReady(w.get(), &MainWindow::modelReady);
    w->loadDemo();
    QVERIFY(demoReady.wait(kLoadTimeoutMs));
    QVERIFY(QTest::qWaitFor([tab] { return tab->adapterCount() == 0; }, kRunTimeoutMs));
    QVERIFY(tab->adapterError().isEmpty());
    QVERIFY(
        w->findChild<QLabel*>(QStringLiteral("loraAdapterHint"))->text().contains(QStringLiteral("random")));
  }

  void chosenListKeepsTheBuiltinAdaptersOut() {
    if (!QFileInfo::exists(QStringLiteral(SERVELAB_SOURCE_DIR
                                          "/.venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf")))
      QSKIP("the built-in model is absent (scripts/bootstrap installs it)");
    {
      auto w = makeWindow(QStringLiteral("chosen"));
      QSignalSpy ready(w.get(), &MainWindow::modelReady);
      w->loadBuiltin();
      QVERIFY(ready.wait(kLoadTimeoutMs));
      MultiLoraTab* tab = loraTab(*w);
      QVERIFY(QTest::qWaitFor([tab] { return tab->adapterCount() == 3; }, kRunTimeoutMs));
      QVERIFY(settle(tab));
      tab->clearAdapters();  // the user's choice: no adapters (the experiment makes random ones)
      QCOMPARE(tab->adapterCount(), 0);
      w->close();
    }
    auto w = makeWindow(QStringLiteral("chosen"));
    QSignalSpy ready(w.get(), &MainWindow::modelReady);
    w->loadBuiltin();
    QVERIFY(ready.wait(kLoadTimeoutMs));
    MultiLoraTab* tab = loraTab(*w);
    QVERIFY(settle(tab));
    QCOMPARE(tab->adapterCount(), 0);
  }

  void settingsPersist() {
    {
      auto w = makeWindow(QStringLiteral("persist"));
      MultiLoraTab* tab = loraTab(*w);
      tab->addRandomAdapters(16, 32, 2);  // no model yet: listed now, described once one loads
      QCOMPARE(tab->adapterCount(), 2);
      tab->setWorkload(QStringLiteral("toy"));
      tab->setAssignment(QStringLiteral("rows"));
      tab->setRowAdapters({QString(), QStringLiteral("rand-r16-2"), QStringLiteral("rand-r16-1")});
      tab->setBatchSizes(QStringLiteral("1,4"));
      tab->setStrategies({QStringLiteral("gathered"), QStringLiteral("segmented")});
      tab->setCacheCapacity(3);
      tab->setMathModule(QStringLiteral("mlp.c_fc"));
      tab->setMathRank(5);
      tab->showView(QStringLiteral("serve"));
      w->close();
    }
    auto w = makeWindow(QStringLiteral("persist"));
    // What the app saved, it takes back without a warning (adapters, lists, choices, bools).
    QVERIFY2(w->settingsWarningText().isEmpty(), qPrintable(w->settingsWarningText()));
    MultiLoraTab* tab = loraTab(*w);
    QCOMPARE(tab->adapterCount(), 2);
    QCOMPARE(tab->adapterSources()[1].name, std::string("rand-r16-2"));
    QCOMPARE(tab->adapterSources()[1].rank, int64_t(16));
    QCOMPARE(tab->adapterSources()[1].alpha, 32.0);
    QCOMPARE(tab->rowAdapters(),
             (QStringList{QString(), QStringLiteral("rand-r16-2"), QStringLiteral("rand-r16-1")}));
    const servelab::MultiLoraParams p = tab->params();
    QCOMPARE(p.workload, std::string("toy"));
    QCOMPARE(p.assignment, std::string("rows"));
    QCOMPARE(p.row_adapters, (std::vector<std::string>{"", "rand-r16-2", "rand-r16-1"}));
    QCOMPARE(p.batch_sizes, (std::vector<int64_t>{1, 4}));
    QCOMPARE(p.strategies, (std::vector<std::string>{"gathered", "segmented"}));
    QCOMPARE(tab->serveParams().cache_capacity, qint64(3));
    QCOMPARE(tab->math().rank, qint64(5));
    QCOMPARE(tab->currentView(), QStringLiteral("serve"));
  }

  void scriptedRunExitsZero() {
    const QString ini = settingsPath(QStringLiteral("script"));
    {
      QSettings s(ini, QSettings::IniFormat);
      s.setValue(QStringLiteral("multi-lora/workload"), QStringLiteral("toy"));
      s.setValue(QStringLiteral("multi-lora/toySamples"), 3);
      s.setValue(QStringLiteral("multi-lora/batchSizes"), QStringLiteral("1,2"));
      s.setValue(QStringLiteral("multi-lora/repeats"), 1);
    }
    const QString shot = tmp_.filePath(QStringLiteral("lora-shot.png")),
                  chart = tmp_.filePath(QStringLiteral("lora-chart.png")),
                  report = tmp_.filePath(QStringLiteral("lora.json"));
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    app.setProcessEnvironment(env);
    app.start(QStringLiteral(SERVELAB_GUI),
              {QStringLiteral("--settings"), ini, QStringLiteral("--demo"), QStringLiteral("--tab"),
               QStringLiteral("multi-lora"), QStringLiteral("--run"), QStringLiteral("--screenshot"), shot,
               QStringLiteral("--export-chart"), chart, QStringLiteral("--report"), report});
    QVERIFY(app.waitForFinished(kRunTimeoutMs));
    QVERIFY2(app.exitCode() == 0, app.readAllStandardError().constData());
    QVERIFY(!QImage(shot).isNull());
    QVERIFY(QImage(chart).width() >= 1280);
    const QJsonObject r = QJsonDocument::fromJson(fileBytes(report)).object();
    QCOMPARE(r[QStringLiteral("ok")].toBool(), true);
    QVERIFY(!r.contains(QStringLiteral("error")));
  }
};

QTEST_MAIN(TestMultiLoraTab)
#include "test_multi_lora_tab.moc"
