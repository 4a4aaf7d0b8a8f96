#include "drover/store/sqlite/archive.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace drover::store {
namespace {

using ::testing::ElementsAre;

class ArchiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = "/tmp/drover-archive-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    Reopen();
  }
  void TearDown() override {
    archive_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  void Reopen() {
    archive_.reset();
    auto a = Archive::Open(dir_ + "/archive.db");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    archive_ = std::move(*a);
  }
  static ArchivedJob Job(uint64_t seq, int32_t state, std::string tenant, std::string node, int64_t end_ns,
                         std::string group = "") {
    return {seq,
            state,
            std::move(tenant),
            std::move(node),
            std::move(group),
            end_ns - 10,
            end_ns,
            "record-" + std::to_string(seq)};
  }
  std::vector<uint64_t> Seqs(const ArchiveQuery& q) {
    auto r = archive_->QueryJobs(q);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<uint64_t> out;
    if (r.ok()) {
      for (const ArchivedJob& j : *r) out.push_back(j.seq);
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<Archive> archive_;
};

TEST_F(ArchiveTest, KeepsJobsAcrossReopenAndFindsThemBySeq) {
  ASSERT_TRUE(archive_->PutJobs({Job(3, 4, "a", "n1", 300), Job(7, 5, "b", "n2", 700)}).ok());
  Reopen();
  auto got = archive_->GetJob(7);
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->tenant, "b");
  EXPECT_EQ((*got)->node, "n2");
  EXPECT_EQ((*got)->value, "record-7");
  EXPECT_EQ((*got)->end_ns, 700);
  auto missing = archive_->GetJob(4);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  EXPECT_EQ(*archive_->MaxJobSeq(), 7u);
  EXPECT_EQ(*archive_->CountJobs(), 2);
}

TEST_F(ArchiveTest, WritingTheSameJobTwiceKeepsOneCopy) {
  // The owner writes here before deleting from the store: a crash in between
  // makes it write the job again after the restart.
  ASSERT_TRUE(archive_->PutJobs({Job(1, 4, "a", "n1", 100)}).ok());
  ArchivedJob again = Job(1, 4, "a", "n1", 100);
  again.value = "newer";
  ASSERT_TRUE(archive_->PutJobs({again}).ok());
  EXPECT_EQ(*archive_->CountJobs(), 1);
  EXPECT_EQ((*archive_->GetJob(1))->value, "newer");
}

TEST_F(ArchiveTest, PagesNewestFirstUnderEveryFilter) {
  std::vector<ArchivedJob> jobs;
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    jobs.push_back(Job(seq, seq % 2 == 0 ? 4 : 5, seq <= 10 ? "a" : "b", "n" + std::to_string(seq % 3),
                       static_cast<int64_t>(seq) * 100, seq >= 15 ? "a-000015" : ""));
  }
  ASSERT_TRUE(archive_->PutJobs(jobs).ok());

  ArchiveQuery q;
  q.limit = 3;
  EXPECT_THAT(Seqs(q), ElementsAre(20, 19, 18));
  q.before_seq = 18;  // the next page starts below the last seq seen
  EXPECT_THAT(Seqs(q), ElementsAre(17, 16, 15));

  ArchiveQuery by_tenant;
  by_tenant.tenant = "a";
  by_tenant.limit = 100;
  EXPECT_THAT(Seqs(by_tenant), ElementsAre(10, 9, 8, 7, 6, 5, 4, 3, 2, 1));
  by_tenant.state = 4;
  EXPECT_THAT(Seqs(by_tenant), ElementsAre(10, 8, 6, 4, 2));

  ArchiveQuery by_node;
  by_node.node = "n0";
  by_node.limit = 100;
  EXPECT_THAT(Seqs(by_node), ElementsAre(18, 15, 12, 9, 6, 3));

  ArchiveQuery by_time;
  by_time.ended_after_ns = 500;
  by_time.ended_before_ns = 800;
  by_time.limit = 100;
  EXPECT_THAT(Seqs(by_time), ElementsAre(7, 6, 5));

  ArchiveQuery by_group;
  by_group.group = "a-000015";
  by_group.min_seq = 15;
  by_group.limit = 100;
  EXPECT_THAT(Seqs(by_group), ElementsAre(20, 19, 18, 17, 16, 15));

  ArchiveQuery none;
  none.tenant = "nobody";
  EXPECT_TRUE(Seqs(none).empty());
}

TEST_F(ArchiveTest, RefusesPagesOutsideItsLimits) {
  ArchiveQuery q;
  q.limit = 0;
  EXPECT_EQ(archive_->QueryJobs(q).status().code(), Code::kInvalidArgument);
  q.limit = 10'001;
  EXPECT_EQ(archive_->QueryJobs(q).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(archive_->ReadAudit(0, 0).status().code(), Code::kInvalidArgument);
}

TEST_F(ArchiveTest, RetentionDropsOnlyJobsThatEndedBefore) {
  ASSERT_TRUE(archive_->PutJobs({Job(1, 4, "a", "n", 100), Job(2, 4, "a", "n", 200), Job(3, 4, "a", "n", 300)}).ok());
  auto dropped = archive_->DropJobsEndedBefore(250);
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, 2);
  ArchiveQuery q;
  EXPECT_THAT(Seqs(q), ElementsAre(3));
}

TEST_F(ArchiveTest, AuditEntriesReadBackInChainOrder) {
  ASSERT_TRUE(archive_->PutAudit({{2, "two"}, {1, "one"}, {3, "three"}}).ok());
  auto r = archive_->ReadAudit(2, 10);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].entry, "two");
  EXPECT_EQ((*r)[1].entry, "three");
}

TEST_F(ArchiveTest, AFileThatIsNotAnArchiveIsRefused) {
  archive_.reset();
  std::string path = dir_ + "/junk.db";
  std::ofstream(path) << std::string(4096, 'x');
  auto a = Archive::Open(path);
  EXPECT_FALSE(a.ok());
}

}  // namespace
}  // namespace drover::store
