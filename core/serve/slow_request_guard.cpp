#include "serve/slow_request_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace servelab {
namespace {

int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The peer of fd when it is a connected TCP socket on local port `port`, as httplib names a
// request's remote_addr and remote_port (getnameinfo, numeric host).
bool server_peer(int fd, int port, std::string& ip, int& peer_port) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  if (port_of(local) != port) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;  // listening
  std::array<char, NI_MAXHOST> host{};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&peer), peer_len, host.data(),
                  static_cast<socklen_t>(host.size()), nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  ip = host.data();
  peer_port = port_of(peer);
  return true;
}

// The process's socket descriptors.
std::vector<int> socket_fds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return fds;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    std::array<char, 64> target{};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(link.c_str(), target.data(), target.size() - 1);
    if (n > 7 && std::string(target.data(), 7) == "socket:") fds.push_back(static_cast<int>(fd));
  }
  closedir(dir);
  return fds;
}

}  // namespace

SlowRequestGuard::SlowRequestGuard(double deadline_s) : deadline_s_(deadline_s) {
  if (!(deadline_s > 0)) throw std::invalid_argument("SlowRequestGuard: the deadline must be > 0 s");
}

SlowRequestGuard::~SlowRequestGuard() { stop(); }

void SlowRequestGuard::start(int port) {
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
  }
  // A few looks per deadline, so that a late connection goes at most a quarter-deadline late,
  // and never more often than ten times a second.
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(deadline_s_ / 4, 0.1, 1.0)));
  thread_ = std::thread([this, port, period] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
      lock.unlock();
      scan(port, Clock::now());
      lock.lock();
    }
  });
}

void SlowRequestGuard::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlowRequestGuard::answering(const std::string& peer_ip, int peer_port) {
  std::lock_guard<std::mutex> lock(mutex_);
  Connection& c = connections_[key(peer_ip, peer_port)];
  c.answering = true;
}

void SlowRequestGuard::answered(const std::string& peer_ip, int peer_port) {
  std::lock_guard<std::mutex> lock(mutex_);
  Connection& c = connections_[key(peer_ip, peer_port)];
  c.answering = false;
  c.since = Clock::now();
}

int SlowRequestGuard::scan(int port, Clock::time_point now) {
  const auto deadline =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s_));
  struct Late {
    int fd;
    std::string ip;
    int port;
  };
  std::vector<Late> late;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [k, c] : connections_) c.seen = false;
    for (const int fd : socket_fds()) {
      std::string ip;
      int peer_port = 0;
      if (!server_peer(fd, port, ip, peer_port)) continue;
      auto [it, fresh] = connections_.try_emplace(key(ip, peer_port));
      Connection& c = it->second;
      if (fresh) c.since = now;
      c.seen = true;
      if (!c.answering && now - c.since > deadline) late.push_back({fd, ip, peer_port});
    }
    // Connections closed since the last scan; an entry made by answering() for one the scan has
    // not seen yet is young and stays.
    for (auto it = connections_.begin(); it != connections_.end();)
      it = !it->second.seen && now - it->second.since > deadline ? connections_.erase(it) : std::next(it);
  }
  int n = 0;
  for (const Late& l : late) {
    // httplib may have closed the descriptor since, and the number may already belong to a new
    // connection: only the same peer is shut down.
    std::string ip;
    int peer_port = 0;
    if (!server_peer(l.fd, port, ip, peer_port) || ip != l.ip || peer_port != l.port) continue;
    if (shutdown(l.fd, SHUT_RDWR) == 0) {
      ++n;
      std::lock_guard<std::mutex> lock(mutex_);
      connections_.erase(key(l.ip, l.port));
    }
  }
  dropped_ += n;
  return n;
}

}  // namespace servelab
