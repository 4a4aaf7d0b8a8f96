// GPU health in the control loop: heartbeats that take a GPU out of service
// and bring it back, the jobs on a sick GPU and their restart policy, fault
// injection relayed to agents, and the statistics /metrics reads.

#include <gmock/gmock.h>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

using ::testing::HasSubstr;

v1::Heartbeat Health(int gpus, int sick, const std::string& reason = "xid 79 (GPU has fallen off the bus)") {
  v1::Heartbeat hb;
  for (int i = 0; i < gpus; ++i) {
    v1::GpuReport* r = hb.add_gpus();
    r->set_index(i);
    r->set_health(i == sick ? v1::GPU_HEALTH_UNHEALTHY : v1::GPU_HEALTH_HEALTHY);
    if (i == sick) r->set_health_reason(reason);
    r->mutable_telemetry()->set_time_unix_nanos(1);
    r->mutable_telemetry()->set_temperature_c(40 + i);
  }
  EXPECT_TRUE(rpc::ValidateHeartbeat("gpu-01", gpus, hb).ok());
  return hb;
}

class ControlLoopHealthTest : public ControlLoopTest {
 protected:
  void Beat(const std::string& node, v1::Heartbeat hb) {
    loop_->Heartbeat(node, std::move(hb));
    Must(loop_->Barrier());
  }
  v1::Job SubmitSpec(v1::JobSpec spec) {
    EXPECT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
    return Must(loop_->Submit(spec));
  }
};

TEST_F(ControlLoopHealthTest, SickGpuTakesNoWorkUntilItHeals) {
  Connect("gpu-01", 2);
  Beat("gpu-01", Health(2, 1));
  v1::Node node = Node("gpu-01");
  EXPECT_EQ(node.gpus(1).health(), v1::GPU_HEALTH_UNHEALTHY);
  EXPECT_EQ(node.gpus(1).health_reason(), "xid 79 (GPU has fallen off the bus)");
  EXPECT_GT(node.gpus(1).health_changed_unix_nanos(), 0);
  EXPECT_EQ(node.gpus(0).telemetry().temperature_c(), 40);
  ASSERT_EQ(node.conditions_size(), 2);
  EXPECT_EQ(node.conditions(1).type(), "GpusHealthy");
  EXPECT_FALSE(node.conditions(1).status());
  EXPECT_THAT(node.conditions(1).message(), HasSubstr("gpu 1: xid 79"));

  v1::Job single = Submit(1);
  v1::Job pair = Submit(2);
  EXPECT_EQ(StateOf(pair.id()), v1::JOB_STATE_PENDING);
  EXPECT_EQ(StateOf(single.id()), v1::JOB_STATE_BOUND);
  EXPECT_EQ(Gpus(Get(single.id())), std::vector<int>{0});

  Beat("gpu-01", Health(2, -1));
  node = Node("gpu-01");
  EXPECT_EQ(node.gpus(1).health(), v1::GPU_HEALTH_HEALTHY);
  EXPECT_EQ(node.gpus(1).health_reason(), "");
  EXPECT_TRUE(node.conditions(1).status());
  // The single job's process ends; now both GPUs are free for the pair.
  Report("gpu-01", single.id(), v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(pair.id()), v1::JOB_STATE_BOUND);
}

TEST_F(ControlLoopHealthTest, HealthSurvivesARestartOfTheServer) {
  Connect("gpu-01", 2);
  Beat("gpu-01", Health(2, 0, "device lost"));
  Restart();
  v1::Node node = Node("gpu-01");
  EXPECT_EQ(node.gpus(0).health(), v1::GPU_HEALTH_UNHEALTHY);
  EXPECT_EQ(node.gpus(0).health_reason(), "device lost");
}

TEST_F(ControlLoopHealthTest, JobOnASickGpuFailsByDefault) {
  auto sink = Connect("gpu-01", 1);
  v1::Job job = Submit(1);
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  size_t before = sink->count();
  Beat("gpu-01", Health(1, 0));
  v1::Job stopping = Get(job.id());
  EXPECT_EQ(stopping.status().state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_THAT(stopping.status().failure(), HasSubstr("gpu 0 of node 'gpu-01' became unhealthy: xid 79"));
  // The agent is told to stop it.
  auto stopped = sink->WaitFor(before, [&](const v1::DesiredWorkloads& d) {
    return !Contains(d, job.id()) && d.stops_size() == 1 && d.stops(0).job_id() == job.id();
  });
  ASSERT_TRUE(stopped.has_value());
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_EXITED, -1, 15);
  v1::Job failed = Get(job.id());
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.status().message(), HasSubstr("became unhealthy: xid 79"));
  EXPECT_EQ(failed.status().failure(), "");
  EXPECT_EQ(failed.status().restarts(), 0);
}

TEST_F(ControlLoopHealthTest, OnFailureRequeuesUpToMaxRestarts) {
  Connect("gpu-01", 1);
  v1::JobSpec spec = Spec(1);
  spec.set_restart_policy("on-failure");
  spec.set_max_restarts(1);
  v1::Job job = SubmitSpec(spec);
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  Beat("gpu-01", Health(1, 0));
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_EXITED, -1, 15);
  v1::Job queued = Get(job.id());
  EXPECT_EQ(queued.status().state(), v1::JOB_STATE_PENDING);  // its only GPU is sick
  EXPECT_EQ(queued.status().restarts(), 1);
  EXPECT_EQ(queued.status().preemptions(), 0);
  EXPECT_THAT(queued.status().message(), HasSubstr("restart 1 of 1"));

  Beat("gpu-01", Health(1, -1));
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_BOUND);
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  Beat("gpu-01", Health(1, 0, "uncorrected (double-bit) ECC error"));
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_EXITED, -1, 15);
  v1::Job failed = Get(job.id());
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.status().message(), HasSubstr("ECC error (restarted 1 times"));
}

TEST_F(ControlLoopHealthTest, JobThatEndsCleanlyWhileStoppingSucceeds) {
  Connect("gpu-01", 1);
  v1::Job job = Submit(1);
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  Beat("gpu-01", Health(1, 0));
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_EXITED, 0);
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Get(job.id()).status().failure(), "");
}

TEST_F(ControlLoopHealthTest, FaultsAreCheckedAndRelayedToTheSession) {
  EXPECT_EQ(Fails(loop_->InjectFault("nope", 0, "xid")).code(), Code::kNotFound);
  Register("gpu-02", 1);  // no session
  EXPECT_EQ(Fails(loop_->InjectFault("gpu-02", 0, "xid")).code(), Code::kUnavailable);
  auto sink = Connect("gpu-01", 2);
  EXPECT_EQ(Fails(loop_->InjectFault("gpu-01", 2, "xid")).code(), Code::kInvalidArgument);
  EXPECT_EQ(Fails(loop_->InjectFault("gpu-01", -1, "xid")).code(), Code::kInvalidArgument);
  EXPECT_EQ(Fails(loop_->InjectFault("gpu-01", 0, "melt")).code(), Code::kInvalidArgument);
  EXPECT_TRUE(sink->faults().empty());
  Must(loop_->InjectFault("gpu-01", 1, "xid:48"));
  ASSERT_EQ(sink->faults().size(), 1u);
  EXPECT_EQ(sink->faults()[0].gpu_index(), 1);
  EXPECT_EQ(sink->faults()[0].fault(), "xid:48");
  // A real GPU refuses.
  v1::RegisterRequest real = Inventory("gpu-03", 1);
  real.mutable_gpus(0)->set_backend("nvml");
  Must(loop_->RegisterNode(real));
  Open("gpu-03", std::make_shared<FakeSink>());
  Status refused = Fails(loop_->InjectFault("gpu-03", 0, "xid"));
  EXPECT_EQ(refused.code(), Code::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("nvml"));
}

TEST_F(ControlLoopHealthTest, StatsCountJobsNodesAndGpus) {
  Connect("gpu-01", 2);
  Register("gpu-02", 1);
  Beat("gpu-01", Health(2, 1));
  Submit(1);
  Submit(2);  // cannot run while a GPU is sick
  LoopStats s = Must(loop_->Stats());
  EXPECT_EQ(s.jobs[v1::JOB_STATE_BOUND], 1);
  EXPECT_EQ(s.jobs[v1::JOB_STATE_PENDING], 1);
  EXPECT_EQ(s.jobs[v1::JOB_STATE_FAILED], 0);  // every state is there
  EXPECT_EQ(s.queue_depth, 1);
  EXPECT_EQ(s.nodes_ready, 1);
  EXPECT_EQ(s.nodes_not_ready, 1);
  EXPECT_EQ(s.gpus_healthy, 2);
  EXPECT_EQ(s.gpus_unhealthy, 1);
}

TEST_F(ControlLoopHealthTest, TelemetryOfANodeWithoutSessionIsLeftOut) {
  Connect("gpu-01", 1);
  Beat("gpu-01", Health(1, -1));
  EXPECT_TRUE(Node("gpu-01").gpus(0).has_telemetry());
  loop_->SessionClosed("gpu-01", nullptr);  // not its sink: ignored
  Must(loop_->Barrier());
  EXPECT_TRUE(Node("gpu-01").gpus(0).has_telemetry());
}

TEST_F(ControlLoopHealthTest, ReadingsReachReadersAtMostOnceASecondAndHealthAtOnce) {
  Connect("gpu-01", 2);
  auto hot = [](double temperature, int sick) {
    v1::Heartbeat hb = Health(2, sick);
    for (v1::GpuReport& r : *hb.mutable_gpus()) r.mutable_telemetry()->set_temperature_c(temperature);
    return hb;
  };
  Beat("gpu-01", hot(40, -1));
  EXPECT_EQ(Node("gpu-01").gpus(0).telemetry().temperature_c(), 40);
  // A heartbeat within the second: its readings wait for the next publish.
  lease_clock_.Advance(std::chrono::milliseconds(500));
  Beat("gpu-01", hot(50, -1));
  EXPECT_EQ(Node("gpu-01").gpus(0).telemetry().temperature_c(), 40);
  lease_clock_.Advance(std::chrono::milliseconds(500));
  Beat("gpu-01", hot(60, -1));
  EXPECT_EQ(Node("gpu-01").gpus(0).telemetry().temperature_c(), 60);
  // A change of health is published at once, readings with it.
  lease_clock_.Advance(std::chrono::milliseconds(100));
  Beat("gpu-01", hot(70, 1));
  v1::Node node = Node("gpu-01");
  EXPECT_EQ(node.gpus(1).health(), v1::GPU_HEALTH_UNHEALTHY);
  EXPECT_EQ(node.gpus(0).telemetry().temperature_c(), 70);
}

}  // namespace
}  // namespace drover::server::testing
