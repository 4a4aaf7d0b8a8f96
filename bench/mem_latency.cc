// mem_bench --latency: the latency of single allocate and single free calls,
// as distributions (p50, p99, p99.9), for libdrover_mem's pool through its C
// API (as a workload calls it, mutex and handle checks included), the bare
// TLSF core (no lock), glibc malloc/free, and the two classic free lists of
// alloc_models.h (address-ordered, coalescing; first fit and best fit), on
// the same requests in the same run; then cudaMalloc/cudaFree and
// cudaMallocAsync/cudaFreeAsync where libcudart (else libcuda.so.1, the
// driver API's cuMemAlloc/cuMemAllocAsync) and a device are present: on a
// machine without them a line says why they were skipped.
//
// Workload: 1024 live blocks of log-uniform sizes 256 B .. 64 MiB (mean
// 5.3 MiB, about 5.5 GiB live). A round takes 64 distinct live blocks (a
// seeded shuffle of the 1024, reshuffled every 16 rounds), frees them, then
// allocates 64 new sizes into their places. Every allocator sees the same
// sizes and slots (fixed seeds). A quarter of the rounds run first untimed.
//
// Timing: even rounds time each call alone with rdtsc (lfence before and
// after, so the call cannot move across the reads; steady_clock off x86),
// then subtract the timer's own overhead: the median of 100,000 empty
// back-to-back readings, printed with the table (so is the timer's smallest
// step: a VM's TSC may advance 10-20 ns at a time, which bounds how finely
// per-call numbers resolve). Odd rounds time each batch of 64 frees and 64
// allocations with one reading pair: a batch's time / 64 is a mean over 64
// calls with no timer overhead and no step, and its median over batches
// cross-checks the per-call columns (it lies between p50 and the mean: a
// heavy tail such as glibc's mmap calls lifts it above p50). The median, not
// the mean over all batches: on a shared machine one preemption of a few ms
// outweighs thousands of calls. Ticks become ns by a 50 ms calibration
// against steady_clock.
//
// The pool and the free lists never touch the memory they hand out; glibc
// writes a header per block, and maps blocks above its mmap threshold
// (dynamic, up to 32 MiB) with mmap, so its tail is page faults and munmap.

#include <dlfcn.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "alloc_models.h"
#include "drover/memory/drover_mem.h"
#include "drover/memory/tlsf.h"
#include "mem_modes.h"

namespace drover::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr size_t kLive = 1024;
constexpr size_t kBatch = 64;
constexpr size_t kShuffleEvery = kLive / kBatch;

#if defined(__x86_64__)
inline uint64_t Tick() {
  _mm_lfence();
  const uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}
constexpr const char* kTimerName = "rdtsc, lfence before and after";
#else
inline uint64_t Tick() { return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()); }
constexpr const char* kTimerName = "steady_clock";
#endif

double TicksPerNs() {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  const uint64_t c0 = Tick();
  Clock::time_point t1;
  do {
    t1 = Clock::now();
  } while (t1 - t0 < std::chrono::milliseconds(50));
  const uint64_t c1 = Tick();
  return static_cast<double>(c1 - c0) / static_cast<double>(std::chrono::nanoseconds(t1 - t0).count());
}

// The median of empty back-to-back readings; *step: the smallest non-zero
// one (a virtual machine's TSC may advance in steps: 26 ticks, 10 ns, on
// the shared VM this was written on).
uint64_t TimerOverhead(uint64_t* step) {
  std::vector<uint64_t> d(100000);
  *step = UINT64_MAX;
  for (uint64_t& v : d) {
    const uint64_t a = Tick();
    const uint64_t b = Tick();
    v = b - a;
    if (v != 0) *step = std::min(*step, v);
  }
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

// log-uniform 256 B .. 64 MiB, fixed seed; the distribution is written out.
const std::vector<uint64_t>& Sizes() {
  static const std::vector<uint64_t> sizes = [] {
    std::mt19937_64 rng(1);
    std::vector<uint64_t> v(1 << 16);
    for (uint64_t& s : v) {
      s = static_cast<uint64_t>(std::exp2(8.0 + 18.0 * static_cast<double>(rng() >> 11) * 0x1.0p-53));
    }
    return v;
  }();
  return sizes;
}

struct Result {
  std::string name;
  std::vector<uint64_t> alloc, free;              // ticks, timer overhead subtracted
  std::vector<uint64_t> batch_alloc, batch_free;  // ticks per batch of kBatch calls
  std::string error;
};

using AllocFn = std::function<void*(size_t)>;
using FreeFn = std::function<void(void*)>;

// See the file comment. std::function's indirect call (about 2 ns) is in
// every row alike.
Result Measure(std::string name, size_t rounds, uint64_t overhead, const AllocFn& alloc, const FreeFn& release) {
  Result r;
  r.name = std::move(name);
  const std::vector<uint64_t>& sizes = Sizes();
  size_t next = 0;
  auto size = [&] { return sizes[next++ & (sizes.size() - 1)]; };
  std::vector<void*> live(kLive);
  for (void*& p : live) {
    p = alloc(size());
    if (p == nullptr) {
      r.error = "allocation failed while filling the live set";
      return r;
    }
  }
  std::mt19937_64 rng(7);
  std::vector<size_t> perm(kLive);
  for (size_t i = 0; i < kLive; ++i) perm[i] = i;
  const size_t warmup = rounds / 4;
  r.alloc.reserve(rounds / 2 * kBatch);
  r.free.reserve(rounds / 2 * kBatch);
  auto sub = [overhead](uint64_t d) { return d > overhead ? d - overhead : 0; };
  for (size_t round = 0; round < warmup + rounds; ++round) {
    if (round % kShuffleEvery == 0) {
      for (size_t i = kLive - 1; i > 0; --i) std::swap(perm[i], perm[rng() % (i + 1)]);
    }
    const size_t* slots = &perm[(round % kShuffleEvery) * kBatch];
    const bool timed = round >= warmup;
    const bool per_call = (round % 2) == 0;
    if (timed && per_call) {
      for (size_t j = 0; j < kBatch; ++j) {
        void* const p = live[slots[j]];
        const uint64_t t0 = Tick();
        release(p);
        const uint64_t t1 = Tick();
        r.free.push_back(sub(t1 - t0));
      }
      for (size_t j = 0; j < kBatch; ++j) {
        const size_t n = size();
        const uint64_t t0 = Tick();
        void* const p = alloc(n);
        const uint64_t t1 = Tick();
        r.alloc.push_back(sub(t1 - t0));
        live[slots[j]] = p;
      }
    } else {
      const uint64_t t0 = Tick();
      for (size_t j = 0; j < kBatch; ++j) release(live[slots[j]]);
      const uint64_t t1 = Tick();
      for (size_t j = 0; j < kBatch; ++j) live[slots[j]] = alloc(size());
      const uint64_t t2 = Tick();
      if (timed) {
        r.batch_free.push_back(t1 - t0);
        r.batch_alloc.push_back(t2 - t1);
      }
    }
    for (size_t j = 0; j < kBatch; ++j) {
      if (live[slots[j]] == nullptr) {
        r.error = fmt::format("allocation failed in round {}", round);
        for (void* p : live) {
          if (p != nullptr) release(p);
        }
        return r;
      }
    }
  }
  for (void* p : live) release(p);
  return r;
}

double Quantile(std::vector<uint64_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]);
}

void PrintRow(Result& r, double tpn) {
  if (!r.error.empty()) {
    fmt::print("| {} | {} |||||||| \n", r.name, r.error);
    return;
  }
  auto ns = [tpn](double ticks) { return ticks / tpn; };
  const double ba = Quantile(r.batch_alloc, 0.5) / kBatch;
  const double bf = Quantile(r.batch_free, 0.5) / kBatch;
  const double a50 = ns(Quantile(r.alloc, 0.5)), a99 = ns(Quantile(r.alloc, 0.99)), a999 = ns(Quantile(r.alloc, 0.999));
  const double f50 = ns(Quantile(r.free, 0.5)), f99 = ns(Quantile(r.free, 0.99)), f999 = ns(Quantile(r.free, 0.999));
  fmt::print("| {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |\n", r.name, a50, a99, a999,
             ns(ba), f50, f99, f999, ns(bf));
}

// --- CUDA, loaded at run time (never linked: one binary with or without a GPU) ---
//
// The runtime API (libcudart: cudaMalloc, cudaMallocAsync) when it loads and
// sees a device; else the driver API it sits on (libcuda.so.1: cuMemAlloc,
// cuMemAllocAsync, same allocators underneath) in the device's primary
// context. One wrapper per symbol used; codes are 0 on success in both.

template <typename F>
bool Sym(void* lib, const char* name, F* out) {
  void* p = dlsym(lib, name);
  if (p == nullptr) return false;
  std::memcpy(out, &p, sizeof(p));
  return true;
}

struct CudaApi {
  std::string via;  // "runtime" or "driver"
  std::function<int(void**, size_t)> malloc;
  std::function<int(void*)> free;
  std::function<int(void**)> stream_create;
  std::function<int(void*)> stream_sync;
  std::function<int(void*)> stream_destroy;
  std::function<int(void**, size_t, void*)> malloc_async;  // empty before CUDA 11.2
  std::function<int(void*, void*)> free_async;
  std::function<std::string(int)> error;
};

// Empty string when api is usable; else why not.
std::string LoadRuntime(CudaApi* api) {
  void* lib = nullptr;
  for (const char* name : {"libcudart.so", "libcudart.so.12", "libcudart.so.11.0"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) return "no libcudart.so, libcudart.so.12 or libcudart.so.11.0";
  int (*get_count)(int*) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*malloc_fn)(void**, size_t) = nullptr;
  int (*free_fn)(void*) = nullptr;
  int (*stream_create)(void**) = nullptr;
  int (*stream_sync)(void*) = nullptr;
  int (*stream_destroy)(void*) = nullptr;
  int (*malloc_async)(void**, size_t, void*) = nullptr;
  int (*free_async)(void*, void*) = nullptr;
  const char* (*error)(int) = nullptr;
  if (!Sym(lib, "cudaGetDeviceCount", &get_count) || !Sym(lib, "cudaSetDevice", &set_device) ||
      !Sym(lib, "cudaMalloc", &malloc_fn) || !Sym(lib, "cudaFree", &free_fn) ||
      !Sym(lib, "cudaStreamCreate", &stream_create) || !Sym(lib, "cudaStreamSynchronize", &stream_sync) ||
      !Sym(lib, "cudaStreamDestroy", &stream_destroy) || !Sym(lib, "cudaGetErrorString", &error)) {
    return "libcudart lacks a symbol this benchmark calls";
  }
  int n = 0;
  if (int rc = get_count(&n); rc != 0) return fmt::format("libcudart: cudaGetDeviceCount: {}", error(rc));
  if (n == 0) return "libcudart: cudaGetDeviceCount found no device";
  if (int rc = set_device(0); rc != 0) return fmt::format("libcudart: cudaSetDevice(0): {}", error(rc));
  api->via = "runtime";
  api->malloc = malloc_fn;
  api->free = free_fn;
  api->stream_create = stream_create;
  api->stream_sync = stream_sync;
  api->stream_destroy = stream_destroy;
  if (Sym(lib, "cudaMallocAsync", &malloc_async) && Sym(lib, "cudaFreeAsync", &free_async)) {
    api->malloc_async = malloc_async;
    api->free_async = free_async;
  }
  api->error = [error](int rc) { return std::string(error(rc)); };
  return "";
}

std::string LoadDriver(CudaApi* api) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "no libcuda.so.1";
  using Ptr = unsigned long long;  // CUdeviceptr
  int (*init)(unsigned) = nullptr;
  int (*get_count)(int*) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*retain)(void**, int) = nullptr;
  int (*set_current)(void*) = nullptr;
  int (*malloc_fn)(Ptr*, size_t) = nullptr;
  int (*free_fn)(Ptr) = nullptr;
  int (*stream_create)(void**, unsigned) = nullptr;
  int (*stream_sync)(void*) = nullptr;
  int (*stream_destroy)(void*) = nullptr;
  int (*malloc_async)(Ptr*, size_t, void*) = nullptr;
  int (*free_async)(Ptr, void*) = nullptr;
  int (*error)(int, const char**) = nullptr;
  if (!Sym(lib, "cuInit", &init) || !Sym(lib, "cuDeviceGetCount", &get_count) ||
      !Sym(lib, "cuDeviceGet", &device_get) || !Sym(lib, "cuDevicePrimaryCtxRetain", &retain) ||
      !Sym(lib, "cuCtxSetCurrent", &set_current) || !Sym(lib, "cuMemAlloc_v2", &malloc_fn) ||
      !Sym(lib, "cuMemFree_v2", &free_fn) || !Sym(lib, "cuStreamCreate", &stream_create) ||
      !Sym(lib, "cuStreamSynchronize", &stream_sync) || !Sym(lib, "cuStreamDestroy_v2", &stream_destroy) ||
      !Sym(lib, "cuGetErrorString", &error)) {
    return "libcuda.so.1 lacks a symbol this benchmark calls";
  }
  auto text = [error](int rc) {
    const char* s = nullptr;
    return error(rc, &s) == 0 && s != nullptr ? std::string(s) : fmt::format("CUresult {}", rc);
  };
  if (int rc = init(0); rc != 0) return fmt::format("libcuda: cuInit: {}", text(rc));
  int n = 0;
  if (int rc = get_count(&n); rc != 0) return fmt::format("libcuda: cuDeviceGetCount: {}", text(rc));
  if (n == 0) return "libcuda: cuDeviceGetCount found no device";
  int dev = 0;
  void* ctx = nullptr;
  if (int rc = device_get(&dev, 0); rc != 0) return fmt::format("libcuda: cuDeviceGet(0): {}", text(rc));
  if (int rc = retain(&ctx, dev); rc != 0) return fmt::format("libcuda: cuDevicePrimaryCtxRetain: {}", text(rc));
  if (int rc = set_current(ctx); rc != 0) return fmt::format("libcuda: cuCtxSetCurrent: {}", text(rc));
  api->via = "driver";
  api->malloc = [malloc_fn](void** p, size_t size) {
    Ptr d = 0;
    const int rc = malloc_fn(&d, size);
    *p = reinterpret_cast<void*>(d);
    return rc;
  };
  api->free = [free_fn](void* p) { return free_fn(reinterpret_cast<Ptr>(p)); };
  api->stream_create = [stream_create](void** st) { return stream_create(st, 0); };
  api->stream_sync = stream_sync;
  api->stream_destroy = stream_destroy;
  if (Sym(lib, "cuMemAllocAsync", &malloc_async) && Sym(lib, "cuMemFreeAsync", &free_async)) {
    api->malloc_async = [malloc_async](void** p, size_t size, void* st) {
      Ptr d = 0;
      const int rc = malloc_async(&d, size, st);
      *p = reinterpret_cast<void*>(d);
      return rc;
    };
    api->free_async = [free_async](void* p, void* st) { return free_async(reinterpret_cast<Ptr>(p), st); };
  }
  api->error = text;
  return "";
}

void RunCuda(size_t rounds, uint64_t overhead, double tpn) {
  CudaApi api;
  std::string why = LoadRuntime(&api);
  if (!why.empty()) {
    if (std::string driver = LoadDriver(&api); !driver.empty()) {
      fmt::print("\ncudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync: skipped ({}; {}).\n", why, driver);
      return;
    }
  }
  const bool rt = api.via == "runtime";
  auto check = [&](int rc) {
    if (rc != 0) fmt::print(stderr, "cuda error: {}\n", api.error(rc));
    return rc == 0;
  };
  fmt::print("\nCUDA through the {} API, device 0, {} rounds (the live set stays on the device):\n\n", api.via, rounds);
  Result sync = Measure(
      rt ? "cudaMalloc / cudaFree" : "cuMemAlloc / cuMemFree", rounds, overhead,
      [&](size_t n) -> void* {
        void* p = nullptr;
        return check(api.malloc(&p, n)) ? p : nullptr;
      },
      [&](void* p) { (void)check(api.free(p)); });
  PrintRow(sync, tpn);
  if (!api.malloc_async) {
    fmt::print("| {} | skipped: not in this CUDA (before 11.2) ||||||||\n",
               rt ? "cudaMallocAsync / cudaFreeAsync" : "cuMemAllocAsync / cuMemFreeAsync");
    return;
  }
  void* stream = nullptr;
  if (!check(api.stream_create(&stream))) return;
  Result async = Measure(
      rt ? "cudaMallocAsync / cudaFreeAsync (one stream, default pool)"
         : "cuMemAllocAsync / cuMemFreeAsync (one stream, default pool)",
      rounds, overhead,
      [&](size_t n) -> void* {
        void* p = nullptr;
        return check(api.malloc_async(&p, n, stream)) ? p : nullptr;
      },
      [&](void* p) { (void)check(api.free_async(p, stream)); });
  (void)check(api.stream_sync(stream));
  (void)check(api.stream_destroy(stream));
  PrintRow(async, tpn);
}

}  // namespace

int LatencyMain(int argc, char** argv) {
  size_t rounds = 8192;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) {
      rounds = std::max<size_t>(4, std::strtoull(argv[i] + 9, nullptr, 10));
    }
  }
  const double tpn = TicksPerNs();
  uint64_t step = 0;
  const uint64_t overhead = TimerOverhead(&step);
  const auto ns = [tpn](uint64_t ticks) { return static_cast<double>(ticks) / tpn; };
  fmt::print("Per-call latency, ns: {} rounds of {} frees then {} allocations over {} live blocks,\n", rounds, kBatch,
             kBatch, kLive);
  fmt::print("sizes log-uniform 256 B .. 64 MiB; per-call columns from the {} rounds timed one call at a time\n",
             rounds / 2);
  fmt::print("({} samples each), timer {} ({:.3f} ticks/ns, finest empty reading {} ticks = {:.1f} ns),\n",
             rounds / 2 * kBatch, kTimerName, tpn, step, ns(step));
  fmt::print("its overhead {} ticks = {:.1f} ns (median) subtracted from each sample; batch columns:\n", overhead,
             ns(overhead));
  fmt::print("(time of {} calls in one timer pair) / {}, the median over the other rounds: a mean of {} calls\n",
             kBatch, kBatch, kBatch);
  fmt::print("with no timer overhead or step (a heavy tail lifts it above p50).\n\n");
  fmt::print(
      "| allocator | alloc p50 | alloc p99 | alloc p99.9 | alloc batch | free p50 | free p99 | free p99.9 "
      "| free batch |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");

  {
    drover_mem_options_t o;
    drover_mem_options_init(&o);
    o.reserve_bytes = 64 * kGiB;  // address space only: the pool never touches it
    drover_mem_pool_t pool{0};
    if (int rc = drover_mem_pool_create(&o, &pool); rc != DROVER_MEM_OK) {
      fmt::print("| drover pool | create failed: {} ||||||||\n", drover_mem_strerror(rc));
    } else {
      Result r = Measure(
          "drover pool (C API)", rounds, overhead,
          [&](size_t n) -> void* {
            void* p = nullptr;
            return drover_mem_alloc(pool, n, 0, 0, &p) == DROVER_MEM_OK ? p : nullptr;
          },
          [&](void* p) { (void)drover_mem_free(pool, p); });
      PrintRow(r, tpn);
      (void)drover_mem_pool_destroy(pool);
    }
  }
  {
    memory::Tlsf tlsf(256);
    tlsf.AddRange(uint64_t{1} << 40, 64 * kGiB);
    Result r = Measure(
        "TLSF core (no lock, no handle)", rounds, overhead,
        [&](size_t n) {
          memory::Tlsf::Allocation a;
          return reinterpret_cast<void*>(tlsf.Allocate(n, 256, 0, &a));
        },
        [&](void* p) {
          memory::Tlsf::Allocation a;
          (void)tlsf.Free(reinterpret_cast<uint64_t>(p), &a);
        });
    PrintRow(r, tpn);
  }
  {
    Result r = Measure(
        "glibc malloc / free", rounds, overhead, [](size_t n) { return malloc(n); }, [](void* p) { free(p); });
    PrintRow(r, tpn);
  }
  for (FreeListAllocator::Fit fit : {FreeListAllocator::Fit::kFirst, FreeListAllocator::Fit::kBest}) {
    FreeListAllocator list(fit, uint64_t{1} << 40, 64 * kGiB);
    size_t free_blocks = 0;
    Result r = Measure(
        fit == FreeListAllocator::Fit::kFirst ? "first-fit list" : "best-fit list", rounds, overhead,
        [&](size_t n) { return reinterpret_cast<void*>(list.Allocate(n)); },
        [&](void* p) {
          (void)list.Free(reinterpret_cast<uint64_t>(p));
          free_blocks = std::max(free_blocks, list.free_blocks());
        });
    r.name += fmt::format(" (free list up to {} blocks)", free_blocks);
    PrintRow(r, tpn);
  }
  RunCuda(std::min<size_t>(rounds, 512), overhead, tpn);
  return 0;
}

}  // namespace drover::bench
