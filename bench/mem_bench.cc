// libdrover_mem: an allocate + free pair through the C API (pool mutex
// included), through the bare TLSF core (no mutex: the lock's share), and
// glibc malloc/free on the same pattern, in the same run. Results:
// docs/memory.md.
//   ./build/bench/mem_bench
// Its main also runs two plain-table modes (mem_modes.h): --latency, single
// calls' percentiles against glibc and first/best-fit lists (and CUDA's where
// present), and --fragmentation, trace replays against those and a model of
// PyTorch's caching allocator. Results: docs/performance.md.
//
// DoNotOptimize only ever sees const values: libbenchmark 1.7.1's overload for
// a non-const lvalue ("+m,r") made GCC 12 write a stale pointer back into the
// live array here (a double free on the next round).
//
// Patterns:
//   Small      one size (Arg bytes), allocated and freed at once.
//   Mixed      64 live blocks of log-uniform sizes 16 B .. 1 MiB; each
//              iteration frees one at random and allocates a new size there.
//   Latency    Mixed, each allocate and each free timed alone: p50 and p99
//              (counters, in ns, including one steady_clock read).
//   Fragmented the pool (or heap) first holds 100,000 live 256-byte blocks
//              with a 256-byte hole between each two (100,000 free holes);
//              then the Mixed pattern runs on top: TLSF's cost must not grow
//              with the number of free blocks.

#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "drover/memory/drover_mem.h"
#include "drover/memory/tlsf.h"
#include "mem_modes.h"

namespace drover::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr int kWindow = 64;
constexpr int kHoles = 100000;

drover_mem_pool_t BenchPool(size_t reserve) {
  drover_mem_options_t o;
  drover_mem_options_init(&o);
  o.reserve_bytes = reserve;
  drover_mem_pool_t pool{0};
  if (drover_mem_pool_create(&o, &pool) != DROVER_MEM_OK) abort();
  return pool;
}

// 4096 log-uniform sizes in [16 B, 1 MiB] and random slots, fixed seed.
struct MixedPattern {
  MixedPattern() {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> exponent(4.0, 20.0);
    for (int i = 0; i < 4096; ++i) {
      sizes.push_back(static_cast<size_t>(std::exp2(exponent(rng))));
      slots.push_back(static_cast<int>(rng() % kWindow));
    }
  }
  std::vector<size_t> sizes;
  std::vector<int> slots;
};
const MixedPattern& Pattern() {
  static const MixedPattern p;
  return p;
}

// --- small: one size, allocate then free ---

void BM_PoolSmall(benchmark::State& state) {
  drover_mem_pool_t pool = BenchPool(64 * kMiB);
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (drover_mem_alloc(pool, size, 0, 0, &p) != DROVER_MEM_OK) state.SkipWithError("alloc failed");
    benchmark::DoNotOptimize(std::as_const(p));
    (void)drover_mem_free(pool, p);
  }
  (void)drover_mem_pool_destroy(pool);
}
BENCHMARK(BM_PoolSmall)->Arg(64)->Arg(256)->Arg(4096);

void BM_TlsfSmall(benchmark::State& state) {
  Tlsf tlsf(256);
  tlsf.AddRange(uint64_t{1} << 32, 64 * kMiB);
  const uint64_t size = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    Tlsf::Allocation a;
    const uint64_t addr = tlsf.Allocate(size, 256, 0, &a);
    benchmark::DoNotOptimize(addr);
    tlsf.Free(a.addr, &a);
  }
}
BENCHMARK(BM_TlsfSmall)->Arg(64)->Arg(256)->Arg(4096);

void BM_MallocSmall(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* const p = malloc(size);
    benchmark::DoNotOptimize(p);
    free(p);
  }
}
BENCHMARK(BM_MallocSmall)->Arg(64)->Arg(256)->Arg(4096);

// --- mixed sizes over a window of live blocks ---

template <typename Alloc, typename Free>
void RunMixed(benchmark::State& state, Alloc alloc, Free release) {
  const MixedPattern& pattern = Pattern();
  std::vector<void*> live(kWindow);
  for (int i = 0; i < kWindow; ++i) live[static_cast<size_t>(i)] = alloc(pattern.sizes[static_cast<size_t>(i)]);
  size_t i = 0;
  for (auto _ : state) {
    const size_t slot = static_cast<size_t>(pattern.slots[i & 4095]);
    release(live[slot]);
    void* const p = alloc(pattern.sizes[i & 4095]);
    benchmark::DoNotOptimize(p);
    live[slot] = p;
    ++i;
  }
  for (void* p : live) release(p);
}

void BM_PoolMixed(benchmark::State& state) {
  drover_mem_pool_t pool = BenchPool(256 * kMiB);
  RunMixed(
      state,
      [&](size_t n) {
        void* p = nullptr;
        const int rc = drover_mem_alloc(pool, n, 0, 0, &p);
        if (rc != DROVER_MEM_OK) state.SkipWithError(drover_mem_strerror(rc));
        return p;
      },
      [&](void* p) { (void)drover_mem_free(pool, p); });
  (void)drover_mem_pool_destroy(pool);
}
BENCHMARK(BM_PoolMixed);

void BM_MallocMixed(benchmark::State& state) {
  RunMixed(
      state, [](size_t n) { return malloc(n); }, [](void* p) { free(p); });
}
BENCHMARK(BM_MallocMixed);

// --- latency percentiles: each allocate and each free timed on its own ---

uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

double Percentile(std::vector<uint64_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]);
}

// The Mixed pattern with every call timed by steady_clock; counters in ns
// include one clock read (clock_ns: the median of back-to-back reads).
template <typename Alloc, typename Free>
void RunLatency(benchmark::State& state, Alloc alloc, Free release) {
  const MixedPattern& pattern = Pattern();
  std::vector<void*> live(kWindow);
  for (int i = 0; i < kWindow; ++i) live[static_cast<size_t>(i)] = alloc(pattern.sizes[static_cast<size_t>(i)]);
  std::vector<uint64_t> alloc_ns;
  std::vector<uint64_t> free_ns;
  alloc_ns.reserve(static_cast<size_t>(state.max_iterations));
  free_ns.reserve(static_cast<size_t>(state.max_iterations));
  size_t i = 0;
  for (auto _ : state) {
    const size_t slot = static_cast<size_t>(pattern.slots[i & 4095]);
    const uint64_t t0 = NowNs();
    release(live[slot]);
    const uint64_t t1 = NowNs();
    void* const p = alloc(pattern.sizes[i & 4095]);
    const uint64_t t2 = NowNs();
    benchmark::DoNotOptimize(p);
    live[slot] = p;
    free_ns.push_back(t1 - t0);
    alloc_ns.push_back(t2 - t1);
    ++i;
  }
  for (void* p : live) release(p);
  std::vector<uint64_t> clock_ns;
  for (int k = 0; k < 10000; ++k) {
    const uint64_t a = NowNs();
    const uint64_t b = NowNs();
    clock_ns.push_back(b - a);
  }
  state.counters["alloc_p50"] = Percentile(alloc_ns, 0.50);
  state.counters["alloc_p99"] = Percentile(alloc_ns, 0.99);
  state.counters["free_p50"] = Percentile(free_ns, 0.50);
  state.counters["free_p99"] = Percentile(free_ns, 0.99);
  state.counters["clock_ns"] = Percentile(clock_ns, 0.50);
}

void BM_PoolLatency(benchmark::State& state) {
  drover_mem_pool_t pool = BenchPool(256 * kMiB);
  RunLatency(
      state,
      [&](size_t n) {
        void* p = nullptr;
        const int rc = drover_mem_alloc(pool, n, 0, 0, &p);
        if (rc != DROVER_MEM_OK) state.SkipWithError(drover_mem_strerror(rc));
        return p;
      },
      [&](void* p) { (void)drover_mem_free(pool, p); });
  (void)drover_mem_pool_destroy(pool);
}
BENCHMARK(BM_PoolLatency)->Iterations(1 << 20);

void BM_MallocLatency(benchmark::State& state) {
  RunLatency(
      state, [](size_t n) { return malloc(n); }, [](void* p) { free(p); });
}
BENCHMARK(BM_MallocLatency)->Iterations(1 << 20);

// --- the same on a fragmented pool / heap ---

// Allocates 2 * kHoles small blocks and frees every other one: kHoles free
// 256-byte holes that no neighbour can merge with. Returns the blocks kept.
template <typename Alloc, typename Free>
std::vector<void*> Fragment(Alloc alloc, Free release) {
  std::vector<void*> all;
  all.reserve(2 * kHoles);
  for (int i = 0; i < 2 * kHoles; ++i) all.push_back(alloc(256));
  std::vector<void*> kept;
  for (int i = 0; i < 2 * kHoles; ++i) {
    if (i % 2 == 0) {
      release(all[static_cast<size_t>(i)]);
    } else {
      kept.push_back(all[static_cast<size_t>(i)]);
    }
  }
  return kept;
}

void BM_PoolFragmented(benchmark::State& state) {
  drover_mem_pool_t pool = BenchPool(512 * kMiB);
  auto alloc = [&](size_t n) {
    void* p = nullptr;
    const int rc = drover_mem_alloc(pool, n, 0, 0, &p);
    if (rc != DROVER_MEM_OK) state.SkipWithError(drover_mem_strerror(rc));
    return p;
  };
  auto release = [&](void* p) { (void)drover_mem_free(pool, p); };
  std::vector<void*> kept = Fragment(alloc, release);
  drover_mem_stats_t s;
  (void)drover_mem_stats(pool, &s);
  state.counters["fragmentation"] = s.fragmentation;
  RunMixed(state, alloc, release);
  for (void* p : kept) release(p);
  (void)drover_mem_pool_destroy(pool);
}
BENCHMARK(BM_PoolFragmented);

void BM_MallocFragmented(benchmark::State& state) {
  auto alloc = [](size_t n) { return malloc(n); };
  auto release = [](void* p) { free(p); };
  std::vector<void*> kept = Fragment(alloc, release);
  RunMixed(state, alloc, release);
  for (void* p : kept) release(p);
}
BENCHMARK(BM_MallocFragmented);

}  // namespace
}  // namespace drover::memory

// --latency and --fragmentation print their own tables; anything else goes to
// Google Benchmark (so every BENCHMARK in this file, wherever it is, runs).
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--latency") == 0) return drover::bench::LatencyMain(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--fragmentation") == 0) return drover::bench::FragmentationMain(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Defragmentation by remapping (issue 19 item 3): the cost of a 200 KiB
// allocation served by stitching against a plain one. Host backend, four
// 1 MiB segments at the pool's limit. Arg 0: plain, a pool with a free
// 200 KiB block (alloc + free); 1: stitched, every free chunk lies in 124 KiB
// segment tails, so each alloc reserves a range and maps two tails into it,
// and the trim after the free unmaps and releases it (alloc + free + trim);
// 2: stitched and cached, the range kept from the previous allocation (alloc
// + free).
namespace drover::memory {
namespace {

void BM_StitchedAlloc(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  constexpr size_t kKiB = 1024;
  drover_mem_options_t o;
  drover_mem_options_init(&o);
  o.reserve_bytes = 1024 * kKiB;
  o.limit_bytes = 4096 * kKiB;
  o.grow_bytes = 1024 * kKiB;
  drover_mem_pool_t pool{0};
  if (drover_mem_pool_create(&o, &pool) != DROVER_MEM_OK) {
    state.SkipWithError("pool");
    return;
  }
  std::vector<void*> kept;
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    (void)drover_mem_alloc(pool, mode == 0 && i == 3 ? 700 * kKiB : 900 * kKiB, 0, 0, &p);
    kept.push_back(p);
  }
  for (auto _ : state) {
    void* p = nullptr;
    if (drover_mem_alloc(pool, 200 * kKiB, 0, 1, &p) != DROVER_MEM_OK) {
      state.SkipWithError("alloc");
      break;
    }
    benchmark::DoNotOptimize(p);
    (void)drover_mem_free(pool, p);
    if (mode == 1) (void)drover_mem_trim(pool);
  }
  drover_mem_remap_stats_t r;
  (void)drover_mem_remap_stats(pool, &r);
  state.counters["stitches"] = static_cast<double>(r.total_stitches);
  state.SetLabel(mode == 0 ? "plain" : mode == 1 ? "stitched (new range each time)" : "stitched (cached range)");
  for (void* p : kept) (void)drover_mem_free(pool, p);
  (void)drover_mem_pool_destroy(pool);
}
BENCHMARK(BM_StitchedAlloc)->Arg(0)->Arg(1)->Arg(2);

}  // namespace
}  // namespace drover::memory
