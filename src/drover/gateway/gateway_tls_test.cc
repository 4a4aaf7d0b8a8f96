// The gateway serving TLS (GatewayOptions::tls_cert_pem): HTTPS and wss
// against a real drover-test-engine on loopback, with a certificate made
// here; what a plaintext client and a bad key get; and that a TLS client
// leaving mid-stream (with or without close_notify) frees its replica.

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>  // before asio: its awaitable.hpp uses std::exchange

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <nlohmann/json.hpp>

#include "drover/gateway/gateway.h"
#include "drover/http/test_cert.h"
#include "gateway/engine_process.h"

namespace drover::gateway {
namespace {

using testing::ChildProcess;
using testing::HttpResponse;
using testing::WaitFor;
using json = nlohmann::json;

using http::testing::Cert;
using http::testing::MakeSelfSigned;

// A blocking TLS client over testing::Conn's socket with OpenSSL on the
// descriptor (not Asio's memory BIOs), so that CloseNotify() puts the alert
// on the wire at once. It trusts only Cert() and checks that it names
// 127.0.0.1. Reads and writes give up after 30 s (a guard, not a timing).
class TlsConn {
 public:
  explicit TlsConn(int port) : tcp_(port) {
    if (!tcp_.ok()) return;
    timeval tv{30, 0};
    ::setsockopt(tcp_.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(tcp_.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    ctx_.reset(SSL_CTX_new(TLS_client_method()));
    BIO* bio = BIO_new_mem_buf(Cert().cert_pem.data(), static_cast<int>(Cert().cert_pem.size()));
    X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_.get()), ca);
    X509_free(ca);
    SSL_CTX_set_verify(ctx_.get(), SSL_VERIFY_PEER, nullptr);
    ssl_.reset(SSL_new(ctx_.get()));
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_.get()), "127.0.0.1");
    SSL_set_fd(ssl_.get(), tcp_.fd());
    ok_ = SSL_connect(ssl_.get()) == 1;
    ERR_clear_error();
  }
  bool ok() const { return ok_; }
  bool Send(std::string_view s) {
    size_t n = 0;
    return ok_ && SSL_write_ex(ssl_.get(), s.data(), s.size(), &n) == 1 && n == s.size();
  }
  // Appends what arrives to *buf until pred(*buf) holds or the stream ends.
  bool ReadUntil(std::string* buf, const std::function<bool(const std::string&)>& pred) {
    while (!pred(*buf)) {
      char tmp[16384];
      size_t n = 0;
      if (SSL_read_ex(ssl_.get(), tmp, sizeof tmp, &n) != 1) {
        ERR_clear_error();
        return pred(*buf);
      }
      buf->append(tmp, n);
    }
    return true;
  }
  HttpResponse Request(std::string_view method, std::string_view target, std::string_view body,
                       std::string_view headers = {}) {
    HttpResponse r;
    if (!Send(testing::Request(method, target, body, headers))) return r;
    std::string raw;
    ReadUntil(&raw, [&](const std::string& b) { return testing::Complete(b, &r); });
    return r;
  }
  // Sends close_notify and keeps the TCP connection open.
  void CloseNotify() { SSL_shutdown(ssl_.get()); }
  // Closes the socket without close_notify.
  void Drop() { tcp_.Close(); }

 private:
  struct Free {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
    void operator()(SSL* s) const { SSL_free(s); }
  };
  testing::Conn tcp_;
  std::unique_ptr<SSL_CTX, Free> ctx_;
  std::unique_ptr<SSL, Free> ssl_;
  bool ok_ = false;
};

Result<KeyInfo> Keys(std::string_view token) {
  if (token == "k-a") return KeyInfo{"id-a", "key a", "a", false, 0, 0, 0, 0};
  if (token == "k-admin") return KeyInfo{"id-admin", "admin", "ops", true, 0, 0, 0, 0};
  return Unauthenticated("no such key");
}

json Chat(int max_tokens, bool stream) {
  return {{"model", "m"},
          {"max_tokens", max_tokens},
          {"stream", stream},
          {"messages", {{{"role", "user"}, {"content", "hello there world"}}}}};
}

constexpr std::string_view kKey = "Authorization: Bearer k-a\r\n";

class GatewayTlsTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& engine_flags = {}) {
    std::vector<std::string> argv = {TEST_ENGINE_BINARY, "--port", "0", "--model", "m"};
    argv.insert(argv.end(), engine_flags.begin(), engine_flags.end());
    engine_ = std::make_unique<ChildProcess>(argv);
    ASSERT_GT(engine_->port(), 0) << "the test engine did not start";
    GatewayOptions o;
    o.tls_cert_pem = Cert().cert_pem;
    o.tls_key_pem = Cert().key_pem;
    auto g = StartGateway(o, Keys, &registry_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gw_ = std::move(*g);
    gw_->SetRoutes({{"m", "dep-m", "", false, {{"j-1", engine_->address()}}}});
  }
  int64_t Outstanding() {
    for (const auto& l : gw_->TakeLoad()) {
      if (l.model == "m") return l.outstanding;
    }
    return -1;
  }
  // A TLS client that has a stream under way (its first event read) from
  // an engine that then waits an hour for the next token.
  std::unique_ptr<TlsConn> Streaming() {
    auto c = std::make_unique<TlsConn>(gw_->port());
    EXPECT_TRUE(c->ok());
    EXPECT_TRUE(c->Send(testing::Request("POST", "/v1/chat/completions", Chat(100, true).dump(), kKey)));
    std::string raw;
    EXPECT_TRUE(c->ReadUntil(&raw, [](const std::string& b) { return b.find("data: ") != std::string::npos; }));
    EXPECT_EQ(Outstanding(), 1);
    return c;
  }

  metrics::Registry registry_;
  std::unique_ptr<ChildProcess> engine_;
  std::unique_ptr<Gateway> gw_;
};

TEST_F(GatewayTlsTest, ServesCompletionsAndStreamsOverTls) {
  Start();
  TlsConn c(gw_->port());
  ASSERT_TRUE(c.ok()) << "no TLS handshake with the gateway";
  HttpResponse whole = c.Request("POST", "/v1/chat/completions", Chat(4, false).dump(), kKey);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  json j = json::parse(whole.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << whole.body;
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  // The same connection (keep-alive over TLS): a stream, chunked.
  HttpResponse sse = c.Request("POST", "/v1/chat/completions", Chat(5, true).dump(), kKey);
  ASSERT_EQ(sse.status, 200) << sse.raw;
  EXPECT_EQ(testing::Header(sse, "content-type"), "text/event-stream");
  size_t events = 0;
  for (size_t at = sse.body.find("data: {"); at != std::string::npos; at = sse.body.find("data: {", at + 1)) ++events;
  EXPECT_GE(events, 5u) << sse.body;
  EXPECT_NE(sse.body.find("data: [DONE]\n\n"), std::string::npos) << sse.body;
  // And an error is OpenAI-shaped over TLS as well.
  HttpResponse denied = c.Request("GET", "/v1/models", "", "Authorization: Bearer k-none\r\n");
  EXPECT_EQ(denied.status, 401) << denied.raw;
  EXPECT_EQ(Outstanding(), 0);
}

TEST_F(GatewayTlsTest, WebSocketOverTls) {
  Start();
  namespace net = boost::asio;
  namespace ssl = boost::asio::ssl;
  namespace ws = boost::beast::websocket;
  net::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  ctx.add_certificate_authority(net::buffer(Cert().cert_pem));
  ctx.set_verify_mode(ssl::verify_peer);
  ws::stream<ssl::stream<net::ip::tcp::socket>> wss(ioc, ctx);
  wss.next_layer().set_verify_callback(ssl::host_name_verification("127.0.0.1"));
  boost::system::error_code ec;
  wss.next_layer().next_layer().connect({net::ip::make_address("127.0.0.1"), gw_->port()}, ec);
  ASSERT_FALSE(ec) << ec.message();
  wss.next_layer().handshake(ssl::stream_base::client, ec);
  ASSERT_FALSE(ec) << "TLS: " << ec.message();
  wss.set_option(ws::stream_base::decorator(
      [](ws::request_type& req) { req.set(boost::beast::http::field::authorization, "Bearer k-a"); }));
  wss.handshake("127.0.0.1", "/v1/chat/completions/ws", ec);
  ASSERT_FALSE(ec) << "WebSocket: " << ec.message();
  // Two requests on one socket, each streamed back as messages ending in [DONE].
  for (int round = 0; round < 2; ++round) {
    wss.write(net::buffer(Chat(3, false).dump()), ec);
    ASSERT_FALSE(ec) << ec.message();
    std::vector<std::string> messages;
    while (messages.empty() || messages.back() != "[DONE]") {
      boost::beast::flat_buffer b;
      wss.read(b, ec);
      ASSERT_FALSE(ec) << ec.message();
      messages.push_back(boost::beast::buffers_to_string(b.data()));
    }
    ASSERT_GE(messages.size(), 4u);
    json first = json::parse(messages[0], nullptr, false);
    ASSERT_TRUE(first.is_object()) << messages[0];
    EXPECT_EQ(first["object"], "chat.completion.chunk");
  }
  wss.close(ws::close_code::normal, ec);
  EXPECT_FALSE(ec) << ec.message();
}

TEST_F(GatewayTlsTest, PlaintextClientGetsNoAnswerAndTheGatewayGoesOn) {
  Start();
  HttpResponse plain = testing::Http(gw_->port(), "GET", "/healthz");
  EXPECT_EQ(plain.status, 0) << plain.raw;
  testing::Conn c(gw_->port());
  ASSERT_TRUE(c.Send(testing::Request("POST", "/v1/chat/completions", Chat(4, false).dump(), kKey)));
  std::string raw;
  c.ReadUntil(&raw, [](const std::string&) { return false; });  // until the gateway closes
  EXPECT_EQ(raw.find("HTTP/1.1"), std::string::npos) << raw;
  // Garbage that is not even HTTP: the same.
  testing::Conn junk(gw_->port());
  ASSERT_TRUE(junk.Send(std::string(4096, '\x16')));
  // The gateway still serves TLS clients.
  TlsConn tls(gw_->port());
  ASSERT_TRUE(tls.ok());
  EXPECT_EQ(tls.Request("GET", "/healthz", "").body, "ok\n");
  EXPECT_EQ(tls.Request("POST", "/v1/chat/completions", Chat(2, false).dump(), kKey).status, 200);
}

TEST(GatewayTlsStartTest, UnusableCertificateOrKeyFailsStart) {
  GatewayOptions o;
  o.tls_cert_pem = Cert().cert_pem;
  o.tls_key_pem = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  auto bad_key = StartGateway(o, Keys, nullptr);
  ASSERT_FALSE(bad_key.ok());
  EXPECT_EQ(bad_key.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad_key.status().message().find("private key"), std::string::npos) << bad_key.status().ToString();
  o.tls_key_pem = MakeSelfSigned().key_pem;  // a key, but not the certificate's
  auto other_key = StartGateway(o, Keys, nullptr);
  ASSERT_FALSE(other_key.ok());
  EXPECT_EQ(other_key.status().code(), Code::kInvalidArgument);
  EXPECT_NE(other_key.status().message().find("private key"), std::string::npos) << other_key.status().ToString();
  o = {};
  o.tls_key_pem = Cert().key_pem;  // a key without a certificate
  auto no_cert = StartGateway(o, Keys, nullptr);
  ASSERT_FALSE(no_cert.ok());
  EXPECT_NE(no_cert.status().message().find("certificate"), std::string::npos) << no_cert.status().ToString();
}

// The engine waits an hour after its first token: only the gateway's watch
// on the client's socket can free the replica in time.
TEST_F(GatewayTlsTest, ClientDroppingMidStreamFreesTheReplica) {
  Start({"--token-delay-us", "3600000000"});
  auto c = Streaming();
  c->Drop();  // FIN without close_notify
  EXPECT_TRUE(WaitFor([&] { return Outstanding() == 0; }));
}

TEST_F(GatewayTlsTest, ClientSendingCloseNotifyMidStreamFreesTheReplica) {
  Start({"--token-delay-us", "3600000000"});
  auto c = Streaming();
  c->CloseNotify();  // the alert alone: the TCP connection stays open
  EXPECT_TRUE(WaitFor([&] { return Outstanding() == 0; }));
  EXPECT_TRUE(
      WaitFor([&] { return registry_.Render().find("drover_gateway_client_cancels_total 1") != std::string::npos; }));
}

}  // namespace
}  // namespace drover::gateway
