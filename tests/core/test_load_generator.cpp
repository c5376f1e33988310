// The load generator (core/serve/load_*): token counts from what a server reports (never chunks),
// inter-token latency spread over a chunk's tokens, vLLM's metric definitions, goodput, warm-up,
// datasets, the per-request outputs and the refusal of bad options and bad answers. The network
// cases run against tests/serve/loadgen_test_server.py on 127.0.0.1, which streams as vLLM does
// with a stream interval and as TGI does. No assertion depends on how fast anything ran.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loadgen_test_server.h"
#include "serve/load_generator.h"
#include "serve/server_scrape.h"
#include "tokenizer/tokenizer.h"
#include "util/errors.h"

using namespace servelab;
using nlohmann::json;

namespace {

// One token per space-separated word; ids index a small vocabulary (unknown words share an id).
class WordTokenizer final : public Tokenizer {
 public:
  WordTokenizer() {
    words_ = {"<eos>", "<unk>"};
    for (const char* w :
         {"alpha",  "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
          "lambda", "mu",   "nu",    "xi",    "omicron", "pi",   "rho", "sigma", "tau",  "upsilon"})
      words_.push_back(w);
  }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    std::istringstream in{std::string(text)};
    for (std::string w; in >> w;) {
      const auto it = std::find(words_.begin(), words_.end(), w);
      ids.push_back(it == words_.end() ? 1 : static_cast<int32_t>(it - words_.begin()));
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) throw TokenizerError("id out of range");
    return " " + words_[static_cast<size_t>(id)];
  }
  std::string token_display(int32_t id) const override { return token_bytes(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(words_.size()); }
  std::optional<int32_t> eos_id() const override { return 0; }
  std::string kind() const override { return "words"; }

 private:
  std::vector<std::string> words_;
};

size_t word_count(const std::string& s) {
  std::istringstream in(s);
  size_t n = 0;
  for (std::string w; in >> w;) ++n;
  return n;
}

std::string first_words(const std::string& s, size_t n) {
  std::istringstream in(s);
  std::string out;
  for (std::string w; n-- > 0 && in >> w;) out += w + " ";
  return out;
}

// The refusal's message, or "" when the options pass.
std::string refusal(const LoadTarget& t, const LoadOptions& o) {
  try {
    check_load_options(t, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// An InputError's message, or "" when f throws none.
template <typename F>
std::string error_text(F f) {
  try {
    f();
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
  void parserReadsEventsCutAnywhere();
  void parserRefusesGarbage();
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
  void randomDatasetIsSeededWithoutSharedPrefixes();
  void prefixRepetitionHasNPrefixes();
  void tokenPromptsFromTheTokenizer();
  void jsonlAndShareGptFiles();
  void badOptionsRefusedBeforeAnythingIsSent();
  void reportsUseVllmNames();
  void prometheusTextParsed();
  void prometheusGarbageRefusedByLine();
  void eachEnginesLoadUnderItsNames();
  void scrapeReadsALiveServer();
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

void TestLoadGenerator::parserReadsEventsCutAnywhere() {
  const std::string body =
      "data: {\"choices\": [{\"index\": 0, \"text\": \" a\", \"finish_reason\": null}]}\r\n\r\n"
      ": keep-alive\n\n"
      "data:{\"choices\": [{\"index\": 0, \"text\": \"\", \"finish_reason\": null}]}\n\n"
      "data: {\"choices\": [{\"index\": 0, \"text\": \"\\u00e9 b\", \"finish_reason\": \"length\"}]}\n\n"
      "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 4, \"completion_tokens\": 5}}\n\n"
      "data: [DONE]\n\n";
  // Every cut of the body in two pieces reads the same.
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    StreamParser p(StreamProtocol::OpenAICompletions);
    QVERIFY(p.feed(std::string_view(body).substr(0, cut), 1.0));
    QVERIFY(p.feed(std::string_view(body).substr(cut), 2.0));
    p.finish(3.0);
    QVERIFY2(!p.failed(), p.error().c_str());
    QVERIFY(p.ended());
    QCOMPARE(p.chunks().size(), size_t(3));  // the empty one held half a character: it carried a token
    QCOMPARE(p.text(), std::string(" a\xc3\xa9 b"));
    QCOMPARE(p.usage_output_tokens(), int64_t(5));
    QCOMPARE(p.usage_prompt_tokens(), int64_t(4));
    QCOMPARE(p.finish_reason(), std::string("length"));
  }
  // The total spread: the first chunk the prefill's one token, the rest evenly.
  StreamParser p(StreamProtocol::OpenAICompletions);
  p.feed(body, 1.0);
  TokenCountSource source{};
  QCOMPARE(assign_chunk_tokens(StreamProtocol::OpenAICompletions, p, nullptr, &source), int64_t(5));
  QCOMPARE(source, TokenCountSource::Usage);
  std::vector<int64_t> shares;
  for (const StreamChunk& c : p.chunks()) shares.push_back(c.tokens);
  QCOMPARE(shares, (std::vector<int64_t>{1, 2, 2}));
}

void TestLoadGenerator::parserRefusesGarbage() {
  struct Case {
    StreamProtocol protocol;
    std::string body;
    LoadErrorKind kind;
  };
  const std::vector<Case> cases = {
      {StreamProtocol::OpenAICompletions, "<html>502 Bad Gateway</html>\n", LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAICompletions, "data: {\"choices\": [{\"text\": \n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAICompletions, "data: [1, 2]\n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAICompletions, "data: {\"hello\": 1}\n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAICompletions, "data: {\"choices\": [{\"text\": 7}]}\n\n",
       LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAICompletions,
       "data: {\"choices\": [], \"usage\": {\"completion_tokens\": -3}}\n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAICompletions,
       "data: {\"choices\": [], \"usage\": {\"completion_tokens\": 1.5}}\n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAIChat, "data: {\"choices\": [{\"text\": \"x\"}]}\n\n",
       LoadErrorKind::BadResponse},
      {StreamProtocol::OpenAIChat, "data: {\"error\": {\"message\": \"boom\"}}\n\n",
       LoadErrorKind::ServerError},
      {StreamProtocol::Tgi, "data: {\"generated_text\": null}\n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::Tgi, "data: {\"token\": 3}\n\n", LoadErrorKind::BadResponse},
      {StreamProtocol::Tgi,
       "data: {\"token\": {\"text\": \"a\"}, \"generated_text\": \"a\", \"details\": {\"generated_tokens\": "
       "\"x\"}}\n\n",
       LoadErrorKind::BadResponse},
      {StreamProtocol::Tgi, "data: {\"error\": \"no blocks\", \"error_type\": \"generation\"}\n\n",
       LoadErrorKind::ServerError},
  };
  for (const Case& c : cases) {
    StreamParser p(c.protocol);
    p.feed(c.body, 1.0);
    p.finish(2.0);
    QVERIFY2(p.failed(), c.body.c_str());
    QCOMPARE(p.error_kind(), c.kind);
    QVERIFY(!p.error().empty());
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

void TestLoadGenerator::randomDatasetIsSeededWithoutSharedPrefixes() {
  DatasetOptions d;
  d.input_len = 40;
  d.output_len = 30;
  d.range_ratio = 0.5;
  const LoadDataset a(d, nullptr), b(d, nullptr);
  d.seed = 2;
  const LoadDataset other(d, nullptr);
  std::set<std::string> heads;
  int differs = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    const DatasetEntry e = a.at(i);
    QCOMPARE(e.prompt, b.at(i).prompt);  // seeded
    QCOMPARE(e.output_tokens, b.at(i).output_tokens);
    differs += e.prompt != other.at(i).prompt;
    const auto n = static_cast<int64_t>(word_count(e.prompt));
    QVERIFY2(n >= 20 && n <= 60, e.prompt.c_str());
    QVERIFY(e.output_tokens >= 15 && e.output_tokens <= 45);
    // No two prompts share even their first word pair... of three: the heads spell the index.
    heads.insert(first_words(e.prompt, 3));
  }
  QCOMPARE(heads.size(), size_t(3000));
  QCOMPARE(differs, 3000);
  // A prefix asked for: every prompt begins with the same 8 words, then differs.
  DatasetOptions p;
  p.input_len = 10;
  p.prefix_len = 8;
  const LoadDataset shared(p, nullptr);
  const std::string prefix = first_words(shared.at(0).prompt, 8);
  std::set<std::string> after;
  for (int64_t i = 0; i < 50; ++i) {
    QCOMPARE(first_words(shared.at(i).prompt, 8), prefix);
    QCOMPARE(word_count(shared.at(i).prompt), size_t(18));
    after.insert(first_words(shared.at(i).prompt, 11));
  }
  QCOMPARE(after.size(), size_t(50));
}

void TestLoadGenerator::prefixRepetitionHasNPrefixes() {
  DatasetOptions d;
  d.name = "prefix-repetition";
  d.prefix_len = 16;
  d.suffix_len = 5;
  d.num_prefixes = 3;
  const LoadDataset ds(d, nullptr);
  std::map<std::string, int> prefixes;
  std::set<std::string> prompts;
  for (int64_t i = 0; i < 30; ++i) {
    const std::string prompt = ds.at(i).prompt;
    QCOMPARE(word_count(prompt), size_t(21));
    ++prefixes[first_words(prompt, 16)];
    prompts.insert(prompt);
  }
  QCOMPARE(prefixes.size(), size_t(3));
  for (const auto& [prefix, n] : prefixes) QCOMPARE(n, 10);
  QCOMPARE(prompts.size(), size_t(30));
  // The three prefixes differ from their first word.
  std::set<std::string> firsts;
  for (const auto& [prefix, n] : prefixes) firsts.insert(first_words(prefix, 1));
  QCOMPARE(firsts.size(), size_t(3));
}

void TestLoadGenerator::tokenPromptsFromTheTokenizer() {
  WordTokenizer words;
  DatasetOptions d;
  d.input_len = 12;
  const LoadDataset ds(d, &words);
  QVERIFY(ds.tokens());
  std::set<std::string> heads;
  for (int64_t i = 0; i < 200; ++i) {
    const DatasetEntry e = ds.at(i);
    QCOMPARE(e.prompt_tokens, int64_t(12));                // known exactly: made of the tokenizer's tokens
    QVERIFY(e.prompt.find("<eos>") == std::string::npos);  // no special token in a prompt
    heads.insert(first_words(e.prompt, 2));
  }
  QCOMPARE(heads.size(), size_t(200));  // 20 plain tokens: two spell 400 indices
}

void TestLoadGenerator::jsonlAndShareGptFiles() {
  const auto jsonl = parse_dataset(
      "{\"prompt\": \"alpha beta\", \"output_tokens\": 7}\n\n{\"prompt\": \"gamma\", \"extra\": 1}\r\n",
      "x.jsonl", nullptr);
  QCOMPARE(jsonl.size(), size_t(2));
  QCOMPARE(jsonl[0].prompt, std::string("alpha beta"));
  QCOMPARE(jsonl[0].output_tokens, int64_t(7));
  QCOMPARE(jsonl[1].output_tokens, int64_t(-1));
  WordTokenizer words;
  const auto share = parse_dataset(
      R"([{"id": "1", "conversations": [{"from": "human", "value": "alpha beta gamma"},
                                        {"from": "gpt", "value": "delta epsilon zeta eta theta"}]},
          {"id": "2", "conversations": [{"from": "gpt", "value": "no question"}]},
          {"id": "3", "conversations": [{"from": "user", "value": "iota"}]}])",
      "s.json", &words);
  QCOMPARE(share.size(), size_t(2));  // the one without a human turn is skipped
  QCOMPARE(share[0].prompt, std::string("alpha beta gamma"));
  QCOMPARE(share[0].prompt_tokens, int64_t(3));
  QCOMPARE(share[0].output_tokens, int64_t(5));  // as long as its answer
  QCOMPARE(share[1].output_tokens, int64_t(-1));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"prompt\": 3}\n", "x.jsonl line 1"},
      {"{\"prompt\": \"a\"}\nnot json\n", "x.jsonl line 2"},
      {"{\"prompt\": \"a\", \"output_tokens\": 0}\n", "output_tokens"},
      {"{\"text\": \"a\"}\n", "needs \"prompt\""},
      {"[{\"conversations\": 5}]", "entry 1"},
      {"[1, 2", "not a JSON list"},
      {"  \n", "holds no prompts"},
      {"{\"prompt\": \"\\ud800\"}\n", "x.jsonl"},
  };
  for (const auto& [text, words_expected] : bad) {
    try {
      parse_dataset(text, "x.jsonl", nullptr);
      QFAIL(text.c_str());
    } catch (const InputError& e) {
      QVERIFY2(std::string(e.what()).find(words_expected) != std::string::npos, e.what());
    }
  }
  // The shipped set parses, and the file dataset reads a file.
  DatasetOptions shipped;
  shipped.name = "shipped";
  const LoadDataset s(shipped, nullptr);
  QVERIFY(s.size() >= 40);
  QTemporaryDir dir;
  const std::string path = dir.filePath(QStringLiteral("d.jsonl")).toStdString();
  std::ofstream(path) << "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n";
  DatasetOptions file;
  file.name = "file";
  file.path = path;
  file.output_len = 9;
  const LoadDataset f(file, nullptr);
  QCOMPARE(f.at(3).prompt, std::string("two"));  // in turn
  QCOMPARE(f.at(3).output_tokens, int64_t(9));
  file.path = dir.filePath(QStringLiteral("none.jsonl")).toStdString();
  QVERIFY_THROWS_EXCEPTION(InputError, LoadDataset(file, nullptr));
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

void TestLoadGenerator::prometheusTextParsed() {
  const std::vector<PromSample> s = parse_prometheus_text(
      "# HELP vllm:num_requests_running Number of requests.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"a \\\"b\\\" \\\\ c\\nd\"} 4\r\n"
      "  plain_total 1.5e3 1700000000000\n"
      "with_trailing_comma{a=\"1\",} -2\n"
      "nan_gauge NaN\n"
      "inf_bucket{le=\"+Inf\"} +Inf\n");
  QCOMPARE(s.size(), size_t{5});
  QCOMPARE(QString::fromStdString(s[0].name), QStringLiteral("vllm:num_requests_running"));
  QCOMPARE(s[0].labels.size(), size_t{2});
  QCOMPARE(QString::fromStdString(s[0].labels[1].second), QStringLiteral("a \"b\" \\ c\nd"));
  QCOMPARE(s[0].value, 4.0);
  QCOMPARE(s[1].value, 1500.0);  // the timestamp after it is not the value
  QCOMPARE(s[2].labels.size(), size_t{1});
  QCOMPARE(s[2].value, -2.0);
  QVERIFY(std::isnan(s[3].value));
  QVERIFY(std::isinf(s[4].value) && s[4].value > 0);
}

void TestLoadGenerator::prometheusGarbageRefusedByLine() {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ok 1\nno_value\n", "line 2: no value after no_value"},
      {"x{a=\"1\" 2\n", "line 1: the label set is not closed"},
      {"x{a=\"1 2\n", "line 1: a label value is not closed"},
      {"x{a=1} 2\n", "line 1: a label must be name=\"value\""},
      {"x{a=\"\\q\"} 2\n", "unknown escape"},
      {"x twelve\n", "line 1: the value 'twelve' is not a number"},
      {"{a=\"1\"} 2\n", "a sample must start with a metric name"},
      {"<html><body>Not Found</body></html>\n", "line 1: a sample must start with a metric name"},
  };
  for (const auto& [text, want] : bad) {
    try {
      parse_prometheus_text(text);
      QFAIL(("accepted: " + text).c_str());
    } catch (const InputError& e) {
      QVERIFY2(std::string(e.what()).find(want) != std::string::npos, e.what());
    }
  }
}

void TestLoadGenerator::eachEnginesLoadUnderItsNames() {
  // Texts written from each engine's documented metric names; two series of one metric (two
  // data-parallel engines) are summed, KV usage is the fullest.
  const ServerLoad vllm = server_load(parse_prometheus_text(
      "vllm:num_requests_running{engine=\"0\"} 3\nvllm:num_requests_running{engine=\"1\"} 2\n"
      "vllm:num_requests_waiting{engine=\"0\"} 1\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n"
      "vllm:gpu_cache_usage_perc{engine=\"1\"} 0.75\nvllm:num_preemptions_total 9\n"));
  QCOMPARE(QString::fromStdString(vllm.engine), QStringLiteral("vllm"));
  QCOMPARE(*vllm.running, 5.0);
  QCOMPARE(*vllm.waiting, 1.0);
  QCOMPARE(*vllm.kv_usage, 0.75);
  QCOMPARE(*vllm.preemptions_total, 9.0);
  const ServerLoad ours = server_load(parse_prometheus_text(
      "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.1\n"
      "servelab:kv_blocks_used 3\n"));
  QCOMPARE(QString::fromStdString(ours.engine), QStringLiteral("servelab"));
  QCOMPARE(*ours.kv_usage, 0.1);
  const ServerLoad tgi = server_load(parse_prometheus_text("tgi_batch_current_size 4\ntgi_queue_size 2\n"));
  QCOMPARE(QString::fromStdString(tgi.engine), QStringLiteral("tgi"));
  QCOMPARE(*tgi.running, 4.0);
  QVERIFY(!tgi.kv_usage && !tgi.preemptions_total);  // TGI publishes neither
  const ServerLoad none = server_load(parse_prometheus_text("process_cpu_seconds_total 12\n"));
  QVERIFY(none.engine.empty() && !none.running && !none.waiting);
}

void TestLoadGenerator::scrapeReadsALiveServer() {
  // The test server's /metrics in each engine's names (its running count is the requests in flight).
  for (const char* engine : {"vllm", "sglang", "tgi", "llamacpp"}) {
    LoadTarget t;
    t.url = (base_ + "/" + engine + "metrics").toStdString();
    const ServerLoad l = scrape_server_load(t);
    QCOMPARE(QString::fromStdString(l.engine),
             QString::fromLatin1(std::string(engine) == "llamacpp" ? "llama.cpp" : engine));
    QVERIFY(l.running && *l.running >= 0);  // requests in flight: earlier cases left silent ones
    QCOMPARE(*l.waiting, 3.0);
    if (std::string(engine) != "tgi") QCOMPARE(*l.kv_usage, 0.25);
  }
  LoadTarget broken;
  broken.url = (base_ + "/brokenmetrics").toStdString();
  QVERIFY(error_text([&] { scrape_server_load(broken); }).find("the label set is not closed") !=
          std::string::npos);
  LoadTarget missing;
  missing.url = (base_ + "/nothing").toStdString();
  QVERIFY(error_text([&] { scrape_server_load(missing); }).find("answered HTTP 404") != std::string::npos);
  LoadTarget nobody;
  nobody.url = "http://127.0.0.1:1";
  QVERIFY(error_text([&] {
            scrape_server_load(nobody);
          }).find("cannot reach http://127.0.0.1:1 (Connection): no /metrics") != std::string::npos);
}

QTEST_GUILESS_MAIN(TestLoadGenerator)
#include "test_load_generator.moc"
