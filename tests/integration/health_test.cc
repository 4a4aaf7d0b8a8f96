// The GPU health cycle end to end on simulated GPUs: `drover up` with one
// simulated node of two GPUs, faults injected through the admin API (as an
// operator would), the scheduler avoiding a sick GPU, the jobs on it
// handled by their restart policy, and the GPU back in service after its
// clean health checks.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

class HealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Fast checks so the test is short: a check every 200 ms, back after 5
    // clean ones (1 s).
    up_ = std::make_unique<DroverUp>(
        dir_.path() + "/data",
        std::vector<std::string>{"--devices", "none", "--simulate", "1", "--simulate-gpus", "2", "--telemetry-period",
                                 "100ms", "--health-interval", "200ms", "--health-clean-checks", "5"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));
  }
  void TearDown() override {
    if (up_ && !up_->grpc_address().empty()) CancelAllJobs(up_->jobs());
  }

  grpc::Status Fault(int gpu, const std::string& fault) {
    v1::InjectFaultRequest req;
    req.set_node("sim-1");
    req.set_gpu_index(gpu);
    req.set_fault(fault);
    v1::InjectFaultResponse resp;
    return up_->nodes()->InjectFault(Ctx().get(), req, &resp);
  }

  v1::Gpu Gpu(int index) {
    v1::GetNodeRequest req;
    req.set_name("sim-1");
    v1::Node node;
    grpc::Status s = up_->nodes()->Get(Ctx().get(), req, &node);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return node.gpus_size() > index ? node.gpus(index) : v1::Gpu();
  }

  std::string Submit(int gpus, const std::string& restart_policy = "") {
    v1::SubmitJobRequest req;
    v1::JobSpec* s = req.mutable_spec();
    s->set_gpus(gpus);
    s->set_restart_policy(restart_policy);
    s->set_termination_grace_seconds(1);
    s->add_command("sleep");
    s->add_command("1000");
    v1::SubmitJobResponse resp;
    grpc::Status st = up_->jobs()->Submit(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job().id();
  }

  bool WaitForState(const std::string& id, v1::JobState state) {
    return WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == state; });
  }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(HealthTest, SickGpuIsAvoidedAndReturnsAfterCleanChecks) {
  ASSERT_TRUE(Fault(1, "lost").ok());
  ASSERT_TRUE(WaitUntil([&] { return Gpu(1).health() == v1::GPU_HEALTH_UNHEALTHY; }));
  EXPECT_NE(Gpu(1).health_reason().find("device lost"), std::string::npos) << Gpu(1).health_reason();
  EXPECT_EQ(Gpu(0).health(), v1::GPU_HEALTH_HEALTHY);

  // Two GPUs cannot be had while one is sick; one can, and it is the other.
  std::string single = Submit(1);
  ASSERT_TRUE(WaitForState(single, v1::JOB_STATE_RUNNING));
  std::string pair = Submit(2);
  EXPECT_EQ(GetJob(up_->jobs(), single).status().allocation().gpu_indices(0), 0);
  v1::Job waiting = GetJob(up_->jobs(), pair);
  EXPECT_EQ(waiting.status().state(), v1::JOB_STATE_PENDING);

  // A lost device stays out while it does not answer, however long.
  ASSERT_TRUE(Fault(1, "clear").ok());
  ASSERT_TRUE(WaitUntil([&] { return Gpu(1).health() == v1::GPU_HEALTH_HEALTHY; }));
  EXPECT_EQ(Gpu(1).health_reason(), "");
  // Back in service: the pair runs once the single job leaves GPU 0.
  v1::CancelJobRequest cancel;
  cancel.set_id(single);
  v1::Job cancelled;
  ASSERT_TRUE(up_->jobs()->Cancel(Ctx().get(), cancel, &cancelled).ok());
  ASSERT_TRUE(WaitForState(pair, v1::JOB_STATE_RUNNING));
}

TEST_F(HealthTest, JobsOnAFailedGpuFollowTheirRestartPolicy) {
  std::string never = Submit(1);
  std::string restart = Submit(1, "on-failure");
  ASSERT_TRUE(WaitForState(never, v1::JOB_STATE_RUNNING));
  ASSERT_TRUE(WaitForState(restart, v1::JOB_STATE_RUNNING));
  int never_gpu = GetJob(up_->jobs(), never).status().allocation().gpu_indices(0);
  int restart_gpu = GetJob(up_->jobs(), restart).status().allocation().gpu_indices(0);
  ASSERT_NE(never_gpu, restart_gpu);

  // An application XID leaves the GPU and its job alone.
  ASSERT_TRUE(Fault(never_gpu, "xid:13").ok());
  ASSERT_TRUE(WaitUntil([&] { return Gpu(never_gpu).telemetry().last_xid() == 13; }));
  EXPECT_EQ(Gpu(never_gpu).health(), v1::GPU_HEALTH_HEALTHY);
  EXPECT_EQ(GetJob(up_->jobs(), never).status().state(), v1::JOB_STATE_RUNNING);

  // A critical one fails the job that may not restart...
  ASSERT_TRUE(Fault(never_gpu, "xid:79").ok());
  ASSERT_TRUE(WaitForState(never, v1::JOB_STATE_FAILED));
  v1::Job failed = GetJob(up_->jobs(), never);
  EXPECT_NE(failed.status().message().find("xid 79"), std::string::npos) << failed.status().message();
  EXPECT_NE(failed.status().message().find("became unhealthy"), std::string::npos) << failed.status().message();

  // ... and requeues the one that may; it runs again once a GPU is healthy.
  ASSERT_TRUE(Fault(restart_gpu, "ecc").ok());
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), restart).status().restarts() == 1; }));
  ASSERT_TRUE(WaitForState(restart, v1::JOB_STATE_RUNNING));
  v1::Job again = GetJob(up_->jobs(), restart);
  EXPECT_EQ(again.status().restarts(), 1);
  EXPECT_EQ(again.status().preemptions(), 0);
  // Both GPUs healed after their clean checks.
  ASSERT_TRUE(WaitUntil(
      [&] { return Gpu(0).health() == v1::GPU_HEALTH_HEALTHY && Gpu(1).health() == v1::GPU_HEALTH_HEALTHY; }));
}

TEST_F(HealthTest, FaultsAreValidated) {
  EXPECT_EQ(Fault(0, "melt").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Fault(7, "xid").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::InjectFaultRequest req;
  req.set_node("nope");
  req.set_fault("xid");
  v1::InjectFaultResponse resp;
  EXPECT_EQ(up_->nodes()->InjectFault(Ctx().get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  // Nothing changed.
  EXPECT_EQ(Gpu(0).health(), v1::GPU_HEALTH_HEALTHY);
}

}  // namespace
}  // namespace drover::testing
