// The load generator's readers (core/serve/load_stream, load_dataset, server_scrape): servers' event
// streams read the same however they are cut and garbage refused by kind; the prompts' datasets
// (random and seeded without shared prefixes unless asked, prefix repetition, prompts made of a
// tokenizer's tokens, JSONL and ShareGPT files, the shipped set); servers' /metrics texts parsed,
// refused by line, read under each engine's names, and scraped from
// tests/serve/loadgen_test_server.py on 127.0.0.1. No assertion depends on how fast anything ran.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loadgen_test_server.h"
#include "serve/load_dataset.h"
#include "serve/load_generator.h"
#include "serve/load_stream.h"
#include "serve/server_scrape.h"
#include "util/errors.h"
#include "word_tokenizer.h"

using namespace servelab;
using servelab::test::WordTokenizer;

namespace {

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

class TestLoadReaders : public QObject {
  Q_OBJECT

  QProcess server_;
  QString base_;  // http://127.0.0.1:PORT

 private Q_SLOTS:
  void initTestCase();
  void cleanupTestCase();
  void parserReadsEventsCutAnywhere();
  void parserRefusesGarbage();
  void randomDatasetIsSeededWithoutSharedPrefixes();
  void prefixRepetitionHasNPrefixes();
  void tokenPromptsFromTheTokenizer();
  void jsonlAndShareGptFiles();
  void prometheusTextParsed();
  void prometheusGarbageRefusedByLine();
  void eachEnginesLoadUnderItsNames();
  void scrapeReadsALiveServer();
};

void TestLoadReaders::initTestCase() {
  QString why;
  base_ = test::start_loadgen_test_server(server_, &why);
  QVERIFY2(!base_.isEmpty(), qPrintable(why));
}

void TestLoadReaders::cleanupTestCase() {
  server_.closeWriteChannel();  // the server ends when its stdin closes
  if (!server_.waitForFinished(10000)) {
    server_.kill();
    server_.waitForFinished(10000);
  }
}

void TestLoadReaders::parserReadsEventsCutAnywhere() {
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

void TestLoadReaders::parserRefusesGarbage() {
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

void TestLoadReaders::randomDatasetIsSeededWithoutSharedPrefixes() {
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

void TestLoadReaders::prefixRepetitionHasNPrefixes() {
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

void TestLoadReaders::tokenPromptsFromTheTokenizer() {
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

void TestLoadReaders::jsonlAndShareGptFiles() {
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

void TestLoadReaders::prometheusTextParsed() {
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

void TestLoadReaders::prometheusGarbageRefusedByLine() {
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

void TestLoadReaders::eachEnginesLoadUnderItsNames() {
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

void TestLoadReaders::scrapeReadsALiveServer() {
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

QTEST_GUILESS_MAIN(TestLoadReaders)
#include "test_load_readers.moc"
