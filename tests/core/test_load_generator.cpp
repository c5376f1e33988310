// The load generator (core/serve/load_*) running against tests/serve/loadgen_test_server.py on
// 127.0.0.1, which streams as vLLM does with a stream interval and as TGI does: token counts from
// what a server reports (never chunks), inter-token latency spread over a chunk's tokens, errors by
// kind, vLLM's metric definitions, goodput, warm-up, open-loop arrivals and time bounds, adapters in
// turn, the per-request outputs and reports, and the refusal of bad options before anything is
// sent. Its readers (event streams, datasets, /metrics) are test_load_readers'. No assertion depends
// on how fast anything ran.
#include <QProcess>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "loadgen_test_server.h"
#include "serve/load_generator.h"
#include "util/errors.h"
#include "word_tokenizer.h"

using namespace servelab;
using nlohmann::json;
using servelab::test::WordTokenizer;

namespace {

// The refusal's message, or "" when the options pass.
std::string refusal(const LoadTarget& t, const LoadOptions& o) {
  try {
    check_load_options(t, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class TestLoadGenerator : public QObject {
  Q_OBJECT

  QProcess server_;
  QString base_;  // http://127.0.0.1:PORT

  LoadTarget target(const QString& options, LoadApi api = LoadApi::OpenAI) const {
    LoadTarget t;
    t.url = (base_ + "/" + options).toStdString();
    t.api = api;
    t.model = "test-model";
    t.read_timeout_s = 60;
    return t;
  }
  json stats() const;

 private Q_SLOTS:
  void initTestCase();
  void cleanupTestCase();
  void usageCountsTokensOfMultiTokenChunks();
  void continuousUsageSplitsEachChunksGap();
  void chatRoleChunkIsNoToken();
  void withoutUsageTheTokenizerCounts();
  void tgiCountsTokenEventsAndDetails();
  void errorsByKind();
  void maxSecondsCutsOffASilentServer();
  void garbageIsNeverANumber();
  void metricsFollowVllm();
  void goodputCountsRequestsMeetingEverySlo();
  void warmupIsLeftOut();
  void openLoopAndTimeBound();
  void sweepAdaptersInTurn();
  void badOptionsRefusedBeforeAnythingIsSent();
  void reportsUseVllmNames();
};

json TestLoadGenerator::stats() const {
  // A tiny blocking GET through the generator's own dependency would hide its bugs; use Python.
  QProcess p;
  p.start(
      QStringLiteral(SERVELAB_TEST_PYTHON),
      {QStringLiteral("-c"),
       QStringLiteral(
           "import urllib.request,sys;sys.stdout.write(urllib.request.urlopen('%1/stats').read().decode())")
           .arg(base_)});
  if (!p.waitForFinished(60000)) return json::object();
  return json::parse(p.readAllStandardOutput().toStdString(), nullptr, false);
}

void TestLoadGenerator::initTestCase() {
  QString why;
  base_ = test::start_loadgen_test_server(server_, &why);
  QVERIFY2(!base_.isEmpty(), qPrintable(why));
}

void TestLoadGenerator::cleanupTestCase() {
  server_.closeWriteChannel();  // the server ends when its stdin closes
  if (!server_.waitForFinished(10000)) {
    server_.kill();
    server_.waitForFinished(10000);
  }
}

void TestLoadGenerator::usageCountsTokensOfMultiTokenChunks() {
  // vLLM with a stream interval of 3: the first token alone, then 3 a chunk; tokens 4-7 are the four
  // bytes of one emoji, so the chunk of tokens 4-6 carries no text at all; usage at the end.
  LoadRequest r;
  r.max_new_tokens = 20;
  for (LoadApi api : {LoadApi::OpenAI, LoadApi::OpenAIChat}) {
    const StreamTiming s = run_stream(target(QStringLiteral("s3-emoji"), api), r);
    QVERIFY2(s.ok, s.error.c_str());
    QCOMPARE(s.output_tokens, int64_t(20));
    QCOMPARE(s.output_tokens_source, TokenCountSource::Usage);
    QCOMPARE(s.chunk_ms.size(), size_t(8));  // 1 + ceil(19 / 3): the empty chunk counts
    QVERIFY(s.text.find("\xF0\x9F\x98\x80") != std::string::npos);
    QCOMPARE(std::accumulate(s.chunk_tokens.begin(), s.chunk_tokens.end(), int64_t(0)), int64_t(20));
    QCOMPARE(s.chunk_tokens.front(), int64_t(1));
    // One gap per token after the first chunk, and together they span first chunk -> last chunk.
    QCOMPARE(s.itl_ms.size(), size_t(19));
    const double span = std::accumulate(s.itl_ms.begin(), s.itl_ms.end(), 0.0);
    QVERIFY(std::abs(span - (s.chunk_ms.back() - s.chunk_ms.front())) < 1e-6);
    QCOMPARE(s.ttft_ms, s.chunk_ms.front());
    QVERIFY(std::abs(s.tpot_ms - (s.e2el_ms - s.ttft_ms) / 19.0) < 1e-9);
    QCOMPARE(s.prompt_tokens, int64_t(4));  // the server's count of "What is deep learning?"
    QCOMPARE(s.tokens(), int64_t(20));
    QCOMPARE(s.token_ms.size(), size_t(20));
  }
}

void TestLoadGenerator::continuousUsageSplitsEachChunksGap() {
  LoadRequest r;
  r.max_new_tokens = 20;
  const StreamTiming s = run_stream(target(QStringLiteral("s3-emoji-contusage")), r);
  QVERIFY2(s.ok, s.error.c_str());
  // The server's running count in every chunk: each chunk's tokens exactly, the text-less one too.
  QCOMPARE(s.chunk_tokens, (std::vector<int64_t>{1, 3, 3, 3, 3, 3, 3, 1}));
  size_t k = 0;
  for (size_t i = 1; i < s.chunk_ms.size(); ++i) {
    const double share = (s.chunk_ms[i] - s.chunk_ms[i - 1]) / static_cast<double>(s.chunk_tokens[i]);
    for (int64_t j = 0; j < s.chunk_tokens[i]; ++j, ++k) QVERIFY(std::abs(s.itl_ms[k] - share) < 1e-9);
  }
  QCOMPARE(k, s.itl_ms.size());
}

void TestLoadGenerator::chatRoleChunkIsNoToken() {
  LoadRequest r;
  r.max_new_tokens = 5;
  const StreamTiming s = run_stream(target(QStringLiteral("s2-finishsep"), LoadApi::OpenAIChat), r);
  QVERIFY2(s.ok, s.error.c_str());
  // role chunk, 1 + 2 + 2 tokens, then a finish chunk with empty content: three carried tokens.
  QCOMPARE(s.chunk_ms.size(), size_t(3));
  QCOMPARE(s.output_tokens, int64_t(5));
  QCOMPARE(s.text, std::string(" w0 w1 w2 w3 w4"));
  QCOMPARE(s.finish_reason, std::string("length"));
}

void TestLoadGenerator::withoutUsageTheTokenizerCounts() {
  LoadRequest r;
  r.max_new_tokens = 12;
  const StreamTiming unknown = run_stream(target(QStringLiteral("s4-nousage")), r);
  QVERIFY2(unknown.ok, unknown.error.c_str());
  QCOMPARE(unknown.output_tokens, int64_t(-1));  // never the 4 chunks
  QCOMPARE(unknown.output_tokens_source, TokenCountSource::None);
  QVERIFY(unknown.itl_ms.empty());
  QCOMPARE(unknown.tpot_ms, -1.0);
  const LoadMetrics m = compute_metrics({unknown}, 1.0, {50}, {});
  QCOMPARE(m.completed, int64_t(1));
  QCOMPARE(m.without_output_count, int64_t(1));
  QCOMPARE(m.total_output_tokens, int64_t(0));

  WordTokenizer words;
  const StreamTiming counted = run_stream(target(QStringLiteral("s4-nousage")), r, nullptr, &words);
  QVERIFY2(counted.ok, counted.error.c_str());
  QCOMPARE(counted.output_tokens_source, TokenCountSource::Tokenizer);
  QCOMPARE(counted.output_tokens, int64_t(12));  // " w0 ... w11": twelve words
  // Each chunk's share from its own text: 1, then 4, 4, 3.
  QCOMPARE(counted.chunk_tokens, (std::vector<int64_t>{1, 4, 4, 3}));
  QCOMPARE(counted.itl_ms.size(), size_t(11));
}

void TestLoadGenerator::tgiCountsTokenEventsAndDetails() {
  LoadRequest r;
  r.max_new_tokens = 9;
  for (LoadApi api : {LoadApi::Tgi, LoadApi::Lorax}) {
    const StreamTiming s = run_stream(target(QStringLiteral("emoji"), api), r);
    QVERIFY2(s.ok, s.error.c_str());
    QCOMPARE(s.output_tokens, int64_t(9));
    QCOMPARE(s.output_tokens_source, TokenCountSource::Usage);
    QCOMPARE(s.chunk_ms.size(), size_t(9));  // one event a token, the three text-less ones too
    QCOMPARE(s.itl_ms.size(), size_t(8));
    QCOMPARE(s.prompt_tokens, int64_t(4));
  }
  const StreamTiming s = run_stream(target(QStringLiteral("nousage"), LoadApi::Tgi), r);
  QVERIFY2(s.ok, s.error.c_str());
  QCOMPARE(s.output_tokens, int64_t(9));
  QCOMPARE(s.output_tokens_source, TokenCountSource::TokenEvents);
}

void TestLoadGenerator::errorsByKind() {
  LoadRequest r;
  r.max_new_tokens = 8;
  const std::vector<std::pair<QString, LoadErrorKind>> cases = {
      {QStringLiteral("garbage"), LoadErrorKind::BadResponse},
      {QStringLiteral("json"), LoadErrorKind::BadResponse},
      {QStringLiteral("badjson"), LoadErrorKind::BadResponse},
      {QStringLiteral("badusage"), LoadErrorKind::BadResponse},
      // Not HTTP at all (an SSH port): the client cannot tell it from a connection closed early.
      {QStringLiteral("nothttp"), LoadErrorKind::Incomplete},
      {QStringLiteral("http500"), LoadErrorKind::Http},
      {QStringLiteral("cut"), LoadErrorKind::Incomplete},
      {QStringLiteral("errorevent"), LoadErrorKind::ServerError},
  };
  for (const auto& [mode, kind] : cases)
    for (LoadApi api : {LoadApi::OpenAI, LoadApi::Tgi}) {
      if (api == LoadApi::Tgi && (mode == QLatin1String("badusage") || mode == QLatin1String("json")))
        continue;
      const StreamTiming s = run_stream(target(mode, api), r);
      QVERIFY2(!s.ok, qPrintable(mode));
      QVERIFY2(s.error_kind == kind, qPrintable(mode + ": " + load_error_kind_name(s.error_kind) + ": " +
                                                QString::fromStdString(s.error)));
      QVERIFY(!s.error.empty());
      QVERIFY(s.error.find('\n') == std::string::npos);
    }
  const StreamTiming http = run_stream(target(QStringLiteral("http500")), r);
  QCOMPARE(http.http_status, 500);
  QVERIFY(http.error.find("the engine fell over") != std::string::npos);

  // Nothing listening: a port the test server's host refuses (port 1 needs root to bind).
  LoadTarget nobody = target(QString());
  nobody.url = "http://127.0.0.1:1";
  const StreamTiming unreachable = run_stream(nobody, r);
  QCOMPARE(unreachable.error_kind, LoadErrorKind::Connect);
  QVERIFY(unreachable.error.find("cannot reach") != std::string::npos);

  // A server that never answers, and a client that waits half a second at most.
  LoadTarget silent = target(QStringLiteral("silent"));
  silent.read_timeout_s = 0.5;
  const StreamTiming timeout = run_stream(silent, r);
  QCOMPARE(timeout.error_kind, LoadErrorKind::Timeout);
}

void TestLoadGenerator::maxSecondsCutsOffASilentServer() {
  // A server that never answers, a client that would wait 10 minutes for a byte, and a run bounded to
  // half a second: the bound ends the run (without it this test would hang past its time limit).
  LoadTarget silent = target(QStringLiteral("silent"));
  silent.read_timeout_s = 600;
  for (const char* scenario : {"single", "sweep"}) {
    LoadOptions o;
    o.scenario = scenario;
    o.levels = {2};
    o.requests = 2;
    o.max_seconds = 0.5;
    const LoadReport rep = run_load(silent, o);
    QVERIFY(rep.timed_out);
    const std::vector<StreamTiming>& streams =
        rep.scenario == "sweep" ? rep.levels.at(0).streams : rep.streams;
    QVERIFY(!streams.empty());
    for (const StreamTiming& s : streams) QCOMPARE(s.error_kind, LoadErrorKind::Cancelled);
  }
}

void TestLoadGenerator::garbageIsNeverANumber() {
  LoadOptions o;
  o.scenario = "sweep";
  o.levels = {2};
  o.requests = 4;
  o.request.max_new_tokens = 6;
  const LoadReport rep = run_load(target(QStringLiteral("badusage")), o);
  QCOMPARE(rep.levels.size(), size_t(1));
  const LoadLevel& l = rep.levels[0];
  QCOMPARE(l.ok, int64_t(0));
  QCOMPARE(l.failed, int64_t(4));
  QCOMPARE(l.metrics.errors_by_kind, (std::vector<std::pair<std::string, int64_t>>{{"bad_response", 4}}));
  QCOMPARE(l.metrics.total_output_tokens, int64_t(0));
  QCOMPARE(l.metrics.output_throughput, 0.0);
  QCOMPARE(l.metrics.ttft.count, int64_t(0));
}

void TestLoadGenerator::metricsFollowVllm() {
  // numpy: mean, median, population std, percentile with linear interpolation.
  QCOMPARE(interpolated_percentile({1, 2, 3, 4}, 50), 2.5);
  QCOMPARE(interpolated_percentile({1, 2, 3, 4}, 90), 3.7);
  QCOMPARE(interpolated_percentile({10}, 99), 10.0);
  QCOMPARE(interpolated_percentile({}, 99), 0.0);
  const Distribution d = distribution({2, 4, 4, 4, 5, 5, 7, 9}, {50, 99});
  QCOMPARE(d.mean, 5.0);
  QCOMPARE(d.std, 2.0);
  QCOMPARE(d.median, 4.5);
  QVERIFY(std::abs(d.percentiles[1].second - 8.86) < 1e-9);
  QCOMPARE(percentile_key(99), std::string("p99"));
  QCOMPARE(percentile_key(99.9), std::string("p99.9"));

  // Two requests: TPOT per request, ITL per token, throughput over the duration.
  StreamTiming a;
  a.ok = true;
  a.chunk_ms = {100, 130, 190};
  a.chunk_tokens = {1, 3, 2};
  a.output_tokens = 6;
  a.prompt_tokens = 10;
  a.e2el_ms = 200;
  finish_timing(a);
  QCOMPARE(a.ttft_ms, 100.0);
  QCOMPARE(a.itl_ms, (std::vector<double>{10, 10, 10, 30, 30}));
  QCOMPARE(a.tpot_ms, 20.0);  // (200 - 100) / (6 - 1)
  StreamTiming b;
  b.ok = true;
  b.chunk_ms = {50};
  b.chunk_tokens = {1};
  b.output_tokens = 1;
  b.prompt_tokens = -1;
  b.e2el_ms = 60;
  b.start_ms = 1500;
  finish_timing(b);
  QCOMPARE(b.tpot_ms, -1.0);  // one token: no TPOT
  StreamTiming c;
  c.error_kind = LoadErrorKind::Timeout;
  const LoadMetrics m = compute_metrics({a, b, c}, 2.0, {50, 99}, {});
  QCOMPARE(m.completed, int64_t(2));
  QCOMPARE(m.failed, int64_t(1));
  QCOMPARE(m.total_output_tokens, int64_t(7));
  QCOMPARE(m.total_input_tokens, int64_t(10));
  QCOMPARE(m.without_prompt_count, int64_t(1));
  QCOMPARE(m.request_throughput, 1.0);
  QCOMPARE(m.output_throughput, 3.5);
  QCOMPARE(m.total_token_throughput, 8.5);
  QCOMPARE(m.ttft.mean, 75.0);
  QCOMPARE(m.tpot.count, int64_t(1));
  QCOMPARE(m.itl.count, int64_t(5));
  QCOMPARE(m.itl.median, 10.0);
  QCOMPARE(m.e2el.mean, 130.0);
  QCOMPARE(m.request_goodput, -1.0);  // no SLO given
  // Peak second (vLLM's): a starts at 0 (tokens at 100, 130 x3, 190 x2 ms), b at 1500 ms (its token at
  // 1550): 6 tokens in second 0 with one request open; second 1 has b's one token.
  QCOMPARE(m.max_output_tokens_per_s, 6.0);
  QCOMPARE(m.max_concurrent_requests, int64_t(1));
  QCOMPARE(m.errors_by_kind, (std::vector<std::pair<std::string, int64_t>>{{"timeout", 1}}));
}

void TestLoadGenerator::goodputCountsRequestsMeetingEverySlo() {
  auto req = [](double ttft, double tpot, double e2el, int64_t tokens) {
    StreamTiming s;
    s.ok = true;
    s.ttft_ms = ttft;
    s.tpot_ms = tpot;
    s.e2el_ms = e2el;
    s.output_tokens = tokens;
    return s;
  };
  const std::vector<StreamTiming> rs = {
      req(100, 10, 500, 40),   // meets all
      req(100, 10, 500, 40),   // meets all
      req(300, 10, 500, 40),   // TTFT too slow
      req(100, 30, 500, 40),   // TPOT too slow
      req(100, 10, 5000, 40),  // E2EL too slow
      req(100, -1, 100, 1),    // one token: TPOT 0 (vLLM), meets all
      req(100, -1, 100, -1),   // token count unknown: cannot show it met the TPOT objective
      req(200, 20, 1000, 40),  // exactly at every objective: meets them
  };
  const GoodputSlo slo = parse_goodput({"ttft:200", "tpot:20", "e2el:1000"});
  QCOMPARE(slo.ttft_ms, 200.0);
  const LoadMetrics m = compute_metrics(rs, 4.0, {50}, slo);
  QCOMPARE(m.good, int64_t(4));
  QCOMPARE(m.request_goodput, 1.0);
  // Only TTFT set: the unknown-count request counts.
  QCOMPARE(compute_metrics(rs, 4.0, {50}, parse_goodput({"ttft:200"})).good, int64_t(7));
  for (const char* bad : {"ttft", "ttft:", "ttft:x", "latency:5", "ttft:-1", "ttft:nan"}) {
    try {
      parse_goodput({bad});
      QFAIL(bad);
    } catch (const InputError& e) {
      QVERIFY2(std::string(e.what()).find("--goodput") != std::string::npos, e.what());
    }
  }
  try {
    parse_goodput({"ttft:1", "ttft:2"});
    QFAIL("twice");
  } catch (const InputError&) {
  }
}

void TestLoadGenerator::warmupIsLeftOut() {
  const int64_t before = stats()["requests"].get<int64_t>();
  LoadOptions o;
  o.scenario = "sweep";
  o.levels = {2};
  o.requests = 5;
  o.warmup = 3;
  o.request.max_new_tokens = 7;
  o.dataset.input_len = 6;
  const LoadReport rep = run_load(target(QStringLiteral("s2")), o);
  const json after = stats();
  QCOMPARE(after["requests"].get<int64_t>() - before, int64_t(8));  // all eight reached the server
  const LoadLevel& l = rep.levels.at(0);
  QCOMPARE(l.warmup_requests, int64_t(3));
  QCOMPARE(l.requests, int64_t(5));
  QCOMPARE(l.metrics.completed, int64_t(5));
  QCOMPARE(l.metrics.total_output_tokens, int64_t(35));
  for (const StreamTiming& s : l.warmup_streams) QVERIFY(s.warmup);
  for (const StreamTiming& s : l.streams) QVERIFY(!s.warmup);
  // Eight different prompts: the warm-up's are not the measured ones.
  std::set<std::string> prompts;
  const json& sent = after["prompts"];
  for (size_t i = sent.size() - 8; i < sent.size(); ++i) prompts.insert(sent[i].get<std::string>());
  QCOMPARE(prompts.size(), size_t(8));
  // JSONL: every request, warm-up flagged; CSV: a header and a row each.
  const std::string jsonl = load_requests_jsonl(rep);
  int lines = 0, warm = 0;
  std::istringstream in(jsonl);
  for (std::string line; std::getline(in, line); ++lines)
    warm += json::parse(line).value("warmup", false) ? 1 : 0;
  QCOMPARE(lines, 8);
  QCOMPARE(warm, 3);
  const std::string csv = load_requests_csv(rep);
  QCOMPARE(std::count(csv.begin(), csv.end(), '\n'), std::ptrdiff_t(9));
}

void TestLoadGenerator::openLoopAndTimeBound() {
  for (const char* arrival : {"poisson", "gamma"}) {
    LoadOptions o;
    o.scenario = "sweep";
    o.arrival = arrival;
    o.burstiness = 0.5;
    o.levels = {200};
    o.requests = 6;
    o.request.max_new_tokens = 4;
    const LoadReport rep = run_load(target(QStringLiteral("s2")), o);
    const LoadLevel& l = rep.levels.at(0);
    QCOMPARE(l.requests, int64_t(6));
    QCOMPARE(l.ok, int64_t(6));
    QCOMPARE(l.metrics.total_output_tokens, int64_t(24));
  }
  // A time bound: no request is sent after 0.3 s (each takes at least 3 chunk delays here).
  LoadOptions o;
  o.scenario = "sweep";
  o.levels = {1};
  o.requests = 100000;
  o.level_seconds = 0.3;
  o.request.max_new_tokens = 4;
  const LoadReport rep = run_load(target(QStringLiteral("d20")), o);
  const LoadLevel& l = rep.levels.at(0);
  QVERIFY(l.time_bound);
  QVERIFY(l.requests >= 1);
  QVERIFY(l.requests < 100000);
  QCOMPARE(l.ok, l.requests);  // those in flight at the bound finish
}

void TestLoadGenerator::sweepAdaptersInTurn() {
  for (LoadApi api : {LoadApi::Lorax, LoadApi::OpenAIChat}) {
    LoadOptions o;
    o.scenario = "sweep";
    o.levels = {1};
    o.requests = 4;
    o.request.max_new_tokens = 3;
    o.adapters = {"one", "two"};
    const LoadReport rep = run_load(target(QStringLiteral("s1"), api), o);
    QCOMPARE(rep.levels.at(0).ok, int64_t(4));
    const json models = stats()["models"];
    std::vector<std::string> last;
    for (size_t i = models.size() - 4; i < models.size(); ++i) last.push_back(models[i].get<std::string>());
    QCOMPARE(last, (std::vector<std::string>{"one", "two", "one", "two"}));
    for (const StreamTiming& s : rep.levels[0].streams) QCOMPARE(s.adapter, o.adapters[s.index % 2]);
  }
  // TGI has no adapters: refused before anything is sent.
  LoadOptions o;
  o.adapters = {"one"};
  QVERIFY(refusal(target(QStringLiteral("s1"), LoadApi::Tgi), o).find("--adapter") != std::string::npos);
}

void TestLoadGenerator::badOptionsRefusedBeforeAnythingIsSent() {
  const int64_t before = stats()["requests"].get<int64_t>();
  const LoadTarget good = target(QStringLiteral("s1"));
  auto sweep = [] {
    LoadOptions o;
    o.scenario = "sweep";
    return o;
  };
  struct Case {
    std::function<void(LoadTarget&, LoadOptions&)> set;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {[](LoadTarget& t, LoadOptions&) { t.url = ""; }, "--url"},
      {[](LoadTarget& t, LoadOptions&) { t.url = "ftp://x"; }, "--url"},
      {[](LoadTarget& t, LoadOptions&) { t.url = "http://:80"; }, "--url"},
      {[](LoadTarget&, LoadOptions& o) { o.requests = 1'000'000'000; }, "--requests"},
      {[](LoadTarget&, LoadOptions& o) { o.requests = 0; }, "--requests"},
      {[](LoadTarget&, LoadOptions& o) { o.levels = {0}; }, "--clients"},
      {[](LoadTarget&, LoadOptions& o) { o.levels = {1.5}; }, "--clients"},
      {[](LoadTarget&, LoadOptions& o) { o.levels = {5000}; }, "--clients"},
      {[](LoadTarget&, LoadOptions& o) { o.levels = {}; }, "--clients"},
      {[](LoadTarget&, LoadOptions& o) {
         o.arrival = "poisson";
         o.levels = {1e-300};
       },
       "--clients"},
      {[](LoadTarget&, LoadOptions& o) {
         o.arrival = "poisson";
         o.levels = {0.01};
         o.level_seconds = 10;
       },
       "--clients"},
      {[](LoadTarget&, LoadOptions& o) {
         o.arrival = "poisson";
         o.levels = {1e9};
       },
       "--clients"},
      {[](LoadTarget&, LoadOptions& o) {
         o.arrival = "poisson";
         o.levels = {std::nan("")};
       },
       "--clients"},
      {[](LoadTarget&, LoadOptions& o) { o.arrival = "bursty"; }, "--arrival"},
      {[](LoadTarget&, LoadOptions& o) { o.burstiness = 0; }, "--burstiness"},
      {[](LoadTarget&, LoadOptions& o) { o.max_seconds = 0; }, "--max-seconds"},
      {[](LoadTarget&, LoadOptions& o) { o.max_seconds = 1e300; }, "--max-seconds"},
      {[](LoadTarget&, LoadOptions& o) { o.max_seconds = std::nan(""); }, "--max-seconds"},
      {[](LoadTarget&, LoadOptions& o) { o.level_seconds = -1; }, "--duration"},
      {[](LoadTarget& t, LoadOptions&) { t.read_timeout_s = 0; }, "--timeout"},
      {[](LoadTarget&, LoadOptions& o) { o.request.max_new_tokens = 0; }, "--max-new-tokens"},
      {[](LoadTarget&, LoadOptions& o) { o.request.max_new_tokens = int64_t(1) << 40; }, "--max-new-tokens"},
      {[](LoadTarget&, LoadOptions& o) { o.warmup = -1; }, "--warmup"},
      {[](LoadTarget&, LoadOptions& o) { o.percentiles = {0}; }, "--percentiles"},
      {[](LoadTarget&, LoadOptions& o) { o.request.json_schema = "{"; }, "--schema"},
  };
  for (const Case& c : cases) {
    LoadTarget t = good;
    LoadOptions o = sweep();
    c.set(t, o);
    const std::string why = refusal(t, o);
    QVERIFY2(why.find(c.flag) != std::string::npos, (c.flag + ": " + why).c_str());
    QVERIFY(why.find('\n') == std::string::npos);
    QVERIFY_THROWS_EXCEPTION(InputError, run_load(t, o));
  }
  // Datasets' options are refused by run_load before a request goes out.
  const std::vector<std::pair<std::function<void(DatasetOptions&)>, std::string>> datasets = {
      {[](DatasetOptions& d) { d.name = "sonnet"; }, "--dataset"},
      {[](DatasetOptions& d) { d.input_len = 0; }, "--input-len"},
      {[](DatasetOptions& d) { d.input_len = 1'000'000'000; }, "--input-len"},
      {[](DatasetOptions& d) { d.range_ratio = 1; }, "--range-ratio"},
      {[](DatasetOptions& d) {
         d.name = "prefix-repetition";
         d.prefix_len = 4;
         d.num_prefixes = 0;
       },
       "--num-prefixes"},
      {[](DatasetOptions& d) { d.name = "file"; }, "--dataset-path"},
  };
  for (const auto& [set, flag] : datasets) {
    LoadOptions o = sweep();
    set(o.dataset);
    try {
      run_load(good, o);
      QFAIL(flag.c_str());
    } catch (const InputError& e) {
      QVERIFY2(std::string(e.what()).find(flag) != std::string::npos, e.what());
    }
  }
  QCOMPARE(stats()["requests"].get<int64_t>(), before);  // nothing was sent
  QVERIFY(refusal(good, sweep()).empty());
}

void TestLoadGenerator::reportsUseVllmNames() {
  LoadOptions o;
  o.scenario = "sweep";
  o.levels = {1, 2};
  o.requests = 3;
  o.request.max_new_tokens = 5;
  o.goodput = parse_goodput({"e2el:100000"});
  o.percentiles = {50, 99.9};
  const LoadReport rep = run_load(target(QStringLiteral("s2"), LoadApi::OpenAI), o);
  const json j = json::parse(load_report_json(rep));
  for (const char* key : {"date", "servelab_version", "target", "dataset", "load", "percentiles", "model_id"})
    QVERIFY2(j.contains(key), key);
  QCOMPARE(j["target"]["endpoint"].get<std::string>(), std::string("/v1/completions"));
  QCOMPARE(j["dataset"]["name"].get<std::string>(), std::string("random"));
  QCOMPARE(j["levels"].size(), size_t(2));
  const json& l = j["levels"][1];
  for (const char* key : {"duration",
                          "completed",
                          "failed",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "request_goodput",
                          "output_throughput",
                          "total_token_throughput",
                          "mean_ttft_ms",
                          "median_ttft_ms",
                          "std_ttft_ms",
                          "p50_ttft_ms",
                          "p99.9_ttft_ms",
                          "mean_tpot_ms",
                          "p99.9_tpot_ms",
                          "mean_itl_ms",
                          "median_itl_ms",
                          "std_itl_ms",
                          "mean_e2el_ms",
                          "p99.9_e2el_ms",
                          "max_concurrency",
                          "errors_by_kind",
                          "max_output_tokens_per_s",
                          "max_concurrent_requests"})
    QVERIFY2(l.contains(key), key);
  QCOMPARE(l["completed"].get<int64_t>(), int64_t(3));
  QCOMPARE(l["total_output_tokens"].get<int64_t>(), int64_t(15));
  QCOMPARE(l["request_goodput"].get<double>(), l["request_throughput"].get<double>());
}

QTEST_GUILESS_MAIN(TestLoadGenerator)
#include "test_load_generator.moc"
