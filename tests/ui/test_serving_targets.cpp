// The Serving tab's load targets and runs on the offscreen platform, against
// tests/serve/loadgen_test_server.py (no model is loaded: every run goes to that server):
// a saved target keeps its API key out of the settings file, and where no keychain answers (no
// Secret Service here, as under Xvfb) the key is kept for the session only and the form says so;
// Fetch lists the target's models or says why not; a load run gets the selected target's URL, API,
// model, headers, key and TLS choice (the server sees the key); the client-side TTFT and inter-token
// distributions fill for a remote run; a run saved, reopened and compared with another, and corrupt
// or foreign files refused with nothing lost. No assertion depends on how long anything takes.
// SERVELAB_SCREENSHOT_DIR=dir writes dir/serving-targets.png of the tab comparing two sweeps and
// dir/serving-remote-run.png of a remote three-stream run, dir/serving-saturated-chart.png of a
// sweep past its peak compared with another. SERVELAB_TEST_REAL_KEYCHAIN=1, under a
// session bus with a Secret Service (dbus-run-session, gnome-keyring-daemon --unlock), checks the
// keychain path instead: the key is stored there, and a second store reads it back.
#include <QCheckBox>
#include <QComboBox>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QtWidgets>
#include <nlohmann/json.hpp>

#include "../core/loadgen_test_server.h"
#include "chart_view.h"
#include "engine_controller.h"
#include "serving/key_store.h"
#include "serving/target_list.h"
#include "serving_load_run.h"
#include "serving_tab.h"

using namespace servelab::ui;

namespace {

constexpr int kRunTimeoutMs = 300000;
const QString kKey = QStringLiteral("sk-servelab-test-4f1c9b");

bool hasHeader(const servelab::LoadTarget& t, const std::string& k, const std::string& v) {
  for (const auto& [hk, hv] : t.headers)
    if (hk == k && hv == v) return true;
  return false;
}

}  // namespace

class TestServingTargets : public QObject {
  Q_OBJECT
  std::unique_ptr<EngineController> engine_;
  std::unique_ptr<ServingTab> tab_;
  QProcess server_;
  QString base_;
  QTemporaryDir dir_;

  nlohmann::json stats() const {
    QProcess p;
    p.start(QStringLiteral(SERVELAB_TEST_PYTHON),
            {QStringLiteral("-c"), QStringLiteral("import urllib.request,sys;sys.stdout.write(urllib.request."
                                                  "urlopen('%1/stats').read().decode())")
                                       .arg(base_)});
    if (!p.waitForFinished(60000)) return nlohmann::json::object();
    return nlohmann::json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
  }
  bool runLoad(QString* message) { return servelab::ui::test::run_load(*tab_, kRunTimeoutMs, message); }
  ChartView* chart(const char* name) const { return tab_->findChild<ChartView*>(QString::fromLatin1(name)); }
  TargetEditor* editor() const { return tab_->targetEditor(); }
  static bool realKeychain() { return qEnvironmentVariableIsSet("SERVELAB_TEST_REAL_KEYCHAIN"); }

 private Q_SLOTS:
  void initTestCase() {
    // No Secret Service, as under Xvfb: a session bus that is not there.
    if (!realKeychain()) qputenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/servelab-test-bus");
    QString why;
    base_ = servelab::test::start_loadgen_test_server(server_, &why);
    QVERIFY2(!base_.isEmpty(), qPrintable(why));
    engine_ = std::make_unique<EngineController>();
    tab_ = std::make_unique<ServingTab>(engine_.get());
    tab_->resize(1600, 1000);
    tab_->show();
  }
  void cleanupTestCase() {
    tab_.reset();
    engine_.reset();
    server_.closeWriteChannel();
    if (!server_.waitForFinished(10000)) {
      server_.kill();
      server_.waitForFinished(10000);
    }
  }

  void keyKeptOutOfTheSettings() {
    TargetEditor* e = editor();
    e->setTarget(base_ + QStringLiteral("/s2"), QStringLiteral("openai"));
    e->setName(QStringLiteral("staging"));
    e->addHeader(QStringLiteral("X-Team"), QStringLiteral("lab"));
    e->setKey(kKey);
    QVERIFY2(e->saveTarget(), qPrintable(e->status()));
    // No keychain answers here: the key stays for the session only, and the form says so.
    QTRY_VERIFY_WITH_TIMEOUT(e->keyStore()->where() != KeyStore::Where::NotYetAsked,
                             KeyStore::kAnswerMs + 20000);
    if (realKeychain()) {
      QCOMPARE(e->keyStore()->where(), KeyStore::Where::Keychain);
      QVERIFY2(e->keyNote().contains(QStringLiteral("system keychain")), qPrintable(e->keyNote()));
      KeyStore again(QStringLiteral("ServeLab"));
      again.fetch(QStringLiteral("staging"));
      QTRY_COMPARE_WITH_TIMEOUT(again.key(QStringLiteral("staging")), kKey, KeyStore::kAnswerMs + 20000);
    } else {
      QCOMPARE(e->keyStore()->where(), KeyStore::Where::SessionOnly);
      QVERIFY2(e->keyNote().contains(QStringLiteral("kept for this session only")), qPrintable(e->keyNote()));
    }
    QCOMPARE(e->keyStore()->key(QStringLiteral("staging")), kKey);

    const QString ini = dir_.filePath(QStringLiteral("settings.ini"));
    {
      QSettings s(ini, QSettings::IniFormat);
      tab_->saveSettings(s);
    }
    QFile f(ini);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray text = f.readAll();
    QVERIFY2(!text.contains(kKey.toUtf8()), text.constData());
    QVERIFY(text.contains("staging"));
    QVERIFY(text.contains("X-Team"));
    // Read back: the target and its header, without the key (this session's store is another's).
    ServingTab other(engine_.get());
    QSettings s(ini, QSettings::IniFormat);
    other.loadSettings(s);
    QCOMPARE(other.targetEditor()->targetNames(), QStringList{QStringLiteral("staging")});
    QString why;
    const auto t = other.targetEditor()->target(&why);
    QVERIFY2(t, qPrintable(why));
    QCOMPARE(t->url, (base_ + QStringLiteral("/s2")).toStdString());
    QVERIFY(hasHeader(*t, "X-Team", "lab"));
    QVERIFY(!hasHeader(*t, "Authorization", "Bearer " + kKey.toStdString()));
    // A header that would carry a key in plain text is refused, with the reason.
    e->addHeader(QStringLiteral("Authorization"), QStringLiteral("Bearer x"));
    e->setKey(QString());
    QVERIFY(!e->saveTarget());
    QVERIFY2(e->status().contains(QStringLiteral("headers are saved in plain text")),
             qPrintable(e->status()));
    QVERIFY(e->selectTarget(QStringLiteral("staging")));
  }

  void fetchListsModelsOrSaysWhy() {
    TargetEditor* e = editor();
    QVERIFY(e->selectTarget(QStringLiteral("staging")));
    QSignalSpy fetched(e, &TargetEditor::modelsFetched);
    QVERIFY(e->fetchModels());
    QVERIFY(fetched.wait(60000));
    QVERIFY2(fetched.first().first().toBool(), qPrintable(fetched.first().at(1).toString()));
    QCOMPARE(e->models(), QStringList{QStringLiteral("test-model")});
    // The fetch carried the target's key.
    QCOMPARE(stats()["authorizations"].back().get<std::string>(), "Bearer " + kKey.toStdString());

    e->setTarget(QStringLiteral("http://127.0.0.1:1"), QStringLiteral("openai"));
    fetched.clear();
    QVERIFY(e->fetchModels());
    QVERIFY(fetched.wait(60000));
    QVERIFY(!fetched.first().first().toBool());
    QVERIFY2(e->status().contains(QStringLiteral("Cannot list the models: cannot reach http://127.0.0.1:1")),
             qPrintable(e->status()));
  }

  void loadRunGetsTheSelectedTarget() {
    TargetEditor* e = editor();
    QVERIFY(e->selectTarget(QStringLiteral("staging")));
    e->setModel(QStringLiteral("test-model"));
    tab_->setScenario(QStringLiteral("three_streams"));
    tab_->setLoadNewTokens(12);
    QString message;
    QVERIFY2(runLoad(&message), qPrintable(message));
    const servelab::LoadTarget& t = tab_->lastLoadTarget();
    QCOMPARE(t.url, (base_ + QStringLiteral("/s2")).toStdString());
    QCOMPARE(t.api, servelab::LoadApi::OpenAI);
    QCOMPARE(t.model, std::string("test-model"));
    QVERIFY(hasHeader(t, "X-Team", "lab"));
    QVERIFY(hasHeader(t, "Authorization", "Bearer " + kKey.toStdString()));
    QVERIFY(!t.insecure);
    const nlohmann::json s = stats();
    QCOMPARE(s["models"].back().get<std::string>(), std::string("test-model"));
    QCOMPARE(s["authorizations"].back().get<std::string>(), "Bearer " + kKey.toStdString());

    // The client's distributions, whatever the server: three TTFTs, every token's gap.
    ChartView* ttft = chart("servingTtftDistChart");
    QCOMPARE(ttft->seriesCount(), 1);
    QCOMPARE(ttft->seriesPoints(0).size(), 3);
    QCOMPARE(ttft->seriesPoints(0).last().y(), 100.0);
    QVERIFY2(QString::fromUtf8(ttft->snapshot().svg).contains(QStringLiteral("p99 ")),
             "the percentiles are marked");
    const ChartView* itl = chart("servingItlDistChart");
    QCOMPARE(itl->seriesCount(), 1);
    QVERIFY2(itl->seriesPoints(0).size() >= 10, qPrintable(itl->toCsv()));
    if (qEnvironmentVariableIsSet("SERVELAB_SCREENSHOT_DIR")) {
      QTest::qWait(200);
      QVERIFY(tab_->grab().save(qEnvironmentVariable("SERVELAB_SCREENSHOT_DIR") +
                                QStringLiteral("/serving-remote-run.png")));
    }

    // TLS: insecure and a CA file reach the run's target; on http:// they are refused.
    e->setInsecure(true);
    QString why;
    QVERIFY(!e->target(&why));
    QVERIFY2(why.contains(QStringLiteral("https://")), qPrintable(why));
    e->setTarget(QStringLiteral("https://127.0.0.1:1"), QStringLiteral("lorax"));
    e->setInsecure(true);
    tab_->setScenario(QStringLiteral("single"));
    QVERIFY(!runLoad(&message));  // nothing listens there
    QVERIFY(tab_->lastLoadTarget().insecure);
    QVERIFY(tab_->lastLoadTarget().ca_file.empty());
    const QString ca = dir_.filePath(QStringLiteral("ca.pem"));
    QFile pem(ca);
    QVERIFY(pem.open(QIODevice::WriteOnly));
    pem.write("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n");
    pem.close();
    e->setInsecure(false);
    e->setCaFile(ca);
    QVERIFY(!runLoad(&message));
    QCOMPARE(tab_->lastLoadTarget().ca_file, ca.toStdString());
    QVERIFY(!tab_->lastLoadTarget().insecure);
  }

  void sweepsSavedReopenedAndCompared() {
    editor()->setTarget(base_, QStringLiteral("lorax"));
    tab_->setScenario(QStringLiteral("sweep"));
    tab_->setClients(QStringLiteral("1,2,4"));
    tab_->setLoadRequests(4);
    tab_->setLoadNewTokens(8);
    auto* slo = tab_->findChild<QLineEdit*>(QStringLiteral("servingSlo"));
    slo->setText(QStringLiteral("ttft:x"));
    QVERIFY(!tab_->startLoad());
    QVERIFY2(tab_->findChild<QLabel*>(QStringLiteral("servingLoadSummary"))
                 ->text()
                 .contains(QStringLiteral("ttft:x")),
             qPrintable(tab_->findChild<QLabel*>(QStringLiteral("servingLoadSummary"))->text()));
    slo->setText(QStringLiteral("ttft:60000 e2el:60000"));  // every request meets them
    QString message;
    QVERIFY2(runLoad(&message), qPrintable(message));
    // Goodput against load: every level's requests/s, and those that met the SLOs (all of them).
    const ChartView* goodput = chart("servingGoodputChart");
    QCOMPARE(goodput->seriesCount(), 2);
    QCOMPARE(goodput->seriesPoints(1).size(), 3);
    QCOMPARE(goodput->seriesPoints(1), goodput->seriesPoints(0));
    slo->clear();
    // One curve per level, its percentiles in its name.
    ChartView* ttft = chart("servingTtftDistChart");
    QCOMPARE(ttft->seriesCount(), 3);
    QVERIFY2(ttft->seriesName(0).startsWith(QStringLiteral("c=1: p50 ")), qPrintable(ttft->seriesName(0)));
    QCOMPARE(ttft->seriesPoints(2).size(), 4);
    const QString first = dir_.filePath(QStringLiteral("three-levels.json"));
    QVERIFY2(tab_->saveRun(first), qPrintable(tab_->runNote()));

    tab_->setClients(QStringLiteral("2"));
    QVERIFY2(runLoad(&message), qPrintable(message));
    QVERIFY2(tab_->compareWith(first), qPrintable(tab_->runNote()));
    ChartView* load = chart("servingLoadChart");

    QCOMPARE(load->seriesCount(), 8);
    QCOMPARE(load->seriesName(0), QStringLiteral("this run: TTFT p50"));
    QCOMPARE(load->seriesName(4), QStringLiteral("three-levels: TTFT p50"));
    QCOMPARE(load->seriesPoints(4).size(), 3);
    // Each point named by its level.
    // (the chart lays itself out and fits its ranges in the event loop once its page shows).
    QTRY_VERIFY_WITH_TIMEOUT(load->readoutAt(load->pixelFor(4, 0)).startsWith(QStringLiteral("c=")), 10000);
    // The compared sweep was saved without its requests: its saved percentiles are drawn.
    QCOMPARE(ttft->seriesCount(), 4);
    QVERIFY2(ttft->seriesName(3).contains(QStringLiteral("saved percentiles")),
             qPrintable(ttft->seriesName(3)));

    // Corrupt and foreign files: refused with the reason, nothing lost.
    const QString corrupt = dir_.filePath(QStringLiteral("corrupt.json"));
    const QString foreign = dir_.filePath(QStringLiteral("foreign.json"));
    QFile c(corrupt), f(foreign);
    QVERIFY(c.open(QIODevice::WriteOnly) && f.open(QIODevice::WriteOnly));
    c.write("{\"scenario\": \"sweep\", \"levels\": [{\"arri");
    f.write("{\"model\": \"gpt2\", \"results\": [1, 2]}");
    c.close();
    f.close();
    const size_t levels = tab_->lastReport().levels.size();
    QVERIFY(!tab_->openRun(corrupt));
    QVERIFY2(tab_->runNote().contains(QStringLiteral("not JSON text")), qPrintable(tab_->runNote()));
    QVERIFY(!tab_->compareWith(foreign));
    QVERIFY2(tab_->runNote().contains(QStringLiteral("not a saved load run")), qPrintable(tab_->runNote()));
    QCOMPARE(tab_->lastReport().levels.size(), levels);
    QCOMPARE(tab_->comparedReport().levels.size(), size_t(3));
    QCOMPARE(load->seriesCount(), 8);

    // The tab's own script --report (lastResult) reopens too.
    const QString report = dir_.filePath(QStringLiteral("report.json"));
    QFile r(report);
    QVERIFY(r.open(QIODevice::WriteOnly));
    r.write(QJsonDocument(tab_->lastResult()).toJson());
    r.close();
    if (qEnvironmentVariableIsSet("SERVELAB_SCREENSHOT_DIR")) {
      QVERIFY(editor()->selectTarget(QStringLiteral("staging")));
      QTest::qWait(200);
      QVERIFY(tab_->grab().save(qEnvironmentVariable("SERVELAB_SCREENSHOT_DIR") +
                                QStringLiteral("/serving-targets.png")));
    }
    QVERIFY2(tab_->openRun(first), qPrintable(tab_->runNote()));
    QCOMPARE(tab_->lastReport().levels.size(), size_t(3));
    QVERIFY2(tab_->openRun(report), qPrintable(tab_->runNote()));
    QCOMPARE(tab_->lastReport().levels.size(), levels);
    // A server past its peak: throughput fell at 4 clients. The points stand alone, each named by
    // its level, instead of a line joining them in the order of throughput.
    const QString saturated = dir_.filePath(QStringLiteral("saturated.json"));
    QFile sat(saturated);
    QVERIFY(sat.open(QIODevice::WriteOnly));
    // (Plain literals: moc does not read raw ones.)
    const char* level =
        "{\"arrival\": \"closed\", \"clients\": %1, \"tokens_per_s\": %2, \"ttft_p50_ms\": %3, "
        "\"ttft_p99_ms\": %4, \"itl_p50_ms\": %5, \"itl_p99_ms\": %6}";
    const QString levelsJson =
        QStringList{QString::fromLatin1(level).arg(1).arg(100).arg(50).arg(60).arg(10).arg(12),
                    QString::fromLatin1(level).arg(2).arg(200).arg(70).arg(90).arg(11).arg(14),
                    QString::fromLatin1(level).arg(4).arg(150).arg(400).arg(900).arg(30).arg(80)}
            .join(QStringLiteral(", "));
    sat.write(
        QStringLiteral("{\"scenario\": \"sweep\", \"url\": \"http://gpu-box:8000\", \"api\": \"openai\", "
                       "\"levels\": [%1]}")
            .arg(levelsJson)
            .toUtf8());
    sat.close();
    QVERIFY2(tab_->openRun(saturated), qPrintable(tab_->runNote()));
    QCOMPARE(load->seriesName(0), QStringLiteral("saturated: TTFT p50"));
    QCOMPARE(load->seriesStyle(0), ChartView::SeriesStyle::Points);
    QVERIFY2(load->title().contains(QStringLiteral("saturated: throughput fell as load rose")),
             qPrintable(load->title()));
    QTRY_VERIFY_WITH_TIMEOUT(load->readoutAt(load->pixelFor(0, 1)).startsWith(QStringLiteral("c=4")), 10000);
    if (qEnvironmentVariableIsSet("SERVELAB_SCREENSHOT_DIR"))
      QVERIFY(load->grab().save(qEnvironmentVariable("SERVELAB_SCREENSHOT_DIR") +
                                QStringLiteral("/serving-saturated-chart.png")));
    tab_->clearComparison();
    QCOMPARE(load->seriesCount(), 4);
    QCOMPARE(load->seriesName(0), QStringLiteral("TTFT p50"));
  }
};

QTEST_MAIN(TestServingTargets)
#include "test_serving_targets.moc"
