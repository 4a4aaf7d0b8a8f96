#pragma once
// Tlsf: a two-level segregated-fit allocator over address ranges.
//
// It hands out ranges of integer addresses and never touches the memory they
// name, so the same code sub-allocates host memory, a GPU's memory or a
// virtual range of a VMM reservation. Block descriptors live in a host-side
// array and live blocks are found by address through an open-addressing hash
// table: the managed memory holds no headers.
//
// Free blocks sit in 64 x 32 segregated lists. A size (in units of the minimum
// alignment) maps to a first level, its highest set bit, and a second level,
// the next five bits; a bitmap per level finds the first non-empty list that
// can hold a request in O(1) (two find-first-set instructions). Allocation
// rounds the request up to the next list boundary ("good fit"), so any block
// of the list found is large enough; the remainder is split off and filed.
// Free merges the block with free physical neighbours at once.
//
// Worked example (min alignment 256, so one unit = 256 bytes): 100 KiB is 400
// units; 400 = 0b1_1001_0000, highest bit 8, so first level 8 - 5 + 1 = 4 and
// second level (400 >> 3) - 32 = 18; the list holds 400 .. 407 units. A request
// for 401 units rounds up to 408 (list (4, 19)) and takes any block from the
// first non-empty list at or after it.
//
// Invariants:
//   - The blocks of a range tile it exactly, in address order (prev/next_phys).
//   - No two free blocks are physical neighbours (immediate coalescing).
//   - A free block is in exactly the list Mapping(size) names; its bit is set
//     iff the list is non-empty. Live blocks are in the hash table, free ones
//     are not.
//   - Addresses and sizes are multiples of the minimum alignment.
//
// Not thread-safe: the owning pool serializes calls. Knows nothing of tags,
// limits or backends (the pool's business).

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace drover::memory {

class Tlsf {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;

  // What a pointer is to this allocator (for the error path of free).
  // kPinned: inside a block the owner took out with Pin (memory lent to a
  // stitched range, see pool.cc), which no caller allocation owns.
  enum class Where { kLiveStart, kInsideLive, kFree, kPinned, kOutside };

  // min_alignment: a power of two >= 16; every address and size is a multiple.
  explicit Tlsf(uint64_t min_alignment);

  // Adds [base, base + size) as one free block. size: a non-zero multiple of
  // the minimum alignment; base aligned and non-zero. Returns the range's id.
  uint32_t AddRange(uint64_t base, uint64_t size);
  // Removes a range that is entirely free (see RangeIsFree).
  void RemoveRange(uint32_t range);
  bool RangeIsFree(uint32_t range) const;

  // A live block as the caller sees it.
  struct Allocation {
    uint64_t addr = 0;
    uint64_t size = 0;       // the block: the request rounded up to the minimum alignment
    uint64_t requested = 0;  // what was asked for
    uint32_t tag = 0;        // the caller's, kept with the block
  };

  // Allocates size bytes (rounded up to the minimum alignment) at an address
  // aligned to alignment (a power of two >= the minimum). Returns the address
  // (and *out), or 0 when no free block fits. size and alignment must be
  // checked by the caller (non-zero size, size + alignment below 2^63).
  uint64_t Allocate(uint64_t size, uint64_t alignment, uint32_t tag, Allocation* out);

  // Frees the live block that starts at addr; false (nothing changed) when no
  // live block starts there. *out gets what was freed.
  bool Free(uint64_t addr, Allocation* out);

  // The live block starting at addr; false when there is none.
  bool Lookup(uint64_t addr, Allocation* out) const;

  // Walks the ranges: slow, for the error path.
  Where Classify(uint64_t addr) const;

  // Remapping support (pool.cc's stitching). A pinned block is live memory
  // that no caller owns: Free, Lookup and the hash table's callers never see
  // it, only Unpin returns it to the free lists.
  //
  // Appends to *out the chunk-aligned parts (addr, size) of range's free
  // blocks: the whole chunks a remapping backend can map elsewhere. chunk:
  // a power of two, a multiple of the minimum alignment. Walks the range.
  void FreeChunks(uint32_t range, uint64_t chunk, std::vector<std::pair<uint64_t, uint64_t>>* out) const;
  // Takes [addr, addr + size) out of the free block that holds it as a pinned
  // block; false (nothing changed) when no single free block holds it.
  bool Pin(uint64_t addr, uint64_t size);
  // Frees a pinned block (merging with free neighbours); false when no pinned
  // block starts at addr.
  bool Unpin(uint64_t addr);
  // True when every block of the range is free or pinned (walks the range).
  bool RangeHoldsNoLive(uint32_t range) const;

  // The largest free block (scans one list: not for the hot path).
  uint64_t LargestFree() const;

  uint64_t min_alignment() const { return uint64_t{1} << shift_; }

 private:
  static constexpr int kSlLog2 = 5;
  static constexpr int kSlCount = 1 << kSlLog2;
  static constexpr int kFlCount = 64;

  struct Block {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;  // live blocks only
    uint32_t tag = 0;        // live blocks only
    uint32_t prev_phys = kNil;
    uint32_t next_phys = kNil;
    uint32_t prev_free = kNil;
    uint32_t next_free = kNil;
    bool free = false;
    bool pinned = false;  // live, owned by the pool (see Pin)
  };
  struct Range {
    uint64_t base = 0;
    uint64_t size = 0;
    uint32_t first = kNil;  // the block at base (stable: splits keep the front descriptor)
  };

  // Mapping of a size in units to (first level, second level).
  [[gnu::always_inline]] static inline void Mapping(uint64_t units, int* fl, int* sl);
  // Grows the descriptor arrays and the hash table before an operation
  // mutates anything, so that std::bad_alloc (caught by the pool) leaves the
  // allocator unchanged; inside an operation nothing allocates.
  void EnsureRoom();
  uint32_t NewBlock();
  void DropBlock(uint32_t b);
  void InsertFree(uint32_t b);
  void RemoveFree(uint32_t b);
  // The head of the first non-empty list at or after (fl, sl), or kNil.
  uint32_t FindFree(int fl, int sl) const;
  // Splits the front `size` bytes off block b; the rest becomes a new free
  // block (filed in its list).
  void SplitTail(uint32_t b, uint64_t size);
  // Merges live block b with its free neighbours and files the result.
  [[gnu::always_inline]] inline void Release(uint32_t b);

  // Live-block hash table (addr -> block index), linear probing, backward-shift delete.
  void HashInsert(uint64_t addr, uint32_t b);
  uint32_t HashFind(uint64_t addr) const;
  void HashErase(uint64_t addr);
  void HashGrow();
  [[gnu::always_inline]] inline std::size_t Slot(uint64_t addr) const;

  int shift_;
  uint64_t fl_bitmap_ = 0;
  uint32_t sl_bitmap_[kFlCount] = {};
  uint32_t heads_[kFlCount][kSlCount];
  std::vector<Block> blocks_;
  std::vector<uint32_t> spare_blocks_;
  std::vector<Range> ranges_;  // removed ranges keep size 0
  struct Entry {
    uint64_t addr = 0;  // 0: empty
    uint32_t block = kNil;
  };
  std::vector<Entry> table_;
  std::size_t table_used_ = 0;
  int table_bits_ = 0;
};

}  // namespace drover::memory
