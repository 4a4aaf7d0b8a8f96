// hop_proxy: the least an HTTP/1.1 proxy can add on this machine, the
// "floor" contender of gateway_bench (issue 18).
//
//   hop_proxy --upstream-port N [--port 0]
//
// Prints "listening on PORT" once it accepts connections.
//
// One thread, level-triggered epoll, non-blocking sockets, TCP_NODELAY on
// both sides. Each accepted client gets a keep-alive connection of its own
// to 127.0.0.1:N, opened at accept and closed with the client. Bytes are
// forwarded as they arrive: one recv on the readable side, one send on the
// other (EPOLLOUT only when a send falls short), so a request/response pair
// costs two recv, two send and the epoll_waits that wake the thread. Each
// direction is framed only as far as finding message ends needs (the end
// of the header, Content-Length), the least a proxy must know to hand an
// upstream connection to another request; a message it cannot frame
// (chunked, or an answer without Content-Length) closes the pair. No
// allocation per request: a pair's two buffers are allocated at accept.
//
// What it does not do: parse anything else, route, pool upstream
// connections across clients, stream, time out, TLS. A measuring stick,
// not a proxy to deploy. Not thread-safe: everything is on main's thread.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

constexpr size_t kBuf = 64 * 1024;

// One direction's message framing, fed every byte forwarded.
// Invariants: body_left > 0 only outside a header; line holds the first
// bytes of the header line being read (line_len counts all of them).
struct Framer {
  bool response = false;
  bool in_header = true;
  uint64_t body_left = 0;
  int64_t content_length = -1;  // -1: none in this header
  char line[40] = {};
  size_t line_len = 0;

  // False on a message it cannot frame.
  bool Feed(const char* p, size_t n) {
    while (n > 0) {
      if (!in_header) {
        size_t k = body_left < n ? static_cast<size_t>(body_left) : n;
        body_left -= k, p += k, n -= k;
        if (body_left == 0) in_header = true;
        continue;
      }
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', n));
      size_t k = nl ? static_cast<size_t>(nl - p) : n;
      if (line_len < sizeof line - 1) std::memcpy(line + line_len, p, std::min(k, sizeof line - 1 - line_len));
      line_len += k;
      p += k, n -= k;
      if (!nl) break;
      ++p, --n;  // the '\n'
      if (!EndOfLine()) return false;
    }
    return true;
  }

 private:
  // A header line ended (`line` holds its first bytes); false if the
  // message cannot be framed.
  bool EndOfLine() {
    size_t len = line_len;
    line[std::min(len, sizeof line - 1)] = '\0';
    line_len = 0;
    if (len == 0 || (len == 1 && line[0] == '\r')) {  // the header's end
      if (response && content_length < 0) return false;
      body_left = static_cast<uint64_t>(std::max<int64_t>(0, content_length));
      in_header = body_left == 0;
      content_length = -1;
      return true;
    }
    if (strncasecmp(line, "content-length:", 15) == 0) {
      content_length = std::strtoll(line + 15, nullptr, 10);
    } else if (strncasecmp(line, "transfer-encoding:", 18) == 0) {
      return false;
    }
    return true;
  }
};

// A client connection and its upstream connection; side 0 is the client.
// buf[s] holds bytes read from fd[s] not yet all sent to fd[1 - s].
struct Pair {
  int fd[2] = {-1, -1};
  std::unique_ptr<char[]> buf[2];
  size_t off[2] = {0, 0}, len[2] = {0, 0};
  Framer framer[2];
  bool dead = false;
};

int g_ep = -1;

void* Tag(Pair* p, int side) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(side));
}

// Reads fd[s] unless its bytes still wait to be sent; writes when bytes wait for it.
void Watch(Pair* p, int s, int op) {
  epoll_event ev{};
  ev.events = (p->len[s] == 0 ? EPOLLIN : 0u) | (p->len[1 - s] != 0 ? EPOLLOUT : 0u);
  ev.data.ptr = Tag(p, s);
  epoll_ctl(g_ep, op, p->fd[s], &ev);
}

// Closes both sides; the pair is freed after the current batch of events.
std::vector<Pair*> g_dead;
void Kill(Pair* p) {
  for (int fd : p->fd) ::close(fd);  // also leaves the epoll set
  p->dead = true;
  g_dead.push_back(p);
}

// Sends what buf[s] holds to fd[1 - s]; false if the pair is gone.
// `waiting`: an earlier send fell short (fd[s] unread, EPOLLOUT on fd[1 - s]).
bool Flush(Pair* p, int s, bool waiting) {
  ssize_t w = ::send(p->fd[1 - s], p->buf[s].get() + p->off[s], p->len[s] - p->off[s], MSG_NOSIGNAL);
  if (w < 0 && errno != EAGAIN) return false;
  if (w > 0) p->off[s] += static_cast<size_t>(w);
  bool done = p->off[s] == p->len[s];
  if (done) p->off[s] = p->len[s] = 0;
  if (done == waiting) {  // a short send starts a wait, a full one ends it
    Watch(p, s, EPOLL_CTL_MOD);
    Watch(p, 1 - s, EPOLL_CTL_MOD);
  }
  return true;
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void Accept(int listener, int upstream_port) {
  int c = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (c < 0) return;
  int u = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = Loopback(upstream_port);
  // Blocking connect (loopback, once per client), then non-blocking.
  if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::fprintf(stderr, "hop_proxy: cannot connect to upstream port %d: %s\n", upstream_port, std::strerror(errno));
    ::close(u);
    ::close(c);
    return;
  }
  ::fcntl(u, F_SETFL, ::fcntl(u, F_GETFL) | O_NONBLOCK);
  NoDelay(c);
  NoDelay(u);
  auto* p = new Pair;
  p->fd[0] = c;
  p->fd[1] = u;
  p->framer[1].response = true;
  for (auto& b : p->buf) b.reset(new char[kBuf]);
  Watch(p, 0, EPOLL_CTL_ADD);
  Watch(p, 1, EPOLL_CTL_ADD);
}

// An event on fd[s]; false if the pair is to be closed.
bool OnEvent(Pair* p, int s, uint32_t events) {
  if (events & (EPOLLERR | EPOLLHUP)) return false;
  // Room on fd[s]: send what the other side read.
  if ((events & EPOLLOUT) && p->len[1 - s] != 0 && !Flush(p, 1 - s, true)) return false;
  if (!(events & EPOLLIN) || p->len[s] != 0) return true;
  ssize_t r = ::recv(p->fd[s], p->buf[s].get(), kBuf, 0);
  if (r < 0 && errno == EAGAIN) return true;
  if (r <= 0) return false;
  if (!p->framer[s].Feed(p->buf[s].get(), static_cast<size_t>(r))) {
    std::fprintf(stderr, "hop_proxy: a %s it cannot frame (chunked or without Content-Length); closing\n",
                 s ? "response" : "request");
    return false;
  }
  p->len[s] = static_cast<size_t>(r);
  return Flush(p, s, false);
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, upstream_port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--port") == 0)
      port = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--upstream-port") == 0)
      upstream_port = std::atoi(argv[i + 1]);
  }
  if (upstream_port <= 0) {
    std::fprintf(stderr, "usage: hop_proxy --upstream-port N [--port 0]\n");
    return 2;
  }
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = Loopback(port);
  socklen_t alen = sizeof a;
  if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1024) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    std::fprintf(stderr, "hop_proxy: cannot listen on port %d: %s\n", port, std::strerror(errno));
    return 1;
  }
  g_ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event lev{};  // data.ptr nullptr: the listener
  lev.events = EPOLLIN;
  epoll_ctl(g_ep, EPOLL_CTL_ADD, l, &lev);
  std::printf("listening on %d\n", ntohs(a.sin_port));
  std::fflush(stdout);

  epoll_event events[256];
  for (;;) {
    int n = ::epoll_wait(g_ep, events, 256, -1);
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        Accept(l, upstream_port);
        continue;
      }
      auto tag = reinterpret_cast<uintptr_t>(events[i].data.ptr);
      auto* p = reinterpret_cast<Pair*>(tag & ~uintptr_t{1});
      int s = static_cast<int>(tag & 1);
      if (!p->dead && !OnEvent(p, s, events[i].events)) Kill(p);  // dead: killed earlier in this batch
    }
    for (Pair* p : g_dead) delete p;
    g_dead.clear();
  }
}
