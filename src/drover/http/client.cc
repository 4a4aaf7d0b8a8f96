#include "drover/http/client.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <chrono>
#include <optional>
#include <utility>

namespace drover::http {

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

// Bounds the whole exchange, so that a test against a broken server fails
// instead of hanging.
constexpr std::chrono::seconds kTimeout{30};
// A connection not made in this long fails (a server whose machine is cut
// off): a caller with several servers goes on to the next.
constexpr std::chrono::seconds kConnectTimeout{5};
// The stages once the request has begun to go out (MayHaveArrived).
constexpr const char* kSendingTo = "sending to";
constexpr const char* kReadingFrom = "reading from";
constexpr uint64_t kMaxResponseBytes = 256ULL << 20;

std::string ToString(beast::string_view text) { return std::string(text.data(), text.size()); }

struct HostPort {
  std::string host;
  std::string port;
};

Result<HostPort> SplitHostPort(const std::string& host_port) {
  HostPort result;
  size_t colon;
  if (host_port.starts_with("[")) {
    size_t close = host_port.find(']');
    if (close == std::string::npos || close + 1 >= host_port.size() || host_port[close + 1] != ':') {
      return InvalidArgument("address '" + host_port + "' is not [host]:port");
    }
    result.host = host_port.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument("address '" + host_port + "' is not host:port");
    }
    result.host = host_port.substr(0, colon);
  }
  result.port = host_port.substr(colon + 1);
  if (result.port.empty()) return InvalidArgument("address '" + host_port + "' has no port");
  return result;
}

bool IsIpLiteral(const std::string& host) {
  error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

// A client TLS context that trusts only `tls.ca_pem` and checks that the
// server's certificate names the host dialled (or tls.server_name).
Result<std::unique_ptr<net::ssl::context>> ClientContext(const ClientTls& tls) {
  auto ctx = std::make_unique<net::ssl::context>(net::ssl::context::tls_client);
  error_code ec;
  ctx->set_options(net::ssl::context::no_sslv2 | net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                       net::ssl::context::no_tlsv1_1,
                   ec);
  if (!ec) ctx->add_certificate_authority(net::buffer(tls.ca_pem), ec);
  if (!ec && !tls.cert_pem.empty()) ctx->use_certificate_chain(net::buffer(tls.cert_pem), ec);
  if (!ec && !tls.key_pem.empty()) ctx->use_private_key(net::buffer(tls.key_pem), net::ssl::context::pem, ec);
  if (ec) return InvalidArgument("tls client: " + ec.message());
  ctx->set_verify_mode(net::ssl::verify_peer);
  return ctx;
}

Result<ClientResponse> Exchange(const ClientTls* tls, const std::string& host_port, const std::string& method,
                                const std::string& target, const std::string& body, const std::string& content_type,
                                const std::map<std::string, std::string>& headers,
                                const std::function<bool(std::string_view)>* on_body);

}  // namespace

Result<ClientResponse> HttpRequest(const std::string& host_port, const std::string& method, const std::string& target,
                                   const std::string& body, const std::string& content_type,
                                   const std::map<std::string, std::string>& headers) {
  return HttpsRequest(nullptr, host_port, method, target, body, content_type, headers);
}

Result<ClientResponse> HttpsRequest(const ClientTls* tls, const std::string& host_port, const std::string& method,
                                    const std::string& target, const std::string& body, const std::string& content_type,
                                    const std::map<std::string, std::string>& headers) {
  return Exchange(tls, host_port, method, target, body, content_type, headers, nullptr);
}

Result<ClientResponse> HttpsStream(const ClientTls* tls, const std::string& host_port, const std::string& method,
                                   const std::string& target, const std::string& body, const std::string& content_type,
                                   const std::map<std::string, std::string>& headers,
                                   const std::function<bool(std::string_view)>& on_body) {
  return Exchange(tls, host_port, method, target, body, content_type, headers, &on_body);
}

namespace {

Result<ClientResponse> Exchange(const ClientTls* tls, const std::string& host_port, const std::string& method,
                                const std::string& target, const std::string& body, const std::string& content_type,
                                const std::map<std::string, std::string>& headers,
                                const std::function<bool(std::string_view)>* on_body) {
  DROVER_ASSIGN_OR_RETURN(HostPort address, SplitHostPort(host_port));
  std::unique_ptr<net::ssl::context> ssl_ctx;
  if (tls != nullptr) {
    DROVER_ASSIGN_OR_RETURN(ssl_ctx, ClientContext(*tls));
  }
  const bhttp::verb verb = bhttp::string_to_verb(method);
  if (verb == bhttp::verb::unknown) {
    return InvalidArgument("unknown http method '" + method + "'");
  }

  // Asynchronous operations on a private io_context, run to completion here:
  // the only way to put a deadline on Beast's reads and writes.
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream plain(ioc);
  std::optional<beast::ssl_stream<beast::tcp_stream&>> secure;
  if (tls != nullptr) {
    secure.emplace(plain, *ssl_ctx);
    const std::string& name = tls->server_name.empty() ? address.host : tls->server_name;
    secure->set_verify_callback(net::ssl::host_name_verification(name));
    // SNI for names only (RFC 6066 forbids IP literals).
    if (!IsIpLiteral(name)) {
      SSL_ctrl(secure->native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(name.c_str()));
    }
  }
  beast::flat_buffer buffer;
  // Reads are sized by the buffer's free space, at least 512 bytes: a
  // buffer left that small read a 550 KB page of jobs in 1,000 reads, each
  // with its own timer and epoll round (30 ms here).
  buffer.reserve(64 * 1024);
  bhttp::request<bhttp::string_body> request{verb, target, 11};
  request.set(bhttp::field::host, host_port);
  request.set(bhttp::field::user_agent, "drover-http-client");
  request.keep_alive(false);
  for (const auto& [name, value] : headers) request.set(name, value);
  if (!body.empty() || verb == bhttp::verb::post || verb == bhttp::verb::put || verb == bhttp::verb::patch) {
    if (!content_type.empty()) request.set(bhttp::field::content_type, content_type);
    request.body() = body;
    request.prepare_payload();
  }
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxResponseBytes);

  error_code failure;
  const char* stage = "resolving";
  // Live until ioc.run() returns. pump, for streams: reads and hands over
  // what came, until the end.
  std::function<void()> read_rest, pump;
  auto exchange = [&](auto& stream) {
    stage = kSendingTo;
    bhttp::async_write(stream, request, [&](error_code write_ec, size_t) {
      if (write_ec) return void(failure = write_ec);
      stage = kReadingFrom;
      read_rest = [&] { bhttp::async_read(stream, buffer, parser, [&](error_code ec, size_t) { failure = ec; }); };
      if (on_body == nullptr) return read_rest();
      bhttp::async_read_header(stream, buffer, parser, [&](error_code header_ec, size_t) {
        if (header_ec) return void(failure = header_ec);
        if (parser.get().result_int() / 100 != 2) return read_rest();
        plain.expires_never();
        parser.body_limit(boost::none);
        pump = [&] {
          if (parser.is_done()) return;
          bhttp::async_read_some(stream, buffer, parser, [&](error_code ec, size_t) {
            std::string& piece = parser.get().body();
            bool more = piece.empty() || (*on_body)(piece);
            piece.clear();
            if (!more || ec == bhttp::error::end_of_stream) return;
            if (ec) return void(failure = ec);
            pump();
          });
        };
        pump();
      });
    });
  };
  plain.expires_after(kConnectTimeout);
  auto on_connected = [&](error_code connect_ec) {
    if (connect_ec) return void(failure = connect_ec);
    plain.expires_after(kTimeout);
    if (!secure) return exchange(plain);
    stage = "tls handshake with";
    secure->async_handshake(net::ssl::stream_base::client, [&](error_code hs_ec) {
      if (hs_ec) return void(failure = hs_ec);
      exchange(*secure);
    });
  };
  // An address needs no resolver (whose first use starts a thread, and
  // whose end waits for it: a millisecond or more of a CLI's run).
  error_code literal_ec;
  net::ip::address literal = net::ip::make_address(address.host, literal_ec);
  uint16_t port = 0;
  auto [port_end, port_ec] = std::from_chars(address.port.data(), address.port.data() + address.port.size(), port);
  if (!literal_ec && port_ec == std::errc() && port_end == address.port.data() + address.port.size()) {
    stage = "connecting to";
    plain.async_connect(tcp::endpoint(literal, port), on_connected);
  } else {
    resolver.async_resolve(address.host, address.port, [&](error_code ec, tcp::resolver::results_type results) {
      if (ec) return void(failure = ec);
      stage = "connecting to";
      plain.async_connect(results, [&](error_code connect_ec, const tcp::endpoint&) { on_connected(connect_ec); });
    });
  }
  ioc.run();
  if (failure) {
    return Unavailable(std::string("http ") + method + " " + target + ": " + stage + " '" + host_port +
                       "' failed: " + failure.message());
  }

  const auto& message = parser.get();
  ClientResponse response;
  response.status = static_cast<int>(message.result_int());
  for (const auto& field : message) {
    std::string name = ToString(field.name_string());
    for (char& c : name) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    std::string value = ToString(field.value());
    auto [it, inserted] = response.headers.emplace(std::move(name), value);
    if (!inserted) it->second += ", " + value;
  }
  response.body = message.body();
  error_code ignored;
  plain.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return response;
}

}  // namespace

bool MayHaveArrived(const Status& failed) {
  if (failed.ok() || failed.code() != Code::kUnavailable) return !failed.ok();
  const std::string& m = failed.message();
  return m.find(std::string(": ") + kSendingTo + " '") != std::string::npos ||
         m.find(std::string(": ") + kReadingFrom + " '") != std::string::npos;
}

}  // namespace drover::http
