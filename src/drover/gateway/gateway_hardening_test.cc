// The gateway's fixes of issue 37: a viewer's key lists models but runs no
// inference; `Expect: 100-continue` requests are all answered; a whole
// upstream answer may be as large as max_upstream_body_bytes (64 MiB), and
// one over it is an error of its own, not retried on another replica.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "drover/gateway/gateway.h"
#include "gateway/engine_process.h"

namespace drover::gateway {
namespace {

using testing::ChildProcess;
using testing::Complete;
using testing::Conn;
using testing::Http;
using testing::HttpResponse;
using json = nlohmann::json;

Result<KeyInfo> HardeningKeys(std::string_view token) {
  static const std::map<std::string, KeyInfo, std::less<>> keys = {
      {"k-user", {"id-user", "user key", "a", false, 0, 0, 0, 0, false}},
      {"k-viewer", {"id-viewer", "viewer key", "a", false, 0, 0, 0, 0, /*read_only=*/true}},
  };
  auto it = keys.find(token);
  if (it == keys.end()) return Unauthenticated("no such key");
  return it->second;
}

// A replica on loopback that answers every request with `answer` (a whole
// HTTP response) and closes the connection; counts the requests it read.
class FakeReplica {
 public:
  explicit FakeReplica(std::string answer) : answer_(std::move(answer)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "fake replica: cannot listen: " << std::strerror(errno);
      return;
    }
    port_ = ntohs(a.sin_port);
    accepter_ = std::thread([this] { Accept(); });
  }
  ~FakeReplica() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (accepter_.joinable()) accepter_.join();
    std::vector<std::thread> conns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
      conns.swap(conns_);
    }
    for (auto& t : conns) t.join();
    ::close(listen_fd_);
  }
  FakeReplica(const FakeReplica&) = delete;
  FakeReplica& operator=(const FakeReplica&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_.load(); }

 private:
  void Accept() {
    for (;;) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;  // shut down
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) {
        ::close(fd);
        return;
      }
      fds_.push_back(fd);
      conns_.emplace_back([this, fd] { Serve(fd); });
    }
  }
  // One request (header and Content-Length body), the answer, then close.
  void Serve(int fd) {
    std::string in;
    char tmp[16384];
    size_t need = std::string::npos;
    while (in.size() < need) {
      ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n <= 0) break;
      in.append(tmp, static_cast<size_t>(n));
      size_t he = in.find("\r\n\r\n");
      if (he != std::string::npos && need == std::string::npos) {
        size_t cl = in.find("Content-Length: ");
        need = he + 4 + (cl < he ? std::stoul(in.substr(cl + 16)) : 0);
      }
    }
    if (in.size() >= need && need != std::string::npos) {
      requests_.fetch_add(1);
      std::string_view rest = answer_;
      while (!rest.empty()) {
        ssize_t n = ::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        rest.remove_prefix(static_cast<size_t>(n));
      }
    }
    ::shutdown(fd, SHUT_WR);
    while (::recv(fd, tmp, sizeof tmp, 0) > 0) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(std::find(fds_.begin(), fds_.end(), fd));
    ::close(fd);
  }

  const std::string answer_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread accepter_;
  std::mutex mu_;
  std::vector<int> fds_;            // under mu_
  std::vector<std::thread> conns_;  // under mu_
};

// A JSON answer of about `bytes` bytes, with Content-Length.
std::string BigAnswer(size_t bytes) {
  std::string body = R"({"object":"list","data":[],"pad":")" + std::string(bytes, 'x') + "\"}";
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// The same, chunked (no length known before the end).
std::string BigChunkedAnswer(size_t bytes) {
  std::string out =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const std::string chunk(64 << 10, 'x');
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
  out += "2\r\n{\"\r\n";
  for (size_t sent = 0; sent < bytes; sent += chunk.size()) out += size + chunk + "\r\n";
  out += "2\r\n\"}\r\n0\r\n\r\n";
  return out;
}

std::unique_ptr<Gateway> StartOrFail(GatewayOptions o = {}) {
  o.listen = "127.0.0.1:0";
  auto g = StartGateway(o, HardeningKeys, nullptr);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(*g) : nullptr;
}

json ChatBody() { return {{"model", "m"}, {"max_tokens", 1}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }

HttpResponse Post(const Gateway& gw, std::string_view path, const json& body, std::string_view key) {
  return Http(gw.port(), "POST", path, body.dump(), "Authorization: Bearer " + std::string(key) + "\r\n");
}

void ExpectForbidden(const HttpResponse& r) {
  EXPECT_EQ(r.status, 403) << r.raw;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.raw;
  EXPECT_EQ(j["error"]["type"], "permission_error") << r.body;
  EXPECT_EQ(j["error"]["code"], "permission_denied") << r.body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find("viewer"), std::string::npos) << r.body;
}

// A viewer may see what is served, but its key spends no GPU time: every
// inference endpoint (and the WebSocket) is 403, and nothing reaches the
// replica; a user key of the same tenant is served.
TEST(GatewayViewerTest, ViewerListsModelsButRunsNoInference) {
  const std::string ok_body = R"({"object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,)"
                              R"("completion_tokens":1,"total_tokens":2}})";
  FakeReplica replica("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(ok_body.size()) + "\r\nConnection: close\r\n\r\n" + ok_body);
  auto gw = StartOrFail();
  ASSERT_NE(gw, nullptr);
  gw->SetRoutes({{"m", "dep-m", "a", false, {{"j-1", replica.address()}}}});

  HttpResponse models = Http(gw->port(), "GET", "/v1/models", "", "Authorization: Bearer k-viewer\r\n");
  ASSERT_EQ(models.status, 200) << models.raw;
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "m");
  EXPECT_EQ(Http(gw->port(), "GET", "/v1/models/m", "", "Authorization: Bearer k-viewer\r\n").status, 200);

  ExpectForbidden(Post(*gw, "/v1/chat/completions", ChatBody(), "k-viewer"));
  ExpectForbidden(Post(*gw, "/v1/completions", {{"model", "m"}, {"prompt", "hi"}}, "k-viewer"));
  ExpectForbidden(Post(*gw, "/v1/embeddings", {{"model", "m"}, {"input", "hi"}}, "k-viewer"));
  json stream = ChatBody();
  stream["stream"] = true;
  ExpectForbidden(Post(*gw, "/v1/chat/completions", stream, "k-viewer"));
  Conn ws(gw->port());
  ASSERT_TRUE(
      ws.Send("GET /v1/chat/completions/ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
              "Authorization: Bearer k-viewer\r\n\r\n"));
  std::string raw;
  HttpResponse refused;
  ws.ReadUntil(&raw, [&](const std::string& b) { return Complete(b, &refused); });
  ExpectForbidden(refused);
  EXPECT_EQ(replica.requests(), 0) << "a viewer's request reached the replica";

  EXPECT_EQ(Post(*gw, "/v1/chat/completions", ChatBody(), "k-user").status, 200);
  EXPECT_EQ(replica.requests(), 1);
}

// curl sends `Expect: 100-continue` for every upload over 1 MiB: the header
// first, the body once `100 Continue` came. Each of 1,000 such requests
// (on new connections, four clients at once) gets its whole answer.
TEST(GatewayExpectContinueTest, EveryRequestIsAnswered) {
  ChildProcess engine({TEST_ENGINE_BINARY, "--port", "0", "--model", "m"});
  ASSERT_GT(engine.port(), 0) << "the test engine did not start";
  GatewayOptions o;
  // A call dropped after `100 Continue` leaves the connection waiting for its
  // next request: it ends at this timeout with no answer (not a timing).
  o.idle_timeout_ms = 2'000;
  auto gw = StartOrFail(o);
  ASSERT_NE(gw, nullptr);
  gw->SetRoutes({{"m", "dep-m", "", false, {{"j-1", engine.address()}}}});
  const std::string body = ChatBody().dump();
  const std::string head =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k-user\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n";
  constexpr int kClients = 4, kEach = 250;
  std::atomic<int> answered{0};
  std::mutex mu;
  std::vector<std::string> failures;  // under mu
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        Conn c(gw->port());
        std::string raw;
        HttpResponse r;
        std::string why;
        if (!c.ok() || !c.Send(head)) {
          why = "cannot send the header";
        } else if (!c.ReadUntil(&raw, [](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }) ||
                   raw.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0) != 0) {
          why = "no 100 Continue: " + raw;
        } else if (raw.clear(); !c.Send(body)) {
          why = "cannot send the body";
        } else if (!c.ReadUntil(&raw, [&](const std::string& b) { return Complete(b, &r); })) {
          why = "no answer after 100 Continue (got " + std::to_string(raw.size()) + " bytes)";
        } else if (r.status != 200) {
          why = "answered " + r.raw;
        }
        if (!why.empty()) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("request " + std::to_string(i) + ": " + why);
          return;  // this client stops at its first failure
        }
        answered.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(answered.load(), kClients * kEach);
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// A whole answer over Beast's default 8 MiB and under the documented
// max_upstream_body_bytes (64 MiB) is relayed.
TEST(GatewayUpstreamBodyTest, AnswerOver8MiBIsRelayed) {
  FakeReplica replica(BigAnswer(10 << 20));
  auto gw = StartOrFail();
  ASSERT_NE(gw, nullptr);
  gw->SetRoutes({{"m", "dep-m", "", false, {{"j-1", replica.address()}}}});
  HttpResponse r = Post(*gw, "/v1/chat/completions", ChatBody(), "k-user");
  EXPECT_EQ(r.status, 200) << r.raw.substr(0, 512);
  EXPECT_GT(r.body.size(), size_t{10} << 20);
  EXPECT_EQ(replica.requests(), 1);
}

// An answer over the limit, with a Content-Length or chunked, is a clear
// 502 upstream_response_too_large; the same request on another replica
// would be just as large, so none is tried.
TEST(GatewayUpstreamBodyTest, AnswerOverTheLimitIsAnErrorAndNotRetried) {
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "Content-Length");
    const std::string answer = chunked ? BigChunkedAnswer(2 << 20) : BigAnswer(2 << 20);
    FakeReplica a(answer), b(answer), c(answer);
    GatewayOptions o;
    o.max_upstream_body_bytes = 1 << 20;
    auto gw = StartOrFail(o);
    ASSERT_NE(gw, nullptr);
    gw->SetRoutes({{"m", "dep-m", "", false, {{"j-1", a.address()}, {"j-2", b.address()}, {"j-3", c.address()}}}});
    HttpResponse r = Post(*gw, "/v1/chat/completions", ChatBody(), "k-user");
    EXPECT_EQ(r.status, 502) << r.raw.substr(0, 512);
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.raw.substr(0, 512);
    EXPECT_EQ(j["error"]["code"], "upstream_response_too_large") << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(std::to_string(1 << 20)), std::string::npos) << r.body;
    EXPECT_EQ(a.requests() + b.requests() + c.requests(), 1) << "the call was retried on another replica";
    // The gateway goes on serving.
    EXPECT_EQ(Http(gw->port(), "GET", "/healthz").status, 200);
  }
}

}  // namespace
}  // namespace drover::gateway
