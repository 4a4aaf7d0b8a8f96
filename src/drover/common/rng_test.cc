#include "drover/common/rng.h"

#include <gtest/gtest.h>

#include "drover/common/clock.h"

namespace drover {
namespace {

TEST(RngTest, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    int64_t x = a.Uniform(0, 1'000'000);
    EXPECT_EQ(x, b.Uniform(0, 1'000'000));
    differs |= x != c.Uniform(0, 1'000'000);
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, UniformStaysInRange) {
  Rng r(7);
  for (int i = 0; i < 1000; ++i) {
    int64_t x = r.Uniform(-3, 3);
    EXPECT_GE(x, -3);
    EXPECT_LE(x, 3);
  }
}

TEST(ManualClockTest, MovesOnlyWhenTold) {
  ManualClock clock;
  Timestamp t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(std::chrono::seconds(5));
  EXPECT_EQ(clock.Now() - t0, std::chrono::seconds(5));
  clock.Set(FromUnixNanos(123));
  EXPECT_EQ(ToUnixNanos(clock.Now()), 123);
}

}  // namespace
}  // namespace drover
