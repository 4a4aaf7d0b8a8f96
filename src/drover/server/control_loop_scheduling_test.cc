// The control loop driving the scheduler's policies: preemption (stop,
// requeue, run again, recovery), shared GPUs, labels and selectors, tenants.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

// ---- scheduler policies through the loop ----

ControlLoopOptions PreemptingPriority() {
  ControlLoopOptions o;
  o.scheduler.queue = sched::QueuePolicy::kPriority;
  o.scheduler.preemption = true;
  o.scheduler.preemption_grace_ms = 5'000;
  return o;
}

v1::JobSpec Low(int gpus) {
  v1::JobSpec spec;
  spec.set_gpus(gpus);
  spec.add_command("sleep");
  spec.add_command("1000");
  spec.set_priority(10);
  spec.set_preemptible(true);
  spec.set_termination_grace_seconds(2);
  EXPECT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
  return spec;
}

v1::JobSpec High(int gpus) {
  v1::JobSpec spec;
  spec.set_gpus(gpus);
  spec.add_command("train");
  spec.set_priority(900);
  EXPECT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
  return spec;
}

class PreemptionTest : public ControlLoopTest {
 protected:
  void SetUp() override {
    options_ = PreemptingPriority();
    ControlLoopTest::SetUp();
  }
  // Fills gpu-01 (4 GPUs) with four running low-priority jobs, then submits
  // a 2-GPU high-priority job; returns the low ones being preempted.
  std::vector<std::string> FillThenPreempt() {
    sink_ = Connect("gpu-01", 4);
    for (int i = 0; i < 4; ++i) {
      low_.push_back(Must(loop_->Submit(Low(1))).id());
      Report("gpu-01", low_.back(), v1::WORKLOAD_STATE_RUNNING);
    }
    for (const std::string& id : low_) EXPECT_EQ(StateOf(id), v1::JOB_STATE_RUNNING) << id;
    high_ = Must(loop_->Submit(High(2))).id();
    Must(loop_->Barrier());
    std::vector<std::string> victims;
    for (const std::string& id : low_) {
      if (StateOf(id) == v1::JOB_STATE_PREEMPTING) victims.push_back(id);
    }
    return victims;
  }

  std::shared_ptr<FakeSink> sink_;
  std::vector<std::string> low_;
  std::string high_;
};

TEST_F(PreemptionTest, VictimStopsIsQueuedAgainAndRunsAfterTheHighJob) {
  std::vector<std::string> victims = FillThenPreempt();
  ASSERT_FALSE(victims.empty()) << "nothing was preempted for " << high_;
  EXPECT_EQ(StateOf(high_), v1::JOB_STATE_PENDING);  // the GPUs are free only once the victims stop
  for (const std::string& id : victims) {
    v1::Job v = Get(id);
    EXPECT_EQ(v.status().message().rfind("preempted for " + high_ + ": ", 0), 0u) << v.status().message();
    EXPECT_EQ(v.status().stop_grace_seconds(), 2) << "the job's own 2 s is shorter than the 5 s policy";
  }
  // The victims leave the desired set with a Stop that carries the grace.
  auto desired = sink_->WaitFor(0, [&](const v1::DesiredWorkloads& d) {
    return d.stops_size() > 0 &&
           std::none_of(victims.begin(), victims.end(), [&](const std::string& id) { return Contains(d, id); });
  });
  ASSERT_TRUE(desired);
  EXPECT_EQ(desired->stops_size(), static_cast<int>(victims.size()));
  for (const v1::Stop& stop : desired->stops()) {
    EXPECT_NE(std::find(victims.begin(), victims.end(), stop.job_id()), victims.end()) << stop.job_id();
    EXPECT_EQ(stop.grace_seconds(), 2);
  }
  // The stored record says the same.
  for (const v1::Job& j : StoredJobs()) {
    bool victim = std::find(victims.begin(), victims.end(), j.id()) != victims.end();
    if (victim) {
      EXPECT_EQ(j.status().state(), v1::JOB_STATE_PREEMPTING) << j.id();
    }
  }

  // The agent reports them killed by SIGTERM: queued again, the high job runs.
  for (const std::string& id : victims) Report("gpu-01", id, v1::WORKLOAD_STATE_EXITED, -1, 15);
  for (const std::string& id : victims) {
    v1::Job v = Get(id);
    EXPECT_EQ(v.status().state(), v1::JOB_STATE_PENDING) << id;
    EXPECT_EQ(v.status().preemptions(), 1);
    EXPECT_FALSE(v.status().has_allocation());
    EXPECT_EQ(v.status().bind_time_unix_nanos(), 0);
    EXPECT_EQ(v.status().start_time_unix_nanos(), 0);
    EXPECT_NE(v.status().submit_time_unix_nanos(), 0);
    EXPECT_FALSE(v.status().message().empty()) << "a pending job says why it waits";
  }
  EXPECT_EQ(StateOf(high_), v1::JOB_STATE_BOUND);
  Report("gpu-01", high_, v1::WORKLOAD_STATE_RUNNING);

  // Once the high job is done, the preempted jobs run again.
  Report("gpu-01", high_, v1::WORKLOAD_STATE_EXITED, 0);
  for (const std::string& id : victims) EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND) << id;
  for (const std::string& id : low_) EXPECT_NE(StateOf(id), v1::JOB_STATE_PENDING) << id;
}

TEST_F(PreemptionTest, VictimThatFinishesDuringItsGraceSucceedsAndACancelledOneEndsCancelled) {
  std::vector<std::string> victims = FillThenPreempt();
  ASSERT_GE(victims.size(), 2u);
  Report("gpu-01", victims[0], v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(victims[0]), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Get(victims[0]).status().preemptions(), 0);

  EXPECT_EQ(Must(loop_->Cancel(victims[1])).status().state(), v1::JOB_STATE_CANCELLING);
  Report("gpu-01", victims[1], v1::WORKLOAD_STATE_EXITED, -1, 15);
  EXPECT_EQ(StateOf(victims[1]), v1::JOB_STATE_CANCELLED);
}

TEST_F(PreemptionTest, FullReportWithoutAPreemptedJobRequeuesIt) {
  std::vector<std::string> victims = FillThenPreempt();
  ASSERT_FALSE(victims.empty());
  v1::StatusReport full;
  full.set_full(true);
  for (const std::string& id : low_) {
    if (std::find(victims.begin(), victims.end(), id) != victims.end()) continue;
    v1::WorkloadStatus* ws = full.add_workloads();
    ws->set_job_id(id);
    ws->set_workload_id(WorkloadOf(id));
    ws->set_state(v1::WORKLOAD_STATE_RUNNING);
  }
  loop_->HandleStatus("gpu-01", full);
  Must(loop_->Barrier());
  for (const std::string& id : victims) {
    EXPECT_EQ(StateOf(id), v1::JOB_STATE_PENDING) << id;
    EXPECT_EQ(Get(id).status().preemptions(), 1);
  }
  EXPECT_EQ(StateOf(high_), v1::JOB_STATE_BOUND);
}

// A checkpoint the node reports moves the work a victim would lose: the
// job that started first but saved 11 minutes ago is stopped, not the one
// that has run 50 minutes without a checkpoint. The same mark sent by
// another node, or naming another attempt, changes nothing.
class CheckpointTest : public PreemptionTest {
 protected:
  // Which of `early` (started at 0) and `late` (at 10 min) is preempted at
  // 60 min for a high-priority job, after `marks` at 49 min.
  void Run(bool honest, bool restart = false) {
    auto sink = Connect("gpu-01", 2);
    auto other = Connect("gpu-02", 1);
    std::string kept = Must(loop_->Submit(High(1))).id();  // holds gpu-02: not preemptible
    ASSERT_EQ(Get(kept).status().allocation().node(), "gpu-02");
    early_ = Must(loop_->Submit(Low(1))).id();
    Report("gpu-01", early_, v1::WORKLOAD_STATE_RUNNING);
    clock_.Advance(std::chrono::minutes(10));
    late_ = Must(loop_->Submit(Low(1))).id();
    Report("gpu-01", late_, v1::WORKLOAD_STATE_RUNNING);
    ASSERT_EQ(Get(late_).status().allocation().node(), "gpu-01");
    clock_.Advance(std::chrono::minutes(39));
    auto mark = [&](const std::string& node, const std::string& workload) {
      v1::Heartbeat hb;
      v1::CheckpointMark* m = hb.add_checkpoints();
      m->set_workload_id(workload);
      m->set_time_unix_nanos(ToUnixNanos(clock_.Now()));
      loop_->Heartbeat(node, hb);
    };
    if (honest) {
      mark("gpu-01", WorkloadOf(early_));
    } else {
      mark("gpu-02", WorkloadOf(early_));
      mark("gpu-01", rpc::WorkloadId(early_, 0, 1, Get(early_).status().attempt() + 1));
    }
    Must(loop_->Barrier());
    EXPECT_EQ(Get(early_).status().checkpoint_time_unix_nanos(), honest ? ToUnixNanos(clock_.Now()) : 0);
    if (restart) {
      ASSERT_NO_FATAL_FAILURE(Restart());
      sink = Connect("gpu-01", 2);
      other = Connect("gpu-02", 1);
      Report("gpu-01", early_, v1::WORKLOAD_STATE_RUNNING);
      Report("gpu-01", late_, v1::WORKLOAD_STATE_RUNNING);
    }
    clock_.Advance(std::chrono::minutes(11));
    std::string high = Must(loop_->Submit(High(1))).id();
    Must(loop_->Barrier());
    for (const std::string& id : {early_, late_}) {
      if (StateOf(id) == v1::JOB_STATE_PREEMPTING) victims_.push_back(id);
    }
  }
  std::string early_, late_;
  std::vector<std::string> victims_;
};

TEST_F(CheckpointTest, AReportedCheckpointMakesTheCheaperVictim) {
  ASSERT_NO_FATAL_FAILURE(Run(/*honest=*/true));
  EXPECT_EQ(victims_, std::vector<std::string>{early_});
}

TEST_F(CheckpointTest, TheCheckpointIsStoredAndSurvivesARestart) {
  ASSERT_NO_FATAL_FAILURE(Run(/*honest=*/true, /*restart=*/true));
  EXPECT_EQ(victims_, std::vector<std::string>{early_});
}

TEST_F(CheckpointTest, AMarkFromAnotherNodeOrAttemptChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(Run(/*honest=*/false));
  EXPECT_EQ(victims_, std::vector<std::string>{late_});
}

TEST_F(PreemptionTest, PreemptingJobSurvivesARestart) {
  std::vector<std::string> victims = FillThenPreempt();
  ASSERT_FALSE(victims.empty());
  ASSERT_NO_FATAL_FAILURE(Restart());
  for (const std::string& id : victims) EXPECT_EQ(StateOf(id), v1::JOB_STATE_PREEMPTING) << id;
  EXPECT_EQ(StateOf(high_), v1::JOB_STATE_PENDING);

  // The agent returns: the victims are still to be stopped, with their grace.
  auto sink = Connect("gpu-01", 4);
  auto desired = sink->WaitFor(0, [&](const v1::DesiredWorkloads& d) { return d.stops_size() > 0; });
  ASSERT_TRUE(desired);
  for (const std::string& id : victims) {
    EXPECT_FALSE(Contains(*desired, id)) << id;
    EXPECT_TRUE(std::any_of(desired->stops().begin(), desired->stops().end(), [&](const v1::Stop& s) {
      return s.job_id() == id && s.grace_seconds() == 2;
    })) << id;
  }
  Must(loop_->Barrier());
  // The scheduler knows whom the restored victims yield to: nothing else is
  // preempted for the same job.
  std::vector<std::string> stopping;
  for (const std::string& id : low_) {
    if (StateOf(id) == v1::JOB_STATE_PREEMPTING) stopping.push_back(id);
  }
  std::sort(stopping.begin(), stopping.end());
  std::vector<std::string> expected = victims;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(stopping, expected);
  for (const std::string& id : stopping) Report("gpu-01", id, v1::WORKLOAD_STATE_EXITED, -1, 9);
  for (const std::string& id : stopping) {
    EXPECT_NE(StateOf(id), v1::JOB_STATE_PREEMPTING) << id;
    EXPECT_EQ(Get(id).status().preemptions(), 1) << id;
  }
  EXPECT_EQ(StateOf(high_), v1::JOB_STATE_BOUND);
}

// LAS through the loop: a preempted job's attained service is stored with
// it and survives a restart (it still waits behind a fresh job), and the
// starvation guard promotes it once it has waited 4 times as long as it ran,
// counted from its stored last attempt.
TEST_F(ControlLoopTest, LasServiceSurvivesARestartAndTheStarvationGuardPromotes) {
  options_.scheduler.queue = sched::QueuePolicy::kLas;
  options_.scheduler.las_thresholds = {3'600'000};  // 1 GPU-hour
  options_.scheduler.las_starvation_factor = 4;
  options_.scheduler.preemption = true;
  ASSERT_NO_FATAL_FAILURE(Restart());
  auto sink = Connect("gpu-01", 1);
  v1::JobSpec low = Low(1);
  low.set_priority(0);
  v1::JobSpec fresh = low;
  fresh.set_preemptible(false);
  std::string veteran = Must(loop_->Submit(low)).id();
  Report("gpu-01", veteran, v1::WORKLOAD_STATE_RUNNING);
  clock_.Advance(std::chrono::minutes(61));  // 61 GPU-minutes: level 1
  std::string b = Must(loop_->Submit(fresh)).id();
  Must(loop_->Barrier());
  ASSERT_EQ(StateOf(veteran), v1::JOB_STATE_PREEMPTING);
  Report("gpu-01", veteran, v1::WORKLOAD_STATE_EXITED, -1, 15);
  EXPECT_EQ(StateOf(veteran), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Get(veteran).status().attained_gpu_ms(), 61 * 60'000);
  EXPECT_EQ(StateOf(b), v1::JOB_STATE_BOUND);
  Report("gpu-01", b, v1::WORKLOAD_STATE_RUNNING);

  ASSERT_NO_FATAL_FAILURE(Restart());
  sink = Connect("gpu-01", 1);
  Report("gpu-01", b, v1::WORKLOAD_STATE_RUNNING);
  std::string c = Must(loop_->Submit(fresh)).id();
  clock_.Advance(std::chrono::minutes(10));
  Report("gpu-01", b, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(c), v1::JOB_STATE_BOUND) << "the veteran is still level 1 after the restart";
  EXPECT_EQ(StateOf(veteran), v1::JOB_STATE_PENDING);
  Report("gpu-01", c, v1::WORKLOAD_STATE_RUNNING);

  // Queued again at 61 minutes after running 61: promoted at 61 + 4 x 61.
  std::string d = Must(loop_->Submit(fresh)).id();
  clock_.Advance(std::chrono::minutes(4 * 61 - 10));
  Report("gpu-01", c, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(veteran), v1::JOB_STATE_BOUND) << "promoted ahead of " << d;
  EXPECT_EQ(StateOf(d), v1::JOB_STATE_PENDING);
  // Promotion forgave its service, and the store says so: after a restart
  // the running veteran is level 0 again, not preempted for `d`.
  EXPECT_EQ(Get(veteran).status().attained_gpu_ms(), 0);
  Report("gpu-01", veteran, v1::WORKLOAD_STATE_RUNNING);
  ASSERT_NO_FATAL_FAILURE(Restart());
  sink = Connect("gpu-01", 1);
  Report("gpu-01", veteran, v1::WORKLOAD_STATE_RUNNING);
  clock_.Advance(std::chrono::minutes(30));
  Must(loop_->Barrier());
  EXPECT_EQ(StateOf(veteran), v1::JOB_STATE_RUNNING);
}

TEST_F(ControlLoopTest, FractionalJobsShareOneGpu) {
  auto sink = Connect("gpu-01", 1);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::JobSpec spec = Spec(1);
    spec.set_gpu_milli(250);
    spec.set_gpu_memory_bytes(int64_t{10} << 30);
    ASSERT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
    ids.push_back(Must(loop_->Submit(spec)).id());
  }
  std::string whole = Submit(1).id();
  for (const std::string& id : ids) {
    v1::Job j = Get(id);
    ASSERT_EQ(j.status().state(), v1::JOB_STATE_BOUND) << id;
    EXPECT_EQ(Gpus(j), std::vector<int>{0});
    EXPECT_EQ(j.status().allocation().gpu_milli(), 250);
    EXPECT_EQ(j.status().allocation().gpu_memory_bytes(), int64_t{10} << 30);
  }
  EXPECT_EQ(StateOf(whole), v1::JOB_STATE_PENDING) << "a whole GPU is not free while shares hold it";
  std::string holders = Node("gpu-01").gpus(0).job_id();
  for (const std::string& id : ids) EXPECT_NE(holders.find(id), std::string::npos) << holders;
  auto desired = sink->WaitFor(0, [&](const v1::DesiredWorkloads& d) { return d.workloads_size() == 3; });
  ASSERT_TRUE(desired);
  for (const v1::Workload& w : desired->workloads()) EXPECT_EQ(w.gpu_indices_size(), 1);

  // Shares survive a restart with their size.
  ASSERT_NO_FATAL_FAILURE(Restart());
  for (const std::string& id : ids) EXPECT_EQ(Get(id).status().allocation().gpu_milli(), 250);
  Connect("gpu-01", 1);
  for (const std::string& id : ids) Report("gpu-01", id, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(whole), v1::JOB_STATE_BOUND);
}

TEST_F(ControlLoopTest, ReadsRunNoSchedulingPassButChangesAndTheClockDo) {
  Connect("gpu-01", 1);
  std::string running = Submit(1).id();
  std::string waiting = Submit(1).id();
  ASSERT_EQ(StateOf(waiting), v1::JOB_STATE_PENDING);
  const std::string reason = Get(waiting).status().message();
  const LoopStats before = Must(loop_->Stats());
  for (int i = 0; i < 20; ++i) {
    Get(waiting);
    Must(loop_->ListJobs({}));
  }
  const LoopStats after_reads = Must(loop_->Stats());
  // (They do not even reach the loop: the waiting job's reason, rendered
  // for the first Get, stands on the board until the scheduler changes;
  // ReadsAreAnsweredWhileTheLoopIsBusy... shows it.)
  EXPECT_EQ(after_reads.passes_run, before.passes_run) << "reads ran a pass";
  EXPECT_EQ(Get(waiting).status().message(), reason) << "the last pass's reason stands";

  // While a job waits the clock alone brings a pass (priority aging), once a second.
  clock_.Advance(std::chrono::milliseconds(1001));
  Must(loop_->Barrier());
  EXPECT_EQ(Must(loop_->Stats()).passes_run, after_reads.passes_run + 1);

  // A change the scheduler reads passes at once: the GPU frees, the waiter binds.
  Report("gpu-01", running, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(waiting), v1::JOB_STATE_BOUND);
  EXPECT_GT(Must(loop_->Stats()).passes_run, after_reads.passes_run + 1);
}

TEST_F(ControlLoopTest, NodeLabelsAndLinksAreKeptAndSelectorsApply) {
  v1::RegisterRequest req = Inventory("gpu-01", 2);
  (*req.mutable_labels())["rack"] = "r1";
  for (int i = 0; i < 4; ++i) req.add_links(3);
  ASSERT_TRUE(rpc::ValidateRegister(req).ok());
  Must(loop_->RegisterNode(req));
  Open("gpu-01", std::make_shared<FakeSink>());
  v1::Node node = Node("gpu-01");
  EXPECT_EQ(node.labels().at("rack"), "r1");
  EXPECT_EQ(node.links_size(), 4);

  // No node is in rack r2: the job can never run.
  v1::JobSpec elsewhere = Spec(1);
  (*elsewhere.mutable_node_selector())["rack"] = "r2";
  Status never = Fails(loop_->Submit(elsewhere));
  EXPECT_EQ(never.code(), Code::kFailedPrecondition);
  EXPECT_NE(never.message().find("rack=r2"), std::string::npos) << never.message();
  v1::JobSpec here = Spec(1);
  (*here.mutable_node_selector())["rack"] = "r1";
  std::string bound = Must(loop_->Submit(here)).id();
  EXPECT_EQ(StateOf(bound), v1::JOB_STATE_BOUND);

  // Labels and links survive a restart.
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(Node("gpu-01").labels().at("rack"), "r1");
  EXPECT_EQ(Node("gpu-01").links_size(), 4);
}

TEST_F(ControlLoopTest, BadTenantConfigurationFailsTheStart) {
  loop_->Stop();
  loop_.reset();
  ControlLoopOptions o;
  o.tenants.push_back(sched::TenantInfo{"a", -1.0, {}, -1});
  ControlLoop loop(store_.get(), &clock_, o);
  Status s = loop.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tenant 'a'"), std::string::npos) << s.message();
}

// ---- gangs ----

v1::JobSpec Gang(int replicas, int gpus) {
  v1::JobSpec spec;
  spec.set_replicas(replicas);
  spec.set_gpus(gpus);
  spec.add_command("torchrun");
  EXPECT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
  return spec;
}

// The workload named `id` in `d`, if any.
std::optional<v1::Workload> Find(const v1::DesiredWorkloads& d, const std::string& id) {
  for (const v1::Workload& w : d.workloads()) {
    if (w.workload_id() == id) return w;
  }
  return std::nullopt;
}

class GangTest : public ControlLoopTest {
 protected:
  // A 2 x 4 gang over two 4-GPU nodes; fills node_of_ with each replica's node.
  std::string SubmitGang() {
    sinks_["gpu-a"] = Connect("gpu-a", 4);
    sinks_["gpu-b"] = Connect("gpu-b", 4);
    std::string id = Must(loop_->Submit(Gang(2, 4))).id();
    v1::Job job = Get(id);
    EXPECT_EQ(job.status().state(), v1::JOB_STATE_BOUND);
    EXPECT_EQ(job.status().replicas_size(), 2);
    for (const v1::Allocation& a : job.status().replicas()) {
      node_of_.push_back(a.node());
      EXPECT_EQ(a.gpu_indices_size(), 4);
    }
    return id;
  }
  std::map<std::string, std::shared_ptr<FakeSink>> sinks_;
  std::vector<std::string> node_of_;
};

TEST_F(GangTest, EachReplicaRunsOnItsNodeAndTheJobEndsWhenAllHave) {
  std::string id = SubmitGang();
  ASSERT_EQ(node_of_.size(), 2u);
  EXPECT_NE(node_of_[0], node_of_[1]);
  EXPECT_EQ(Get(id).status().allocation().node(), node_of_[0]);
  for (int r = 0; r < 2; ++r) {
    std::string wid = WorkloadOf(id, r);
    auto d = sinks_[node_of_[r]]->WaitFor(0, [&](const v1::DesiredWorkloads& s) { return Find(s, wid).has_value(); });
    ASSERT_TRUE(d);
    v1::Workload w = *Find(*d, wid);
    EXPECT_EQ(w.job_id(), id);
    EXPECT_EQ(w.replica(), r);
    EXPECT_EQ(w.replicas(), 2);
    EXPECT_EQ(w.gpu_indices_size(), 4);
  }
  // The node view shows the replica that holds each GPU.
  v1::Node second = Node(node_of_[1]);
  for (const v1::Gpu& g : second.gpus()) EXPECT_EQ(g.job_id(), id);

  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND) << "running only once every replica runs";
  ReportReplica(node_of_[0], id, 1, v1::WORKLOAD_STATE_RUNNING);  // replica 1 does not run there: ignored
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_BOUND);
  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_RUNNING);

  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_RUNNING) << "replica 0 still runs";
  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_EXITED, 0);
  v1::Job done = Get(id);
  EXPECT_EQ(done.status().state(), v1::JOB_STATE_SUCCEEDED);
  for (const char* name : {"gpu-a", "gpu-b"}) {
    v1::Node n = Node(name);
    for (const v1::Gpu& g : n.gpus()) EXPECT_EQ(g.job_id(), "") << name;
  }
}

TEST_F(GangTest, AFailedReplicaStopsTheOthersAndFailsTheJob) {
  std::string id = SubmitGang();
  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_RUNNING);
  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_RUNNING);
  size_t mark = sinks_[node_of_[0]]->count();
  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_EXITED, 3);
  v1::Job failing = Get(id);
  EXPECT_EQ(failing.status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(failing.status().gang_failed());
  EXPECT_NE(failing.status().message().find("replica 1 failed: exited with code 3"), std::string::npos)
      << failing.status().message();
  // Replica 0 leaves its node's desired set: its agent stops it.
  ASSERT_TRUE(
      sinks_[node_of_[0]]->WaitFor(mark, [&](const v1::DesiredWorkloads& d) { return !Find(d, WorkloadOf(id, 0)); }));
  // The GPUs stay held until it is gone.
  std::string waiting = Submit(4).id();
  EXPECT_EQ(StateOf(waiting), v1::JOB_STATE_PENDING);

  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_EXITED, -1, 15);
  v1::Job failed = Get(id);
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.status().exit_code(), 3);
  EXPECT_EQ(failed.status().message(), "replica 1 failed: exited with code 3");
  EXPECT_EQ(StateOf(waiting), v1::JOB_STATE_BOUND);
}

TEST_F(GangTest, ABoundGangSurvivesARestartAndALostReplicaFailsIt) {
  std::string id = SubmitGang();
  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_RUNNING);
  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_RUNNING);
  ASSERT_NO_FATAL_FAILURE(Restart());
  v1::Job back = Get(id);
  EXPECT_EQ(back.status().state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(back.status().replicas_size(), 2);
  EXPECT_EQ(back.status().replicas(1).node(), node_of_[1]);
  auto sink = Connect(node_of_[1], 4);
  ASSERT_TRUE(sink->WaitFor(0, [&](const v1::DesiredWorkloads& d) { return Find(d, WorkloadOf(id, 1)).has_value(); }));

  // The agent of replica 1 comes back without it.
  v1::StatusReport full;
  full.set_full(true);
  loop_->HandleStatus(node_of_[1], full);
  Must(loop_->Barrier());
  v1::Job failing = Get(id);
  EXPECT_TRUE(failing.status().gang_failed());
  EXPECT_NE(failing.status().message().find("no longer knows replica 1"), std::string::npos)
      << failing.status().message();
}

TEST_F(GangTest, CancelStopsEveryReplica) {
  std::string id = SubmitGang();
  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_RUNNING);
  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(Must(loop_->Cancel(id)).status().state(), v1::JOB_STATE_CANCELLING);
  ReportReplica(node_of_[0], id, 0, v1::WORKLOAD_STATE_EXITED, -1, 15);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_CANCELLING);
  ReportReplica(node_of_[1], id, 1, v1::WORKLOAD_STATE_EXITED, -1, 15);
  EXPECT_EQ(StateOf(id), v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace drover::server::testing
