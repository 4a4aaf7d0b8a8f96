// Property tests of the Scheduler: random clusters, tenants, jobs and events
// from a seeded Rng, under every policy combination (queue x placement x
// backfill x preemption). After every step the scheduler's CheckInvariants()
// runs, and so do this file's own checks, which trust nothing but the
// returned Decisions and keep their own books of who holds which GPU.
//
// What the decisions must satisfy: every replica placed, on healthy GPUs of
// schedulable nodes that match model, vendor, memory, selector and topology;
// no GPU double-booked (whole vs shared, compute and memory); no job bound
// twice; no job bound and preempted in one pass; victims preemptible, of
// lower priority or reclaimed from a tenant that borrows their GPU model
// (and is above its guarantee of it) by one below its guarantee of it; a
// reason for every pending job; strict order without backfill (fifo, sjf);
// usage, held masks and counts equal to this file's books; borrowing limits
// kept. Every 50 steps a third scheduler rebuilt through Restore and
// MarkPreempting must agree. A twin scheduler is fed the same events; every
// decision, status and reason must match (determinism). Each run ends by
// healing and undraining the cluster and running it empty: every job left
// must be one that can never run (NeverFits) or that its tenant's borrowing
// limit may keep out.
//
// The model (random worlds, shadow books and checks) is
// testing/property_model.h, property_model.cc and property_checks.cc.
//
// A failure names the seed, the policy, the step and the last events. To
// replay or soak:
//   DROVER_PROPERTY_SEED=17 build/src/drover/sched/sched_property_test
//   DROVER_PROPERTY_STEPS=20000 build/src/drover/sched/sched_property_test
// DROVER_PROPERTY_TRACE=N prints the last N events instead of 40.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "drover/common/status.h"
#include "drover/sched/testing/property_model.h"

namespace drover::sched::testing {
namespace {

class SchedulerPropertyTest : public ::testing::TestWithParam<Policy> {};

TEST_P(SchedulerPropertyTest, RandomEventsKeepEveryProperty) {
  std::vector<uint64_t> seeds = {1, 2, 3};
  if (int only = EnvInt("DROVER_PROPERTY_SEED", 0); only > 0) seeds = {static_cast<uint64_t>(only)};
  int steps = EnvInt("DROVER_PROPERTY_STEPS", 1500);
  for (uint64_t seed : seeds) {
    World w(seed, GetParam());
    Status s = w.Run(steps);
    if (!s.ok()) {
      ADD_FAILURE() << "seed " << seed << ", policy " << PolicyName(GetParam()) << ", step " << w.step() << ": "
                    << s.message() << "\ncluster (as it is now):\n"
                    << w.Cluster() << "last events:\n"
                    << w.Trace() << "replay: DROVER_PROPERTY_SEED=" << seed << " sched_property_test --gtest_filter='*"
                    << PolicyName(GetParam()) << "'";
      return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, SchedulerPropertyTest, ::testing::ValuesIn(AllPolicies()),
                         [](const ::testing::TestParamInfo<Policy>& param) { return PolicyName(param.param); });

}  // namespace
}  // namespace drover::sched::testing
