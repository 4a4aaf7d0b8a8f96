#include "drover/auth/audit.h"

#include <gtest/gtest.h>

#include "drover/auth/test_store.h"

namespace drover::auth {
namespace {

class AuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Principal p{"abcd", "alice", "team-a", Role::kUser, "", "127.0.0.1:5555"};
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(log_.Append(p, "jobs.submit", "j-00000" + std::to_string(i), Status::Ok()).ok());
      clock_.Advance(std::chrono::seconds(1));
    }
    ASSERT_TRUE(log_.Append(p, "jobs.cancel", "j-000009", NotFound("job 'j-000009' not found")).ok());
  }
  AuditVerdict Verify() {
    auto v = log_.Verify();
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : AuditVerdict{};
  }
  std::string Read(int64_t seq) { return (*store_.get()->Get(AuditLog::Key(seq)))->value; }

  ManualClock clock_;
  testing::TempStore store_{&clock_};
  AuditLog log_{store_.get(), &clock_};
};

TEST_F(AuditTest, IntactChainVerifies) {
  AuditVerdict v = Verify();
  EXPECT_TRUE(v.ok) << v.reason;
  EXPECT_EQ(v.entries, 6);
  EXPECT_EQ(v.head.size(), 64u);
  auto all = log_.List(0);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 6u);
  EXPECT_EQ((*all)[5].result, "not found: job 'j-000009' not found");
  EXPECT_EQ((*all)[0].who, "alice");
  EXPECT_EQ((*all)[0].source, "127.0.0.1:5555");
  EXPECT_EQ(log_.List(ToUnixNanos(clock_.Now()))->size(), 1u);
}

TEST_F(AuditTest, EditedEntryIsDetected) {
  auto e = AuditLog::FromJson(Read(3));
  ASSERT_TRUE(e.ok());
  e->target = "j-999999";
  ASSERT_TRUE(store_.get()->Put(AuditLog::Key(3), AuditLog::ToJson(*e)).ok());
  AuditVerdict v = Verify();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.bad_seq, 3);
  EXPECT_NE(v.reason.find("edited"), std::string::npos) << v.reason;
}

TEST_F(AuditTest, RehashedEditIsDetectedByTheNextEntry) {
  auto e = AuditLog::FromJson(Read(3));
  ASSERT_TRUE(e.ok());
  e->result = "permission denied: made to look refused";
  e->hash = AuditLog::HashOf(*e);
  ASSERT_TRUE(store_.get()->Put(AuditLog::Key(3), AuditLog::ToJson(*e)).ok());
  AuditVerdict v = Verify();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.bad_seq, 4);
}

TEST_F(AuditTest, DroppedEntryIsDetected) {
  ASSERT_TRUE(store_.get()->Delete(AuditLog::Key(2)).ok());
  AuditVerdict v = Verify();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.bad_seq, 2);
}

TEST_F(AuditTest, DroppedTailIsDetected) {
  ASSERT_TRUE(store_.get()->Delete(AuditLog::Key(6)).ok());
  AuditVerdict v = Verify();
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("dropped"), std::string::npos) << v.reason;
}

TEST_F(AuditTest, ReorderedEntriesAreDetected) {
  std::string two = Read(2);
  std::string three = Read(3);
  ASSERT_TRUE(store_.get()->Put(AuditLog::Key(2), three).ok());
  ASSERT_TRUE(store_.get()->Put(AuditLog::Key(3), two).ok());
  AuditVerdict v = Verify();
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.bad_seq, 2);
}

TEST_F(AuditTest, AppendsContinueTheChainAcrossReopen) {
  AuditLog again(store_.get(), &clock_);
  ASSERT_TRUE(again.Append(Principal{}, "session.open", "", Unauthenticated("unknown token")).ok());
  AuditVerdict v = Verify();
  EXPECT_TRUE(v.ok) << v.reason;
  EXPECT_EQ(v.entries, 7);
  EXPECT_EQ(log_.List(0)->back().who, "anonymous");
}

// The log keeps its head in memory; another writer that moved it (a
// previous leader, another log object) costs one more try, not a broken
// chain.
TEST_F(AuditTest, AHeadMovedBehindTheLogsBackIsReadAgainAndTheChainHolds) {
  AuditLog other(store_.get(), &clock_);
  ASSERT_TRUE(other.Append(Principal{}, "session.open", "", Status::Ok()).ok());
  int calls = 0;
  auto txn = [&](std::vector<store::Compare> compares, std::vector<store::Op> ops) {
    ++calls;
    return store_.get()->Txn(compares, ops, {});
  };
  std::vector<AuditEntry> batch{AuditLog::EntryFor(Principal{}, "jobs.submit", "j-000010", Status::Ok())};
  auto r = log_.CommitWith(batch, txn);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->succeeded);
  EXPECT_EQ(calls, 2);  // the kept head was stale: read, and once more
  calls = 0;
  r = log_.CommitWith(batch, txn);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->succeeded);
  EXPECT_EQ(calls, 1);  // its own head: no read, one try
  AuditVerdict v = Verify();
  EXPECT_TRUE(v.ok) << v.reason;
  EXPECT_EQ(v.entries, 9);
}

TEST_F(AuditTest, TrimmedEntriesMoveToTheArchiveAndTheChainStillVerifiesAcrossBoth) {
  auto archive = store::Archive::Open(store_.dir() + "/archive.db");
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  AuditLog trimmed(store_.get(), &clock_, archive->get(), 2);
  ASSERT_TRUE(trimmed.Trim().ok());
  // The store keeps the newest 2 of the 6; the archive has the other 4.
  auto left = store_.get()->Range("/audit/");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->kvs.size(), 2u);
  EXPECT_EQ(left->kvs.front().key, AuditLog::Key(5));
  auto moved = (*archive)->ReadAudit(1, 100);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->size(), 4u);
  ASSERT_TRUE(trimmed.Append(Principal{}, "session.open", "", Status::Ok()).ok());
  auto v = trimmed.Verify();
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok) << v->reason;
  EXPECT_EQ(v->entries, 7);

  // An archived entry edited is caught like a stored one.
  std::string edited = (*moved)[1].entry;
  edited.replace(edited.find("j-000001"), 8, "j-000666");
  ASSERT_TRUE((*archive)->PutAudit({{2, edited}}).ok());
  v = trimmed.Verify();
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->ok);
  EXPECT_EQ(v->bad_seq, 2);
}

}  // namespace
}  // namespace drover::auth
