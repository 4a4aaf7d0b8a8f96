// The TLSF core on integer address ranges (no memory is touched): alignment,
// coalescing, the error-path classification, and a seeded property test
// against a model of live ranges.

#include "drover/memory/tlsf.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace drover::memory {
namespace {

constexpr uint64_t kBase = uint64_t{1} << 32;
constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(TlsfTest, AlignsToRequestAndRoundsSizeToMinimum) {
  Tlsf t(256);
  t.AddRange(kBase + 256, 4 * kMiB);  // base deliberately not 4 KiB-aligned
  Tlsf::Allocation a;
  ASSERT_NE(t.Allocate(1, 256, 0, &a), 0u);
  EXPECT_EQ(a.size, 256u);
  EXPECT_EQ(a.requested, 1u);
  for (uint64_t align : {uint64_t{512}, uint64_t{4096}, uint64_t{65536}, kMiB}) {
    ASSERT_NE(t.Allocate(1000, align, 0, &a), 0u) << align;
    EXPECT_EQ(a.addr % align, 0u) << align;
    EXPECT_EQ(a.size, 1024u);
  }
}

TEST(TlsfTest, FreeNeighboursMergeSoTheWholeRangeFitsAgain) {
  Tlsf t(256);
  const uint64_t size = 3 * kMiB + 768;  // not on a list boundary
  t.AddRange(kBase, size);
  Tlsf::Allocation a;
  Tlsf::Allocation b;
  Tlsf::Allocation c;
  ASSERT_NE(t.Allocate(kMiB, 256, 0, &a), 0u);
  ASSERT_NE(t.Allocate(kMiB, 256, 0, &b), 0u);
  ASSERT_NE(t.Allocate(size - 2 * kMiB, 256, 0, &c), 0u);
  EXPECT_EQ(t.LargestFree(), 0u);
  Tlsf::Allocation whole;
  EXPECT_EQ(t.Allocate(256, 256, 0, &whole), 0u);
  Tlsf::Allocation freed;
  ASSERT_TRUE(t.Free(b.addr, &freed));  // middle: no free neighbour
  EXPECT_EQ(t.LargestFree(), kMiB);
  ASSERT_TRUE(t.Free(a.addr, &freed));  // merges with the middle
  EXPECT_EQ(t.LargestFree(), 2 * kMiB);
  ASSERT_TRUE(t.Free(c.addr, &freed));  // merges both ways
  EXPECT_EQ(t.LargestFree(), size);
  EXPECT_TRUE(t.RangeIsFree(0));
  ASSERT_NE(t.Allocate(size, 256, 0, &whole), 0u);
  EXPECT_EQ(whole.addr, kBase);
}

TEST(TlsfTest, ClassifiesPointersForTheErrorPath) {
  Tlsf t(256);
  t.AddRange(kBase, kMiB);
  Tlsf::Allocation a;
  ASSERT_NE(t.Allocate(4096, 256, 7, &a), 0u);
  EXPECT_EQ(t.Classify(a.addr), Tlsf::Where::kLiveStart);
  EXPECT_EQ(t.Classify(a.addr + 8), Tlsf::Where::kInsideLive);
  EXPECT_EQ(t.Classify(a.addr + 4096), Tlsf::Where::kFree);
  EXPECT_EQ(t.Classify(kBase + kMiB), Tlsf::Where::kOutside);
  EXPECT_EQ(t.Classify(kBase - 1), Tlsf::Where::kOutside);
  Tlsf::Allocation freed;
  EXPECT_FALSE(t.Free(a.addr + 256, &freed));
  ASSERT_TRUE(t.Free(a.addr, &freed));
  EXPECT_EQ(freed.tag, 7u);
  EXPECT_FALSE(t.Free(a.addr, &freed));
  EXPECT_EQ(t.Classify(a.addr), Tlsf::Where::kFree);
}

// Stitching's primitives: the whole free chunks of a range, pinning a part of
// a free block (neither allocatable nor freeable by a caller), unpinning it.
TEST(TlsfTest, PinnedChunksAreTakenOutAndUnpinMergesThemBack) {
  constexpr uint64_t kChunk = 64 * 1024;
  Tlsf t(256);
  const uint32_t range = t.AddRange(kBase, 1 * kMiB);
  Tlsf::Allocation a;
  Tlsf::Allocation b;
  ASSERT_EQ(t.Allocate(1000, 256, 0, &a), kBase);  // [0, 1 KiB) live
  ASSERT_NE(t.Allocate(200 * 1024, 256, 0, &b), 0u);
  ASSERT_EQ(b.addr, kBase + 1024);  // [1 KiB, 201 KiB) live; free: [201 KiB, 1 MiB)
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  t.FreeChunks(range, kChunk, &chunks);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].first, kBase + 256 * 1024);  // 201 KiB rounded up to a chunk
  EXPECT_EQ(chunks[0].second, kMiB - 256 * 1024);
  ASSERT_TRUE(t.Free(a.addr, &a));
  chunks.clear();
  t.FreeChunks(range, kChunk, &chunks);
  EXPECT_EQ(chunks.size(), 1u);  // [0, 1 KiB) holds no whole chunk

  // Pin two chunks from the middle of the free block.
  const uint64_t pin = kBase + 512 * 1024;
  ASSERT_TRUE(t.Pin(pin, 2 * kChunk));
  EXPECT_FALSE(t.Pin(pin, kChunk));               // no longer free
  EXPECT_FALSE(t.Pin(kBase + 4096, kChunk));      // inside a live block
  EXPECT_FALSE(t.Pin(kBase + 960 * 1024, kMiB));  // runs past the free block
  EXPECT_EQ(t.Classify(pin), Tlsf::Where::kPinned);
  EXPECT_EQ(t.Classify(pin + kChunk), Tlsf::Where::kPinned);
  Tlsf::Allocation x;
  EXPECT_FALSE(t.Free(pin, &x));
  EXPECT_FALSE(t.Lookup(pin, &x));
  EXPECT_FALSE(t.RangeIsFree(range));
  chunks.clear();
  t.FreeChunks(range, kChunk, &chunks);
  ASSERT_EQ(chunks.size(), 2u);  // either side of the pinned part
  EXPECT_EQ(chunks[0].second + chunks[1].second, kMiB - 256 * 1024 - 2 * kChunk);
  // No allocation lands on pinned memory: fill everything else.
  std::vector<uint64_t> live;
  while (t.Allocate(kChunk / 2, 256, 0, &x) != 0) {
    EXPECT_TRUE(x.addr + x.size <= pin || x.addr >= pin + 2 * kChunk) << x.addr - kBase;
    live.push_back(x.addr);
  }
  EXPECT_FALSE(t.Unpin(pin + kChunk));  // not the pinned block's start
  ASSERT_TRUE(t.Unpin(pin));
  EXPECT_FALSE(t.Unpin(pin));
  EXPECT_EQ(t.Classify(pin), Tlsf::Where::kFree);
  for (uint64_t addr : live) ASSERT_TRUE(t.Free(addr, &x));
  ASSERT_TRUE(t.Free(b.addr, &x));
  EXPECT_TRUE(t.RangeIsFree(range));  // everything merged back into one block
  EXPECT_EQ(t.LargestFree(), kMiB);
}

TEST(TlsfTest, RemovedRangesAreReused) {
  Tlsf t(256);
  const uint32_t first = t.AddRange(kBase, kMiB);
  for (int i = 0; i < 3; ++i) {
    const uint32_t r = t.AddRange(kBase + 16 * kMiB, 2 * kMiB);
    EXPECT_EQ(r, 1u);
    Tlsf::Allocation a;
    ASSERT_NE(t.Allocate(2 * kMiB, 256, 0, &a), 0u);  // only the second range holds it
    EXPECT_FALSE(t.RangeIsFree(r));
    ASSERT_TRUE(t.Free(a.addr, &a));
    ASSERT_TRUE(t.RangeIsFree(r));
    t.RemoveRange(r);
    EXPECT_EQ(t.Classify(kBase + 16 * kMiB), Tlsf::Where::kOutside);
  }
  EXPECT_TRUE(t.RangeIsFree(first));
  EXPECT_EQ(t.LargestFree(), kMiB);
}

TEST(TlsfTest, ManyLiveBlocksGrowTheTables) {
  Tlsf t(256);
  t.AddRange(kBase, 64 * kMiB);
  std::vector<uint64_t> live;
  Tlsf::Allocation a;
  for (int i = 0; i < 20000; ++i) {
    ASSERT_NE(t.Allocate(256, 256, 0, &a), 0u);
    live.push_back(a.addr);
  }
  for (uint64_t addr : live) ASSERT_TRUE(t.Lookup(addr, &a));
  for (size_t i = 0; i < live.size(); i += 2) ASSERT_TRUE(t.Free(live[i], &a));
  for (size_t i = 1; i < live.size(); i += 2) ASSERT_TRUE(t.Free(live[i], &a));
  EXPECT_EQ(t.LargestFree(), 64 * kMiB);
}

// Random allocate/free over two ranges, checked after every step against a
// model of live blocks: inside a range, aligned, no overlap, size as asked;
// free space = range - live; and at the end everything merges back.
TEST(TlsfTest, RandomSequenceMatchesModel) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::mt19937_64 rng(seed);
    Tlsf t(256);
    const uint64_t r0 = 8 * kMiB;
    const uint64_t r1 = 3 * kMiB + 4096;
    const uint64_t base1 = kBase + 64 * kMiB;
    t.AddRange(kBase, r0);
    t.AddRange(base1, r1);
    std::map<uint64_t, uint64_t> live;  // addr -> size
    uint64_t live_bytes = 0;
    for (int step = 0; step < 20000; ++step) {
      if (live.empty() || rng() % 100 < 55) {
        const uint64_t size = rng() % 3 == 0 ? 1 + rng() % (512 * 1024) : 1 + rng() % 4096;
        const uint64_t align = uint64_t{256} << (rng() % 4 == 0 ? rng() % 10 : 0);
        Tlsf::Allocation a;
        const uint64_t addr = t.Allocate(size, align, static_cast<uint32_t>(step), &a);
        if (addr == 0) continue;  // full: a fit may not exist
        ASSERT_EQ(addr % align, 0u);
        ASSERT_EQ(a.size, (size + 255) / 256 * 256);
        const bool in0 = addr >= kBase && addr + a.size <= kBase + r0;
        const bool in1 = addr >= base1 && addr + a.size <= base1 + r1;
        ASSERT_TRUE(in0 || in1) << std::hex << addr;
        auto next = live.lower_bound(addr);
        if (next != live.end()) {
          ASSERT_LE(addr + a.size, next->first) << "overlap, step " << step;
        }
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second, addr) << "overlap, step " << step;
        }
        live[addr] = a.size;
        live_bytes += a.size;
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        Tlsf::Allocation freed;
        ASSERT_TRUE(t.Free(it->first, &freed));
        ASSERT_EQ(freed.size, it->second);
        live_bytes -= it->second;
        live.erase(it);
      }
      ASSERT_LE(t.LargestFree(), r0 + r1 - live_bytes);
    }
    for (const auto& [addr, size] : live) {
      Tlsf::Allocation freed;
      ASSERT_TRUE(t.Free(addr, &freed));
    }
    EXPECT_TRUE(t.RangeIsFree(0)) << "seed " << seed;
    EXPECT_TRUE(t.RangeIsFree(1)) << "seed " << seed;
    EXPECT_EQ(t.LargestFree(), r0);
  }
}

}  // namespace
}  // namespace drover::memory
