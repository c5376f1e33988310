#pragma once
// Drops the server's connections whose request has not arrived whole within a deadline: a client
// that sends a byte a second ("slowloris") would otherwise hold a connection thread for as long
// as it likes, since cpp-httplib bounds each read but never a whole request, and keeps its
// sockets to itself. The guard finds the server's connections among this process's file
// descriptors (a TCP socket whose local port is the server's, with a peer), times each from the
// moment it is first seen or its last answer was written, and shuts down those still reading a
// request past the deadline; httplib's next read then fails and it closes the socket itself.
// Linux only (/proc/self/fd). Torch- and Qt-free.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace servelab {

class SlowRequestGuard {
 public:
  using Clock = std::chrono::steady_clock;

  // deadline_s: how long a connection may take to deliver a request (line, headers and body),
  // from its accept or from the end of its previous answer; > 0.
  explicit SlowRequestGuard(double deadline_s);
  ~SlowRequestGuard();
  SlowRequestGuard(const SlowRequestGuard&) = delete;
  SlowRequestGuard& operator=(const SlowRequestGuard&) = delete;

  // Watches the connections to local port `port` on a thread of its own until stop().
  void start(int port);
  void stop();

  // A connection's request has arrived whole and its handler runs (however long it streams).
  void answering(const std::string& peer_ip, int peer_port);
  // Its answer has been written: the clock starts again for the next request on the connection.
  void answered(const std::string& peer_ip, int peer_port);

  // One pass over the process's sockets at time `now`: drops the late connections, returns how
  // many. The thread calls it periodically; tests call it directly with a clock of their own.
  int scan(int port, Clock::time_point now);

  int64_t dropped() const { return dropped_.load(); }
  double deadline_s() const { return deadline_s_; }

 private:
  struct Connection {
    Clock::time_point since;
    bool answering = false;
    bool seen = false;  // found by the current scan
  };
  static std::string key(const std::string& ip, int port) { return ip + '|' + std::to_string(port); }

  const double deadline_s_;
  std::mutex mutex_;
  std::map<std::string, Connection> connections_;
  std::atomic<int64_t> dropped_{0};
  std::thread thread_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace servelab
