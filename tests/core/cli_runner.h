#pragma once
// Runs servelab-cli for the suites that test it as a user would, with the real GPT-2 tokenizer
// from $SERVELAB_SHARED when that is set (and no tokenizer dir was given explicitly).
#include <QProcess>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QString>
#include <QStringList>
#include <optional>

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

// What is wrong with shellCommand's colour, run by script(1) on a pseudo-terminal: empty when its
// output there has ANSI escapes and none once NO_COLOR is set, both runs exiting 0; nullopt when
// script(1) is not installed (no pseudo-terminal to run it on).
inline std::optional<QString> colour_problem_on_terminal(const QString& shellCommand) {
  const QString script = QStandardPaths::findExecutable("script");
  if (script.isEmpty()) return std::nullopt;
  for (const bool noColor : {false, true}) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("NO_COLOR");
    if (noColor) env.insert("NO_COLOR", "1");
    p.setProcessEnvironment(env);
    p.start(script, {"-qec", shellCommand, "/dev/null"});
    p.waitForFinished(300000);
    const QString shown = QString::fromUtf8(p.readAllStandardOutput());
    if (p.exitCode() != 0) return QStringLiteral("exit code %1: %2").arg(p.exitCode()).arg(shown);
    if (shown.contains(QChar(0x1b)) == noColor)
      return (noColor ? QStringLiteral("colour despite NO_COLOR: ") : QStringLiteral("no colour: ")) + shown;
  }
  return QString();
}

}  // namespace servelab::test
