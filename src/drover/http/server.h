#pragma once
// A small HTTP/1.1 server (Boost.Beast) that hands each request to one
// handler function. The REST API, health checks and (later) the dashboard
// and metrics are handlers on it.
//
// Threading: one acceptor thread and one thread per connection (bounded by
// Options::max_connections); the handler is called concurrently and must be
// thread-safe. With a certificate (ServerOptions::tls_cert_pem) it serves
// HTTPS: the TLS handshake runs on the connection's thread. Stop() closes the listener and every connection and joins all
// threads.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // "/api/v1/jobs" (no query)
  std::map<std::string, std::string> query;  // decoded ?a=b&c=d
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string remote;  // the peer, "ip:port"
  bool tls = false;    // arrived over TLS
};

// Writes one chunk of a streamed body; returns false when the client is gone.
using ChunkWriter = std::function<bool(std::string_view)>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::map<std::string, std::string> headers;
  // When set, the body is streamed with chunked encoding: the server calls
  // stream(writer) and ends the response when it returns.
  std::function<void(const ChunkWriter&)> stream;
};

using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int max_connections = 256;        // more get 503
  // Open connections from one peer address; more get 503 (0: no limit).
  int max_connections_per_source = 64;
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
Result<std::unique_ptr<Server>> StartServer(const std::string& listen, Handler handler,
                                            ServerOptions options = {});

// A JSON error body: {"code": 5, "status": "NOT_FOUND", "message": "..."}.
Response ErrorResponse(const Status& status);

}  // namespace drover::http
