// The HTTP server under connection load: request latency (p50/p99) of a
// simple GET with no load, then with many idle keep-alive connections and
// many server-sent-event streams open, and the server's memory (VmRSS) and
// thread count in each phase.
//
//   ./build/bench/http_bench                       # an in-process server
//   ./build/bench/http_bench --idle 10000 --sse 1000 --requests 2000
//   ./build/bench/http_bench --target 127.0.0.1:8080 --token-file F --pid PID
//       # the same load against a running `drover up` (plaintext HTTP):
//       # SSE on /api/v1/events with "Authorization: Bearer <token>"
//
// The load comes from a child process (its own descriptor table: 11,000
// client sockets and 11,000 server sockets do not fit one process's limit),
// spread over source addresses 127.0.0.2 and up so that the server's
// per-source limit (64) does not apply. The in-process server has default
// options; its SSE handler uses Response::async_stream and a ticker thread
// writes an event to every stream each second.
//
// Not a Google Benchmark program: the point is a server under a standing
// load, measured from outside.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <utility>  // before Asio: its awaitable.hpp uses std::exchange

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "drover/http/server.h"

namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

struct Options {
  int idle = 10000;
  int sse = 1000;
  int requests = 2000;
  int per_source = 60;  // connections from one source address
  std::string target;   // host:port; empty: in-process server
  std::string token;
  std::string path = "/readyz";
  std::string sse_path = "/api/v1/events";
  int pid = 0;
};

// "VmRSS 123 MiB, 10 threads" of a process, from /proc/<pid>/status.
std::string ProcessFigures(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  long rss_kib = -1;
  long threads = -1;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss_kib = std::strtol(line.c_str() + 6, nullptr, 10);
    if (line.rfind("Threads:", 0) == 0) threads = std::strtol(line.c_str() + 8, nullptr, 10);
  }
  char out[128];
  std::snprintf(out, sizeof out, "rss %7.1f MiB  threads %4ld", static_cast<double>(rss_kib) / 1024.0, threads);
  return out;
}

void RaiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

std::pair<std::string, uint16_t> SplitTarget(const std::string& target) {
  size_t colon = target.rfind(':');
  if (colon == std::string::npos) return {target, 0};
  return {target.substr(0, colon), static_cast<uint16_t>(std::atoi(target.c_str() + colon + 1))};
}

// A non-blocking connection from `source`; -1 on failure.
int ConnectFrom(const std::string& source, const std::string& host, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(port);
  inet_pton(AF_INET, host.c_str(), &remote.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// The standing load: connections that each sent one request and read what
// comes back (a response for the idle ones, an endless body for streams).
class Load {
 public:
  struct Conn {
    int fd = -1;
    bool stream = false;
    int status = 0;  // of the first response; -1: closed before one
    bool closed = false;
    uint64_t bytes = 0;
  };

  explicit Load(const Options& o) : o_(o), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {}
  ~Load() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    for (Conn& c : conns_) {
      if (c.fd >= 0) ::close(c.fd);
    }
    ::close(epoll_);
  }

  // Opens every connection and sends its request; false if one could not.
  bool Open(const std::string& host, uint16_t port) {
    conns_.resize(static_cast<size_t>(o_.idle + o_.sse));
    std::string auth = o_.token.empty() ? "" : "Authorization: Bearer " + o_.token + "\r\n";
    // The server's own address as Host: a real server refuses other names
    // (DNS rebinding) on its authenticated paths.
    const std::string host_header = "Host: " + host + ":" + std::to_string(port) + "\r\n";
    const std::string idle_request = "GET " + o_.path + " HTTP/1.1\r\n" + host_header + auth + "\r\n";
    const std::string sse_request =
        "GET " + o_.sse_path + " HTTP/1.1\r\n" + host_header + "Accept: text/event-stream\r\n" + auth + "\r\n";
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      c.stream = static_cast<int>(i) >= o_.idle;
      const size_t address = 2 + i / static_cast<size_t>(o_.per_source);  // 127.0.0.2 ...
      const std::string source = "127." + std::to_string(address / 65536 % 256) + "." +
                                 std::to_string(address / 256 % 256) + "." + std::to_string(address % 256);
      c.fd = ConnectFrom(source, host, port);
      if (c.fd < 0) {
        std::fprintf(stderr, "connection %zu from %s failed: %s\n", i, source.c_str(), std::strerror(errno));
        return false;
      }
      const std::string& request = c.stream ? sse_request : idle_request;
      if (::send(c.fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
        std::fprintf(stderr, "connection %zu: cannot send: %s\n", i, std::strerror(errno));
        return false;
      }
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &ev);
      if (i == 0) reader_ = std::thread([this] { Read(); });
    }
    return true;
  }

  // Waits until every connection has its first answer (or closed).
  void AwaitAnswers(std::chrono::seconds limit) {
    const auto deadline = SteadyClock::now() + limit;
    while (SteadyClock::now() < deadline && answered_.load() < conns_.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // "10000 idle (10000 ok), 1000 sse (1000 ok, 12 MiB read), 0 closed"
  std::string Summary() {
    std::lock_guard<std::mutex> lock(mu_);
    int idle_ok = 0, sse_ok = 0, other = 0, closed = 0;
    uint64_t sse_bytes = 0;
    for (const Conn& c : conns_) {
      if (c.status == 200)
        ++(c.stream ? sse_ok : idle_ok);
      else if (c.status != 0)
        ++other;
      if (c.closed) ++closed;
      if (c.stream) sse_bytes += c.bytes;
    }
    std::ostringstream out;
    out << o_.idle << " idle (" << idle_ok << " answered 200), " << o_.sse << " sse (" << sse_ok << " answered 200, "
        << sse_bytes / 1024 << " KiB read), " << other << " other answers, " << closed << " closed by the server";
    return out.str();
  }

 private:
  void Read() {
    std::vector<epoll_event> events(256);
    char scratch[16 << 10];
    while (!stop_) {
      int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
      for (int e = 0; e < n; ++e) {
        std::lock_guard<std::mutex> lock(mu_);
        Conn& c = conns_[events[static_cast<size_t>(e)].data.u64];
        for (;;) {
          ssize_t got = ::recv(c.fd, scratch, sizeof scratch, 0);
          if (got > 0) {
            if (c.bytes == 0 && got >= 12) {
              c.status = std::atoi(scratch + 9);
              ++answered_;
            }
            c.bytes += static_cast<uint64_t>(got);
            continue;
          }
          if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          if (!c.closed) {
            c.closed = true;
            if (c.status == 0) {
              c.status = -1;
              ++answered_;
            }
            ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
          }
          break;
        }
      }
    }
  }

  const Options& o_;
  int epoll_;
  std::mutex mu_;
  std::vector<Conn> conns_;  // sized before the reader starts; entries guarded by mu_
  std::atomic<size_t> answered_{0};
  std::atomic<bool> stop_{false};
  std::thread reader_;
};

struct Latency {
  double p50_us = 0, p99_us = 0, max_us = 0;
  int failures = 0;
};

// Sequential GETs on one keep-alive connection from 127.0.0.1.
Latency Measure(const Options& o, const std::string& host, uint16_t port) {
  Latency out;
  net::io_context ioc;
  tcp::socket socket(ioc);
  boost::system::error_code ec;
  socket.connect(tcp::endpoint(net::ip::make_address(host), port), ec);
  if (ec) {
    out.failures = o.requests;
    return out;
  }
  socket.set_option(tcp::no_delay(true));
  boost::beast::flat_buffer buffer;
  std::vector<double> samples;
  for (int i = 0; i < o.requests + 20; ++i) {
    bhttp::request<bhttp::empty_body> request{bhttp::verb::get, o.path, 11};
    request.set(bhttp::field::host, host + ":" + std::to_string(port));
    if (!o.token.empty()) request.set(bhttp::field::authorization, "Bearer " + o.token);
    bhttp::response<bhttp::string_body> response;
    auto start = SteadyClock::now();
    bhttp::write(socket, request, ec);
    if (!ec) bhttp::read(socket, buffer, response, ec);
    auto end = SteadyClock::now();
    if (ec || response.result_int() != 200) {
      ++out.failures;
      if (ec) break;
      continue;
    }
    if (i >= 20) samples.push_back(std::chrono::duration<double, std::micro>(end - start).count());  // after warm-up
  }
  if (samples.empty()) return out;
  std::sort(samples.begin(), samples.end());
  out.p50_us = samples[samples.size() / 2];
  out.p99_us = samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
  out.max_us = samples.back();
  return out;
}

void Report(const char* phase, const Latency& l, int pid) {
  std::printf("%-8s GET p50 %8.1f us  p99 %8.1f us  max %9.1f us  failures %d   server %s\n", phase, l.p50_us, l.p99_us,
              l.max_us, l.failures, ProcessFigures(pid).c_str());
  std::fflush(stdout);
}

// The measuring side: against o.target, reporting o.pid.
int RunLoad(const Options& o) {
  RaiseFdLimit();
  auto [host, port] = SplitTarget(o.target);
  if (port == 0) {
    std::fprintf(stderr, "--target must be HOST:PORT (an IPv4 address), got '%s'\n", o.target.c_str());
    return 2;
  }
  std::printf("target %s, pid %d, GET %s, %d requests per phase\n", o.target.c_str(), o.pid, o.path.c_str(),
              o.requests);
  Report("no-load", Measure(o, host, port), o.pid);
  Load load(o);
  auto start = SteadyClock::now();
  if (!load.Open(host, port)) return 1;
  load.AwaitAnswers(std::chrono::seconds(120));
  std::printf("opened in %.1f s: %s\n", std::chrono::duration<double>(SteadyClock::now() - start).count(),
              load.Summary().c_str());
  Report("loaded", Measure(o, host, port), o.pid);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the streams keep flowing meanwhile
  std::printf("after:   %s\n", load.Summary().c_str());
  return 0;
}

// The in-process server: /readyz and an async SSE stream with a ticker.
int RunInProcess(Options o, const char* self) {
  RaiseFdLimit();
  std::mutex mu;
  std::vector<std::shared_ptr<drover::http::StreamSink>> streams;
  const std::string sse_path = o.sse_path;
  auto server = drover::http::StartServer("127.0.0.1:0", [&](const drover::http::Request& request) {
    if (request.path == sse_path) {
      drover::http::Response response{200, "text/event-stream", {}, {{"Cache-Control", "no-cache"}}, {}};
      response.async_stream = [&](std::shared_ptr<drover::http::StreamSink> sink) {
        sink->Write(": hello\n\n");
        std::lock_guard<std::mutex> lock(mu);
        streams.push_back(std::move(sink));
      };
      return response;
    }
    return drover::http::Response{200, "text/plain", "ok\n", {}, {}};
  });
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::atomic<bool> done{false};
  std::thread ticker([&] {
    while (!done) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::lock_guard<std::mutex> lock(mu);
      std::erase_if(streams, [](const auto& sink) { return !sink->Write("data: tick\n\n"); });
    }
  });
  std::printf("in-process server (default ServerOptions), %s\n", ProcessFigures(getpid()).c_str());
  std::fflush(stdout);
  const std::string target = "127.0.0.1:" + std::to_string((*server)->port());
  pid_t child = fork();
  if (child == 0) {
    std::vector<std::string> args = {self,
                                     "--target",
                                     target,
                                     "--pid",
                                     std::to_string(getppid()),
                                     "--idle",
                                     std::to_string(o.idle),
                                     "--sse",
                                     std::to_string(o.sse),
                                     "--requests",
                                     std::to_string(o.requests),
                                     "--path",
                                     o.path,
                                     "--sse-path",
                                     o.sse_path};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  done = true;
  ticker.join();
  (*server)->Stop();
  std::printf("stopped; %s\n", ProcessFigures(getpid()).c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string token_file;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--idle")
      o.idle = std::atoi(value().c_str());
    else if (arg == "--sse")
      o.sse = std::atoi(value().c_str());
    else if (arg == "--requests")
      o.requests = std::atoi(value().c_str());
    else if (arg == "--per-source")
      o.per_source = std::max(1, std::atoi(value().c_str()));
    else if (arg == "--target")
      o.target = value();
    else if (arg == "--token-file")
      token_file = value();
    else if (arg == "--pid")
      o.pid = std::atoi(value().c_str());
    else if (arg == "--path")
      o.path = value();
    else if (arg == "--sse-path")
      o.sse_path = value();
    else {
      std::fprintf(stderr,
                   "usage: %s [--idle N] [--sse N] [--requests N] [--path P] [--sse-path P] [--per-source N]\n"
                   "          [--target HOST:PORT [--token-file F] [--pid PID]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    std::getline(in, o.token);
    while (!o.token.empty() && std::isspace(static_cast<unsigned char>(o.token.back()))) o.token.pop_back();
  }
  if (!o.target.empty()) {
    if (o.pid == 0) o.pid = getpid();
    return RunLoad(o);
  }
  return RunInProcess(o, argv[0]);
}
