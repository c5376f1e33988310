#pragma once
// Starts tests/serve/loadgen_test_server.py (a server that streams as vLLM does, on 127.0.0.1, a
// free port) for the load generator's and the Serving tab's suites. Needs the suite's
// SERVELAB_TEST_PYTHON and SERVELAB_SOURCE_DIR definitions.
#include <QProcess>
#include <QString>

namespace servelab::test {

// Its base URL, "http://127.0.0.1:PORT"; empty, with *why set, when it did not start.
inline QString start_loadgen_test_server(QProcess& server, QString* why) {
  server.setProgram(QStringLiteral(SERVELAB_TEST_PYTHON));
  server.setArguments({QStringLiteral(SERVELAB_SOURCE_DIR "/tests/serve/loadgen_test_server.py")});
  server.setProcessChannelMode(QProcess::ForwardedErrorChannel);
  server.start();
  if (!server.waitForStarted(30000)) {
    *why = QStringLiteral("cannot start the test server");
    return {};
  }
  // It prints its port on its first line.
  QString line;
  for (int i = 0; i < 600 && !line.contains(QLatin1Char('\n')); ++i) {
    server.waitForReadyRead(100);
    line += QString::fromUtf8(server.readAllStandardOutput());
  }
  const int port = line.trimmed().toInt();
  if (port <= 0) {
    *why = QStringLiteral("the test server printed no port: ") + line;
    return {};
  }
  return QStringLiteral("http://127.0.0.1:%1").arg(port);
}

}  // namespace servelab::test
