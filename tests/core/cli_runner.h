#pragma once
// Runs servelab-cli for the suites that test it as a user would, with the real GPT-2 tokenizer
// from $SERVELAB_SHARED when that is set (and no tokenizer dir was given explicitly).
#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

namespace servelab::test {

struct CliRun {
  int code;  // -1 when the process crashed or did not finish
  QString out, err;
};

inline CliRun run_cli(const QString& program, const QStringList& args) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  const QString shared = env.value("SERVELAB_SHARED");
  if (!shared.isEmpty() && env.value("SERVELAB_TOKENIZER_DIR").isEmpty())
    env.insert("SERVELAB_TOKENIZER_DIR", shared + "/data/gpt2");
  p.setProcessEnvironment(env);
  p.start(program, args);
  p.waitForFinished(300000);
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

}  // namespace servelab::test
