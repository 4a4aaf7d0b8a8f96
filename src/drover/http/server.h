#pragma once
// A small HTTP/1.1 server (Boost.Beast on Asio) that hands each request to
// one handler function. The REST API, health checks, metrics, the dashboard
// and server-sent events are handlers on it.
//
// Threading: ServerOptions::io_threads threads run one io_context that does
// all socket work asynchronously (accept, TLS handshake, read, write): no
// thread per connection, so thousands of idle or slow clients cost memory,
// not threads. Handlers may block (they wait on the control loop), so they
// run on a bounded pool of ServerOptions::handler_threads workers, never on
// an I/O thread; the handler is called concurrently and must be thread-safe.
// With a certificate (ServerOptions::tls_cert_pem) it serves HTTPS.
//
// Every wait has a deadline (see ServerOptions): a client that sends its
// header a byte at a time, never reads its response or idles on keep-alive
// is closed. Stop() closes the listener and every connection, ends every
// stream (StreamSink::OnClosed fires) and joins all threads.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/common/status.h"

namespace drover::http {

struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // "/api/v1/jobs" (no query)
  std::map<std::string, std::string> query;    // decoded ?a=b&c=d
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string remote;  // the peer, "ip:port"
  bool tls = false;    // arrived over TLS
};

// Writes one chunk of a streamed body; returns false when the client is gone.
using ChunkWriter = std::function<bool(std::string_view)>;

// A response body written over time, from any thread (thread-safe). The
// server owns the connection; the sink is only a handle to it and stays
// valid memory for as long as a producer holds it, even after the stream
// ended or the server stopped (then every call is a harmless no-op).
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Queues a chunk (an empty one is ignored); false once the client is
  // gone, the server stops, Close() was called, or more than
  // ServerOptions::max_stream_buffer_bytes would wait unsent: then the
  // stream is closed, so a slow reader never grows memory without bound.
  virtual bool Write(std::string chunk) = 0;
  // Write, and `on_sent` runs once the chunk has gone out to the client (on
  // a server thread; it must not block), so that a producer can pace itself
  // by the client (log follow). It does not run when the stream ends first.
  virtual bool WriteThen(std::string chunk, std::function<void()> on_sent) = 0;
  // Ends the response (the last chunk goes after what is queued).
  virtual void Close() = 0;
  // `fn` runs once when the stream ends for any reason other than Close()
  // (client gone, server stopping, buffer overflow, write deadline), on a
  // server thread; if the stream has already ended it runs at once on the
  // calling thread. Set it before the first Write. It must not block.
  virtual void OnClosed(std::function<void()> fn) = 0;
};

struct Response {
  // Not an aggregate (it has more members than the five callers list), so
  // the positional form `Response{200, "text/plain", body, {}, {}}` is a
  // constructor.
  Response() = default;
  Response(int status_code, std::string type, std::string text = {},
           std::map<std::string, std::string> extra_headers = {},
           std::function<void(const ChunkWriter&)> blocking_stream = {})
      : status(status_code),
        content_type(std::move(type)),
        body(std::move(text)),
        headers(std::move(extra_headers)),
        stream(std::move(blocking_stream)) {}

  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
  // Deprecated in favour of async_stream: it holds a handler thread for the
  // whole stream. When set, the body is streamed with chunked encoding: the
  // server calls stream(writer) on a handler thread and ends the response
  // when it returns (the pool grows by one thread while it runs, up to
  // ServerOptions::max_blocking_streams, so ordinary requests still run).
  std::function<void(const ChunkWriter&)> stream;
  // When set, the status and headers are sent at once and the body is
  // chunked (HTTP/1.0: unframed, ending when the connection closes); the
  // server calls async_stream(sink) once, on a handler thread, and moves
  // on; the producer writes later from any thread and ends with Close().
  // The connection closes after a streamed response (no keep-alive).
  std::function<void(std::shared_ptr<StreamSink>)> async_stream;
};

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  int io_threads = 2;       // threads doing socket work
  int handler_threads = 8;  // threads calling the handler
  // Requests waiting for a free handler thread; more get 503 at once
  // (0: only when a handler thread is idle).
  int max_queued_requests = 1024;
  // Deprecated Response::stream calls running at once; more get 503.
  int max_blocking_streams = 256;

  size_t max_header_bytes = 16 << 10;  // the request line and header; larger get 431
  size_t max_body_bytes = 1 << 20;     // larger bodies get 413
  // Bytes of an async stream queued but not yet sent; past it the stream is closed.
  size_t max_stream_buffer_bytes = 4 << 20;

  // Open connections in all, and from one peer address (0: no limit). A
  // connection past either is turned away: a request for one of
  // health_paths gets its real answer, any other 503 (both then close). At
  // most 64 are turned away at once; a newcomer past that closes the
  // oldest one that is not a health check being answered, so a flood of
  // slow connections from one address keeps no health check from answering.
  int max_connections = 20000;
  int max_connections_per_source = 64;
  std::vector<std::string> health_paths = {"/healthz", "/readyz"};

  // Deadlines (milliseconds). A whole request header (and on a new
  // connection the TLS handshake) must arrive within header_timeout of its
  // first byte (of the connection), so a client that trickles bytes is
  // closed; its body within body_timeout of the header; the next request
  // of a keep-alive connection begins within idle_timeout; a write (one
  // response, or one batch of a stream) completes within write_timeout, so
  // a client that stops reading is closed.
  int64_t header_timeout_ms = 10'000;
  int64_t body_timeout_ms = 60'000;
  int64_t idle_timeout_ms = 60'000;
  int64_t write_timeout_ms = 30'000;

  // When set (PEM text: the certificate, then any intermediates; its key),
  // every connection is TLS (1.2 or newer) and Request::tls is true.
  // Connections over max_connections are then closed without an answer.
  std::string tls_cert_pem;
  std::string tls_key_pem;
};

class Server {
 public:
  virtual ~Server() = default;
  virtual uint16_t port() const = 0;
  virtual void Stop() = 0;
};

// `listen` is "host:port"; port 0 picks a free port (see port()).
Result<std::unique_ptr<Server>> StartServer(const std::string& listen, Handler handler, ServerOptions options = {});

// A JSON error body: {"code": 5, "status": "NOT_FOUND", "message": "..."}.
Response ErrorResponse(const Status& status);

}  // namespace drover::http
