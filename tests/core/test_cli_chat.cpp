// `servelab-cli chat` as a script uses it: user turns piped in one per line, greedy answers of a few
// tokens on the built-in model. Each later prompt holds the earlier exchanges (--show-prompt), the
// transcript (--save) is the conversation as OpenAI messages, and errors are one line.
#include <QtTest>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace {

using servelab::test::CliRun;

CliRun chat(const QStringList& args, const QByteArray& input) {
  return servelab::test::run_cli(QStringLiteral(SERVELAB_CLI), QStringList{"chat"} + args, input);
}

// The prompts --show-prompt wrote, in order.
QStringList prompts(const QString& err) {
  QStringList out;
  qsizetype at = 0;
  while ((at = err.indexOf(QStringLiteral("tokens ---\n"), at)) >= 0) {
    at += 11;
    const qsizetype end = err.indexOf(QStringLiteral("\n--- end of prompt ---"), at);
    if (end < 0) break;
    out << err.mid(at, end - at);
    at = end;
  }
  return out;
}

nlohmann::json read_json(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return nullptr;
  return nlohmann::json::parse(f.readAll().toStdString(), nullptr, false);
}

bool haveBuiltin() { return QFileInfo::exists(QStringLiteral(SERVELAB_BUILTIN_MODEL)); }

}  // namespace

class TestCliChat : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void threePipedTurnsCarryTheConversation() {
    if (!haveBuiltin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    QTemporaryDir dir;
    const QString saved = dir.filePath("chat.json");
    const CliRun r = chat({"--max-new-tokens", "6", "--show-prompt", "--save", saved},
                          "What is the capital of France?\nAnd of Italy?\nThank you.\n");
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QVERIFY2(!r.out.contains(QChar(0x1b)), qPrintable(r.out));
    const nlohmann::json j = read_json(saved);
    QVERIFY2(j.is_array() && j.size() == 6, qPrintable(QString::fromStdString(j.dump())));
    const char* users[] = {"What is the capital of France?", "And of Italy?", "Thank you."};
    for (size_t i = 0; i < 6; ++i) {
      QCOMPARE(QString::fromStdString(j[i]["role"].get<std::string>()),
               QString::fromLatin1(i % 2 ? "assistant" : "user"));
      if (i % 2 == 0)
        QCOMPARE(QString::fromStdString(j[i]["content"].get<std::string>()), QString(users[i / 2]));
    }
    const QString first = QString::fromStdString(j[1]["content"].get<std::string>());
    const QString second = QString::fromStdString(j[3]["content"].get<std::string>());
    QVERIFY2(!first.trimmed().isEmpty() && !second.trimmed().isEmpty(), qPrintable(r.out));
    // The answers are what stdout streamed, in order.
    QVERIFY2(r.out.indexOf(first) >= 0 && r.out.indexOf(second) > r.out.indexOf(first), qPrintable(r.out));
    const QStringList p = prompts(r.err);
    QCOMPARE(p.size(), 3);
    QVERIFY2(!p[0].contains("Italy"), qPrintable(p[0]));
    // The second answer's prompt holds the first exchange whole, before the second question.
    const QString exchange = QStringLiteral(
                                 "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                                 "<|im_start|>assistant\n%1<|im_end|>\n<|im_start|>user\nAnd of Italy?")
                                 .arg(first);
    QVERIFY2(p[1].contains(exchange), qPrintable(p[1]));
    QVERIFY2(p[2].contains(second) && p[2].endsWith("<|im_start|>assistant\n"), qPrintable(p[2]));
    // Without --system the template's own system message is used.
    QVERIFY2(p[0].contains("named SmolLM"), qPrintable(p[0]));
  }

  void systemAndResetCommands() {
    if (!haveBuiltin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    QTemporaryDir dir;
    const QString saved = dir.filePath("chat.json");
    const CliRun r = chat({"--max-new-tokens", "3", "--show-prompt", "--save", saved},
                          "/system Answer in French.\nHi\n/reset\n\nHello\n/help\n/exit\nNever read\n");
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const QStringList p = prompts(r.err);
    QCOMPARE(p.size(), 2);
    QVERIFY(p[0].startsWith("<|im_start|>system\nAnswer in French.<|im_end|>"));
    QVERIFY2(
        p[1].startsWith("<|im_start|>system\nAnswer in French.<|im_end|>\n<|im_start|>user\nHello<|im_end|>"),
        qPrintable(p[1]));
    QVERIFY(r.err.contains("/reset") && r.err.contains("starts over"));
    const nlohmann::json j = read_json(saved);
    QVERIFY2(j.is_array() && j.size() == 3, qPrintable(QString::fromStdString(j.dump())));
    QCOMPARE(QString::fromStdString(j[0]["content"].get<std::string>()), QStringLiteral("Answer in French."));
    QCOMPARE(QString::fromStdString(j[1]["content"].get<std::string>()), QStringLiteral("Hello"));
  }

  void endOfInputAndErrors() {
    if (!haveBuiltin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    const CliRun empty = chat({}, "");
    QVERIFY2(empty.code == 0 && empty.out.isEmpty(), qPrintable(empty.err));
    const CliRun unknown = chat({"--max-new-tokens", "2"}, "/frobnicate\n");
    QCOMPARE(unknown.code, 1);
    QVERIFY2(unknown.err.startsWith("servelab-cli: input error: unknown command /frobnicate") &&
                 unknown.err.count('\n') == 1,
             qPrintable(unknown.err));
    const CliRun tooLong = chat({"--max-new-tokens", "100000"}, "Hi\n");
    QCOMPARE(tooLong.code, 1);
    QVERIFY2(tooLong.err.contains("--max-new-tokens must be in [1, ") && tooLong.err.count('\n') == 1,
             qPrintable(tooLong.err));
    const CliRun usage = chat({"--top-k", "5"}, "Hi\n");
    QCOMPARE(usage.code, 2);
    QVERIFY2(usage.err.contains("--top-k needs --temperature") && usage.err.count('\n') == 1,
             qPrintable(usage.err));
  }

  void modelWithoutATemplateCannotChat() {
    const CliRun r = chat({"--demo"}, "Hi\n");
    if (r.err.contains("tokenizer")) QSKIP("the GPT-2 tokenizer is not available (set SERVELAB_SHARED)");
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("has no chat template, so it cannot chat") && r.err.count('\n') == 1,
             qPrintable(r.err));
  }

  void colourOnlyOnATerminal() {
    if (!haveBuiltin()) QSKIP("the built-in model is not installed here (scripts/bootstrap installs it)");
    // Turns from a pipe, the answer onto the terminal script(1) gives.
    const QString command = QStringLiteral("printf 'Hi\\n' | '%1' chat --max-new-tokens 2").arg(SERVELAB_CLI);
    const std::optional<QString> problem = servelab::test::colour_problem_on_terminal(command);
    if (!problem) QSKIP("script(1) is not installed: no pseudo-terminal to run the CLI on");
    QVERIFY2(problem->isEmpty(), qPrintable(*problem));
  }
};

QTEST_GUILESS_MAIN(TestCliChat)
#include "test_cli_chat.moc"
