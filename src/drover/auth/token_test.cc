#include "drover/auth/token.h"

#include <gtest/gtest.h>

#include <set>

namespace drover::auth {
namespace {

TEST(TokenTest, GeneratedTokensParseAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto t = GenerateToken();
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto p = ParseToken(t->text);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->id, t->id);
    EXPECT_EQ(p->secret.size(), kTokenSecretChars);
    EXPECT_EQ(Sha256Hex(p->secret), t->secret_hash);
    EXPECT_TRUE(seen.insert(t->text).second);
  }
}

TEST(TokenTest, MalformedTokensAreUnauthenticatedAndNotEchoed) {
  auto good = GenerateToken();
  ASSERT_TRUE(good.ok());
  std::string text = good->text;
  std::vector<std::string> bad = {"",
                                  "drv_",
                                  "Bearer " + text,
                                  text + "x",
                                  text.substr(1),
                                  "drx_" + text.substr(4),
                                  text.substr(0, 20) + "!" + text.substr(21)};
  std::string upper = text;
  upper[5] = 'A';  // id must be lower-case hex
  bad.push_back(upper);
  for (const std::string& b : bad) {
    auto p = ParseToken(b);
    ASSERT_FALSE(p.ok()) << b;
    EXPECT_EQ(p.status().code(), Code::kUnauthenticated);
    EXPECT_EQ(p.status().message().find(good->text.substr(21)), std::string::npos);
  }
}

TEST(TokenTest, Sha256KnownAnswer) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokenTest, RolesLadder) {
  EXPECT_TRUE(AtLeast(Role::kAdmin, Role::kUser));
  EXPECT_TRUE(AtLeast(Role::kTenantAdmin, Role::kUser));
  EXPECT_FALSE(AtLeast(Role::kViewer, Role::kUser));
  EXPECT_FALSE(AtLeast(Role::kNode, Role::kViewer));
  EXPECT_FALSE(AtLeast(Role::kAdmin, Role::kNode));
  EXPECT_TRUE(AtLeast(Role::kNode, Role::kNode));
  // A gateway is outside the ladder too: it is no viewer, and no admin is a gateway.
  EXPECT_FALSE(AtLeast(Role::kGateway, Role::kViewer));
  EXPECT_FALSE(AtLeast(Role::kAdmin, Role::kGateway));
  EXPECT_FALSE(AtLeast(Role::kNode, Role::kGateway));
  EXPECT_TRUE(AtLeast(Role::kGateway, Role::kGateway));
  EXPECT_FALSE((Principal{"g", "gw", "default", Role::kGateway, "", ""}.CanSee("default")));
  for (Role r : {Role::kViewer, Role::kUser, Role::kTenantAdmin, Role::kAdmin, Role::kNode, Role::kGateway}) {
    auto parsed = ParseRole(RoleName(r));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, r);
  }
  EXPECT_FALSE(ParseRole("root").ok());
}

TEST(TokenTest, PrincipalTenantWalls) {
  Principal u{"id", "alice", "team-a", Role::kUser, "", ""};
  EXPECT_TRUE(u.CanSee("team-a"));
  EXPECT_TRUE(u.CanChange("team-a"));
  EXPECT_FALSE(u.CanSee("team-b"));
  Principal v{"id", "bob", "team-a", Role::kViewer, "", ""};
  EXPECT_TRUE(v.CanSee("team-a"));
  EXPECT_FALSE(v.CanChange("team-a"));
  Principal a{"id", "root", "default", Role::kAdmin, "", ""};
  EXPECT_TRUE(a.CanChange("team-b"));
  Principal n{"id", "sim-1", "default", Role::kNode, "sim-1", ""};
  EXPECT_FALSE(n.CanSee("default"));
}

}  // namespace
}  // namespace drover::auth
