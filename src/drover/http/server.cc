// The Beast implementation of Server: an io_context thread that accepts (and
// turns away connections over the limit with a 503, asynchronously), and one
// thread per accepted connection that reads requests synchronously, calls the
// handler and writes the responses, with keep-alive.
//
// Blocking reads and writes go through SocketStream, which waits with poll()
// so that every wait has a deadline and Stop() can wake it with shutdown(2).
// With TLS, SocketStream drives an OpenSSL SSL object over the same
// non-blocking socket: SSL_ERROR_WANT_READ / WANT_WRITE become the same
// bounded poll() waits, so deadlines and Stop() work alike.

#include "drover/http/server.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "drover/http/request_parse.h"

namespace drover::http {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// A request (headers and body) must arrive within this long of the previous
// response; this is also the keep-alive idle timeout.
constexpr std::chrono::seconds kReadTimeout{60};
// A single write that makes no progress for this long means the client is gone.
constexpr std::chrono::seconds kWriteTimeout{30};
// After an error response on a connection we will close, read and discard what
// the client still sends (its oversized body), so that closing does not reset
// the connection before the client has read our response.
constexpr std::chrono::seconds kLingerTimeout{5};
constexpr uint64_t kMaxLingerBytes = 64ULL << 20;
constexpr uint32_t kMaxHeaderBytes = 64 << 10;
// Connections over max_connections are answered 503 from the io thread; past
// this many at once they are simply closed.
constexpr size_t kMaxRejecting = 64;
constexpr std::chrono::seconds kRejectTimeout{5};
constexpr std::chrono::milliseconds kAcceptRetryDelay{100};
// A TLS handshake must complete within this long of the connection.
constexpr std::chrono::seconds kHandshakeTimeout{10};

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

// A blocking socket stream for Beast's synchronous algorithms (it models
// SyncReadStream and SyncWriteStream) whose waits are bounded: the socket is
// non-blocking and each wait is a poll() with the remaining time. shutdown(2)
// from Stop() wakes the poll, and the next read or write then fails.
class SocketStream {
 public:
  // `ssl` (may be null: plaintext) is owned by the caller and already bound
  // to the socket's descriptor.
  explicit SocketStream(tcp::socket& socket, SSL* ssl = nullptr) : socket_(socket), ssl_(ssl) {}

  void set_read_deadline(Clock::time_point deadline) { read_deadline_ = deadline; }

  // The server side of the TLS handshake, bounded by `deadline`.
  bool Handshake(Clock::time_point deadline, error_code& ec) {
    for (;;) {
      ERR_clear_error();
      int rc = SSL_accept(ssl_);
      if (rc == 1) return true;
      if (!WaitFor(SSL_get_error(ssl_, rc), deadline, ec)) return false;
    }
  }

  // Sends close_notify if the socket takes it at once; never waits. Call
  // before shutting the socket's sending side.
  void ShutdownTls() {
    if (ssl_ == nullptr || tls_closed_) return;
    tls_closed_ = true;
    ERR_clear_error();
    (void)SSL_shutdown(ssl_);
    ERR_clear_error();
  }

  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, error_code& ec) {
    if (ssl_ != nullptr) {
      net::mutable_buffer b = First<net::mutable_buffer>(buffers);
      return TlsIo(b.data(), b.size(), /*write=*/false, ec);
    }
    for (;;) {
      size_t n = socket_.read_some(buffers, ec);
      if (ec != net::error::would_block && ec != net::error::try_again) return n;
      if (!Wait(POLLIN, read_deadline_, ec)) return 0;
    }
  }
  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    return OrThrow([&](error_code& ec) { return read_some(buffers, ec); });
  }

  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, error_code& ec) {
    if (ssl_ != nullptr) {
      net::const_buffer b = First<net::const_buffer>(buffers);
      return TlsIo(const_cast<void*>(b.data()), b.size(), /*write=*/true, ec);
    }
    for (;;) {
      size_t n = socket_.write_some(buffers, ec);
      if (ec != net::error::would_block && ec != net::error::try_again) return n;
      if (!Wait(POLLOUT, Clock::now() + kWriteTimeout, ec)) return 0;
    }
  }
  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    return OrThrow([&](error_code& ec) { return write_some(buffers, ec); });
  }

 private:
  // The first non-empty buffer of a sequence (TLS reads and writes one
  // buffer at a time; the callers loop).
  template <typename Buffer, typename Buffers>
  static Buffer First(const Buffers& buffers) {
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return Buffer();
  }

  size_t TlsIo(void* data, size_t size, bool write, error_code& ec) {
    if (size == 0) return 0;
    const Clock::time_point deadline = write ? Clock::now() + kWriteTimeout : read_deadline_;
    for (;;) {
      size_t n = 0;
      ERR_clear_error();
      int rc = write ? SSL_write_ex(ssl_, data, size, &n) : SSL_read_ex(ssl_, data, size, &n);
      if (rc == 1) return n;
      if (!WaitFor(SSL_get_error(ssl_, rc), deadline, ec)) return 0;
    }
  }

  // After an SSL call that did not complete: waits when it wants the socket
  // (true: try again), else sets `ec` (false).
  bool WaitFor(int ssl_error, Clock::time_point deadline, error_code& ec) {
    switch (ssl_error) {
      case SSL_ERROR_WANT_READ:
        return Wait(POLLIN, deadline, ec);
      case SSL_ERROR_WANT_WRITE:
        return Wait(POLLOUT, deadline, ec);
      case SSL_ERROR_ZERO_RETURN:
        ec = net::error::eof;
        return false;
      default:
        // A peer that is not speaking TLS, a failed handshake, a reset.
        ERR_clear_error();
        ec = net::error::connection_reset;
        return false;
    }
  }

  template <typename Op>
  static size_t OrThrow(Op op) {
    error_code ec;
    size_t n = op(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  // True when the socket is ready (or in error: the next call reports it).
  bool Wait(short events, Clock::time_point deadline, error_code& ec) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        ec = net::error::timed_out;
        return false;
      }
      pollfd fd{socket_.native_handle(), events, 0};
      int rc = ::poll(&fd, 1, static_cast<int>(left.count()));
      if (rc > 0) return true;
      if (rc < 0 && errno != EINTR) {
        ec = error_code(errno, boost::system::system_category());
        return false;
      }
    }
  }

  tcp::socket& socket_;
  SSL* ssl_;
  bool tls_closed_ = false;
  Clock::time_point read_deadline_ = Clock::now() + kReadTimeout;
};

using SslCtxPtr = std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)>;
using SslPtr = std::unique_ptr<SSL, decltype(&SSL_free)>;

std::string SslErrorText() {
  unsigned long code = ERR_peek_last_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  std::string out = reason != nullptr ? reason : "unknown error";
  ERR_clear_error();
  return out;
}

// A server context for `cert_pem` (leaf, then intermediates) and `key_pem`:
// TLS 1.2 or newer, no renegotiation, a peer that closes without
// close_notify reads as end of stream.
Result<SslCtxPtr> MakeServerContext(const std::string& cert_pem, const std::string& key_pem) {
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()), &SSL_CTX_free);
  if (!ctx) return Internal("tls: cannot create a context: " + SslErrorText());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  std::unique_ptr<BIO, decltype(&BIO_free)> certs(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())),
                                                  &BIO_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> key(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())),
                                                &BIO_free);
  if (!certs || !key) return Internal("tls: out of memory");
  X509* leaf = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx.get(), leaf) != 1) {
    X509_free(leaf);
    return InvalidArgument("tls: the certificate is not usable: " + SslErrorText());
  }
  X509_free(leaf);
  while (X509* extra = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx.get(), extra) != 1) {
      X509_free(extra);
      return InvalidArgument("tls: an intermediate certificate is not usable: " + SslErrorText());
    }
  }
  ERR_clear_error();  // the loop ends on "no start line"
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr);
  if (pkey == nullptr || SSL_CTX_use_PrivateKey(ctx.get(), pkey) != 1) {
    EVP_PKEY_free(pkey);
    return InvalidArgument("tls: the private key is not usable: " + SslErrorText());
  }
  EVP_PKEY_free(pkey);
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return InvalidArgument("tls: the private key does not belong to the certificate: " + SslErrorText());
  }
  return ctx;
}

// One connection over the limit, answered 503 and closed. Lives on the io
// thread only; owned by BeastServer::rejecting_.
struct Rejection {
  explicit Rejection(tcp::socket socket) : stream(std::move(socket)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  bhttp::request_parser<bhttp::string_body> parser;
  bhttp::response<bhttp::string_body> response;
};

// One accepted connection and the thread serving it. `socket` is used by that
// thread only; Stop() reaches it through `fd` (shutdown only, never close)
// while holding mu_, and the thread closes it while holding mu_ and setting
// `done`, so Stop() never touches a closed or reused descriptor.
struct Connection {
  explicit Connection(tcp::socket s) : socket(std::move(s)), fd(socket.native_handle()) {}
  tcp::socket socket;
  int fd;
  std::string source;  // the peer's address, without its port
  std::thread thread;
  bool done = false;  // guarded by BeastServer::mu_
};

class BeastServer final : public Server {
 public:
  BeastServer(Handler handler, ServerOptions options, SslCtxPtr ssl_ctx)
      : handler_(std::move(handler)), options_(std::move(options)), ssl_ctx_(std::move(ssl_ctx)) {}
  ~BeastServer() override { Stop(); }

  Status Listen(const tcp::endpoint& endpoint, const std::string& listen) {
    error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    // Lets a restarted server take its port back while old connections sit
    // in TIME_WAIT; it does not allow two live listeners on one port.
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (!ec) port_ = acceptor_.local_endpoint(ec).port();
    if (ec) return Unavailable("cannot listen on '" + listen + "': " + ec.message());
    Accept();
    io_thread_ = std::thread([this] { ioc_.run(); });
    return Status::Ok();
  }

  uint16_t port() const override { return port_; }

  void Stop() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    // The acceptor and the rejections belong to the io thread: close them
    // there; run() returns once their cancelled handlers have run.
    net::post(ioc_, [this] {
      error_code ec;
      acceptor_.close(ec);
      retry_timer_.cancel();
      for (auto& rejection : rejecting_) rejection->stream.socket().close(ec);
    });
    if (io_thread_.joinable()) io_thread_.join();

    std::map<uint64_t, std::unique_ptr<Connection>> connections;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, connection] : connections_) {
        if (!connection->done) ::shutdown(connection->fd, SHUT_RDWR);
      }
      connections.swap(connections_);
    }
    // A handler still running is waited for; a stream sees its writer fail.
    for (auto& [id, connection] : connections) connection->thread.join();
  }

 private:
  // Everything below up to Serve() runs on the io thread.
  void Accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
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
    std::vector<std::unique_ptr<Connection>> finished;
    bool reject = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint64_t id : finished_) {
        auto it = connections_.find(id);
        if (it == connections_.end()) continue;
        finished.push_back(std::move(it->second));
        connections_.erase(it);
      }
      finished_.clear();
      error_code ep_ec;
      auto ep = socket.remote_endpoint(ep_ec);
      std::string source = ep_ec ? std::string() : ep.address().to_string();
      if (stopping_) {
        // `socket` closes on return.
      } else if (active_ >= options_.max_connections ||
                 (options_.max_connections_per_source > 0 && per_source_[source] >= options_.max_connections_per_source)) {
        // Past the limit, or one address holding its share: slow clients
        // from one place cannot take every connection.
        reject = ssl_ctx_ == nullptr;  // a TLS client cannot read a plaintext 503: just close
      } else {
        auto connection = std::make_unique<Connection>(std::move(socket));
        connection->source = source;
        ++per_source_[source];
        Connection* raw = connection.get();
        const uint64_t id = next_id_++;
        try {
          // Serve() ends by taking mu_, so it cannot finish before the emplace.
          raw->thread = std::thread([this, raw, id] { Serve(raw, id); });
          connections_.emplace(id, std::move(connection));
          ++active_;
        } catch (const std::system_error&) {
          // Out of threads: the socket closes with `connection`.
        }
      }
    }
    // Finished threads have returned or are about to: joining is quick.
    for (auto& connection : finished) connection->thread.join();
    if (reject) Reject(std::move(socket));
  }

  void Reject(tcp::socket socket) {
    if (rejecting_.size() >= kMaxRejecting) return;  // closes `socket`
    rejecting_.push_front(std::make_unique<Rejection>(std::move(socket)));
    auto it = rejecting_.begin();
    Rejection& r = **it;
    // Read the request before answering: closing a socket with unread data
    // resets it, and the client would never see the 503.
    r.parser.body_limit(options_.max_body_bytes);
    r.stream.expires_after(kRejectTimeout);
    bhttp::async_read(r.stream, r.buffer, r.parser, [this, it](error_code ec, size_t) {
      if (ec == net::error::operation_aborted) return void(rejecting_.erase(it));
      Rejection& rej = **it;
      Response error = ErrorResponse(Unavailable(
          "server is at its limit of " + std::to_string(options_.max_connections) +
          " connections"));
      rej.response.result(bhttp::status::service_unavailable);
      rej.response.set(bhttp::field::content_type, error.content_type);
      rej.response.keep_alive(false);
      rej.response.body() = error.body;
      rej.response.prepare_payload();
      rej.stream.expires_after(kRejectTimeout);
      bhttp::async_write(rej.stream, rej.response, [this, it](error_code, size_t) {
        error_code ignored;
        (*it)->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
        (*it)->stream.socket().close(ignored);
        rejecting_.erase(it);
      });
    });
  }

  // The connection thread.
  void Serve(Connection* connection, uint64_t id) {
    // OpenSSL writes with write(2), which raises SIGPIPE when the peer is
    // gone: blocked on this thread, the write fails with EPIPE instead.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    try {
      ServeRequests(connection->socket);
    } catch (...) {  // only allocation failures: drop the connection, keep the process
    }
    std::lock_guard<std::mutex> lock(mu_);
    error_code ec;
    connection->socket.close(ec);
    connection->done = true;
    finished_.push_back(id);
    --active_;
    if (auto it = per_source_.find(connection->source); it != per_source_.end() && --it->second <= 0) {
      per_source_.erase(it);
    }
  }

  void ServeRequests(tcp::socket& socket) {
    error_code ec;
    socket.non_blocking(true, ec);
    if (ec) return;
    SslPtr ssl(nullptr, &SSL_free);
    if (ssl_ctx_ != nullptr) {
      ssl.reset(SSL_new(ssl_ctx_.get()));
      if (!ssl || SSL_set_fd(ssl.get(), socket.native_handle()) != 1) {
        ERR_clear_error();
        return;
      }
    }
    SocketStream stream(socket, ssl.get());
    if (ssl && !stream.Handshake(Clock::now() + kHandshakeTimeout, ec)) return;
    struct TlsCloser {
      SocketStream& stream;
      ~TlsCloser() { stream.ShutdownTls(); }
    } closer{stream};
    beast::flat_buffer buffer;
    std::string remote;
    if (auto ep = socket.remote_endpoint(ec); !ec) {
      remote = ep.address().is_v6() ? "[" + ep.address().to_string() + "]:" + std::to_string(ep.port())
                                    : ep.address().to_string() + ":" + std::to_string(ep.port());
    }
    ec = {};
    for (;;) {
      bhttp::request_parser<bhttp::string_body> parser;
      parser.body_limit(options_.max_body_bytes);
      parser.header_limit(kMaxHeaderBytes);
      stream.set_read_deadline(Clock::now() + kReadTimeout);
      bhttp::read_header(stream, buffer, parser, ec);
      if (!ec && !parser.is_done()) {
        const auto& header = parser.get();
        if (header.version() >= 11 &&
            beast::iequals(header[bhttp::field::expect], "100-continue")) {
          bhttp::response<bhttp::empty_body> go_on{bhttp::status::continue_, 11};
          bhttp::write(stream, go_on, ec);
        }
        if (!ec) bhttp::read(stream, buffer, parser, ec);
      }
      if (ec) {
        if (ec.category() != bhttp::make_error_code(bhttp::error::body_limit).category() ||
            ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message) {
          return;  // the client left or timed out: nobody to answer
        }
        WriteResponse(stream, ParseErrorResponse(ec), 11, false);
        Linger(socket, stream);
        return;
      }

      bhttp::request<bhttp::string_body> request = parser.release();
      const bool keep_alive = request.keep_alive();
      const unsigned version = request.version();
      Response response = Dispatch(std::move(request), remote, ssl != nullptr);
      bool written = response.stream ? WriteStreamed(stream, response, version, keep_alive)
                                     : WriteResponse(stream, response, version, keep_alive);
      if (!written) return;
      if (!keep_alive) {
        stream.ShutdownTls();
        socket.shutdown(tcp::socket::shutdown_send, ec);
        return;
      }
    }
  }

  Response ParseErrorResponse(error_code ec) const {
    if (ec == bhttp::error::body_limit) {
      return ErrorWithHttpStatus(413, Code::kResourceExhausted,
                                 "request body is larger than " +
                                     std::to_string(options_.max_body_bytes) + " bytes");
    }
    if (ec == bhttp::error::header_limit) {
      return ErrorWithHttpStatus(431, Code::kInvalidArgument,
                                 "request headers are larger than " +
                                     std::to_string(kMaxHeaderBytes) + " bytes");
    }
    return ErrorResponse(InvalidArgument("malformed http request: " + ec.message()));
  }

  Response Dispatch(bhttp::request<bhttp::string_body> message, const std::string& remote, bool tls) {
    Request request;
    request.remote = remote;
    request.tls = tls;
    request.method = ToString(message.method_string());
    const std::string_view target(message.target().data(), message.target().size());
    size_t question = target.find('?');
    request.path = std::string(target.substr(0, question));
    if (question != std::string_view::npos) {
      auto query = ParseQuery(target.substr(question + 1));
      if (!query.ok()) return ErrorResponse(query.status());
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
    try {
      return handler_(request);
    } catch (const std::exception& e) {
      return ErrorResponse(Internal("handler failed: " + std::string(e.what())));
    } catch (...) {
      return ErrorResponse(Internal("handler failed with a non-standard exception"));
    }
  }

  template <typename Message>
  static void SetHeaders(Message& message, const Response& response, bool keep_alive) {
    const int code = response.status >= 100 && response.status <= 999 ? response.status : 500;
    message.result(static_cast<unsigned>(code));
    message.set(bhttp::field::server, "drover");
    if (!response.content_type.empty()) {
      message.set(bhttp::field::content_type, response.content_type);
    }
    for (const auto& [name, value] : response.headers) message.set(name, value);
    message.keep_alive(keep_alive);
  }

  static bool WriteResponse(SocketStream& stream, const Response& response, unsigned version,
                            bool keep_alive) {
    bhttp::response<bhttp::string_body> message;
    message.version(version);
    SetHeaders(message, response, keep_alive);
    message.body() = response.body;
    message.prepare_payload();
    error_code ec;
    bhttp::write(stream, message, ec);
    return !ec;
  }

  // Chunked for HTTP/1.1; HTTP/1.0 has no chunks, so the body there simply
  // ends when the connection closes.
  static bool WriteStreamed(SocketStream& stream, const Response& response, unsigned version,
                            bool keep_alive) {
    const bool chunked = version >= 11;
    bhttp::response<bhttp::empty_body> message;
    message.version(version);
    SetHeaders(message, response, chunked && keep_alive);
    if (chunked) message.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> serializer{message};
    error_code ec;
    bhttp::write_header(stream, serializer, ec);
    if (ec) return false;
    bool alive = true;
    ChunkWriter writer = [&](std::string_view data) {
      if (!alive) return false;
      if (data.empty()) return true;  // an empty chunk would end the body
      net::const_buffer bytes(data.data(), data.size());
      error_code write_ec;
      if (chunked) {
        net::write(stream, bhttp::make_chunk(bytes), write_ec);
      } else {
        net::write(stream, bytes, write_ec);
      }
      alive = !write_ec;
      return alive;
    };
    try {
      response.stream(writer);
    } catch (...) {
      // Too late for a 500: end without the last chunk, so the client sees a
      // truncated body rather than a complete one.
      return false;
    }
    if (alive && chunked) net::write(stream, bhttp::make_chunk_last(), ec);
    return alive && chunked && !ec && keep_alive;
  }

  // Half-closes, then discards what the client still sends for a while.
  static void Linger(tcp::socket& socket, SocketStream& stream) {
    error_code ec;
    stream.ShutdownTls();
    socket.shutdown(tcp::socket::shutdown_send, ec);
    stream.set_read_deadline(Clock::now() + kLingerTimeout);
    char scratch[16 << 10];
    uint64_t total = 0;
    while (total < kMaxLingerBytes) {
      size_t n = stream.read_some(net::buffer(scratch), ec);
      if (ec) return;
      total += n;
    }
  }

  const Handler handler_;
  const ServerOptions options_;
  const SslCtxPtr ssl_ctx_;  // null: plaintext; SSL_CTX is thread-safe once set up
  net::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};       // io thread (and Listen() before it starts)
  net::steady_timer retry_timer_{ioc_};  // io thread
  std::list<std::unique_ptr<Rejection>> rejecting_;  // io thread
  std::thread io_thread_;
  uint16_t port_ = 0;

  std::mutex mu_;
  bool stopping_ = false;                                    // guarded by mu_
  int active_ = 0;                                           // guarded by mu_
  std::map<std::string, int> per_source_;                    // guarded by mu_: open connections by peer address
  uint64_t next_id_ = 0;                                     // guarded by mu_
  std::map<uint64_t, std::unique_ptr<Connection>> connections_;  // guarded by mu_
  std::vector<uint64_t> finished_;                           // guarded by mu_
};

}  // namespace

Result<std::unique_ptr<Server>> StartServer(const std::string& listen, Handler handler,
                                            ServerOptions options) {
  if (!handler) return InvalidArgument("http server on '" + listen + "' has no handler");
  if (options.max_connections < 1) {
    return InvalidArgument("http server max_connections must be at least 1, got " +
                           std::to_string(options.max_connections));
  }
  DROVER_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ParseListen(listen));
  SslCtxPtr ssl_ctx(nullptr, &SSL_CTX_free);
  if (!options.tls_cert_pem.empty() || !options.tls_key_pem.empty()) {
    DROVER_ASSIGN_OR_RETURN(ssl_ctx, MakeServerContext(options.tls_cert_pem, options.tls_key_pem));
  }
  auto server = std::make_unique<BeastServer>(std::move(handler), std::move(options), std::move(ssl_ctx));
  DROVER_RETURN_IF_ERROR(server->Listen(endpoint, listen));
  return std::unique_ptr<Server>(std::move(server));
}

Response ErrorResponse(const Status& status) {
  nlohmann::json body = {{"code", static_cast<int>(status.code())},
                         {"status", GrpcName(status.code())},
                         {"message", status.message()}};
  Response response;
  response.status = HttpStatusFor(status.code());
  response.content_type = "application/json";
  // Messages may quote user input that is not UTF-8; replace rather than throw.
  response.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return response;
}

}  // namespace drover::http
