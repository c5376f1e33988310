// SlowRequestGuard on real loopback connections, with the clock passed to scan(): a connection
// still sending its request past the deadline is shut down; one whose handler runs is not, however
// long it streams; its answer restarts the clock; other sockets of the process are never touched.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QtTest>
#include <chrono>
#include <string>

#include "serve/slow_request_guard.h"

using servelab::SlowRequestGuard;
using namespace std::chrono_literals;

namespace {

struct Loopback {
  int listener = -1, port = 0;
  Loopback() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener, 8) != 0)
      qFatal("cannot listen on 127.0.0.1");
    socklen_t len = sizeof a;
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Loopback() { close(listener); }
  // A connected pair: the client's socket, the server's accepted one, and the client's port.
  struct Pair {
    int client = -1, server = -1, client_port = 0;
    ~Pair() {
      if (client >= 0) close(client);
      if (server >= 0) close(server);
    }
  };
  void connect_pair(Pair& p) const {
    p.client = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    QVERIFY(::connect(p.client, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    p.server = accept(listener, nullptr, nullptr);
    QVERIFY(p.server >= 0);
    socklen_t len = sizeof a;
    getsockname(p.client, reinterpret_cast<sockaddr*>(&a), &len);
    p.client_port = ntohs(a.sin_port);
  }
};

// Whether the server side of the pair was shut down: the client reads end-of-stream at once.
bool shut_down(const Loopback::Pair& p) {
  char byte;
  return recv(p.client, &byte, 1, MSG_DONTWAIT) == 0;
}

}  // namespace

class TestSlowRequestGuard : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void lateRequestIsDropped() {
    Loopback net;
    Loopback::Pair slow, prompt;
    net.connect_pair(slow);
    SlowRequestGuard guard(5.0);
    const auto t0 = SlowRequestGuard::Clock::now();
    QCOMPARE(guard.scan(net.port, t0), 0);  // both first seen now
    net.connect_pair(prompt);
    QCOMPARE(guard.scan(net.port, t0 + 3s), 0);  // the second first seen at 3 s
    QVERIFY(!shut_down(slow));
    QCOMPARE(guard.scan(net.port, t0 + 6s), 1);  // the first is past 5 s; the second is at 3 s
    QVERIFY(shut_down(slow));
    QVERIFY(!shut_down(prompt));
    QCOMPARE(guard.dropped(), int64_t{1});
    // The listening socket and the clients' own sockets (another local port) are never touched.
    int listening = 0;
    socklen_t len = sizeof listening;
    QVERIFY(getsockopt(net.listener, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening);
  }

  void answeringConnectionStaysAndItsAnswerRestartsTheClock() {
    Loopback net;
    Loopback::Pair p;
    net.connect_pair(p);
    SlowRequestGuard guard(5.0);
    const auto t0 = SlowRequestGuard::Clock::now();
    QCOMPARE(guard.scan(net.port, t0), 0);
    guard.answering("127.0.0.1", p.client_port);  // its request arrived; the answer streams
    QCOMPARE(guard.scan(net.port, t0 + 60s), 0);
    QVERIFY(!shut_down(p));
    guard.answered("127.0.0.1", p.client_port);  // the clock starts again now (wall clock)
    const auto t1 = SlowRequestGuard::Clock::now();
    QCOMPARE(guard.scan(net.port, t1 + 4s), 0);
    QCOMPARE(guard.scan(net.port, t1 + 6s), 1);
    QVERIFY(shut_down(p));
  }

  void closedConnectionsAreForgotten() {
    Loopback net;
    SlowRequestGuard guard(1.0);
    const auto t0 = SlowRequestGuard::Clock::now();
    {
      Loopback::Pair p;
      net.connect_pair(p);
      QCOMPARE(guard.scan(net.port, t0), 0);
    }
    // Closed before its deadline: nothing to drop, and a later connection is timed afresh.
    QCOMPARE(guard.scan(net.port, t0 + 2s), 0);
    Loopback::Pair q;
    net.connect_pair(q);
    QCOMPARE(guard.scan(net.port, t0 + 3s), 0);
    QCOMPARE(guard.scan(net.port, t0 + 3500ms), 0);
    QCOMPARE(guard.scan(net.port, t0 + 4500ms), 1);
    QCOMPARE(guard.dropped(), int64_t{1});
  }

  void badDeadlineIsRefused() { QVERIFY_THROWS_EXCEPTION(std::invalid_argument, SlowRequestGuard(0.0)); }
};

QTEST_GUILESS_MAIN(TestSlowRequestGuard)
#include "test_slow_request_guard.moc"
