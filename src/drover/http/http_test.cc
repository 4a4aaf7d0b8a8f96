#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <future>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "drover/http/client.h"
#include "drover/http/server.h"

namespace drover::http {
namespace {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using ::testing::HasSubstr;

// Describes the request back, so tests can see what the handler saw.
Response Echo(const Request& request) {
  nlohmann::json query = nlohmann::json::object();
  for (const auto& [key, value] : request.query) query[key] = value;
  nlohmann::json headers = nlohmann::json::object();
  for (const auto& [key, value] : request.headers) headers[key] = value;
  Response response;
  response.body = nlohmann::json{{"method", request.method},
                                 {"path", request.path},
                                 {"query", query},
                                 {"headers", headers},
                                 {"body", request.body}}
                      .dump();
  response.headers["X-Drover-Test"] = "yes";
  return response;
}

std::unique_ptr<Server> StartOrDie(Handler handler, ServerOptions options = {}) {
  auto server = StartServer("127.0.0.1:0", std::move(handler), options);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  if (!server.ok()) return nullptr;
  EXPECT_NE((*server)->port(), 0);
  return std::move(*server);
}

std::string Address(const Server& server) { return "127.0.0.1:" + std::to_string(server.port()); }

// A raw keep-alive connection, for what HttpRequest (one request per
// connection) cannot do.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(net::ip::address_v4::loopback(), port));
  }
  bhttp::response<bhttp::string_body> Get(const std::string& target) {
    bhttp::request<bhttp::empty_body> request{bhttp::verb::get, target, 11};
    request.set(bhttp::field::host, "test");
    bhttp::write(socket_, request);
    bhttp::response<bhttp::string_body> response;
    bhttp::read(socket_, buffer_, response);
    return response;
  }
  tcp::socket& socket() { return socket_; }
  boost::beast::flat_buffer& buffer() { return buffer_; }

 private:
  net::io_context ioc_;
  tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

TEST(HttpServerTest, RoutesRequestsToTheHandler) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "POST", "/api/v1/jobs", R"({"name":"x"})");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["content-type"], "application/json");
  EXPECT_EQ(response->headers["x-drover-test"], "yes");
  auto echoed = nlohmann::json::parse(response->body);
  EXPECT_EQ(echoed["method"], "POST");
  EXPECT_EQ(echoed["path"], "/api/v1/jobs");
  EXPECT_EQ(echoed["body"], R"({"name":"x"})");
  // Header names arrive lower-case whatever the client sent.
  EXPECT_EQ(echoed["headers"]["content-type"], "application/json");
  EXPECT_EQ(echoed["headers"]["user-agent"], "drover-http-client");
}

TEST(HttpServerTest, DecodesTheQueryString) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  auto response =
      HttpRequest(Address(*server), "GET", "/api/v1/jobs?state=running&name=a%20b%2Fc&q=x+y&flag");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  auto echoed = nlohmann::json::parse(response->body);
  EXPECT_EQ(echoed["path"], "/api/v1/jobs");
  EXPECT_EQ(echoed["query"],
            (nlohmann::json{{"state", "running"}, {"name", "a b/c"}, {"q", "x y"}, {"flag", ""}}));

  auto bad = HttpRequest(Address(*server), "GET", "/api/v1/jobs?name=%zz");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->status, 400);
}

TEST(HttpServerTest, OversizedBodyGets413) {
  ServerOptions options;
  options.max_body_bytes = 1024;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  auto fits = HttpRequest(Address(*server), "POST", "/x", std::string(1024, 'a'));
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->status, 200);

  // Larger than the socket buffers, so the server must read past its answer.
  auto response = HttpRequest(Address(*server), "POST", "/x", std::string(4 << 20, 'a'));
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 413);
  auto error = nlohmann::json::parse(response->body);
  EXPECT_EQ(error["status"], "RESOURCE_EXHAUSTED");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("1024"));
}

TEST(HttpServerTest, ErrorResponseCarriesCodeAndName) {
  auto server = StartOrDie(
      [](const Request&) { return ErrorResponse(NotFound("job 'j-000042' not found")); });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/api/v1/jobs/j-000042");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->headers["content-type"], "application/json");
  auto error = nlohmann::json::parse(response->body);
  EXPECT_EQ(error, (nlohmann::json{{"code", 5},
                                   {"status", "NOT_FOUND"},
                                   {"message", "job 'j-000042' not found"}}));
}

TEST(HttpServerTest, ErrorResponseSurvivesInvalidUtf8) {
  Response response = ErrorResponse(InvalidArgument("bad name '\xff'"));
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(nlohmann::json::parse(response.body)["status"], "INVALID_ARGUMENT");
}

TEST(HttpServerTest, StreamsWithChunkedEncoding) {
  auto server = StartOrDie([](const Request&) {
    Response response;
    response.content_type = "text/event-stream";
    response.stream = [](const ChunkWriter& write) {
      for (const char* line : {"data: one\n\n", "", "data: two\n\n", "data: three\n\n"}) {
        if (!write(line)) return;
      }
    };
    return response;
  });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/api/v1/events");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(response->headers["content-type"], "text/event-stream");
  EXPECT_EQ(response->body, "data: one\n\ndata: two\n\ndata: three\n\n");
}

TEST(HttpServerTest, StreamWriterReportsADepartedClient) {
  std::promise<int> writes_before_failure;
  auto server = StartOrDie([&](const Request&) {
    Response response;
    response.stream = [&](const ChunkWriter& write) {
      int writes = 0;
      while (write(std::string(4096, 'x'))) ++writes;
      writes_before_failure.set_value(writes);
    };
    return response;
  });
  ASSERT_NE(server, nullptr);
  {
    RawConnection client(server->port());
    bhttp::request<bhttp::empty_body> request{bhttp::verb::get, "/watch", 11};
    bhttp::write(client.socket(), request);
    bhttp::response_parser<bhttp::string_body> parser;
    bhttp::read_header(client.socket(), client.buffer(), parser);
    EXPECT_EQ(parser.get().result_int(), 200u);
  }  // closes with unread data: the server's next writes fail
  auto result = writes_before_failure.get_future();
  EXPECT_GE(result.get(), 0);  // returns at all: the writer said false
}

TEST(HttpServerTest, HandlerExceptionGives500AndServerLivesOn) {
  auto server = StartOrDie([](const Request& request) -> Response {
    if (request.path == "/boom") throw std::runtime_error("kaboom");
    Response response;
    response.body = "{}";
    return response;
  });
  ASSERT_NE(server, nullptr);
  auto response = HttpRequest(Address(*server), "GET", "/boom");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 500);
  auto error = nlohmann::json::parse(response->body);
  EXPECT_EQ(error["status"], "INTERNAL");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("kaboom"));

  auto after = HttpRequest(Address(*server), "GET", "/fine");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->status, 200);
}

TEST(HttpServerTest, MalformedRequestGets400) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  RawConnection client(server->port());
  net::write(client.socket(), net::buffer(std::string("THIS IS NOT HTTP\r\n\r\n")));
  bhttp::response<bhttp::string_body> response;
  bhttp::read(client.socket(), client.buffer(), response);
  EXPECT_EQ(response.result_int(), 400u);
  EXPECT_EQ(nlohmann::json::parse(response.body())["status"], "INVALID_ARGUMENT");
}

TEST(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  RawConnection client(server->port());
  for (const char* path : {"/a", "/b", "/c"}) {
    auto response = client.Get(path);
    EXPECT_EQ(response.result_int(), 200u);
    EXPECT_TRUE(response.keep_alive());
    EXPECT_EQ(nlohmann::json::parse(response.body())["path"], path);
  }
}

TEST(HttpServerTest, ConnectionsOverTheLimitGet503) {
  ServerOptions options;
  options.max_connections = 1;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  RawConnection holder(server->port());
  // Once answered, the holder's connection is certainly counted.
  ASSERT_EQ(holder.Get("/hold").result_int(), 200u);
  auto response = HttpRequest(Address(*server), "GET", "/more");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(response->status, 503);
  EXPECT_EQ(nlohmann::json::parse(response->body)["status"], "UNAVAILABLE");
  // The connection within the limit still works.
  EXPECT_EQ(holder.Get("/again").result_int(), 200u);
}

// Slow clients from one address hold at most their share of connections:
// past it, that address gets 503 while the server keeps serving.
TEST(HttpServerTest, ConnectionsPerSourceAreCapped) {
  ServerOptions options;
  options.max_connections = 100;
  options.max_connections_per_source = 2;
  auto server = StartOrDie(Echo, options);
  ASSERT_NE(server, nullptr);
  RawConnection a(server->port());
  RawConnection b(server->port());
  ASSERT_EQ(a.Get("/a").result_int(), 200u);
  ASSERT_EQ(b.Get("/b").result_int(), 200u);
  auto third = HttpRequest(Address(*server), "GET", "/c");
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(third->status, 503);
  EXPECT_EQ(a.Get("/again").result_int(), 200u);
}

TEST(HttpServerTest, StopClosesOpenConnectionsAndIsIdempotent) {
  auto server = StartOrDie(Echo);
  ASSERT_NE(server, nullptr);
  const std::string address = Address(*server);
  RawConnection client(server->port());
  ASSERT_EQ(client.Get("/").result_int(), 200u);
  // The connection thread now waits for a next request that never comes.
  server->Stop();
  boost::system::error_code ec;
  char byte;
  client.socket().read_some(net::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, net::error::eof);
  server->Stop();
  EXPECT_FALSE(HttpRequest(address, "GET", "/").ok());
  server.reset();  // the destructor stops again
}

TEST(HttpServerTest, ListensOnIpv6Loopback) {
  auto server = StartServer("[::1]:0", Echo);
  if (!server.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << server.status().ToString();
  auto response = HttpRequest("[::1]:" + std::to_string((*server)->port()), "GET", "/v6");
  ASSERT_TRUE(response.ok()) << response.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(response->body)["path"], "/v6");
}

TEST(HttpServerTest, BadListenAddressesFailCleanly) {
  for (const char* listen : {"nonsense", "256.1.1.1:80", "127.0.0.1:99999", "127.0.0.1:",
                             "127.0.0.1:http", "::1:80", "[::1:80", "example.com:80"}) {
    auto server = StartServer(listen, Echo);
    ASSERT_FALSE(server.ok()) << listen;
    EXPECT_EQ(server.status().code(), Code::kInvalidArgument) << listen;
    EXPECT_THAT(server.status().message(), HasSubstr(listen));
  }
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  auto foreign = StartServer("192.0.2.1:0", Echo);
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), Code::kUnavailable);
  EXPECT_THAT(foreign.status().message(), HasSubstr("192.0.2.1:0"));

  auto first = StartOrDie(Echo);
  ASSERT_NE(first, nullptr);
  auto second = StartServer(Address(*first), Echo);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(Address(*first)));

  EXPECT_EQ(StartServer("127.0.0.1:0", nullptr).status().code(), Code::kInvalidArgument);
}

TEST(HttpClientTest, UnreachableServerIsUnavailable) {
  // Take a free port, then close it: nothing listens there.
  uint16_t port;
  {
    auto server = StartOrDie(Echo);
    ASSERT_NE(server, nullptr);
    port = server->port();
  }
  auto response = HttpRequest("127.0.0.1:" + std::to_string(port), "GET", "/");
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), Code::kUnavailable);
  EXPECT_THAT(response.status().message(), HasSubstr("127.0.0.1:"));
  EXPECT_EQ(HttpRequest("no-port", "GET", "/").status().code(), Code::kInvalidArgument);
}

// ---- TLS ----

namespace tls_test {

// A self-signed certificate for 127.0.0.1 and localhost, valid from an hour
// ago (made here, so that no checked-in certificate expires or starts in
// the future of a machine's clock).
struct SelfSigned {
  std::string cert_pem;
  std::string key_pem;
};

SelfSigned MakeSelfSigned() {
  SelfSigned out;
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  X509_add_ext(cert, san, -1);
  X509_EXTENSION_free(san);
  X509_sign(cert, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  out.cert_pem.assign(data, static_cast<size_t>(n));
  BIO_free(bio);
  bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  n = BIO_get_mem_data(bio, &data);
  out.key_pem.assign(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

const SelfSigned& Cert() {
  static const SelfSigned cert = MakeSelfSigned();
  return cert;
}

ServerOptions TlsOptions() {
  ServerOptions o;
  o.tls_cert_pem = Cert().cert_pem;
  o.tls_key_pem = Cert().key_pem;
  return o;
}

TEST(HttpsServerTest, ServesOverTlsAndSaysSo) {
  auto server = StartOrDie([](const Request& req) { return Response{200, "text/plain", req.tls ? "tls" : "plain", {}, {}}; },
                           TlsOptions());
  ASSERT_NE(server, nullptr);
  ClientTls tls{Cert().cert_pem, "", "", ""};
  for (int i = 0; i < 3; ++i) {
    auto r = HttpsRequest(&tls, Address(*server), "GET", "/");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "tls");
  }
  // By name too (the certificate names localhost).
  ClientTls by_name{Cert().cert_pem, "localhost", "", ""};
  EXPECT_TRUE(HttpsRequest(&by_name, Address(*server), "GET", "/").ok());
  // A name the certificate does not carry is refused by the client.
  ClientTls wrong{Cert().cert_pem, "other.example", "", ""};
  EXPECT_EQ(HttpsRequest(&wrong, Address(*server), "GET", "/").status().code(), Code::kUnavailable);
}

TEST(HttpsServerTest, StreamsOverTls) {
  auto server = StartOrDie(
      [](const Request&) {
        Response response;
        response.content_type = "text/event-stream";
        response.stream = [](const ChunkWriter& write) {
          std::string big(100000, 'x');
          for (const std::string& part : {std::string("data: one\n\n"), big, std::string("data: two\n\n")}) {
            if (!write(part)) return;
          }
        };
        return response;
      },
      TlsOptions());
  ASSERT_NE(server, nullptr);
  ClientTls tls{Cert().cert_pem, "", "", ""};
  auto r = HttpsRequest(&tls, Address(*server), "GET", "/events");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(r->body, "data: one\n\n" + std::string(100000, 'x') + "data: two\n\n");
}

TEST(HttpsServerTest, PlaintextClientGetsNoAnswer) {
  auto server = StartOrDie(Echo, TlsOptions());
  ASSERT_NE(server, nullptr);
  auto r = HttpRequest(Address(*server), "GET", "/");
  EXPECT_FALSE(r.ok() && r->status == 200);
  // And the server lives on.
  ClientTls tls{Cert().cert_pem, "", "", ""};
  EXPECT_TRUE(HttpsRequest(&tls, Address(*server), "GET", "/").ok());
}

TEST(HttpsServerTest, ClientThatNeverHandshakesDoesNotHoldUpStop) {
  auto server = StartOrDie(Echo, TlsOptions());
  ASSERT_NE(server, nullptr);
  RawConnection silent(server->port());  // connected, says nothing
  server->Stop();
  boost::system::error_code ec;
  char byte;
  silent.socket().read_some(net::buffer(&byte, 1), ec);
  EXPECT_TRUE(ec == net::error::eof || ec == net::error::connection_reset) << ec.message();
}

TEST(HttpsServerTest, UnusableCertificateOrKeyIsRefused) {
  ServerOptions o = TlsOptions();
  o.tls_key_pem = "not a key";
  EXPECT_EQ(StartServer("127.0.0.1:0", Echo, o).status().code(), Code::kInvalidArgument);
  o = TlsOptions();
  o.tls_cert_pem = "";
  EXPECT_EQ(StartServer("127.0.0.1:0", Echo, o).status().code(), Code::kInvalidArgument);
  o = TlsOptions();
  o.tls_key_pem = MakeSelfSigned().key_pem;  // another key
  auto mismatched = StartServer("127.0.0.1:0", Echo, o);
  EXPECT_EQ(mismatched.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(mismatched.status().message(), HasSubstr("private key"));
}

}  // namespace tls_test
}  // namespace
}  // namespace drover::http
