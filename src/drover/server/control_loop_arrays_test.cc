// Job arrays, batch submits and job watches on the control loop.

#include <gmock/gmock.h>

#include <atomic>
#include <future>
#include <memory>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::ArraySpec Indices(int64_t first, int64_t last, int64_t step = 1, int32_t max_running = 0) {
  v1::ArraySpec a;
  a.set_first(first);
  a.set_last(last);
  a.set_step(step);
  a.set_max_running(max_running);
  return a;
}

std::vector<int64_t> IndicesOf(const std::vector<v1::Job>& jobs) {
  std::vector<int64_t> out;
  for (const v1::Job& j : jobs) out.push_back(j.array().index());
  return out;
}

class ControlLoopArrayTest : public ControlLoopTest {
 protected:
  std::vector<v1::Job> Tasks(const std::string& array_id, v1::JobState state = v1::JOB_STATE_UNSPECIFIED) {
    v1::ListJobsRequest req;
    req.set_array_id(array_id);
    req.set_state(state);
    return Must(loop_->ListJobs(req));
  }
};

TEST_F(ControlLoopArrayTest, AnArrayIsOneJobPerIndexStoredTogether) {
  auto sink = Connect("gpu-01", 8);
  std::string before = Submit(1).id();
  v1::SubmitJobResponse r = Must(loop_->SubmitArray(Spec(1), Indices(1, 10, 3)));
  EXPECT_EQ(r.tasks(), 4);
  ASSERT_EQ(r.job().id(), "j-000002");
  EXPECT_EQ(r.array_id(), "a-000002");
  std::vector<v1::Job> tasks = Tasks("a-000002");
  EXPECT_THAT(IndicesOf(tasks), ElementsAre(1, 4, 7, 10));
  for (const v1::Job& t : tasks) {
    EXPECT_EQ(t.array().tasks(), 4);
    EXPECT_EQ(t.array().array_id(), "a-000002");
  }
  // Each task is a job of its own in the store, and its workload carries
  // its index for DROVER_ARRAY_INDEX.
  EXPECT_EQ(StoredJobs().size(), 5u);
  auto desired = sink->WaitFor(0, [](const v1::DesiredWorkloads& d) { return d.workloads_size() == 5; });
  ASSERT_TRUE(desired);
  std::vector<int64_t> indices;
  for (const v1::Workload& w : desired->workloads()) {
    if (w.job_id() == before) {
      EXPECT_EQ(w.array_id(), "");
      continue;
    }
    EXPECT_EQ(w.array_id(), "a-000002");
    indices.push_back(w.array_index());
  }
  std::sort(indices.begin(), indices.end());
  EXPECT_THAT(indices, ElementsAre(1, 4, 7, 10));
  // The next job takes the number after the array's last task.
  EXPECT_EQ(Submit(1).id(), "j-000006");
}

TEST_F(ControlLoopArrayTest, MaxRunningHoldsTheRestUntilOneEndsAndSurvivesARestart) {
  auto sink = Connect("gpu-01", 8);
  v1::SubmitJobResponse r = Must(loop_->SubmitArray(Spec(1), Indices(0, 5, 1, 2)));
  Must(loop_->Barrier());
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_BOUND).size(), 2u);
  std::vector<v1::Job> waiting = Tasks(r.array_id(), v1::JOB_STATE_PENDING);
  ASSERT_EQ(waiting.size(), 4u);
  EXPECT_THAT(waiting.front().status().message(), HasSubstr("at most 2 tasks at once"));

  std::string first = Tasks(r.array_id(), v1::JOB_STATE_BOUND).front().id();
  Report("gpu-01", first, v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", first, v1::WORKLOAD_STATE_EXITED, 0);
  Must(loop_->Barrier());
  EXPECT_EQ(StateOf(first), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_BOUND).size(), 2u);
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_PENDING).size(), 3u);

  // A restarted server rebuilds the same limit from the stored tasks.
  ASSERT_NO_FATAL_FAILURE(Restart());
  Open("gpu-01", std::make_shared<FakeSink>());
  Must(loop_->Barrier());
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_BOUND).size(), 2u);
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_PENDING).size(), 3u);
}

TEST_F(ControlLoopArrayTest, CancelArrayEndsEveryUnfinishedTaskAndNoHeldOneStarts) {
  auto sink = Connect("gpu-01", 8);
  v1::SubmitJobResponse r = Must(loop_->SubmitArray(Spec(1), Indices(1, 6, 1, 2)));
  Must(loop_->Barrier());
  std::vector<v1::Job> bound = Tasks(r.array_id(), v1::JOB_STATE_BOUND);
  ASSERT_EQ(bound.size(), 2u);
  Report("gpu-01", bound[0].id(), v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", bound[0].id(), v1::WORKLOAD_STATE_EXITED, 0);  // one already done: not counted

  EXPECT_EQ(Must(loop_->CancelArray(r.array_id())), 5);
  Must(loop_->Barrier());
  // The held and queued tasks end at once; the bound ones stop first.
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_CANCELLED).size(), 3u);
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_CANCELLING).size(), 2u);
  for (const v1::Job& t : Tasks(r.array_id(), v1::JOB_STATE_CANCELLING)) {
    Report("gpu-01", t.id(), v1::WORKLOAD_STATE_EXITED, -1, 15);
  }
  Must(loop_->Barrier());
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_CANCELLED).size(), 5u);
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_SUCCEEDED).size(), 1u);
  EXPECT_EQ(Tasks(r.array_id(), v1::JOB_STATE_BOUND).size(), 0u);

  EXPECT_EQ(Fails(loop_->CancelArray("a-000999")).code(), Code::kNotFound);
  EXPECT_EQ(Fails(loop_->CancelArray("j-000001")).code(), Code::kInvalidArgument);
}

TEST_F(ControlLoopArrayTest, ABatchIsAcceptedWholeOrNotAtAll) {
  Connect("gpu-01", 8);
  std::vector<v1::JobSpec> batch = {Spec(1), Spec(2), Spec(1)};
  std::vector<v1::Job> jobs = Must(loop_->SubmitBatch(batch));
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id(), "j-000001");
  EXPECT_EQ(jobs[2].id(), "j-000003");
  EXPECT_EQ(jobs[1].spec().gpus(), 2);

  // One job that can never fit refuses the whole batch: nothing stored, no
  // number used.
  batch.push_back(Spec(64));
  Status refused = Fails(loop_->SubmitBatch(batch));
  EXPECT_EQ(refused.code(), Code::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("job 3"));
  EXPECT_EQ(StoredJobs().size(), 3u);
  EXPECT_EQ(Submit(1).id(), "j-000004");
}

TEST_F(ControlLoopArrayTest, AnArrayPastItsTenantsPendingLimitIsRefusedWhole) {
  Connect("gpu-01", 8);
  v1::Tenant t;
  t.set_name("team-a");
  t.set_weight(1);
  t.set_borrow_limit(-1);
  t.mutable_quota()->set_max_pending_jobs(5);
  Must(loop_->SetTenant(t, true));
  v1::JobSpec spec = Spec(1);
  spec.set_tenant("team-a");
  Status refused = Fails(loop_->SubmitArray(spec, Indices(1, 6)));
  EXPECT_EQ(refused.code(), Code::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("6 more would pass its limit of 5"));
  EXPECT_TRUE(StoredJobs().empty());
  EXPECT_EQ(Must(loop_->SubmitArray(spec, Indices(1, 5))).tasks(), 5);
}

// A watcher that subscribes while the batch that ends its job is being
// committed reads the job as it was (the replica has not the batch yet), so
// that commit must push it the end: who wants a job is asked after the
// replica has the batch, not when the job was changed. (Asked at Persist,
// `drover submit --wait` hung on a job that had ended.)
TEST_F(ControlLoopArrayTest, WatcherThatSubscribesDuringTheEndingCommitIsPushedTheEnd) {
  JobWatch watch;
  options_.watch = &watch;
  ASSERT_NO_FATAL_FAILURE(UseFlakyStore());  // restarts the loop, with the watch
  Connect("gpu-01", 1);
  std::string id = Submit(1).id();
  Report("gpu-01", id, v1::WORKLOAD_STATE_RUNNING);

  auto gate = flaky_->HoldNextTxn();
  std::future<void> entered = gate->entered.get_future();
  v1::StatusReport ended;
  v1::WorkloadStatus* ws = ended.add_workloads();
  ws->set_job_id(id);
  ws->set_workload_id(WorkloadOf(id));
  ws->set_state(v1::WORKLOAD_STATE_EXITED);
  loop_->HandleStatus("gpu-01", ended);
  entered.wait();  // the end is applied and being committed

  std::promise<v1::JobState> pushed;
  JobWatch::Filter f;
  f.ids = {id};
  std::atomic<bool> once{false};
  uint64_t w = watch.Add(f, [&](const v1::Job& j) {
    if (rpc::IsTerminal(j.status().state()) && !once.exchange(true)) pushed.set_value(j.status().state());
  });
  auto now = loop_->GetJob(id);
  ASSERT_EQ(now.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(Must(std::move(now)).status().state(), v1::JOB_STATE_RUNNING) << "read before the commit";
  gate->release.set_value();
  auto end = pushed.get_future();
  ASSERT_EQ(end.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "the end was never pushed";
  EXPECT_EQ(end.get(), v1::JOB_STATE_SUCCEEDED);
  watch.Remove(w);
}

// A watcher gets each commit's change of the jobs it follows, in order, and
// nothing of the others.
TEST_F(ControlLoopArrayTest, WatchersGetCommittedChangesOfWhatTheyFollow) {
  JobWatch watch;
  loop_->Stop();
  loop_.reset();
  options_.watch = &watch;
  ASSERT_NO_FATAL_FAILURE(StartLoop(store_.get()));
  auto sink = Connect("gpu-01", 8);

  std::mutex mu;
  std::vector<std::pair<std::string, v1::JobState>> seen;
  auto record = [&](const v1::Job& j) {
    std::lock_guard lock(mu);
    seen.emplace_back(j.id(), j.status().state());
  };
  JobWatch::Filter one;
  one.ids = {"j-000002"};
  uint64_t w = watch.Add(one, record);
  Submit(1);
  std::string followed = Submit(1).id();
  ASSERT_EQ(followed, "j-000002");
  Report("gpu-01", followed, v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", followed, v1::WORKLOAD_STATE_EXITED, 0);
  Must(loop_->Barrier());
  watch.Remove(w);
  Submit(1);
  Must(loop_->Barrier());
  std::lock_guard lock(mu);
  std::vector<v1::JobState> states;
  for (const auto& [id, state] : seen) {
    EXPECT_EQ(id, followed);
    states.push_back(state);
  }
  // The submit and its binding are one commit: the watcher sees the job
  // as that commit left it.
  EXPECT_THAT(states, ElementsAre(v1::JOB_STATE_BOUND, v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
}

TEST_F(ControlLoopArrayTest, AWatchOfATenantSeesOnlyItsJobs) {
  JobWatch watch;
  loop_->Stop();
  loop_.reset();
  options_.watch = &watch;
  ASSERT_NO_FATAL_FAILURE(StartLoop(store_.get()));
  Connect("gpu-01", 8);
  std::mutex mu;
  std::set<std::string> tenants;
  JobWatch::Filter f;
  f.tenant = "team-a";
  watch.Add(f, [&](const v1::Job& j) {
    std::lock_guard lock(mu);
    tenants.insert(j.spec().tenant());
  });
  v1::JobSpec a = Spec(1);
  a.set_tenant("team-a");
  v1::JobSpec b = Spec(1);
  b.set_tenant("team-b");
  Must(loop_->SubmitBatch({a, b}));
  Must(loop_->Barrier());
  std::lock_guard lock(mu);
  EXPECT_THAT(tenants, ElementsAre("team-a"));
}

}  // namespace
}  // namespace drover::server::testing
