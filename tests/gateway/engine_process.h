#pragma once
// Test and bench support for the gateway: runs drover-test-engine (or any
// program that prints "listening on PORT") as a child process, and a small
// blocking HTTP/1.1 client over loopback. Header-only.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <cstdlib>
#include <thread>
#include <vector>

namespace drover::gateway::testing {

// A child process started with argv; its stdout's "listening on N" gives
// port(). Killed (SIGKILL) and reaped by the destructor.
class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> argv) {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::close(out[1]);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // Read the first line (blocking: the child prints it once listening).
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    out_fd_ = out[0];
    if (line.rfind("listening on ", 0) == 0) port_ = std::stoi(line.substr(13));
  }
  ~ChildProcess() { Kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  // Reaps the child if it exited; true once it has.
  bool Exited() {
    if (pid_ <= 0) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      return true;
    }
    return false;
  }
  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (out_fd_ >= 0) {
      ::close(out_fd_);
      out_fd_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
};

// A blocking loopback TCP connection.
class Conn {
 public:
  explicit Conn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Conn() { Close(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Appends what arrives to *buf until pred(*buf) holds, EOF, or timeout.
  bool ReadUntil(std::string* buf, const std::function<bool(const std::string&)>& pred,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred(*buf)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char tmp[16384];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return pred(*buf);
      buf->append(tmp, static_cast<size_t>(n));
    }
    return true;
  }

 private:
  int fd_ = -1;
};

struct HttpResponse {
  int status = 0;
  std::string headers;  // raw, lower-cased names not guaranteed
  std::string body;     // de-chunked
  std::string raw;
};

// The value of header `name` (case-insensitive), "" if absent.
inline std::string Header(const HttpResponse& r, std::string_view name) {
  std::string lower_h;
  for (char c : r.headers) lower_h += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string key = "\r\n";
  for (char c : name) key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  key += ":";
  size_t at = lower_h.find(key);
  if (at == std::string::npos) return "";
  size_t v = at + key.size();
  size_t end = r.headers.find("\r\n", v);
  std::string out = r.headers.substr(v, end - v);
  while (!out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

// Whether `raw` holds a whole response (Content-Length or chunked).
inline bool Complete(const std::string& raw, HttpResponse* out) {
  size_t he = raw.find("\r\n\r\n");
  if (he == std::string::npos) return false;
  HttpResponse r;
  r.headers = raw.substr(0, he + 2);
  r.status = std::atoi(raw.c_str() + 9);
  std::string rest = raw.substr(he + 4);
  std::string te = Header(r, "transfer-encoding");
  if (te.find("chunked") != std::string::npos) {
    size_t pos = 0;
    for (;;) {
      size_t le = rest.find("\r\n", pos);
      if (le == std::string::npos) return false;
      size_t n = std::stoul(rest.substr(pos, le - pos), nullptr, 16);
      if (rest.size() < le + 2 + n + 2) return false;
      if (n == 0) break;
      r.body += rest.substr(le + 2, n);
      pos = le + 2 + n + 2;
    }
  } else {
    std::string cl = Header(r, "content-length");
    size_t n = cl.empty() ? 0 : std::stoul(cl);
    if (rest.size() < n) return false;
    r.body = rest.substr(0, n);
  }
  r.raw = raw;
  if (out) *out = std::move(r);
  return true;
}

inline std::string Request(std::string_view method, std::string_view target, std::string_view body,
                           std::string_view extra_headers = {}) {
  std::string req = std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n";
  req += extra_headers;
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  return req;
}

// One request on a new connection; status 0 if no whole answer came.
inline HttpResponse Http(int port, std::string_view method, std::string_view target, std::string_view body = {},
                         std::string_view extra_headers = {}) {
  Conn c(port);
  HttpResponse r;
  if (!c.ok() || !c.Send(Request(method, target, body, extra_headers))) return r;
  std::string raw;
  c.ReadUntil(&raw, [&](const std::string& b) { return Complete(b, &r); });
  return r;
}

// Polls pred until it holds or timeout; the condition, not a fixed delay.
// A loopback port free a moment ago (nothing listens on it: connects are
// refused until someone binds it).
inline int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The sum of the samples of the Prometheus text lines that start with
// `prefix` (a name, with "{" or " " after it to match it alone).
inline double SumSamples(const std::string& text, const std::string& prefix) {
  double sum = 0;
  for (size_t pos = text.find(prefix); pos != std::string::npos; pos = text.find(prefix, pos + 1)) {
    if (pos != 0 && text[pos - 1] != '\n') continue;
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    sum += std::atof(line.c_str() + line.rfind(' ') + 1);
  }
  return sum;
}

}  // namespace drover::gateway::testing
