#pragma once
// RateLimiter: token buckets by key (a token id, a tenant, a peer address).
// Each key gets `burst` requests at once and `per_second` more every second.
//
// Thread-safety: thread-safe (one mutex; a check is a map lookup and a few
// arithmetic operations). Memory is bounded: past kMaxKeys keys, full
// buckets (keys idle long enough to have refilled) are forgotten.

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "drover/common/clock.h"
#include "drover/common/mutex.h"

namespace drover::auth {

struct RateLimit {
  double per_second = 0;  // 0: unlimited
  double burst = 0;
};

class RateLimiter {
 public:
  static constexpr size_t kMaxKeys = 100000;
  RateLimiter(RateLimit limit, const Clock* clock) : limit_(limit), clock_(clock) {}

  // 0 when the request may go now (and takes a token), else how long until
  // one will be there (the Retry-After hint).
  Duration Take(const std::string& key);

 private:
  struct Bucket {
    double tokens = 0;
    int64_t updated_ns = 0;
  };
  RateLimit limit_;
  const Clock* clock_;
  Mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::auth
