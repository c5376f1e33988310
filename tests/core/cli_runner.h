#pragma once
// Runs servelab-cli for the suites that test it as a user would, with the real GPT-2 tokenizer
// from $SERVELAB_SHARED when that is set (and no tokenizer dir was given explicitly).
#include <QProcess>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QString>
#include <QStringList>
#include <utility>

namespace servelab::test {

struct CliRun {
  int code;  // -1 when the process crashed or did not finish
  QString out, err;
};

// input, when given, is the process's standard input (a pipe, closed after it).
inline CliRun run_cli(const QString& program, const QStringList& args, const QByteArray& input = {}) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  const QString shared = env.value("SERVELAB_SHARED");
  if (!shared.isEmpty() && env.value("SERVELAB_TOKENIZER_DIR").isEmpty())
    env.insert("SERVELAB_TOKENIZER_DIR", shared + "/data/gpt2");
  p.setProcessEnvironment(env);
  p.start(program, args);
  if (!input.isEmpty()) p.write(input);
  p.closeWriteChannel();
  p.waitForFinished(300000);
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

// shellCommand run by script(1) on a pseudo-terminal, NO_COLOR set or not: its exit code and what
// the terminal showed; code -2 when script(1) is not installed.
inline std::pair<int, QString> run_on_terminal(const QString& shellCommand, bool noColor) {
  const QString script = QStandardPaths::findExecutable("script");
  if (script.isEmpty()) return {-2, QString()};
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove("NO_COLOR");
  if (noColor) env.insert("NO_COLOR", "1");
  p.setProcessEnvironment(env);
  p.start(script, {"-qec", shellCommand, "/dev/null"});
  p.waitForFinished(300000);
  return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput())};
}

}  // namespace servelab::test
