// mem_bench --fragmentation: replays the traces of mem_traces.h against
// libdrover_mem's pool (through its C API) and the baselines of
// alloc_models.h, each over one modelled 80 GiB GPU, and prints per trace:
//
//   peak reserved  the most memory the allocator needed from the device: for
//                  an allocator over one arena (the pool with a single
//                  reservation, the free lists) the highest end address it
//                  ever handed out, i.e. the part of the arena that must be
//                  backed; for one that takes segments (the pool growing by
//                  2 GiB, the caching model) the most its segments summed to.
//   waste          1 - peak live / peak reserved; peak live is the trace's
//                  own (the requested bytes, before any rounding).
//   ext. frag      at the trace's peak of live bytes: 1 - largest request
//                  that would succeed / (capacity - bytes its live blocks
//                  hold). For the caching model the largest request counts
//                  a new segment over the device's unreserved memory plus the
//                  cached whole segments it would release.
//   failed         allocations refused at the capacity (the trace goes on;
//                  a refused block's free is skipped).
//   needed         the smallest capacity, to 1/4 GiB, at which the replay
//                  refuses nothing: a bisection between the peak live bytes
//                  and 160 GiB, one fresh allocator per try (it assumes more
//                  capacity never hurts, which a placement policy does not
//                  promise; "> 160" when even that fails).
//
//   stitches       the pool's stitched ranges made, and in brackets the
//                  stitches it tried and was refused (drover_mem_remap_stats).
//
// The pool's own configurations: "one reservation" reserves the capacity at
// creation (as over a VMM reservation of the whole device); "2 GiB segments"
// reserves 2 GiB and grows by 2 GiB (a larger request gets a segment of its
// size) up to the capacity, and on a refusal trims its empty segments and
// retries once, as the caching allocator empties its cache. Each runs plain
// (DROVER_MEM_FLAG_NO_REMAP: the TLSF allocator alone) and with stitching
// (the default on a VMM backend: a request no free block holds, once the
// pool cannot grow, gets scattered free chunks mapped into one new range).
// The host backend's chunk is a 4 KiB page, where CUDA's is 2 MiB: stitching
// gathers more here than it would on a GPU. The one-reservation pool's peak
// reserved is n/a once it has stitched (stitched blocks take chunks anywhere
// in the reservation). The host backend maps address space and memfd pages
// that nothing touches: no memory is used.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "alloc_models.h"
#include "drover/memory/drover_mem.h"
#include "mem_modes.h"
#include "mem_traces.h"

namespace drover::bench {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kCapacity = 80 * kGiB;
constexpr uint64_t kStep = kGiB / 4;
constexpr uint64_t kMaxCapacity = 160 * kGiB;

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string Name() const = 0;
  virtual uint64_t Allocate(uint64_t size) = 0;  // 0: refused
  virtual void Free(uint64_t addr) = 0;
  virtual AllocatorState State() const = 0;
};

class PoolTarget final : public Target {
 public:
  // segment == 0: one reservation of the whole capacity. remap: the pool's
  // default on a VMM backend (stitching); else DROVER_MEM_FLAG_NO_REMAP.
  PoolTarget(uint64_t segment, bool remap, uint64_t capacity) : segment_(segment), remap_(remap), capacity_(capacity) {
    drover_mem_options_t o;
    drover_mem_options_init(&o);
    o.reserve_bytes = segment == 0 ? capacity : segment;
    o.limit_bytes = capacity;
    o.grow_bytes = segment;
    if (!remap) o.flags |= DROVER_MEM_FLAG_NO_REMAP;
    error_ = drover_mem_pool_create(&o, &pool_);
  }
  ~PoolTarget() override {
    if (error_ == DROVER_MEM_OK) (void)drover_mem_pool_destroy(pool_);
  }
  int error() const { return error_; }
  std::string Name() const override {
    const std::string shape =
        segment_ == 0 ? std::string("one reservation") : fmt::format("{} GiB segments", segment_ / kGiB);
    return fmt::format("drover pool, {}{}", shape, remap_ ? ", stitching" : "");
  }
  uint64_t Allocate(uint64_t size) override {
    void* p = nullptr;
    int rc = drover_mem_alloc(pool_, size, 0, 0, &p);
    if (rc == DROVER_MEM_ERR_OUT_OF_MEMORY && segment_ != 0) {
      (void)drover_mem_trim(pool_);
      rc = drover_mem_alloc(pool_, size, 0, 0, &p);
    }
    if (rc != DROVER_MEM_OK) return 0;
    const uint64_t a = reinterpret_cast<uint64_t>(p);
    if (segment_ == 0) {
      // The first block sits at the reservation's base (TLSF splits the
      // front of its one free block); stitched ranges lie outside it.
      if (base_ == 0) base_ = a;
      size_t usable = 0;
      (void)drover_mem_usable_size(pool_, p, &usable, nullptr);
      if (a >= base_ && a < base_ + capacity_) high_ = std::max(high_, a + usable - base_);
    } else {
      drover_mem_stats_t s;
      (void)drover_mem_stats(pool_, &s);
      peak_reserved_ = std::max(peak_reserved_, s.bytes_reserved);
    }
    return a;
  }
  void Free(uint64_t addr) override { (void)drover_mem_free(pool_, reinterpret_cast<void*>(addr)); }
  AllocatorState State() const override {
    drover_mem_stats_t s;
    (void)drover_mem_stats(pool_, &s);
    drover_mem_remap_stats_t r;
    (void)drover_mem_remap_stats(pool_, &r);
    AllocatorState st;
    st.held = s.bytes_in_use;
    st.footprint = segment_ == 0 ? high_ : s.bytes_reserved;
    st.peak_footprint = segment_ == 0 ? high_ : peak_reserved_;
    // Stitched blocks take free chunks anywhere in the reservation, also
    // above the high-water mark of the blocks placed in it.
    st.footprint_known = segment_ != 0 || r.total_stitches == 0;
    // Growing: a request also fits in a new segment over what is unreserved.
    st.largest_allocation = std::max<uint64_t>(std::max<uint64_t>(s.largest_free_block, r.largest_allocation),
                                               s.limit_bytes - s.bytes_reserved);
    st.stitches = r.total_stitches;
    st.failed_stitches = r.failed_stitches;
    return st;
  }

 private:
  uint64_t segment_;
  bool remap_;
  uint64_t capacity_;
  drover_mem_pool_t pool_{0};
  int error_ = DROVER_MEM_OK;
  uint64_t base_ = 0, high_ = 0, peak_reserved_ = 0;
};

class ListTarget final : public Target {
 public:
  ListTarget(FreeListAllocator::Fit fit, uint64_t capacity) : fit_(fit), list_(fit, uint64_t{1} << 40, capacity) {}
  std::string Name() const override {
    return fit_ == FreeListAllocator::Fit::kFirst ? "first-fit list" : "best-fit list";
  }
  uint64_t Allocate(uint64_t size) override { return list_.Allocate(size); }
  void Free(uint64_t addr) override { (void)list_.Free(addr); }
  AllocatorState State() const override { return list_.State(); }

 private:
  FreeListAllocator::Fit fit_;
  FreeListAllocator list_;
};

class CachingTarget final : public Target {
 public:
  explicit CachingTarget(uint64_t capacity) : model_(capacity) {}
  std::string Name() const override { return "caching (PyTorch model)"; }
  uint64_t Allocate(uint64_t size) override { return model_.Allocate(size); }
  void Free(uint64_t addr) override { (void)model_.Free(addr); }
  AllocatorState State() const override { return model_.State(); }

 private:
  CachingAllocator model_;
};

double GiB(uint64_t b) { return static_cast<double>(b) / static_cast<double>(kGiB); }

constexpr int kTargets = 7;

// Target i over capacity bytes; null (and *error set) when the pool cannot
// be created.
std::unique_ptr<Target> MakeTarget(int i, uint64_t capacity, std::string* error) {
  switch (i) {
    case 0:
    case 1:
    case 2:
    case 3: {
      auto pool = std::make_unique<PoolTarget>(i % 2 == 0 ? 0 : 2 * kGiB, i >= 2, capacity);
      if (pool->error() == DROVER_MEM_OK) return pool;
      *error = fmt::format("{}: create failed: {}", pool->Name(), drover_mem_strerror(pool->error()));
      return nullptr;
    }
    case 4: return std::make_unique<ListTarget>(FreeListAllocator::Fit::kFirst, capacity);
    case 5: return std::make_unique<ListTarget>(FreeListAllocator::Fit::kBest, capacity);
    default: return std::make_unique<CachingTarget>(capacity);
  }
}

struct ReplayResult {
  uint64_t failed = 0, failed_bytes = 0;
  AllocatorState at_peak, end;
  double ns = 0;
};

ReplayResult Replay(const Trace& trace, Target& t) {
  ReplayResult r;
  std::vector<uint64_t> addr(trace.allocations, 0);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.size != 0) {
      addr[e.id] = t.Allocate(e.size);
      if (addr[e.id] == 0) {
        ++r.failed;
        r.failed_bytes += e.size;
      }
    } else if (addr[e.id] != 0) {
      t.Free(addr[e.id]);
      addr[e.id] = 0;
    }
    if (i == trace.peak_event) r.at_peak = t.State();
  }
  r.ns = static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  r.end = t.State();
  for (uint64_t a : addr) {
    if (a != 0) t.Free(a);
  }
  return r;
}

// The smallest capacity (a multiple of kStep) at which target i refuses
// nothing; 0 when kMaxCapacity is not enough. known_ok: a capacity already
// seen to work (0: none).
uint64_t NeededCapacity(const Trace& trace, int i, uint64_t known_ok) {
  uint64_t lo = (trace.peak_live + kStep - 1) / kStep * kStep;  // may work
  uint64_t hi = known_ok != 0 ? known_ok : kMaxCapacity;        // works if anything does
  std::string error;
  auto ok = [&](uint64_t capacity) {
    std::unique_ptr<Target> t = MakeTarget(i, capacity, &error);
    return t != nullptr && Replay(trace, *t).failed == 0;
  };
  if (known_ok == 0 && !ok(hi)) return 0;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / kStep / 2 * kStep;
    if (ok(mid)) {
      hi = mid;
    } else {
      lo = mid + kStep;
    }
  }
  return hi;
}

}  // namespace

int FragmentationMain(int argc, char** argv) {
  uint64_t seed = 1;
  std::string only;
  bool sweep = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-sweep") == 0) sweep = false;
    if (std::strncmp(argv[i], "--seed=", 7) == 0) seed = std::strtoull(argv[i] + 7, nullptr, 10);
    if (std::strncmp(argv[i], "--trace=", 8) == 0) only = argv[i] + 8;
  }
  std::vector<Trace> traces;
  auto want = [&only](const char* name) { return only.empty() || only == name; };
  if (want("training")) traces.push_back(TrainingTrace(seed));
  if (want("kv-contig-16")) traces.push_back(KvCacheTrace(seed, KvLayout::kContiguous, 16, kCapacity));
  if (want("kv-contig-1")) traces.push_back(KvCacheTrace(seed, KvLayout::kContiguous, 1, kCapacity));
  if (want("kv-paged")) traces.push_back(KvCacheTrace(seed, KvLayout::kPaged, 16, kCapacity));
  for (const Trace& trace : traces) {
    fmt::print("\n{} (seed {}): {} events, {} allocations, peak live {:.2f} GiB of {:.0f} GiB\n\n", trace.name, seed,
               trace.events.size(), trace.allocations, GiB(trace.peak_live), GiB(kCapacity));
    fmt::print(
        "| allocator | peak reserved (GiB) | waste | largest free at peak (GiB) | ext. frag at peak | failed "
        "allocs | failed GiB | needed (GiB) | stitches (refused) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    std::string times;
    for (int i = 0; i < kTargets; ++i) {
      std::string error;
      std::unique_ptr<Target> t = MakeTarget(i, kCapacity, &error);
      if (t == nullptr) {
        fmt::print("| {} ||||||||\n", error);
        continue;
      }
      const ReplayResult r = Replay(trace, *t);
      const std::string name = t->Name();
      t.reset();
      const uint64_t free_at_peak = kCapacity - r.at_peak.held;
      const uint64_t largest = std::min(r.at_peak.largest_allocation, free_at_peak);
      const double ext =
          free_at_peak == 0 ? 0.0 : 1.0 - static_cast<double>(largest) / static_cast<double>(free_at_peak);
      const double waste = r.end.peak_footprint == 0
                               ? 0.0
                               : 1.0 - static_cast<double>(trace.peak_live) / static_cast<double>(r.end.peak_footprint);
      const uint64_t needed = sweep ? NeededCapacity(trace, i, r.failed == 0 ? kCapacity : 0) : 0;
      const bool known = r.end.footprint_known;
      fmt::print("| {} | {} | {} | {:.2f} | {:.1f} % | {} | {} | {} | {} |\n", name,
                 known ? fmt::format("{:.2f}", GiB(r.end.peak_footprint)) : std::string("n/a"),
                 known ? fmt::format("{:.1f} %", 100.0 * waste) : std::string("n/a"), GiB(largest), 100.0 * ext,
                 r.failed, r.failed == 0 ? std::string("0") : fmt::format("{:.2f}", GiB(r.failed_bytes)),
                 !sweep        ? std::string("-")
                 : needed == 0 ? fmt::format("> {:.0f}", GiB(kMaxCapacity))
                               : fmt::format("{:.2f}", GiB(needed)),
                 name.find("stitching") != std::string::npos
                     ? fmt::format("{} ({})", r.end.stitches, r.end.failed_stitches)
                     : std::string("-"));
      times +=
          fmt::format("{}{} {:.0f}", times.empty() ? "" : ", ", name, r.ns / static_cast<double>(trace.events.size()));
    }
    // The pool's rows include the replay's drover_mem_usable_size per
    // allocation (and drover_mem_stats, for the growing pool's reservation).
    fmt::print("\nreplay ns per event (not a latency figure: see --latency): {}\n", times);
  }
  return 0;
}

}  // namespace drover::bench
