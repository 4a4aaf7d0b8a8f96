// TLS and node certificates end to end (docs/security.md, "Across
// machines"): `drover certs init`, a `drover server` serving TLS on gRPC and
// HTTP, a `drover agent` that joins with a one-time join token, gets its
// certificate and runs a job; then the ways in that must stay shut: a
// certificate from another CA, a node certificate claiming another node, a
// reused join token, plaintext to a TLS port, the API without a token, and
// a server or agent metrics endpoint exposed beyond loopback without TLS or
// a token.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "drover/auth/certs.h"
#include "drover/auth/cluster_ca.h"
#include "drover/auth/token.h"
#include "drover/http/client.h"
#include "drover/rpc/channel.h"
#include "drover/v1/agent.grpc.pb.h"
#include "support/drover_process.h"

namespace drover::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Runs `drover args...` to its end (a role that must refuse to start).
int RunToExit(const std::vector<std::string>& args, const std::string& err_path) {
  pid_t pid = SpawnDrover(args, err_path + ".out", err_path);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Identity {
  std::string key;
  std::string cert;
  std::string token;
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    data_ = dir_->path() + "/server";
    CommandResult init = RunCli("", {"certs", "init", "--data-dir", data_, "--san", "drover.test"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ASSERT_NE(init.out.find("created the cluster CA"), std::string::npos) << init.out;
    ca_pem_ = Slurp(data_ + "/tls/ca.crt");
    ASSERT_FALSE(ca_pem_.empty());
    up_ = new DroverUp(data_, {}, "server");
    ASSERT_TRUE(up_->Start());
    ca_file_ = data_ + "/tls/ca.crt";
  }
  static void TearDownTestSuite() {
    if (agent_pid_ > 0) {
      if (up_ != nullptr) CancelAllJobs(up_->jobs());
      ::kill(agent_pid_, SIGTERM);
      ::waitpid(agent_pid_, nullptr, 0);
    }
    delete up_;
    delete dir_;
  }

  static std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& key = "", const std::string& cert = "",
                                                       const std::string& ca = ca_pem_) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ca;
    o.pem_private_key = key;
    o.pem_cert_chain = cert;
    return grpc::SslCredentials(o);
  }

  static std::unique_ptr<v1::AgentService::Stub> AgentStub(const std::string& token, const std::string& key = "",
                                                           const std::string& cert = "") {
    return v1::AgentService::NewStub(rpc::MakeChannel(up_->grpc_address(), token, Tls(key, cert)));
  }

  static std::string JoinToken(const std::string& node) {
    CommandResult r = RunCli(up_->grpc_address(), {"join-token", "--node", node}, {"DROVER_CA_FILE=" + ca_file_});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string token = r.out.substr(0, r.out.find('\n'));
    EXPECT_FALSE(token.empty());
    return token;
  }

  // Joins as `node` the way an agent does, with a CSR: the node's key,
  // certificate and token.
  static Identity Join(const std::string& node) {
    Identity id;
    auto key = auth::GenerateKeyPem();
    EXPECT_TRUE(key.ok());
    id.key = *key;
    v1::JoinRequest req;
    req.set_join_token(JoinToken(node));
    req.set_node_name(node);
    req.set_csr_pem(*auth::MakeCsrPem(id.key, node));
    v1::JoinResponse resp;
    auto ctx = Ctx();
    grpc::Status s = AgentStub("")->Join(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.ca_pem(), ca_pem_);
    id.cert = resp.certificate_pem();
    id.token = resp.node_token();
    return id;
  }

  static std::vector<v1::AuditEntry> Audit() {
    v1::ListAuditRequest req;
    req.set_limit(10000);
    v1::ListAuditResponse resp;
    auto ctx = Ctx();
    grpc::Status s = v1::AuditService::NewStub(rpc::MakeChannel(up_->grpc_address(), up_->token(), Tls()))
                         ->List(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.entries().begin(), resp.entries().end()};
  }

  static bool Audited(const std::string& action, const std::string& target, const std::string& result_part) {
    for (const v1::AuditEntry& e : Audit()) {
      if (e.action() == action && e.target() == target && e.result().find(result_part) != std::string::npos)
        return true;
    }
    return false;
  }

  static http::ClientResponse Https(const std::string& target, const std::map<std::string, std::string>& headers = {},
                                    const std::string& method = "GET", const std::string& body = "") {
    http::ClientTls tls{ca_pem_, "", "", ""};
    auto r = http::HttpsRequest(&tls, up_->http_address(), method, target, body, "application/json", headers);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : http::ClientResponse{};
  }

  static inline TempDir* dir_ = nullptr;
  static inline DroverUp* up_ = nullptr;
  static inline std::string data_;
  static inline std::string ca_pem_;
  static inline std::string ca_file_;
  static inline pid_t agent_pid_ = 0;
};

TEST_F(TlsTest, CertsInitIsIdempotentAndKeepsKeysPrivate) {
  CommandResult again = RunCli("", {"certs", "init", "--data-dir", data_, "--san", "drover.test"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("kept the cluster CA"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("kept the server certificate"), std::string::npos) << again.out;
  EXPECT_EQ(Slurp(data_ + "/tls/ca.crt"), ca_pem_);
  for (const char* key : {"/tls/ca.key", "/tls/server.key"}) {
    struct stat st {};
    ASSERT_EQ(::stat((data_ + key).c_str(), &st), 0) << key;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << key;
  }
  auto server = auth::ParseCertPem(Slurp(data_ + "/tls/server.crt"));
  ASSERT_TRUE(server.ok());
  EXPECT_NE(std::find(server->dns_names.begin(), server->dns_names.end(), "drover.test"), server->dns_names.end());
  EXPECT_NE(std::find(server->ip_addresses.begin(), server->ip_addresses.end(), "127.0.0.1"),
            server->ip_addresses.end());
  CommandResult bad = RunCli("", {"certs", "init", "--data-dir", data_, "--san", "not a name"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("not a DNS name"), std::string::npos) << bad.err;
}

TEST_F(TlsTest, AgentJoinsWithACertificateAndRunsAJob) {
  const std::string agent_dir = dir_->path() + "/agent";
  const std::string token_file = dir_->path() + "/scrape.token";
  std::ofstream(token_file) << "scrape-secret-0123456789\n";
  const std::string join = JoinToken("tls-node-1");
  agent_pid_ = SpawnDrover({"agent",
                            "--server",
                            up_->grpc_address(),
                            "--ca-file",
                            ca_file_,
                            "--node-name",
                            "tls-node-1",
                            "--join-token",
                            join,
                            "--data-dir",
                            agent_dir,
                            "--devices",
                            "simulated",
                            "--simulate-gpus",
                            "2",
                            "--metrics-listen",
                            "127.0.0.1:0",
                            "--metrics-token-file",
                            token_file,
                            "--log-level",
                            "info"},
                           agent_dir + ".out", agent_dir + ".err");
  ASSERT_GT(agent_pid_, 0);
  ASSERT_TRUE(up_->WaitForReadyNodes(1)) << Slurp(agent_dir + ".err");

  // Its certificate: issued by the cluster CA for its node name, bound to
  // its node token; the key never left the agent.
  auto cert = auth::ParseCertPem(Slurp(agent_dir + "/node.crt"));
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_EQ(cert->common_name, "tls-node-1");
  EXPECT_EQ(cert->issuer_common_name, "drover-cluster-ca");
  auto id = auth::NodeIdentityOf(*cert);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::string token = Slurp(agent_dir + "/node.token");
  EXPECT_TRUE(token.starts_with("drv_" + id->token_id + "_")) << id->token_id;
  EXPECT_TRUE(auth::VerifyCertPem(Slurp(agent_dir + "/node.crt"), ca_pem_, NowUnix(), auth::Purpose::kClient).ok());
  EXPECT_TRUE(auth::CheckKeyMatchesCert(Slurp(agent_dir + "/node.key"), Slurp(agent_dir + "/node.crt")).ok());
  struct stat st {};
  ASSERT_EQ(::stat((agent_dir + "/node.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Slurp(agent_dir + "/ca.crt"), ca_pem_);
  EXPECT_TRUE(Audited("agent.join+certificate", "tls-node-1", "ok"));
  EXPECT_NE((Slurp(agent_dir + ".err") + Slurp(agent_dir + ".out")).find("presents its certificate"),
            std::string::npos);

  // A job runs on it, and its output comes back through the TLS session.
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_gpus(1);
  for (const char* a : {"sh", "-c", "echo hello-over-tls"}) req.mutable_spec()->add_command(a);
  v1::SubmitJobResponse resp;
  auto ctx = Ctx();
  ASSERT_TRUE(up_->jobs()->Submit(ctx.get(), req, &resp).ok());
  const std::string job = resp.job().id();
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), job).status().state() == v1::JOB_STATE_SUCCEEDED; }))
      << GetJob(up_->jobs(), job).DebugString();
  CommandResult logs = RunCli(up_->grpc_address(), {"logs", job}, {"DROVER_CA_FILE=" + ca_file_});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "hello-over-tls\n");

  // The agent's metrics need its scrape token.
  std::smatch m;
  std::string log;
  ASSERT_TRUE(WaitUntil([&] {
    log = Slurp(agent_dir + ".err") + Slurp(agent_dir + ".out");
    return std::regex_search(log, m, std::regex(R"(metrics on http://(127\.0\.0\.1:\d+)/metrics)"));
  })) << log;
  const std::string metrics = m[1];
  auto anonymous = http::HttpRequest(metrics, "GET", "/metrics");
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ(anonymous->status, 401);
  auto wrong = http::HttpRequest(metrics, "GET", "/metrics", "", "", {{"Authorization", "Bearer scrape-secret-x"}});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 401);
  auto scraped =
      http::HttpRequest(metrics, "GET", "/metrics", "", "", {{"Authorization", "Bearer scrape-secret-0123456789"}});
  ASSERT_TRUE(scraped.ok());
  EXPECT_EQ(scraped->status, 200);
  EXPECT_NE(scraped->body.find("DCGM_FI_DEV_GPU_UTIL"), std::string::npos);

  // The join token was spent: a second agent with it is refused, and that is audited.
  v1::JoinRequest again;
  again.set_join_token(join);
  again.set_node_name("tls-node-1");
  v1::JoinResponse out;
  auto jctx = Ctx();
  grpc::Status reused = AgentStub("")->Join(jctx.get(), again, &out);
  EXPECT_EQ(reused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << reused.error_message();
  EXPECT_TRUE(out.node_token().empty());
  EXPECT_TRUE(out.certificate_pem().empty());
  EXPECT_TRUE(Audited("agent.join", "tls-node-1", "already used"));
}

TEST_F(TlsTest, NodeCertificateSpeaksOnlyForItsNode) {
  Identity a = Join("node-a");
  ASSERT_FALSE(a.cert.empty());
  Identity b = Join("node-b");
  ASSERT_FALSE(b.cert.empty());
  v1::RegisterRequest reg;
  v1::RegisterResponse reg_out;

  // A's certificate alone is A's credential.
  reg.set_node_name("node-a");
  auto c1 = Ctx();
  grpc::Status own = AgentStub("", a.key, a.cert)->Register(c1.get(), reg, &reg_out);
  EXPECT_TRUE(own.ok()) << own.error_message();

  // ... and never B's: not in Register, not in a session hello, not even
  // with B's own token beside it (the certificate wins).
  reg.set_node_name("node-b");
  auto c2 = Ctx();
  grpc::Status claim = AgentStub("", a.key, a.cert)->Register(c2.get(), reg, &reg_out);
  EXPECT_EQ(claim.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(claim.error_message().find("certificate of node 'node-a' cannot act as node 'node-b'"), std::string::npos)
      << claim.error_message();
  auto c3 = Ctx();
  grpc::Status with_token = AgentStub(b.token, a.key, a.cert)->Register(c3.get(), reg, &reg_out);
  EXPECT_EQ(with_token.error_code(), grpc::StatusCode::PERMISSION_DENIED) << with_token.error_message();

  auto c4 = Ctx();
  auto session = AgentStub("", a.key, a.cert)->Session(c4.get());
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node_name("node-b");
  session->Write(hello);
  session->WritesDone();
  v1::ServerMessage ignored;
  while (session->Read(&ignored)) {
  }
  grpc::Status s = session->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(Audited("agent.register", "node-b", "certificate of node 'node-a'"));
  EXPECT_TRUE(Audited("agent.session", "node-b", "certificate of node 'node-a'"));
  EXPECT_NE((Slurp(data_ + "/up.err") + Slurp(data_ + "/up.out")).find("cannot act as node 'node-b'"),
            std::string::npos);

  // Revoking A's node token revokes its certificate.
  auto a_token = auth::ParseToken(a.token);
  ASSERT_TRUE(a_token.ok());
  CommandResult revoked =
      RunCli(up_->grpc_address(), {"tokens", "revoke", a_token->id}, {"DROVER_CA_FILE=" + ca_file_});
  ASSERT_EQ(revoked.exit_code, 0) << revoked.err;
  reg.set_node_name("node-a");
  auto c5 = Ctx();
  grpc::Status after = AgentStub("", a.key, a.cert)->Register(c5.get(), reg, &reg_out);
  EXPECT_EQ(after.error_code(), grpc::StatusCode::UNAUTHENTICATED) << after.error_message();
  EXPECT_NE(after.error_message().find("revoked"), std::string::npos) << after.error_message();
}

TEST_F(TlsTest, MalformedCertificateRequestDoesNotSpendTheJoinToken) {
  const std::string join = JoinToken("node-c");
  v1::JoinRequest req;
  req.set_join_token(join);
  req.set_node_name("node-c");
  req.set_csr_pem("-----BEGIN CERTIFICATE REQUEST-----\nnonsense\n-----END CERTIFICATE REQUEST-----\n");
  v1::JoinResponse resp;
  auto c1 = Ctx();
  grpc::Status bad = AgentStub("")->Join(c1.get(), req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.error_message();
  EXPECT_TRUE(resp.node_token().empty());
  auto key = auth::GenerateKeyPem();
  req.set_csr_pem(*auth::MakeCsrPem(*key, "node-c"));
  auto c2 = Ctx();
  grpc::Status good = AgentStub("")->Join(c2.get(), req, &resp);
  EXPECT_TRUE(good.ok()) << good.error_message();
  EXPECT_FALSE(resp.certificate_pem().empty());
}

TEST_F(TlsTest, CertificateFromAnotherCaIsRefusedAtTheHandshake) {
  // A CA of the attacker's, and a certificate that looks like a node's.
  auto other_key = auth::GenerateKeyPem();
  ASSERT_TRUE(other_key.ok());
  auth::IssueOptions ca;
  ca.common_name = "drover-cluster-ca";
  ca.now_unix = NowUnix();
  ca.validity_seconds = 3600;
  auth::ServerTls other;
  other.ca_key_pem = *other_key;
  other.ca_pem = *auth::MakeCaCertPem(*other_key, ca);
  auto key = auth::GenerateKeyPem();
  auto cert =
      auth::IssueNodeCertificate(other, *auth::MakeCsrPem(*key, "x"), "node-forged", "0123456789abcdef", NowUnix());
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();

  // Even an admin token does not get a call through that connection.
  auto stub = v1::InfoService::NewStub(rpc::MakeChannel(up_->grpc_address(), up_->token(), Tls(*key, *cert)));
  v1::VersionResponse version;
  auto ctx = Ctx(std::chrono::seconds(10));
  grpc::Status s = stub->Version(ctx.get(), v1::VersionRequest(), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(WaitUntil([] { return Audited("tls.handshake", "node-forged", "does not verify"); }));
  EXPECT_NE(
      (Slurp(data_ + "/up.err") + Slurp(data_ + "/up.out")).find("refused a TLS client certificate 'node-forged'"),
      std::string::npos);

  // The same over HTTPS.
  http::ClientTls tls{ca_pem_, "", *cert, *key};
  auto r = http::HttpsRequest(&tls, up_->http_address(), "GET", "/healthz");
  EXPECT_TRUE(r.ok()) << "the HTTP listener does not ask for client certificates";

  // And a client that does not trust the cluster CA does not talk to the server.
  auto untrusting =
      v1::InfoService::NewStub(rpc::MakeChannel(up_->grpc_address(), up_->token(), Tls("", "", other.ca_pem)));
  auto ctx2 = Ctx(std::chrono::seconds(10));
  EXPECT_EQ(untrusting->Version(ctx2.get(), v1::VersionRequest(), &version).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, PlaintextToTheTlsPortsFails) {
  auto stub = v1::InfoService::NewStub(rpc::MakeChannel(up_->grpc_address(), up_->token()));
  v1::VersionResponse version;
  auto ctx = Ctx(std::chrono::seconds(10));
  EXPECT_EQ(stub->Version(ctx.get(), v1::VersionRequest(), &version).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto http = http::HttpRequest(up_->http_address(), "GET", "/healthz");
  EXPECT_FALSE(http.ok() && http->status == 200);
  // The CLI without the CA says what to do.
  CommandResult r = RunCli(up_->grpc_address(), {"nodes"}, {"DROVER_DATA_DIR=" + dir_->path() + "/nowhere"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("--ca-file"), std::string::npos) << r.err;
  // With it (found in <data-dir>/tls/ca.crt), it works.
  CommandResult ok = RunCli(up_->grpc_address(), {"nodes"}, {"DROVER_DATA_DIR=" + data_});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST_F(TlsTest, HttpsServesHealthAndRequiresTokens) {
  EXPECT_EQ(Https("/healthz").status, 200);
  EXPECT_EQ(Https("/api/v1/jobs").status, 401);
  EXPECT_EQ(Https("/api/v1/jobs", {{"Authorization", "Bearer " + up_->token()}}).status, 200);
  // The server's own origin is https now, and its session cookie Secure.
  const std::string origin = "https://" + up_->http_address();
  auto session = Https("/api/v1/session", {{"Origin", origin}}, "POST", "{\"token\": \"" + up_->token() + "\"}");
  EXPECT_EQ(session.status, 200) << session.body;
  EXPECT_NE(session.headers["set-cookie"].find("; Secure"), std::string::npos) << session.headers["set-cookie"];
  auto downgraded = Https("/api/v1/session", {{"Origin", "http://" + up_->http_address()}}, "POST",
                          "{\"token\": \"" + up_->token() + "\"}");
  EXPECT_EQ(downgraded.status, 403);
  // The dashboard link points at https.
  EXPECT_TRUE(Slurp(data_ + "/dashboard-url").starts_with("https://")) << Slurp(data_ + "/dashboard-url");
}

// The in-process OpenAI gateway serves TLS with the server's certificate
// (docs/gateway.md, "TLS"), and endpoints.json says https; plaintext to it
// gets no answer.
TEST_F(TlsTest, GatewayServesHttpsWithTheServersCertificate) {
  std::string url;
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json j = nlohmann::json::parse(Slurp(data_ + "/endpoints.json"), nullptr, false);
    if (!j.is_object() || !j.contains("gateway_url")) return false;
    url = j["gateway_url"].get<std::string>();
    return true;
  }));
  ASSERT_TRUE(url.starts_with("https://") && url.ends_with("/v1")) << url;
  const std::string address = url.substr(8, url.size() - 8 - 3);
  http::ClientTls tls{ca_pem_, "", "", ""};
  auto health = http::HttpsRequest(&tls, address, "GET", "/healthz");
  ASSERT_TRUE(health.ok()) << health.status().ToString();
  EXPECT_EQ(health->body, "ok\n");
  auto models = http::HttpsRequest(&tls, address, "GET", "/v1/models");  // no key: an OpenAI-shaped 401
  ASSERT_TRUE(models.ok()) << models.status().ToString();
  EXPECT_EQ(models->status, 401) << models->body;
  auto plain = http::HttpRequest(address, "GET", "/healthz");
  EXPECT_FALSE(plain.ok() && plain->status == 200);
}

TEST_F(TlsTest, ExposureNeedsTlsOrInsecure) {
  const std::string plain = dir_->path() + "/plain";
  int rc = RunToExit({"server", "--data-dir", plain, "--grpc-listen", "0.0.0.0:0", "--listen", "127.0.0.1:0"},
                     plain + ".err");
  EXPECT_EQ(rc, 1);
  const std::string said = Slurp(plain + ".err") + Slurp(plain + ".err.out");
  EXPECT_NE(said.find("refusing to listen on '0.0.0.0:0' without TLS"), std::string::npos) << said;

  // With the cluster CA of `certs init`, the same flags start a TLS server.
  const std::string secure = dir_->path() + "/secure";
  ASSERT_EQ(RunCli("", {"certs", "init", "--data-dir", secure}).exit_code, 0);
  DroverUp server(secure, {}, "server", "0.0.0.0:0");
  ASSERT_TRUE(server.Start());
  std::string port = server.grpc_address().substr(server.grpc_address().rfind(':') + 1);
  auto stub = v1::InfoService::NewStub(
      rpc::MakeChannel("127.0.0.1:" + port, server.token(), Tls("", "", Slurp(secure + "/tls/ca.crt"))));
  v1::VersionResponse version;
  auto ctx = Ctx();
  grpc::Status v = stub->Version(ctx.get(), v1::VersionRequest(), &version);
  EXPECT_TRUE(v.ok()) << v.error_message();
  http::ClientTls tls{Slurp(secure + "/tls/ca.crt"), "", "", ""};
  auto health = http::HttpsRequest(&tls, server.http_address(), "GET", "/healthz");
  ASSERT_TRUE(health.ok()) << health.status().ToString();
  EXPECT_EQ(health->status, 200);

  // An agent's metrics beyond loopback need a scrape token or --insecure-metrics.
  const std::string agent = dir_->path() + "/exposed-agent";
  rc = RunToExit({"agent", "--data-dir", agent, "--devices", "none", "--metrics-listen", "0.0.0.0:0"}, agent + ".err");
  EXPECT_EQ(rc, 2);
  const std::string agent_said = Slurp(agent + ".err") + Slurp(agent + ".err.out");
  EXPECT_NE(agent_said.find("refusing to serve metrics on '0.0.0.0:0'"), std::string::npos) << agent_said;
}

}  // namespace
}  // namespace drover::testing
