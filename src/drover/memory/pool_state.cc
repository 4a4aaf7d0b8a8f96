#include "drover/memory/pool_state.h"

#include <algorithm>
#include <new>

namespace drover::memory {

PoolState::~PoolState() {
  // Aliases first: the segments own the physical memory they map.
  for (const Stitch& st : stitches_) {
    (void)backend_->Unalias(st.base, st.size);
    backend_->Release(st.base, st.size);
  }
  for (const Segment& s : segments_) backend_->Release(s.base, s.size);
}

int PoolState::Grow(uint64_t bytes) {
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

int PoolState::UsableSize(uint64_t addr, size_t* size, uint32_t* tag) const {
  Tlsf::Allocation a;
  if (!tlsf_.Lookup(addr, &a)) return ClassifyBad(addr);
  *size = a.size;
  if (tag != nullptr) *tag = a.tag;
  return DROVER_MEM_OK;
}

void PoolState::Stats(drover_mem_stats_t* s) const {
  *s = drover_mem_stats_t{};
  s->bytes_in_use = in_use_;
  s->bytes_requested = requested_;
  s->bytes_reserved = reserved_;
  s->peak_bytes_in_use = peak_;
  s->bytes_free = reserved_ - in_use_;
  s->largest_free_block = tlsf_.LargestFree();
  s->fragmentation =
      s->bytes_free == 0 ? 0.0 : 1.0 - static_cast<double>(s->largest_free_block) / static_cast<double>(s->bytes_free);
  s->allocations = allocations_;
  s->total_allocations = total_allocations_;
  s->failed_allocations = failed_allocations_;
  s->segments = segments_.size();
  s->limit_bytes = limit_;
  s->granule = backend_->Granule();
  s->min_alignment = tlsf_.min_alignment();
}

int PoolState::Tag(uint32_t tag, drover_mem_tag_usage_t* usage) const {
  if (tag >= tags_.size()) return DROVER_MEM_ERR_INVALID_TAG;
  const TagUsage& t = tags_[tag];
  *usage = drover_mem_tag_usage_t{t.bytes, t.allocations, t.peak};
  return DROVER_MEM_OK;
}

void PoolState::Trim() {
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

int PoolState::ReleaseFree(uint64_t* released) {
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

void PoolState::RemapStats(drover_mem_remap_stats_t* s) const {
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
  s->fragmentation = free == 0 ? 0.0 : 1.0 - static_cast<double>(s->largest_allocation) / static_cast<double>(free);
  s->stitched_ranges = stitches_.size();
  for (const Stitch& st : stitches_) {
    s->stitched_bytes += st.size;
    s->stitched_allocations += st.live;
  }
  for (const auto& piece : decommitted_) s->decommitted_bytes += piece.second;
  s->total_stitches = total_stitches_;
  s->failed_stitches = failed_stitches_;
}

int PoolState::AllocateSlow(uint64_t size, uint64_t alignment, uint32_t tag, uint64_t need, Tlsf::Allocation* a) {
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

PoolState::Stitch* PoolState::StitchOf(uint64_t addr) {
  for (Stitch& st : stitches_) {
    if (addr >= st.base && addr - st.base < st.size) return &st;
  }
  return nullptr;
}

int PoolState::StitchAndAllocate(uint64_t size, uint64_t alignment, uint32_t tag, Tlsf::Allocation* a) {
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

bool PoolState::ReleaseEmptyStitches() {
  bool any = false;
  for (size_t i = stitches_.size(); i-- > 0;) {
    if (stitches_[i].live != 0) continue;
    Dissolve(&stitches_[i]);
    any = true;
  }
  return any;
}

void PoolState::Dissolve(Stitch* st) {
  tlsf_.RemoveRange(st->range);
  (void)backend_->Unalias(st->base, st->size);
  backend_->Release(st->base, st->size);
  for (const auto& piece : st->pieces) (void)tlsf_.Unpin(piece.first);
  stitches_.erase(stitches_.begin() + (st - stitches_.data()));
}

int PoolState::Refuse(int rc) {
  ++failed_stitches_;
  return rc;
}

int PoolState::ClassifyBad(uint64_t addr) const {
  switch (tlsf_.Classify(addr)) {
    case Tlsf::Where::kFree:
    case Tlsf::Where::kPinned:  // free memory lent to a stitched range
      return DROVER_MEM_ERR_DOUBLE_FREE;
    case Tlsf::Where::kInsideLive:
    case Tlsf::Where::kLiveStart:  // not reached: a live start is in the hash table
      return DROVER_MEM_ERR_INTERIOR_POINTER;
    case Tlsf::Where::kOutside: break;
  }
  return DROVER_MEM_ERR_FOREIGN_POINTER;
}

}  // namespace drover::memory
