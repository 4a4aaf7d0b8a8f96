// What dashboards read from the control loop: the fleet, scheduler
// statistics, tenants against their fair share, a GPU's recent readings.

#include <gmock/gmock.h>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ControlLoopViewsTest : public ControlLoopTest {
 protected:
  void SetUp() override {
    options_.metrics = &registry_;
    ControlLoopTest::SetUp();
  }
  metrics::Registry registry_;
};

TEST_F(ControlLoopViewsTest, FleetHasEveryGpuWithItsReadingAndJob) {
  Connect("gpu-01", 2);
  Register("gpu-02", 1);
  loop_->Heartbeat("gpu-01", Reading(2, 40, 1));
  v1::Job job = Submit(1);
  v1::Fleet fleet = Must(loop_->Fleet());
  ASSERT_EQ(fleet.nodes_size(), 2);
  const v1::FleetNode& n = fleet.nodes(0);
  EXPECT_EQ(n.name(), "gpu-01");
  EXPECT_EQ(n.state(), v1::NODE_STATE_READY);
  ASSERT_EQ(n.gpus_size(), 2);
  EXPECT_FLOAT_EQ(n.gpus(1).temperature_c(), 41);
  EXPECT_FLOAT_EQ(n.gpus(0).utilization_pct(), 50);
  EXPECT_EQ(n.gpus(0).memory_used_bytes(), -1);  // not reported
  EXPECT_EQ(n.gpus(0).memory_total_bytes(), int64_t{80} << 30);
  EXPECT_TRUE(n.gpus(0).healthy());
  EXPECT_EQ(n.gpus(0).job_id() + n.gpus(1).job_id(), job.id());
  EXPECT_EQ(fleet.nodes(1).state(), v1::NODE_STATE_NOT_READY);
  EXPECT_EQ(fleet.nodes(1).gpus(0).temperature_c(), -1);
  EXPECT_EQ(fleet.jobs().at("Bound"), 1);
  EXPECT_EQ(fleet.jobs().at("Failed"), 0);
  EXPECT_EQ(fleet.queue_depth(), 0);
}

TEST_F(ControlLoopViewsTest, SchedulerStatsCountDecisionsAndQueue) {
  Connect("gpu-01", 1);
  Submit(1);
  Submit(1);  // waits
  v1::SchedulerStats s = Must(loop_->SchedulerStats());
  EXPECT_EQ(s.decisions_total(), 1);
  EXPECT_EQ(s.preemptions_total(), 0);
  EXPECT_EQ(s.queue_depth(), 1);
  ASSERT_GE(s.queue_history_size(), 1);
  int64_t counted = 0;
  for (const v1::LatencyBucket& b : s.decision_latency()) counted += b.count();
  // Two decisions in the histogram: the first job bound, the second told
  // to wait (once: nothing changed since, so no pass looked at it again).
  EXPECT_EQ(counted, 2);
  EXPECT_TRUE(s.decision_latency(s.decision_latency_size() - 1).inf());
  // A point every 5 s of the loop's clock.
  clock_.Advance(std::chrono::seconds(6));
  v1::SchedulerStats later = Must(loop_->SchedulerStats());
  EXPECT_EQ(later.queue_history_size(), s.queue_history_size() + 1);
  EXPECT_EQ(later.queue_history(later.queue_history_size() - 1).depth(), 1);
  EXPECT_EQ(later.queue_history(later.queue_history_size() - 1).running(), 1);
}

TEST_F(ControlLoopViewsTest, TenantsShareTheHealthyGpusByWeight) {
  options_.tenants = {{"a", 3.0, {{"H100 80GB", 2}}, -1}, {"b", 1.0, {}, 1}, {"idle", 1.0, {}, -1}};
  Restart();
  Connect("gpu-01", 4);
  v1::JobSpec a = Spec(1);
  a.set_tenant("a");
  Must(loop_->Submit(a));
  v1::JobSpec b = Spec(1);
  b.set_tenant("b");
  Must(loop_->Submit(b));
  v1::ListTenantsResponse r = Must(loop_->ListTenants());
  ASSERT_EQ(r.tenants_size(), 3);
  const v1::TenantStatus& ta = r.tenants(0);
  EXPECT_EQ(ta.name(), "a");
  EXPECT_EQ(ta.usage_milli(), 1000);
  EXPECT_EQ(ta.fair_share_milli(), 3000);  // 4 GPUs, weights 3:1 among tenants with work
  EXPECT_EQ(ta.guaranteed_gpus().at("H100 80GB"), 2);
  EXPECT_EQ(ta.running_jobs(), 1);
  EXPECT_EQ(r.tenants(1).fair_share_milli(), 1000);
  EXPECT_EQ(r.tenants(1).borrow_limit(), 1);
  EXPECT_EQ(r.tenants(2).name(), "idle");
  EXPECT_EQ(r.tenants(2).fair_share_milli(), 0);
}

TEST_F(ControlLoopViewsTest, GpuHistoryKeepsTheHeartbeatsInOrder) {
  constexpr int64_t kStep = 2'000'000'000;  // one point per 2 s
  Connect("gpu-01", 2);
  for (int i = 1; i <= 3; ++i) loop_->Heartbeat("gpu-01", Reading(2, 40 + i, i * kStep));
  // A reading 1 s after the last point adds none.
  loop_->Heartbeat("gpu-01", Reading(2, 99, 3 * kStep + kStep / 2));
  Must(loop_->Barrier());  // heartbeats are not answered: wait until they are applied
  v1::GpuHistory h = Must(loop_->GpuHistory("gpu-01", 1));
  ASSERT_EQ(h.points_size(), 3);
  EXPECT_EQ(h.points(0).time_unix_nanos(), kStep);
  EXPECT_FLOAT_EQ(h.points(2).temperature_c(), 44);
  EXPECT_EQ(h.points(2).memory_used_bytes(), -1);
  EXPECT_EQ(Fails(loop_->GpuHistory("gpu-01", 2)).code(), Code::kNotFound);
  EXPECT_THAT(Fails(loop_->GpuHistory("nope", 0)).message(), HasSubstr("not registered"));
  for (int i = 4; i <= 400; ++i) loop_->Heartbeat("gpu-01", Reading(2, 40, i * kStep));
  Must(loop_->Barrier());
  h = Must(loop_->GpuHistory("gpu-01", 0));
  EXPECT_EQ(h.points_size(), 300);  // ten minutes
  EXPECT_EQ(h.points(299).time_unix_nanos(), 400 * kStep);
}

// A pending job says why it waits as a class (JobStatus.wait_class, what
// the alert rules group by) beside the words; a batch that wrote is timed.
TEST_F(ControlLoopViewsTest, PendingJobHasItsWaitClassAndCommitsAreTimed) {
  Connect("gpu-01", 1);
  v1::Job running = Submit(1);
  v1::Job waiting = Submit(1);
  Must(loop_->Barrier());
  EXPECT_EQ(Get(running.id()).status().wait_class(), "");
  v1::Job w = Get(waiting.id());
  ASSERT_EQ(w.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(w.status().wait_class(), "no_fit") << w.status().message();
  const std::string text = registry_.Render();
  EXPECT_THAT(text, HasSubstr("drover_store_commit_duration_seconds_count "));
  EXPECT_THAT(text, Not(HasSubstr("drover_store_commit_duration_seconds_count 0\n")));
  EXPECT_THAT(text, HasSubstr("drover_store_commit_failures_total 0\n"));
}

}  // namespace
}  // namespace drover::server::testing
