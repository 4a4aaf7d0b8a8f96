#include "drover/server/scheduler_options.h"

#include <gtest/gtest.h>

namespace drover::server {
namespace {

TEST(SchedulerOptions, EveryKeyReachesTheSchedulerConfig) {
  SchedulerFlags f;
  f.queue_policy = "las";
  f.placement_policy = "spread";
  f.backfill = "false";
  f.preemption = "true";
  f.aging = "2m";
  f.preemption_grace = "5s";
  f.las_thresholds = "30m, 5h";
  f.tenants = "- {name: a, weight: 2}\n";
  auto o = MakeControlLoopOptions(f);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const sched::Config& c = o->scheduler;
  EXPECT_EQ(c.queue, sched::QueuePolicy::kLas);
  EXPECT_EQ(c.placement, sched::PlacementPolicy::kSpread);
  EXPECT_FALSE(c.backfill);
  EXPECT_TRUE(c.preemption);
  EXPECT_EQ(c.aging_ms, 120'000);
  EXPECT_EQ(c.preemption_grace_ms, 5'000);
  EXPECT_EQ(c.las_thresholds, (std::vector<int64_t>{1'800'000, 18'000'000}));
  ASSERT_EQ(o->tenants.size(), 1u);
  EXPECT_EQ(o->tenants[0].weight, 2.0);
  // Unset keys keep the scheduler's defaults.
  auto d = MakeControlLoopOptions(SchedulerFlags{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->scheduler.las_thresholds, sched::Config{}.las_thresholds);
  f.las_thresholds = "none";
  EXPECT_TRUE(MakeControlLoopOptions(f)->scheduler.las_thresholds.empty());
}

TEST(SchedulerOptions, BadValuesNameTheKeyAndTheFlag) {
  auto bad = [](std::string SchedulerFlags::*field, std::string value) {
    SchedulerFlags f;
    f.*field = std::move(value);
    auto o = MakeControlLoopOptions(f);
    return o.ok() ? std::string("ok") : o.status().message();
  };
  EXPECT_EQ(bad(&SchedulerFlags::las_thresholds, "10h,1h"),
            "scheduler.las-thresholds (--las-thresholds): LAS thresholds '10h,1h': they must be ascending");
  EXPECT_NE(bad(&SchedulerFlags::las_thresholds, "1h,-5m").find("'-5m' is not a positive duration"), std::string::npos);
  EXPECT_NE(bad(&SchedulerFlags::queue_policy, "lifo").find("scheduler.queue (--queue-policy)"), std::string::npos);
  EXPECT_NE(bad(&SchedulerFlags::preemption_grace, "2h").find("longer than 1h"), std::string::npos);
}

TEST(SchedulerOptions, DefaultTenantQuotasAreSetUnlessTurnedOff) {
  auto d = MakeControlLoopOptions(SchedulerFlags{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tenant_defaults.max_pending_jobs, 10'000);
  EXPECT_EQ(d->tenant_defaults.max_array_tasks, 1'001);
  SchedulerFlags f;
  f.default_max_pending_jobs = "0";
  f.default_max_array_tasks = "5000";
  auto o = MakeControlLoopOptions(f);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->tenant_defaults.max_pending_jobs, 0);
  EXPECT_EQ(o->tenant_defaults.max_array_tasks, 5'000);
  f.default_max_array_tasks = "100001";
  EXPECT_NE(MakeControlLoopOptions(f).status().message().find("--default-max-array-tasks: '100001'"),
            std::string::npos);
  f.default_max_array_tasks = "";
  f.default_max_pending_jobs = "lots";
  EXPECT_EQ(MakeControlLoopOptions(f).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover::server
