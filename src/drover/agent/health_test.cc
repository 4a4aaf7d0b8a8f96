#include "drover/agent/health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace drover::agent {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kSec = 1'000'000'000;

HealthCheckInput Clean() { return {}; }
HealthCheckInput WithEvent(HealthEvent::Kind kind, int64_t code = 0, std::string message = "") {
  HealthCheckInput in;
  in.events.push_back({0, kind, code, std::move(message)});
  return in;
}
HealthCheckInput Throttled() {
  HealthCheckInput in;
  in.thermal_throttled = true;
  return in;
}

TEST(HealthTrackerTest, CriticalXidTakesTheGpuOutUntilCleanChecks) {
  HealthTracker t(2, {.clean_checks = 3});
  EXPECT_FALSE(t.Check(0, Clean(), 1 * kSec));
  EXPECT_TRUE(t.healthy(0));
  EXPECT_TRUE(t.Check(0, WithEvent(HealthEvent::Kind::kXid, 79), 2 * kSec));
  EXPECT_FALSE(t.healthy(0));
  EXPECT_EQ(t.reason(0), "xid 79 (GPU has fallen off the bus) (0 of 3 clean checks)");
  EXPECT_TRUE(t.healthy(1));                   // only that one
  EXPECT_TRUE(t.Check(0, Clean(), 3 * kSec));  // the progress is news
  EXPECT_THAT(t.reason(0), HasSubstr("1 of 3"));
  EXPECT_TRUE(t.Check(0, Clean(), 4 * kSec));
  EXPECT_FALSE(t.healthy(0));
  EXPECT_TRUE(t.Check(0, Clean(), 5 * kSec));
  EXPECT_TRUE(t.healthy(0));
  EXPECT_EQ(t.reason(0), "");
  EXPECT_EQ(t.xid_errors(0), 1);
  EXPECT_EQ(t.last_xid(0), 79);
}

TEST(HealthTrackerTest, ApplicationXidsAreCountedButDoNotCondemnTheGpu) {
  HealthTracker t(1, {});
  for (int64_t xid : {13, 31, 43, 45, 68, 109}) {
    EXPECT_FALSE(t.Check(0, WithEvent(HealthEvent::Kind::kXid, xid), kSec)) << xid;
    EXPECT_TRUE(t.healthy(0)) << xid;
  }
  EXPECT_EQ(t.xid_errors(0), 6);
  EXPECT_EQ(t.last_xid(0), 109);
  EXPECT_TRUE(IsCriticalXid(48));
  EXPECT_TRUE(IsCriticalXid(999));
  EXPECT_EQ(DescribeXid(999), "xid 999");
}

TEST(HealthTrackerTest, AnotherProblemRestartsTheCount) {
  HealthTracker t(1, {.clean_checks = 2});
  t.Check(0, WithEvent(HealthEvent::Kind::kEccUncorrected), kSec);
  t.Check(0, Clean(), 2 * kSec);
  HealthCheckInput silent;
  silent.answered = false;
  silent.sample_error = "simulated device 0 is lost";
  t.Check(0, silent, 3 * kSec);
  EXPECT_FALSE(t.healthy(0));
  // The first cause is what the operator needs to see.
  EXPECT_EQ(t.reason(0), "uncorrected (double-bit) ECC error (0 of 2 clean checks)");
  t.Check(0, Clean(), 4 * kSec);
  EXPECT_FALSE(t.healthy(0));
  t.Check(0, Clean(), 5 * kSec);
  EXPECT_TRUE(t.healthy(0));
}

TEST(HealthTrackerTest, LostDeviceStaysOutWhileItDoesNotAnswer) {
  HealthTracker t(1, {.clean_checks = 1});
  t.Check(0, WithEvent(HealthEvent::Kind::kDeviceLost, 0, "fell off the bus"), kSec);
  EXPECT_EQ(t.reason(0), "device lost: fell off the bus (0 of 1 clean checks)");
  HealthCheckInput silent;
  silent.answered = false;
  for (int i = 2; i < 10; ++i) t.Check(0, silent, i * kSec);
  EXPECT_FALSE(t.healthy(0));
  t.Check(0, Clean(), 10 * kSec);
  EXPECT_TRUE(t.healthy(0));
}

TEST(HealthTrackerTest, UnansweredSampleAloneTakesTheGpuOut) {
  HealthTracker t(1, {});
  HealthCheckInput silent;
  silent.answered = false;
  silent.sample_error = "NVML_ERROR_GPU_IS_LOST";
  EXPECT_TRUE(t.Check(0, silent, kSec));
  EXPECT_THAT(t.reason(0), HasSubstr("cannot be queried: NVML_ERROR_GPU_IS_LOST"));
}

TEST(HealthTrackerTest, OnlySustainedThermalThrottlingCounts) {
  HealthTracker t(1, {.clean_checks = 2, .thermal_throttle_ns = 30 * kSec});
  // A short burst of throttling is normal.
  for (int s = 0; s < 20; ++s) t.Check(0, Throttled(), s * kSec);
  t.Check(0, Clean(), 20 * kSec);
  for (int s = 21; s < 50; ++s) t.Check(0, Throttled(), s * kSec);
  EXPECT_TRUE(t.healthy(0));  // 29 s since it started again
  EXPECT_TRUE(t.Check(0, Throttled(), 51 * kSec));
  EXPECT_FALSE(t.healthy(0));
  EXPECT_THAT(t.reason(0), HasSubstr("thermal throttling for 30s"));
  // Still throttled: not a clean check.
  t.Check(0, Throttled(), 52 * kSec);
  t.Check(0, Throttled(), 53 * kSec);
  EXPECT_FALSE(t.healthy(0));
  t.Check(0, Clean(), 54 * kSec);
  t.Check(0, Clean(), 55 * kSec);
  EXPECT_TRUE(t.healthy(0));
}

TEST(HealthTrackerTest, OutOfRangeGpuIsIgnored) {
  HealthTracker t(1, {});
  EXPECT_FALSE(t.Check(5, WithEvent(HealthEvent::Kind::kXid, 79), kSec));
  EXPECT_FALSE(t.Check(-1, WithEvent(HealthEvent::Kind::kXid, 79), kSec));
  EXPECT_TRUE(t.healthy(0));
}

}  // namespace
}  // namespace drover::agent
