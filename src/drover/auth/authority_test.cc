#include "drover/auth/authority.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "drover/auth/test_store.h"

namespace drover::auth {
namespace {

class AuthorityTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  testing::TempStore store_{&clock_};
  Authority auth_{store_.get(), &clock_};
  Principal admin_{"", "root", "default", Role::kAdmin, "", ""};

  std::pair<TokenInfo, std::string> Make(const Principal& by, CreateTokenRequest req) {
    auto r = auth_.CreateToken(by, req);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::pair<TokenInfo, std::string>{};
  }
};

TEST_F(AuthorityTest, CreatedTokenAuthenticatesWithItsTenantAndRole) {
  auto [info, text] = Make(admin_, {"ci", "team-a", Role::kUser, "", std::chrono::hours(1)});
  auto p = auth_.Authenticate(text);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->tenant, "team-a");
  EXPECT_EQ(p->role, Role::kUser);
  EXPECT_EQ(p->token_id, info.id);
  EXPECT_EQ(p->name, "ci");
}

TEST_F(AuthorityTest, StoreHoldsOnlyTheHash) {
  auto [info, text] = Make(admin_, {"ci", "team-a", Role::kUser, "", Duration(0)});
  auto range = store_.get()->Range("");
  ASSERT_TRUE(range.ok());
  std::string secret = text.substr(text.size() - kTokenSecretChars);
  for (const auto& kv : range->kvs) EXPECT_EQ(kv.value.find(secret), std::string::npos) << kv.key;
}

TEST_F(AuthorityTest, WrongSecretExpiredAndRevokedAreRefused) {
  auto [info, text] = Make(admin_, {"ci", "team-a", Role::kUser, "", std::chrono::hours(1)});
  std::string wrong = text;
  wrong.back() = wrong.back() == 'A' ? 'B' : 'A';
  EXPECT_EQ(auth_.Authenticate(wrong).status().code(), Code::kUnauthenticated);
  EXPECT_EQ(auth_.Authenticate("drv_0000000000000000_" + std::string(43, 'a')).status().code(), Code::kUnauthenticated);

  clock_.Advance(std::chrono::hours(2));
  auto expired = auth_.Authenticate(text);
  EXPECT_EQ(expired.status().code(), Code::kUnauthenticated);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos);

  auto [info2, text2] = Make(admin_, {"ci2", "team-a", Role::kUser, "", Duration(0)});
  ASSERT_TRUE(auth_.Authenticate(text2).ok());
  ASSERT_TRUE(auth_.RevokeToken(admin_, info2.id).ok());
  auto revoked = auth_.Authenticate(text2);
  EXPECT_EQ(revoked.status().code(), Code::kUnauthenticated);
  EXPECT_NE(revoked.status().message().find("revoked"), std::string::npos);
}

TEST_F(AuthorityTest, TenantAdminStaysInsideItsTenant) {
  auto [ta_info, ta_text] = Make(admin_, {"lead", "team-a", Role::kTenantAdmin, "", Duration(0)});
  auto ta = auth_.Authenticate(ta_text);
  ASSERT_TRUE(ta.ok());
  EXPECT_TRUE(auth_.CreateToken(*ta, {"dev", "team-a", Role::kUser, "", Duration(0)}).ok());
  EXPECT_EQ(auth_.CreateToken(*ta, {"dev", "team-b", Role::kUser, "", Duration(0)}).status().code(),
            Code::kPermissionDenied);
  EXPECT_EQ(auth_.CreateToken(*ta, {"boss", "team-a", Role::kAdmin, "", Duration(0)}).status().code(),
            Code::kPermissionDenied);
  EXPECT_EQ(auth_.CreateToken(*ta, {"n1", "team-a", Role::kNode, "n1", Duration(0)}).status().code(),
            Code::kPermissionDenied);
  auto [other, other_text] = Make(admin_, {"x", "team-b", Role::kUser, "", Duration(0)});
  // Another tenant's token is invisible: not listed, and revoking it is "not found".
  auto list = auth_.ListTokens(*ta);
  ASSERT_TRUE(list.ok());
  for (const auto& t : *list) EXPECT_EQ(t.tenant, "team-a");
  EXPECT_EQ(auth_.RevokeToken(*ta, other.id).status().code(), Code::kNotFound);
  EXPECT_TRUE(auth_.Authenticate(other_text).ok());
}

TEST_F(AuthorityTest, UsersAndViewersCannotCreateTokens) {
  for (Role r : {Role::kUser, Role::kViewer, Role::kNode}) {
    Principal p{"", "p", "team-a", r, r == Role::kNode ? "n" : "", ""};
    EXPECT_EQ(auth_.CreateToken(p, {"t", "team-a", Role::kViewer, "", Duration(0)}).status().code(),
              Code::kPermissionDenied)
        << RoleName(r);
  }
}

// A gateway token (for `drover gateway` apart from the servers): only an
// admin makes one, it carries no per-minute limits (it is no API key), a
// tenant-admin can neither make nor revoke one, and it opens no dashboard.
TEST_F(AuthorityTest, GatewayTokensAreMadeByAdminsAloneAndAreNoApiKeys) {
  auto [info, text] = Make(admin_, {"gw-1", "default", Role::kGateway, "", Duration(0)});
  auto p = auth_.Authenticate(text);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->role, Role::kGateway);
  EXPECT_EQ(RoleName(p->role), "gateway");
  CreateTokenRequest limited{"gw-2", "default", Role::kGateway, "", Duration(0)};
  limited.requests_per_minute = 100;
  EXPECT_EQ(auth_.CreateToken(admin_, limited).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(auth_.CreateToken(admin_, {"gw-3", "default", Role::kGateway, "n1", Duration(0)}).status().code(),
            Code::kInvalidArgument);
  auto [ta_info, ta_text] = Make(admin_, {"lead", "default", Role::kTenantAdmin, "", Duration(0)});
  auto ta = auth_.Authenticate(ta_text);
  ASSERT_TRUE(ta.ok());
  EXPECT_EQ(auth_.CreateToken(*ta, {"gw-4", "default", Role::kGateway, "", Duration(0)}).status().code(),
            Code::kPermissionDenied);
  EXPECT_EQ(auth_.RevokeToken(*ta, info.id).status().code(), Code::kNotFound);
  EXPECT_EQ(auth_.CreateToken(*p, {"t", "default", Role::kViewer, "", Duration(0)}).status().code(),
            Code::kPermissionDenied);
  EXPECT_EQ(auth_.OpenSession(*p).status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(auth_.Authenticate(text).ok());
}

TEST_F(AuthorityTest, BootstrapAdminFileIsPrivateAndStable) {
  std::string path = store_.dir() + "/admin.token";
  auto first = auth_.EnsureBootstrapAdmin(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  std::string text;
  std::getline(std::ifstream(path), text);
  auto p = auth_.Authenticate(text);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kAdmin);
  auto second = auth_.EnsureBootstrapAdmin(path);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second);
  std::string again;
  std::getline(std::ifstream(path), again);
  EXPECT_EQ(again, text);
}

TEST_F(AuthorityTest, JoinTokenIsSingleUseAndBoundToItsNode) {
  auto code = auth_.CreateJoinToken(admin_, "gpu-07", std::chrono::minutes(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(auth_.Join(*code, "gpu-08").status().code(), Code::kPermissionDenied);
  // The refused attempt consumed it too: a join token is good for one try.
  EXPECT_EQ(auth_.Join(*code, "gpu-07").status().code(), Code::kUnauthenticated);

  auto code2 = auth_.CreateJoinToken(admin_, "gpu-07", std::chrono::minutes(10));
  ASSERT_TRUE(code2.ok());
  auto node_token = auth_.Join(*code2, "gpu-07");
  ASSERT_TRUE(node_token.ok()) << node_token.status().ToString();
  auto p = auth_.Authenticate(*node_token);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kNode);
  EXPECT_EQ(p->node, "gpu-07");
  EXPECT_EQ(auth_.Join(*code2, "gpu-07").status().code(), Code::kUnauthenticated);  // replay

  auto code3 = auth_.CreateJoinToken(admin_, "", std::chrono::minutes(10));
  ASSERT_TRUE(code3.ok());
  clock_.Advance(std::chrono::minutes(11));
  EXPECT_EQ(auth_.Join(*code3, "gpu-09").status().code(), Code::kUnauthenticated);
  Principal user{"", "u", "default", Role::kUser, "", ""};
  EXPECT_EQ(auth_.CreateJoinToken(user, "", std::chrono::minutes(1)).status().code(), Code::kPermissionDenied);
}

TEST_F(AuthorityTest, ConcurrentJoinsWithOneTokenAdmitOne) {
  auto code = auth_.CreateJoinToken(admin_, "", std::chrono::minutes(10));
  ASSERT_TRUE(code.ok());
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      if (auth_.Join(*code, "node-" + std::to_string(i)).ok()) ++admitted;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1);
}

TEST_F(AuthorityTest, LoginCodeOpensOneSessionWhoseCsrfAndCookieDiffer) {
  auto [info, text] = Make(admin_, {"alice", "team-a", Role::kUser, "", Duration(0)});
  auto p = auth_.Authenticate(text);
  ASSERT_TRUE(p.ok());
  auto code = auth_.CreateLoginCode(*p);
  ASSERT_TRUE(code.ok());
  auto s = auth_.OpenSessionWithCode(*code);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NE(s->cookie, s->csrf_token);
  EXPECT_EQ(s->principal.tenant, "team-a");
  EXPECT_EQ(auth_.OpenSessionWithCode(*code).status().code(), Code::kUnauthenticated);
  auto found = auth_.FindSession(s->cookie);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->csrf_token, s->csrf_token);
  // Revoking the token ends its sessions.
  ASSERT_TRUE(auth_.RevokeToken(admin_, info.id).ok());
  EXPECT_EQ(auth_.FindSession(s->cookie).status().code(), Code::kUnauthenticated);
}

TEST_F(AuthorityTest, SessionsExpireAndClose) {
  auto s = auth_.OpenSession(admin_);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(auth_.FindSession(s->cookie).ok());
  auth_.CloseSession(s->cookie);
  EXPECT_FALSE(auth_.FindSession(s->cookie).ok());
  auto s2 = auth_.OpenSession(admin_);
  ASSERT_TRUE(s2.ok());
  clock_.Advance(Authority::kSessionLifetime + std::chrono::seconds(1));
  EXPECT_FALSE(auth_.FindSession(s2->cookie).ok());
  EXPECT_FALSE(auth_.FindSession("not-a-session").ok());
}

// The attack of issue 37: 10,100 logins with one user token evicted the
// admin's session (the table dropped its oldest entry at 10,000).
TEST_F(AuthorityTest, ASessionFloodOfOneTokenEndsOnlyThatTokensOldestSessions) {
  auto [admin_info, admin_text] = Make(admin_, {"root", "default", Role::kAdmin, "", Duration(0)});
  auto [user_info, user_text] = Make(admin_, {"mallory", "other", Role::kUser, "", Duration(0)});
  auto admin = auth_.Authenticate(admin_text);
  auto user = auth_.Authenticate(user_text);
  ASSERT_TRUE(admin.ok() && user.ok());
  auto admins = auth_.OpenSession(*admin);
  ASSERT_TRUE(admins.ok());
  std::vector<std::string> cookies;
  for (int i = 0; i < 10'100; ++i) {
    clock_.Advance(std::chrono::milliseconds(1));
    auto s = auth_.OpenSession(*user);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    cookies.push_back(s->cookie);
  }
  EXPECT_TRUE(auth_.FindSession(admins->cookie).ok()) << "another token's session was evicted";
  // The flooding token keeps its newest kMaxSessionsPerToken.
  size_t live = 0;
  for (const std::string& c : cookies) live += auth_.FindSession(c).ok() ? 1 : 0;
  EXPECT_EQ(live, Authority::kMaxSessionsPerToken);
  EXPECT_TRUE(auth_.FindSession(cookies.back()).ok());
  EXPECT_FALSE(auth_.FindSession(cookies.front()).ok());
  // Closing one frees its place: the next login ends none of the others.
  auth_.CloseSession(cookies.back());
  ASSERT_TRUE(auth_.OpenSession(*user).ok());
  EXPECT_TRUE(auth_.FindSession(cookies[cookies.size() - 2]).ok());
  EXPECT_TRUE(auth_.FindSession(cookies[cookies.size() - Authority::kMaxSessionsPerToken]).ok());
}

TEST_F(AuthorityTest, LoginCodesAreBoundedPerTokenAndSweptOnceExpired) {
  auto count = [&](const std::string& prefix) {
    auto r = store_.get()->Range(prefix);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->kvs.size() : 0;
  };
  auto [viewer_info, viewer_text] = Make(admin_, {"peek", "other", Role::kViewer, "", Duration(0)});
  auto [alice_info, alice_text] = Make(admin_, {"alice", "team-a", Role::kUser, "", Duration(0)});
  auto viewer = auth_.Authenticate(viewer_text);
  auto alice = auth_.Authenticate(alice_text);
  ASSERT_TRUE(viewer.ok() && alice.ok());
  // A viewer creating codes in a loop holds kMaxLoginCodesPerToken of them.
  std::vector<std::string> codes;
  for (int i = 0; i < 200; ++i) {
    auto code = auth_.CreateLoginCode(*viewer);
    ASSERT_TRUE(code.ok()) << code.status().ToString();
    codes.push_back(*code);
  }
  auto alices = auth_.CreateLoginCode(*alice);
  ASSERT_TRUE(alices.ok());
  EXPECT_EQ(count("/auth/login/"), Authority::kMaxLoginCodesPerToken + 1);
  EXPECT_EQ(auth_.OpenSessionWithCode(codes.front()).status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(auth_.OpenSessionWithCode(codes.back()).ok()) << "the newest codes still work";
  EXPECT_EQ(count("/auth/login/"), Authority::kMaxLoginCodesPerToken);

  auto join = auth_.CreateJoinToken(admin_, "", std::chrono::minutes(10));
  ASSERT_TRUE(join.ok());
  auto nothing = auth_.SweepExpired();
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(nothing->login_codes + nothing->join_tokens, 0) << "nothing has expired yet";
  // Expired: refused at once, and gone at the next sweep.
  clock_.Advance(Authority::kLoginCodeLifetime + std::chrono::seconds(1));
  EXPECT_EQ(auth_.OpenSessionWithCode(*alices).status().code(), Code::kUnauthenticated);
  auto swept = auth_.SweepExpired();
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(swept->login_codes, static_cast<int64_t>(Authority::kMaxLoginCodesPerToken - 1));
  EXPECT_EQ(swept->join_tokens, 1);
  EXPECT_EQ(swept->sessions, 1) << "the session the newest code opened expired too";
  EXPECT_EQ(count("/auth/login/"), 0u);
  EXPECT_EQ(count("/auth/join/"), 0u);
}

}  // namespace
}  // namespace drover::auth
