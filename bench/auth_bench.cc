// What authentication and audit add to every call: checking a bearer token
// (parse, one store read, SHA-256, constant-time compare), a rate-limit
// check, and appending one audit entry (a durable store transaction: the
// fsync dominates). Results: docs/performance.md.

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>

#include "drover/auth/audit.h"
#include "drover/auth/authority.h"
#include "drover/auth/rate_limit.h"
#include "drover/store/sqlite/sqlite_store.h"

namespace {

struct Fixture {
  Fixture() {
    std::string templ = "/tmp/drover-auth-bench-XXXXXX";
    dir = mkdtemp(templ.data());
    auto opened = drover::store::OpenSqliteStore(dir + "/drover.db", drover::SystemClock::Get());
    if (opened.ok()) store = std::move(opened.value());
  }
  ~Fixture() {
    store.reset();
    std::filesystem::remove_all(dir);
  }
  std::string dir;
  std::unique_ptr<drover::store::Store> store;
};

void BM_AuthenticateToken(benchmark::State& state) {
  Fixture f;
  drover::auth::Authority authority(f.store.get(), drover::SystemClock::Get());
  // Many tokens in the store, as in a cluster with many users.
  std::string token;
  for (int i = 0; i < state.range(0); ++i) {
    token = *authority.MintInternal({"user-" + std::to_string(i), "team", drover::auth::Role::kUser, "", {}});
  }
  for (auto _ : state) benchmark::DoNotOptimize(authority.Authenticate(token));
}
BENCHMARK(BM_AuthenticateToken)->Arg(10)->Arg(10000);

void BM_RateLimiterTake(benchmark::State& state) {
  drover::auth::RateLimiter limiter({1e9, 1e9}, drover::SystemClock::Get());
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("t:" + std::to_string(i));
  size_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(limiter.Take(keys[i++ % keys.size()]));
}
BENCHMARK(BM_RateLimiterTake);

void BM_AuditAppend(benchmark::State& state) {
  Fixture f;
  drover::auth::AuditLog log(f.store.get(), drover::SystemClock::Get());
  drover::auth::Principal p{"0123456789abcdef", "alice", "team", drover::auth::Role::kUser, "", "127.0.0.1:5000"};
  for (auto _ : state) benchmark::DoNotOptimize(log.Append(p, "jobs.submit", "j-000042", drover::Status::Ok()));
}
BENCHMARK(BM_AuditAppend)->UseRealTime();

void BM_AuditVerify(benchmark::State& state) {
  Fixture f;
  drover::auth::AuditLog log(f.store.get(), drover::SystemClock::Get());
  drover::auth::Principal p{"0123456789abcdef", "alice", "team", drover::auth::Role::kUser, "", "127.0.0.1:5000"};
  for (int i = 0; i < state.range(0); ++i)
    (void)log.Append(p, "jobs.submit", "j-" + std::to_string(i), drover::Status::Ok());
  for (auto _ : state) benchmark::DoNotOptimize(log.Verify());
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_AuditVerify)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
