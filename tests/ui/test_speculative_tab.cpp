// The Speculative decoding tab end to end on the offscreen platform, on the tiny test model: a
// prompt-lookup run whose steps the text view shows (proposals, accepted, rejected struck through)
// exactly as the run's SpecDecodeStats count them, the charts drawn from the result, the k sweep,
// presets, settings and the scripted --tab/--run mode. No assertion depends on how long anything
// takes.
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>
#include <QtWidgets>
#include <memory>

#include "chart_view.h"
#include "engine_controller.h"
#include "main_window.h"
#include "roofline_check.h"
#include "speculative/spec_charts.h"
#include "speculative/spec_text_view.h"
#include "speculative_tab.h"
#include "tiny_model.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 240000;

// Characters of the document drawn struck through.
int struckCharacters(const QTextDocument* doc) {
  int n = 0;
  for (QTextBlock b = doc->begin(); b.isValid(); b = b.next())
    for (auto it = b.begin(); !it.atEnd(); ++it)
      if (it.fragment().charFormat().fontStrikeOut()) n += it.fragment().length();
  return n;
}

}  // namespace

class TestSpeculativeTab : public QObject {
  Q_OBJECT
  QTemporaryDir tmp_;
  QString tiny_;

  std::unique_ptr<MainWindow> tinyWindow(const QString& name) {
    return windowWithModel(tmp_.filePath(name + QStringLiteral(".ini")), tiny_, kLoadTimeoutMs);
  }
  static SpeculativeTab* specTab(MainWindow& w) {
    return qobject_cast<SpeculativeTab*>(w.tab(QStringLiteral("speculative")));
  }
  // A prompt that repeats itself: prompt lookup finds matches from the first step on.
  static void smallRun(SpeculativeTab* tab) {
    tab->setPrompt(QStringLiteral("one two three four one two three four one two three four one two"));
    tab->setMethod(servelab::SpeculativeMethod::Ngram);
    tab->setK(4);
    tab->setNewTokens(24);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    tiny_ = tmp_.filePath(QStringLiteral("tiny"));
    const QString error = writeTinyModel(tiny_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
  }

  void ngramRunShowsEveryVerifiedStep() {
    auto w = tinyWindow(QStringLiteral("run"));
    QVERIFY(w);
    SpeculativeTab* tab = specTab(*w);
    QVERIFY(tab);
    w->selectTab(tab->tabId());
    smallRun(tab);
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY2(tab->run(), qPrintable(tab->refusal()));
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasResult());

    const servelab::SpeculativeDemoResult& r = tab->result();
    const servelab::SpecDecodeStats& st = r.speculative.speculative;
    QVERIFY2(st.num_drafts > 0, "prompt lookup proposed nothing on a prompt that repeats itself");
    QVERIFY(r.identical);
    const SpecTextView& view = tab->textView();
    // Every step of the run, and exactly the proposals and acceptances the engine counted.
    QCOMPARE(view.stepsShown(), static_cast<int>(r.speculative.steps.size()));
    QCOMPARE(view.stepsWithProposals(), static_cast<int>(st.num_drafts));
    QCOMPARE(view.proposedShown(), st.num_draft_tokens);
    QCOMPARE(view.acceptedShown(), st.num_accepted_tokens);
    QCOMPARE(view.generatedText(), QString::fromStdString(r.speculative.requests[0].text));
    // Rejected proposals are struck through, and only they.
    QCOMPARE(struckCharacters(view.document()) > 0, view.rejectedShown() > 0);

    // Charts drawn from the result.
    ChartView* accepted = tab->charts()[0];
    const QVector<QPointF> gained = accepted->seriesPoints(accepted->seriesIndex(specGainedSeries()));
    QCOMPARE(gained.size(), static_cast<qsizetype>(r.speculative.steps.size()));
    const QVector<QPointF> proposed = accepted->seriesPoints(accepted->seriesIndex(specProposedSeries()));
    QCOMPARE(proposed.size(), static_cast<qsizetype>(st.num_drafts));
    double acceptedSum = 0;
    for (const QPointF& p : gained) acceptedSum += p.y() - 1;
    QCOMPARE(static_cast<qint64>(acceptedSum), st.num_accepted_tokens);
    ChartView* throughput = tab->charts()[1];
    QVERIFY(!throughput->seriesPoints(throughput->seriesIndex(specPlainSeries())).isEmpty());
    QVERIFY(!throughput->seriesPoints(throughput->seriesIndex(specSpeculativeSeries())).isEmpty());
    ChartView* time = tab->charts()[3];
    QCOMPARE(time->barSetCount(), 3);
    QCOMPARE(time->barSetValues(1)[1], st.draft_ms);
    // Beside it, the roofline: plain decoding's steps and the verify steps, which feed several
    // positions a step for the same weights read.
    auto* roofline = tab->findChild<RooflineChart*>(QStringLiteral("specRooflineChart"));
    QVERIFY(roofline && tab->charts().contains(roofline));
    const QString mismatch = servelab::ui::test::roofline_mismatch(*roofline, r.roofline);
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
    const servelab::RooflinePoint *decode = nullptr, *verify = nullptr;
    for (const servelab::RooflinePoint& p : r.roofline) {
      if (p.kind == "decode") decode = &p;
      if (p.kind == "verify") verify = &p;
    }
    QVERIFY(decode && verify);
    QVERIFY(verify->positions > 1);
    QVERIFY(verify->intensity() > decode->intensity());

    const QJsonObject o = tab->lastResult();
    QCOMPARE(o.value(QStringLiteral("num_drafts")).toInteger(), st.num_drafts);
    QCOMPARE(o.value(QStringLiteral("num_accepted_tokens")).toInteger(), st.num_accepted_tokens);
    QVERIFY(tab->summaryText().contains(QStringLiteral("%1 of %2 proposed tokens accepted")
                                            .arg(st.num_accepted_tokens)
                                            .arg(st.num_draft_tokens)));
  }

  void sweepDrawsSpeedupAgainstK() {
    auto w = tinyWindow(QStringLiteral("sweep"));
    QVERIFY(w);
    SpeculativeTab* tab = specTab(*w);
    smallRun(tab);
    tab->setNewTokens(12);
    tab->setSweepKs({1, 4});
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY2(tab->runSweep(), qPrintable(tab->refusal()));
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasSweep());
    QCOMPARE(tab->sweep().runs.size(), size_t(3));  // plain, k 1, k 4
    for (const servelab::SpeculativeBenchRun& run : tab->sweep().runs) QVERIFY(run.identical);
    ChartView* speedup = tab->charts()[2];
    const QVector<QPointF> points = speedup->seriesPoints(speedup->seriesIndex(specSpeedupSeries()));
    QCOMPARE(points.size(), 2);
    QCOMPARE(points[0].x(), 1.0);
    QCOMPARE(points[1].x(), 4.0);
    QCOMPARE(points[1].y(), tab->sweep().runs[2].speedup);
    QVERIFY(tab->lastResult().contains(QStringLiteral("sweep")));
  }

  void draftPresetRunsTheInt4DraftModel() {
    // The draft preset: the model's own int4 copy drafts and the model verifies, so greedy text is
    // plain decoding's and proposals are made at every step the budget allows.
    auto w = tinyWindow(QStringLiteral("draft"));
    QVERIFY(w);
    SpeculativeTab* tab = specTab(*w);
    tab->setNewTokens(12);
    tab->setSweepKs({2});
    QSignalSpy done(tab, &ExperimentTab::runFinished);
    QVERIFY2(tab->runPresetId(QStringLiteral("draft")), qPrintable(tab->refusal()));
    QVERIFY(done.wait(kRunTimeoutMs));
    QVERIFY2(done.front().at(0).toBool(), qPrintable(done.front().at(1).toString()));
    QVERIFY(tab->hasResult());
    const servelab::SpeculativeDemoResult& r = tab->result();
    QCOMPARE(r.params.method, servelab::SpeculativeMethod::DraftModel);
    QVERIFY2(QString::fromStdString(r.pairing).contains(QStringLiteral("int4")), r.pairing.c_str());
    QVERIFY(r.identical);
    QVERIFY(r.speculative.speculative.num_drafts > 0);
    QCOMPARE(tab->textView().stepsWithProposals(), static_cast<int>(r.speculative.speculative.num_drafts));
  }

  void presetsAndRefusals() {
    auto w = tinyWindow(QStringLiteral("presets"));
    QVERIFY(w);
    SpeculativeTab* tab = specTab(*w);
    QCOMPARE(tab->presetIds(),
             (QStringList{QStringLiteral("grounded"), QStringLiteral("open"), QStringLiteral("draft")}));
    QVERIFY(!tab->runPresetId(QStringLiteral("nope")));
    QVERIFY(tab->refusal().contains(QStringLiteral("grounded")));
    tab->setPrompt(QString());
    QVERIFY(!tab->run());
    QVERIFY(tab->refusal().contains(QStringLiteral("empty")));
    QCOMPARE(SpeculativeTab::groundedPrompts().size(), 8);
    QCOMPARE(SpeculativeTab::openPrompts().size(), 8);
  }

  void settingsRoundTrip() {
    const QString path = tmp_.filePath(QStringLiteral("persist.ini"));
    {
      MainWindow w(std::make_unique<QSettings>(path, QSettings::IniFormat));
      SpeculativeTab* tab = specTab(w);
      tab->setPrompt(QStringLiteral("Repeat: a b c"));
      tab->setMethod(servelab::SpeculativeMethod::DraftModel);
      tab->setK(7);
      tab->setNewTokens(33);
      w.close();
    }
    MainWindow w(std::make_unique<QSettings>(path, QSettings::IniFormat));
    SpeculativeTab* tab = specTab(w);
    QCOMPARE(tab->prompt(), QStringLiteral("Repeat: a b c"));
    const servelab::SpeculativeDemoParams p = tab->params();
    QCOMPARE(p.method, servelab::SpeculativeMethod::DraftModel);
    QCOMPARE(p.k, 7);
    QCOMPARE(p.new_tokens, 33);
  }

  void scriptedRun() {
    const QString report = tmp_.filePath(QStringLiteral("report.json"));
    const QString settings = tmp_.filePath(QStringLiteral("script.ini"));
    {
      QSettings s(settings, QSettings::IniFormat);
      s.setValue(QStringLiteral("speculative/newTokens"), 8);
      s.setValue(QStringLiteral("speculative/prompt"), QStringLiteral("a b c a b c a b c a b"));
    }
    QString failure;
    const QJsonObject o =
        runScriptedReport(QStringLiteral(SERVELAB_GUI),
                          {QStringLiteral("--settings"), settings, QStringLiteral("--model"), tiny_,
                           QStringLiteral("--tab"), QStringLiteral("speculative"), QStringLiteral("--run")},
                          report, kRunTimeoutMs, &failure);
    QVERIFY2(failure.isEmpty(), qPrintable(failure));
    QVERIFY(o.value(QStringLiteral("ok")).toBool());
    QCOMPARE(o.value(QStringLiteral("experiment")).toString(), QStringLiteral("speculative-decoding"));
    QCOMPARE(o.value(QStringLiteral("method")).toString(), QStringLiteral("ngram"));
  }
};

QTEST_MAIN(TestSpeculativeTab)
#include "test_speculative_tab.moc"
