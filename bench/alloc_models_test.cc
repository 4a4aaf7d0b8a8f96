// mem_bench's baselines and traces: the free lists place blocks where a
// brute-force model over the gaps between live blocks says first fit and best
// fit would (which also proves coalescing: an unmerged pair of neighbours
// would hide a gap), the caching model follows PyTorch's rounding, pools,
// splitting and empty-the-cache retry, and the traces are deterministic and
// well formed.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unordered_map>

#include "alloc_models.h"
#include "mem_traces.h"

namespace drover::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(AddrTableTest, MatchesAMapUnderRandomInsertAndErase) {
  std::mt19937_64 rng(3);
  AddrTable table;
  std::unordered_map<uint64_t, uint32_t> ref;
  for (int step = 0; step < 200000; ++step) {
    const uint64_t addr = 1 + rng() % 5000;
    if (ref.count(addr) != 0) {
      ASSERT_EQ(table.Find(addr), ref[addr]);
      table.Erase(addr);
      ref.erase(addr);
      ASSERT_EQ(table.Find(addr), AddrTable::kNone);
    } else {
      const uint32_t v = static_cast<uint32_t>(rng());
      table.Insert(addr, v);
      ref[addr] = v;
    }
  }
  for (uint64_t a = 1; a <= 5000; ++a) {
    auto it = ref.find(a);
    ASSERT_EQ(table.Find(a), it == ref.end() ? AddrTable::kNone : it->second) << a;
  }
}

// Where first or best fit must put n bytes, from the live blocks alone.
uint64_t Expected(FreeListAllocator::Fit fit, const std::map<uint64_t, uint64_t>& live, uint64_t base, uint64_t cap,
                  uint64_t n, uint64_t* largest) {
  uint64_t pick = 0, pick_size = UINT64_MAX, at = base;
  *largest = 0;
  auto gap = [&](uint64_t start, uint64_t end) {
    const uint64_t g = end - start;
    *largest = std::max(*largest, g);
    if (g < n) return;
    if (fit == FreeListAllocator::Fit::kFirst ? pick == 0 : g < pick_size) {
      pick = start;
      pick_size = g;
    }
  };
  for (const auto& [a, s] : live) {
    if (a > at) gap(at, a);
    at = a + s;
  }
  if (base + cap > at) gap(at, base + cap);
  return pick;
}

void CheckList(FreeListAllocator::Fit fit) {
  constexpr uint64_t base = uint64_t{1} << 40, cap = 64 * kMiB;
  FreeListAllocator list(fit, base, cap);
  std::map<uint64_t, uint64_t> live;  // addr -> rounded size
  std::mt19937_64 rng(fit == FreeListAllocator::Fit::kFirst ? 1 : 2);
  uint64_t held = 0, top = 0, failures = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      const uint64_t size = 1 + rng() % (rng() % 4 == 0 ? 4 * kMiB : 64 * 1024);
      const uint64_t n = (size + 255) / 256 * 256;
      uint64_t largest = 0;
      const uint64_t want = Expected(fit, live, base, cap, n, &largest);
      ASSERT_EQ(list.State().largest_allocation, largest) << step;
      const uint64_t got = list.Allocate(size);
      ASSERT_EQ(got, want) << "step " << step << " size " << size;
      if (got == 0) {
        ++failures;
        continue;
      }
      live[got] = n;
      held += n;
      top = std::max(top, got + n - base);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      if (it->second > 256) {
        ASSERT_FALSE(list.Free(it->first + 256)) << "an interior address is not a block";
      }
      ASSERT_TRUE(list.Free(it->first));
      ASSERT_FALSE(list.Free(it->first)) << "double free";
      held -= it->second;
      live.erase(it);
    }
    ASSERT_EQ(list.State().held, held);
    ASSERT_EQ(list.State().peak_footprint, top);
  }
  EXPECT_GT(failures, 0u) << "the test should fill the arena sometimes";
  for (const auto& [a, s] : live) ASSERT_TRUE(list.Free(a));
  EXPECT_EQ(list.free_blocks(), 1u) << "everything free merges into one block";
  EXPECT_EQ(list.State().largest_allocation, cap);
}

TEST(FreeListAllocatorTest, FirstFitTakesTheLowestGapThatFits) { CheckList(FreeListAllocator::Fit::kFirst); }
TEST(FreeListAllocatorTest, BestFitTakesTheSmallestGapThatFits) { CheckList(FreeListAllocator::Fit::kBest); }

TEST(CachingAllocatorTest, RoundsTo512AndCarvesSmallRequestsFromTwoMiBSegments) {
  CachingAllocator c(kGiB);
  const uint64_t a = c.Allocate(1);
  const uint64_t b = c.Allocate(513);
  ASSERT_NE(a, 0u);
  EXPECT_EQ(b, a + 512) << "split from the same 2 MiB segment";
  EXPECT_EQ(c.State().held, 512u + 1024u);
  EXPECT_EQ(c.State().footprint, 2 * kMiB);
}

TEST(CachingAllocatorTest, LargeRequestsSplitOnlyWhenMoreThanOneMiBRemains) {
  CachingAllocator c(kGiB);
  const uint64_t a = c.Allocate(3 * kMiB);  // a 20 MiB segment, 17 MiB cached
  EXPECT_EQ(c.State().footprint, 20 * kMiB);
  const uint64_t b = c.Allocate(16 * kMiB + 512 * 1024);  // 512 KiB would remain: not split
  EXPECT_EQ(b, a + 3 * kMiB);
  EXPECT_EQ(c.State().held, 20 * kMiB);
  EXPECT_EQ(c.State().footprint, 20 * kMiB);
  const uint64_t big = c.Allocate(11 * kMiB);  // >= 10 MiB: its own segment, rounded to 2 MiB
  EXPECT_NE(big, 0u);
  EXPECT_EQ(c.State().footprint, 32 * kMiB);
}

TEST(CachingAllocatorTest, ReusesCachedBlocksAndMergesOnlyWithinASegment) {
  CachingAllocator c(kGiB);
  const uint64_t a = c.Allocate(12 * kMiB);
  const uint64_t b = c.Allocate(12 * kMiB);
  ASSERT_TRUE(c.Free(a));
  ASSERT_TRUE(c.Free(b));
  EXPECT_EQ(c.State().footprint, 24 * kMiB) << "freed blocks stay cached";
  EXPECT_EQ(c.Allocate(12 * kMiB), a) << "the cached block of the same size is reused";
  const uint64_t d = c.Allocate(20 * kMiB);
  EXPECT_NE(d, 0u);
  EXPECT_EQ(c.State().footprint, 44 * kMiB) << "two cached 12 MiB segments never serve one 20 MiB request";
}

TEST(CachingAllocatorTest, EmptiesTheCacheAndRetriesWhenTheDeviceIsFull) {
  CachingAllocator c(40 * kMiB);
  const uint64_t a = c.Allocate(12 * kMiB);
  const uint64_t b = c.Allocate(12 * kMiB);
  ASSERT_NE(b, 0u);
  ASSERT_TRUE(c.Free(a));
  EXPECT_NE(c.Allocate(20 * kMiB), 0u) << "12 MiB segment released, 28 MiB free";
  EXPECT_EQ(c.segments_released(), 1u);
  EXPECT_EQ(c.Allocate(20 * kMiB), 0u) << "nothing cached is left to release";
  EXPECT_EQ(c.State().footprint, 32 * kMiB);
  EXPECT_EQ(c.State().largest_allocation, 8 * kMiB);
}

TEST(CachingAllocatorTest, RandomUseKeepsBlocksApartAndTheCapacity) {
  constexpr uint64_t cap = 512 * kMiB;
  CachingAllocator c(cap);
  std::mt19937_64 rng(5);
  std::map<uint64_t, uint64_t> live;
  uint64_t failures = 0;
  for (int step = 0; step < 50000; ++step) {
    if (live.empty() || rng() % 100 < 52) {
      const uint64_t size = 1 + rng() % (rng() % 3 == 0 ? 40 * kMiB : 2 * kMiB);
      const uint64_t a = c.Allocate(size);
      if (a == 0) {
        ++failures;
        continue;
      }
      auto next = live.lower_bound(a);
      ASSERT_TRUE(next == live.end() || next->first >= a + size) << step;
      ASSERT_TRUE(next == live.begin() || std::prev(next)->first + std::prev(next)->second <= a) << step;
      live[a] = size;
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_TRUE(c.Free(it->first));
      live.erase(it);
    }
    ASSERT_LE(c.State().footprint, cap);
  }
  EXPECT_GT(failures, 0u);
  for (const auto& [a, s] : live) ASSERT_TRUE(c.Free(a));
  EXPECT_EQ(c.State().held, 0u);
}

void CheckTrace(const Trace& t) {
  std::vector<uint64_t> size(t.allocations, 0);
  std::vector<bool> freed(t.allocations, false);
  uint64_t live = 0, peak = 0;
  size_t peak_event = 0;
  uint32_t next = 0;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    if (e.size != 0) {
      ASSERT_EQ(e.id, next++) << t.name << " ids count up";
      size[e.id] = e.size;
      live += e.size;
      if (live > peak) {
        peak = live;
        peak_event = i;
      }
    } else {
      ASSERT_LT(e.id, next) << t.name << " frees an allocation not made yet";
      ASSERT_FALSE(freed[e.id]) << t.name << " frees twice";
      freed[e.id] = true;
      live -= size[e.id];
    }
  }
  EXPECT_EQ(next, t.allocations);
  EXPECT_EQ(peak, t.peak_live);
  EXPECT_EQ(peak_event, t.peak_event);
  EXPECT_LT(t.peak_live, 80 * kGiB) << t.name << ": a perfect allocator must fit it";
}

bool SameEvents(const Trace& a, const Trace& b) {
  if (a.events.size() != b.events.size()) return false;
  for (size_t i = 0; i < a.events.size(); ++i) {
    if (a.events[i].id != b.events[i].id || a.events[i].size != b.events[i].size) return false;
  }
  return true;
}

TEST(MemTracesTest, AreWellFormedAndDeterministic) {
  const Trace training = TrainingTrace(1);
  CheckTrace(training);
  EXPECT_TRUE(SameEvents(TrainingTrace(1), training));
  EXPECT_FALSE(SameEvents(TrainingTrace(2), training)) << "the seed picks the batch shapes";
  for (KvLayout layout : {KvLayout::kContiguous, KvLayout::kPaged}) {
    const Trace kv = KvCacheTrace(1, layout, 16, 80 * kGiB);
    CheckTrace(kv);
    EXPECT_TRUE(SameEvents(KvCacheTrace(1, layout, 16, 80 * kGiB), kv));
    EXPECT_FALSE(SameEvents(KvCacheTrace(2, layout, 16, 80 * kGiB), kv));
  }
}

}  // namespace
}  // namespace drover::bench
