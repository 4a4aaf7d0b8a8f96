// Tenants as data and their quotas: stored records that survive a restart,
// GPUs per model (the job waits, with the reason), pending jobs and GPUs
// per user (refused at submission), a GPU-hour budget (refused once spent)
// and the runtime limit (the job is stopped and ends FAILED, whatever its
// restart policy).

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

class ControlLoopTenantsTest : public ControlLoopTest {
 protected:
  v1::Tenant Tenant(const std::string& name) {
    v1::Tenant t;
    t.set_name(name);
    t.set_weight(1);
    t.set_borrow_limit(-1);
    return t;
  }
  v1::Job SubmitAs(const std::string& tenant, int gpus, const std::string& owner = "someone") {
    v1::JobSpec spec = Spec(gpus);
    spec.set_tenant(tenant);
    spec.set_owner(owner);
    return Must(loop_->Submit(spec));
  }
  Status SubmitFails(const std::string& tenant, int gpus, const std::string& owner = "someone") {
    v1::JobSpec spec = Spec(gpus);
    spec.set_tenant(tenant);
    spec.set_owner(owner);
    return Fails(loop_->Submit(spec));
  }
};

TEST_F(ControlLoopTenantsTest, TenantsAreStoredChangedAndDeleted) {
  v1::Tenant a = Tenant("team-a");
  a.set_weight(2);
  (*a.mutable_quota()->mutable_max_gpus())["H100 80GB"] = 2;
  a.mutable_quota()->set_max_runtime_seconds(3600);
  Must(loop_->SetTenant(a, /*create=*/true));
  EXPECT_EQ(Fails(loop_->SetTenant(a, true)).code(), Code::kAlreadyExists);
  EXPECT_EQ(Fails(loop_->SetTenant(Tenant("nobody"), false)).code(), Code::kNotFound);
  v1::Tenant bad = Tenant("team-b");
  bad.set_weight(-1);
  EXPECT_EQ(Fails(loop_->SetTenant(bad, true)).code(), Code::kInvalidArgument);
  bad = Tenant("Bad Name");
  EXPECT_EQ(Fails(loop_->SetTenant(bad, true)).code(), Code::kInvalidArgument);

  Restart();
  v1::ListTenantsResponse r = Must(loop_->ListTenants());
  ASSERT_EQ(r.tenants_size(), 1);
  EXPECT_EQ(r.tenants(0).name(), "team-a");
  EXPECT_TRUE(r.tenants(0).stored());
  EXPECT_EQ(r.tenants(0).weight(), 2);
  EXPECT_EQ(r.tenants(0).quota().max_gpus().at("H100 80GB"), 2);
  EXPECT_EQ(r.tenants(0).quota().max_runtime_seconds(), 3600);

  a.set_weight(5);
  Must(loop_->SetTenant(a, false));
  Connect("gpu-01", 2);
  v1::Job j = SubmitAs("team-a", 1);
  EXPECT_EQ(Fails(loop_->DeleteTenant("team-a")).code(), Code::kFailedPrecondition);  // has an unfinished job
  Must(loop_->Cancel(j.id()));
  Report("gpu-01", j.id(), v1::WORKLOAD_STATE_EXITED, 0, 15);
  Must(loop_->DeleteTenant("team-a"));
  Restart();
  v1::ListTenantsResponse after = Must(loop_->ListTenants());
  for (const v1::TenantStatus& t : after.tenants()) EXPECT_FALSE(t.stored()) << t.name();
}

TEST_F(ControlLoopTenantsTest, GpusPerModelQuotaMakesAJobWaitWithTheReason) {
  v1::Tenant a = Tenant("team-a");
  (*a.mutable_quota()->mutable_max_gpus())["H100 80GB"] = 2;
  Must(loop_->SetTenant(a, true));
  Connect("gpu-01", 4);
  v1::Job first = SubmitAs("team-a", 2);
  EXPECT_EQ(StateOf(first.id()), v1::JOB_STATE_BOUND);
  v1::Job second = SubmitAs("team-a", 1);
  v1::Job other = SubmitAs("team-b", 1);
  EXPECT_EQ(StateOf(other.id()), v1::JOB_STATE_BOUND);  // free GPUs exist: only the quota holds `second`
  v1::Job waiting = Get(second.id());
  EXPECT_EQ(waiting.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(waiting.status().message().find("at its quota"), std::string::npos) << waiting.status().message();
  // A cap on all models together works the same way.
  a.mutable_quota()->clear_max_gpus();
  (*a.mutable_quota()->mutable_max_gpus())["*"] = 3;
  Must(loop_->SetTenant(a, false));
  Report("gpu-01", first.id(), v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", first.id(), v1::WORKLOAD_STATE_EXITED);
  EXPECT_EQ(StateOf(second.id()), v1::JOB_STATE_BOUND);
  v1::Job third = SubmitAs("team-a", 1);
  EXPECT_EQ(StateOf(third.id()), v1::JOB_STATE_BOUND);  // 2 of 3
  v1::Job fourth = SubmitAs("team-a", 2);
  EXPECT_EQ(StateOf(fourth.id()), v1::JOB_STATE_PENDING);  // would be 4 of 3
}

TEST_F(ControlLoopTenantsTest, GpuMemoryQuota) {
  v1::Tenant a = Tenant("team-a");
  a.mutable_quota()->set_max_gpu_memory_bytes(100LL << 30);  // one 80 GB GPU fits, two do not
  Must(loop_->SetTenant(a, true));
  Connect("gpu-01", 4);
  v1::Job one = SubmitAs("team-a", 1);
  EXPECT_EQ(StateOf(one.id()), v1::JOB_STATE_BOUND);
  v1::Job two = SubmitAs("team-a", 1);
  EXPECT_EQ(StateOf(two.id()), v1::JOB_STATE_PENDING);
  EXPECT_NE(Get(two.id()).status().message().find("GPU memory"), std::string::npos) << Get(two.id()).status().message();
}

TEST_F(ControlLoopTenantsTest, PendingJobsAndGpusPerUserAreRefusedAtSubmission) {
  v1::Tenant a = Tenant("team-a");
  a.mutable_quota()->set_max_pending_jobs(1);
  a.mutable_quota()->set_max_gpus_per_user(2);
  Must(loop_->SetTenant(a, true));
  Connect("gpu-01", 1);
  SubmitAs("team-a", 1, "alice");  // runs
  SubmitAs("team-a", 1, "bob");    // pending: the node has one GPU
  Status full = SubmitFails("team-a", 1, "carol");
  EXPECT_EQ(full.code(), Code::kResourceExhausted);
  EXPECT_NE(full.message().find("pending jobs"), std::string::npos) << full.message();

  a.mutable_quota()->set_max_pending_jobs(0);
  Must(loop_->SetTenant(a, false));
  SubmitAs("team-a", 1, "alice");  // alice: 2 GPUs held or queued
  Status over = SubmitFails("team-a", 1, "alice");
  EXPECT_EQ(over.code(), Code::kResourceExhausted);
  EXPECT_NE(over.message().find("user 'alice'"), std::string::npos) << over.message();
  SubmitAs("team-a", 1, "bob");  // bob is under his own limit
  size_t jobs = Jobs().size();
  EXPECT_EQ(jobs, 4u);  // refused submissions stored nothing
}

TEST_F(ControlLoopTenantsTest, GpuHourBudgetStopsNewWorkWhenSpent) {
  v1::Tenant a = Tenant("team-a");
  a.mutable_quota()->set_gpu_hours(0.01);        // 36 GPU-seconds
  a.mutable_quota()->set_period_seconds(86400);  // a day
  Must(loop_->SetTenant(a, true));
  Connect("gpu-01", 4);
  v1::Job j = SubmitAs("team-a", 2);
  Report("gpu-01", j.id(), v1::WORKLOAD_STATE_RUNNING);
  clock_.Advance(std::chrono::seconds(10));  // 20 GPU-seconds: still within the budget
  SubmitAs("team-b", 1);
  v1::Job k = SubmitAs("team-a", 1);
  clock_.Advance(std::chrono::seconds(10));  // 40 GPU-seconds and more: spent
  Status spent = SubmitFails("team-a", 1);
  EXPECT_EQ(spent.code(), Code::kResourceExhausted);
  EXPECT_NE(spent.message().find("budget"), std::string::npos) << spent.message();
  SubmitAs("team-b", 1);  // other tenants are not affected
  v1::ListTenantsResponse r = Must(loop_->ListTenants());
  for (const v1::TenantStatus& t : r.tenants()) {
    if (t.name() == "team-a") {
      EXPECT_GE(t.gpu_hours_used(), 0.01);
    }
  }
  (void)k;
}

TEST_F(ControlLoopTenantsTest, RuntimeLimitStopsTheJobAndItEndsFailedWithTheReason) {
  v1::Tenant a = Tenant("team-a");
  a.mutable_quota()->set_max_runtime_seconds(60);
  Must(loop_->SetTenant(a, true));
  auto sink = Connect("gpu-01", 2);
  v1::JobSpec spec = Spec(1);
  spec.set_tenant("team-a");
  spec.set_restart_policy("on-failure");  // a restart cannot help: it still fails
  spec.set_max_restarts(3);
  v1::Job j = Must(loop_->Submit(spec));
  v1::Job free_job = SubmitAs("team-b", 1);
  Report("gpu-01", j.id(), v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", free_job.id(), v1::WORKLOAD_STATE_RUNNING);
  clock_.Advance(std::chrono::seconds(59));
  Must(loop_->CheckLimits());
  EXPECT_EQ(StateOf(j.id()), v1::JOB_STATE_RUNNING);
  size_t from = sink->count();
  clock_.Advance(std::chrono::seconds(2));
  Must(loop_->CheckLimits());
  EXPECT_EQ(StateOf(j.id()), v1::JOB_STATE_PREEMPTING);
  EXPECT_EQ(StateOf(free_job.id()), v1::JOB_STATE_RUNNING);  // no limit for team-b
  auto stop = sink->WaitFor(from, [&](const v1::DesiredWorkloads& d) {
    return std::any_of(d.stops().begin(), d.stops().end(), [&](const v1::Stop& s) { return s.job_id() == j.id(); });
  });
  ASSERT_TRUE(stop.has_value()) << "the agent was not told to stop the job";
  Report("gpu-01", j.id(), v1::WORKLOAD_STATE_EXITED, 0, 15);
  v1::Job ended = Get(j.id());
  EXPECT_EQ(ended.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(ended.status().message().find("runtime limit of 60s"), std::string::npos) << ended.status().message();
  EXPECT_EQ(ended.status().restarts(), 0);
}

}  // namespace
}  // namespace drover::server::testing
