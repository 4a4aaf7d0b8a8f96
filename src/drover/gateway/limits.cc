#include "drover/gateway/limits.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace drover::gateway {

void TokenBucket::Refill(int64_t per_minute, int64_t now_ns) {
  const double cap = static_cast<double>(per_minute);
  if (!started_) {
    started_ = true;
    tokens_ = cap;
    last_ns_ = now_ns;
    return;
  }
  if (now_ns > last_ns_) {
    tokens_ = std::min(cap, tokens_ + static_cast<double>(now_ns - last_ns_) * cap / 60e9);
    last_ns_ = now_ns;
  }
  tokens_ = std::min(cap, tokens_);  // the limit may have been lowered
}

bool TokenBucket::Admit(double take, double need, int64_t per_minute, int64_t now_ns, int64_t* retry_after_s) {
  if (per_minute <= 0) return true;
  MutexLock lock(&mu_);
  Refill(per_minute, now_ns);
  if (tokens_ >= need) {
    tokens_ -= take;
    return true;
  }
  const double per_s = static_cast<double>(per_minute) / 60.0;
  *retry_after_s = std::max<int64_t>(1, static_cast<int64_t>(std::ceil((need - tokens_) / per_s)));
  return false;
}

void TokenBucket::Charge(double n, int64_t per_minute, int64_t now_ns) {
  if (per_minute <= 0 || n <= 0) return;
  MutexLock lock(&mu_);
  Refill(per_minute, now_ns);
  tokens_ -= n;
}

void TokenBucket::Refund(double n, int64_t per_minute) {
  if (per_minute <= 0) return;
  MutexLock lock(&mu_);
  tokens_ = std::min(static_cast<double>(per_minute), tokens_ + n);
}

AuthCache::AuthCache(Authenticator authenticator, int64_t ttl_ms, int64_t fail_ttl_ms, size_t max_entries)
    : authenticator_(std::move(authenticator)),
      ttl_ns_(ttl_ms * 1'000'000),
      fail_ttl_ns_(fail_ttl_ms * 1'000'000),
      max_per_shard_(std::max<size_t>(1, max_entries / 16)) {}

std::shared_ptr<Buckets> AuthCache::BucketsFor(BucketMap AuthCache::*map, const std::string& name) {
  MutexLock lock(&buckets_mu_);
  auto& b = (this->*map)[name];
  if (!b) b = std::make_shared<Buckets>();
  return b;
}

std::shared_ptr<const AuthEntry> AuthCache::Cached(std::string_view token, int64_t now_ns) {
  Shard& shard = shards_[std::hash<std::string_view>{}(token) % shards_.size()];
  MutexLock lock(&shard.mu);
  auto it = shard.entries.find(std::string(token));
  return it != shard.entries.end() && it->second->expires_ns > now_ns ? it->second : nullptr;
}

std::shared_ptr<const AuthEntry> AuthCache::Lookup(std::string_view token, int64_t now_ns) {
  if (auto hit = Cached(token, now_ns)) return hit;
  Shard& shard = shards_[std::hash<std::string_view>{}(token) % shards_.size()];
  // A miss: ask outside the lock (two concurrent misses may both ask).
  auto entry = std::make_shared<AuthEntry>();
  Result<KeyInfo> r = authenticator_ ? authenticator_(token) : Result<KeyInfo>(Unauthenticated("no authenticator"));
  if (r.ok()) {
    entry->info = std::move(r).value();
    entry->key = BucketsFor(&AuthCache::key_buckets_, entry->info.token_id);
    entry->tenant = BucketsFor(&AuthCache::tenant_buckets_, entry->info.tenant);
    entry->expires_ns = now_ns + ttl_ns_;
  } else {
    entry->status = r.status();
    entry->expires_ns = now_ns + fail_ttl_ns_;
  }
  MutexLock lock(&shard.mu);
  if (shard.entries.size() >= max_per_shard_) shard.entries.clear();
  shard.entries[std::string(token)] = entry;
  return entry;
}

Status AdmitRequest(const AuthEntry& auth, int64_t now_ns, int64_t* retry_after_s) {
  const KeyInfo& k = auth.info;
  if (!auth.key->rpm.Admit(1, 1, k.key_rpm, now_ns, retry_after_s)) {
    return ResourceExhausted("rate limit reached for key '" + k.name + "': " + std::to_string(k.key_rpm) +
                             " requests per minute");
  }
  if (!auth.tenant->rpm.Admit(1, 1, k.tenant_rpm, now_ns, retry_after_s)) {
    auth.key->rpm.Refund(1, k.key_rpm);
    return ResourceExhausted("rate limit reached for tenant '" + k.tenant + "': " + std::to_string(k.tenant_rpm) +
                             " requests per minute");
  }
  // Tokens are known after the answer: admit while the bucket is above zero.
  if (!auth.key->tpm.Admit(0, 1e-9, k.key_tpm, now_ns, retry_after_s)) {
    auth.key->rpm.Refund(1, k.key_rpm);
    auth.tenant->rpm.Refund(1, k.tenant_rpm);
    return ResourceExhausted("rate limit reached for key '" + k.name + "': " + std::to_string(k.key_tpm) +
                             " tokens per minute");
  }
  if (!auth.tenant->tpm.Admit(0, 1e-9, k.tenant_tpm, now_ns, retry_after_s)) {
    auth.key->rpm.Refund(1, k.key_rpm);
    auth.tenant->rpm.Refund(1, k.tenant_rpm);
    return ResourceExhausted("rate limit reached for tenant '" + k.tenant + "': " + std::to_string(k.tenant_tpm) +
                             " tokens per minute");
  }
  return Status::Ok();
}

void ChargeTokens(const AuthEntry& auth, int64_t tokens, int64_t now_ns) {
  auth.key->tpm.Charge(static_cast<double>(tokens), auth.info.key_tpm, now_ns);
  auth.tenant->tpm.Charge(static_cast<double>(tokens), auth.info.tenant_tpm, now_ns);
}

}  // namespace drover::gateway
