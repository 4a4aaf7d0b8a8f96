// The backends of libdrover_mem and defragmentation by remapping (issue 19
// items 2-3): the host backend's VMM semantics, stitching on host memory and
// on the CUDA driver API (the stand-in libcuda.so.1 of standin_cuda/, real
// mappings of memfd pages), the plain fallback, bad input on remapping
// pools, and HIP reporting itself unavailable where ROCm is absent.

#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drover/memory/backend.h"
#include "drover/memory/drover_mem.h"
#include "drover/memory/pool.h"

namespace drover::memory {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

drover_mem_options_t Options(size_t reserve, size_t limit, size_t grow, uint32_t flags = 0) {
  drover_mem_options_t o;
  drover_mem_options_init(&o);
  o.reserve_bytes = reserve;
  o.limit_bytes = limit;
  o.grow_bytes = grow;
  o.flags = flags;
  return o;
}

drover_mem_stats_t Stats(drover_mem_pool_t pool) {
  drover_mem_stats_t s{};
  EXPECT_EQ(drover_mem_stats(pool, &s), DROVER_MEM_OK);
  return s;
}

drover_mem_remap_stats_t Remap(drover_mem_pool_t pool) {
  drover_mem_remap_stats_t s{};
  EXPECT_EQ(drover_mem_remap_stats(pool, &s), DROVER_MEM_OK);
  return s;
}

unsigned char* Bytes(void* p) { return static_cast<unsigned char*>(p); }
unsigned char* Bytes(uint64_t address) { return reinterpret_cast<unsigned char*>(address); }

// The accounting invariants every pool keeps (drover_mem.h).
void ExpectConsistent(drover_mem_pool_t pool) {
  const drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_free, s.bytes_reserved - s.bytes_in_use);
  EXPECT_LE(s.bytes_reserved, s.limit_bytes);
  EXPECT_LE(s.largest_free_block, s.bytes_free);
  const drover_mem_remap_stats_t r = Remap(pool);
  EXPECT_LE(r.largest_allocation, s.bytes_free);
  EXPECT_LE(r.stitched_allocations, s.allocations);
}

TEST(HostBackendTest, AliasNamesTheSameBytesAndDecommitReturnsThem) {
  int rc = DROVER_MEM_OK;
  std::unique_ptr<MemoryBackend> b = MakeBackend(DROVER_MEM_BACKEND_HOST, 0, &rc);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->SupportsRemap());
  const uint64_t g = b->Granule();
  uint64_t seg = 0;
  uint64_t other = 0;
  ASSERT_EQ(b->Reserve(8 * g, &seg), DROVER_MEM_OK);
  ASSERT_EQ(b->Reserve(4 * g, &other), DROVER_MEM_OK);
  ASSERT_EQ(b->Commit(seg, 0, 8 * g), DROVER_MEM_OK);
  memset(Bytes(seg), 0x11, 8 * g);
  // Chunks 2 and 6 of seg, back to back at other.
  ASSERT_EQ(b->Alias(seg + 2 * g, other, g), DROVER_MEM_OK);
  ASSERT_EQ(b->Alias(seg + 6 * g, other + g, g), DROVER_MEM_OK);
  Bytes(other)[5] = 0xA5;
  Bytes(other + g)[g - 1] = 0x5A;
  EXPECT_EQ(Bytes(seg + 2 * g)[5], 0xA5);
  EXPECT_EQ(Bytes(seg + 7 * g)[-1], 0x5A);
  Bytes(seg + 6 * g)[0] = 0x77;
  EXPECT_EQ(Bytes(other + g)[0], 0x77);
  EXPECT_EQ(b->Unalias(other, 2 * g), DROVER_MEM_OK);
  // An uncommitted source is refused with a reason, nothing mapped.
  EXPECT_EQ(b->Alias(other + 2 * g, other, g), DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(b->last_error().find("not committed"), std::string::npos) << b->last_error();
  // Decommit drops the pages of a part; committing it again gives zeros.
  ASSERT_EQ(b->Decommit(seg, 3 * g, 2 * g), DROVER_MEM_OK);
  EXPECT_EQ(b->Alias(seg + 3 * g, other, g), DROVER_MEM_ERR_INVALID_ARGUMENT);  // no longer committed
  ASSERT_EQ(b->Commit(seg, 3 * g, 2 * g), DROVER_MEM_OK);
  EXPECT_EQ(Bytes(seg + 3 * g)[0], 0);
  EXPECT_EQ(Bytes(seg + 2 * g)[5], 0xA5);  // its neighbours kept their bytes
  EXPECT_EQ(Bytes(seg + 5 * g)[0], 0x11);
  b->Release(other, 4 * g);
  b->Release(seg, 8 * g);
  EXPECT_FALSE(MakePlainHostBackend()->SupportsRemap());
}

// Four 1 MiB segments each hold 900 KiB: 496 KiB are free in four tails of
// 124 KiB, so no 200 KiB block exists and the pool is at its limit.
struct Fragmented {
  drover_mem_pool_t pool{0};
  std::vector<void*> blocks;
};

Fragmented MakeFragmented(std::unique_ptr<MemoryBackend> backend, uint32_t flags) {
  Fragmented f;
  const drover_mem_options_t o = Options(kMiB, 4 * kMiB, kMiB, flags);
  EXPECT_EQ(CreatePool(std::move(backend), o, &f.pool), DROVER_MEM_OK);
  for (int i = 0; i < 4; ++i) {
    void* p = nullptr;
    EXPECT_EQ(drover_mem_alloc(f.pool, 900 * kKiB, 0, 1, &p), DROVER_MEM_OK);
    memset(p, 0x10 + i, 900 * kKiB);
    f.blocks.push_back(p);
  }
  return f;
}

std::unique_ptr<MemoryBackend> Host() {
  int rc = DROVER_MEM_OK;
  return MakeBackend(DROVER_MEM_BACKEND_HOST, 0, &rc);
}

TEST(StitchingTest, PlainSubAllocationCannotServeWhatIsFreeOnlyInScatteredChunks) {
  for (bool plain_backend : {true, false}) {
    Fragmented f =
        plain_backend ? MakeFragmented(MakePlainHostBackend(), 0) : MakeFragmented(Host(), DROVER_MEM_FLAG_NO_REMAP);
    EXPECT_EQ(Remap(f.pool).remaps, 0);
    EXPECT_EQ(Remap(f.pool).chunk, 0u);
    void* p = nullptr;
    EXPECT_EQ(drover_mem_alloc(f.pool, 200 * kKiB, 0, 1, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(p, nullptr);
    const drover_mem_stats_t s = Stats(f.pool);
    EXPECT_EQ(s.bytes_free, 4 * 124 * kKiB);
    EXPECT_EQ(s.largest_free_block, 124 * kKiB);
    EXPECT_EQ(Remap(f.pool).largest_allocation, 124 * kKiB);
    EXPECT_EQ(drover_mem_pool_destroy(f.pool), DROVER_MEM_OK);
  }
}

TEST(StitchingTest, LargeAllocationIsServedFromScatteredFreeChunksOfHostSegments) {
  Fragmented f = MakeFragmented(Host(), 0);
  drover_mem_remap_stats_t r = Remap(f.pool);
  EXPECT_EQ(r.remaps, 1);
  EXPECT_EQ(r.chunk, 4 * kKiB);
  EXPECT_EQ(r.free_chunk_bytes, 4 * 124 * kKiB);
  EXPECT_EQ(r.largest_allocation, 4 * 124 * kKiB);
  EXPECT_NEAR(r.fragmentation, 0.0, 1e-9);  // stitching can use every free byte
  const drover_mem_stats_t before = Stats(f.pool);
  EXPECT_NEAR(before.fragmentation, 0.75, 1e-9);  // without it, a quarter

  void* p = nullptr;
  ASSERT_EQ(drover_mem_alloc(f.pool, 200 * kKiB, 0, 2, &p), DROVER_MEM_OK);
  // The allocation is the segments' free tails mapped back to back: its first
  // byte is the first byte after the first 900 KiB block (the largest pieces
  // come first; all four are 124 KiB, so the first segment's).
  memset(p, 0xC3, 200 * kKiB);
  EXPECT_EQ(Bytes(f.blocks[0])[900 * kKiB], 0xC3);
  EXPECT_EQ(Bytes(f.blocks[1])[900 * kKiB + 75 * kKiB], 0xC3);  // 124 + 76 KiB: the second tail's 76th KiB
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Bytes(f.blocks[static_cast<size_t>(i)])[0], 0x10 + i);
    EXPECT_EQ(Bytes(f.blocks[static_cast<size_t>(i)])[900 * kKiB - 1], 0x10 + i);
  }
  drover_mem_stats_t s = Stats(f.pool);
  EXPECT_EQ(s.bytes_reserved, before.bytes_reserved);  // no new physical memory
  EXPECT_EQ(s.segments, 4u);
  EXPECT_EQ(s.bytes_in_use, 4 * 900 * kKiB + 200 * kKiB);
  EXPECT_EQ(s.allocations, 5u);
  EXPECT_EQ(s.failed_allocations, 0u);
  size_t usable = 0;
  uint32_t tag = 0;
  ASSERT_EQ(drover_mem_usable_size(f.pool, p, &usable, &tag), DROVER_MEM_OK);
  EXPECT_EQ(usable, 200 * kKiB);
  EXPECT_EQ(tag, 2u);
  r = Remap(f.pool);
  EXPECT_EQ(r.stitched_ranges, 1u);
  EXPECT_EQ(r.stitched_bytes, 200 * kKiB);
  EXPECT_EQ(r.stitched_allocations, 1u);
  EXPECT_EQ(r.total_stitches, 1u);
  EXPECT_EQ(r.free_chunk_bytes, 4 * 124 * kKiB - 200 * kKiB);
  ExpectConsistent(f.pool);

  // Bad frees around it: codes, and the accounting does not move.
  EXPECT_EQ(drover_mem_free(f.pool, Bytes(p) + 4096), DROVER_MEM_ERR_INTERIOR_POINTER);
  EXPECT_EQ(drover_mem_free(f.pool, Bytes(f.blocks[0]) + 900 * kKiB), DROVER_MEM_ERR_DOUBLE_FREE);  // lent memory
  EXPECT_EQ(drover_mem_usable_size(f.pool, Bytes(f.blocks[0]) + 900 * kKiB, &usable, nullptr),
            DROVER_MEM_ERR_DOUBLE_FREE);
  EXPECT_EQ(Stats(f.pool).bytes_in_use, s.bytes_in_use);
  EXPECT_EQ(Stats(f.pool).allocations, 5u);

  // Freed, the range stays for the same allocation again (no backend call)...
  ASSERT_EQ(drover_mem_free(f.pool, p), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(f.pool, p), DROVER_MEM_ERR_DOUBLE_FREE);
  EXPECT_EQ(Remap(f.pool).stitched_allocations, 0u);
  void* again = nullptr;
  ASSERT_EQ(drover_mem_alloc(f.pool, 200 * kKiB, 0, 2, &again), DROVER_MEM_OK);
  EXPECT_EQ(again, p);
  EXPECT_EQ(Remap(f.pool).total_stitches, 1u);
  ASSERT_EQ(drover_mem_free(f.pool, again), DROVER_MEM_OK);
  // ... until an allocation needs its chunks: every free chunk at once is
  // served once the idle range is released and its chunks are back.
  void* all = nullptr;
  ASSERT_EQ(drover_mem_alloc(f.pool, 4 * 124 * kKiB, 0, 3, &all), DROVER_MEM_OK);
  r = Remap(f.pool);
  EXPECT_EQ(r.stitched_ranges, 1u);
  EXPECT_EQ(r.total_stitches, 2u);
  EXPECT_EQ(r.stitched_bytes, 4 * 124 * kKiB);
  EXPECT_EQ(r.free_chunk_bytes, 0u);
  EXPECT_EQ(Stats(f.pool).bytes_free, 0u);
  memset(all, 0x3C, 4 * 124 * kKiB);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Bytes(f.blocks[static_cast<size_t>(i)])[900 * kKiB - 1], 0x10 + i);
  ASSERT_EQ(drover_mem_free(f.pool, all), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_trim(f.pool), DROVER_MEM_OK);  // releases the idle range
  EXPECT_EQ(Remap(f.pool).stitched_ranges, 0u);
  s = Stats(f.pool);
  EXPECT_EQ(s.bytes_in_use, 4 * 900 * kKiB);
  EXPECT_EQ(s.largest_free_block, 124 * kKiB);  // the tails are whole again
  EXPECT_EQ(Remap(f.pool).free_chunk_bytes, 4 * 124 * kKiB);
  for (void* b : f.blocks) ASSERT_EQ(drover_mem_free(f.pool, b), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_trim(f.pool), DROVER_MEM_OK);
  s = Stats(f.pool);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.fragmentation, 0.0);
  ExpectConsistent(f.pool);
  EXPECT_EQ(drover_mem_pool_destroy(f.pool), DROVER_MEM_OK);
}

TEST(StitchingTest, RefusalsChangeNothing) {
  Fragmented f = MakeFragmented(Host(), 0);
  const drover_mem_stats_t before = Stats(f.pool);
  void* p = nullptr;
  // More than every free chunk together.
  EXPECT_EQ(drover_mem_alloc(f.pool, 4 * 124 * kKiB + 1, 0, 1, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
  // An alignment beyond the chunk: a stitched range only promises the chunk's.
  EXPECT_EQ(drover_mem_alloc(f.pool, 100 * kKiB, 64 * kKiB, 1, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
  // Bad input never reaches stitching.
  EXPECT_EQ(drover_mem_alloc(f.pool, 0, 0, 1, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(f.pool, SIZE_MAX, 0, 1, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(f.pool, static_cast<size_t>(-4096), 0, 1, &p), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(drover_mem_alloc(f.pool, 200 * kKiB, 3000, 1, &p), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(drover_mem_alloc(f.pool, 5 * kMiB, 0, 1, &p), DROVER_MEM_ERR_TOO_LARGE);
  EXPECT_EQ(p, nullptr);
  const drover_mem_stats_t s = Stats(f.pool);
  EXPECT_EQ(s.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(s.bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(s.largest_free_block, before.largest_free_block);
  EXPECT_EQ(s.failed_allocations, before.failed_allocations + 7);
  const drover_mem_remap_stats_t r = Remap(f.pool);
  EXPECT_EQ(r.stitched_ranges, 0u);
  EXPECT_EQ(r.failed_stitches, 2u);
  EXPECT_EQ(r.free_chunk_bytes, 4 * 124 * kKiB);
  // A misaligned (not a multiple of anything) size that fits is fine.
  ASSERT_EQ(drover_mem_alloc(f.pool, 200 * kKiB + 13, 0, 1, &p), DROVER_MEM_OK);
  size_t usable = 0;
  ASSERT_EQ(drover_mem_usable_size(f.pool, p, &usable, nullptr), DROVER_MEM_OK);
  EXPECT_EQ(usable, 200 * kKiB + 256);
  Bytes(p)[usable - 1] = 1;
  // Use after destroy: the handle is dead, every call says so.
  const drover_mem_pool_t dead = f.pool;
  ASSERT_EQ(drover_mem_pool_destroy(f.pool), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_free(dead, p), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_alloc(dead, 64, 0, 0, &p), DROVER_MEM_ERR_INVALID_POOL);
  drover_mem_remap_stats_t gone{};
  EXPECT_EQ(drover_mem_remap_stats(dead, &gone), DROVER_MEM_ERR_INVALID_POOL);
  EXPECT_EQ(drover_mem_remap_stats(dead, nullptr), DROVER_MEM_ERR_INVALID_ARGUMENT);
  drover_mem_options_t o = Options(kMiB, 0, 0, 0x80);
  drover_mem_pool_t pool{0};
  EXPECT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_ERR_INVALID_ARGUMENT);  // unknown flag
}

// Under pressure a pool gives the physical memory of its free chunks back
// and takes it again when an allocation needs room; live data stays put.
TEST(ReleaseFreeTest, FreeChunksGoBackAndComeBackOnDemand) {
  drover_mem_pool_t pool{0};
  ASSERT_EQ(CreatePool(Host(), Options(4 * kMiB, 4 * kMiB, 0), &pool), DROVER_MEM_OK);
  std::vector<void*> blocks(16);
  for (size_t i = 0; i < blocks.size(); ++i) {
    ASSERT_EQ(drover_mem_alloc(pool, 256 * kKiB, 0, 0, &blocks[i]), DROVER_MEM_OK);
    memset(blocks[i], static_cast<int>(i), 256 * kKiB);
  }
  for (size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(drover_mem_free(pool, blocks[i]), DROVER_MEM_OK);
  size_t released = 0;
  ASSERT_EQ(drover_mem_release_free(pool, &released), DROVER_MEM_OK);
  EXPECT_EQ(released, 2 * kMiB);
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_reserved, 2 * kMiB);
  EXPECT_EQ(s.bytes_free, 0u);
  EXPECT_EQ(s.bytes_in_use, 2 * kMiB);
  EXPECT_EQ(Remap(pool).decommitted_bytes, 2 * kMiB);
  for (size_t i = 0; i < blocks.size(); i += 2) EXPECT_EQ(Bytes(blocks[i])[256 * kKiB - 1], i);
  EXPECT_EQ(drover_mem_free(pool, blocks[1]), DROVER_MEM_ERR_DOUBLE_FREE);  // decommitted free memory
  // An allocation recommits one hole (zeros: fresh pages) and no more.
  void* p = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 256 * kKiB, 0, 0, &p), DROVER_MEM_OK);
  EXPECT_EQ(Bytes(p)[0], 0);
  memset(p, 0x7F, 256 * kKiB);
  s = Stats(pool);
  EXPECT_EQ(s.bytes_reserved, 2 * kMiB + 256 * kKiB);
  EXPECT_EQ(Remap(pool).decommitted_bytes, 2 * kMiB - 256 * kKiB);
  ExpectConsistent(pool);
  // 1 MiB needs four holes: no hole is adjacent to another, so every one is
  // recommitted in turn without making room, and then four are stitched
  // (the pool is at its limit).
  void* big = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, kMiB, 0, 0, &big), DROVER_MEM_OK);
  memset(big, 0x42, kMiB);
  EXPECT_EQ(Stats(pool).bytes_reserved, 4 * kMiB);
  EXPECT_EQ(Remap(pool).decommitted_bytes, 0u);
  EXPECT_EQ(Remap(pool).stitched_bytes, kMiB);
  for (size_t i = 0; i < blocks.size(); i += 2) EXPECT_EQ(Bytes(blocks[i])[0], i);
  EXPECT_EQ(Bytes(p)[256 * kKiB - 1], 0x7F);
  ExpectConsistent(pool);
  ASSERT_EQ(drover_mem_free(pool, big), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_free(pool, p), DROVER_MEM_OK);
  for (size_t i = 0; i < blocks.size(); i += 2) ASSERT_EQ(drover_mem_free(pool, blocks[i]), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_release_free(pool, &released), DROVER_MEM_OK);
  EXPECT_EQ(released, 4 * kMiB);  // the idle stitched range went first, then every chunk
  s = Stats(pool);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.bytes_free, 0u);
  ASSERT_EQ(drover_mem_alloc(pool, 4 * kMiB, 0, 0, &p), DROVER_MEM_OK);  // all of it back, in one piece
  EXPECT_EQ(Stats(pool).bytes_reserved, 4 * kMiB);
  EXPECT_EQ(Remap(pool).decommitted_bytes, 0u);
  ASSERT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  // A grown segment whose only non-free parts are decommitted chunks is
  // released whole by trim.
  ASSERT_EQ(CreatePool(Host(), Options(kMiB, 2 * kMiB, kMiB), &pool), DROVER_MEM_OK);
  void* first = nullptr;
  void* half = nullptr;
  void* quarter = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, kMiB, 0, 0, &first), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(pool, 512 * kKiB, 0, 0, &half), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(pool, 256 * kKiB, 0, 0, &quarter), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_free(pool, half), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_release_free(pool, &released), DROVER_MEM_OK);
  EXPECT_EQ(released, 768 * kKiB);
  ASSERT_EQ(drover_mem_free(pool, quarter), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_trim(pool), DROVER_MEM_OK);
  s = Stats(pool);
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.bytes_reserved, kMiB);
  EXPECT_EQ(s.bytes_free, 0u);
  EXPECT_EQ(Remap(pool).decommitted_bytes, 0u);
  ASSERT_EQ(drover_mem_alloc(pool, kMiB, 0, 0, &half), DROVER_MEM_OK);  // grows again
  EXPECT_EQ(Stats(pool).segments, 2u);
  ASSERT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);

  // Without VMM it trims and gives back nothing else.
  ASSERT_EQ(CreatePool(MakePlainHostBackend(), Options(kMiB, 2 * kMiB, kMiB), &pool), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(pool, kMiB, 0, 0, &p), DROVER_MEM_OK);
  void* q = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, kMiB, 0, 0, &q), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_free(pool, q), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_release_free(pool, &released), DROVER_MEM_OK);
  EXPECT_EQ(released, kMiB);  // the grown segment; the first holds p
  EXPECT_EQ(Stats(pool).bytes_reserved, kMiB);
  ASSERT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_release_free(pool, &released), DROVER_MEM_ERR_INVALID_POOL);
}

TEST(ReleaseFreeTest, CppWrapper) {
  auto pool = Pool::Create({.reserve_bytes = kMiB});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->RemapStats()->remaps, 1);
  auto p = pool->Allocate(100 * kKiB);
  ASSERT_TRUE(p.ok());
  auto released = pool->ReleaseFree();
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(*released, kMiB - 100 * kKiB);
  EXPECT_EQ(pool->RemapStats()->decommitted_bytes, kMiB - 100 * kKiB);
  auto plain = Pool::Create({.reserve_bytes = kMiB, .flags = DROVER_MEM_FLAG_NO_REMAP});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->RemapStats()->remaps, 0);
  EXPECT_EQ(Pool::Create({.flags = 2}).status().code(), Code::kInvalidArgument);
}

// ---- CUDA, through the stand-in driver ----------------------------------------

// The stand-in's device has 64 MiB (set before its cuInit, which reads it):
// small enough that a test can fill it.
const bool kStandInMemorySet = setenv("DROVER_STANDIN_CUDA_MEMORY", "67108864", 0) == 0;

std::unique_ptr<MemoryBackend> StandInCuda(bool force_plain = false, int* rc = nullptr, std::string* detail = nullptr) {
  CudaBackendOptions o;
  o.library = DROVER_TEST_STANDIN_LIBCUDA;
  o.force_plain = force_plain;
  int local_rc = DROVER_MEM_OK;
  std::string local_detail;
  auto b = MakeCudaBackend(o, rc != nullptr ? rc : &local_rc, detail != nullptr ? detail : &local_detail);
  EXPECT_NE(b, nullptr) << local_detail;
  return b;
}

// Two 8 MiB segments of 2 MiB blocks with every other block freed: 8 MiB
// free in four 2 MiB holes, no two adjacent, and the pool at its limit.
struct Holes {
  drover_mem_pool_t pool{0};
  std::vector<void*> kept;
  std::vector<uint64_t> holes;
};

Holes MakeHoles(std::unique_ptr<MemoryBackend> backend, uint32_t flags) {
  Holes h;
  const drover_mem_options_t o = Options(8 * kMiB, 16 * kMiB, 8 * kMiB, flags);
  EXPECT_EQ(CreatePool(std::move(backend), o, &h.pool), DROVER_MEM_OK);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    void* p = nullptr;
    EXPECT_EQ(drover_mem_alloc(h.pool, 2 * kMiB, 0, 0, &p), DROVER_MEM_OK);
    if (p == nullptr) return h;
    memset(p, i, 2 * kMiB);  // the stand-in's device memory is host memory
    blocks.push_back(p);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i % 2 == 0) {
      h.kept.push_back(blocks[i]);
    } else {
      h.holes.push_back(reinterpret_cast<uint64_t>(blocks[i]));
      EXPECT_EQ(drover_mem_free(h.pool, blocks[i]), DROVER_MEM_OK);
    }
  }
  return h;
}

TEST(CudaBackendTest, StandInHasVmmAndTheBackendSaysSo) {
  int rc = DROVER_MEM_OK;
  std::string detail;
  auto b = StandInCuda(false, &rc, &detail);
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->Name(), "cuda");
  EXPECT_TRUE(b->SupportsRemap());
  EXPECT_EQ(b->Granule(), 2 * kMiB);
  auto plain = StandInCuda(true);
  ASSERT_NE(plain, nullptr);
  EXPECT_STREQ(plain->Name(), "cuda-plain");
  EXPECT_FALSE(plain->SupportsRemap());
  CudaBackendOptions o;
  o.library = "/nonexistent/libcuda.so.1";
  EXPECT_EQ(MakeCudaBackend(o, &rc, &detail), nullptr);
  EXPECT_EQ(rc, DROVER_MEM_ERR_UNSUPPORTED);
  EXPECT_NE(detail.find("/nonexistent/libcuda.so.1"), std::string::npos) << detail;
  o.library = DROVER_TEST_STANDIN_LIBCUDA;
  o.device = 7;
  EXPECT_EQ(MakeCudaBackend(o, &rc, &detail), nullptr);
  EXPECT_EQ(rc, DROVER_MEM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(detail, "CUDA device 7 of 1");
  o.device = 0;
  o.chunk_bytes = 3 * kMiB;
  EXPECT_EQ(MakeCudaBackend(o, &rc, &detail), nullptr);
  EXPECT_EQ(rc, DROVER_MEM_ERR_INVALID_ARGUMENT);
}

TEST(CudaBackendTest, PlainCudaSubAllocatorFailsWhereVmmStitchingSucceeds) {
  for (bool force_plain : {true, false}) {
    for (uint32_t flags : {0u, static_cast<uint32_t>(DROVER_MEM_FLAG_NO_REMAP)}) {
      SCOPED_TRACE(std::string(force_plain ? "cuMemAlloc" : "VMM") + (flags != 0 ? ", no remap" : ""));
      const bool stitches = !force_plain && flags == 0;
      Holes h = MakeHoles(StandInCuda(force_plain), flags);
      ASSERT_EQ(h.holes.size(), 4u);
      EXPECT_EQ(Remap(h.pool).remaps, stitches ? 1 : 0);
      EXPECT_EQ(Stats(h.pool).largest_free_block, 2 * kMiB);
      void* p = nullptr;
      const int rc = drover_mem_alloc(h.pool, 6 * kMiB, 0, 5, &p);
      if (!stitches) {
        EXPECT_EQ(rc, DROVER_MEM_ERR_OUT_OF_MEMORY);
        EXPECT_EQ(Stats(h.pool).bytes_in_use, 8 * kMiB);
      } else {
        ASSERT_EQ(rc, DROVER_MEM_OK);
        // Three of the holes, mapped back to back into a new range: writing
        // the allocation writes the holes' physical memory.
        memset(p, 0xEE, 6 * kMiB);
        int holes_written = 0;
        for (uint64_t hole : h.holes) holes_written += Bytes(hole)[0] == 0xEE && Bytes(hole)[2 * kMiB - 1] == 0xEE;
        EXPECT_EQ(holes_written, 3);
        for (size_t i = 0; i < h.kept.size(); ++i) {
          EXPECT_EQ(Bytes(h.kept[i])[0], 2 * i);
          EXPECT_EQ(Bytes(h.kept[i])[2 * kMiB - 1], 2 * i);
        }
        const drover_mem_stats_t s = Stats(h.pool);
        EXPECT_EQ(s.bytes_reserved, 16 * kMiB);
        EXPECT_EQ(s.bytes_in_use, 14 * kMiB);
        EXPECT_EQ(s.largest_free_block, 2 * kMiB);
        const drover_mem_remap_stats_t r = Remap(h.pool);
        EXPECT_EQ(r.stitched_bytes, 6 * kMiB);
        EXPECT_EQ(r.free_chunk_bytes, 2 * kMiB);
        ExpectConsistent(h.pool);
        EXPECT_EQ(drover_mem_free(h.pool, Bytes(p) + 2 * kMiB), DROVER_MEM_ERR_INTERIOR_POINTER);
        ASSERT_EQ(drover_mem_free(h.pool, p), DROVER_MEM_OK);
        EXPECT_EQ(drover_mem_free(h.pool, p), DROVER_MEM_ERR_DOUBLE_FREE);
        EXPECT_EQ(Stats(h.pool).bytes_in_use, 8 * kMiB);
      }
      ExpectConsistent(h.pool);
      EXPECT_EQ(drover_mem_pool_destroy(h.pool), DROVER_MEM_OK);  // stitched range and all: no leak, no crash
    }
  }
}

// The device, not the pool's limit, runs out: a second pool holds the rest of
// the stand-in's memory, so growing fails with CUDA_ERROR_OUT_OF_MEMORY and
// the pool stitches instead.
TEST(CudaBackendTest, StitchesWhenTheDeviceIsOutOfMemory) {
  ASSERT_TRUE(kStandInMemorySet);
  // A pool that may take everything grows 2 MiB at a time until cuMemCreate
  // refuses; it then gives 16 MiB back.
  drover_mem_options_t all = Options(2 * kMiB, size_t{1} << 40, 2 * kMiB);
  drover_mem_pool_t hog{0};
  ASSERT_EQ(CreatePool(StandInCuda(), all, &hog), DROVER_MEM_OK);
  std::vector<void*> hogged;
  for (;;) {
    void* p = nullptr;
    const int rc = drover_mem_alloc(hog, 2 * kMiB, 0, 0, &p);
    if (rc != DROVER_MEM_OK) {
      ASSERT_EQ(rc, DROVER_MEM_ERR_OUT_OF_MEMORY);
      break;
    }
    hogged.push_back(p);
    ASSERT_LE(hogged.size(), 32u) << "the stand-in's device should hold 64 MiB";
  }
  ASSERT_GE(hogged.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(drover_mem_free(hog, hogged.back()), DROVER_MEM_OK);
    hogged.pop_back();
  }
  ASSERT_EQ(drover_mem_trim(hog), DROVER_MEM_OK);
  EXPECT_EQ(Stats(hog).bytes_reserved, hogged.size() * 2 * kMiB);
  Holes h;
  const drover_mem_options_t o = Options(8 * kMiB, size_t{1} << 40, 8 * kMiB);
  ASSERT_EQ(CreatePool(StandInCuda(), o, &h.pool), DROVER_MEM_OK);
  std::vector<void*> blocks;
  for (;;) {
    void* p = nullptr;
    if (drover_mem_alloc(h.pool, 2 * kMiB, 0, 0, &p) != DROVER_MEM_OK) break;
    blocks.push_back(p);
  }
  ASSERT_EQ(blocks.size(), 8u);  // 16 MiB: the device is full
  for (size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(drover_mem_free(h.pool, blocks[i]), DROVER_MEM_OK);
  const size_t holes = blocks.size() / 2;
  void* p = nullptr;
  ASSERT_EQ(drover_mem_alloc(h.pool, holes * 2 * kMiB, 0, 0, &p), DROVER_MEM_OK);
  memset(p, 1, holes * 2 * kMiB);
  EXPECT_EQ(Remap(h.pool).stitched_bytes, holes * 2 * kMiB);
  EXPECT_EQ(Stats(h.pool).bytes_reserved, 16 * kMiB);
  EXPECT_EQ(Stats(h.pool).failed_allocations, 1u);  // the probe that found the device full
  ExpectConsistent(h.pool);
  EXPECT_EQ(drover_mem_pool_destroy(h.pool), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(hog), DROVER_MEM_OK);
}

// drover_mem_release_free gives device memory back for real: another pool
// can then take it.
TEST(CudaBackendTest, ReleasedChunksGoBackToTheDevice) {
  ASSERT_TRUE(kStandInMemorySet);
  drover_mem_pool_t a{0};
  ASSERT_EQ(CreatePool(StandInCuda(), Options(32 * kMiB, 32 * kMiB, 0), &a), DROVER_MEM_OK);
  std::vector<void*> blocks(16);
  for (void*& p : blocks) ASSERT_EQ(drover_mem_alloc(a, 2 * kMiB, 0, 0, &p), DROVER_MEM_OK);
  for (size_t i = 1; i < blocks.size(); i += 2) ASSERT_EQ(drover_mem_free(a, blocks[i]), DROVER_MEM_OK);
  drover_mem_pool_t b{0};
  EXPECT_EQ(CreatePool(StandInCuda(), Options(48 * kMiB, 0, 0), &b), DROVER_MEM_ERR_OUT_OF_MEMORY);  // 32 left
  size_t released = 0;
  ASSERT_EQ(drover_mem_release_free(a, &released), DROVER_MEM_OK);
  EXPECT_EQ(released, 16 * kMiB);
  ASSERT_EQ(CreatePool(StandInCuda(), Options(48 * kMiB, 0, 0), &b), DROVER_MEM_OK);  // 48 left now
  // Pool a cannot take its chunks back while b holds them: out of memory,
  // and nothing changed.
  void* p = nullptr;
  EXPECT_EQ(drover_mem_alloc(a, 2 * kMiB, 0, 0, &p), DROVER_MEM_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(Stats(a).bytes_reserved, 16 * kMiB);
  EXPECT_EQ(Remap(a).decommitted_bytes, 16 * kMiB);
  ExpectConsistent(a);
  ASSERT_EQ(drover_mem_pool_destroy(b), DROVER_MEM_OK);
  ASSERT_EQ(drover_mem_alloc(a, 2 * kMiB, 0, 0, &p), DROVER_MEM_OK);
  memset(p, 9, 2 * kMiB);
  EXPECT_EQ(Stats(a).bytes_reserved, 18 * kMiB);
  ASSERT_EQ(drover_mem_pool_destroy(a), DROVER_MEM_OK);
}

// Sizes that are not multiples of the 2 MiB chunk: reservations round up,
// limits down, and what cannot work is an error code.
TEST(CudaBackendTest, MisalignedPoolSizesAreRoundedOrRefused) {
  drover_mem_pool_t pool{0};
  ASSERT_EQ(CreatePool(StandInCuda(), Options(3 * kMiB, 5 * kMiB, 1), &pool), DROVER_MEM_OK);
  drover_mem_stats_t s = Stats(pool);
  EXPECT_EQ(s.bytes_reserved, 4 * kMiB);
  EXPECT_EQ(s.limit_bytes, 4 * kMiB);
  void* p = nullptr;
  EXPECT_EQ(drover_mem_alloc(pool, 4 * kMiB + 1, 0, 0, &p), DROVER_MEM_ERR_TOO_LARGE);
  ASSERT_EQ(drover_mem_alloc(pool, 4 * kMiB - 7, 0, 0, &p), DROVER_MEM_OK);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  EXPECT_EQ(CreatePool(StandInCuda(), Options(kMiB, kMiB, 0), &pool), DROVER_MEM_ERR_LIMIT_TOO_SMALL);
  drover_mem_options_t o = Options(kMiB, 0, 0);
  o.min_alignment = 4 * kMiB;  // above the chunk
  EXPECT_EQ(CreatePool(StandInCuda(), o, &pool), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  o.min_alignment = 100;  // not a power of two
  EXPECT_EQ(CreatePool(StandInCuda(), o, &pool), DROVER_MEM_ERR_INVALID_ALIGNMENT);
  EXPECT_EQ(CreatePool(StandInCuda(), Options(0, 0, 0), &pool), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(CreatePool(StandInCuda(), Options(SIZE_MAX, 0, 0), &pool), DROVER_MEM_ERR_INVALID_SIZE);
  EXPECT_EQ(pool.id, 0u);
}

TEST(CudaBackendTest, CApiFindsTheDriverThroughTheEnvironment) {
  ASSERT_EQ(setenv("DROVER_LIBCUDA", DROVER_TEST_STANDIN_LIBCUDA, 1), 0);
  drover_mem_options_t o = Options(4 * kMiB, 0, 0);
  o.backend = DROVER_MEM_BACKEND_CUDA;
  drover_mem_pool_t pool{0};
  ASSERT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_OK);
  EXPECT_EQ(Stats(pool).granule, 2 * kMiB);
  EXPECT_EQ(Remap(pool).remaps, 1);
  void* p = nullptr;
  ASSERT_EQ(drover_mem_alloc(pool, 1000, 0, 0, &p), DROVER_MEM_OK);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(drover_mem_pool_destroy(pool), DROVER_MEM_OK);
  o.device = 3;
  EXPECT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(setenv("DROVER_LIBCUDA", "/nonexistent/libcuda.so.1", 1), 0);
  o.device = 0;
  EXPECT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_ERR_UNSUPPORTED);
  EXPECT_EQ(pool.id, 0u);
  ASSERT_EQ(unsetenv("DROVER_LIBCUDA"), 0);
}

// ---- HIP: absent here --------------------------------------------------------

TEST(HipBackendTest, AbsentRuntimeIsUnsupportedWithTheReason) {
  int rc = DROVER_MEM_OK;
  std::string detail;
  std::unique_ptr<MemoryBackend> b = MakeHipBackend(0, "", &rc, &detail);
  if (b != nullptr) GTEST_SKIP() << "a HIP runtime is installed here (" << b->Name() << ")";
  EXPECT_EQ(rc, DROVER_MEM_ERR_UNSUPPORTED);
  EXPECT_NE(detail.find("libamdhip64"), std::string::npos) << detail;
  EXPECT_EQ(MakeHipBackend(0, "/nonexistent/libamdhip64.so", &rc, &detail), nullptr);
  EXPECT_EQ(rc, DROVER_MEM_ERR_UNSUPPORTED);
  EXPECT_NE(detail.find("/nonexistent/libamdhip64.so"), std::string::npos) << detail;
  drover_mem_options_t o = Options(kMiB, 0, 0);
  o.backend = DROVER_MEM_BACKEND_HIP;
  drover_mem_pool_t pool{1234};
  EXPECT_EQ(drover_mem_pool_create(&o, &pool), DROVER_MEM_ERR_UNSUPPORTED);
  EXPECT_EQ(pool.id, 0u);
}

}  // namespace
}  // namespace drover::memory
