#pragma once
// Baseline allocators for bench/mem_bench: what libdrover_mem's TLSF pool is
// compared with. They hand out integer addresses and never touch the memory
// those name (as a GPU allocator must: its metadata lives in host memory), so
// a modelled 80 GiB device costs nothing here.
//
//   FreeListAllocator  the classic address-ordered free list with immediate
//                      coalescing, first fit or best fit, over one arena.
//   CachingAllocator   a model of PyTorch's CUDACachingAllocator (c10/cuda/
//                      CUDACachingAllocator.cpp, default settings): sizes
//                      rounded to 512 B, a small pool (<= 1 MiB) and a large
//                      one, segments of 2 MiB (small), 20 MiB (large requests
//                      under 10 MiB) or the request rounded to 2 MiB, blocks
//                      cached by size (best fit), split inside a segment and
//                      merged only with neighbours of the same segment; when
//                      the device is full, every wholly free segment is
//                      released ("empty the cache") and the segment retried.
//
// Both count the high-water mark of what they hold from their device:
// FreeListAllocator the highest end address handed out (the part of the
// arena that must be backed), CachingAllocator the sum of its segments.
//
// Not thread-safe: one benchmark thread owns each.

#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

namespace drover::bench {

// addr -> block index, open addressing with linear probing and backward-shift
// delete (the same scheme as Tlsf's live table, so the baselines do not pay a
// node allocation per live block that TLSF does not). Address 0 is "empty".
class AddrTable {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  void Insert(uint64_t addr, uint32_t value);
  uint32_t Find(uint64_t addr) const;
  void Erase(uint64_t addr);

 private:
  struct Entry {
    uint64_t addr = 0;
    uint32_t value = kNone;
  };
  size_t Slot(uint64_t addr) const;
  void Grow();
  std::vector<Entry> table_;
  size_t used_ = 0;
  int bits_ = 0;
};

// Snapshot of an allocator for the fragmentation replay.
struct AllocatorState {
  uint64_t held = 0;                // bytes its live blocks hold (after rounding and unsplit remainders)
  uint64_t footprint = 0;           // bytes taken from the device now (see the file comment)
  uint64_t peak_footprint = 0;      // the high-water mark of footprint
  uint64_t largest_allocation = 0;  // the largest request that would succeed now
  bool footprint_known = true;      // false: the high-water mark misses some blocks (stitched ones)
  uint64_t stitches = 0;            // libdrover_mem only: stitched ranges made so far
  uint64_t failed_stitches = 0;     // libdrover_mem only: stitches tried and refused
};

// Invariants:
//   - The blocks tile [base, base + capacity) in address order (prev/next_phys).
//   - No two free blocks are physical neighbours.
//   - The free list holds exactly the free blocks, in address order.
//   - Sizes and addresses are multiples of kAlign.
// Allocation walks the free list from the lowest address: first fit takes the
// first block that fits, best fit the smallest (the first exact fit ends the
// walk). The front of the block is used, the rest stays free in place. Free
// merges with free physical neighbours; a block with no free neighbour is
// linked into the list after the nearest free block below it (found by
// walking physical neighbours down).
class FreeListAllocator {
 public:
  enum class Fit { kFirst, kBest };
  static constexpr uint64_t kAlign = 256;

  FreeListAllocator(Fit fit, uint64_t base, uint64_t capacity);
  // The address, or 0 when no free block fits.
  uint64_t Allocate(uint64_t size);
  // False when no live block starts at addr.
  bool Free(uint64_t addr);
  AllocatorState State() const;
  size_t free_blocks() const { return free_count_; }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Block {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint32_t prev_phys = kNil, next_phys = kNil;
    uint32_t prev_free = kNil, next_free = kNil;
    bool free = false;
  };
  uint32_t NewBlock();
  void Unlink(uint32_t b);
  void LinkAfter(uint32_t after, uint32_t b);  // after == kNil: at the head

  Fit fit_;
  uint64_t base_;
  uint64_t held_ = 0;
  uint64_t top_ = 0;  // highest end address handed out, relative to base
  std::vector<Block> blocks_;
  std::vector<uint32_t> spare_;
  uint32_t head_ = kNil;
  size_t free_count_ = 0;
  AddrTable live_;
};

// See the file comment. Addresses are virtual: each segment gets a fresh
// range above the last, as cudaMalloc's addresses do not matter here; the
// device is modelled as capacity bytes that any segment can take while
// reserved + segment <= capacity (a driver maps pages, so device memory
// itself never fragments).
class CachingAllocator {
 public:
  static constexpr uint64_t kMinBlock = 512;
  static constexpr uint64_t kSmallSize = uint64_t{1} << 20;
  static constexpr uint64_t kSmallBuffer = uint64_t{2} << 20;
  static constexpr uint64_t kLargeBuffer = uint64_t{20} << 20;
  static constexpr uint64_t kMinLargeAlloc = uint64_t{10} << 20;
  static constexpr uint64_t kRoundLarge = uint64_t{2} << 20;

  explicit CachingAllocator(uint64_t capacity);
  uint64_t Allocate(uint64_t size);
  bool Free(uint64_t addr);
  AllocatorState State() const;
  uint64_t segments_released() const { return segments_released_; }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Block {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint32_t prev = kNil, next = kNil;  // neighbours in the same segment
    bool small = false;
    bool allocated = false;
  };
  using Key = std::tuple<uint64_t, uint64_t, uint32_t>;  // size, addr, block
  std::set<Key>& PoolOf(bool small) { return small ? small_pool_ : large_pool_; }
  uint32_t NewBlock();
  // Releases every cached block that is a whole segment (PyTorch's
  // release_cached_blocks): returns whether anything was released.
  bool ReleaseCached();

  uint64_t capacity_;
  uint64_t reserved_ = 0;
  uint64_t peak_reserved_ = 0;
  uint64_t held_ = 0;
  uint64_t next_addr_ = uint64_t{1} << 40;
  uint64_t segments_released_ = 0;
  std::vector<Block> blocks_;
  std::vector<uint32_t> spare_;
  std::set<Key> small_pool_, large_pool_;
  AddrTable live_;
};

}  // namespace drover::bench
