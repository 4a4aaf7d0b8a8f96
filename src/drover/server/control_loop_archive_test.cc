// Bounded state: finished jobs move to the archive, and clients page through
// live and archived jobs together.

#include <gmock/gmock.h>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ControlLoopArchiveTest : public ControlLoopTest {
 protected:
  void SetUp() override {
    ControlLoopTest::SetUp();
    auto a = store::Archive::Open(dir_ + "/archive.db");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    archive_ = std::move(*a);
    options_.archive = archive_.get();
    options_.archive_after = std::chrono::minutes(1);
    ASSERT_NO_FATAL_FAILURE(Restart());
  }
  void TearDown() override {
    loop_.reset();
    archive_.reset();
    ControlLoopTest::TearDown();
  }
  // Runs a job to its end on gpu-01.
  std::string RunToEnd(int exit_code) {
    std::string id = Submit(1).id();
    Report("gpu-01", id, v1::WORKLOAD_STATE_RUNNING);
    Report("gpu-01", id, v1::WORKLOAD_STATE_EXITED, exit_code);
    return id;
  }
  v1::ListJobsResponse Page(v1::ListJobsRequest req, int size) {
    req.set_page_size(size);
    return Must(loop_->ListJobsPage(req));
  }
  static std::vector<std::string> Ids(const v1::ListJobsResponse& r) {
    std::vector<std::string> out;
    for (const v1::Job& j : r.jobs()) out.push_back(j.id());
    return out;
  }
  std::vector<std::string> StoredIds() {
    std::vector<std::string> out;
    for (const v1::Job& j : StoredJobs()) out.push_back(j.id());
    return out;
  }

  std::unique_ptr<store::Archive> archive_;
};

// A second ArchiveDueNow while the first one's batch is with the archive
// waits for it: it is answered once the first batch left the store.
TEST_F(ControlLoopArchiveTest, ArchiveDueNowDuringAMoveIsAnsweredAfterTheMoveCommitted) {
  auto sink = Connect("gpu-01", 8);
  RunToEnd(0);
  RunToEnd(0);
  std::string live = Submit(1).id();
  clock_.Advance(std::chrono::seconds(61));
  auto first = loop_->ArchiveDueNow();
  auto second = loop_->ArchiveDueNow();
  Result<int64_t> later = second.get();
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  EXPECT_EQ(*later, 0);  // the first took both
  EXPECT_THAT(StoredIds(), ElementsAre(live));
  EXPECT_EQ(Must(std::move(first)), 2);
  EXPECT_EQ(*archive_->CountJobs(), 2);
}

TEST_F(ControlLoopArchiveTest, FinishedJobsLeaveTheStoreOnceDueAndAreStillFoundListedAndPaged) {
  auto sink = Connect("gpu-01", 8);
  std::string a = RunToEnd(0), b = RunToEnd(3), c = RunToEnd(0);
  std::string live = Submit(1).id();
  // Not due yet: a finished job stays a minute.
  EXPECT_EQ(Must(loop_->ArchiveDueNow()), 0);
  clock_.Advance(std::chrono::seconds(61));
  EXPECT_EQ(Must(loop_->ArchiveDueNow()), 3);
  EXPECT_THAT(StoredIds(), ElementsAre(live));
  EXPECT_EQ(*archive_->CountJobs(), 3);

  // Found by id, as it ended; cancelling it says so.
  v1::Job got = Get(b);
  EXPECT_EQ(got.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(got.status().exit_code(), 3);
  EXPECT_EQ(Fails(loop_->Cancel(b)).code(), Code::kFailedPrecondition);
  EXPECT_EQ(Fails(loop_->Cancel("j-000099")).code(), Code::kNotFound);

  // Listed with the live ones, newest first, a page at a time.
  v1::ListJobsResponse first = Page({}, 2);
  EXPECT_THAT(Ids(first), ElementsAre(live, c));
  ASSERT_FALSE(first.next_page_token().empty());
  v1::ListJobsRequest next;
  next.set_page_token(first.next_page_token());
  v1::ListJobsResponse second = Page(next, 2);
  EXPECT_THAT(Ids(second), ElementsAre(b, a));
  // The last page may say there could be more; the page after it is empty.
  if (!second.next_page_token().empty()) {
    next.set_page_token(second.next_page_token());
    EXPECT_TRUE(Page(next, 2).jobs().empty());
  }

  // Every filter reaches into the archive.
  v1::ListJobsRequest failed;
  failed.set_state(v1::JOB_STATE_FAILED);
  EXPECT_THAT(Ids(Page(failed, 10)), ElementsAre(b));
  v1::ListJobsRequest on_node;
  on_node.set_node("gpu-01");
  EXPECT_THAT(Ids(Page(on_node, 10)), ElementsAre(live, c, b, a));
  v1::ListJobsRequest elsewhere;
  elsewhere.set_node("gpu-02");
  EXPECT_TRUE(Page(elsewhere, 10).jobs().empty());
  v1::ListJobsRequest ended;
  ended.set_ended_after_unix_nanos(1);
  EXPECT_THAT(Ids(Page(ended, 10)), ElementsAre(c, b, a));
  ended.set_ended_before_unix_nanos(1);
  EXPECT_TRUE(Page(ended, 10).jobs().empty());
  v1::ListJobsRequest pending;
  pending.set_state(v1::JOB_STATE_PENDING);
  EXPECT_TRUE(Page(pending, 10).jobs().empty());  // `live` was bound at once

  v1::ListJobsRequest bad;
  bad.set_page_token("j-000001");
  EXPECT_EQ(Fails(loop_->ListJobsPage(bad)).code(), Code::kInvalidArgument);
}

TEST_F(ControlLoopArchiveTest, IdsAreNotReusedWhenEveryJobIsArchivedAndTheServerRestarts) {
  auto sink = Connect("gpu-01", 8);
  RunToEnd(0);
  std::string last = RunToEnd(0);
  clock_.Advance(std::chrono::minutes(2));
  EXPECT_EQ(Must(loop_->ArchiveDueNow()), 2);
  EXPECT_TRUE(StoredJobs().empty());
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_GT(Submit(1).id(), last);
}

TEST_F(ControlLoopArchiveTest, AJobInBothPlacesAfterACrashIsListedOnceAndArchivedAgain) {
  auto sink = Connect("gpu-01", 8);
  std::string id = RunToEnd(0);
  // A crash after the archive write and before the store's delete: the
  // archive has a copy and the store still has the job.
  v1::Job job = Get(id);
  ASSERT_TRUE(archive_->PutJobs({{1, job.status().state(), "", "gpu-01", "", 0, 1, job.SerializeAsString()}}).ok());
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_THAT(Ids(Page({}, 10)), ElementsAre(id));
  clock_.Advance(std::chrono::minutes(2));
  EXPECT_EQ(Must(loop_->ArchiveDueNow()), 1);
  EXPECT_TRUE(StoredJobs().empty());
  EXPECT_EQ(*archive_->CountJobs(), 1);
  EXPECT_THAT(Ids(Page({}, 10)), ElementsAre(id));
}

TEST_F(ControlLoopArchiveTest, ArrayTasksInTheArchiveStillCountAsTheArraysTasks) {
  auto sink = Connect("gpu-01", 8);
  v1::ArraySpec indices;
  indices.set_first(1);
  indices.set_last(3);
  v1::SubmitJobResponse r = Must(loop_->SubmitArray(Spec(1), indices));
  for (const v1::Job& t : Must(loop_->ListJobs([&] {
         v1::ListJobsRequest q;
         q.set_array_id(r.array_id());
         return q;
       }()))) {
    Report("gpu-01", t.id(), v1::WORKLOAD_STATE_RUNNING);
    Report("gpu-01", t.id(), v1::WORKLOAD_STATE_EXITED, 0);
  }
  clock_.Advance(std::chrono::minutes(2));
  EXPECT_EQ(Must(loop_->ArchiveDueNow()), 3);
  v1::ListJobsRequest q;
  q.set_array_id(r.array_id());
  EXPECT_EQ(Must(loop_->ListJobs(q)).size(), 3u);  // what a watch of the array reads
  EXPECT_EQ(Page(q, 10).jobs_size(), 3);
}

TEST_F(ControlLoopArchiveTest, AnOversizedJobIsRefusedAtSubmitAndNothingIsStored) {
  auto sink = Connect("gpu-01", 8);
  v1::JobSpec spec = Spec(1);
  (*spec.mutable_env())["BIG"] = std::string(kMaxJobSpecBytes, 'x');
  Status refused = Fails(loop_->Submit(spec));
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("limit on one job's record"));
  std::vector<v1::JobSpec> batch = {Spec(1), spec};
  EXPECT_EQ(Fails(loop_->SubmitBatch(batch)).code(), Code::kInvalidArgument);
  EXPECT_TRUE(StoredJobs().empty());
  EXPECT_EQ(Submit(1).id(), "j-000001");
}

}  // namespace
}  // namespace drover::server::testing
