#include "drover/auth/refusal_digest.h"

#include <gtest/gtest.h>

namespace drover::auth {
namespace {

Principal Caller(const std::string& token_id, const std::string& source = "10.0.0.1:4000") {
  return Principal{token_id, "name-" + token_id, "team-a", Role::kViewer, "", source};
}

TEST(RefusalDigestTest, AFloodIsTheFirstFewEntriesAndOneSummaryPerMinute) {
  ManualClock clock;
  RefusalDigest digest(&clock);
  std::vector<RefusalDigest::Summary> due;
  int written = 0;
  for (int i = 0; i < 500; ++i) {
    written += digest.Note(Caller("t1"), "jobs.submit", PermissionDenied("role viewer may not submit jobs"), &due);
  }
  EXPECT_EQ(written, RefusalDigest::kInFull);
  EXPECT_TRUE(due.empty());
  EXPECT_TRUE(digest.Flush().empty()) << "the window is still open";
  clock.Advance(RefusalDigest::kWindow);
  auto summaries = digest.Flush();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].who.token_id, "t1");
  EXPECT_EQ(summaries[0].action, "jobs.submit");
  EXPECT_EQ(summaries[0].result.code(), Code::kPermissionDenied);
  EXPECT_NE(summaries[0].result.message().find("490 more refusals"), std::string::npos)
      << summaries[0].result.message();
  // A new window writes in full again; a window with nothing left out has no summary.
  EXPECT_TRUE(digest.Note(Caller("t1"), "jobs.submit", PermissionDenied("again"), &due));
  clock.Advance(RefusalDigest::kWindow);
  EXPECT_TRUE(digest.Flush().empty());
}

TEST(RefusalDigestTest, KeysAreTheCallerTheActionAndTheCode) {
  ManualClock clock;
  RefusalDigest digest(&clock);
  std::vector<RefusalDigest::Summary> due;
  for (int i = 0; i < RefusalDigest::kInFull; ++i) {
    ASSERT_TRUE(digest.Note(Caller("t1"), "jobs.submit", PermissionDenied("x"), &due));
  }
  EXPECT_FALSE(digest.Note(Caller("t1"), "jobs.submit", PermissionDenied("x"), &due));
  // Another token, another action, another code: each its own allowance.
  EXPECT_TRUE(digest.Note(Caller("t2"), "jobs.submit", PermissionDenied("x"), &due));
  EXPECT_TRUE(digest.Note(Caller("t1"), "jobs.cancel", PermissionDenied("x"), &due));
  EXPECT_TRUE(digest.Note(Caller("t1"), "jobs.submit", InvalidArgument("x"), &due));
  // Without a token (failed logins), the address without its port is the caller.
  for (int i = 0; i < RefusalDigest::kInFull; ++i) {
    ASSERT_TRUE(digest.Note(Caller("", "10.0.0.9:" + std::to_string(1000 + i)), "session.open",
                            Unauthenticated("unknown token"), &due));
  }
  EXPECT_FALSE(digest.Note(Caller("", "10.0.0.9:2000"), "session.open", Unauthenticated("unknown token"), &due));
  // The key's next refusal after the window hands back its summary.
  clock.Advance(RefusalDigest::kWindow);
  EXPECT_TRUE(digest.Note(Caller("t1"), "jobs.submit", PermissionDenied("x"), &due));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_NE(due[0].result.message().find("1 more refusals"), std::string::npos) << due[0].result.message();
  auto rest = digest.Flush(/*all=*/true);
  ASSERT_EQ(rest.size(), 1u);  // the address's; the others left nothing out
  EXPECT_EQ(rest[0].action, "session.open");
}

TEST(RefusalDigestTest, ManyCallersShareOneKeyPastTheBound) {
  ManualClock clock;
  RefusalDigest digest(&clock);
  std::vector<RefusalDigest::Summary> due;
  for (size_t i = 0; i < RefusalDigest::kMaxKeys; ++i) {
    digest.Note(Caller("t" + std::to_string(i)), "jobs.submit", PermissionDenied("x"), &due);
  }
  int written = 0;
  for (int i = 0; i < 100; ++i) {
    written += digest.Note(Caller("new" + std::to_string(i)), "jobs.submit", PermissionDenied("x"), &due);
  }
  EXPECT_EQ(written, RefusalDigest::kInFull);
  clock.Advance(RefusalDigest::kWindow);
  auto summaries = digest.Flush();
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0].who.name, "many callers");
}

}  // namespace
}  // namespace drover::auth
