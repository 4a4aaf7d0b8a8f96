// libdrover_mem through its C API (and the C++ wrapper) on the host backend:
// real memory, bad input, exact accounting against a model, threads.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "drover/memory/backend.h"
#include "drover/memory/drover_mem.h"
#include "drover/memory/pool.h"

namespace drover::memory {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

drover_mem_pool_t MakePool(size_t reserve, size_t limit = 0, size_t grow = 0, size_t min_alignment = 256,
                           uint32_t max_tags = 16, uint32_t flags = 0) {
  drover_mem_options_t o;
  drover_mem_options_init(&o);
  o.reserve_bytes = reserve;
  o.limit_bytes = limit;
  o.grow_bytes = grow;
  o.min_alignment = min_alignment;
  o.max_tags = max_tags;
  o.flags = flags;
  drover_mem_pool_t pool{0};
  EXPECT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_OK);
  return pool;
}

drover_mem_stats_t Stats(drover_mem_pool_t pool) {
  drover_mem_stats_t s;
  EXPECT_EQ(drover_mem_stats(pool, &s), DROVER_MEM_OK);
  return s;
}

uint64_t TagBytes(drover_mem_pool_t pool, uint32_t tag) {
  drover_mem_tag_usage_t u;
  EXPECT_EQ(drover_mem_tag_usage(pool, tag, &u), DROVER_MEM_OK);
  return u.bytes_in_use;
}

TEST(PoolTest, AllocatesUsableAlignedMemory) {
  drover_mem_pool_t pool = MakePool(8 * kMiB);
  for (size_t align : {size_t{0}, size_t{1}, size_t{64}, size_t{256}, size_t{4096}, kMiB}) {
    void* p = nullptr;
    ASSERT_EQ(drover_mem_alloc(pool, 3000, align, 1, &p), DROVER_MEM_OK) << align;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(align, 256), 0u) << align;
    memset(p, 0xab, 3000);  // the memory is there and writable
    size_t usable = 0;
    uint32_t tag = 99;
    ASSERT_EQ(drover_mem_usable_size(pool, p, &usable, &tag), DROVER_MEM_OK);
    EXPECT_EQ(usable, 3072u);
    EXPECT_EQ(tag, 1u);
    EXPECT_EQ(drover_mem_free(pool, p), DROVER_MEM_OK);
  }
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_reserved, 8 * kMiB);
  EXPECT_EQ(s.largest_free_block, 8 * kMiB);
  EXPECT_EQ(s.fragmentation, 0.0);
  EXPECT_EQ(s.total_allocations, 6u);
  EXPECT_EQ(s.peak_bytes_in_use, 3072u);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
}

TEST(PoolTest, FreedNeighboursCoalesceSoAFullSizeAllocationSucceedsAgain) {
  drover_mem_pool_t pool = MakePool(4 * kMiB);
  std::vector<void*> blocks(16);
  for (void*& p : blocks) ASSERT_EQ(drover_mem_alloc(pool, 256 * 1024, 0, 0, &p), DROVER_MEM_OK);
  void* extra = nullptr;
  EXPECT_EQ(drover_mem_alloc(pool, 256, 0, 0, &extra), DROVER_MEM_ERR_OUT_OF_MEMORY);
  for (size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(drover_mem_free(pool, blocks[i]), DROVER_MEM_OK);
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.largest_free_block, 256 * 1024u);
  EXPECT_NEAR(s.fragmentation, 1.0 - 1.0 / 8, 1e-9);  // eight free holes of equal size
  void* whole = nullptr;
  EXPECT_EQ(drover_mem_alloc(pool, 4 * kMiB, 0, 0, &whole), DROVER_MEM_ERR_OUT_OF_MEMORY);
  for (size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(drover_mem_free(pool, blocks[i]), DROVER_MEM_OK);
  s = Stats(pool);
  EXPECT_EQ(s.largest_free_block, 4 * kMiB);
  EXPECT_EQ(s.fragmentation, 0.0);
  ASSERT_EQ(drover_mem_alloc(pool, 4 * kMiB, 0, 0, &whole), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(pool, whole), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
}

TEST(PoolTest, BadSizesAndAlignmentsGetCodesAndChangeNothing) {
  drover_mem_pool_t pool = MakePool(kMiB);
  void* live = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 1000, 0, 2, &live), DROVER_MEM_OK);
  const drover_mem_stats_t before = Stats(pool);
  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(drover_mem_alloc(pool, 0, 0, 0, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(drover_mem_alloc(pool, SIZE_MAX, 0, 0, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(pool, static_cast<size_t>(-4096), 0, 0, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(pool, size_t{1} << 62, 0, 0, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(pool, size_t{1} << 40, 0, 0, &p), DROVER_MEM_ERR_TOO_LARGE);
  EXPECT_EQ(drover_mem_alloc(pool, kMiB + 1, 0, 0, &p), DROVER_MEM_ERR_TOO_LARGE);
  EXPECT_EQ(drover_mem_alloc(pool, kMiB, 0, 0, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);  // 1000 bytes are taken
  EXPECT_EQ(drover_mem_alloc(pool, 64, 3, 0, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(drover_mem_alloc(pool, 64, 24, 0, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(drover_mem_alloc(pool, 64, SIZE_MAX, 0, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(drover_mem_alloc(pool, 64, size_t{1} << 63, 0, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(drover_mem_alloc(pool, 64, 2 * kMiB, 0, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);  // above the limit
  EXPECT_EQ(drover_mem_alloc(pool, 64, 0, 16, &p), DROVER_MEM_ERR_INVALID_TAG);
  EXPECT_EQ(drover_mem_alloc(pool, 64, 0, UINT32_MAX, &p), DROVER_MEM_ERR_INVALID_TAG);
  EXPECT_EQ(drover_mem_alloc(pool, 64, 0, 0, nullptr), DROVER_MEM_ERR_INVALID_ARGUMENT);
  const drover_mem_stats_t after = Stats(pool);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.allocations, 1u);
  EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(after.largest_free_block, before.largest_free_block);
  EXPECT_EQ(after.failed_allocations, before.failed_allocations + 14);  // the null out-pointer is not counted
  EXPECT_EQ(TagBytes(pool, 2), 1024u);
  drover_mem_tag_usage_t u;
  EXPECT_EQ(drover_mem_tag_usage(pool, 16, &u), DROVER_MEM_ERR_INVALID_TAG);
  EXPECT_EQ(drover_mem_free(pool, live), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
}

TEST(PoolTest, BadFreesGetCodesAndAccountingStaysExact) {
  drover_mem_pool_t pool = MakePool(kMiB);
  drover_mem_pool_t other = MakePool(kMiB);
  void* a = nullptr;
  void* b = nullptr;
  void* theirs = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 4096, 0, 1, &a), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(pool, 4096, 0, 1, &b), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(other, 4096, 0, 1, &theirs), DROVER_MEM_OK);
  int on_stack = 0;
  void* from_malloc = malloc(64);
  EXPECT_EQ(drover_mem_free(pool, &on_stack), DROVER_MEM_ERR_FOREIGN_POINTER);
  EXPECT_EQ(drover_mem_free(pool, from_malloc), DROVER_MEM_ERR_FOREIGN_POINTER);
  EXPECT_EQ(drover_mem_free(pool, theirs), DROVER_MEM_ERR_FOREIGN_POINTER);
  EXPECT_EQ(drover_mem_free(pool, reinterpret_cast<void*>(UINTPTR_MAX)), DROVER_MEM_ERR_FOREIGN_POINTER);
  EXPECT_EQ(drover_mem_free(pool, static_cast<char*>(a) + 16), DROVER_MEM_ERR_INTERIOR_POINTER);
  EXPECT_EQ(drover_mem_free(pool, static_cast<char*>(b) + 8192), DROVER_MEM_ERR_DOUBLE_FREE);  // never allocated
  EXPECT_EQ(drover_mem_free(pool, nullptr), DROVER_MEM_OK);
  EXPECT_EQ(TagBytes(pool, 1), 8192u);
  EXPECT_EQ(drover_mem_free(pool, a), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(pool, a), DROVER_MEM_ERR_DOUBLE_FREE);
  EXPECT_EQ(drover_mem_free(pool, b), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(pool, b), DROVER_MEM_ERR_DOUBLE_FREE);  // merged into one free block by now
  size_t usable = 0;
  EXPECT_EQ(drover_mem_usable_size(pool, a, &usable, nullptr), DROVER_MEM_ERR_DOUBLE_FREE);
  EXPECT_EQ(drover_mem_usable_size(pool, &on_stack, &usable, nullptr), DROVER_MEM_ERR_FOREIGN_POINTER);
  EXPECT_EQ(drover_mem_usable_size(pool, nullptr, &usable, nullptr), DROVER_MEM_ERR_INVALID_ARGUMENT);
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.allocations, 0u);
  EXPECT_EQ(TagBytes(pool, 1), 0u);
  EXPECT_EQ(Stats(other).bytes_in_use, 4096u);  // the foreign free did not touch its owner
  free(from_malloc);
  EXPECT_EQ(drover_mem_free(other, theirs), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(other), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
}

TEST(PoolTest, DestroyedAndMadeUpHandlesAreRejected) {
  drover_mem_pool_t pool = MakePool(kMiB);
  void* p = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 64, 0, 0, &p), DROVER_MEM_OK);
  void* const kept = p;
  ASSERT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  drover_mem_stats_t s;
  drover_mem_tag_usage_t u;
  size_t usable = 0;
  EXPECT_EQ(drover_mem_alloc(pool, 64, 0, 0, &p), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(drover_mem_free(pool, kept), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_usable_size(pool, kept, &usable, nullptr), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_stats(pool, &s), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_tag_usage(pool, 0, &u), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_trim(pool), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_ERR_INVALID_POOL);
  // The slot is reused by the next pool; the old handle still does not match.
  drover_mem_pool_t next = MakePool(kMiB);
  EXPECT_NE(next.id, pool.id);
  EXPECT_EQ(drover_mem_alloc(pool, 64, 0, 0, &p), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_stats(next, &s), DROVER_MEM_OK);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(drover_mem_alloc(drover_mem_pool_t{0}, 64, 0, 0, &p), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_alloc(drover_mem_pool_t{UINT64_MAX}, 64, 0, 0, &p), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_alloc(drover_mem_pool_t{next.id + (uint64_t{1} << 20)}, 64, 0, 0, &p),
            DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_pool_destroy(next), DROVER_MEM_OK);
}

TEST(PoolTest, BadOptionsAreRejected) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  drover_mem_options_t o;
  drover_mem_pool_t pool{0};
  auto create = [&](auto edit) {
    drover_mem_options_init(&o);
    o.reserve_bytes = kMiB;
    edit(o);
    return drover_mem_pool_create(&o, &pool);
  };
  EXPECT_EQ(create([&](auto& x) { x.limit_bytes = page - 1; }), DROVER_MEM_ERR_LIMIT_TOO_SMALL);
  EXPECT_EQ(create([&](auto& x) { x.limit_bytes = 100; }), DROVER_MEM_ERR_LIMIT_TOO_SMALL);
  EXPECT_EQ(create([&](auto& x) { x.reserve_bytes = 0; }), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(create([&](auto& x) { x.reserve_bytes = SIZE_MAX; }), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(create([&](auto& x) { x.limit_bytes = static_cast<size_t>(-1); }), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(create([&](auto& x) { x.min_alignment = 8; }), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(create([&](auto& x) { x.min_alignment = 0; }), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(create([&](auto& x) { x.min_alignment = 384; }), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(create([&](auto& x) { x.min_alignment = page * 2; }), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(create([&](auto& x) { x.max_tags = 0; }), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(create([&](auto& x) { x.max_tags = 65537; }), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(create([&](auto& x) { x.device = 3; }), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(create([&](auto& x) { x.backend = DROVER_MEM_BACKEND_CUDA; }), DROVER_MEM_ERR_UNSUPPORTED);
  EXPECT_EQ(create([&](auto& x) { x.backend = -1; }), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(create([&](auto& x) { x.backend = 42; }), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(pool.id, 0u);
  EXPECT_EQ(drover_mem_pool_create(nullptr, &pool), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(drover_mem_pool_create(&o, nullptr), DROVER_MEM_ERR_INVALID_ARGUMENT);
  // A limit of exactly one granule is the smallest pool; the reservation is capped by it.
  ASSERT_EQ(create([&](auto& x) { x.limit_bytes = page; }), DROVER_MEM_OK);
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_reserved, page);
  EXPECT_EQ(s.limit_bytes, page);
  void* p = nullptr;
  EXPECT_EQ(drover_mem_alloc(pool, page, 0, 0, &p), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(pool, p), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  EXPECT_STREQ(drover_mem_strerror(DROVER_MEM_ERR_INVALID_POOL), "invalid pool handle (destroyed or never created)");
  EXPECT_STREQ(drover_mem_strerror(12345), "unknown error code");
}

TEST(PoolTest, GrowsBySegmentsUpToTheLimitAndTrims) {
  // Plain sub-allocation: stitching would serve the 200 KiB below from the
  // segments' free tails (backend_test.cc).
  drover_mem_pool_t pool = MakePool(kMiB, 4 * kMiB, kMiB, 256, 16, DROVER_MEM_FLAG_NO_REMAP);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    ASSERT_EQ(drover_mem_alloc(pool, 900 * 1024, 0, 3, &p), DROVER_MEM_OK);
    blocks.push_back(p);
  }
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.segments, 4u);
  EXPECT_EQ(s.bytes_reserved, 4 * kMiB);
  void* p = nullptr;
  EXPECT_EQ(drover_mem_alloc(pool, 200 * 1024, 0, 3, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(drover_mem_alloc(pool, 2 * kMiB, 0, 3, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(drover_mem_alloc(pool, 5 * kMiB, 0, 3, &p), DROVER_MEM_ERR_TOO_LARGE);
  for (void* b : blocks) EXPECT_EQ(drover_mem_free(pool, b), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_trim(pool), DROVER_MEM_OK);
  s = Stats(pool);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.bytes_reserved, kMiB);
  EXPECT_EQ(s.peak_bytes_in_use, 4u * 900 * 1024);
  // Room again for one allocation as large as three segments.
  ASSERT_EQ(drover_mem_alloc(pool, 3 * kMiB, 0, 3, &p), DROVER_MEM_OK);
  EXPECT_EQ(Stats(pool).segments, 2u);
  EXPECT_EQ(drover_mem_free(pool, p), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
}

// Random alloc/free with tags, checked after every step against a model:
// per-tag bytes and counts, totals, usable sizes, no overlap. Once with plain
// sub-allocation and once with stitching (at the limit, large allocations are
// served from scattered free pages).
TEST(PoolTest, RandomSequenceKeepsExactAccounting) {
  constexpr uint32_t kTags = 8;
  for (uint32_t run = 0; run < 6; ++run) {
    const uint32_t seed = 1 + run % 3;
    const uint32_t flags = run < 3 ? DROVER_MEM_FLAG_NO_REMAP : 0;
    SCOPED_TRACE("seed " + std::to_string(seed) + (flags != 0 ? ", plain" : ", stitching"));
    std::mt19937_64 rng(seed);
    drover_mem_pool_t pool = MakePool(2 * kMiB, 6 * kMiB, kMiB, 256, kTags, flags);
    struct Live {
      size_t usable;
      uint32_t tag;
    };
    std::map<uintptr_t, Live> live;
    uint64_t tag_bytes[kTags] = {};
    uint64_t tag_count[kTags] = {};
    uint64_t total = 0;
    uint64_t peak = 0;
    for (int step = 0; step < 6000; ++step) {
      if (live.empty() || rng() % 100 < 55) {
        const size_t size = 1 + rng() % (rng() % 8 == 0 ? 700 * 1024 : 2048);
        const size_t align = size_t{1} << (rng() % 14);
        const uint32_t tag = static_cast<uint32_t>(rng() % kTags);
        void* p = nullptr;
        const int rc = drover_mem_alloc(pool, size, align, tag, &p);
        if (rc == DROVER_MEM_ERR_OUT_OF_MEMORY) continue;
        ASSERT_EQ(rc, DROVER_MEM_OK) << drover_mem_strerror(rc);
        const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
        ASSERT_EQ(addr % std::max<size_t>(align, 256), 0u);
        size_t usable = 0;
        ASSERT_EQ(drover_mem_usable_size(pool, p, &usable, nullptr), DROVER_MEM_OK);
        ASSERT_EQ(usable, (size + 255) / 256 * 256);
        auto next = live.lower_bound(addr);
        if (next != live.end()) {
          ASSERT_LE(addr + usable, next->first);
        }
        if (next != live.begin()) {
          ASSERT_LE(std::prev(next)->first + std::prev(next)->second.usable, addr);
        }
        live[addr] = Live{usable, tag};
        tag_bytes[tag] += usable;
        ++tag_count[tag];
        total += usable;
        peak = std::max(peak, total);
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        ASSERT_EQ(drover_mem_free(pool, reinterpret_cast<void*>(it->first)), DROVER_MEM_OK);
        tag_bytes[it->second.tag] -= it->second.usable;
        --tag_count[it->second.tag];
        total -= it->second.usable;
        live.erase(it);
      }
      if (step % 7 == 0 && !live.empty()) {
        // Bad frees mixed in: an interior pointer, and the first byte after a
        // block (free space or outside the pool) unless another block starts there.
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        const uintptr_t inside = it->first + 16 * (1 + rng() % (it->second.usable / 16 - 1));  // usable >= 256
        ASSERT_EQ(drover_mem_free(pool, reinterpret_cast<void*>(inside)), DROVER_MEM_ERR_INTERIOR_POINTER);
        const uintptr_t after = it->first + it->second.usable;
        if (live.count(after) == 0) {
          const int rc = drover_mem_free(pool, reinterpret_cast<void*>(after));
          ASSERT_TRUE(rc == DROVER_MEM_ERR_DOUBLE_FREE || rc == DROVER_MEM_ERR_FOREIGN_POINTER) << rc;
        }
      }
      const drover_mem_stats_t s = Stats(pool);
      ASSERT_EQ(s.bytes_in_use, total) << "step " << step;
      ASSERT_EQ(s.allocations, live.size());
      ASSERT_EQ(s.peak_bytes_in_use, peak);
      ASSERT_EQ(s.bytes_free, s.bytes_reserved - total);
      ASSERT_LE(s.bytes_reserved, 6 * kMiB);
      ASSERT_LE(s.largest_free_block, s.bytes_free);
      if (step % 50 == 0) {
        for (uint32_t t = 0; t < kTags; ++t) {
          drover_mem_tag_usage_t u;
          ASSERT_EQ(drover_mem_tag_usage(pool, t, &u), DROVER_MEM_OK);
          ASSERT_EQ(u.bytes_in_use, tag_bytes[t]);
          ASSERT_EQ(u.allocations, tag_count[t]);
        }
      }
    }
    for (const auto& [addr, l] : live) ASSERT_EQ(drover_mem_free(pool, reinterpret_cast<void*>(addr)), DROVER_MEM_OK);
    drover_mem_stats_t s = Stats(pool);
    drover_mem_remap_stats_t r;
    ASSERT_EQ(drover_mem_remap_stats(pool, &r), DROVER_MEM_OK);
    EXPECT_EQ(r.stitched_allocations, 0u);
    if (flags != 0) {
      // Segments never merge with each other: free space in three segments
      // is fragmented until the grown ones are trimmed.
      EXPECT_EQ(s.largest_free_block, 2 * kMiB);
      EXPECT_EQ(r.total_stitches, 0u);
    } else {
      EXPECT_GT(r.total_stitches, 0u);  // the run did stitch
    }
    ASSERT_EQ(drover_mem_trim(pool), DROVER_MEM_OK);
    ASSERT_EQ(drover_mem_remap_stats(pool, &r), DROVER_MEM_OK);
    EXPECT_EQ(r.stitched_ranges, 0u);
    s = Stats(pool);
    EXPECT_EQ(s.segments, 1u);
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.bytes_requested, 0u);
    EXPECT_EQ(s.fragmentation, 0.0);
    for (uint32_t t = 0; t < kTags; ++t) EXPECT_EQ(TagBytes(pool, t), 0u);
    EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  }
}

// Several threads allocate and free at once, each writing its id over its
// blocks and checking it before the free: a block handed out twice would be
// overwritten. At a barrier the live blocks of all threads must not overlap;
// at the end the accounting is zero.
TEST(PoolTest, ConcurrentAllocFreeKeepsBlocksApartAndAccountingExact) {
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  drover_mem_pool_t pool = MakePool(4 * kMiB, 32 * kMiB, 4 * kMiB, 256, kThreads);
  std::vector<std::vector<std::pair<uintptr_t, size_t>>> held(kThreads);
  std::atomic<int> errors{0};
  std::barrier all_live(kThreads);
  auto work = [&](int id) {
    std::mt19937_64 rng(static_cast<uint64_t>(id) + 100);
    std::vector<std::pair<unsigned char*, size_t>> mine;
    auto release_one = [&](size_t i) {
      auto [p, n] = mine[i];
      for (size_t k = 0; k < n; k += 97) {
        if (p[k] != static_cast<unsigned char>(id)) errors.fetch_add(1);
      }
      if (drover_mem_free(pool, p) != DROVER_MEM_OK) errors.fetch_add(1);
      mine[i] = mine.back();
      mine.pop_back();
    };
    for (int op = 0; op < kOps; ++op) {
      if (mine.empty() || rng() % 100 < 52) {
        const size_t n = 1 + rng() % 16384;
        void* p = nullptr;
        const int rc = drover_mem_alloc(pool, n, 0, static_cast<uint32_t>(id), &p);
        if (rc == DROVER_MEM_ERR_OUT_OF_MEMORY) continue;
        if (rc != DROVER_MEM_OK) {
          errors.fetch_add(1);
          continue;
        }
        memset(p, id, n);
        mine.emplace_back(static_cast<unsigned char*>(p), n);
      } else {
        release_one(rng() % mine.size());
      }
    }
    for (const auto& [p, n] : mine) held[static_cast<size_t>(id)].emplace_back(reinterpret_cast<uintptr_t>(p), n);
    all_live.arrive_and_wait();  // every thread's blocks are live at once here
    while (!mine.empty()) release_one(mine.size() - 1);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(work, i);
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::vector<std::pair<uintptr_t, size_t>> all;
  for (const auto& h : held) all.insert(all.end(), h.begin(), h.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].first + all[i - 1].second, all[i].first);
  const drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.allocations, 0u);
  for (uint32_t t = 0; t < kThreads; ++t) EXPECT_EQ(TagBytes(pool, t), 0u);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
}

// A pool destroyed while other threads use it: they get INVALID_POOL, never
// a crash.
TEST(PoolTest, DestroyWhileOtherThreadsAllocate) {
  drover_mem_pool_t pool = MakePool(kMiB);
  std::atomic<int> started{0};
  std::atomic<int> bad{0};
  auto work = [&] {
    started.fetch_add(1);
    for (;;) {
      void* p = nullptr;
      const int rc = drover_mem_alloc(pool, 512, 0, 0, &p);
      if (rc == DROVER_MEM_ERR_INVALID_POOL) return;
      if (rc == DROVER_MEM_ERR_OUT_OF_MEMORY) continue;
      if (rc != DROVER_MEM_OK) bad.fetch_add(1);
      const int f = drover_mem_free(pool, p);
      if (f == DROVER_MEM_ERR_INVALID_POOL) return;
      if (f != DROVER_MEM_OK) bad.fetch_add(1);
    }
  };
  std::thread a(work);
  std::thread b(work);
  while (started.load() < 2) std::this_thread::yield();
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(PoolTest, CppWrapperMapsCodesToStatus) {
  auto pool = Pool::Create({.reserve_bytes = kMiB, .max_tags = 4});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  auto p = pool->Allocate(100, 0, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*pool->UsableSize(*p), 256u);
  EXPECT_EQ(pool->TagUsage(3)->bytes_in_use, 256u);
  EXPECT_EQ(pool->Allocate(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(pool->Allocate(2 * kMiB).status().code(), Code::kInvalidArgument);  // can never fit
  EXPECT_EQ(pool->Allocate(kMiB).status().code(), Code::kResourceExhausted);    // cannot fit now
  EXPECT_EQ(pool->Allocate(8, 0, 4).status().message(), "alloc of 8 bytes: tag out of range");
  ASSERT_TRUE(pool->Free(*p).ok());
  EXPECT_EQ(pool->Free(*p).code(), Code::kInvalidArgument);
  EXPECT_EQ(pool->Stats()->bytes_in_use, 0u);
  const drover_mem_pool_t handle = pool->handle();
  Pool moved = std::move(*pool);
  EXPECT_EQ(pool->Allocate(8).status().code(), Code::kFailedPrecondition);  // moved-from
  EXPECT_TRUE(moved.Allocate(8).ok());
  { Pool gone = std::move(moved); }
  void* q = nullptr;
  EXPECT_EQ(drover_mem_alloc(handle, 8, 0, 0, &q), DROVER_MEM_ERR_INVALID_POOL);  // destroyed with its owner
  // No HIP runtime on this machine (backend_test.cc checks the detail).
  int rc = DROVER_MEM_OK;
  if (MakeBackend(DROVER_MEM_BACKEND_HIP, 0, &rc) == nullptr) {
    EXPECT_EQ(Pool::Create({.backend = DROVER_MEM_BACKEND_HIP}).status().code(), Code::kUnimplemented);
  }
}

// A host backend whose Reserve and Commit fail on demand, counting the bytes
// it holds (shared with the test: the pool owns and deletes the backend).
struct BackendLedger {
  bool fail_reserve = false;
  bool fail_commit = false;
  int64_t reserved_bytes = 0;
  int releases = 0;
};

class FaultyBackend final : public MemoryBackend {
 public:
  explicit FaultyBackend(BackendLedger* ledger) : ledger_(ledger) {
    int rc = 0;
    host_ = MakeBackend(DROVER_MEM_BACKEND_HOST, 0, &rc);
  }
  const char* Name() const override { return "faulty-host"; }
  uint64_t Granule() const override { return host_->Granule(); }
  bool SupportsRemap() const override { return true; }
  int Reserve(uint64_t size, uint64_t* base) override {
    if (ledger_->fail_reserve) return DROVER_MEM_ERR_OUT_OF_MEMORY;
    const int rc = host_->Reserve(size, base);
    if (rc == DROVER_MEM_OK) ledger_->reserved_bytes += static_cast<int64_t>(size);
    return rc;
  }
  int Commit(uint64_t base, uint64_t offset, uint64_t size) override {
    if (ledger_->fail_commit) return DROVER_MEM_ERR_BACKEND;
    return host_->Commit(base, offset, size);
  }
  int Decommit(uint64_t base, uint64_t offset, uint64_t size) override { return host_->Decommit(base, offset, size); }
  void Release(uint64_t base, uint64_t size) override {
    ledger_->reserved_bytes -= static_cast<int64_t>(size);
    ++ledger_->releases;
    host_->Release(base, size);
  }

 private:
  BackendLedger* ledger_;
  std::unique_ptr<MemoryBackend> host_;
};

TEST(PoolTest, BackendFailuresAreErrorsAndLeakNothing) {
  BackendLedger ledger;
  drover_mem_options_t o;
  drover_mem_options_init(&o);
  o.reserve_bytes = kMiB;
  o.limit_bytes = 4 * kMiB;
  o.grow_bytes = kMiB;
  drover_mem_pool_t pool{0};
  ledger.fail_reserve = true;
  EXPECT_EQ(CreatePool(std::make_unique<FaultyBackend>(&ledger), o, &pool), DROVER_MEM_ERR_OUT_OF_MEMORY);
  ledger.fail_reserve = false;
  ledger.fail_commit = true;
  EXPECT_EQ(CreatePool(std::make_unique<FaultyBackend>(&ledger), o, &pool), DROVER_MEM_ERR_BACKEND);
  EXPECT_EQ(ledger.reserved_bytes, 0);  // the reservation whose commit failed was released
  EXPECT_EQ(pool.id, 0u);
  ledger.fail_commit = false;
  ASSERT_EQ(CreatePool(std::make_unique<FaultyBackend>(&ledger), o, &pool), DROVER_MEM_OK);
  void* a = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 900 * 1024, 0, 1, &a), DROVER_MEM_OK);
  const drover_mem_stats_t before = Stats(pool);
  void* b = nullptr;
  ledger.fail_reserve = true;  // growing fails: out of memory, nothing changes
  EXPECT_EQ(drover_mem_alloc(pool, 900 * 1024, 0, 1, &b), DROVER_MEM_ERR_OUT_OF_MEMORY);
  ledger.fail_reserve = false;
  ledger.fail_commit = true;
  EXPECT_EQ(drover_mem_alloc(pool, 900 * 1024, 0, 1, &b), DROVER_MEM_ERR_BACKEND);
  ledger.fail_commit = false;
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(s.failed_allocations, before.failed_allocations + 2);
  EXPECT_EQ(ledger.reserved_bytes, static_cast<int64_t>(kMiB));
  ASSERT_EQ(drover_mem_alloc(pool, 900 * 1024, 0, 1, &b), DROVER_MEM_OK);  // and then it grows
  EXPECT_EQ(Stats(pool).segments, 2u);
  EXPECT_EQ(TagBytes(pool, 1), 2u * 900 * 1024);
  ASSERT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);  // with live blocks: all segments go back
  EXPECT_EQ(ledger.reserved_bytes, 0);
  EXPECT_EQ(CreatePool(nullptr, o, &pool), DROVER_MEM_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace drover::memory
