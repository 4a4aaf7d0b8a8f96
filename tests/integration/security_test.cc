// Tenant walls and identities, tried the way an attacker would: every
// attempt below is refused with the right code, and afterwards nothing has
// changed (the victim's job still runs, its log is intact, the node is not
// drained, no job was added). Then the audit log: it recorded the refusals,
// it verifies, and `drover audit verify` fails once an entry is edited in
// the store file.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "drover/http/client.h"
#include "drover/rpc/channel.h"
#include "drover/v1/agent.grpc.pb.h"
#include "support/drover_process.h"

namespace drover::testing {
namespace {

struct Caller {
  std::string token;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::NodeService::Stub> nodes;
  std::unique_ptr<v1::AuthService::Stub> auth;
  std::unique_ptr<v1::AuditService::Stub> audit;
  std::unique_ptr<v1::AgentService::Stub> agent;
  std::unique_ptr<v1::ClusterService::Stub> cluster;
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    up_ = new DroverUp(dir_->path() + "/data", {"--devices", "none", "--simulate", "1", "--simulate-gpus", "4"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));  // this machine (no GPUs) and sim-1: a submit before sim-1 is refused
    admin_ = new Caller(Connect(up_->token()));
    alice_ = new Caller(Connect(CreateToken("alice", "team-a", "user")));
    bob_ = new Caller(Connect(CreateToken("bob", "team-b", "user")));
    viewer_ = new Caller(Connect(CreateToken("watcher", "team-a", "viewer")));
    lead_ = new Caller(Connect(CreateToken("lead", "team-a", "tenant-admin")));
    // Bob's long job, with some output, and Alice's own.
    bob_job_ = Submit(*bob_, {"sh", "-c", "echo bob-secret-output; sleep 600"}, "");
    alice_job_ = Submit(*alice_, {"sleep", "600"}, "");
    ASSERT_TRUE(
        WaitUntil([] { return GetJob(admin_->jobs.get(), bob_job_).status().state() == v1::JOB_STATE_RUNNING; }));
    ASSERT_TRUE(WaitUntil([] { return Logs(*admin_, bob_job_).find("bob-secret-output") != std::string::npos; }));
  }
  static void TearDownTestSuite() {
    if (admin_ != nullptr) CancelAllJobs(admin_->jobs.get());
    for (Caller* c : {admin_, alice_, bob_, viewer_, lead_}) delete c;
    delete up_;
    delete dir_;
  }

  static Caller Connect(const std::string& token) {
    Caller c;
    c.token = token;
    c.channel = rpc::MakeChannel(up_->grpc_address(), token);
    c.jobs = v1::JobService::NewStub(c.channel);
    c.nodes = v1::NodeService::NewStub(c.channel);
    c.auth = v1::AuthService::NewStub(c.channel);
    c.audit = v1::AuditService::NewStub(c.channel);
    c.agent = v1::AgentService::NewStub(c.channel);
    c.cluster = v1::ClusterService::NewStub(c.channel);
    return c;
  }

  static std::string CreateToken(const std::string& name, const std::string& tenant, const std::string& role,
                                 const std::string& ttl = "", std::string* id = nullptr) {
    v1::CreateTokenRequest req;
    req.set_name(name);
    req.set_tenant(tenant);
    req.set_role(role);
    req.set_ttl(ttl);
    v1::CreateTokenResponse resp;
    auto ctx = Ctx();
    grpc::Status s = v1::AuthService::NewStub(rpc::MakeChannel(up_->grpc_address(), up_->token()))
                         ->CreateToken(ctx.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (id != nullptr) *id = resp.info().id();
    return resp.token();
  }

  static std::string Submit(Caller& c, std::vector<std::string> cmd, const std::string& tenant,
                            grpc::Status* status = nullptr) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->set_tenant(tenant);
    for (auto& a : cmd) req.mutable_spec()->add_command(a);
    v1::SubmitJobResponse resp;
    auto ctx = Ctx();
    grpc::Status s = c.jobs->Submit(ctx.get(), req, &resp);
    if (status != nullptr) *status = s;
    return resp.job().id();
  }

  static std::string Logs(Caller& c, const std::string& id, grpc::Status* status = nullptr) {
    v1::LogsRequest req;
    req.set_id(id);
    auto ctx = Ctx();
    auto reader = c.jobs->Logs(ctx.get(), req);
    std::string out;
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) out += chunk.data();
    grpc::Status s = reader->Finish();
    if (status != nullptr) *status = s;
    return out;
  }

  static http::ClientResponse Http(const std::string& token, const std::string& method, const std::string& target,
                                   const std::string& body = "") {
    std::map<std::string, std::string> headers;
    if (!token.empty()) headers["Authorization"] = "Bearer " + token;
    auto r = http::HttpRequest(up_->http_address(), method, target, body, "application/json", headers);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : http::ClientResponse{};
  }

  // Joins a node named `node` with a fresh join token; returns its node token.
  static std::string JoinAs(const std::string& node) {
    v1::CreateJoinTokenRequest jr;
    jr.set_node(node);
    v1::CreateJoinTokenResponse jt;
    auto ctx = Ctx();
    EXPECT_TRUE(admin_->auth->CreateJoinToken(ctx.get(), jr, &jt).ok());
    v1::JoinRequest req;
    req.set_join_token(jt.join_token());
    req.set_node_name(node);
    v1::JoinResponse resp;
    auto ctx2 = Ctx();
    grpc::Status s = v1::AgentService::NewStub(rpc::MakeChannel(up_->grpc_address(), ""))->Join(ctx2.get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.node_token();
  }

  static int JobCount() { return static_cast<int>(ListJobs(admin_->jobs.get()).size()); }

  // What must hold after every attempt.
  static void ExpectNothingChanged(int jobs) {
    EXPECT_EQ(JobCount(), jobs);
    EXPECT_EQ(GetJob(admin_->jobs.get(), bob_job_).status().state(), v1::JOB_STATE_RUNNING);
    EXPECT_EQ(Logs(*admin_, bob_job_), "bob-secret-output\n");
    v1::GetNodeRequest nr;
    nr.set_name("sim-1");
    v1::Node node;
    auto ctx = Ctx();
    ASSERT_TRUE(admin_->nodes->Get(ctx.get(), nr, &node).ok());
    EXPECT_FALSE(node.drained());
  }

  static inline TempDir* dir_ = nullptr;
  static inline DroverUp* up_ = nullptr;
  static inline Caller* admin_ = nullptr;
  static inline Caller* alice_ = nullptr;
  static inline Caller* bob_ = nullptr;
  static inline Caller* viewer_ = nullptr;
  static inline Caller* lead_ = nullptr;
  static inline std::string bob_job_;
  static inline std::string alice_job_;
};

#define EXPECT_CODE(call, code)                               \
  do {                                                        \
    grpc::Status st_ = (call);                                \
    EXPECT_EQ(st_.error_code(), code) << st_.error_message(); \
    ++attempts;                                               \
  } while (0)

TEST_F(SecurityTest, TenantIsolationBattery) {
  const int jobs = JobCount();
  int attempts = 0;
  auto ctx = [] { return Ctx(); };
  v1::GetJobRequest get_b;
  get_b.set_id(bob_job_);
  v1::Job job;
  v1::CancelJobRequest cancel_b;
  cancel_b.set_id(bob_job_);

  // Read, list, cancel and log another tenant's job: "not found", as if it did not exist.
  EXPECT_CODE(alice_->jobs->Get(ctx().get(), get_b, &job), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Http(alice_->token, "GET", "/api/v1/jobs/" + bob_job_).status, 404);
  ++attempts;
  v1::ListJobsRequest list_b;
  list_b.set_tenant("team-b");
  v1::ListJobsResponse listed;
  EXPECT_CODE(alice_->jobs->List(ctx().get(), list_b, &listed), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Http(alice_->token, "GET", "/api/v1/jobs?tenant=team-b").status, 403);
  ++attempts;
  EXPECT_CODE(alice_->jobs->List(ctx().get(), v1::ListJobsRequest(), &listed), grpc::StatusCode::OK);
  for (const v1::Job& j : listed.jobs()) EXPECT_EQ(j.spec().tenant(), "team-a") << j.id();
  EXPECT_EQ(Http(alice_->token, "GET", "/api/v1/jobs").body.find(bob_job_), std::string::npos);
  ++attempts;
  EXPECT_CODE(alice_->jobs->Cancel(ctx().get(), cancel_b, &job), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Http(alice_->token, "POST", "/api/v1/jobs/" + bob_job_ + "/cancel").status, 404);
  ++attempts;
  grpc::Status log_status;
  EXPECT_EQ(Logs(*alice_, bob_job_, &log_status), "");
  EXPECT_CODE(log_status, grpc::StatusCode::NOT_FOUND);
  auto rest_log = Http(alice_->token, "GET", "/api/v1/jobs/" + bob_job_ + "/logs");
  EXPECT_EQ(rest_log.status, 404);
  ++attempts;
  EXPECT_EQ(rest_log.body.find("bob-secret"), std::string::npos);
  // The fleet and node views do not name another tenant's job.
  v1::Fleet fleet;
  EXPECT_CODE(alice_->cluster->GetFleet(ctx().get(), v1::FleetRequest(), &fleet), grpc::StatusCode::OK);
  EXPECT_EQ(fleet.DebugString().find(bob_job_), std::string::npos);
  EXPECT_EQ(Http(alice_->token, "GET", "/api/v1/nodes/sim-1").body.find(bob_job_), std::string::npos);
  ++attempts;

  // Submit as another tenant.
  grpc::Status submit_status;
  Submit(*alice_, {"true"}, "team-b", &submit_status);
  EXPECT_CODE(submit_status, grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(
      Http(alice_->token, "POST", "/api/v1/jobs", R"({"spec":{"tenant":"team-b","gpus":1,"command":["true"]}})").status,
      403);
  ++attempts;
  // A viewer changes nothing, even in its own tenant.
  Submit(*viewer_, {"true"}, "", &submit_status);
  EXPECT_CODE(submit_status, grpc::StatusCode::PERMISSION_DENIED);
  v1::CancelJobRequest cancel_a;
  cancel_a.set_id(alice_job_);
  EXPECT_CODE(viewer_->jobs->Cancel(ctx().get(), cancel_a, &job), grpc::StatusCode::PERMISSION_DENIED);

  // Admin-only operations.
  v1::DrainNodeRequest drain;
  drain.set_name("sim-1");
  v1::Node node;
  EXPECT_CODE(alice_->nodes->Drain(ctx().get(), drain, &node), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Http(alice_->token, "POST", "/api/v1/nodes/sim-1/drain").status, 403);
  ++attempts;
  EXPECT_CODE(lead_->nodes->Drain(ctx().get(), drain, &node), grpc::StatusCode::PERMISSION_DENIED);
  v1::InjectFaultRequest fault;
  fault.set_node("sim-1");
  fault.set_fault("lost");
  v1::InjectFaultResponse fault_resp;
  EXPECT_CODE(alice_->nodes->InjectFault(ctx().get(), fault, &fault_resp), grpc::StatusCode::PERMISSION_DENIED);
  v1::ListAuditResponse audit_list;
  EXPECT_CODE(alice_->audit->List(ctx().get(), v1::ListAuditRequest(), &audit_list),
              grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Http(lead_->token, "GET", "/api/v1/audit/verify").status, 403);
  ++attempts;
  v1::CreateJoinTokenResponse join_resp;
  EXPECT_CODE(lead_->auth->CreateJoinToken(ctx().get(), v1::CreateJoinTokenRequest(), &join_resp),
              grpc::StatusCode::PERMISSION_DENIED);

  // Escalate a role.
  v1::CreateTokenRequest escalate;
  escalate.set_name("me-too");
  escalate.set_role("admin");
  v1::CreateTokenResponse created;
  EXPECT_CODE(alice_->auth->CreateToken(ctx().get(), escalate, &created), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_CODE(lead_->auth->CreateToken(ctx().get(), escalate, &created), grpc::StatusCode::PERMISSION_DENIED);
  escalate.set_role("user");
  escalate.set_tenant("team-b");
  EXPECT_CODE(lead_->auth->CreateToken(ctx().get(), escalate, &created), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Http(alice_->token, "POST", "/api/v1/tokens", R"({"name":"x","role":"tenant-admin"})").status, 403);
  ++attempts;
  // Revoke another tenant's token: not found, and it still works.
  v1::ListTokensResponse lead_tokens;
  EXPECT_CODE(lead_->auth->ListTokens(ctx().get(), v1::ListTokensRequest(), &lead_tokens), grpc::StatusCode::OK);
  for (const v1::TokenInfo& t : lead_tokens.tokens()) EXPECT_EQ(t.tenant(), "team-a") << t.name();
  v1::Principal bob_who;
  ASSERT_TRUE(bob_->auth->WhoAmI(ctx().get(), v1::WhoAmIRequest(), &bob_who).ok());
  v1::RevokeTokenRequest revoke_bob;
  revoke_bob.set_id(bob_who.token_id());
  v1::TokenInfo revoked_info;
  EXPECT_CODE(lead_->auth->RevokeToken(ctx().get(), revoke_bob, &revoked_info), grpc::StatusCode::NOT_FOUND);
  EXPECT_CODE(alice_->auth->RevokeToken(ctx().get(), revoke_bob, &revoked_info), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(bob_->auth->WhoAmI(ctx().get(), v1::WhoAmIRequest(), &bob_who).ok());

  // Missing, malformed, wrong, revoked and expired tokens.
  Caller nobody = Connect("");
  Submit(nobody, {"true"}, "", &submit_status);
  EXPECT_CODE(submit_status, grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Http("", "POST", "/api/v1/jobs", R"({"spec":{"gpus":1,"command":["true"]}})").status, 401);
  ++attempts;
  EXPECT_EQ(Http("", "GET", "/api/v1/jobs/" + bob_job_).status, 401);
  ++attempts;
  Caller garbage = Connect("drv_not-a-token");
  EXPECT_CODE(garbage.jobs->Get(ctx().get(), get_b, &job), grpc::StatusCode::UNAUTHENTICATED);
  std::string wrong = alice_->token;
  wrong.back() = wrong.back() == 'A' ? 'B' : 'A';
  Caller forged = Connect(wrong);
  EXPECT_CODE(forged.jobs->List(ctx().get(), v1::ListJobsRequest(), &listed), grpc::StatusCode::UNAUTHENTICATED);
  std::string carol_id;
  Caller carol = Connect(CreateToken("carol", "team-a", "user", "", &carol_id));
  v1::RevokeTokenRequest revoke_carol;
  revoke_carol.set_id(carol_id);
  ASSERT_TRUE(admin_->auth->RevokeToken(ctx().get(), revoke_carol, &revoked_info).ok());
  EXPECT_CODE(carol.jobs->List(ctx().get(), v1::ListJobsRequest(), &listed), grpc::StatusCode::UNAUTHENTICATED);
  Caller brief = Connect(CreateToken("brief", "team-a", "user", "1s"));
  EXPECT_TRUE(WaitUntil([&] {
    v1::ListJobsResponse r;
    auto c = Ctx();
    return brief.jobs->List(c.get(), v1::ListJobsRequest(), &r).error_code() == grpc::StatusCode::UNAUTHENTICATED;
  }));
  ++attempts;

  // Forge a node identity.
  std::string rogue_token = JoinAs("rogue-1");
  Caller rogue = Connect(rogue_token);
  v1::RegisterRequest reg;
  reg.set_node_name("sim-1");
  v1::RegisterResponse reg_resp;
  EXPECT_CODE(rogue.agent->Register(ctx().get(), reg, &reg_resp), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_CODE(admin_->agent->Register(ctx().get(), reg, &reg_resp), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_CODE(nobody.agent->Register(ctx().get(), reg, &reg_resp), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_CODE(rogue.jobs->List(ctx().get(), v1::ListJobsRequest(), &listed), grpc::StatusCode::PERMISSION_DENIED);
  {
    auto sctx = Ctx();
    auto stream = rogue.agent->Session(sctx.get());
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node_name("sim-1");
    stream->Write(hello);
    stream->WritesDone();
    v1::ServerMessage msg;
    while (stream->Read(&msg)) {
    }
    EXPECT_CODE(stream->Finish(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // A session with no credential, and one that does not start with a hello.
  for (bool authenticated : {false, true}) {
    auto sctx = Ctx();
    auto stream = (authenticated ? rogue : nobody).agent->Session(sctx.get());
    v1::AgentMessage first;
    if (authenticated) {
      first.mutable_heartbeat()->set_seq(1);
    } else {
      first.mutable_hello()->set_node_name("sim-1");
    }
    stream->Write(first);
    stream->WritesDone();
    v1::ServerMessage msg;
    while (stream->Read(&msg)) {
    }
    EXPECT_CODE(stream->Finish(),
                authenticated ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::UNAUTHENTICATED);
  }
  // As itself, the rogue node may talk, but not for a job it does not run:
  // its forged output and exit for Bob's job are dropped.
  reg.set_node_name("rogue-1");
  reg.set_cpu_millis(1000);
  reg.set_memory_bytes(1 << 30);
  ASSERT_TRUE(rogue.agent->Register(ctx().get(), reg, &reg_resp).ok());
  {
    auto sctx = Ctx();
    auto stream = rogue.agent->Session(sctx.get());
    v1::AgentMessage m;
    m.mutable_hello()->set_node_name("rogue-1");
    ASSERT_TRUE(stream->Write(m));
    m.Clear();
    m.mutable_log()->set_job_id(bob_job_);
    m.mutable_log()->set_offset(0);
    m.mutable_log()->set_data("FORGED\n");
    EXPECT_TRUE(stream->Write(m));
    m.Clear();
    v1::WorkloadStatus* ws = m.mutable_status()->add_workloads();
    ws->set_job_id(bob_job_);
    ws->set_state(v1::WORKLOAD_STATE_EXITED);
    ws->set_exit_code(0);
    EXPECT_TRUE(stream->Write(m));
    stream->WritesDone();
    v1::ServerMessage msg;
    while (stream->Read(&msg)) {
    }
    (void)stream->Finish();
    ++attempts;
  }
  // Join tokens: replayed, bound to another name.
  v1::CreateJoinTokenRequest jr;
  jr.set_node("gpu-07");
  ASSERT_TRUE(admin_->auth->CreateJoinToken(ctx().get(), jr, &join_resp).ok());
  v1::JoinRequest join;
  join.set_join_token(join_resp.join_token());
  join.set_node_name("gpu-08");
  v1::JoinResponse joined;
  EXPECT_CODE(nobody.agent->Join(ctx().get(), join, &joined), grpc::StatusCode::PERMISSION_DENIED);
  jr.set_node("");
  ASSERT_TRUE(admin_->auth->CreateJoinToken(ctx().get(), jr, &join_resp).ok());
  join.set_join_token(join_resp.join_token());
  join.set_node_name("gpu-09");
  ASSERT_TRUE(nobody.agent->Join(ctx().get(), join, &joined).ok());
  EXPECT_CODE(nobody.agent->Join(ctx().get(), join, &joined), grpc::StatusCode::UNAUTHENTICATED);

  EXPECT_GE(attempts, 30);
  ExpectNothingChanged(jobs);

  // Every refused state-changing call is in the audit log, and it verifies.
  auto audit = Http(up_->token(), "GET", "/api/v1/audit");
  ASSERT_EQ(audit.status, 200);
  auto entries = nlohmann::json::parse(audit.body)["entries"];
  int denied = 0;
  bool forged_log = false, forged_node = false;
  for (const auto& e : entries) {
    std::string result = e.value("result", "");
    if (result.starts_with("permission denied") || result.starts_with("not found") ||
        result.starts_with("unauthenticated")) {
      ++denied;
    }
    forged_log = forged_log || (e.value("action", "") == "agent.log" && e.value("who", "") == "rogue-1");
    forged_node = forged_node || (e.value("action", "") == "agent.register" && e.value("target", "") == "sim-1");
  }
  EXPECT_GE(denied, 15);
  EXPECT_TRUE(forged_log);
  EXPECT_TRUE(forged_node);
  CommandResult verify = RunCli(up_->grpc_address(), {"audit", "verify"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

TEST_F(SecurityTest, CliTokensWhoamiAndLogin) {
  CommandResult created =
      RunCli(up_->grpc_address(), {"tokens", "create", "ci-bot", "--tenant", "team-c", "--role", "user"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string token = created.out.substr(0, created.out.find('\n'));
  ASSERT_TRUE(token.starts_with("drv_")) << created.out;
  CommandResult who = RunCli(up_->grpc_address(), {"whoami"}, {"DROVER_TOKEN=" + token});
  EXPECT_EQ(who.exit_code, 0) << who.err;
  EXPECT_NE(who.out.find("tenant: team-c"), std::string::npos) << who.out;
  // The token's tenant wins over nothing: the CLI's submit lands in team-c.
  CommandResult submitted =
      RunCli(up_->grpc_address(), {"submit", "--gpus", "1", "--", "true"}, {"DROVER_TOKEN=" + token});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  std::string id = submitted.out.substr(0, submitted.out.find('\n'));
  EXPECT_EQ(GetJob(admin_->jobs.get(), id).spec().tenant(), "team-c");
  CommandResult listed = RunCli(up_->grpc_address(), {"tokens", "list"});
  EXPECT_NE(listed.out.find("ci-bot"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find(token.substr(21)), std::string::npos) << "a token's secret must never be listed";
  CommandResult denied = RunCli(up_->grpc_address(), {"drain", "sim-1"}, {"DROVER_TOKEN=" + token});
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_NE(denied.err.find("may not drain"), std::string::npos) << denied.err;
  CommandResult no_token = RunCli(up_->grpc_address(), {"jobs"}, {"DROVER_TOKEN=drv_bogus"});
  EXPECT_NE(no_token.exit_code, 0);
  EXPECT_NE(no_token.err.find("token"), std::string::npos) << no_token.err;
  // A login link opens exactly one dashboard session.
  CommandResult ui = RunCli(up_->grpc_address(), {"ui"});
  ASSERT_EQ(ui.exit_code, 0) << ui.err;
  std::string code = ui.out.substr(ui.out.find("#code=") + 6);
  code = code.substr(0, code.find('\n'));
  auto first = http::HttpRequest(up_->http_address(), "POST", "/api/v1/session", R"({"code":")" + code + R"("})");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->status, 200) << first->body;
  EXPECT_NE(first->headers["set-cookie"].find("HttpOnly"), std::string::npos);
  EXPECT_NE(first->headers["set-cookie"].find("SameSite=Strict"), std::string::npos);
  auto again = http::HttpRequest(up_->http_address(), "POST", "/api/v1/session", R"({"code":")" + code + R"("})");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 401);
}

TEST_F(SecurityTest, BrowserRulesOnTheWire) {
  const int jobs = JobCount();
  const std::string body = R"({"spec":{"gpus":1,"command":["sh","-c","echo pwned"]}})";
  auto post = [&](std::map<std::string, std::string> headers, const std::string& type) {
    headers["Authorization"] = "Bearer " + up_->token();
    auto r = http::HttpRequest(up_->http_address(), "POST", "/api/v1/jobs", body, type, headers);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->status : 0;
  };
  EXPECT_EQ(post({}, "text/plain"), 415);
  EXPECT_EQ(post({}, "application/x-www-form-urlencoded"), 415);
  EXPECT_EQ(post({}, "multipart/form-data; boundary=x"), 415);
  EXPECT_EQ(post({{"Origin", "http://evil.example"}}, "application/json"), 403);
  EXPECT_EQ(post({{"Origin", "null"}}, "application/json"), 403);
  EXPECT_EQ(post({{"Sec-Fetch-Site", "cross-site"}}, "application/json"), 403);
  EXPECT_EQ(post({{"Host", "evil.example:8080"}}, "application/json"), 403);
  EXPECT_EQ(JobCount(), jobs);
  // A session cookie without its CSRF token changes nothing.
  auto login =
      http::HttpRequest(up_->http_address(), "POST", "/api/v1/session", R"({"token":")" + up_->token() + R"("})");
  ASSERT_TRUE(login.ok());
  ASSERT_EQ(login->status, 200);
  std::string cookie = login->headers["set-cookie"].substr(0, login->headers["set-cookie"].find(';'));
  std::string csrf = nlohmann::json::parse(login->body)["csrfToken"];
  auto with_cookie = [&](std::map<std::string, std::string> headers) {
    headers["Cookie"] = cookie;
    auto r =
        http::HttpRequest(up_->http_address(), "POST", "/api/v1/nodes/sim-1/drain", "{}", "application/json", headers);
    return r.ok() ? r->status : 0;
  };
  EXPECT_EQ(with_cookie({}), 403);
  EXPECT_EQ(with_cookie({{"X-CSRF-Token", "wrong"}}), 403);
  auto read = http::HttpRequest(up_->http_address(), "GET", "/api/v1/fleet", "", "", {{"Cookie", cookie}});
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->status, 200);
  ExpectNothingChanged(jobs);
  // With it, the dashboard's own call works (so the refusals above are the rules, not a broken cookie).
  EXPECT_EQ(with_cookie({{"X-CSRF-Token", csrf}, {"Origin", "http://" + up_->http_address()}}), 200);
  v1::DrainNodeRequest undrain;
  undrain.set_name("sim-1");
  v1::Node node;
  auto c = Ctx();
  ASSERT_TRUE(admin_->nodes->Undrain(c.get(), undrain, &node).ok());
  // Health and readiness stay open; /metrics needs a token.
  EXPECT_EQ(Http("", "GET", "/healthz").status, 200);
  EXPECT_EQ(Http("", "GET", "/readyz").status, 200);
  EXPECT_EQ(Http("", "GET", "/metrics").status, 401);
  EXPECT_EQ(Http(up_->token(), "GET", "/metrics").status, 200);
}

// Tenants as data, end to end through the CLI: a runtime limit stops a real
// job, which ends FAILED with the reason; a pending-jobs quota refuses a
// submission; only an admin changes tenants; every change is audited.
TEST_F(SecurityTest, TenantQuotasFromTheCli) {
  CommandResult created = RunCli(up_->grpc_address(), {"tenants", "create", "team-q", "--weight", "2", "--max-runtime",
                                                       "2s", "--max-pending", "1", "--max-gpus", "*=1"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  CommandResult again = RunCli(up_->grpc_address(), {"tenants", "create", "team-q"});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  std::string user = CreateToken("quinn", "team-q", "user");
  CommandResult denied =
      RunCli(up_->grpc_address(), {"tenants", "set", "team-q", "--max-runtime", "0"}, {"DROVER_TOKEN=" + user});
  EXPECT_NE(denied.exit_code, 0);
  EXPECT_NE(denied.err.find("may not change tenants"), std::string::npos) << denied.err;

  CommandResult first = RunCli(up_->grpc_address(), {"submit", "--", "sleep", "600"}, {"DROVER_TOKEN=" + user});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::string id = first.out.substr(0, first.out.find('\n'));
  // At most one GPU at once: the second job waits; a third is one pending job too many.
  CommandResult second = RunCli(up_->grpc_address(), {"submit", "--", "true"}, {"DROVER_TOKEN=" + user});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  CommandResult third = RunCli(up_->grpc_address(), {"submit", "--", "true"}, {"DROVER_TOKEN=" + user});
  EXPECT_EQ(third.exit_code, 2) << third.err;
  EXPECT_NE(third.err.find("pending jobs"), std::string::npos) << third.err;
  // The runtime limit stops the sleeping job within its 2 s (plus the check's second and the grace).
  ASSERT_TRUE(WaitUntil([&] { return GetJob(admin_->jobs.get(), id).status().state() == v1::JOB_STATE_FAILED; },
                        std::chrono::seconds(60)));
  EXPECT_NE(GetJob(admin_->jobs.get(), id).status().message().find("runtime limit of 2s"), std::string::npos)
      << GetJob(admin_->jobs.get(), id).status().message();
  std::string second_id = second.out.substr(0, second.out.find('\n'));
  EXPECT_TRUE(
      WaitUntil([&] { return GetJob(admin_->jobs.get(), second_id).status().state() == v1::JOB_STATE_SUCCEEDED; }));

  CommandResult listed = RunCli(up_->grpc_address(), {"tenants", "list", "-o", "json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  auto tenants = nlohmann::json::parse(listed.out)["tenants"];
  bool found = false;
  for (const auto& t : tenants) {
    if (t["name"] != "team-q") continue;
    found = true;
    EXPECT_TRUE(t["stored"].get<bool>());
    EXPECT_EQ(t["quota"]["maxRuntimeSeconds"], "2");
  }
  EXPECT_TRUE(found) << listed.out;
  auto audit = Http(up_->token(), "GET", "/api/v1/audit");
  EXPECT_NE(audit.body.find("tenants.create"), std::string::npos);
}

TEST_F(SecurityTest, AuditVerifyFailsAfterAnEntryIsEdited) {
  v1::DrainNodeRequest drain;
  drain.set_name("sim-1");
  v1::Node node;
  auto c1 = Ctx();
  ASSERT_TRUE(admin_->nodes->Drain(c1.get(), drain, &node).ok());
  auto c2 = Ctx();
  ASSERT_TRUE(admin_->nodes->Undrain(c2.get(), drain, &node).ok());
  CommandResult ok = RunCli(up_->grpc_address(), {"audit", "verify"});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  CommandResult listed = RunCli(up_->grpc_address(), {"audit", "-o", "json"});
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.out.find("nodes.drain"), std::string::npos);
  // Rewrite who drained the node, straight in the SQLite file.
  std::string db = up_->data_dir() + "/drover.db";
  std::string sql =
      "PRAGMA busy_timeout=5000; UPDATE kv SET value = CAST(replace(CAST(value AS TEXT), '\"action\":\"nodes.drain\"', "
      "'\"action\":\"nodes.look\"') AS BLOB) WHERE CAST(key AS TEXT) LIKE '/audit/%' "
      "AND CAST(value AS TEXT) LIKE '%nodes.drain%';";
  std::string script = up_->data_dir() + "/tamper.sql";
  std::ofstream(script) << sql << "\n";
  ASSERT_EQ(std::system(("sqlite3 '" + db + "' < '" + script + "'").c_str()), 0);
  CommandResult broken = RunCli(up_->grpc_address(), {"audit", "verify"});
  EXPECT_EQ(broken.exit_code, 1) << broken.out << broken.err;
  EXPECT_NE(broken.out.find("edited"), std::string::npos) << broken.out;
}

// Rate limits answer 429 with Retry-After (REST) and RESOURCE_EXHAUSTED with
// a retry-after-ms trailer (gRPC); reads have their own, larger bucket.
TEST(RateLimitTest, WritesBeyondTheBucketAreRefusedWithARetryHint) {
  TempDir dir;
  DroverUp up(dir.path() + "/data", {"--devices", "none", "--rate-limit-writes", "0.001:2"});
  ASSERT_TRUE(up.Start());
  const std::string body = R"({"spec":{"gpus":1,"command":["true"]}})";
  auto post = [&] {
    auto r = http::HttpRequest(up.http_address(), "POST", "/api/v1/jobs", body, "application/json",
                               {{"Authorization", "Bearer " + up.token()}});
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : http::ClientResponse{};
  };
  // No node: the jobs are refused as never fitting (400), but each one is a
  // state-changing call that takes a token from the bucket.
  EXPECT_NE(post().status, 429);
  EXPECT_NE(post().status, 429);
  http::ClientResponse limited = post();
  EXPECT_EQ(limited.status, 429) << limited.body;
  EXPECT_FALSE(limited.headers["retry-after"].empty());
  EXPECT_EQ(nlohmann::json::parse(limited.body)["status"], "RESOURCE_EXHAUSTED");
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_gpus(1);
  req.mutable_spec()->add_command("true");
  v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  grpc::Status s = up.jobs()->Submit(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(ctx.GetServerTrailingMetadata().count("retry-after-ms"), 1u);
  // Reads are not held up by the spent write bucket.
  EXPECT_EQ(ListJobs(up.jobs()).size(), 0u);
}

}  // namespace
}  // namespace drover::testing
