// Issue 37's attacks on the REST edge, in process: a flood of logins with
// one token, repeated refusals, bodies of nested brackets, a viewer's POST,
// and the default quotas of a tenant nobody configured.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "drover/auth/audit.h"
#include "drover/server/api_service.h"
#include "drover/server/control_loop_test_fixture.h"
#include "drover/server/edge.h"
#include "drover/server/rest.h"
#include "drover/server/rest_streams.h"

namespace drover::server::testing {
namespace {

using nlohmann::json;

// This process's resident set in bytes (VmRSS in /proc/self/status).
int64_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("VmRSS:")) return std::stoll(line.substr(6)) * 1024;  // "VmRSS:  123456 kB"
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

class RestLimitsTest : public ControlLoopTest {
 protected:
  void SetUp() override {
    // Small defaults, so that a test reaches them with a few jobs.
    options_.tenant_defaults = TenantDefaults{5, 4};
    ControlLoopTest::SetUp();
    if (HasFatalFailure()) return;
    authority_ = std::make_unique<auth::Authority>(store_.get(), &clock_);
    audit_ = std::make_unique<auth::AuditLog>(store_.get(), &clock_);
    admin_token_ = Mint("root", "default", auth::Role::kAdmin);
    user_token_ = Mint("mallory", "other", auth::Role::kUser);
    viewer_token_ = Mint("peek", "other", auth::Role::kViewer);
  }
  void TearDown() override {
    handler_ = nullptr;
    streams_.reset();
    edge_.reset();
    api_.reset();
    audit_.reset();
    authority_.reset();
    ControlLoopTest::TearDown();
  }

  void Serve(SecurityOptions options = {}) {
    api_ = std::make_unique<ApiService>(loop_.get(), nullptr, authority_.get(), audit_.get());
    edge_ = std::make_unique<Edge>(authority_.get(), &clock_, options);
    streams_ = std::make_unique<RestStreams>(api_.get());
    handler_ = MakeRestHandler(
        {api_.get(), edge_.get(), authority_.get(), [] { return Status::Ok(); }, &metrics_, streams_.get()});
  }

  std::string Mint(const std::string& name, const std::string& tenant, auth::Role role) {
    auth::CreateTokenRequest cr;
    cr.name = name;
    cr.tenant = tenant;
    cr.role = role;
    auto t = authority_->MintInternal(cr);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : "";
  }

  http::Response Call(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& token, const std::string& cookie = "") {
    http::Request r;
    r.method = method;
    r.path = path;
    r.body = body;
    if (!token.empty()) r.headers["authorization"] = "Bearer " + token;
    if (!cookie.empty()) r.headers["cookie"] = std::string(kSessionCookie) + "=" + cookie;
    if (!body.empty()) r.headers["content-type"] = "application/json";
    r.remote = "127.0.0.1:5555";
    return handler_(r);
  }

  static std::string CookieOf(const http::Response& r) {
    auto it = r.headers.find("Set-Cookie");
    if (it == r.headers.end()) return "";
    size_t eq = it->second.find('=');
    return it->second.substr(eq + 1, it->second.find(';') - eq - 1);
  }

  size_t AuditEntries(const std::string& action = "") {
    auto entries = audit_->List(0);
    EXPECT_TRUE(entries.ok()) << entries.status().ToString();
    if (!entries.ok()) return 0;
    return std::count_if(entries->begin(), entries->end(),
                         [&](const auth::AuditEntry& e) { return action.empty() || e.action == action; });
  }

  std::unique_ptr<auth::Authority> authority_;
  std::unique_ptr<auth::AuditLog> audit_;
  std::unique_ptr<ApiService> api_;
  std::unique_ptr<Edge> edge_;
  std::unique_ptr<RestStreams> streams_;
  metrics::Registry metrics_;
  http::Handler handler_;
  std::string admin_token_, user_token_, viewer_token_;
};

// The attack of issue 37: 10,100 logins with one user token in 4 s evicted
// the admin's session and wrote 10,101 audit entries.
TEST_F(RestLimitsTest, ALoginFloodWithOneTokenIsRateLimitedAndLeavesTheAdminsSession) {
  SecurityOptions options;
  options.per_token = {1, 100};  // the clock stands still: 100 logins, then 429
  Serve(options);
  http::Response admin = Call("POST", "/api/v1/session", json{{"token", admin_token_}}.dump(), "");
  ASSERT_EQ(admin.status, 200) << admin.body;
  const std::string admin_cookie = CookieOf(admin);
  ASSERT_FALSE(admin_cookie.empty());
  const size_t entries_before = AuditEntries();

  const std::string body = json{{"token", user_token_}}.dump();
  int opened = 0, limited = 0;
  bool retry_hint = true;
  for (int i = 0; i < 10'100; ++i) {
    http::Response r = Call("POST", "/api/v1/session", body, "");
    opened += r.status == 200 ? 1 : 0;
    if (r.status == 429) {
      ++limited;
      retry_hint = retry_hint && r.headers.count("Retry-After") == 1;
    }
  }
  EXPECT_EQ(opened, 100) << "logins past the token's bucket are refused like any other call";
  EXPECT_EQ(limited, 10'000);
  EXPECT_TRUE(retry_hint);
  EXPECT_EQ(Call("GET", "/api/v1/session", "", "", admin_cookie).status, 200) << "the admin's session ended";
  EXPECT_EQ(Call("GET", "/api/v1/whoami", "", "", admin_cookie).status, 200);
  EXPECT_LE(AuditEntries() - entries_before, 100u);
}

TEST_F(RestLimitsTest, RepeatedRefusalsAreSummarisedNotWrittenOneByOne) {
  SecurityOptions options;
  options.failures_per_source = {1, 1000};
  Serve(options);
  const std::string wrong = json{{"token", "drv_0123456789abcdef_" + std::string(43, 'x')}}.dump();
  for (int i = 0; i < 300; ++i) ASSERT_EQ(Call("POST", "/api/v1/session", wrong, "").status, 401);
  const std::string job = R"({"spec": {"gpus": 1, "command": ["true"]}})";
  for (int i = 0; i < 300; ++i) ASSERT_EQ(Call("POST", "/api/v1/jobs", job, viewer_token_).status, 403);
  EXPECT_EQ(AuditEntries("session.open"), static_cast<size_t>(auth::RefusalDigest::kInFull));
  EXPECT_EQ(AuditEntries("jobs.submit"), static_cast<size_t>(auth::RefusalDigest::kInFull));
  // The server stops within the minute: the counts are written, not lost.
  handler_ = nullptr;
  streams_.reset();
  api_.reset();
  EXPECT_EQ(AuditEntries("jobs.submit"), static_cast<size_t>(auth::RefusalDigest::kInFull) + 1);
  auto entries = audit_->List(0);
  ASSERT_TRUE(entries.ok());
  const std::string summed = std::to_string(300 - auth::RefusalDigest::kInFull) + " more refusals like this";
  EXPECT_EQ(std::count_if(entries->begin(), entries->end(),
                          [&](const auth::AuditEntry& e) { return e.result.find(summed) != std::string::npos; }),
            2)
      << "one summary each for the logins and the submits";
}

TEST_F(RestLimitsTest, NestedBodiesAreRefusedBeforeAnyParserAndCostNoMemory) {
  Serve();
  // ~1 MB of 520,000 nested brackets, alone and inside a job.
  const std::string nested = std::string(520'000, '[') + std::string(520'000, ']');
  const std::string in_job = R"({"spec": {"gpus": 1, "command": )" + nested + "}}";
  http::Response job = Call("POST", "/api/v1/jobs", in_job, user_token_);
  EXPECT_EQ(job.status, 400);
  EXPECT_NE(job.body.find("deeper than 64 levels"), std::string::npos) << job.body.substr(0, 200);
  EXPECT_EQ(Call("POST", "/api/v1/session", nested, "").status, 400);
  EXPECT_EQ(Call("POST", "/api/v1/session", json{{"token", nested}}.dump(), "").status, 400);

  const int64_t before = ResidentBytes();
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      http::Response r =
          i % 2 == 0 ? Call("POST", "/api/v1/session", nested, "") : Call("POST", "/api/v1/jobs", in_job, user_token_);
      if (r.status == 400) refused.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  const int64_t grown = ResidentBytes() - before;
  EXPECT_EQ(refused.load(), 8);
  // The bodies are the test's (8 MB); a parser that built them would take
  // ~130 MB each, kept by glibc.
  EXPECT_LT(grown, int64_t{48} << 20) << "the server's memory grew by " << (grown >> 20) << " MiB";
  EXPECT_TRUE(Jobs().empty());
}

TEST_F(RestLimitsTest, AViewersPostIsRefusedBeforeItsBodyIsParsed) {
  Serve();
  const std::string nested = R"({"spec": {"command": )" + std::string(100'000, '[') + "}}";
  http::Response r = Call("POST", "/api/v1/jobs", nested, viewer_token_);
  EXPECT_EQ(r.status, 403) << r.body.substr(0, 200);
  EXPECT_NE(r.body.find("role viewer may not submit jobs"), std::string::npos) << r.body.substr(0, 200);
  EXPECT_EQ(Call("POST", "/api/v1/jobs/batch", "not json", viewer_token_).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/deployments", "not json", viewer_token_).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/tenants", "not json", user_token_).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/tokens", "not json", user_token_).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/join-tokens", "not json", user_token_).status, 403);
  // The caller who may: the body's fault, said as such.
  EXPECT_EQ(Call("POST", "/api/v1/jobs", "not json", user_token_).status, 400);
  EXPECT_EQ(AuditEntries("jobs.submit"), 1u) << "the refusal is audited as the call would have been";
}

TEST_F(RestLimitsTest, DefaultQuotasRefuseWithAClearMessageAndAnAdminRaisesThem) {
  Serve();
  Connect("n1", 1);
  auto message = [](const http::Response& r) { return json::parse(r.body, nullptr, false).value("message", ""); };
  const std::string array5 = R"({"spec": {"gpus": 1, "command": ["true"]}, "array": {"first": 1, "last": 5}})";
  http::Response big = Call("POST", "/api/v1/jobs", array5, user_token_);
  EXPECT_EQ(big.status, 429) << big.body;
  EXPECT_NE(big.body.find("RESOURCE_EXHAUSTED"), std::string::npos) << big.body;
  EXPECT_NE(message(big).find("5 jobs in one submit for tenant 'other' is over its limit of 4"), std::string::npos)
      << message(big);
  EXPECT_NE(message(big).find("--default-max-array-tasks"), std::string::npos) << message(big);
  EXPECT_TRUE(Jobs().empty()) << "refused whole";

  const std::string one = R"({"spec": {"gpus": 1, "command": ["true"]}})";
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Call("POST", "/api/v1/jobs", one, user_token_).status, 201) << i;  // 1 runs
  http::Response full = Call("POST", "/api/v1/jobs", one, user_token_);
  EXPECT_EQ(full.status, 429) << full.body;
  EXPECT_NE(message(full).find("tenant 'other' has 5 pending jobs; 1 more would pass its limit of 5"),
            std::string::npos)
      << message(full);
  EXPECT_NE(message(full).find("--default-max-pending-jobs"), std::string::npos) << message(full);
  // Another tenant has its own allowance.
  std::string other_user = Mint("ann", "team-a", auth::Role::kUser);
  EXPECT_EQ(Call("POST", "/api/v1/jobs", one, other_user).status, 201);

  // A user may not raise them; an admin may.
  const std::string raised =
      R"({"name": "other", "borrowLimit": -1, "quota": {"maxPendingJobs": 100, "maxArrayTasks": 50}})";
  EXPECT_EQ(Call("POST", "/api/v1/tenants", raised, user_token_).status, 403);
  http::Response set = Call("POST", "/api/v1/tenants", raised, admin_token_);
  ASSERT_EQ(set.status, 201) << set.body;
  const std::string array10 = R"({"spec": {"gpus": 1, "command": ["true"]}, "array": {"first": 1, "last": 10}})";
  http::Response accepted = Call("POST", "/api/v1/jobs", array10, user_token_);
  EXPECT_EQ(accepted.status, 201) << accepted.body;
  // -1 is no limit of the tenant's own; past the hard limit is refused.
  const std::string unbounded = R"({"name": "other", "borrowLimit": -1, "quota": {"maxPendingJobs": -1}})";
  EXPECT_EQ(Call("PUT", "/api/v1/tenants/other", unbounded, admin_token_).status, 200);
  const std::string too_big = R"({"name": "other", "quota": {"maxArrayTasks": 100001}})";
  EXPECT_EQ(Call("PUT", "/api/v1/tenants/other", too_big, admin_token_).status, 400);
}

}  // namespace
}  // namespace drover::server::testing
