// The C API of libdrover_mem: pool handles, the pools' accounting, growth over
// backend segments, and the checks that turn bad input into error codes.
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
//
// Handles. A pool lives in one of DROVER_MEM_MAX_POOLS slots of a static
// table; its handle is (generation << 12) | slot. Destroying a pool bumps
// the slot's generation, so an old handle never matches again (2^52
// generations before one could). The slots are never freed, so checking a
// stale handle touches only valid memory: no dangling pointer is ever
// followed.
//
// Locking. Each slot's mutex is the pool's mutex: a call locks it, checks the
// generation, and does its work under it, so a destroy in another thread
// waits for the call to finish and the call after it sees the new
// generation. g_registry_mu guards only which slots are taken (create and
// destroy). Uncontended, the two lock/unlock pairs and handle checks of an
// allocate+free pair cost about 19 ns of its 55 ns (docs/memory.md).

#include <algorithm>
#include <bit>
#include <utility>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "drover/memory/backend.h"
#include "drover/memory/drover_mem.h"
#include "drover/memory/tlsf.h"

namespace drover::memory {
namespace {

constexpr int kSlotBits = 12;
static_assert((1 << kSlotBits) == DROVER_MEM_MAX_POOLS);
constexpr uint64_t kDefaultReserve = uint64_t{64} << 20;
constexpr uint64_t kDefaultMinAlignment = 256;
constexpr uint32_t kDefaultMaxTags = 256;
constexpr uint32_t kMaxTags = 65536;
// Sizes at or above this are negative numbers cast to size_t (or absurd).
constexpr uint64_t kMaxSize = uint64_t{1} << 62;

uint64_t RoundUp(uint64_t v, uint64_t granule) { return (v + granule - 1) & ~(granule - 1); }
uint64_t RoundDown(uint64_t v, uint64_t granule) { return v & ~(granule - 1); }

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
      : backend_(std::move(backend)), tlsf_(min_alignment), limit_(limit), grow_(grow), tags_(max_tags),
        remap_(remap && backend_->SupportsRemap()) {}

  ~PoolState() {
    // Aliases first: the segments own the physical memory they map.
    for (const Stitch& st : stitches_) {
      (void)backend_->Unalias(st.base, st.size);
      backend_->Release(st.base, st.size);
    }
    for (const Segment& s : segments_) backend_->Release(s.base, s.size);
  }

  // Reserves and commits a segment of at least bytes (a multiple of the
  // granule), within the limit.
  int Grow(uint64_t bytes) {
    const uint64_t granule = backend_->Granule();
    uint64_t size = std::max(grow_, RoundUp(bytes, granule));
    if (size > limit_ - reserved_) size = RoundDown(limit_ - reserved_, granule);
    if (size < bytes || size == 0) return DROVER_MEM_ERR_OUT_OF_MEMORY;
    segments_.reserve(segments_.size() + 1);
    uint64_t base = 0;
    if (int rc = backend_->Reserve(size, &base); rc != DROVER_MEM_OK) return rc;
    if (int rc = backend_->Commit(base, 0, size); rc != DROVER_MEM_OK) {
      backend_->Release(base, size);
      return rc;
    }
    uint32_t range = 0;
    try {
      range = tlsf_.AddRange(base, size);
    } catch (const std::bad_alloc&) {
      backend_->Release(base, size);
      return DROVER_MEM_ERR_OUT_OF_MEMORY;
    }
    segments_.push_back(Segment{base, size, range});
    reserved_ += size;
    return DROVER_MEM_OK;
  }

  int Alloc(uint64_t size, uint64_t alignment, uint32_t tag, void** ptr) {
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

  int Free(uint64_t addr) {
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

  int UsableSize(uint64_t addr, size_t* size, uint32_t* tag) const {
    Tlsf::Allocation a;
    if (!tlsf_.Lookup(addr, &a)) return ClassifyBad(addr);
    *size = a.size;
    if (tag != nullptr) *tag = a.tag;
    return DROVER_MEM_OK;
  }

  void Stats(drover_mem_stats_t* s) const {
    *s = drover_mem_stats_t{};
    s->bytes_in_use = in_use_;
    s->bytes_requested = requested_;
    s->bytes_reserved = reserved_;
    s->peak_bytes_in_use = peak_;
    s->bytes_free = reserved_ - in_use_;
    s->largest_free_block = tlsf_.LargestFree();
    s->fragmentation =
        s->bytes_free == 0 ? 0.0
                           : 1.0 - static_cast<double>(s->largest_free_block) / static_cast<double>(s->bytes_free);
    s->allocations = allocations_;
    s->total_allocations = total_allocations_;
    s->failed_allocations = failed_allocations_;
    s->segments = segments_.size();
    s->limit_bytes = limit_;
    s->granule = backend_->Granule();
    s->min_alignment = tlsf_.min_alignment();
  }

  int Tag(uint32_t tag, drover_mem_tag_usage_t* usage) const {
    if (tag >= tags_.size()) return DROVER_MEM_ERR_INVALID_TAG;
    const TagUsage& t = tags_[tag];
    *usage = drover_mem_tag_usage_t{t.bytes, t.allocations, t.peak};
    return DROVER_MEM_OK;
  }

  // Releases empty stitched ranges, then wholly free segments except the
  // first (the reservation); a segment whose only non-free parts are
  // decommitted chunks is wholly free too.
  void Trim() {
    (void)ReleaseEmptyStitches();
    for (size_t i = segments_.size(); i-- > 1;) {
      const Segment s = segments_[i];
      auto inside = [&s](const std::pair<uint64_t, uint64_t>& piece) {
        return piece.first >= s.base && piece.first - s.base < s.size;
      };
      if (!tlsf_.RangeIsFree(s.range)) {
        // Live blocks, or chunks pinned by a stitched range or decommitted?
        if (!tlsf_.RangeHoldsNoLive(s.range)) continue;
        bool lent = false;
        for (const Stitch& st : stitches_) lent = lent || std::any_of(st.pieces.begin(), st.pieces.end(), inside);
        if (lent) continue;
        for (const auto& piece : decommitted_) {
          if (inside(piece)) {
            (void)tlsf_.Unpin(piece.first);
            reserved_ += piece.second;  // counted off below with the segment
          }
        }
        decommitted_.erase(std::remove_if(decommitted_.begin(), decommitted_.end(), inside), decommitted_.end());
      }
      tlsf_.RemoveRange(s.range);
      backend_->Release(s.base, s.size);
      reserved_ -= s.size;
      segments_.erase(segments_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  // Trim, then on a backend with VMM gives the physical memory of every free
  // chunk back (Decommit): the chunks are pinned so that nothing is placed
  // on them, and recommitted one by one when an allocation finds no room.
  int ReleaseFree(uint64_t* released) {
    const uint64_t before = reserved_;
    Trim();
    int rc = DROVER_MEM_OK;
    if (backend_->SupportsRemap()) {
      const uint64_t chunk = backend_->Granule();
      std::vector<std::pair<uint64_t, uint64_t>> free;
      for (const Segment& seg : segments_) tlsf_.FreeChunks(seg.range, chunk, &free);
      decommitted_.reserve(decommitted_.size() + free.size());
      for (const auto& [addr, bytes] : free) {
        if (!tlsf_.Pin(addr, bytes)) continue;  // not reached: the pieces came from free blocks
        if (rc = backend_->Decommit(addr, 0, bytes); rc != DROVER_MEM_OK) {
          (void)tlsf_.Unpin(addr);
          break;
        }
        decommitted_.emplace_back(addr, bytes);
        reserved_ -= bytes;
      }
    }
    *released = before - reserved_;
    return rc;
  }

  void CountFailure() { ++failed_allocations_; }

  void RemapStats(drover_mem_remap_stats_t* s) const {
    *s = drover_mem_remap_stats_t{};
    s->remaps = remap_ ? 1 : 0;
    const uint64_t largest_free = tlsf_.LargestFree();
    s->largest_allocation = largest_free;
    if (remap_) {
      s->chunk = backend_->Granule();
      std::vector<std::pair<uint64_t, uint64_t>> pieces;
      for (const Segment& seg : segments_) tlsf_.FreeChunks(seg.range, s->chunk, &pieces);
      for (const auto& piece : pieces) s->free_chunk_bytes += piece.second;
      s->largest_allocation = std::max(largest_free, s->free_chunk_bytes);
    }
    const uint64_t free = reserved_ - in_use_;
    s->fragmentation =
        free == 0 ? 0.0 : 1.0 - static_cast<double>(s->largest_allocation) / static_cast<double>(free);
    s->stitched_ranges = stitches_.size();
    for (const Stitch& st : stitches_) {
      s->stitched_bytes += st.size;
      s->stitched_allocations += st.live;
    }
    for (const auto& piece : decommitted_) s->decommitted_bytes += piece.second;
    s->total_stitches = total_stitches_;
    s->failed_stitches = failed_stitches_;
  }

 private:
  // Everything that may find room for an allocation the free lists could not
  // place, cheapest first: idle stitched ranges back to their segments,
  // decommitted chunks committed again, a new segment, a stitched range.
  int AllocateSlow(uint64_t size, uint64_t alignment, uint32_t tag, uint64_t need, Tlsf::Allocation* a) {
    if (ReleaseEmptyStitches() && tlsf_.Allocate(size, alignment, tag, a) != 0) return DROVER_MEM_OK;
    while (!decommitted_.empty()) {
      const auto [addr, bytes] = decommitted_.back();
      if (bytes > limit_ - reserved_ || backend_->Commit(addr, 0, bytes) != DROVER_MEM_OK) break;
      decommitted_.pop_back();
      (void)tlsf_.Unpin(addr);
      reserved_ += bytes;
      if (tlsf_.Allocate(size, alignment, tag, a) != 0) return DROVER_MEM_OK;
    }
    int rc = Grow(need);
    if (rc == DROVER_MEM_OK) {
      return tlsf_.Allocate(size, alignment, tag, a) != 0 ? DROVER_MEM_OK : DROVER_MEM_ERR_OUT_OF_MEMORY;
    }
    if (rc == DROVER_MEM_ERR_OUT_OF_MEMORY && remap_) rc = StitchAndAllocate(size, alignment, tag, a);
    return rc;
  }

  // The stitched range that holds addr, or null.
  Stitch* StitchOf(uint64_t addr) {
    for (Stitch& st : stitches_) {
      if (addr >= st.base && addr - st.base < st.size) return &st;
    }
    return nullptr;
  }

  // Serves an allocation from a new stitched range (see the file comment).
  // Leaves nothing changed when it fails.
  int StitchAndAllocate(uint64_t size, uint64_t alignment, uint32_t tag, Tlsf::Allocation* a) {
    const uint64_t chunk = backend_->Granule();
    const uint64_t need = RoundUp(RoundUp(size, tlsf_.min_alignment()), chunk);
    // The range is chunk-aligned, so larger alignments are not offered.
    if (alignment > chunk) return Refuse(DROVER_MEM_ERR_OUT_OF_MEMORY);
    std::vector<std::pair<uint64_t, uint64_t>> free;
    for (const Segment& seg : segments_) tlsf_.FreeChunks(seg.range, chunk, &free);
    std::stable_sort(free.begin(), free.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    Stitch st;
    uint64_t gathered = 0;
    for (const auto& [addr, bytes] : free) {
      if (gathered == need) break;
      const uint64_t take = std::min(bytes, need - gathered);
      st.pieces.emplace_back(addr, take);
      gathered += take;
    }
    if (gathered < need) return Refuse(DROVER_MEM_ERR_OUT_OF_MEMORY);
    stitches_.reserve(stitches_.size() + 1);
    if (int rc = backend_->Reserve(need, &st.base); rc != DROVER_MEM_OK) return Refuse(rc);
    st.size = need;
    size_t pinned = 0;
    uint64_t mapped = 0;
    int rc = DROVER_MEM_OK;
    for (; pinned < st.pieces.size(); ++pinned) {
      const auto [addr, bytes] = st.pieces[pinned];
      if (!tlsf_.Pin(addr, bytes)) {
        rc = DROVER_MEM_ERR_BACKEND;  // not reached: the pieces came from free blocks
        break;
      }
      if (rc = backend_->Alias(addr, st.base + mapped, bytes); rc != DROVER_MEM_OK) {
        (void)tlsf_.Unpin(addr);
        break;
      }
      mapped += bytes;
    }
    if (rc == DROVER_MEM_OK) {
      try {
        st.range = tlsf_.AddRange(st.base, st.size);
      } catch (const std::bad_alloc&) {
        rc = DROVER_MEM_ERR_OUT_OF_MEMORY;
      }
    }
    if (rc != DROVER_MEM_OK) {
      if (mapped != 0) (void)backend_->Unalias(st.base, mapped);
      backend_->Release(st.base, st.size);
      for (size_t i = 0; i < pinned; ++i) (void)tlsf_.Unpin(st.pieces[i].first);
      return Refuse(rc);
    }
    if (tlsf_.Allocate(size, alignment, tag, a) == 0) {  // not reached: the range fits the request
      Dissolve(&stitches_.emplace_back(std::move(st)));
      return Refuse(DROVER_MEM_ERR_OUT_OF_MEMORY);
    }
    stitches_.push_back(std::move(st));
    ++total_stitches_;
    return DROVER_MEM_OK;
  }

  // Dissolves the stitched ranges that hold no allocation; true when there
  // was one.
  bool ReleaseEmptyStitches() {
    bool any = false;
    for (size_t i = stitches_.size(); i-- > 0;) {
      if (stitches_[i].live != 0) continue;
      Dissolve(&stitches_[i]);
      any = true;
    }
    return any;
  }

  // Unmaps and releases a stitched range with no live allocation and returns
  // its pieces to their segments.
  void Dissolve(Stitch* st) {
    tlsf_.RemoveRange(st->range);
    (void)backend_->Unalias(st->base, st->size);
    backend_->Release(st->base, st->size);
    for (const auto& piece : st->pieces) (void)tlsf_.Unpin(piece.first);
    stitches_.erase(stitches_.begin() + (st - stitches_.data()));
  }

  int Refuse(int rc) {
    ++failed_stitches_;
    return rc;
  }

  int ClassifyBad(uint64_t addr) const {
    switch (tlsf_.Classify(addr)) {
      case Tlsf::Where::kFree:
      case Tlsf::Where::kPinned:  // free memory lent to a stitched range
        return DROVER_MEM_ERR_DOUBLE_FREE;
      case Tlsf::Where::kInsideLive:
      case Tlsf::Where::kLiveStart:  // not reached: a live start is in the hash table
        return DROVER_MEM_ERR_INTERIOR_POINTER;
      case Tlsf::Where::kOutside:
        break;
    }
    return DROVER_MEM_ERR_FOREIGN_POINTER;
  }

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

struct alignas(64) Slot {
  std::mutex mu;
  uint64_t generation = 1;  // GUARDED_BY(mu)
  PoolState* pool = nullptr;     // GUARDED_BY(mu)
};

Slot g_slots[DROVER_MEM_MAX_POOLS];
std::mutex g_registry_mu;
bool g_taken[DROVER_MEM_MAX_POOLS];  // GUARDED_BY(g_registry_mu)

// Runs f(pool) under the pool's mutex when handle names a live pool.
template <typename F>
int WithPool(drover_mem_pool_t handle, F&& f) {
  const uint64_t index = handle.id & (DROVER_MEM_MAX_POOLS - 1);
  const uint64_t generation = handle.id >> kSlotBits;
  if (generation == 0) return DROVER_MEM_ERR_INVALID_POOL;
  Slot& slot = g_slots[index];
  std::lock_guard<std::mutex> lock(slot.mu);
  if (slot.pool == nullptr || slot.generation != generation) return DROVER_MEM_ERR_INVALID_POOL;
  try {
    return f(*slot.pool);
  } catch (const std::bad_alloc&) {
    return DROVER_MEM_ERR_OUT_OF_MEMORY;
  }
}

}  // namespace
}  // namespace drover::memory

using drover::memory::PoolState;
using drover::memory::WithPool;

extern "C" {

void drover_mem_options_init(drover_mem_options_t* options) {
  if (options == nullptr) return;
  *options = drover_mem_options_t{};
  options->backend = DROVER_MEM_BACKEND_HOST;
  options->reserve_bytes = drover::memory::kDefaultReserve;
  options->min_alignment = drover::memory::kDefaultMinAlignment;
  options->max_tags = drover::memory::kDefaultMaxTags;
}

int drover_mem_pool_create(const drover_mem_options_t* options, drover_mem_pool_t* pool) {
  namespace m = drover::memory;
  if (options == nullptr || pool == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  pool->id = 0;
  try {
    int rc = DROVER_MEM_OK;
    std::unique_ptr<m::MemoryBackend> backend = m::MakeBackend(options->backend, options->device, &rc);
    if (backend == nullptr) return rc;
    return m::CreatePool(std::move(backend), *options, pool);
  } catch (const std::bad_alloc&) {
    return DROVER_MEM_ERR_OUT_OF_MEMORY;
  }
}

}  // extern "C"

namespace drover::memory {

int CreatePool(std::unique_ptr<MemoryBackend> backend, const drover_mem_options_t& options,
               drover_mem_pool_t* pool) {
  if (backend == nullptr || pool == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  pool->id = 0;
  if (options.max_tags == 0 || options.max_tags > kMaxTags) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  if ((options.flags & ~uint32_t{DROVER_MEM_FLAG_NO_REMAP}) != 0) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  if (options.reserve_bytes == 0 || options.reserve_bytes >= kMaxSize ||
      options.limit_bytes >= kMaxSize || options.grow_bytes >= kMaxSize) {
    return DROVER_MEM_ERR_INVALID_SIZE;
  }
  try {
    int rc = DROVER_MEM_OK;
    const uint64_t granule = backend->Granule();
    const uint64_t min_alignment = options.min_alignment;
    if (!std::has_single_bit(min_alignment) || min_alignment < 16 || min_alignment > granule) {
      return DROVER_MEM_ERR_INVALID_ALIGNMENT;
    }
    if (options.limit_bytes != 0 && options.limit_bytes < granule) return DROVER_MEM_ERR_LIMIT_TOO_SMALL;
    uint64_t reserve = RoundUp(options.reserve_bytes, granule);
    const uint64_t limit = options.limit_bytes != 0 ? RoundDown(options.limit_bytes, granule) : reserve;
    reserve = std::min(reserve, limit);
    const uint64_t grow = options.grow_bytes != 0 ? RoundUp(options.grow_bytes, granule) : reserve;
    const bool remap = (options.flags & DROVER_MEM_FLAG_NO_REMAP) == 0;
    auto p = std::make_unique<PoolState>(std::move(backend), min_alignment, limit, grow, options.max_tags, remap);
    if (rc = p->Grow(reserve); rc != DROVER_MEM_OK) return rc;

    uint32_t index = 0;
    {
      std::lock_guard<std::mutex> lock(g_registry_mu);
      while (index < DROVER_MEM_MAX_POOLS && g_taken[index]) ++index;
      if (index == DROVER_MEM_MAX_POOLS) return DROVER_MEM_ERR_TOO_MANY_POOLS;
      g_taken[index] = true;
    }
    Slot& slot = g_slots[index];
    std::lock_guard<std::mutex> lock(slot.mu);
    slot.pool = p.release();
    pool->id = (slot.generation << kSlotBits) | index;
    return DROVER_MEM_OK;
  } catch (const std::bad_alloc&) {
    return DROVER_MEM_ERR_OUT_OF_MEMORY;
  }
}

}  // namespace drover::memory

extern "C" {

int drover_mem_pool_destroy(drover_mem_pool_t pool) {
  namespace m = drover::memory;
  const uint64_t index = pool.id & (DROVER_MEM_MAX_POOLS - 1);
  const uint64_t generation = pool.id >> m::kSlotBits;
  if (generation == 0) return DROVER_MEM_ERR_INVALID_POOL;
  m::Slot& slot = m::g_slots[index];
  PoolState* doomed = nullptr;
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    if (slot.pool == nullptr || slot.generation != generation) return DROVER_MEM_ERR_INVALID_POOL;
    doomed = slot.pool;
    slot.pool = nullptr;
    ++slot.generation;
  }
  delete doomed;  // releases the segments outside the lock
  std::lock_guard<std::mutex> lock(m::g_registry_mu);
  m::g_taken[index] = false;
  return DROVER_MEM_OK;
}

int drover_mem_alloc(drover_mem_pool_t pool, size_t size, size_t alignment, uint32_t tag, void** ptr) {
  if (ptr == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  *ptr = nullptr;
  return WithPool(pool, [&](PoolState& p) {
    const int rc = p.Alloc(size, alignment, tag, ptr);
    if (rc != DROVER_MEM_OK) p.CountFailure();
    return rc;
  });
}

int drover_mem_free(drover_mem_pool_t pool, void* ptr) {
  return WithPool(pool, [&](PoolState& p) { return ptr == nullptr ? DROVER_MEM_OK : p.Free(reinterpret_cast<uint64_t>(ptr)); });
}

int drover_mem_usable_size(drover_mem_pool_t pool, const void* ptr, size_t* size, uint32_t* tag) {
  if (ptr == nullptr || size == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  return WithPool(pool, [&](PoolState& p) { return p.UsableSize(reinterpret_cast<uint64_t>(ptr), size, tag); });
}

int drover_mem_stats(drover_mem_pool_t pool, drover_mem_stats_t* stats) {
  if (stats == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  return WithPool(pool, [&](PoolState& p) {
    p.Stats(stats);
    return DROVER_MEM_OK;
  });
}

int drover_mem_tag_usage(drover_mem_pool_t pool, uint32_t tag, drover_mem_tag_usage_t* usage) {
  if (usage == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  return WithPool(pool, [&](PoolState& p) { return p.Tag(tag, usage); });
}

int drover_mem_remap_stats(drover_mem_pool_t pool, drover_mem_remap_stats_t* stats) {
  if (stats == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  return WithPool(pool, [&](PoolState& p) {
    p.RemapStats(stats);
    return DROVER_MEM_OK;
  });
}

int drover_mem_release_free(drover_mem_pool_t pool, size_t* released) {
  return WithPool(pool, [&](PoolState& p) {
    uint64_t bytes = 0;
    const int rc = p.ReleaseFree(&bytes);
    if (released != nullptr) *released = bytes;
    return rc;
  });
}

int drover_mem_trim(drover_mem_pool_t pool) {
  return WithPool(pool, [&](PoolState& p) {
    p.Trim();
    return DROVER_MEM_OK;
  });
}

const char* drover_mem_strerror(int code) {
  switch (code) {
    case DROVER_MEM_OK: return "ok";
    case DROVER_MEM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case DROVER_MEM_ERR_INVALID_POOL: return "invalid pool handle (destroyed or never created)";
    case DROVER_MEM_ERR_INVALID_SIZE: return "invalid size (zero, or a negative number cast to size_t)";
    case DROVER_MEM_ERR_INVALID_ALIGNMENT: return "invalid alignment (not a power of two, or out of range)";
    case DROVER_MEM_ERR_INVALID_TAG: return "tag out of range";
    case DROVER_MEM_ERR_TOO_LARGE: return "allocation larger than the pool's limit";
    case DROVER_MEM_ERR_OUT_OF_MEMORY: return "out of memory (the pool is at its limit)";
    case DROVER_MEM_ERR_FOREIGN_POINTER: return "pointer not from this pool";
    case DROVER_MEM_ERR_DOUBLE_FREE: return "pointer into free memory of the pool (double free)";
    case DROVER_MEM_ERR_INTERIOR_POINTER: return "pointer inside an allocation, not its start";
    case DROVER_MEM_ERR_LIMIT_TOO_SMALL: return "limit smaller than one granule of the backend";
    case DROVER_MEM_ERR_UNSUPPORTED: return "backend not supported in this build or on this machine";
    case DROVER_MEM_ERR_TOO_MANY_POOLS: return "too many pools";
    case DROVER_MEM_ERR_BACKEND: return "backend failure";
    default: return "unknown error code";
  }
}

}  // extern "C"
