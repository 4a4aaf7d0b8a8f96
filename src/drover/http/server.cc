// The Beast implementation of Server.
//
// I/O: ServerOptions::io_threads run one io_context. The acceptor and each
// connection (a Session) have their own strand, so a session's steps never
// run at once although any I/O thread may run them. A session reads one
// request at a time; while its handler runs it has no operation pending.
// Every read and write has a deadline (Beast's tcp_stream timeouts): a
// keep-alive connection first waits idle_timeout for the first byte of its
// next request (read into a one-byte member, so an idle connection holds no
// buffer), then header_timeout for the rest of the header.
//
// Handlers: a WorkerPool of handler_threads threads with a bounded queue.
// The worker calls the handler, then posts the response to the session's
// strand. An async stream (Response::async_stream) is an AsyncSink that the
// producer fills from any thread; the session drains it in batches, one
// write at a time, and watches the socket for the client leaving meanwhile.
//
// Lifetime: sessions are shared_ptrs held by their pending operations and,
// while a stream runs, by its sink. A sink drops its session when the
// stream ends, and Stop() ends every stream on the I/O threads before it
// joins them, so no producer can reach a session or the io_context after
// Stop(); the sink itself stays valid for whoever holds it.

#include "drover/http/server.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "drover/http/request_parse.h"
#include "drover/http/tls.h"

namespace drover::http {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;
using boost::system::error_code;
using Millis = std::chrono::milliseconds;

// After an error response on a connection we will close, read and discard what
// the client still sends (its oversized body), so that closing does not reset
// the connection before the client has read our response.
constexpr Millis kLingerTimeout{5000};
constexpr size_t kMaxLingerBytes = 64ULL << 20;
constexpr size_t kLingerChunk = 16 << 10;
// Connections over max_connections (or a source's share) are turned away:
// answered 503, or their health check served. At most this many at once;
// past it a new one closes the oldest turned-away connection that is not a
// health check being answered (it is a slow client: a health checker sends
// its request at once), so that a flood of slow connections from one
// address cannot keep /readyz from answering there.
constexpr int kMaxRejecting = 64;
constexpr Millis kAcceptRetryDelay{100};
// How long a TLS connection that we end waits for the client's close_notify.
constexpr Millis kTlsShutdownTimeout{2000};
// A stream batch buffer larger than this is freed after its write.
constexpr size_t kKeepStreamBuffer = 64 << 10;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

// The google.rpc.Code name, which clients match on (the HTTP code is lossy):
// CodeName's "invalid argument" is INVALID_ARGUMENT.
std::string GrpcName(Code code) {
  std::string name = CodeName(code);
  for (char& c : name) c = c == ' ' ? '_' : static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
  return name;
}

Response ErrorWithHttpStatus(int http_status, Code code, std::string message) {
  Response response = ErrorResponse(Status(code, std::move(message)));
  response.status = http_status;
  return response;
}

// Beast 1.74 hands out boost::string_view, which has no implicit conversions.
std::string ToString(beast::string_view text) { return std::string(text.data(), text.size()); }

// The handler threads: a fixed number plus one for each deprecated blocking
// stream running, so that those never starve ordinary requests. Thread-safe.
class WorkerPool {
 public:
  WorkerPool(int threads, int max_queued, int max_blocking)
      : threads_(threads), max_queued_(max_queued), max_blocking_(max_blocking) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < threads_; ++i) SpawnLocked();
  }
  ~WorkerPool() { Stop(); }

  // False when every thread is busy and max_queued tasks already wait, or
  // after Stop().
  bool Submit(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || static_cast<int>(queue_.size()) >= idle_ + max_queued_) return false;
    queue_.push_back(std::move(task));
    cv_.notify_one();
    return true;
  }

  // Called on a worker about to block for a whole stream: adds a thread in
  // its place. False when max_blocking streams already run.
  bool BeginBlocking() {
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    if (stopping_ || blocking_ >= max_blocking_) return false;
    ++blocking_;
    SpawnLocked();
    return true;
  }
  void EndBlocking() {
    std::lock_guard<std::mutex> lock(mu_);
    --blocking_;
  }

  // Drops the tasks not yet started and joins every thread (a running
  // handler is waited for).
  void Stop() {
    std::deque<std::function<void()>> dropped;
    std::unordered_map<uint64_t, std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      dropped.swap(queue_);
      threads.swap(workers_);
      cv_.notify_all();
    }
    for (auto& [id, thread] : threads) thread.join();
  }

 private:
  void SpawnLocked() {
    const uint64_t id = next_id_++;
    ++alive_;
    ++idle_;  // from now, not once it runs: Submit must not refuse while threads start
    workers_.emplace(id, std::thread([this, id] { Run(id); }));
  }

  // Joins threads that left after their blocking stream ended.
  void ReapLocked() {
    for (uint64_t id : exited_) {
      auto it = workers_.find(id);
      if (it == workers_.end()) continue;
      it->second.join();  // it has left its loop: quick
      workers_.erase(it);
    }
    exited_.clear();
  }

  void Run(uint64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (stopping_) break;
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      task = nullptr;
      lock.lock();
      if (alive_ - blocking_ > threads_) break;  // the extra thread of an ended stream
      ++idle_;
    }
    --alive_;
    exited_.push_back(id);
  }

  const int threads_;
  const int max_queued_;
  const int max_blocking_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                              // guarded by mu_
  int idle_ = 0;                                       // guarded by mu_: threads waiting for a task
  int alive_ = 0;                                      // guarded by mu_
  int blocking_ = 0;                                   // guarded by mu_
  uint64_t next_id_ = 0;                               // guarded by mu_
  std::deque<std::function<void()>> queue_;            // guarded by mu_
  std::unordered_map<uint64_t, std::thread> workers_;  // guarded by mu_
  std::vector<uint64_t> exited_;                       // guarded by mu_
};

class AsyncSink;
class SessionBase;

// A connection turned away (over a limit), in Shared's list by arrival.
struct TurnedAway {
  std::weak_ptr<SessionBase> session;
  bool keep = false;  // a health check being answered, or already being evicted: not a candidate
  // It has sent its first byte and not yet a whole request header since:
  // a slow client, evicted before one not read yet (a health checker's
  // request may still be on its way while a flood reconnects around it).
  bool started = false;
};

// What a sink and a worker need of a session. Every method is called on the
// session's strand (post to executor()).
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual net::any_io_executor executor() = 0;
  virtual void Respond(Response response) = 0;
  virtual void StartStream(Response head, std::shared_ptr<AsyncSink> sink) = 0;
  virtual void Pump() = 0;                                     // sends what the sink holds
  virtual void Close() = 0;                                    // closes the connection at once; ends its stream
  std::list<std::weak_ptr<SessionBase>>::iterator registered;  // set once by Shared::Register
  std::list<TurnedAway>::iterator turned_away;                 // the same, for a turned-away one (Shared's mu_)
};

// The StreamSink of one streamed response. Producers call Write/Close from
// any thread; the session calls Take/Sent/End on its strand.
//
// Invariants: pending_ is the bytes queued or being written; session_ is
// null exactly when ended_; a Pump is posted at most once (kicked_).
class AsyncSink final : public StreamSink {
 public:
  AsyncSink(std::shared_ptr<SessionBase> session, size_t limit) : session_(std::move(session)), limit_(limit) {}

  bool Write(std::string chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    return QueueLocked(std::move(chunk), /*bounded=*/true);
  }

  bool WriteThen(std::string chunk, std::function<void()> on_sent) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!QueueLocked(std::move(chunk), /*bounded=*/true)) return false;
    if (sent_total_ >= queued_total_) {
      // An empty chunk: nothing to wait for. Run after the lock, from the
      // session's strand like every other notice.
      net::post(session_->executor(), std::move(on_sent));
    } else {
      on_sent_.emplace_back(queued_total_, std::move(on_sent));
    }
    return true;
  }

  // The deprecated ChunkWriter: waits until the chunk is written.
  bool WriteAndWait(std::string_view data) {
    std::unique_lock<std::mutex> lock(mu_);
    if (data.empty()) return !ended_ && !failed_ && !closing_;
    if (!QueueLocked(std::string(data), /*bounded=*/false)) return false;
    const uint64_t target = queued_total_;
    cv_.wait(lock, [&] { return sent_total_ >= target || ended_; });
    return sent_total_ >= target;
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_ || failed_ || closing_) return;
    closing_ = true;
    KickLocked();
  }

  // Ends the stream without its last chunk (the producer failed).
  void Abort() {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_ || failed_) return;
    failed_ = true;
    CloseSessionLocked();
  }

  void OnClosed(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ended_) {
        on_closed_ = std::move(fn);
        return;
      }
      if (!gone_ || fired_) return;
      fired_ = true;
    }
    if (fn) fn();
  }

  // Session side. Moves the queued chunks to `out`; `last` when the
  // producer closed and nothing more will come.
  void Take(std::deque<std::string>* out, bool* last) {
    std::lock_guard<std::mutex> lock(mu_);
    out->swap(queue_);
    kicked_ = false;
    *last = closing_;
  }
  void Sent(size_t bytes) {
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ -= bytes;
      sent_total_ += bytes;
      cv_.notify_all();
      while (!on_sent_.empty() && on_sent_.front().first <= sent_total_) {
        ready.push_back(std::move(on_sent_.front().second));
        on_sent_.pop_front();
      }
    }
    for (auto& fn : ready) fn();
  }
  // The stream is over: `gone` unless it ended with its last chunk.
  void End(bool gone) {
    // The notices that will never run are dropped too (after the lock: what
    // they hold may be the producer, which may hold this sink).
    std::function<void()> fn;
    std::deque<std::pair<uint64_t, std::function<void()>>> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_) return;
      ended_ = true;
      session_.reset();
      queue_.clear();
      dropped.swap(on_sent_);
      cv_.notify_all();
      fn = std::move(on_closed_);
      on_closed_ = nullptr;
      if (!gone || closing_) return;
      gone_ = true;
      fired_ = fn != nullptr;
    }
    if (fn) fn();
  }

 private:
  bool QueueLocked(std::string chunk, bool bounded) {
    if (ended_ || failed_ || closing_) return false;
    if (chunk.empty()) return true;  // an empty chunk would end the body
    if (bounded && pending_ + chunk.size() > limit_) {
      failed_ = true;
      CloseSessionLocked();
      return false;
    }
    pending_ += chunk.size();
    queued_total_ += chunk.size();
    queue_.push_back(std::move(chunk));
    KickLocked();
    return true;
  }
  void KickLocked() {
    if (kicked_ || !session_) return;
    kicked_ = true;
    net::post(session_->executor(), [s = session_] { s->Pump(); });
  }
  void CloseSessionLocked() {
    if (session_) net::post(session_->executor(), [s = session_] { s->Close(); });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<SessionBase> session_;  // guarded by mu_
  const size_t limit_;
  std::deque<std::string> queue_;  // guarded by mu_
  // WriteThen's notices: run once sent_total_ reaches the first; guarded by mu_.
  std::deque<std::pair<uint64_t, std::function<void()>>> on_sent_;
  size_t pending_ = 0;               // guarded by mu_
  uint64_t queued_total_ = 0;        // guarded by mu_
  uint64_t sent_total_ = 0;          // guarded by mu_
  bool kicked_ = false;              // guarded by mu_
  bool closing_ = false;             // guarded by mu_: Close() called
  bool failed_ = false;              // guarded by mu_: overflow or Abort(); a close is on its way
  bool ended_ = false;               // guarded by mu_
  bool gone_ = false;                // guarded by mu_: ended other than by Close()
  bool fired_ = false;               // guarded by mu_
  std::function<void()> on_closed_;  // guarded by mu_
};

// What every session shares: options, the handler, the worker pool and the
// connection registry. Thread-safe.
class Shared {
 public:
  Shared(Handler handler_fn, ServerOptions server_options)
      : handler(std::move(handler_fn)),
        options(std::move(server_options)),
        pool(this->options.handler_threads, this->options.max_queued_requests, this->options.max_blocking_streams) {}

  const Handler handler;
  const ServerOptions options;
  WorkerPool pool;
  std::optional<ssl::context> tls;  // set before the first accept

  enum class Admission { kServe, kReject, kDrop };
  // Counts a new connection from `source` in (unless kDrop). kReject with
  // kMaxRejecting already turned away: *evict is the one to close for it.
  Admission Admit(const std::string& source, std::shared_ptr<SessionBase>* evict) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Admission::kDrop;
    const int limit = options.max_connections_per_source;
    auto it = per_source_.find(source);
    const int from_source = it == per_source_.end() ? 0 : it->second;
    if (active_ >= options.max_connections || (limit > 0 && from_source >= limit)) {
      // Past the limit, or one address holding its share: slow clients from
      // one place cannot take every connection.
      if (rejecting_ >= kMaxRejecting) {
        *evict = EvictableLocked();
        if (*evict == nullptr) return Admission::kDrop;  // every one is a health check being answered
      }
      ++rejecting_;
      return Admission::kReject;
    }
    ++active_;
    ++per_source_[source];
    return Admission::kServe;
  }
  // False (and the count undone) when stopping: then the caller drops it.
  bool Register(const std::shared_ptr<SessionBase>& session, const std::string& source, bool rejecting) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      UncountLocked(source, rejecting);
      return false;
    }
    session->registered = sessions_.insert(sessions_.end(), session);
    if (rejecting) session->turned_away = turned_away_.insert(turned_away_.end(), TurnedAway{session});
    return true;
  }
  void Unregister(SessionBase* session, const std::string& source, bool rejecting) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(session->registered);
    if (rejecting) turned_away_.erase(session->turned_away);
    UncountLocked(source, rejecting);
  }
  // A turned-away session whose request is a health check: it is answered,
  // and no longer evicted for a newcomer. False when it already is being
  // evicted (its close is on the way).
  bool KeepTurnedAway(SessionBase* session) {
    std::lock_guard<std::mutex> lock(mu_);
    return !std::exchange(session->turned_away->keep, true);
  }
  // A turned-away session sent its first byte (TurnedAway::started).
  void StartedTurnedAway(SessionBase* session) {
    std::lock_guard<std::mutex> lock(mu_);
    session->turned_away->started = true;
  }
  bool IsHealthPath(std::string_view target) const {
    const std::string_view path = target.substr(0, target.find('?'));
    return std::find(options.health_paths.begin(), options.health_paths.end(), path) != options.health_paths.end();
  }
  // Sets the stopping flag; returns every open session.
  std::vector<std::shared_ptr<SessionBase>> BeginStop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    std::vector<std::shared_ptr<SessionBase>> out;
    for (auto& weak : sessions_) {
      if (auto s = weak.lock()) out.push_back(std::move(s));
    }
    return out;
  }

  // On a worker: calls the handler and hands its response to the session.
  void RunRequest(const std::shared_ptr<SessionBase>& session, const Request& request) {
    Response response = CallHandler(request);
    if (!response.async_stream && !response.stream) {
      net::post(session->executor(), [session, r = std::move(response)]() mutable { session->Respond(std::move(r)); });
      return;
    }
    const bool blocking = !response.async_stream;
    if (blocking && !pool.BeginBlocking()) {
      Response busy = ErrorResponse(Unavailable("server is at its limit of " +
                                                std::to_string(options.max_blocking_streams) + " blocking streams"));
      net::post(session->executor(), [session, r = std::move(busy)]() mutable { session->Respond(std::move(r)); });
      return;
    }
    auto async_stream = std::move(response.async_stream);
    auto stream = std::move(response.stream);
    response.async_stream = nullptr;
    response.stream = nullptr;
    auto sink = std::make_shared<AsyncSink>(session, options.max_stream_buffer_bytes);
    net::post(session->executor(),
              [session, sink, r = std::move(response)]() mutable { session->StartStream(std::move(r), sink); });
    try {
      if (async_stream) {
        async_stream(sink);
      } else {
        stream([&sink](std::string_view data) { return sink->WriteAndWait(data); });
        sink->Close();
      }
    } catch (...) {
      // Too late for a 500: end without the last chunk, so the client sees a
      // truncated body rather than a complete one.
      sink->Abort();
    }
    if (blocking) pool.EndBlocking();
  }

 private:
  Response CallHandler(const Request& request) {
    try {
      return handler(request);
    } catch (const std::exception& e) {
      return ErrorResponse(Internal("handler failed: " + std::string(e.what())));
    } catch (...) {
      return ErrorResponse(Internal("handler failed with a non-standard exception"));
    }
  }

  // The oldest turned-away session that is no health check being
  // answered, one that has started its request first (a slow client),
  // marked so that it is picked once; null if none.
  std::shared_ptr<SessionBase> EvictableLocked() {
    for (bool started : {true, false}) {
      for (TurnedAway& t : turned_away_) {
        if (t.keep || (started && !t.started)) continue;
        if (auto s = t.session.lock()) {
          t.keep = true;
          return s;
        }
      }
    }
    return nullptr;
  }

  void UncountLocked(const std::string& source, bool rejecting) {
    if (rejecting) {
      --rejecting_;
      return;
    }
    --active_;
    if (auto it = per_source_.find(source); it != per_source_.end() && --it->second <= 0) per_source_.erase(it);
  }

  std::mutex mu_;
  bool stopping_ = false;                            // guarded by mu_
  int active_ = 0;                                   // guarded by mu_
  int rejecting_ = 0;                                // guarded by mu_
  std::unordered_map<std::string, int> per_source_;  // guarded by mu_: open connections by peer address
  std::list<std::weak_ptr<SessionBase>> sessions_;   // guarded by mu_
  std::list<TurnedAway> turned_away_;                // guarded by mu_: the rejecting sessions, oldest first
};

template <typename Message>
void SetHeaders(Message& message, const Response& response, bool keep_alive) {
  const int code = response.status >= 100 && response.status <= 999 ? response.status : 500;
  message.result(static_cast<unsigned>(code));
  message.set(bhttp::field::server, "drover");
  if (!response.content_type.empty()) message.set(bhttp::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) message.set(name, value);
  message.keep_alive(keep_alive);
}

// One connection, plaintext (Stream = beast::tcp_stream) or TLS
// (beast::ssl_stream<beast::tcp_stream>). Runs on its strand only.
template <typename Stream>
class Session final : public SessionBase {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  Session(Shared& shared, tcp::socket socket, std::string source, std::string remote, bool rejecting)
      : shared_(shared),
        stream_(MakeStream(shared, std::move(socket))),
        source_(std::move(source)),
        remote_(std::move(remote)),
        rejecting_(rejecting) {}

  net::any_io_executor executor() override { return stream_.get_executor(); }

  void Start() {
    // On a new connection the handshake and the first header share one deadline.
    Lowest().expires_after(Millis(shared_.options.header_timeout_ms));
    if constexpr (kTls) {
      stream_.async_handshake(ssl::stream_base::server, [self = Self()](error_code ec) {
        if (ec) return self->Close();
        if (self->rejecting_) self->shared_.StartedTurnedAway(self.get());
        self->ReadHeader(/*reset_deadline=*/false);
      });
    } else if (rejecting_) {
      // Turned away: its first byte says it has started (TurnedAway::started).
      stream_.async_read_some(net::buffer(&byte_, 1), [self = Self()](error_code ec, size_t n) {
        if (self->closed_) return;
        if (ec || n != 1) return self->Close();
        self->buffer_.commit(net::buffer_copy(self->buffer_.prepare(1), net::buffer(&self->byte_, 1)));
        self->shared_.StartedTurnedAway(self.get());
        self->ReadHeader(/*reset_deadline=*/false);
      });
    } else {
      ReadHeader(/*reset_deadline=*/false);
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().close();
    if (sink_) std::exchange(sink_, nullptr)->End(/*gone=*/true);
    shared_.Unregister(this, source_, rejecting_);
  }

  void Respond(Response response) override {
    if (closed_) return;
    auto message = std::make_unique<bhttp::response<bhttp::string_body>>();
    message->version(version_);
    SetHeaders(*message, response, keep_alive_);
    message->body() = std::move(response.body);
    message->prepare_payload();
    Lowest().expires_after(Millis(shared_.options.write_timeout_ms));
    auto& ref = *message;
    bhttp::async_write(stream_, ref, [self = Self(), m = std::move(message)](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->Close();
      if (self->linger_) return self->Linger();
      if (!self->keep_alive_) return self->Finish();
      self->ReadNext();
    });
  }

  void StartStream(Response head, std::shared_ptr<AsyncSink> sink) override {
    if (closed_) return sink->End(/*gone=*/true);
    sink_ = std::move(sink);
    chunked_ = version_ >= 11;
    keep_alive_ = false;
    bhttp::response<bhttp::empty_body> message;
    message.version(version_);
    SetHeaders(message, head, /*keep_alive=*/false);
    if (chunked_) message.chunked(true);
    std::ostringstream text;
    text << message.base();
    out_ = text.str();
    // Nothing is pending: the watch below gets no deadline, the writes do.
    Lowest().expires_never();
    WatchPeer();
    WriteOut(/*data_bytes=*/0, /*last=*/false);
  }

  void Pump() override {
    if (closed_ || !sink_ || writing_) return;
    std::deque<std::string> chunks;
    bool last = false;
    sink_->Take(&chunks, &last);
    size_t bytes = 0;
    for (const std::string& chunk : chunks) {
      bytes += chunk.size();
      if (chunked_) {
        char size[24];
        int n = std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
        out_.append(size, static_cast<size_t>(n));
      }
      out_ += chunk;
      if (chunked_) out_ += "\r\n";
    }
    if (last && chunked_) out_ += "0\r\n\r\n";
    if (out_.empty() && !last) return;
    WriteOut(bytes, last);
  }

 private:
  static Stream MakeStream(Shared& shared, tcp::socket socket) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *shared.tls);
    } else {
      (void)shared;
      return Stream(std::move(socket));
    }
  }

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // The next request of a keep-alive connection.
  void ReadNext() {
    parser_.reset();
    if (buffer_.size() > 0) return ReadHeader(/*reset_deadline=*/true);  // pipelined
    buffer_.shrink_to_fit();                                             // an idle connection holds no buffer
    Lowest().expires_after(Millis(shared_.options.idle_timeout_ms));
    stream_.async_read_some(net::buffer(&byte_, 1), [self = Self()](error_code ec, size_t n) {
      if (self->closed_) return;
      if (ec || n != 1) return self->Close();
      self->buffer_.commit(net::buffer_copy(self->buffer_.prepare(1), net::buffer(&self->byte_, 1)));
      self->ReadHeader(/*reset_deadline=*/true);
    });
  }

  void ReadHeader(bool reset_deadline) {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(std::min<size_t>(shared_.options.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(shared_.options.max_body_bytes);
    if (reset_deadline) Lowest().expires_after(Millis(shared_.options.header_timeout_ms));
    bhttp::async_read_header(stream_, buffer_, *parser_, [self = Self()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->OnReadError(ec);
      self->OnHeader();
    });
  }

  void OnHeader() {
    const auto& header = parser_->get();
    version_ = header.version();
    keep_alive_ = header.keep_alive();
    if (rejecting_) {
      keep_alive_ = false;
      const beast::string_view target = header.target();
      // A health check gets its real answer (then the connection closes):
      // a load balancer or monitor behind a busy address still sees how
      // the server is. Anything else: 503.
      if (!shared_.IsHealthPath(std::string_view(target.data(), target.size())) || !shared_.KeepTurnedAway(this)) {
        linger_ = true;  // the body, if any, is read and discarded
        return Respond(ErrorResponse(Unavailable(
            "server is at its limit of connections (" + std::to_string(shared_.options.max_connections) + " in all, " +
            std::to_string(shared_.options.max_connections_per_source) + " from one address)")));
      }
    }
    if (parser_->is_done()) return OnRequest();
    Lowest().expires_after(Millis(shared_.options.write_timeout_ms));
    if (version_ >= 11 && beast::iequals(header[bhttp::field::expect], "100-continue")) {
      net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                       [self = Self()](error_code ec, size_t) {
                         if (self->closed_) return;
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    Lowest().expires_after(Millis(shared_.options.body_timeout_ms));
    bhttp::async_read(stream_, buffer_, *parser_, [self = Self()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->OnReadError(ec);
      self->OnRequest();
    });
  }

  void OnReadError(error_code ec) {
    if (ec.category() != bhttp::make_error_code(bhttp::error::body_limit).category() ||
        ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || rejecting_) {
      return Close();  // the client left or timed out: nobody to answer
    }
    keep_alive_ = false;
    linger_ = true;
    const ServerOptions& o = shared_.options;
    if (ec == bhttp::error::body_limit) {
      return Respond(ErrorWithHttpStatus(413, Code::kResourceExhausted,
                                         "request body is larger than " + std::to_string(o.max_body_bytes) + " bytes"));
    }
    if (ec == bhttp::error::header_limit) {
      return Respond(
          ErrorWithHttpStatus(431, Code::kInvalidArgument,
                              "request headers are larger than " + std::to_string(o.max_header_bytes) + " bytes"));
    }
    Respond(ErrorResponse(InvalidArgument("malformed http request: " + ec.message())));
  }

  void OnRequest() {
    bhttp::request<bhttp::string_body> message = parser_->release();
    parser_.reset();
    Request request;
    request.remote = remote_;
    request.tls = kTls;
    request.method = ToString(message.method_string());
    const std::string_view target(message.target().data(), message.target().size());
    size_t question = target.find('?');
    request.path = std::string(target.substr(0, question));
    if (question != std::string_view::npos) {
      auto query = ParseQuery(target.substr(question + 1));
      if (!query.ok()) return Respond(ErrorResponse(query.status()));
      request.query = std::move(*query);
    }
    for (const auto& field : message) {
      std::string name = ToString(field.name_string());
      for (char& c : name) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
      std::string value = ToString(field.value());
      auto [it, inserted] = request.headers.emplace(std::move(name), value);
      if (!inserted) it->second += ", " + value;  // RFC 9110: a repeated field is a list
    }
    request.body = std::move(message.body());
    // The handler may take its time; the client has nothing to send meanwhile.
    Lowest().expires_never();
    Shared& shared = shared_;
    auto task = [&shared, self = std::static_pointer_cast<SessionBase>(Self()), r = std::move(request)] {
      shared.RunRequest(self, r);
    };
    if (!shared_.pool.Submit(std::move(task))) {
      Respond(ErrorResponse(Unavailable("server is busy: all " + std::to_string(shared_.options.handler_threads) +
                                        " handler threads are taken and " +
                                        std::to_string(shared_.options.max_queued_requests) + " requests wait")));
    }
  }

  // Writes out_ (the stream's header or a batch of chunks).
  void WriteOut(size_t data_bytes, bool last) {
    writing_ = true;
    Lowest().expires_after(Millis(shared_.options.write_timeout_ms));  // the pending watch keeps its own
    net::async_write(stream_, net::buffer(out_), [self = Self(), data_bytes, last](error_code ec, size_t) {
      self->writing_ = false;
      if (self->out_.capacity() > kKeepStreamBuffer) {
        std::string().swap(self->out_);
      } else {
        self->out_.clear();
      }
      if (self->closed_) return;
      if (ec) return self->Close();
      if (!self->sink_) return;
      self->sink_->Sent(data_bytes);
      if (!last) return self->Pump();
      std::exchange(self->sink_, nullptr)->End(/*gone=*/false);
      // The watch read is still pending: no TLS shutdown exchange beside it.
      error_code ignored;
      self->Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->Close();
    });
  }

  // While a stream runs, a read that completes tells that the client left
  // (or, harmlessly, sent more: the connection closes after the stream).
  void WatchPeer() {
    stream_.async_read_some(net::buffer(&byte_, 1), [self = Self()](error_code ec, size_t) {
      if (self->closed_ || !ec) return;
      self->Close();
    });
  }

  // Ends a connection after a response that said "Connection: close".
  void Finish() {
    if constexpr (kTls) {
      Lowest().expires_after(kTlsShutdownTimeout);
      stream_.async_shutdown([self = Self()](error_code) { self->Close(); });
    } else {
      error_code ec;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
      Close();
    }
  }

  // Half-closes, then discards what the client still sends for a while.
  void Linger() {
    error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    Lowest().expires_after(kLingerTimeout);
    scratch_ = std::make_unique<char[]>(kLingerChunk);
    LingerRead();
  }
  void LingerRead() {
    Lowest().async_read_some(net::buffer(scratch_.get(), kLingerChunk), [self = Self()](error_code ec, size_t n) {
      if (self->closed_) return;
      self->lingered_ += n;
      if (ec || self->lingered_ >= kMaxLingerBytes) return self->Close();
      self->LingerRead();
    });
  }

  Shared& shared_;
  Stream stream_;
  const std::string source_;  // the peer's address, without its port
  const std::string remote_;  // "ip:port"
  const bool rejecting_;      // over a limit: answered 503
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  char byte_ = 0;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool linger_ = false;
  bool closed_ = false;
  bool chunked_ = false;
  bool writing_ = false;
  std::string out_;                  // stream bytes being written
  std::shared_ptr<AsyncSink> sink_;  // while a stream runs
  std::unique_ptr<char[]> scratch_;  // while lingering
  size_t lingered_ = 0;
};

class BeastServer final : public Server {
 public:
  BeastServer(Handler handler, ServerOptions options)
      : shared_(std::move(handler), std::move(options)), ioc_(shared_.options.io_threads) {}
  ~BeastServer() override { Stop(); }

  Shared& shared() { return shared_; }

  Status Listen(const tcp::endpoint& endpoint, const std::string& listen) {
    error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    // Lets a restarted server take its port back while old connections sit
    // in TIME_WAIT; it does not allow two live listeners on one port.
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) port_ = acceptor_.local_endpoint(ec).port();
    if (ec) {
      shared_.pool.Stop();
      return Unavailable("cannot listen on '" + listen + "': " + ec.message());
    }
    net::post(accept_strand_, [this] { Accept(); });
    for (int i = 0; i < shared_.options.io_threads; ++i) io_threads_.emplace_back([this] { ioc_.run(); });
    return Status::Ok();
  }

  uint16_t port() const override { return port_; }

  void Stop() override {
    if (stopped_.exchange(true)) return;
    std::vector<std::shared_ptr<SessionBase>> sessions = shared_.BeginStop();
    net::post(accept_strand_, [this] {
      error_code ec;
      acceptor_.close(ec);
      retry_timer_.cancel();
    });
    // Every stream ends (OnClosed runs) on the I/O threads, which still run.
    for (auto& session : sessions) net::post(session->executor(), [session] { session->Close(); });
    sessions.clear();
    // A handler still running is waited for; a blocking stream sees its
    // writer fail. Their responses go to closed sessions.
    shared_.pool.Stop();
    work_.reset();
    for (std::thread& thread : io_threads_) thread.join();
    io_threads_.clear();
  }

 private:
  // On accept_strand_.
  void Accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Typically EMFILE: back off instead of spinning on the error.
        retry_timer_.expires_after(kAcceptRetryDelay);
        retry_timer_.async_wait([this](error_code wait_ec) {
          if (!wait_ec && acceptor_.is_open()) Accept();
        });
        return;
      }
      OnAccept(std::move(socket));
      Accept();
    });
  }

  void OnAccept(tcp::socket socket) {
    error_code ec;
    const tcp::endpoint ep = socket.remote_endpoint(ec);
    if (ec) return;  // already gone; `socket` closes
    const std::string source = ep.address().to_string();
    std::shared_ptr<SessionBase> evict;
    const Shared::Admission admission = shared_.Admit(source, &evict);
    if (evict) net::post(evict->executor(), [evict] { evict->Close(); });
    if (admission == Shared::Admission::kDrop) return;
    const bool rejecting = admission == Shared::Admission::kReject;
    socket.set_option(tcp::no_delay(true), ec);
    std::string remote = ep.address().is_v6() ? "[" + source + "]:" + std::to_string(ep.port())
                                              : source + ":" + std::to_string(ep.port());
    if (shared_.tls) {
      Start(std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(shared_, std::move(socket), source,
                                                                            std::move(remote), rejecting),
            source, rejecting);
    } else {
      Start(std::make_shared<Session<beast::tcp_stream>>(shared_, std::move(socket), source, std::move(remote),
                                                         rejecting),
            source, rejecting);
    }
  }

  template <typename S>
  void Start(std::shared_ptr<S> session, const std::string& source, bool rejecting) {
    if (!shared_.Register(session, source, rejecting)) return;
    net::dispatch(session->executor(), [session] { session->Start(); });
  }

  Shared shared_;
  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_ = net::make_work_guard(ioc_);
  net::strand<net::io_context::executor_type> accept_strand_ = net::make_strand(ioc_);
  tcp::acceptor acceptor_{accept_strand_};         // accept_strand_ (and Listen() before the threads start)
  net::steady_timer retry_timer_{accept_strand_};  // accept_strand_
  std::vector<std::thread> io_threads_;
  uint16_t port_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace

Result<std::unique_ptr<Server>> StartServer(const std::string& listen, Handler handler, ServerOptions options) {
  if (!handler) return InvalidArgument("http server on '" + listen + "' has no handler");
  auto at_least = [&](const char* name, int64_t value, int64_t min) -> Status {
    if (value >= min) return Status::Ok();
    return InvalidArgument("http server " + std::string(name) + " must be at least " + std::to_string(min) + ", got " +
                           std::to_string(value));
  };
  DROVER_RETURN_IF_ERROR(at_least("max_connections", options.max_connections, 1));
  DROVER_RETURN_IF_ERROR(at_least("io_threads", options.io_threads, 1));
  DROVER_RETURN_IF_ERROR(at_least("handler_threads", options.handler_threads, 1));
  DROVER_RETURN_IF_ERROR(at_least("max_queued_requests", options.max_queued_requests, 0));
  DROVER_RETURN_IF_ERROR(at_least("max_blocking_streams", options.max_blocking_streams, 0));
  DROVER_RETURN_IF_ERROR(at_least("header_timeout_ms", options.header_timeout_ms, 1));
  DROVER_RETURN_IF_ERROR(at_least("body_timeout_ms", options.body_timeout_ms, 1));
  DROVER_RETURN_IF_ERROR(at_least("idle_timeout_ms", options.idle_timeout_ms, 1));
  DROVER_RETURN_IF_ERROR(at_least("write_timeout_ms", options.write_timeout_ms, 1));
  DROVER_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseListen(listen));
  std::optional<ssl::context> tls;
  if (!options.tls_cert_pem.empty() || !options.tls_key_pem.empty()) {
    tls.emplace(ssl::context::tls_server);
    DROVER_RETURN_IF_ERROR(ConfigureServerContext(tls->native_handle(), options.tls_cert_pem, options.tls_key_pem));
  }
  auto server = std::make_unique<BeastServer>(std::move(handler), std::move(options));
  server->shared().tls = std::move(tls);
  DROVER_RETURN_IF_ERROR(server->Listen(endpoint, listen));
  return std::unique_ptr<Server>(std::move(server));
}

Response ErrorResponse(const Status& status) {
  nlohmann::json body = {
      {"code", static_cast<int>(status.code())}, {"status", GrpcName(status.code())}, {"message", status.message()}};
  Response response;
  response.status = HttpStatusFor(status.code());
  response.content_type = "application/json";
  // Messages may quote user input that is not UTF-8; replace rather than throw.
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

}  // namespace drover::http
