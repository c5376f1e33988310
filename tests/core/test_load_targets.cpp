// Remote targets and saved runs: list_models asks a server's GET /v1/models with the target's
// headers and says why when it cannot; a load run's JSON (load_report_json, what `servelab-cli
// loadgen --save-result` writes) reads back into the same figures, and corrupt or foreign JSON is
// refused with a message naming what is wrong. Against tests/serve/loadgen_test_server.py on
// 127.0.0.1; no assertion depends on how long anything takes.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadgen_test_server.h"
#include "serve/load_generator.h"
#include "serve/load_report_io.h"
#include "util/errors.h"

using namespace servelab;
using nlohmann::json;

class TestLoadTargets : public QObject {
  Q_OBJECT

  QProcess server_;
  QString base_;  // http://127.0.0.1:PORT

  json stats() const {
    QProcess p;
    p.start(QStringLiteral(SERVELAB_TEST_PYTHON),
            {QStringLiteral("-c"), QStringLiteral("import urllib.request,sys;sys.stdout.write(urllib.request."
                                                  "urlopen('%1/stats').read().decode())")
                                       .arg(base_)});
    if (!p.waitForFinished(60000)) return json::object();
    return json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
  }
  // The InputError's message of f, or "" when it threw none.
  template <typename F>
  static std::string refusal(F f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return {};
  }

 private Q_SLOTS:
  void initTestCase() {
    QString why;
    base_ = test::start_loadgen_test_server(server_, &why);
    QVERIFY2(!base_.isEmpty(), qPrintable(why));
  }
  void cleanupTestCase() {
    server_.closeWriteChannel();
    if (!server_.waitForFinished(10000)) {
      server_.kill();
      server_.waitForFinished(10000);
    }
  }

  void modelsListedWithTheTargetsHeaders() {
    LoadTarget t;
    t.url = (base_ + "/prefix/").toStdString();
    t.api = LoadApi::OpenAI;
    t.headers = {{"Authorization", "Bearer sk-test-1"}, {"X-Team", "lab"}};
    QCOMPARE(list_models(t), std::vector<std::string>{"test-model"});
    const json s = stats();
    QVERIFY2(s.contains("authorizations"), s.dump().c_str());
    QCOMPARE(s["authorizations"].back().get<std::string>(), std::string("Bearer sk-test-1"));
  }

  void modelsRefusedWithTheReason() {
    LoadTarget nothing;
    nothing.url = "http://127.0.0.1:1";
    nothing.connect_timeout_s = 5;
    const std::string why = refusal([&] { list_models(nothing); });
    QVERIFY2(why.find("cannot reach http://127.0.0.1:1") != std::string::npos, why.c_str());
    LoadTarget notHttp;
    notHttp.url = "ftp://example.org";
    QVERIFY(refusal([&] { list_models(notHttp); }).find("http://") != std::string::npos);
  }

  void savedScenarioReadsBack() {
    LoadTarget t;
    t.url = (base_ + "/s3").toStdString();
    t.api = LoadApi::OpenAI;
    t.model = "test-model";
    LoadOptions o;
    o.scenario = "three_streams";
    const LoadReport run = run_load(t, o);
    QCOMPARE(run.streams.size(), size_t(3));
    const LoadReport back = parse_load_report_json(load_report_json(run));
    // Saved again, it says exactly the same.
    QCOMPARE(load_report_json(back), load_report_json(run));
    QCOMPARE(back.scenario, std::string("three_streams"));
    QCOMPARE(back.url, run.url);
    QCOMPARE(back.api, std::string("openai"));
    QCOMPARE(back.model, std::string("test-model"));
    QCOMPARE(back.streams.size(), run.streams.size());
    for (size_t i = 0; i < run.streams.size(); ++i) {
      QCOMPARE(back.streams[i].ok, run.streams[i].ok);
      QCOMPARE(back.streams[i].ttft_ms, run.streams[i].ttft_ms);
      QCOMPARE(back.streams[i].itl_ms, run.streams[i].itl_ms);
      QCOMPARE(back.streams[i].token_ms, run.streams[i].token_ms);
      QCOMPARE(back.streams[i].output_tokens, run.streams[i].output_tokens);
    }
  }

  void savedSweepReadsBack() {
    LoadTarget t;
    t.url = base_.toStdString();
    t.api = LoadApi::Lorax;
    LoadOptions o;
    o.scenario = "sweep";
    o.levels = {1, 2};
    o.requests = 4;
    o.request.max_new_tokens = 8;
    o.goodput.ttft_ms = 60'000;  // every request meets it
    o.warmup = 1;
    o.seed = 7;
    o.dataset.name = "random";
    o.dataset.input_len = 12;
    o.dataset.seed = 7;
    const LoadReport run = run_load(t, o);
    QCOMPARE(run.levels.size(), size_t(2));
    QTemporaryDir dir;
    const std::string path = dir.filePath(QStringLiteral("run.json")).toStdString();
    std::ofstream(path) << json::parse(load_report_json(run)).dump(2) << "\n";  // as --save-result
    const LoadReport back = read_load_report_file(path);
    QCOMPARE(load_report_json(back), load_report_json(run));
    QCOMPARE(back.scenario, std::string("sweep"));
    QCOMPARE(back.levels.size(), size_t(2));
    QCOMPARE(back.options.goodput.ttft_ms, 60'000.0);
    QCOMPARE(back.options.percentiles, run.options.percentiles);
    for (size_t i = 0; i < 2; ++i) {
      const LoadLevel &a = run.levels[i], &b = back.levels[i];
      QCOMPARE(b.arrival, a.arrival);
      QCOMPARE(b.level, a.level);
      QCOMPARE(b.ok, a.ok);
      QCOMPARE(b.tokens_per_s, a.tokens_per_s);
      QCOMPARE(b.ttft_p50_ms, a.ttft_p50_ms);
      QCOMPARE(b.itl_p99_ms, a.itl_p99_ms);
      QCOMPARE(b.metrics.request_goodput, a.metrics.request_goodput);
      QVERIFY(b.metrics.request_goodput > 0);
      QCOMPARE(b.metrics.ttft.percentiles, a.metrics.ttft.percentiles);
      QCOMPARE(b.metrics.itl.median, a.metrics.itl.median);
    }
  }

  void corruptAndForeignRefused() {
    const std::pair<const char*, const char*> cases[] = {
        {"{\"scenario\": \"sweep\", \"levels\": [", "not JSON text"},
        {"[1, 2, 3]", "not a saved load run"},
        {"{\"model\": \"gpt2\", \"results\": []}", "not a saved load run"},
        {"{\"scenario\": \"burst\", \"streams\": []}", "scenario 'burst' is none of the load generator's"},
        {"{\"scenario\": \"sweep\", \"levels\": [{\"arrival\": \"closed\", \"tokens_per_s\": \"fast\"}]}",
         "levels[0].tokens_per_s is not a number"},
        {"{\"scenario\": \"single\", \"streams\": [{\"itl_ms\": [1, \"x\"]}]}",
         "streams[0].itl_ms holds an item of the wrong type"},
        {"{\"scenario\": \"sweep\", \"levels\": {}}", "levels is not a list"},
        {"{\"scenario\": \"single\", \"streams\": [{\"error_kind\": \"meltdown\"}]}",
         "streams[0].error_kind 'meltdown' is none of the writer's names"},
    };
    for (const auto& [text, expected] : cases) {
      const std::string why = refusal([&] { parse_load_report_json(text); });
      QVERIFY2(why.find(expected) != std::string::npos, (std::string(text) + " -> " + why).c_str());
    }
    const std::string missing = refusal([] { read_load_report_file("/nonexistent/run.json"); });
    QVERIFY2(missing.find("cannot read '/nonexistent/run.json'") != std::string::npos, missing.c_str());
  }
};

QTEST_GUILESS_MAIN(TestLoadTargets)
#include "test_load_targets.moc"
