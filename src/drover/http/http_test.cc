#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "drover/http/client.h"
#include "drover/http/server.h"
#include "drover/http/test_cert.h"

namespace drover::http {
namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using ::testing::HasSubstr;

// Describes the request back, so tests can see what the handler saw.
Response Echo(const Request& request) {
  nlohmann::json query = nlohmann::json::object();
  for (const auto& [key, value] : request.query) query[key] = value;
  nlohmann::json headers = nlohmann::json::object();
  for (const auto& [key, value] : request.headers) headers[key] = value;
  Response response;
  response.body = nlohmann::json{
      {"method", request.method},
      {"path", request.path},
      {"query", query},
      {"headers", headers},
      {"body",
       request.body}}.dump();
  response.headers["X-Drover-Test"] = "yes";
  return response;
}

std::unique_ptr<Server> StartOrDie(Handler handler, ServerOptions options = {}) {
  auto server = StartServer("127.0.0.1:0", std::move(handler), options);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return nullptr;
  EXPECT_NE((*server)->port(), 0);
  return std::move(*server);
}

std::string Address(const Server& server) { return "127.0.0.1:" + std::to_string(server.port()); }

// A raw keep-alive connection, for what HttpRequest (one request per
// connection) cannot do.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::address_v4::loopback(), port));
  }
  bhttp::response<bhttp::string_body> Get(const std::string& target) {
    bhttp::request<bhttp::empty_body> request{bhttp::verb::get, target, 11};
    request.set(bhttp::field::host, "test");
    bhttp::write(socket_, request);
    bhttp::response<bhttp::string_body> response;
    bhttp::read(socket_, buffer_, response);
    return response;
  }
  tcp::socket& socket() { return socket_; }
  boost::beast::flat_buffer& buffer() { return buffer_; }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

TEST(HttpServerTest, RoutesRequestsToTheHandler) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "POST", "/api/v1/jobs", R"({"name":"x"})");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["content-type"], "application/json");
  EXPECT_EQ(response->headers["x-drover-test"], "yes");
  auto echoed = nlohmann::json::parse(response->body);
  EXPECT_EQ(echoed["method"], "POST");
  EXPECT_EQ(echoed["path"], "/api/v1/jobs");
  EXPECT_EQ(echoed["body"], R"({"name":"x"})");
  // Header names arrive lower-case whatever the client sent.
  EXPECT_EQ(echoed["headers"]["content-type"], "application/json");
  EXPECT_EQ(echoed["headers"]["user-agent"], "drover-http-client");
}

TEST(HttpServerTest, DecodesTheQueryString) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/api/v1/jobs?state=running&name=a%20b%2Fc&q=x+y&flag");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  auto echoed = nlohmann::json::parse(response->body);
  EXPECT_EQ(echoed["path"], "/api/v1/jobs");
  EXPECT_EQ(echoed["query"], (nlohmann::json{{"state", "running"}, {"name", "a b/c"}, {"q", "x y"}, {"flag", ""}}));

  auto bad = HttpRequest(Address(*server), "GET", "/api/v1/jobs?name=%zz");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->status, 400);
}

TEST(HttpServerTest, OversizedBodyGets413) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  auto fits = HttpRequest(Address(*server), "POST", "/x", std::string(1024, 'a'));
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->status, 200);

  // Larger than the socket buffers, so the server must read past its answer.
  auto response = HttpRequest(Address(*server), "POST", "/x", std::string(4 << 20, 'a'));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 413);
  auto error = nlohmann::json::parse(response->body);
  EXPECT_EQ(error["status"], "RESOURCE_EXHAUSTED");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("1024"));
}

TEST(HttpServerTest, ErrorResponseCarriesCodeAndName) {
  auto server = StartOrDie([](const Request&) { return ErrorResponse(NotFound("job 'j-000042' not found")); });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/api/v1/jobs/j-000042");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->headers["content-type"], "application/json");
  auto error = nlohmann::json::parse(response->body);
  EXPECT_EQ(error, (nlohmann::json{{"code", 5}, {"status", "NOT_FOUND"}, {"message", "job 'j-000042' not found"}}));
}

TEST(HttpServerTest, ErrorResponseSurvivesInvalidUtf8) {
  Response response = ErrorResponse(InvalidArgument("bad name '\xff'"));
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(nlohmann::json::parse(response.body)["status"], "INVALID_ARGUMENT");
}

TEST(HttpServerTest, StreamsWithChunkedEncoding) {
  auto server = StartOrDie([](const Request&) {
    Response response;
    response.content_type = "text/event-stream";
    response.stream = [](const ChunkWriter& write) {
      for (const char* line : {"data: one\n\n", "", "data: two\n\n", "data: three\n\n"}) {
        if (!write(line)) return;
      }
    };
    return response;
  });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/api/v1/events");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(response->headers["content-type"], "text/event-stream");
  EXPECT_EQ(response->body, "data: one\n\ndata: two\n\ndata: three\n\n");
}

TEST(HttpServerTest, StreamWriterReportsADepartedClient) {
  std::promise<int> writes_before_failure;
  auto server = StartOrDie([&](const Request&) {
    Response response;
    response.stream = [&](const ChunkWriter& write) {
      int writes = 0;
      while (write(std::string(4096, 'x'))) ++writes;
      writes_before_failure.set_value(writes);
    };
    return response;
  });
  ASSERT_NE(server, nullptr);
  {
    RawConnection client(server->port());
    bhttp::request<bhttp::empty_body> request{bhttp::verb::get, "/watch", 11};
    bhttp::write(client.socket(), request);
    bhttp::response_parser<bhttp::string_body> parser;
    bhttp::read_header(client.socket(), client.buffer(), parser);
    EXPECT_EQ(parser.get().result_int(), 200u);
  }  // closes with unread data: the server's next writes fail
  auto result = writes_before_failure.get_future();
  EXPECT_GE(result.get(), 0);  // returns at all: the writer said false
}

TEST(HttpServerTest, HandlerExceptionGives500AndServerLivesOn) {
  auto server = StartOrDie([](const Request& request) -> Response {
    if (request.path == "/boom") throw std::runtime_error("kaboom");
    Response response;
    response.body = "{}";
    return response;
  });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/boom");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 500);
  auto error = nlohmann::json::parse(response->body);
  EXPECT_EQ(error["status"], "INTERNAL");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("kaboom"));

  auto after = HttpRequest(Address(*server), "GET", "/fine");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->status, 200);
}

TEST(HttpServerTest, MalformedRequestGets400) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  RawConnection client(server->port());
  net::write(client.socket(), net::buffer(std::string("THIS IS NOT HTTP\r\n\r\n")));
  bhttp::response<bhttp::string_body> response;
  bhttp::read(client.socket(), client.buffer(), response);
  EXPECT_EQ(response.result_int(), 400u);
  EXPECT_EQ(nlohmann::json::parse(response.body())["status"], "INVALID_ARGUMENT");
}

TEST(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  RawConnection client(server->port());
  for (const char* path : {"/a", "/b", "/c"}) {
    auto response = client.Get(path);
    EXPECT_EQ(response.result_int(), 200u);
    EXPECT_TRUE(response.keep_alive());
    EXPECT_EQ(nlohmann::json::parse(response.body())["path"], path);
  }
}

TEST(HttpServerTest, ConnectionsOverTheLimitGet503) {
  ServerOptions options;
  options.max_connections = 1;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  RawConnection holder(server->port());
  // Once answered, the holder's connection is certainly counted.
  ASSERT_EQ(holder.Get("/hold").result_int(), 200u);
  auto response = HttpRequest(Address(*server), "GET", "/more");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(nlohmann::json::parse(response->body)["status"], "UNAVAILABLE");
  // The connection within the limit still works.
  EXPECT_EQ(holder.Get("/again").result_int(), 200u);
}

// Slow clients from one address hold at most their share of connections:
// past it, that address gets 503 while the server keeps serving.
TEST(HttpServerTest, ConnectionsPerSourceAreCapped) {
  ServerOptions options;
  options.max_connections = 100;
  options.max_connections_per_source = 2;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  RawConnection a(server->port());
  RawConnection b(server->port());
  ASSERT_EQ(a.Get("/a").result_int(), 200u);
  ASSERT_EQ(b.Get("/b").result_int(), 200u);
  auto third = HttpRequest(Address(*server), "GET", "/c");
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(third->status, 503);
  EXPECT_EQ(a.Get("/again").result_int(), 200u);
}

TEST(HttpServerTest, StopClosesOpenConnectionsAndIsIdempotent) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  const std::string address = Address(*server);
  RawConnection client(server->port());
  ASSERT_EQ(client.Get("/").result_int(), 200u);
  // The connection thread now waits for a next request that never comes.
  server->Stop();
  boost::system::error_code ec;
  char byte;
  client.socket().read_some(net::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, net::error::eof);
  server->Stop();
  EXPECT_FALSE(HttpRequest(address, "GET", "/").ok());
  server.reset();  // the destructor stops again
}

TEST(HttpServerTest, ListensOnIpv6Loopback) {
  auto server = StartServer("[::1]:0", Echo);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status().ToString();
  auto response = HttpRequest("[::1]:" + std::to_string((*server)->port()), "GET", "/v6");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(response->body)["path"], "/v6");
}

TEST(HttpServerTest, BadListenAddressesFailCleanly) {
  for (const char* listen : {"nonsense", "256.1.1.1:80", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:http", "::1:80",
                             "[::1:80", "example.com:80"}) {
    auto server = StartServer(listen, Echo);
    ASSERT_FALSE(server.ok()) << listen;
    EXPECT_EQ(server.status().code(), Code::kInvalidArgument) << listen;
    EXPECT_THAT(server.status().message(), HasSubstr(listen));
  }
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  auto foreign = StartServer("192.0.2.1:0", Echo);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), Code::kUnavailable);
  EXPECT_THAT(foreign.status().message(), HasSubstr("192.0.2.1:0"));

  auto first = StartOrDie(Echo);
  ASSERT_NE(first, nullptr);
  auto second = StartServer(Address(*first), Echo);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(Address(*first)));

  EXPECT_EQ(StartServer("127.0.0.1:0", nullptr).status().code(), Code::kInvalidArgument);
}

TEST(HttpClientTest, UnreachableServerIsUnavailable) {
  // Take a free port, then close it: nothing listens there.
  uint16_t port;
  {
    auto server = StartOrDie(Echo);
    ASSERT_NE(server, nullptr);
    port = server->port();
  }
  auto response = HttpRequest("127.0.0.1:" + std::to_string(port), "GET", "/");
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), Code::kUnavailable);
  EXPECT_THAT(response.status().message(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(HttpRequest("no-port", "GET", "/").status().code(), Code::kInvalidArgument);
}

// ---- limits and the handler pool ----

// Bounds a wait on an event, so that a broken server fails the test
// instead of hanging it; not a timing assertion.
constexpr std::chrono::seconds kEventWait{60};

template <typename T>
bool Ready(std::future<T>& f) {
  return f.wait_for(kEventWait) == std::future_status::ready;
}

// Tests open hundreds of sockets; lift the soft descriptor limit to what
// they need (within the hard limit).
void RaiseFdLimit(rlim_t want) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= want) return;
  limit.rlim_cur = std::min(want, limit.rlim_max);
  setrlimit(RLIMIT_NOFILE, &limit);
}

TEST(HttpServerTest, OversizedHeaderGets431) {
  ServerOptions options;
  options.max_header_bytes = 4096;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  RawConnection client(server->port());
  net::write(client.socket(),
             net::buffer("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n"));
  bhttp::response<bhttp::string_body> response;
  bhttp::read(client.socket(), client.buffer(), response);
  EXPECT_EQ(response.result_int(), 431u);
  EXPECT_THAT(nlohmann::json::parse(response.body())["message"].get<std::string>(), HasSubstr("4096"));
  // A header within the limit is served.
  EXPECT_EQ(RawConnection(server->port()).Get("/fine").result_int(), 200u);
}

TEST(HttpServerTest, ExpectContinueGetsAnInterimAnswer) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  RawConnection client(server->port());
  net::write(
      client.socket(),
      net::buffer(std::string("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")));
  bhttp::response<bhttp::empty_body> interim;
  bhttp::read(client.socket(), client.buffer(), interim);
  EXPECT_EQ(interim.result_int(), 100u);
  net::write(client.socket(), net::buffer(std::string("hello")));
  bhttp::response<bhttp::string_body> response;
  bhttp::read(client.socket(), client.buffer(), response);
  EXPECT_EQ(response.result_int(), 200u);
  EXPECT_EQ(nlohmann::json::parse(response.body())["body"], "hello");
}

// With every handler thread busy and no queue, a request is answered 503 at
// once instead of waiting; once a thread is free, requests are served again.
TEST(HttpServerTest, FullHandlerPoolGets503) {
  ServerOptions options;
  options.handler_threads = 1;
  options.max_queued_requests = 0;
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool let_go = false;
  auto let_go_once = [&] {
    if (!std::exchange(let_go, true)) release.set_value();
  };
  auto server = StartOrDie(
      [&](const Request& request) {
        if (request.path == "/block") {
          entered.set_value();
          released.wait();
        }
        return Response{200, "text/plain", "ok", {}, {}};
      },
      options);
  ASSERT_NE(server, nullptr);
  const std::string address = Address(*server);
  auto blocked = std::async(std::launch::async, [&] { return HttpRequest(address, "GET", "/block"); });
  struct Guard {
    std::function<void()> fn;
    ~Guard() { fn(); }
  } guard{let_go_once};  // a failed assertion must not leave the handler waiting (declared last: it runs first)
  auto in_handler = entered.get_future();
  ASSERT_TRUE(Ready(in_handler));
  auto busy = HttpRequest(address, "GET", "/other");
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(nlohmann::json::parse(busy->body)["status"], "UNAVAILABLE");
  let_go_once();
  auto first = blocked.get();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->status, 200);
  // The thread counts as free a moment after its response went out: poll,
  // within a bound, until it takes requests again.
  const auto give_up = std::chrono::steady_clock::now() + kEventWait;
  int status = 0;
  while (status != 200 && std::chrono::steady_clock::now() < give_up) {
    auto after = HttpRequest(address, "GET", "/other");
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    status = after->status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, 200);
}

// A TCP connection from `source` (a 127.0.0.x address) to the server,
// non-blocking; -1 on failure.
int ConnectFrom(const char* source, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// Hundreds of clients that send their header a byte a second (slowloris)
// neither stop a normal request from being served nor stay open past the
// header deadline.
TEST(HttpServerTest, SlowHeaderClientsAreClosedAndOthersServed) {
  constexpr int kAddresses = 8;
  constexpr int kPerAddress = 50;  // within the default per-source limit of 64
  RaiseFdLimit(4096);
  ServerOptions options;
  options.header_timeout_ms = 1500;
  auto server = StartOrDie(
      [](const Request& request) {
        return request.path == "/readyz" ? Response{200, "text/plain", "ok\n", {}, {}}
                                         : ErrorResponse(NotFound("no " + request.path));
      },
      options);
  ASSERT_NE(server, nullptr);
  const std::string header = "GET /slow HTTP/1.1\r\nHost: test\r\nX-Padding: " + std::string(200, 'p') + "\r\n\r\n";
  std::vector<int> open;
  for (int a = 0; a < kAddresses; ++a) {
    const std::string source = "127.0.0." + std::to_string(2 + a);
    for (int i = 0; i < kPerAddress; ++i) {
      int fd = ConnectFrom(source.c_str(), server->port());
      ASSERT_GE(fd, 0) << "cannot connect from " << source << ": " << std::strerror(errno);
      open.push_back(fd);
    }
  }
  size_t sent = 0;
  auto send_next_byte = [&] {
    for (int& fd : open) {
      if (fd >= 0 && ::send(fd, header.data() + sent, 1, MSG_NOSIGNAL) < 0 && errno != EAGAIN) {
        ::close(fd);
        fd = -1;  // the server closed it
      }
    }
    ++sent;
  };
  send_next_byte();

  // While they trickle, a normal client is served.
  auto ready = HttpRequest(Address(*server), "GET", "/readyz");
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  EXPECT_EQ(ready->status, 200);

  // Then every slow connection ends at the server's hand (EOF or reset),
  // although each keeps sending a byte a second, far from a whole header.
  const auto give_up = std::chrono::steady_clock::now() + kEventWait;
  auto next_byte = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  size_t still_open = open.size();
  while (still_open > 0 && std::chrono::steady_clock::now() < give_up && sent < header.size() - 1) {
    std::vector<pollfd> fds;
    for (int fd : open) {
      if (fd >= 0) fds.push_back(pollfd{fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 200);
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      char scratch[256];
      ssize_t n = ::recv(p.fd, scratch, sizeof scratch, 0);
      if (n > 0 || (n < 0 && errno == EAGAIN)) continue;
      for (int& fd : open) {
        if (fd == p.fd) {
          ::close(fd);
          fd = -1;
        }
      }
    }
    if (std::chrono::steady_clock::now() >= next_byte) {
      send_next_byte();
      next_byte += std::chrono::seconds(1);
    }
    still_open = static_cast<size_t>(std::count_if(open.begin(), open.end(), [](int fd) { return fd >= 0; }));
  }
  EXPECT_EQ(still_open, 0u) << "slow clients still open after " << sent << " bytes each";
  for (int fd : open) {
    if (fd >= 0) ::close(fd);
  }
  // And the server serves on.
  auto after = HttpRequest(Address(*server), "GET", "/readyz");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->status, 200);
}

// ---- async streams ----

// Joins a test's producer thread when the test returns, after the server
// declared below it has stopped (which ends the stream the thread writes
// to), also when an assertion returns early: a joinable thread's destructor
// would abort the whole test binary instead of failing the one test.
struct JoinOnExit {
  std::thread* thread;
  ~JoinOnExit() {
    if (thread->joinable()) thread->join();
  }
};

TEST(HttpServerTest, AsyncStreamDeliversChunksFromAnotherThreadInOrder) {
  std::thread producer;
  JoinOnExit join{&producer};
  auto server = StartOrDie([&](const Request&) {
    Response response;
    response.content_type = "text/event-stream";
    response.async_stream = [&](std::shared_ptr<StreamSink> sink) {
      producer = std::thread([sink] {
        for (int i = 0; i < 1000; ++i) {
          if (!sink->Write("data: " + std::to_string(i) + "\n\n")) return;
        }
        sink->Close();
      });
    };
    return response;
  });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/api/v1/events");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  std::string expected;
  for (int i = 0; i < 1000; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(response->headers["content-type"], "text/event-stream");
  EXPECT_EQ(response->body, expected);
}

// A stream handed to the test: the sink, and a future that is ready once
// OnClosed ran.
struct HeldStream {
  std::promise<std::shared_ptr<StreamSink>> sink;
  std::promise<void> closed;
};

Handler HoldingHandler(HeldStream* held) {
  return [held](const Request&) {
    Response response;
    response.content_type = "text/event-stream";
    response.async_stream = [held](std::shared_ptr<StreamSink> sink) {
      sink->OnClosed([held] { held->closed.set_value(); });
      held->sink.set_value(std::move(sink));
    };
    return response;
  };
}

// Opens a stream and reads its header.
void OpenStream(RawConnection& client, const std::string& target) {
  bhttp::request<bhttp::empty_body> request{bhttp::verb::get, target, 11};
  request.set(bhttp::field::host, "test");
  bhttp::write(client.socket(), request);
  bhttp::response_parser<bhttp::string_body> parser;
  bhttp::read_header(client.socket(), client.buffer(), parser);
  EXPECT_EQ(parser.get().result_int(), 200u);
}

TEST(HttpServerTest, AsyncStreamNoticesADepartedClient) {
  HeldStream held;
  auto server = StartOrDie(HoldingHandler(&held));
  ASSERT_NE(server, nullptr);
  auto sink_future = held.sink.get_future();
  auto closed = held.closed.get_future();
  {
    RawConnection client(server->port());
    OpenStream(client, "/watch");
    ASSERT_TRUE(Ready(sink_future));
  }  // the client leaves without the producer writing anything
  ASSERT_TRUE(Ready(closed));
  std::shared_ptr<StreamSink> sink = sink_future.get();
  EXPECT_FALSE(sink->Write("data: late\n\n"));
}

// A client that never reads: the stream is closed at the buffer bound
// instead of queueing without end, and other requests are served meanwhile.
TEST(HttpServerTest, AsyncStreamToASlowReaderIsClosedAtTheBufferBound) {
  ServerOptions options;
  options.max_stream_buffer_bytes = 1 << 20;
  std::thread producer;
  std::promise<int> accepted_chunks;
  std::promise<void> closed;
  JoinOnExit join{&producer};  // before the promises the producer sets go
  auto server = StartOrDie(
      [&](const Request& request) {
        if (request.path != "/flood") return Response{200, "text/plain", "ok\n", {}, {}};
        Response response;
        response.async_stream = [&](std::shared_ptr<StreamSink> sink) {
          sink->OnClosed([&] { closed.set_value(); });
          producer = std::thread([sink, &accepted_chunks] {
            const std::string chunk(64 << 10, 'x');
            int n = 0;
            while (n < 1'000'000 && sink->Write(chunk)) ++n;  // ~64 GiB: never reached
            accepted_chunks.set_value(n);
          });
        };
        return response;
      },
      options);
  ASSERT_NE(server, nullptr);
  RawConnection reader(server->port());
  bhttp::request<bhttp::empty_body> request{bhttp::verb::get, "/flood", 11};
  request.set(bhttp::field::host, "test");
  bhttp::write(reader.socket(), request);  // and never read
  auto accepted = accepted_chunks.get_future();
  ASSERT_TRUE(Ready(accepted));
  EXPECT_LT(accepted.get(), 1'000'000);
  auto closed_future = closed.get_future();
  EXPECT_TRUE(Ready(closed_future));
  auto other = HttpRequest(Address(*server), "GET", "/readyz");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->status, 200);
}

TEST(HttpServerTest, StopEndsOpenAsyncStreams) {
  HeldStream held;
  auto server = StartOrDie(HoldingHandler(&held));
  ASSERT_NE(server, nullptr);
  auto sink_future = held.sink.get_future();
  auto closed = held.closed.get_future();
  RawConnection client(server->port());
  OpenStream(client, "/watch");
  ASSERT_TRUE(Ready(sink_future));
  std::shared_ptr<StreamSink> sink = sink_future.get();
  EXPECT_TRUE(sink->Write("data: before\n\n"));
  server->Stop();  // returns although the stream never closed
  EXPECT_EQ(closed.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_FALSE(sink->Write("data: after\n\n"));
  server.reset();
  // The sink outlives the server: still safe to use.
  EXPECT_FALSE(sink->Write("data: later\n\n"));
  sink->Close();
}

// ---- TLS ----

namespace tls_test {

using http::testing::Cert;
using http::testing::MakeSelfSigned;

ServerOptions TlsOptions() {
  ServerOptions o;
  o.tls_cert_pem = Cert().cert_pem;
  o.tls_key_pem = Cert().key_pem;
  return o;
}

TEST(HttpsServerTest, ServesOverTlsAndSaysSo) {
  auto server = StartOrDie(
      [](const Request& req) {
        return Response{200, "text/plain", req.tls ? "tls" : "plain", {}, {}};
      },
      TlsOptions());
  ASSERT_NE(server, nullptr);
  ClientTls tls{Cert().cert_pem, "", "", ""};
  for (int i = 0; i < 3; ++i) {
    auto r = HttpsRequest(&tls, Address(*server), "GET", "/");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "tls");
  }
  // By name too (the certificate names localhost).
  ClientTls by_name{Cert().cert_pem, "localhost", "", ""};
  EXPECT_TRUE(HttpsRequest(&by_name, Address(*server), "GET", "/").ok());
  // A name the certificate does not carry is refused by the client.
  ClientTls wrong{Cert().cert_pem, "other.example", "", ""};
  EXPECT_EQ(HttpsRequest(&wrong, Address(*server), "GET", "/").status().code(), Code::kUnavailable);
}

TEST(HttpsServerTest, StreamsOverTls) {
  auto server = StartOrDie(
      [](const Request&) {
        Response response;
        response.content_type = "text/event-stream";
        response.stream = [](const ChunkWriter& write) {
          std::string big(100000, 'x');
          for (const std::string& part : {std::string("data: one\n\n"), big, std::string("data: two\n\n")}) {
            if (!write(part)) return;
          }
        };
        return response;
      },
      TlsOptions());
  ASSERT_NE(server, nullptr);
  ClientTls tls{Cert().cert_pem, "", "", ""};
  auto r = HttpsRequest(&tls, Address(*server), "GET", "/events");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(r->body, "data: one\n\n" + std::string(100000, 'x') + "data: two\n\n");
}

TEST(HttpsServerTest, PlaintextClientGetsNoAnswer) {
  auto server = StartOrDie(Echo, TlsOptions());
  ASSERT_NE(server, nullptr);
  auto r = HttpRequest(Address(*server), "GET", "/");
  EXPECT_FALSE(r.ok() && r->status == 200);
  // And the server lives on.
  ClientTls tls{Cert().cert_pem, "", "", ""};
  EXPECT_TRUE(HttpsRequest(&tls, Address(*server), "GET", "/").ok());
}

TEST(HttpsServerTest, ClientThatNeverHandshakesDoesNotHoldUpStop) {
  auto server = StartOrDie(Echo, TlsOptions());
  ASSERT_NE(server, nullptr);
  RawConnection silent(server->port());  // connected, says nothing
  server->Stop();
  boost::system::error_code ec;
  char byte;
  silent.socket().read_some(net::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset) << ec.message();
}

TEST(HttpsServerTest, UnusableCertificateOrKeyIsRefused) {
  ServerOptions o = TlsOptions();
  o.tls_key_pem = "not a key";
  EXPECT_EQ(StartServer("127.0.0.1:0", Echo, o).status().code(), Code::kInvalidArgument);
  o = TlsOptions();
  o.tls_cert_pem = "";
  EXPECT_EQ(StartServer("127.0.0.1:0", Echo, o).status().code(), Code::kInvalidArgument);
  o = TlsOptions();
  o.tls_key_pem = MakeSelfSigned().key_pem;  // another key
  auto mismatched = StartServer("127.0.0.1:0", Echo, o);
  EXPECT_EQ(mismatched.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("private key"));
}

}  // namespace tls_test
}  // namespace
}  // namespace drover::http
