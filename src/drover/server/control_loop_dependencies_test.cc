// Job dependencies, CPU-only work and per-job time limits, as the control
// loop runs them: a job waits for the jobs it names (with the reason), runs
// once they ended as asked, ends FAILED with the reason when one did not,
// keeps its wait over a restart; bad dependencies are refused at submit;
// a --gpus 0 job is placed by CPU alone and held back by its tenant's CPU
// quota; a time limit stops a job with the reason.

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

class ControlLoopDependenciesTest : public ControlLoopTest {
 protected:
  static v1::JobSpec After(int gpus, const std::string& dep, const std::string& condition = "") {
    v1::JobSpec spec = Spec(gpus);
    v1::JobDependency* d = spec.add_after();
    d->set_job_id(dep);
    d->set_condition(condition);
    EXPECT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
    return spec;
  }
  static v1::JobSpec CpuOnly(int64_t cpu_millis, const std::string& tenant = "default") {
    v1::JobSpec spec;
    spec.set_gpus(0);
    spec.set_cpu_millis(cpu_millis);
    spec.set_tenant(tenant);
    spec.add_command("true");
    Status normalized = rpc::NormalizeJobSpec(&spec);
    EXPECT_TRUE(normalized.ok()) << normalized.ToString();
    return spec;
  }
  // Runs a bound job to its end on `node`.
  void RunToEnd(const std::string& node, const std::string& id, int exit_code) {
    Report(node, id, v1::WORKLOAD_STATE_RUNNING);
    Report(node, id, v1::WORKLOAD_STATE_EXITED, exit_code);
  }
};

TEST_F(ControlLoopDependenciesTest, AJobWaitsWithTheReasonAndRunsOnceItsDependencySucceeded) {
  Connect("gpu-01", 2);
  v1::Job first = Submit(1);
  v1::Job second = Must(loop_->Submit(After(1, first.id())));
  // A GPU is free: only the dependency holds it back.
  v1::Job waiting = Get(second.id());
  EXPECT_EQ(waiting.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(waiting.status().message(), "waiting for " + first.id() + " to end") << waiting.status().message();
  EXPECT_EQ(waiting.status().wait_class(), "dependency");
  RunToEnd("gpu-01", first.id(), 0);
  EXPECT_EQ(StateOf(first.id()), v1::JOB_STATE_SUCCEEDED);
  v1::Job bound = Get(second.id());
  EXPECT_EQ(bound.status().state(), v1::JOB_STATE_BOUND) << bound.status().message();
  ASSERT_EQ(bound.after_met_size(), 1);
  EXPECT_EQ(bound.after_met(0), first.id());
}

TEST_F(ControlLoopDependenciesTest, AFailedDependencyEndsItsWaitersWithTheReasonAndAnyCarriesOn) {
  Connect("gpu-01", 2);
  v1::Job first = Submit(1);
  v1::Job ok = Must(loop_->Submit(After(1, first.id())));
  v1::Job any = Must(loop_->Submit(After(1, first.id(), "any")));
  v1::Job chained = Must(loop_->Submit(After(1, ok.id())));  // waits for a job that will never run
  RunToEnd("gpu-01", first.id(), 3);
  EXPECT_EQ(StateOf(first.id()), v1::JOB_STATE_FAILED);
  v1::Job failed = Get(ok.id());
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(failed.status().message(), "dependency " + first.id() + " failed");
  EXPECT_EQ(failed.status().attempts_size(), 0);  // it never ran
  v1::Job chain = Get(chained.id());
  EXPECT_EQ(chain.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(chain.status().message(), "dependency " + ok.id() + " failed");
  EXPECT_EQ(StateOf(any.id()), v1::JOB_STATE_BOUND);

  // A cancelled dependency says so.
  v1::Job pending_dep = Submit(2);  // waits for the GPUs `any` holds
  v1::Job waiter = Must(loop_->Submit(After(1, pending_dep.id())));
  Must(loop_->Cancel(pending_dep.id()));
  v1::Job cancelled = Get(waiter.id());
  EXPECT_EQ(cancelled.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(cancelled.status().message(), "dependency " + pending_dep.id() + " was cancelled");
  // A waiting job may be cancelled itself.
  v1::Job blocker = Submit(2);
  v1::Job doomed = Must(loop_->Submit(After(1, blocker.id())));
  Must(loop_->Cancel(doomed.id()));
  EXPECT_EQ(StateOf(doomed.id()), v1::JOB_STATE_CANCELLED);
}

TEST_F(ControlLoopDependenciesTest, BadDependenciesAreRefusedAtSubmit) {
  Connect("gpu-01", 1);
  v1::Job mine = Submit(1);
  v1::JobSpec theirs_spec = Spec(1);
  theirs_spec.set_tenant("team-b");
  v1::Job theirs = Must(loop_->Submit(theirs_spec));

  Status unknown = Fails(loop_->Submit(After(1, "j-000099")));
  EXPECT_EQ(unknown.code(), Code::kNotFound) << unknown.ToString();
  Status other_tenant = Fails(loop_->Submit(After(1, theirs.id())));  // as for any read of it
  EXPECT_EQ(other_tenant.code(), Code::kNotFound) << other_tenant.ToString();
  EXPECT_NE(other_tenant.message().find("not found"), std::string::npos);
  Status itself = Fails(loop_->Submit(After(1, FormatJobId(3))));  // the id it would get
  EXPECT_EQ(itself.code(), Code::kInvalidArgument) << itself.ToString();
  EXPECT_NE(itself.message().find("itself"), std::string::npos) << itself.message();
  // Two jobs of one submit that wait for each other: a cycle.
  Status cycle = Fails(loop_->SubmitBatch({After(1, FormatJobId(4)), After(1, FormatJobId(3))}));
  EXPECT_EQ(cycle.code(), Code::kInvalidArgument) << cycle.ToString();
  EXPECT_NE(cycle.message().find("cycle"), std::string::npos) << cycle.message();
  // Nothing was stored: the next job gets the next id.
  EXPECT_EQ(Must(loop_->Submit(After(1, mine.id()))).id(), FormatJobId(3));

  // The spec's own checks (NormalizeJobSpec).
  v1::JobSpec bad = Spec(1);
  bad.add_after()->set_job_id("nonsense");
  EXPECT_EQ(rpc::NormalizeJobSpec(&bad).code(), Code::kInvalidArgument);
  bad = Spec(1);
  v1::JobDependency* d = bad.add_after();
  d->set_job_id(mine.id());
  d->set_condition("sometimes");
  EXPECT_EQ(rpc::NormalizeJobSpec(&bad).code(), Code::kInvalidArgument);
  bad = Spec(1);
  bad.add_after()->set_job_id(mine.id());
  bad.add_after()->set_job_id(mine.id());
  EXPECT_EQ(rpc::NormalizeJobSpec(&bad).code(), Code::kInvalidArgument);

  // A dependency that already failed cannot be met.
  RunToEnd("gpu-01", mine.id(), 1);
  Status failed = Fails(loop_->Submit(After(1, mine.id())));
  EXPECT_EQ(failed.code(), Code::kFailedPrecondition) << failed.ToString();
  // With "any", its end is enough: met at once.
  v1::Job met = Must(loop_->Submit(After(1, mine.id(), "any")));
  EXPECT_EQ(met.after_met_size(), 1);
}

TEST_F(ControlLoopDependenciesTest, TheWaitSurvivesARestart) {
  Connect("gpu-01", 1);
  v1::Job busy = Submit(1);
  v1::Job dep = Submit(1);  // waits for the GPU
  v1::Job any = Must(loop_->Submit(After(1, dep.id(), "any")));
  v1::Job ok = Must(loop_->Submit(After(1, dep.id())));
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_EQ(StateOf(busy.id()), v1::JOB_STATE_BOUND);
  v1::Job waiting = Get(ok.id());
  EXPECT_EQ(waiting.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(waiting.status().wait_class(), "dependency");
  EXPECT_EQ(waiting.status().message(), "waiting for " + dep.id() + " to end");
  Must(loop_->Cancel(dep.id()));
  EXPECT_EQ(Get(ok.id()).status().message(), "dependency " + dep.id() + " was cancelled");
  v1::Job queued = Get(any.id());
  EXPECT_EQ(queued.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_NE(queued.status().wait_class(), "dependency") << queued.status().message();
  // What was met stays met.
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_NE(Get(any.id()).status().wait_class(), "dependency");
  EXPECT_EQ(StateOf(ok.id()), v1::JOB_STATE_FAILED);
}

TEST_F(ControlLoopDependenciesTest, AnArrayWaitsForItsDependencyAsAWhole) {
  Connect("gpu-01", 4);
  v1::Job first = Submit(1);
  v1::ArraySpec array;
  array.set_first(1);
  array.set_last(3);
  array.set_max_running(2);
  v1::SubmitJobResponse r = Must(loop_->SubmitArray(After(1, first.id()), array));
  EXPECT_EQ(r.job().status().wait_class(), "dependency");
  RunToEnd("gpu-01", first.id(), 0);
  int bound = 0;
  for (const v1::Job& j : Jobs()) {
    if (j.array().array_id() == r.array_id() && j.status().state() == v1::JOB_STATE_BOUND) ++bound;
  }
  EXPECT_EQ(bound, 2);  // then its own limit holds the third back
}

TEST_F(ControlLoopDependenciesTest, ACpuOnlyJobIsPlacedOnANodeWhoseGpusAreAllBusy) {
  auto sink = Connect("gpu-01", 2);
  v1::Job gpus = Submit(2);
  EXPECT_EQ(StateOf(gpus.id()), v1::JOB_STATE_BOUND);
  size_t from = sink->count();
  v1::Job cpu = Must(loop_->Submit(CpuOnly(4000)));
  v1::Job bound = Get(cpu.id());
  EXPECT_EQ(bound.status().state(), v1::JOB_STATE_BOUND) << bound.status().message();
  EXPECT_EQ(bound.status().allocation().node(), "gpu-01");
  EXPECT_EQ(bound.status().allocation().gpu_indices_size(), 0);
  auto desired = sink->WaitForJob(from, cpu.id());
  ASSERT_TRUE(desired.has_value());
  for (const v1::Workload& w : desired->workloads()) {
    if (w.job_id() == cpu.id()) {
      EXPECT_EQ(w.gpu_indices_size(), 0);
    }
  }
  // Without CPUs asked, one; GPU fields make no sense without GPUs.
  v1::JobSpec spec;
  spec.set_gpus(0);
  spec.add_command("true");
  ASSERT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
  EXPECT_EQ(spec.cpu_millis(), rpc::kDefaultCpuOnlyMillis);
  spec.set_gpu_model("H100 80GB");
  EXPECT_EQ(rpc::NormalizeJobSpec(&spec).code(), Code::kInvalidArgument);
  spec.clear_gpu_model();
  spec.set_gpus(-1);
  EXPECT_EQ(rpc::NormalizeJobSpec(&spec).code(), Code::kInvalidArgument);
}

TEST_F(ControlLoopDependenciesTest, ACpuQuotaHoldsTheTenantsCpuOnlyJobsBack) {
  v1::Tenant t;
  t.set_name("team-a");
  t.set_weight(1);
  t.set_borrow_limit(-1);
  t.mutable_quota()->set_max_cpu_millis(3000);
  Must(loop_->SetTenant(t, /*create=*/true));
  t.mutable_quota()->set_max_cpu_millis(-1);
  EXPECT_EQ(Fails(loop_->SetTenant(t, false)).code(), Code::kInvalidArgument);
  Connect("gpu-01", 1);
  v1::Job first = Must(loop_->Submit(CpuOnly(2000, "team-a")));
  EXPECT_EQ(StateOf(first.id()), v1::JOB_STATE_BOUND);
  v1::Job second = Must(loop_->Submit(CpuOnly(2000, "team-a")));
  v1::Job other = Must(loop_->Submit(CpuOnly(2000, "team-b")));
  EXPECT_EQ(StateOf(other.id()), v1::JOB_STATE_BOUND);  // CPUs are free: only the quota holds `second`
  v1::Job held = Get(second.id());
  EXPECT_EQ(held.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(held.status().wait_class(), "quota");
  EXPECT_NE(held.status().message().find("3 CPUs (holds 2)"), std::string::npos) << held.status().message();
  RunToEnd("gpu-01", first.id(), 0);
  EXPECT_EQ(StateOf(second.id()), v1::JOB_STATE_BOUND);
}

TEST_F(ControlLoopDependenciesTest, ATimeLimitStopsTheJobWithTheReasonAndTheShorterLimitWins) {
  v1::Tenant t;
  t.set_name("team-a");
  t.set_weight(1);
  t.set_borrow_limit(-1);
  t.mutable_quota()->set_max_runtime_seconds(3600);
  Must(loop_->SetTenant(t, /*create=*/true));
  Connect("gpu-01", 2);
  v1::JobSpec spec = Spec(1);
  spec.set_time_limit_seconds(90);
  v1::Job own = Must(loop_->Submit(spec));
  spec.set_tenant("team-a");
  spec.set_time_limit_seconds(4 * 3600);  // longer than its tenant's hour
  v1::Job tenant = Must(loop_->Submit(spec));
  Report("gpu-01", own.id(), v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", tenant.id(), v1::WORKLOAD_STATE_RUNNING);
  clock_.Advance(std::chrono::seconds(89));
  Must(loop_->CheckLimits());
  EXPECT_EQ(StateOf(own.id()), v1::JOB_STATE_RUNNING);
  clock_.Advance(std::chrono::seconds(2));
  Must(loop_->CheckLimits());
  EXPECT_EQ(StateOf(own.id()), v1::JOB_STATE_PREEMPTING);
  Report("gpu-01", own.id(), v1::WORKLOAD_STATE_EXITED, 0, 15);
  v1::Job ended = Get(own.id());
  EXPECT_EQ(ended.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(ended.status().message(), "time limit 90s reached");
  clock_.Advance(std::chrono::seconds(3600));
  Must(loop_->CheckLimits());
  EXPECT_EQ(StateOf(tenant.id()), v1::JOB_STATE_PREEMPTING);
  Report("gpu-01", tenant.id(), v1::WORKLOAD_STATE_EXITED, 0, 15);
  EXPECT_NE(Get(tenant.id()).status().message().find("runtime limit of 3600s"), std::string::npos);
}

}  // namespace
}  // namespace drover::server::testing
