#pragma once
// A tiny synchronous HTTP/1.1 client, for tests and command-line tools that
// talk to a Drover server: one request per connection, the whole response
// (chunked or not) read into memory.
//
// Thread-safe: each call has its own connection and state.

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover::http {

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

// Sends `method target` to `host_port` ("127.0.0.1:8080", "[::1]:8080",
// "localhost:8080") and waits for the response, at most 30 s (5 of them to
// connect). A response with any HTTP status is a success; kUnavailable
// means no response came (refused, reset, timed out, malformed),
// kInvalidArgument a bad host_port.
// `headers` are sent as given (e.g. Authorization, Origin, Host); an empty
// content_type sends none.
Result<ClientResponse> HttpRequest(const std::string& host_port, const std::string& method, const std::string& target,
                                   const std::string& body = "", const std::string& content_type = "application/json",
                                   const std::map<std::string, std::string>& headers = {});

// TLS for HttpsRequest: the server must present a certificate that chains to
// `ca_pem` and names the host dialled (or `server_name`); `cert_pem` and
// `key_pem` are an optional client certificate.
struct ClientTls {
  std::string ca_pem;
  std::string server_name;
  std::string cert_pem;
  std::string key_pem;
};
// HttpRequest over TLS (plaintext when `tls` is null). A failed handshake
// is kUnavailable, like a refused connection.
Result<ClientResponse> HttpsRequest(const ClientTls* tls, const std::string& host_port, const std::string& method,
                                    const std::string& target, const std::string& body = "",
                                    const std::string& content_type = "application/json",
                                    const std::map<std::string, std::string>& headers = {});

// HttpsRequest for a response that lasts (server-sent events): a 2xx
// response's body goes to `on_body` piece by piece as it arrives (the
// returned `body` stays empty), with no deadline once the response has
// begun; `on_body` returning false ends the exchange. Any other status is
// read whole into `body`, as HttpsRequest does.
// `body` (with `content_type`) may be empty.
Result<ClientResponse> HttpsStream(const ClientTls* tls, const std::string& host_port, const std::string& method,
                                   const std::string& target, const std::string& body, const std::string& content_type,
                                   const std::map<std::string, std::string>& headers,
                                   const std::function<bool(std::string_view)>& on_body);

// Whether a failed HttpsRequest or HttpsStream may have delivered its
// request: it failed once the request had begun to go out (while sending or
// reading the answer), not while resolving, connecting or in the TLS
// handshake. A request that did not arrive may be sent to another server.
bool MayHaveArrived(const Status& failed);

}  // namespace drover::http
