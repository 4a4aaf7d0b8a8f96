#pragma once
// PoolState: one pool of libdrover_mem: its backend, its allocator, its
// accounting, and how it finds room (growth, stitching, decommitted chunks).
// pool.cc owns the handles and the locking; a PoolState is always used under
// its slot's mutex.
//
// Stitching (issue 19 item 3, after GMLake, Guo et al., ASPLOS 2024). On a
// backend that can remap, an allocation that no free block holds, once the
// pool cannot grow (at its limit, or the backend is out of memory), gathers
// the whole free chunks (granules) of the segments, largest first, pins them
// in the allocator so nothing else is placed there, reserves a new virtual
// range and maps those chunks' physical memory into it back to back
// (MemoryBackend::Alias). The range joins the allocator as a range of its
// own and the allocation is served from it; what it does not use stays free
// there for later allocations. A range whose allocations are all freed is
// kept (GMLake's cache of stitched blocks: the same large allocation again
// costs no backend call) until an allocation finds no room, or a trim: then
// it is unmapped and released and its pinned chunks return to their segments.
// Example (granule 4 KiB): four 1 MiB segments each hold 900 KiB, so each has
// a free tail of 124 KiB (31 chunks) and no 200 KiB block exists; stitching
// takes 50 of the 124 free chunks (31 + 19 from two segments) into one
// 200 KiB range. Physical memory is never copied and live allocations never
// move.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "drover/memory/backend.h"
#include "drover/memory/drover_mem.h"
#include "drover/memory/tlsf.h"

namespace drover::memory {

// Sizes at or above this are negative numbers cast to size_t (or absurd).
inline constexpr uint64_t kMaxSize = uint64_t{1} << 62;

inline uint64_t RoundUp(uint64_t v, uint64_t granule) { return (v + granule - 1) & ~(granule - 1); }
inline uint64_t RoundDown(uint64_t v, uint64_t granule) { return v & ~(granule - 1); }

// A pool: its backend, its allocator and its accounting.
// Invariants (checked by the tests):
//   bytes_in_use = sum of live blocks' sizes = sum over tags of tag bytes;
//   allocations = number of live blocks = sum over tags of tag allocations;
//   bytes_reserved = sum of segments' sizes - decommitted chunks <= limit
//   (the physical memory held; stitched ranges are aliases of pinned segment
//   memory: not counted again);
//   a stitched range's size = sum of its pinned pieces' sizes, and it is
//   released only when it holds no live allocation.
// Not thread-safe: guarded by its slot's mutex.
class PoolState {
 public:
  struct TagUsage {
    uint64_t bytes = 0;
    uint64_t allocations = 0;
    uint64_t peak = 0;
  };
  struct Segment {
    uint64_t base = 0;
    uint64_t size = 0;
    uint32_t range = 0;
  };
  // A virtual range whose chunks are the pinned pieces (address, size) of
  // segments, mapped back to back.
  struct Stitch {
    uint64_t base = 0;
    uint64_t size = 0;
    uint32_t range = 0;
    uint64_t live = 0;  // live allocations in it
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
  };

  PoolState(std::unique_ptr<MemoryBackend> backend, uint64_t min_alignment, uint64_t limit, uint64_t grow,
            uint32_t max_tags, bool remap)
      : backend_(std::move(backend)),
        tlsf_(min_alignment),
        limit_(limit),
        grow_(grow),
        tags_(max_tags),
        remap_(remap && backend_->SupportsRemap()) {}

  ~PoolState();

  // Reserves and commits a segment of at least bytes (a multiple of the
  // granule), within the limit.
  int Grow(uint64_t bytes);
  int Alloc(uint64_t size, uint64_t alignment, uint32_t tag, void** ptr);
  int Free(uint64_t addr);
  int UsableSize(uint64_t addr, size_t* size, uint32_t* tag) const;
  void Stats(drover_mem_stats_t* s) const;
  int Tag(uint32_t tag, drover_mem_tag_usage_t* usage) const;

  // Releases empty stitched ranges, then wholly free segments except the
  // first (the reservation); a segment whose only non-free parts are
  // decommitted chunks is wholly free too.
  void Trim();

  // Trim, then on a backend with VMM gives the physical memory of every free
  // chunk back (Decommit): the chunks are pinned so that nothing is placed
  // on them, and recommitted one by one when an allocation finds no room.
  int ReleaseFree(uint64_t* released);

  void CountFailure() { ++failed_allocations_; }

  void RemapStats(drover_mem_remap_stats_t* s) const;

 private:
  // Everything that may find room for an allocation the free lists could not
  // place, cheapest first: idle stitched ranges back to their segments,
  // decommitted chunks committed again, a new segment, a stitched range.
  int AllocateSlow(uint64_t size, uint64_t alignment, uint32_t tag, uint64_t need, Tlsf::Allocation* a);

  // The stitched range that holds addr, or null.
  Stitch* StitchOf(uint64_t addr);

  // Serves an allocation from a new stitched range (see the file comment).
  // Leaves nothing changed when it fails.
  int StitchAndAllocate(uint64_t size, uint64_t alignment, uint32_t tag, Tlsf::Allocation* a);

  // Dissolves the stitched ranges that hold no allocation; true when there
  // was one.
  bool ReleaseEmptyStitches();

  // Unmaps and releases a stitched range with no live allocation and returns
  // its pieces to their segments.
  void Dissolve(Stitch* st);
  // Counts a refused stitch; returns rc.
  int Refuse(int rc);
  // The error code of a free or lookup of an address that is no live block.
  int ClassifyBad(uint64_t addr) const;

  std::unique_ptr<MemoryBackend> backend_;
  Tlsf tlsf_;
  uint64_t limit_;
  uint64_t grow_;
  std::vector<TagUsage> tags_;
  std::vector<Segment> segments_;
  uint64_t reserved_ = 0;
  uint64_t in_use_ = 0;
  uint64_t requested_ = 0;
  uint64_t peak_ = 0;
  uint64_t allocations_ = 0;
  uint64_t total_allocations_ = 0;
  uint64_t failed_allocations_ = 0;
  bool remap_;
  std::vector<Stitch> stitches_;
  std::vector<std::pair<uint64_t, uint64_t>> decommitted_;  // pinned chunks without physical memory
  uint64_t total_stitches_ = 0;
  uint64_t failed_stitches_ = 0;
};

// The fast paths, inline in the C API's calls (pool.cc): no backend call, no
// allocation; AllocateSlow and ClassifyBad are out of line.
inline int PoolState::Alloc(uint64_t size, uint64_t alignment, uint32_t tag, void** ptr) {
  const uint64_t min = tlsf_.min_alignment();
  if (size == 0 || size >= kMaxSize) return DROVER_MEM_ERR_INVALID_SIZE;
  if (alignment == 0) alignment = min;
  if (!std::has_single_bit(alignment) || alignment >= kMaxSize) return DROVER_MEM_ERR_INVALID_ALIGNMENT;
  alignment = std::max(alignment, min);
  if (alignment > limit_) return DROVER_MEM_ERR_INVALID_ALIGNMENT;
  if (tag >= tags_.size()) return DROVER_MEM_ERR_INVALID_TAG;
  const uint64_t need = RoundUp(size, min) + (alignment - min);
  if (need > limit_) return DROVER_MEM_ERR_TOO_LARGE;
  Tlsf::Allocation a;
  if (tlsf_.Allocate(size, alignment, tag, &a) == 0) {
    if (int rc = AllocateSlow(size, alignment, tag, need, &a); rc != DROVER_MEM_OK) return rc;
  }
  if (!stitches_.empty()) {
    if (Stitch* st = StitchOf(a.addr); st != nullptr) ++st->live;
  }
  in_use_ += a.size;
  requested_ += a.requested;
  peak_ = std::max(peak_, in_use_);
  ++allocations_;
  ++total_allocations_;
  TagUsage& t = tags_[tag];
  t.bytes += a.size;
  ++t.allocations;
  t.peak = std::max(t.peak, t.bytes);
  *ptr = reinterpret_cast<void*>(a.addr);
  return DROVER_MEM_OK;
}

inline int PoolState::Free(uint64_t addr) {
  Tlsf::Allocation a;
  if (!tlsf_.Free(addr, &a)) return ClassifyBad(addr);
  in_use_ -= a.size;
  requested_ -= a.requested;
  --allocations_;
  TagUsage& t = tags_[a.tag];
  t.bytes -= a.size;
  --t.allocations;
  if (!stitches_.empty()) {
    if (Stitch* st = StitchOf(addr); st != nullptr) --st->live;
  }
  return DROVER_MEM_OK;
}

}  // namespace drover::memory
