// The Serving tab end to end on the offscreen platform, on the GPT-2 small shape with random weights
// (--demo): start the server in-process, run the load generator's three-stream scenario and a small
// sweep against it (the request table, the TTFT / inter-token / occupancy charts and the Prometheus
// counters fill), stop, restart on another port, refuse a port already in use with the reason, and
// a load run against a port where nothing listens ends with a clear error, and a run against
// another server draws that server's own figures from its /metrics. No assertion depends on how
// long anything takes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProcess>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTest>
#include <QtWidgets>

#include "../core/loadgen_test_server.h"
#include "chart_view.h"
#include "engine_controller.h"
#include "serving_load_run.h"
#include "serving_tab.h"

using namespace servelab::ui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

// A socket listening on 127.0.0.1 at a port the system picked; closed with the object.
struct Listener {
  int fd = -1;
  int port = 0;
  explicit Listener(bool listening) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    // As another server would set it (cpp-httplib's default does): ours must still refuse the port.
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    if (listening && ::listen(fd, 4) != 0) return;
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Data points of a chart (its CSV has one line per point after the header).
int points(const ChartView* chart) {
  const QStringList lines = chart->toCsv().split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  return static_cast<int>(lines.size()) - 1;
}

}  // namespace

class TestServingTab : public QObject {
  Q_OBJECT
  std::unique_ptr<EngineController> engine_;
  std::unique_ptr<ServingTab> tab_;

  bool startOn(int port, QString* url) {
    tab_->setPort(port);
    QSignalSpy started(tab_.get(), &ServingTab::serverStarted);
    QSignalSpy stopped(tab_.get(), &ServingTab::serverStopped);
    if (!tab_->startServer()) return false;
    if (!QTest::qWaitFor([&] { return !started.isEmpty() || !stopped.isEmpty(); }, kLoadTimeoutMs))
      return false;
    if (started.isEmpty()) return false;
    *url = started.first().first().toString();
    return true;
  }
  bool stop() {
    QSignalSpy stopped(tab_.get(), &ServingTab::serverStopped);
    tab_->stopServer();
    return stopped.wait(kRunTimeoutMs) && stopped.first().first().toBool();
  }
  bool runLoad(QString* message) { return servelab::ui::test::run_load(*tab_, kRunTimeoutMs, message); }

 private Q_SLOTS:
  void initTestCase() {
    engine_ = std::make_unique<EngineController>();
    QSignalSpy loaded(engine_.get(), &EngineController::modelLoaded);
    ModelRequest request;
    request.demo = true;
    request.threads = 2;
    QVERIFY(engine_->loadModel(request));
    QVERIFY(loaded.wait(kLoadTimeoutMs));
    tab_ = std::make_unique<ServingTab>(engine_.get());
    tab_->setModel(engine_->model());
    tab_->setMaxBatch(4);
    tab_->resize(1400, 900);
    tab_->show();
  }
  void cleanupTestCase() {
    if (tab_ && tab_->serverRunning()) stop();
    tab_.reset();
    engine_.reset();
  }

  void servesLoadStopsAndRestarts() {
    QString url;
    QVERIFY(startOn(0, &url));
    QVERIFY(url.startsWith(QStringLiteral("http://127.0.0.1:")));
    QCOMPARE(tab_->serverUrl(), url);
    QCOMPARE(tab_->findChild<QLineEdit*>(QStringLiteral("servingUrl"))->text(), url);
    QVERIFY(tab_->serverRunning());
    QVERIFY(engine_->isBusy());  // the engine thread is the server's while it serves

    // The lesson's three streams: the two short ones end while the long one still runs.
    tab_->setLoadTarget(QString(), QStringLiteral("lorax"));
    tab_->setScenario(QStringLiteral("three_streams"));
    QString message;
    QVERIFY2(runLoad(&message), qPrintable(message));
    const servelab::LoadReport three = tab_->lastReport();
    QCOMPARE(three.streams.size(), size_t(3));
    const int64_t budgets[] = {100, 10, 10};
    int64_t generated = 0;
    for (size_t i = 0; i < 3; ++i) {
      const servelab::StreamTiming& s = three.streams[i];
      QVERIFY2(s.ok, s.error.c_str());
      QVERIFY(s.tokens() >= 1 && s.tokens() <= budgets[i]);
      generated += s.tokens();
    }
    if (three.streams[0].tokens() == 100)
      for (size_t i = 1; i < 3; ++i)
        QVERIFY(three.streams[i].start_ms + three.streams[i].token_ms.back() <
                three.streams[0].start_ms + three.streams[0].token_ms.back());
    // One series of per-token times per stream.
    auto* loadChart = tab_->findChild<ChartView*>(QStringLiteral("servingLoadChart"));
    QCOMPARE(loadChart->seriesCount(), 3);
    QCOMPARE(points(loadChart), static_cast<int>(generated));

    // The table, the charts and the counters follow the server (snapshots every 250 ms).
    QTableWidget* table = tab_->requestTable();
    auto finishedRows = [table] {
      int n = 0;
      for (int r = 0; r < table->rowCount(); ++r)
        if (table->item(r, 1) && table->item(r, 1)->text() == QLatin1String("finished")) ++n;
      return n;
    };
    QTRY_VERIFY_WITH_TIMEOUT(finishedRows() == 3, 30000);
    auto* ttft = tab_->findChild<ChartView*>(QStringLiteral("servingTtftChart"));
    auto* itl = tab_->findChild<ChartView*>(QStringLiteral("servingItlChart"));
    auto* occupancy = tab_->findChild<ChartView*>(QStringLiteral("servingOccupancyChart"));
    QTRY_COMPARE_WITH_TIMEOUT(points(ttft), 3, 30000);
    QVERIFY(points(itl) >= 1);
    QVERIFY(points(occupancy) >= 2);
    QTRY_VERIFY_WITH_TIMEOUT(
        tab_->metricsText().contains(QStringLiteral("vllm:generation_tokens_total %1").arg(generated)),
        30000);
    QVERIFY(tab_->metricsText().contains(QStringLiteral("vllm:num_requests_running 0")));
    QVERIFY(tab_->metricsText().contains(
        QStringLiteral("vllm:request_success_total{finished_reason=\"length\"}")));

    // A small sweep draws throughput against latency: four series, one point per level.
    tab_->setScenario(QStringLiteral("sweep"));
    tab_->setClients(QStringLiteral("1,2"));
    tab_->setLoadRequests(2);
    tab_->setLoadNewTokens(4);
    QVERIFY2(runLoad(&message), qPrintable(message));
    const servelab::LoadReport sweep = tab_->lastReport();
    QCOMPARE(sweep.levels.size(), size_t(2));
    for (const servelab::LoadLevel& l : sweep.levels) {
      QCOMPARE(l.ok, l.requests);
      QVERIFY(l.tokens_per_s > 0);
    }
    QCOMPARE(loadChart->seriesCount(), 4);
    QCOMPARE(points(loadChart), 8);
    // The client's TTFT distribution, one curve per level, as for any other server.
    auto* ttftDist = tab_->findChild<ChartView*>(QStringLiteral("servingTtftDistChart"));
    QCOMPARE(ttftDist->seriesCount(), 2);
    QCOMPARE(ttftDist->seriesPoints(1).size(), 2);
    if (qEnvironmentVariableIsSet("SERVELAB_SCREENSHOT_DIR")) {
      tab_->findChild<QTabWidget*>(QStringLiteral("servingViews"))->setCurrentIndex(0);
      QTest::qWait(300);
      QVERIFY(tab_->grab().save(qEnvironmentVariable("SERVELAB_SCREENSHOT_DIR") +
                                QStringLiteral("/serving-server-page.png")));
    }
    QTRY_VERIFY_WITH_TIMEOUT(finishedRows() == 3 + 2 + 2, 30000);
    const QJsonObject result = tab_->lastResult();
    QCOMPARE(result.value(QStringLiteral("scenario")).toString(), QStringLiteral("sweep"));

    // Stop frees the engine; a restart on another port serves again.
    QVERIFY(stop());
    QVERIFY(!tab_->serverRunning());
    QVERIFY(tab_->serverUrl().isEmpty());
    QTRY_VERIFY_WITH_TIMEOUT(!engine_->isBusy(), 30000);
    int port = 0;
    {
      Listener probe(false);  // a port that was free a moment ago
      port = probe.port;
    }
    QVERIFY(port > 0);
    QString again;
    QVERIFY(startOn(port, &again));
    QCOMPARE(again, QStringLiteral("http://127.0.0.1:%1").arg(port));
    QVERIFY(again != url);
    tab_->setScenario(QStringLiteral("single"));
    tab_->setLoadNewTokens(5);
    QVERIFY2(runLoad(&message), qPrintable(message));
    QCOMPARE(tab_->lastReport().streams.size(), size_t(1));
    QCOMPARE(tab_->lastReport().url, again.toStdString());
    QVERIFY(stop());
  }

  void portInUseIsAnError() {
    Listener busy(true);
    QVERIFY(busy.port > 0);
    tab_->setPort(busy.port);
    QSignalSpy stopped(tab_.get(), &ServingTab::serverStopped);
    QVERIFY(tab_->startServer());
    QVERIFY(stopped.wait(kLoadTimeoutMs));
    QCOMPARE(stopped.first().first().toBool(), false);
    const QString message = stopped.first().at(1).toString();
    QVERIFY2(message.contains(QStringLiteral("cannot listen on 127.0.0.1:%1").arg(busy.port)),
             qPrintable(message));
    QCOMPARE(tab_->serverError(), message);
    QVERIFY(
        tab_->findChild<QLabel*>(QStringLiteral("servingStatus"))->text().contains(QStringLiteral("in use")));
    QVERIFY(!tab_->serverRunning());
    QTRY_VERIFY_WITH_TIMEOUT(!engine_->isBusy(), 30000);
  }

  void loadAgainstNothingFailsClearly() {
    Listener gone(false);
    const int port = gone.port;
    gone.close();  // nothing listens there now
    tab_->setLoadTarget(QStringLiteral("http://127.0.0.1:%1").arg(port), QStringLiteral("lorax"));
    tab_->setScenario(QStringLiteral("single"));
    QString message;
    QVERIFY(!runLoad(&message));
    const servelab::LoadReport r = tab_->lastReport();
    QCOMPARE(r.streams.size(), size_t(1));
    QVERIFY2(r.streams[0].error.find("cannot reach") != std::string::npos, r.streams[0].error.c_str());
    QVERIFY(tab_->findChild<QLabel*>(QStringLiteral("servingLoadSummary"))
                ->text()
                .contains(QStringLiteral("cannot reach")));
  }

  void remoteServerSideFromItsMetrics() {
    // A load run against another server draws that server's own running, waiting and KV use, read
    // from its /metrics under its engine's names (the test server speaks vLLM's): one scrape when
    // the run starts and one after it ends, whatever happens between.
    QProcess server;
    QString why;
    const QString base = servelab::test::start_loadgen_test_server(server, &why);
    QVERIFY2(!base.isEmpty(), qPrintable(why));
    tab_->setLoadTarget(base + QStringLiteral("/vllmmetrics"), QStringLiteral("openai"));
    tab_->setScenario(QStringLiteral("single"));
    QString message;
    QVERIFY2(runLoad(&message), qPrintable(message));
    const ChartView* chart = tab_->findChild<ChartView*>(QStringLiteral("servingOccupancyChart"));
    auto kvPoints = [&] {
      return static_cast<int>(chart->toCsv().count(QStringLiteral("\nKV cache used,")));
    };
    QTRY_VERIFY_WITH_TIMEOUT(kvPoints() >= 2, 30000);
    QCOMPARE(chart->title(), QStringLiteral("Server side (its /metrics)"));
    const QString note = base + QStringLiteral("/vllmmetrics · vllm's metric names; preemptions so far: 7");
    QVERIFY2(chart->footnote().contains(note), qPrintable(chart->footnote()));
    QVERIFY(chart->toCsv().contains(QStringLiteral("\nwaiting,")));
    QVERIFY(chart->toCsv().contains(QStringLiteral(",25\n")));  // its KV usage, 0.25, as a percentage
    server.kill();
    server.waitForFinished(10000);
  }
};

QTEST_MAIN(TestServingTab)
#include "test_serving_tab.moc"
