#include "drover/auth/rate_limit.h"

#include <gtest/gtest.h>

namespace drover::auth {
namespace {

TEST(RateLimiterTest, BurstThenRefillPerKey) {
  ManualClock clock;
  RateLimiter limiter({10, 3}, &clock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Take("a").count(), 0);
  Duration wait = limiter.Take("a");
  EXPECT_GT(wait.count(), 0);
  EXPECT_LE(wait, std::chrono::milliseconds(100));
  EXPECT_EQ(limiter.Take("b").count(), 0);  // another key has its own bucket
  clock.Advance(std::chrono::milliseconds(100));
  EXPECT_EQ(limiter.Take("a").count(), 0);
  EXPECT_GT(limiter.Take("a").count(), 0);
  clock.Advance(std::chrono::seconds(10));  // refills to the burst, not beyond
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Take("a").count(), 0);
  EXPECT_GT(limiter.Take("a").count(), 0);
}

TEST(RateLimiterTest, ZeroRateIsUnlimited) {
  ManualClock clock;
  RateLimiter limiter({0, 0}, &clock);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(limiter.Take("a").count(), 0);
}

}  // namespace
}  // namespace drover::auth
