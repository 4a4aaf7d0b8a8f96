#pragma once
// Token buckets and the authenticator cache of the gateway (private).

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "drover/common/mutex.h"
#include "drover/gateway/gateway.h"

namespace drover::gateway {

// A bucket of `per_minute` tokens refilled continuously (per_minute / 60 a
// second), starting full. Thread-safe (a leaf mutex).
//
// Invariants: tokens_ <= per_minute; tokens_ may go below zero after
// Charge() (usage learnt after the fact), which then delays admission until
// refilled back above `need`.
class TokenBucket {
 public:
  // per_minute <= 0: unlimited, always admits. Otherwise takes `take` if at
  // least `need` tokens are there; else false and *retry_after_s is the
  // whole seconds until there will be (at least 1).
  bool Admit(double take, double need, int64_t per_minute, int64_t now_ns, int64_t* retry_after_s);
  // Takes n (may go negative). Ignored when unlimited.
  void Charge(double n, int64_t per_minute, int64_t now_ns);
  // Gives back a take (a later bucket refused the request).
  void Refund(double n, int64_t per_minute);

 private:
  void Refill(int64_t per_minute, int64_t now_ns) DROVER_REQUIRES(mu_);

  Mutex mu_;
  double tokens_ DROVER_GUARDED_BY(mu_) = 0;
  int64_t last_ns_ DROVER_GUARDED_BY(mu_) = 0;
  bool started_ DROVER_GUARDED_BY(mu_) = false;
};

// Requests and tokens of one key or one tenant.
struct Buckets {
  TokenBucket rpm;
  TokenBucket tpm;
};

// What a token resolved to, shared by the cache and the requests using it.
struct AuthEntry {
  Status status;  // OK or why the token is refused
  KeyInfo info;
  std::shared_ptr<Buckets> key;     // per token_id
  std::shared_ptr<Buckets> tenant;  // per tenant
  int64_t expires_ns = 0;
};

// Caches the authenticator's answers (OK ones for ttl, errors for fail_ttl),
// in 16 shards of at most max_entries/16 tokens each (a full shard is
// cleared). Buckets live as long as the gateway, keyed by token id and
// tenant, so that a refreshed entry keeps counting in the same buckets.
// Thread-safe.
class AuthCache {
 public:
  AuthCache(Authenticator authenticator, int64_t ttl_ms, int64_t fail_ttl_ms, size_t max_entries);
  // The cached answer while it is fresh, else null (never asks).
  std::shared_ptr<const AuthEntry> Cached(std::string_view token, int64_t now_ns);
  // The cached answer, or the authenticator's (which may block).
  std::shared_ptr<const AuthEntry> Lookup(std::string_view token, int64_t now_ns);

 private:
  struct Shard {
    Mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const AuthEntry>> entries DROVER_GUARDED_BY(mu);
  };
  using BucketMap = std::unordered_map<std::string, std::shared_ptr<Buckets>>;
  // The buckets of `name` in this->*map (key_buckets_ or tenant_buckets_).
  std::shared_ptr<Buckets> BucketsFor(BucketMap AuthCache::*map, const std::string& name) DROVER_EXCLUDES(buckets_mu_);

  const Authenticator authenticator_;
  const int64_t ttl_ns_;
  const int64_t fail_ttl_ns_;
  const size_t max_per_shard_;
  std::array<Shard, 16> shards_;
  Mutex buckets_mu_;
  BucketMap key_buckets_ DROVER_GUARDED_BY(buckets_mu_);
  BucketMap tenant_buckets_ DROVER_GUARDED_BY(buckets_mu_);
};

// The limits check of one request: key rpm, tenant rpm (a request each),
// then key tpm and tenant tpm (admit while above zero). Refunds what it took
// when a later bucket refuses. OK, or ResourceExhausted with the message;
// *retry_after_s is set then.
Status AdmitRequest(const AuthEntry& auth, int64_t now_ns, int64_t* retry_after_s);
// Charges the tokens a request used to the key's and the tenant's tpm.
void ChargeTokens(const AuthEntry& auth, int64_t tokens, int64_t now_ns);

}  // namespace drover::gateway
