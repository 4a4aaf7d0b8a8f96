// Health checks under the connection limits: a flood of slow connections
// from one address fills that address's share and the turned-away slots,
// and /readyz and /healthz from the same address still get their answer
// (a load balancer or a proxy in front of Drover is such an address).

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "drover/http/client.h"
#include "drover/http/server.h"

namespace drover::http {
namespace {

void RaiseFdLimit(rlim_t want) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= want) return;
  limit.rlim_cur = std::min(want, limit.rlim_max);
  setrlimit(RLIMIT_NOFILE, &limit);
}

// A non-blocking connection from 127.0.0.1 that has sent the start of a
// request and nothing more; -1 on failure.
int SlowConnection(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  static constexpr char kStart[] = "GET /slow HTTP/1.1\r\nHost: t";
  if (::send(fd, kStart, sizeof kStart - 1, MSG_NOSIGNAL) < 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// `n` slow connections, each opened again as soon as the server closes it
// (a client that reconnects), on a thread of their own until destroyed.
class SlowFlood {
 public:
  SlowFlood(uint16_t port, int n) : port_(port), fds_(static_cast<size_t>(n), -1) {
    for (int& fd : fds_) fd = SlowConnection(port_);
    thread_ = std::thread([this] { Run(); });
  }
  ~SlowFlood() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  // Waits until the server has closed at least one of them (or `timeout`
  // passed); how many it closed.
  int WaitForServerClose(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    closed_cv_.wait_for(lock, timeout, [&] { return closed_ > 0; });
    return closed_;
  }

 private:
  void Run() {
    while (!stop_) {
      std::vector<pollfd> p;
      for (int fd : fds_) p.push_back(pollfd{fd, POLLIN, 0});
      ::poll(p.data(), p.size(), 20);
      for (size_t i = 0; i < fds_.size(); ++i) {
        if (fds_[i] >= 0 && p[i].revents == 0) continue;
        if (fds_[i] >= 0) {
          char scratch[512];
          ssize_t n = ::recv(fds_[i], scratch, sizeof scratch, 0);
          if (n > 0 || (n < 0 && errno == EAGAIN)) continue;  // an answer, or nothing yet: still open
          ::close(fds_[i]);
          {
            std::lock_guard lock(mu_);
            ++closed_;
          }
          closed_cv_.notify_all();
        }
        fds_[i] = SlowConnection(port_);
      }
    }
  }

  const uint16_t port_;
  std::vector<int> fds_;  // the flood's thread only, once started
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable closed_cv_;
  int closed_ = 0;  // guarded by mu_
  std::thread thread_;
};

// 150 reconnecting slow connections from 127.0.0.1 (past the address's 64
// and the 64 turned-away slots) do not keep /readyz and /healthz from that
// address from answering; any other path from it gets 503.
TEST(HttpHealthTest, HealthChecksAnswerWhileSlowClientsFillTheAddressShare) {
  RaiseFdLimit(4096);
  ServerOptions options;
  ASSERT_EQ(options.max_connections_per_source, 64);
  auto started = StartServer(
      "127.0.0.1:0",
      [](const Request& request) {
        if (request.path == "/readyz") return Response{200, "text/plain", "ready\n", {}, {}};
        if (request.path == "/healthz") return Response{200, "text/plain", "ok\n", {}, {}};
        return Response{200, "text/plain", "other\n", {}, {}};
      },
      options);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<Server> server = std::move(*started);
  const std::string address = "127.0.0.1:" + std::to_string(server->port());

  SlowFlood flood(server->port(), 150);
  // The server has turned some away: the address's share and the
  // turned-away slots are full.
  ASSERT_GT(flood.WaitForServerClose(std::chrono::seconds(60)), 0) << "the flood never reached the server's limits";

  for (int i = 0; i < 5; ++i) {
    for (const char* path : {"/readyz", "/healthz"}) {
      auto r = HttpRequest(address, "GET", path);
      ASSERT_TRUE(r.ok()) << path << ": no answer: " << r.status().ToString();
      EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    }
  }
  auto other = HttpRequest(address, "GET", "/api/v1/jobs");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->status, 503) << other->body;
}

}  // namespace
}  // namespace drover::http
