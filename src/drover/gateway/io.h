#pragma once
// The asynchronous plumbing of the gateway (private): io threads, client
// sinks and upstream connections, shared by gateway.cc and batching.cc.

#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>  // before asio: its awaitable.hpp uses std::exchange
#include <vector>

// GCC 12 misreads Asio's recycling allocator of coroutine frames (its
// operator new and delete are a matching pair): a false positive.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "drover/gateway/gateway.h"
#include "drover/gateway/openai.h"
#include "drover/gateway/routing.h"

namespace drover::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using net::awaitable;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Beast 1.74 speaks boost::string_view.
inline std::string_view SV(beast::string_view s) { return {s.data(), s.size()}; }
inline auto Await(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

// A socket whose deadline the io thread's sweeper enforces: past it the
// sweeper closes the socket, and the pending operation fails. Cheaper than
// a timer per operation (Beast's tcp_stream arms and cancels one each
// time); the price is the sweep period's slack (kSweepPeriodMs).
// Registered with its worker for its whole life. Not thread-safe: used on
// its worker's thread only.
struct TimedSocket {
  TimedSocket(std::unordered_set<TimedSocket*>& registry, tcp::socket s) : socket(std::move(s)), registry_(registry) {
    registry_.insert(this);
  }
  ~TimedSocket() { registry_.erase(this); }
  TimedSocket(const TimedSocket&) = delete;
  TimedSocket& operator=(const TimedSocket&) = delete;

  void ExpiresAfterMs(int64_t ms) { deadline_ns = NowNs() + ms * 1'000'000; }
  void Never() { deadline_ns = INT64_MAX; }

  tcp::socket socket;
  int64_t deadline_ns = INT64_MAX;
  bool timed_out = false;

 private:
  std::unordered_set<TimedSocket*>& registry_;
};
inline constexpr int64_t kSweepPeriodMs = 100;

// Writes `bufs` whole: first at once, without the scheduler (most answers
// fit the socket's send buffer, and an asynchronous write that completes at
// once still costs a trip through Asio's queue and an extra epoll_wait),
// then what is left asynchronously. The socket must be non-blocking.
template <typename Buffers>
awaitable<void> WriteAll(tcp::socket& s, const Buffers& bufs, beast::error_code& ec) {
  const size_t total = net::buffer_size(bufs);
  size_t n = s.write_some(bufs, ec);
  if (!ec && n == total) co_return;
  if (ec && ec != net::error::would_block && ec != net::error::try_again) co_return;
  ec = {};
  beast::buffers_suffix<Buffers> rest(bufs);
  rest.consume(n);
  co_await net::async_write(s, rest, Await(ec));
}

// Reads the rest of a message: first from what is already buffered (and
// the socket, without waiting), then asynchronously if more must come. A
// body that arrived with its header, the common case, then costs no trip
// through Asio's queue (an asynchronous read that completes at once is
// posted). The socket must be non-blocking.
template <typename Parser>
awaitable<void> ReadRest(tcp::socket& s, beast::flat_buffer& buf, Parser& p, beast::error_code& ec) {
  bhttp::read(s, buf, p, ec);
  if (ec == net::error::would_block || ec == net::error::try_again) {
    ec = {};
    co_await bhttp::async_read(s, buf, p, Await(ec));
  }
}

// A keep-alive connection to a replica, with its read buffer.
struct UpConn {
  UpConn(std::unordered_set<TimedSocket*>& registry, const net::any_io_executor& ex) : s(registry, tcp::socket(ex)) {}
  TimedSocket s;
  beast::flat_buffer buf;
};

// Where an answer goes: an HTTP client connection or a WebSocket.
// Not thread-safe: used by one request on its io thread.
class Sink {
 public:
  virtual ~Sink() = default;
  // A whole answer. `extra_headers`: "name: value\r\n" lines. False: the client is gone.
  virtual awaitable<bool> Whole(int status, std::string_view content_type, std::string_view body,
                                std::string_view extra_headers) = 0;
  // Complete SSE events; the first call also starts the response.
  virtual awaitable<bool> Events(std::string_view events) = 0;
  virtual awaitable<bool> EndStream() = 0;
  // While a call waits (for a replica, for its answer, between events):
  // on_gone runs (on the io thread) if the client goes away (it closed or
  // reset the connection, or half-closed it as nginx also takes for
  // leaving). Unwatch() before the callback's captures die; idempotent.
  virtual void Watch(std::function<void()> on_gone) { (void)on_gone; }
  virtual void Unwatch() {}
  bool started() const { return started_; }

 protected:
  bool started_ = false;
};

// Unwatch()es its sink when it goes out of scope (however the coroutine
// leaves).
struct UnwatchAtExit {
  Sink& sink;
  ~UnwatchAtExit() { sink.Unwatch(); }
};

struct Worker;

// What a proxied call ended as.
struct CallResult {
  int status = 0;
  bool stream_error = false;
  bool client_gone = false;
  Usage usage;
  // The gateway's own time on the call (drover_gateway_overhead_seconds):
  // from the request's arrival (read) to its upstream write, plus from the
  // answer (a stream: its first event) read to its write to the client,
  // the writes' system calls not included (any proxy makes them; the
  // bench's floor has them). `clean`: no cold-start wait, no retry, so that
  // the sum is the gateway's work only.
  int64_t mark_ns = 0;
  int64_t own_ns = 0;
  bool clean = true;
  // A stream: when its first event was read from the replica, about to be
  // written to the client (drover_gateway_time_to_first_token_seconds).
  // 0: not a stream, or no event came.
  int64_t first_event_ns = 0;
  // Meters the call; run once, just before the answer's last write, so that
  // a client that has its answer also finds it counted.
  std::function<void(const CallResult&)> commit;
  void Commit() {
    if (commit) {
      auto fn = std::move(commit);
      commit = nullptr;
      fn(*this);
    }
  }
};

}  // namespace drover::gateway
