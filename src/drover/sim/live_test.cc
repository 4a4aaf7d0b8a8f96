#include "drover/sim/live.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "drover/common/ids.h"
#include "drover/sim/engine.h"

namespace drover::sim {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<LiveJob> Take(LivePlan& plan, size_t n) {
  std::vector<LiveJob> out;
  for (size_t i = 0; i < n; ++i) {
    auto j = plan.Next();
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (!j.ok()) break;
    out.push_back(std::move(*j));
  }
  return out;
}

// Every job up to wall time `until_ms`.
std::vector<LiveJob> Until(LivePlan& plan, int64_t until_ms) {
  std::vector<LiveJob> out;
  while (true) {
    auto j = plan.Next();
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (!j.ok() || j->at_ms >= until_ms) break;
    out.push_back(std::move(*j));
  }
  return out;
}

LivePlan MakePlan(LiveCluster c, LiveMixOptions o = {}) {
  auto p = LivePlan::Make(c, o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

TEST(LiveWorkloadKind, KnowsMixedAndNone) {
  EXPECT_EQ(*ParseLiveWorkloadKind("mixed"), LiveWorkloadKind::kMixed);
  EXPECT_EQ(*ParseLiveWorkloadKind("none"), LiveWorkloadKind::kNone);
  auto bad = ParseLiveWorkloadKind("mix");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("workload 'mix' is unknown (use mixed or none)"));
}

TEST(FitsLiveCluster, ChecksShapeAgainstNodes) {
  LiveCluster c{2, 8, 80 * kGiB};
  sched::JobRequest r;
  r.gpus = 8;
  EXPECT_TRUE(FitsLiveCluster(r, c));
  r.gpus = 9;
  EXPECT_FALSE(FitsLiveCluster(r, c));
  r.gpus = 8;
  r.replicas = 2;
  EXPECT_TRUE(FitsLiveCluster(r, c));
  r.replicas = 3;
  EXPECT_FALSE(FitsLiveCluster(r, c));
  sched::JobRequest share;
  share.gpu_milli = 250;
  EXPECT_FALSE(FitsLiveCluster(share, c)) << "a share must reserve memory";
  share.gpu_memory_bytes = 20 * kGiB;
  EXPECT_TRUE(FitsLiveCluster(share, c));
  share.gpu_memory_bytes = 81 * kGiB;
  EXPECT_FALSE(FitsLiveCluster(share, c));
  sched::JobRequest cpu;
  cpu.gpus = 0;
  EXPECT_FALSE(FitsLiveCluster(cpu, c));
}

TEST(LivePlan, RefusesBadClustersAndOptions) {
  EXPECT_THAT(LivePlan::Make({4, 0, 0}, {}).status().message(), HasSubstr("needs GPUs"));
  EXPECT_EQ(LivePlan::Make({0, 8, 0}, {}).status().code(), Code::kInvalidArgument);
  EXPECT_THAT(LivePlan::Make({4, 8, 0}, {0, 1.3, 1}).status().message(), HasSubstr("time scale 0"));
  LiveMixOptions nan;
  nan.target_load = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(LivePlan::Make({4, 8, 0}, nan).status().message(), HasSubstr("target load"));
}

TEST(LivePlan, SameSeedSameJobsOtherSeedOthers) {
  LiveCluster c{4, 8, 80 * kGiB};
  LivePlan a = MakePlan(c), b = MakePlan(c), other = MakePlan(c, {60, 1.3, 2});
  auto ja = Take(a, 500), jb = Take(b, 500), jo = Take(other, 500);
  ASSERT_EQ(ja.size(), 500u);
  int differ = 0;
  for (size_t i = 0; i < ja.size(); ++i) {
    EXPECT_EQ(ja[i].at_ms, jb[i].at_ms);
    EXPECT_EQ(ja[i].run_ms, jb[i].run_ms);
    EXPECT_EQ(ja[i].load, jb[i].load);
    EXPECT_EQ(ja[i].req.tenant, jb[i].req.tenant);
    EXPECT_EQ(ja[i].req.milli(), jb[i].req.milli());
    differ += ja[i].at_ms != jo[i].at_ms || ja[i].run_ms != jo[i].run_ms;
  }
  EXPECT_GT(differ, 400);
}

// The generator never makes a job that can never fit, whatever the cluster.
TEST(LivePlan, EveryJobFitsTheCluster) {
  const std::vector<LiveCluster> clusters = {{1, 1, 0}, {1, 8, 80 * kGiB}, {2, 2, 24 * kGiB},
                                             {3, 4, 0}, {4, 8, 80 * kGiB}, {2, 64, 192 * kGiB}};
  for (const LiveCluster& c : clusters) {
    SCOPED_TRACE(::testing::Message() << c.nodes << " x " << c.gpus_per_node << " GPUs, " << c.gpu_memory_bytes);
    LivePlan plan = MakePlan(c);
    int gangs = 0, shares = 0, widest = 0;
    int64_t last = 0;
    for (const LiveJob& j : Take(plan, 3000)) {
      ASSERT_TRUE(FitsLiveCluster(j.req, c)) << j.req.replicas << "x" << j.req.gpus << " milli " << j.req.gpu_milli;
      EXPECT_GE(j.at_ms, last);
      last = j.at_ms;
      EXPECT_GE(j.run_ms, 1000);
      EXPECT_LE(j.run_ms, 12 * 60'000);  // 12h at 60x
      EXPECT_GE(j.estimate_ms, 1000);
      EXPECT_GE(j.load, 0.3);
      EXPECT_LE(j.load, 1.0);
      gangs += j.req.replicas > 1;
      if (j.req.fractional()) {
        ++shares;
        EXPECT_EQ(j.req.gpu_memory_bytes, c.gpu_memory_bytes * j.req.gpu_milli / 1000);
      }
      widest = std::max(widest, j.req.gpus);
    }
    EXPECT_EQ(gangs > 0, c.nodes >= 2);
    EXPECT_EQ(shares > 0, c.gpu_memory_bytes > 0);
    EXPECT_EQ(widest, c.nodes >= 2 ? c.gpus_per_node : std::min(c.gpus_per_node, 8));
  }
}

TEST(LivePlan, TenantsCarryTheirPriorityAndPreemptibility) {
  LivePlan plan = MakePlan({4, 8, 80 * kGiB});
  std::map<std::string, int> jobs, preemptible;
  for (const LiveJob& j : Take(plan, 3000)) {
    ++jobs[j.req.tenant];
    preemptible[j.req.tenant] += j.req.preemptible;
    const std::map<std::string, int> kPriority = {{"prod", 100}, {"research", 50}, {"batch", 0}};
    ASSERT_TRUE(kPriority.contains(j.req.tenant)) << j.req.tenant;
    EXPECT_EQ(j.req.priority, kPriority.at(j.req.tenant));
  }
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(preemptible["prod"], 0);
  EXPECT_NEAR(preemptible["batch"], jobs["batch"] * 0.5, jobs["batch"] * 0.1);
  EXPECT_NEAR(preemptible["research"], jobs["research"] * 0.3, jobs["research"] * 0.1);
}

// Offered GPU demand, steady state: rate x GPUs x run time = target x capacity.
TEST(LivePlan, OffersTheTargetLoad) {
  for (double target : {0.5, 1.3}) {
    SCOPED_TRACE(target);
    const LiveCluster c{4, 8, 80 * kGiB};
    LivePlan plan = MakePlan(c, {60, target, 7});
    const int64_t from = 60'000, to = 600 * 60'000;  // after the warm-up's minute
    double gpu_ms = 0;
    int64_t n = 0;
    for (const LiveJob& j : Until(plan, to)) {
      if (j.at_ms < from) continue;
      gpu_ms += static_cast<double>(j.req.milli()) / 1000 * static_cast<double>(j.run_ms);
      ++n;
    }
    const double offered = gpu_ms / (static_cast<double>(to - from) * 32);
    EXPECT_NEAR(offered, target, 0.1 * target);
    EXPECT_NEAR(static_cast<double>(n) / 599, plan.jobs_per_minute(), 0.1 * plan.jobs_per_minute());
  }
}

// The warm-up fills the cluster in its first 20 s of wall time.
TEST(LivePlan, WarmsUpWithAboutOneClusterOfDemand) {
  const LiveCluster c{4, 8, 80 * kGiB};
  LivePlan plan = MakePlan(c);
  double gpus = 0;
  int64_t n = 0;
  for (const LiveJob& j : Until(plan, 20'000)) {
    gpus += static_cast<double>(j.req.milli()) / 1000;
    ++n;
  }
  EXPECT_GE(n, plan.warmup_jobs());
  EXPECT_GT(gpus, 0.6 * 32);
  EXPECT_LT(gpus, 2.0 * 32);
}

TEST(LivePlan, TimeScaleShortensRunTimes) {
  auto median_run = [](double scale) {
    LivePlan plan = MakePlan({4, 8, 80 * kGiB}, {scale, 1.3, 1});
    std::vector<int64_t> runs;
    for (const LiveJob& j : Take(plan, 2001)) runs.push_back(j.run_ms);
    std::nth_element(runs.begin(), runs.begin() + 1000, runs.end());
    return static_cast<double>(runs[1000]);
  };
  EXPECT_NEAR(median_run(60), 120'000, 15'000);  // 2h of simulated time
  EXPECT_NEAR(median_run(600), 12'000, 1'500);
}

// `nodes` x `gpus` H100s as the simulated nodes of `drover up` report them.
Cluster SimulatedCluster(int nodes, int gpus, const std::vector<sched::TenantInfo>& tenants) {
  Cluster c;
  c.name = "live";
  for (int i = 0; i < nodes; ++i) {
    sched::NodeInfo n;
    n.name = "sim-" + std::to_string(i + 1);
    for (int g = 0; g < gpus; ++g) n.gpus.push_back({g, "nvidia", "H100 80GB", 80 * kGiB, true, g < gpus / 2 ? 0 : 1});
    n.labels = {{"rack", "rack-" + std::to_string(i / 4 + 1)}, {"switch", "switch-" + std::to_string(i / 2 + 1)}};
    n.schedulable = true;
    c.nodes.push_back(std::move(n));
  }
  c.tenants = tenants;
  return c;
}

// The first `minutes` of the plan, in wall time (the server's scheduler
// runs on the wall clock too).
Workload WallWorkload(LivePlan& plan, int minutes) {
  Workload w;
  w.name = "live";
  for (LiveJob& j : Until(plan, int64_t{minutes} * 60'000)) {
    SimJob s;
    s.req = j.req;
    s.req.id = FormatJobId(w.jobs.size() + 1);
    s.req.gpu_model = "H100 80GB";
    s.req.runtime_estimate_ms = j.estimate_ms;
    s.submit_ms = j.at_ms;
    s.duration_ms = j.run_ms;
    w.jobs.push_back(std::move(s));
  }
  return w;
}

TEST(LiveScheduler, FairShareWithGuarantees) {
  LiveSchedulerSettings s = LiveScheduler({4, 8, 80 * kGiB}, "H100 80GB");
  EXPECT_EQ(s.config.queue, sched::QueuePolicy::kFairShare);
  EXPECT_TRUE(s.config.preemption);
  ASSERT_EQ(s.tenants.size(), 3u);
  EXPECT_EQ(s.tenants[0].name, "prod");
  EXPECT_EQ(s.tenants[0].guaranteed_gpus.at("H100 80GB"), 9);  // 30% of 32, rounded down
  EXPECT_EQ(s.tenants[1].name, "research");
  EXPECT_EQ(s.tenants[1].guaranteed_gpus.at("H100 80GB"), 9);
  EXPECT_EQ(s.tenants[2].name, "batch");
  EXPECT_TRUE(s.tenants[2].guaranteed_gpus.empty());
  // One GPU: 30% of it is no guarantee at all.
  EXPECT_TRUE(LiveScheduler({1, 1, 0}, "L4").tenants[0].guaranteed_gpus.empty());
}

// Half an hour of the live mix through the real scheduler with the
// proposed settings: the GPUs stay busy, jobs wait, preemptions happen, and
// every job is accepted and ends.
TEST(LiveScheduler, KeepsTheClusterBusyWithQueuesAndPreemptions) {
  const LiveCluster lc{4, 8, 80 * kGiB};
  LiveSchedulerSettings settings = LiveScheduler(lc, "H100 80GB");
  LivePlan plan = MakePlan(lc);
  Workload w = WallWorkload(plan, 30);
  EngineOptions o;
  o.config = settings.config;
  o.stop_delay_ms = 2'000;  // termination_grace_seconds
  o.tick_ms = 1'000;
  auto run = Simulate(SimulatedCluster(4, 8, settings.tenants), w, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const Summary& s = run->summary;
  EXPECT_EQ(s.rejected, 0);
  EXPECT_EQ(s.completed, s.jobs);
  EXPECT_GT(s.allocation_mean_pct, 75);
  EXPECT_GE(s.preemptions, 30);  // about two a minute
  EXPECT_GT(s.queue_delay_s.p95, 60);
  std::map<std::string, int> victims;
  for (size_t i = 0; i < run->records.size(); ++i) victims[run->jobs[i].req.tenant] += run->records[i].preemptions;
  EXPECT_EQ(victims["prod"], 0);
  EXPECT_GT(victims["batch"], 0);
}

TEST(ClampedLognormalMean, MatchesLimits) {
  EXPECT_DOUBLE_EQ(ClampedLognormalMean(100, 0, 1, 50), 50);
  EXPECT_NEAR(ClampedLognormalMean(100, 0.8, 1e-9, 1e12), 100 * std::exp(0.32), 1e-6);
  EXPECT_NEAR(ClampedLognormalMean(100, 0.8, 70, 70), 70, 1e-9);
  // Clamping from above lowers the mean, from below raises it.
  EXPECT_LT(ClampedLognormalMean(100, 0.8, 1, 150), 100 * std::exp(0.32));
  EXPECT_GT(ClampedLognormalMean(100, 0.8, 90, 1e12), 100 * std::exp(0.32));
}

}  // namespace
}  // namespace drover::sim
