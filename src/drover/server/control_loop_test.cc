#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

TEST_F(ControlLoopTest, RegisteredNodeIsReadyWhileItsSessionIsOpen) {
  Register("gpu-01", 4);
  std::vector<v1::Node> nodes = Must(loop_->ListNodes());
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].name(), "gpu-01");
  EXPECT_EQ(nodes[0].state(), v1::NODE_STATE_NOT_READY);
  EXPECT_EQ(nodes[0].gpus_size(), 4);
  EXPECT_EQ(nodes[0].registered_unix_nanos(), ToUnixNanos(clock_.Now()));

  auto sink = std::make_shared<FakeSink>();
  Must(loop_->SessionOpened("gpu-01", sink));
  nodes = Must(loop_->ListNodes());
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].state(), v1::NODE_STATE_READY);
  EXPECT_FALSE(nodes[0].drained());
  // A new session is told its (empty) desired set at once.
  ASSERT_TRUE(sink->WaitFor(0, [](const v1::DesiredWorkloads& d) { return d.workloads_size() == 0; }));

  // A close from an older session does not end the newer one.
  auto newer = std::make_shared<FakeSink>();
  Must(loop_->SessionOpened("gpu-01", newer));
  loop_->SessionClosed("gpu-01", sink.get());
  EXPECT_EQ(Node("gpu-01").state(), v1::NODE_STATE_READY);
  loop_->SessionClosed("gpu-01", newer.get());
  EXPECT_EQ(Node("gpu-01").state(), v1::NODE_STATE_NOT_READY);

  EXPECT_EQ(Fails(loop_->GetNode("gpu-99")).code(), Code::kNotFound);
  EXPECT_EQ(Fails(loop_->SessionOpened("gpu-99", std::make_shared<FakeSink>())).code(), Code::kNotFound);
  EXPECT_EQ(Fails(loop_->SetDrained("gpu-99", true)).code(), Code::kNotFound);
}

TEST_F(ControlLoopTest, SubmittedJobIsAnsweredPendingThenBoundAndSentToItsNode) {
  auto sink = Connect("gpu-01", 4);
  v1::Job a = Submit(2);
  EXPECT_EQ(a.id(), "j-000001");
  EXPECT_EQ(a.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(a.status().submit_time_unix_nanos(), ToUnixNanos(clock_.Now()));
  EXPECT_EQ(a.spec().tenant(), "default");

  v1::Job bound = Get(a.id());
  EXPECT_EQ(bound.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(bound.status().allocation().node(), "gpu-01");
  std::vector<int> ga = Gpus(bound);
  ASSERT_EQ(ga.size(), 2u);
  EXPECT_EQ(std::set<int>(ga.begin(), ga.end()).size(), 2u);
  for (int i : ga) EXPECT_TRUE(i >= 0 && i < 4) << i;

  v1::Job b = Submit(2);
  EXPECT_EQ(b.id(), "j-000002");
  std::vector<int> gb = Gpus(Get(b.id()));
  std::set<int> all(ga.begin(), ga.end());
  all.insert(gb.begin(), gb.end());
  EXPECT_EQ(all.size(), 4u) << "the two jobs share a GPU";

  auto desired =
      sink->WaitFor(0, [&](const v1::DesiredWorkloads& d) { return Contains(d, a.id()) && Contains(d, b.id()); });
  ASSERT_TRUE(desired);
  for (const v1::Workload& w : desired->workloads()) {
    EXPECT_EQ(std::vector<std::string>(w.command().begin(), w.command().end()),
              (std::vector<std::string>{"sh", "-c", "echo hi"}));
    EXPECT_EQ(w.env().at("STEPS"), "10");
    EXPECT_EQ(w.termination_grace_seconds(), rpc::kDefaultGraceSeconds);
    EXPECT_EQ(Gpus(Get(w.job_id())), std::vector<int>(w.gpu_indices().begin(), w.gpu_indices().end()));
  }
  // The node shows which job holds each GPU.
  v1::Node node = Node("gpu-01");
  for (int i : ga) EXPECT_EQ(node.gpus(i).job_id(), a.id());
  for (int i : gb) EXPECT_EQ(node.gpus(i).job_id(), b.id());
}

TEST_F(ControlLoopTest, WorkloadStatusDecidesTheEnd) {
  auto sink = Connect("gpu-01", 4);
  std::string ok = Submit(1).id();
  std::string code3 = Submit(1).id();
  std::string killed = Submit(1).id();
  std::string unstartable = Submit(1).id();

  Report("gpu-01", ok, v1::WORKLOAD_STATE_RUNNING);
  v1::Job running = Get(ok);
  EXPECT_EQ(running.status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.status().start_time_unix_nanos(), ToUnixNanos(clock_.Now()));
  Report("gpu-01", ok, v1::WORKLOAD_STATE_EXITED, 0);
  v1::Job succeeded = Get(ok);
  EXPECT_EQ(succeeded.status().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(succeeded.status().exit_code(), 0);
  EXPECT_EQ(succeeded.status().end_time_unix_nanos(), ToUnixNanos(clock_.Now()) + 5);

  Report("gpu-01", code3, v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", code3, v1::WORKLOAD_STATE_EXITED, 3);
  v1::Job failed = Get(code3);
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.status().exit_code(), 3);
  EXPECT_EQ(failed.status().signal(), 0);
  EXPECT_NE(failed.status().message().find("code 3"), std::string::npos) << failed.status().message();

  Report("gpu-01", killed, v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", killed, v1::WORKLOAD_STATE_EXITED, -1, 9);
  v1::Job by_signal = Get(killed);
  EXPECT_EQ(by_signal.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(by_signal.status().exit_code(), -1);
  EXPECT_EQ(by_signal.status().signal(), 9);
  EXPECT_NE(by_signal.status().message().find("signal 9"), std::string::npos) << by_signal.status().message();

  size_t mark = sink->count();
  Report("gpu-01", unstartable, v1::WORKLOAD_STATE_FAILED_TO_START, 127, 0, "cannot start 'x': not found");
  v1::Job not_started = Get(unstartable);
  EXPECT_EQ(not_started.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(not_started.status().message(), "cannot start 'x': not found");

  // A late report does not reopen an ended job.
  Report("gpu-01", ok, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(StateOf(ok), v1::JOB_STATE_SUCCEEDED);

  // Ended jobs leave the desired set and free their GPUs.
  ASSERT_TRUE(sink->WaitFor(mark, [](const v1::DesiredWorkloads& d) { return d.workloads_size() == 0; }));
  v1::Node node = Node("gpu-01");
  for (const v1::Gpu& g : node.gpus()) EXPECT_EQ(g.job_id(), "") << g.index();
  for (const v1::Job& j : StoredJobs()) EXPECT_TRUE(rpc::IsTerminal(j.status().state())) << j.id();
}

TEST_F(ControlLoopTest, CancelOfAPendingJobEndsItAtOnce) {
  auto sink = Connect("gpu-01", 2);
  EXPECT_TRUE(Must(loop_->SetDrained("gpu-01", true)).drained());
  v1::Job job = Submit(1);
  v1::Job pending = Get(job.id());
  EXPECT_EQ(pending.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_FALSE(pending.status().message().empty());

  v1::Job cancelled = Must(loop_->Cancel(job.id()));
  EXPECT_EQ(cancelled.status().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_CANCELLED);
  // Undraining now binds nothing.
  Must(loop_->SetDrained("gpu-01", false));
  Must(loop_->Barrier());
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_CANCELLED);
  for (const v1::DesiredWorkloads& d : sink->sets()) EXPECT_FALSE(Contains(d, job.id()));
  ASSERT_EQ(StoredJobs().size(), 1u);
  EXPECT_EQ(StoredJobs()[0].status().state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(ControlLoopTest, CancelOfABoundJobStopsItThenEndsWhenItExits) {
  auto sink = Connect("gpu-01", 2);
  std::string id = Submit(2).id();
  ASSERT_TRUE(sink->WaitForJob(0, id));
  Report("gpu-01", id, v1::WORKLOAD_STATE_RUNNING);

  size_t before = sink->count();
  v1::Job cancelling = Must(loop_->Cancel(id));
  EXPECT_EQ(cancelling.status().state(), v1::JOB_STATE_CANCELLING);
  ASSERT_TRUE(sink->WaitFor(before, [&](const v1::DesiredWorkloads& d) { return !Contains(d, id); }));
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_CANCELLING);
  // Cancelling twice changes nothing.
  EXPECT_EQ(Must(loop_->Cancel(id)).status().state(), v1::JOB_STATE_CANCELLING);
  // It still holds its GPUs until the process is gone.
  v1::Job next = Submit(1);
  EXPECT_EQ(StateOf(next.id()), v1::JOB_STATE_PENDING);

  Report("gpu-01", id, v1::WORKLOAD_STATE_EXITED, -1, 15);
  v1::Job cancelled = Get(id);
  EXPECT_EQ(cancelled.status().state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(cancelled.status().signal(), 15);
  EXPECT_EQ(StateOf(next.id()), v1::JOB_STATE_BOUND);
}

TEST_F(ControlLoopTest, CancelOfAnEndedOrUnknownJobFails) {
  Connect("gpu-01", 1);
  std::string id = Submit(1).id();
  Report("gpu-01", id, v1::WORKLOAD_STATE_EXITED, 0);
  ASSERT_EQ(StateOf(id), v1::JOB_STATE_SUCCEEDED);
  Status ended = Fails(loop_->Cancel(id));
  EXPECT_EQ(ended.code(), Code::kFailedPrecondition);
  EXPECT_NE(ended.message().find(id), std::string::npos) << ended.message();
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_SUCCEEDED);

  EXPECT_EQ(Fails(loop_->Cancel("j-000777")).code(), Code::kNotFound);
  EXPECT_EQ(Fails(loop_->GetJob("j-000777")).code(), Code::kNotFound);
  EXPECT_EQ(Fails(loop_->GetJob("not-a-job")).code(), Code::kInvalidArgument);
  EXPECT_NE(Await(loop_->Cancel("not-a-job")).status().code(), Code::kOk);
}

TEST_F(ControlLoopTest, JobThatCanNeverFitIsRejectedAndNotStored) {
  Status empty = Fails(loop_->Submit(Spec(1)));
  EXPECT_EQ(empty.code(), Code::kFailedPrecondition);
  EXPECT_NE(empty.message().find("no nodes"), std::string::npos) << empty.message();

  Connect("gpu-01", 4);
  Register("gpu-02", 2);  // not connected: still counts as a place it could run
  Submit(1);
  size_t listed = Jobs().size();

  Status too_big = Fails(loop_->Submit(Spec(8)));
  EXPECT_EQ(too_big.code(), Code::kFailedPrecondition);
  EXPECT_NE(too_big.message().find("8 GPUs"), std::string::npos) << too_big.message();
  EXPECT_NE(too_big.message().find("most any node has is 4"), std::string::npos) << too_big.message();

  v1::JobSpec wrong_model = Spec(1);
  wrong_model.set_gpu_model("A100 40GB");
  Status no_model = Fails(loop_->Submit(wrong_model));
  EXPECT_EQ(no_model.code(), Code::kFailedPrecondition);
  EXPECT_NE(no_model.message().find("A100 40GB"), std::string::npos) << no_model.message();

  EXPECT_EQ(Jobs().size(), listed);
  EXPECT_EQ(StoredJobs().size(), listed);
  // A rejected job does not use up an id.
  EXPECT_EQ(Submit(4).id(), "j-000002");
}

TEST_F(ControlLoopTest, QueueIsFifoTheHeadBlocksTheRest) {
  Connect("gpu-01", 4);
  std::string first = Submit(4).id();
  std::string second = Submit(4).id();
  std::string small = Submit(1).id();
  EXPECT_EQ(StateOf(first), v1::JOB_STATE_BOUND);
  v1::Job waiting = Get(second);
  EXPECT_EQ(waiting.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(waiting.status().message().find("4 GPUs"), std::string::npos) << waiting.status().message();
  v1::Job behind = Get(small);
  EXPECT_EQ(behind.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(behind.status().message().find("queued behind " + second), std::string::npos) << behind.status().message();

  Report("gpu-01", first, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(StateOf(second), v1::JOB_STATE_PENDING);
  Report("gpu-01", first, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(second), v1::JOB_STATE_BOUND);
  EXPECT_EQ(StateOf(small), v1::JOB_STATE_PENDING);
  Report("gpu-01", second, v1::WORKLOAD_STATE_EXITED, 1);
  EXPECT_EQ(StateOf(small), v1::JOB_STATE_BOUND);

  v1::ListJobsRequest only_bound;
  only_bound.set_state(v1::JOB_STATE_BOUND);
  std::vector<v1::Job> bound = Must(loop_->ListJobs(only_bound));
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_EQ(bound[0].id(), small);
}

TEST_F(ControlLoopTest, DrainSurvivesARestartAndUndrainBindsTheQueue) {
  Connect("gpu-01", 2);
  v1::Node drained = Must(loop_->SetDrained("gpu-01", true));
  EXPECT_TRUE(drained.drained());
  std::string id = Submit(1).id();
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_PENDING);

  ASSERT_NO_FATAL_FAILURE(Restart());
  v1::Node after = Node("gpu-01");
  EXPECT_TRUE(after.drained());
  EXPECT_EQ(after.state(), v1::NODE_STATE_NOT_READY);
  // The agent comes back: registering again does not undrain.
  auto sink = Connect("gpu-01", 2);
  Must(loop_->Barrier());
  EXPECT_TRUE(Node("gpu-01").drained());
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_PENDING);

  EXPECT_FALSE(Must(loop_->SetDrained("gpu-01", false)).drained());
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND);
  ASSERT_TRUE(sink->WaitForJob(0, id));
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_FALSE(Node("gpu-01").drained());
}

TEST_F(ControlLoopTest, RestartRecoversJobsBindingsQueueOrderAndIds) {
  Connect("gpu-01", 4);
  std::string j1 = Submit(2).id();  // bound, running
  std::string j2 = Submit(1).id();  // bound
  std::string j3 = Submit(2).id();  // pending: one GPU left
  std::string j4 = Submit(1).id();  // pending behind j3, though it would fit
  std::string j5 = Submit(1).id();  // cancelled while pending
  std::string j6 = Submit(1).id();  // cancelled too: the highest id is an ended job
  Report("gpu-01", j1, v1::WORKLOAD_STATE_RUNNING);
  Must(loop_->Cancel(j5));
  Must(loop_->Cancel(j6));
  std::vector<v1::Job> before = Jobs();
  ASSERT_EQ(before.size(), 6u);
  ASSERT_EQ(StateOf(j2), v1::JOB_STATE_BOUND);
  ASSERT_EQ(StateOf(j3), v1::JOB_STATE_PENDING);
  ASSERT_EQ(StateOf(j4), v1::JOB_STATE_PENDING);
  std::vector<int> g1 = Gpus(Get(j1));
  std::vector<int> g2 = Gpus(Get(j2));

  ASSERT_NO_FATAL_FAILURE(Restart());
  std::vector<v1::Job> after = Jobs();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    SCOPED_TRACE(before[i].id());
    EXPECT_EQ(after[i].id(), before[i].id());
    EXPECT_EQ(after[i].status().state(), before[i].status().state());
    EXPECT_EQ(after[i].status().allocation().node(), before[i].status().allocation().node());
    EXPECT_EQ(Gpus(after[i]), Gpus(before[i]));
    EXPECT_EQ(after[i].status().submit_time_unix_nanos(), before[i].status().submit_time_unix_nanos());
    EXPECT_EQ(after[i].spec().command_size(), 3);
  }
  // The first pass after the restart orders the queue again; a read before
  // it is published may still say that the jobs wait for it.
  Must(loop_->Barrier());
  EXPECT_NE(Get(j4).status().message().find("queued behind " + j3), std::string::npos) << Get(j4).status().message();
  EXPECT_EQ(Node("gpu-01").state(), v1::NODE_STATE_NOT_READY);
  EXPECT_EQ(Node("gpu-01").gpus(g1[0]).job_id(), j1);

  // Ids go on from the highest stored one.
  std::string j7 = Submit(1).id();
  EXPECT_EQ(j7, "j-000007");

  // The agent comes back with its running jobs: still one GPU free, and j3
  // (2 GPUs) still heads the queue, so nothing new is bound.
  auto sink = Connect("gpu-01", 4);
  auto desired = sink->WaitFor(0, [&](const v1::DesiredWorkloads& d) { return Contains(d, j1) && Contains(d, j2); });
  ASSERT_TRUE(desired);
  EXPECT_EQ(desired->workloads_size(), 2);
  Must(loop_->Barrier());
  EXPECT_EQ(StateOf(j3), v1::JOB_STATE_PENDING);
  EXPECT_EQ(StateOf(j4), v1::JOB_STATE_PENDING);
  EXPECT_EQ(StateOf(j7), v1::JOB_STATE_PENDING);

  // j1 ends: j3 and j4 get GPUs, never the one j2 holds.
  Report("gpu-01", j1, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(j3), v1::JOB_STATE_BOUND);
  EXPECT_EQ(StateOf(j4), v1::JOB_STATE_BOUND);
  EXPECT_EQ(StateOf(j7), v1::JOB_STATE_PENDING);
  std::set<int> held(g2.begin(), g2.end());
  for (const std::string& id : {j3, j4}) {
    for (int i : Gpus(Get(id))) EXPECT_TRUE(held.insert(i).second) << id << " got GPU " << i << " twice";
  }
  EXPECT_EQ(held.size(), 4u);
}

TEST_F(ControlLoopTest, FullReportWithoutARunningJobFailsIt) {
  Connect("gpu-01", 4);
  std::string lost = Submit(1).id();
  std::string kept = Submit(1).id();
  std::string not_started = Submit(1).id();
  std::string stopping = Submit(1).id();
  Report("gpu-01", lost, v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", kept, v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", stopping, v1::WORKLOAD_STATE_RUNNING);
  Must(loop_->Cancel(stopping));

  v1::StatusReport full;
  full.set_full(true);
  v1::WorkloadStatus* ws = full.add_workloads();
  ws->set_job_id(kept);
  ws->set_workload_id(WorkloadOf(kept));
  ws->set_state(v1::WORKLOAD_STATE_RUNNING);
  loop_->HandleStatus("gpu-01", full);
  Must(loop_->Barrier());

  v1::Job failed = Get(lost);
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.status().exit_code(), -1);
  EXPECT_NE(failed.status().message().find("no longer knows"), std::string::npos) << failed.status().message();
  EXPECT_EQ(StateOf(kept), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(StateOf(not_started), v1::JOB_STATE_BOUND);  // the agent may not have seen it yet
  EXPECT_EQ(StateOf(stopping), v1::JOB_STATE_CANCELLED);
  for (int i : Gpus(failed)) EXPECT_EQ(Node("gpu-01").gpus(i).job_id(), "");
}

TEST_F(ControlLoopTest, ReportsForAJobOfAnotherNodeAreIgnored) {
  Connect("gpu-a", 2);
  Connect("gpu-b", 2);
  std::string id = Submit(2).id();
  v1::Job job = Get(id);
  ASSERT_EQ(job.status().state(), v1::JOB_STATE_BOUND);
  std::string other = job.status().allocation().node() == "gpu-a" ? "gpu-b" : "gpu-a";

  Report(other, id, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND);
  Report(other, id, v1::WORKLOAD_STATE_EXITED, 1);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND);
  Report("gpu-zz", id, v1::WORKLOAD_STATE_EXITED, 1);  // not a node at all
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND);

  Report(job.status().allocation().node(), id, v1::WORKLOAD_STATE_RUNNING);
  v1::StatusReport empty_full;
  empty_full.set_full(true);
  loop_->HandleStatus(other, empty_full);
  Must(loop_->Barrier());
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_RUNNING);
}

TEST_F(ControlLoopTest, FailedCommitAnswersUnavailableAndMemoryFollowsTheStore) {
  ASSERT_NO_FATAL_FAILURE(UseFlakyStore());
  auto sink = Connect("gpu-01", 2);
  std::string a = Submit(1).id();
  Report("gpu-01", a, v1::WORKLOAD_STATE_RUNNING);
  ASSERT_TRUE(sink->WaitForJob(0, a));

  flaky_->fail_txn = true;
  Status submit = Fails(loop_->Submit(Spec(1)));
  EXPECT_EQ(submit.code(), Code::kUnavailable);
  EXPECT_NE(submit.message().find("not persisted"), std::string::npos) << submit.message();
  // Agent reports of the failed batch are gone: the session is restarted so
  // that the agent reports its full state again.
  EXPECT_GE(sink->resets(), 1);
  Status cancel = Fails(loop_->Cancel(a));
  EXPECT_EQ(cancel.code(), Code::kUnavailable);
  Status drain = Fails(loop_->SetDrained("gpu-01", true));
  EXPECT_EQ(drain.code(), Code::kUnavailable);
  Status reg = Fails(loop_->RegisterNode(Inventory("gpu-02", 1)));
  EXPECT_EQ(reg.code(), Code::kUnavailable);
  flaky_->fail_txn = false;
  Must(loop_->Barrier());

  // Nothing that failed to commit is visible, and the agent was never told
  // of it: memory is what the store holds.
  std::vector<v1::Job> listed = Jobs();
  std::vector<v1::Job> stored = StoredJobs();
  ASSERT_EQ(listed.size(), stored.size());
  ASSERT_EQ(listed.size(), 1u);
  for (size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(listed[i].id(), stored[i].id());
    EXPECT_EQ(listed[i].status().state(), stored[i].status().state());
    EXPECT_EQ(Gpus(listed[i]), Gpus(stored[i]));
  }
  EXPECT_EQ(listed[0].id(), a);
  EXPECT_EQ(listed[0].status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Fails(loop_->GetJob("j-000002")).code(), Code::kNotFound);
  for (const v1::DesiredWorkloads& d : sink->sets()) EXPECT_FALSE(Contains(d, "j-000002"));
  std::vector<v1::DesiredWorkloads> sets = sink->sets();
  ASSERT_FALSE(sets.empty());
  EXPECT_TRUE(Contains(sets.back(), a)) << "a failed cancel must not stop the job";
  EXPECT_FALSE(Node("gpu-01").drained());
  EXPECT_EQ(Node("gpu-01").state(), v1::NODE_STATE_READY);
  EXPECT_EQ(Fails(loop_->GetNode("gpu-02")).code(), Code::kNotFound);

  // And it works again once the store does.
  std::string b = Submit(1).id();
  EXPECT_EQ(StateOf(b), v1::JOB_STATE_BOUND);
  EXPECT_EQ(StoredJobs().size(), 2u);
  EXPECT_EQ(Must(loop_->Cancel(a)).status().state(), v1::JOB_STATE_CANCELLING);
}

TEST_F(ControlLoopTest, ReadsAreAnsweredWhileTheLoopIsBusyAndSeeEveryAnsweredWrite) {
  ASSERT_NO_FATAL_FAILURE(UseFlakyStore());
  Connect("gpu-01", 1);
  std::string running = Submit(1).id();
  Report("gpu-01", running, v1::WORKLOAD_STATE_RUNNING);
  std::string waiting = Submit(1).id();
  std::string unread = Submit(1).id();
  const std::string reason = Get(waiting).status().message();  // rendered now, kept on the board
  ASSERT_THAT(reason, ::testing::HasSubstr("waiting"));
  loop_->Heartbeat("gpu-01", Reading(1, 40, 1'000'000'000));
  Must(loop_->Barrier());

  // The loop is stuck in a commit (a slow disk) with a submit in it.
  auto gate = flaky_->HoldNextTxn();
  std::future<void> entered = gate->entered.get_future();
  auto submitted = loop_->Submit(Spec(1));
  entered.wait();

  // Reads of jobs that are not pending never wait on it.
  auto got = loop_->GetJob(running);
  auto listed = loop_->ListJobs(v1::ListJobsRequest());
  ASSERT_EQ(got.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "GetJob waited on the loop";
  EXPECT_EQ(Must(std::move(got)).status().state(), v1::JOB_STATE_RUNNING);
  v1::ListJobsRequest running_only;
  running_only.set_state(v1::JOB_STATE_RUNNING);
  auto only = loop_->ListJobs(running_only);
  ASSERT_EQ(only.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_EQ(Must(std::move(only)).size(), 1u);
  // Nor do node and fleet reads: the loop's published views, with the
  // committed job on the node's GPU.
  auto node = loop_->GetNode("gpu-01");
  auto nodes = loop_->ListNodes();
  auto fleet = loop_->Fleet();
  ASSERT_EQ(node.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "GetNode waited on the loop";
  ASSERT_EQ(nodes.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "ListNodes waited on the loop";
  ASSERT_EQ(fleet.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "Fleet waited on the loop";
  EXPECT_EQ(Must(std::move(node)).gpus(0).job_id(), running);
  EXPECT_EQ(Must(std::move(nodes)).size(), 1u);
  v1::Fleet f = Must(std::move(fleet));
  EXPECT_EQ(f.jobs().at("Running"), 1);
  EXPECT_EQ(f.queue_depth(), 2);  // "waiting" and "unread"; the submit in the held commit is not seen
  // Nor the scheduler's statistics, the tenants, a GPU's history and /metrics' counts.
  auto stats = loop_->SchedulerStats();
  auto tenants = loop_->ListTenants();
  auto history = loop_->GpuHistory("gpu-01", 0);
  auto counts = loop_->Stats();
  ASSERT_EQ(stats.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "SchedulerStats waited";
  ASSERT_EQ(tenants.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "ListTenants waited";
  ASSERT_EQ(history.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "GpuHistory waited";
  ASSERT_EQ(counts.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "Stats waited";
  EXPECT_EQ(Must(std::move(stats)).queue_depth(), 2);
  v1::ListTenantsResponse t = Must(std::move(tenants));
  ASSERT_EQ(t.tenants_size(), 1);
  EXPECT_EQ(t.tenants(0).usage_milli(), 1000);
  EXPECT_EQ(t.tenants(0).pending_jobs(), 2);
  EXPECT_EQ(Must(std::move(history)).points_size(), 1);
  EXPECT_EQ(Must(std::move(counts)).nodes_ready, 1);
  // A pending job's reason rendered since the scheduler last changed is
  // answered from the board; one never rendered is the scheduler's to
  // render: that read waits for the loop.
  auto pending = loop_->GetJob(waiting);
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "a rendered reason waited";
  EXPECT_EQ(Must(std::move(pending)).status().message(), reason);
  auto pending_unread = loop_->GetJob(unread);
  EXPECT_EQ(pending_unread.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  // The uncommitted submit is not seen; everything committed is.
  EXPECT_EQ(listed.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the list holds a pending job, whose reason waits for the loop";

  gate->release.set_value();
  v1::Job third = Must(std::move(submitted));
  EXPECT_THAT(Must(std::move(pending_unread)).status().message(), ::testing::HasSubstr("waiting"));
  EXPECT_EQ(Must(std::move(listed)).size(), 3u) << "the list was taken before the fourth job committed";
  // Answered, so readable at once.
  EXPECT_EQ(Get(third.id()).id(), third.id());
  EXPECT_EQ(Must(loop_->ListJobs(v1::ListJobsRequest())).size(), 4u);
  EXPECT_THAT(Get(third.id()).status().message(), ::testing::HasSubstr("waiting"));
}

TEST_F(ControlLoopTest, FailedRecoveryAfterAFailedCommitDoesNotReuseJobIds) {
  ASSERT_NO_FATAL_FAILURE(UseFlakyStore());
  Connect("gpu-01", 2);
  std::string a = Submit(1).id();
  Report("gpu-01", a, v1::WORKLOAD_STATE_RUNNING);

  // The store is down for both reads and writes (a lost disk, a locked file).
  flaky_->fail_txn = true;
  flaky_->fail_range = true;
  EXPECT_EQ(Fails(loop_->Submit(Spec(1))).code(), Code::kUnavailable);
  // While the store cannot be read, reads are refused too rather than
  // answered from a state that may be wrong.
  EXPECT_EQ(Fails(loop_->ListJobs(v1::ListJobsRequest())).code(), Code::kUnavailable);
  flaky_->fail_txn = false;
  flaky_->fail_range = false;

  // The agent re-registers, as it does after a reconnect, and a job comes in.
  Connect("gpu-01", 2);
  EXPECT_EQ(StateOf(a), v1::JOB_STATE_RUNNING);
  auto next = Await(loop_->Submit(Spec(1)));
  if (next.ok()) {
    EXPECT_NE(next->id(), a) << "a new job took the id of a stored one";
  }
  std::vector<v1::Job> stored = StoredJobs();
  ASSERT_FALSE(stored.empty());
  EXPECT_EQ(stored[0].id(), a);
  EXPECT_EQ(stored[0].status().state(), v1::JOB_STATE_RUNNING) << "the stored job was overwritten";
}

}  // namespace
}  // namespace drover::server::testing

namespace drover::server::testing {
namespace {

const v1::NodeCondition* ConditionOf(const v1::Node& node, const std::string& type) {
  for (const v1::NodeCondition& c : node.conditions()) {
    if (c.type() == type) return &c;
  }
  return nullptr;
}

TEST_F(ControlLoopTest, WorkloadIsolationIsANodeCondition) {
  v1::RegisterRequest req = Inventory("gpu-01", 2);
  v1::WorkloadIsolation* iso = req.mutable_isolation();
  iso->set_device_limits(true);
  iso->set_cpu_pinning(true);
  iso->set_clean_environment(true);
  iso->set_message("cpu and memory limits off: no cgroup v2 delegation; device limits on");
  Must(loop_->RegisterNode(req));
  v1::Node node = Node("gpu-01");
  const v1::NodeCondition* c = ConditionOf(node, "WorkloadIsolation");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->status());
  EXPECT_EQ(c->reason(), "PartlyIsolated");
  EXPECT_EQ(c->message(), iso->message());
  EXPECT_EQ(Node("gpu-01").isolation().message(), iso->message());

  iso->set_cpu_limits(true);
  iso->set_memory_limits(true);
  iso->set_message("cpu and memory limits on (cgroup v2); sandbox off: not root");
  Must(loop_->RegisterNode(req));
  node = Node("gpu-01");
  c = ConditionOf(node, "WorkloadIsolation");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->status()) << "every part but the sandbox";

  iso->set_sandbox(true);
  iso->set_message("cpu and memory limits on (cgroup v2); sandbox on");
  Must(loop_->RegisterNode(req));
  node = Node("gpu-01");
  c = ConditionOf(node, "WorkloadIsolation");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->status());
  EXPECT_EQ(c->reason(), "Isolated");

  // An agent that does not report it: no condition, not a stale one.
  Register("gpu-01", 2);
  EXPECT_EQ(ConditionOf(Node("gpu-01"), "WorkloadIsolation"), nullptr);
}

TEST_F(ControlLoopTest, HostResourcesArePlacedByAndReachTheAgent) {
  auto sink = Connect("gpu-01", 4);  // 64 CPUs, 512 GiB
  v1::JobSpec spec = Spec(1);
  spec.set_cpu_millis(1500);
  spec.set_memory_bytes(int64_t{2} << 30);
  v1::Job job = Must(loop_->Submit(spec));
  auto desired = sink->WaitForJob(0, job.id());
  ASSERT_TRUE(desired);
  for (const v1::Workload& w : desired->workloads()) {
    if (w.job_id() != job.id()) continue;
    EXPECT_EQ(w.cpu_millis(), 1500);
    EXPECT_EQ(w.memory_bytes(), int64_t{2} << 30);
  }
  v1::JobSpec huge = Spec(1);
  huge.set_cpu_millis(65000);
  Status s = Fails(loop_->Submit(huge));
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("never fit"), std::string::npos) << s.message();
}

// A submit that carries an AuditNote is recorded in the audit log by the
// commit that stores the job (one durable write for both); one the loop
// refuses is recorded too; one whose commit fails is not, and is left to
// the caller.
TEST_F(ControlLoopTest, SubmitIsAuditedInTheCommitThatStoresIt) {
  loop_->Stop();
  loop_.reset();
  flaky_ = std::make_unique<FlakyStore>(store_.get());
  auth::AuditLog audit(store_.get(), &clock_);
  options_.audit = &audit;
  ASSERT_NO_FATAL_FAILURE(StartLoop(flaky_.get()));
  Connect("gpu-01", 2);
  auth::Principal alice{"t0000000001", "alice", "ml", auth::Role::kUser, "", "10.0.0.7:5000"};

  AuditNote ok{alice, "jobs.submit"};
  v1::Job job = Must(loop_->Submit(Spec(1), ok));
  EXPECT_TRUE(ok.recorded->load());
  auto stored = store_->Get(std::string(kJobsPrefix) + job.id());
  auto entry = store_->Get(auth::AuditLog::Key(1));
  ASSERT_TRUE(stored.ok() && stored->has_value() && entry.ok() && entry->has_value());
  EXPECT_EQ((*stored)->create_revision, (*entry)->mod_revision) << "the job and its audit entry in one commit";

  AuditNote refused{alice, "jobs.submit"};
  v1::JobSpec huge = Spec(3);  // more GPUs than any node has
  EXPECT_EQ(Fails(loop_->Submit(huge, refused)).code(), Code::kFailedPrecondition);
  EXPECT_TRUE(refused.recorded->load());

  flaky_->fail_txn = true;
  AuditNote lost{alice, "jobs.submit"};
  EXPECT_EQ(Fails(loop_->Submit(Spec(1), lost)).code(), Code::kUnavailable);
  EXPECT_FALSE(lost.recorded->load()) << "not committed: the caller records it";
  flaky_->fail_txn = false;

  auto entries = audit.List(0);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].target, job.id());
  EXPECT_EQ((*entries)[0].result, "ok");
  EXPECT_EQ((*entries)[0].who, "alice");
  EXPECT_EQ((*entries)[0].source, "10.0.0.7:5000");
  EXPECT_EQ((*entries)[1].target, "");
  EXPECT_NE((*entries)[1].result.find("never fit"), std::string::npos) << (*entries)[1].result;
  auto verdict = audit.Verify();
  ASSERT_TRUE(verdict.ok());
  EXPECT_TRUE(verdict->ok) << verdict->reason;
  EXPECT_EQ(verdict->entries, 2);
}

}  // namespace
}  // namespace drover::server::testing
