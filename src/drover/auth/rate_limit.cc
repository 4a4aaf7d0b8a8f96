#include "drover/auth/rate_limit.h"

#include <algorithm>
#include <cmath>

namespace drover::auth {

Duration RateLimiter::Take(const std::string& key) {
  if (limit_.per_second <= 0) return Duration(0);
  const int64_t now = ToUnixNanos(clock_->Now());
  MutexLock lock(&mu_);
  if (buckets_.size() >= kMaxKeys && buckets_.find(key) == buckets_.end()) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      double refilled = it->second.tokens + (now - it->second.updated_ns) * 1e-9 * limit_.per_second;
      it = refilled >= limit_.burst ? buckets_.erase(it) : std::next(it);
    }
  }
  auto [it, inserted] = buckets_.try_emplace(key, Bucket{limit_.burst, now});
  Bucket& b = it->second;
  if (!inserted && now > b.updated_ns) {
    b.tokens = std::min(limit_.burst, b.tokens + (now - b.updated_ns) * 1e-9 * limit_.per_second);
    b.updated_ns = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return Duration(0);
  }
  double wait_s = (1 - b.tokens) / limit_.per_second;
  return Duration(static_cast<int64_t>(std::ceil(wait_s * 1e9)));
}

}  // namespace drover::auth
