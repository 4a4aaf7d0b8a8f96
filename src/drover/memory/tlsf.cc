#include "drover/memory/tlsf.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace drover::memory {

namespace {

// Blocks of the exact-size list looked at when the rounded-up ("good fit")
// search finds nothing: bounded, so a failing allocation stays O(1).
constexpr int kExactListProbe = 16;

}  // namespace

Tlsf::Tlsf(uint64_t min_alignment) : shift_(std::countr_zero(min_alignment)) {
  assert(std::has_single_bit(min_alignment) && min_alignment >= 16);
  for (auto& row : heads_) std::fill(std::begin(row), std::end(row), kNil);
  blocks_.reserve(1024);
  spare_blocks_.reserve(1024);
  table_bits_ = 10;
  table_.assign(size_t{1} << table_bits_, Entry{});
}

inline void Tlsf::Mapping(uint64_t units, int* fl, int* sl) {
  if (units < kSlCount) {
    *fl = 0;
    *sl = static_cast<int>(units);
    return;
  }
  const int t = 63 - std::countl_zero(units);
  *fl = t - kSlLog2 + 1;
  *sl = static_cast<int>(units >> (t - kSlLog2)) - kSlCount;
}

inline size_t Tlsf::Slot(uint64_t addr) const {
  return static_cast<size_t>(((addr >> shift_) * 0x9E3779B97F4A7C15ull) >> (64 - table_bits_));
}

uint32_t Tlsf::NewBlock() {
  if (!spare_blocks_.empty()) {
    const uint32_t b = spare_blocks_.back();
    spare_blocks_.pop_back();
    blocks_[b] = Block{};
    return b;
  }
  blocks_.emplace_back();
  return static_cast<uint32_t>(blocks_.size() - 1);
}

void Tlsf::DropBlock(uint32_t b) {
  blocks_[b] = Block{};
  spare_blocks_.push_back(b);
}

void Tlsf::InsertFree(uint32_t b) {
  Block& block = blocks_[b];
  int fl = 0;
  int sl = 0;
  Mapping(block.size >> shift_, &fl, &sl);
  block.free = true;
  block.prev_free = kNil;
  block.next_free = heads_[fl][sl];
  if (block.next_free != kNil) blocks_[block.next_free].prev_free = b;
  heads_[fl][sl] = b;
  fl_bitmap_ |= uint64_t{1} << fl;
  sl_bitmap_[fl] |= uint32_t{1} << sl;
}

void Tlsf::RemoveFree(uint32_t b) {
  Block& block = blocks_[b];
  int fl = 0;
  int sl = 0;
  Mapping(block.size >> shift_, &fl, &sl);
  if (block.prev_free != kNil) blocks_[block.prev_free].next_free = block.next_free;
  if (block.next_free != kNil) blocks_[block.next_free].prev_free = block.prev_free;
  if (heads_[fl][sl] == b) {
    heads_[fl][sl] = block.next_free;
    if (block.next_free == kNil) {
      sl_bitmap_[fl] &= ~(uint32_t{1} << sl);
      if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(uint64_t{1} << fl);
    }
  }
  block.free = false;
  block.prev_free = block.next_free = kNil;
}

uint32_t Tlsf::FindFree(int fl, int sl) const {
  if (fl >= kFlCount) return kNil;
  uint32_t sl_map = sl_bitmap_[fl] & (~uint32_t{0} << sl);
  if (sl_map == 0) {
    if (fl + 1 >= kFlCount) return kNil;
    const uint64_t fl_map = fl_bitmap_ & (~uint64_t{0} << (fl + 1));
    if (fl_map == 0) return kNil;
    fl = std::countr_zero(fl_map);
    sl_map = sl_bitmap_[fl];
  }
  return heads_[fl][std::countr_zero(sl_map)];
}

void Tlsf::SplitTail(uint32_t b, uint64_t size) {
  const uint32_t rest = NewBlock();  // may reallocate blocks_: index, not reference, before it
  Block& block = blocks_[b];
  Block& tail = blocks_[rest];
  tail.addr = block.addr + size;
  tail.size = block.size - size;
  tail.prev_phys = b;
  tail.next_phys = block.next_phys;
  if (tail.next_phys != kNil) blocks_[tail.next_phys].prev_phys = rest;
  block.next_phys = rest;
  block.size = size;
  InsertFree(rest);
}

uint32_t Tlsf::AddRange(uint64_t base, uint64_t size) {
  EnsureRoom();
  ranges_.reserve(ranges_.size() + 1);
  assert(base != 0 && size != 0 && (base >> shift_ << shift_) == base && (size >> shift_ << shift_) == size);
  const uint32_t b = NewBlock();
  blocks_[b].addr = base;
  blocks_[b].size = size;
  InsertFree(b);
  // Reuse the entry of a removed range, so that grow/trim cycles do not
  // lengthen the list (ranges are few; this is not the allocation path).
  for (size_t r = 0; r < ranges_.size(); ++r) {
    if (ranges_[r].size == 0) {
      ranges_[r] = Range{base, size, b};
      return static_cast<uint32_t>(r);
    }
  }
  ranges_.push_back(Range{base, size, b});
  return static_cast<uint32_t>(ranges_.size() - 1);
}

bool Tlsf::RangeIsFree(uint32_t range) const {
  const Range& r = ranges_[range];
  if (r.size == 0) return false;
  const Block& first = blocks_[r.first];
  return first.free && first.size == r.size;
}

void Tlsf::RemoveRange(uint32_t range) {
  assert(RangeIsFree(range));
  Range& r = ranges_[range];
  RemoveFree(r.first);
  DropBlock(r.first);
  r = Range{};
}

void Tlsf::EnsureRoom() {
  if (spare_blocks_.size() < 2 && blocks_.size() + 2 > blocks_.capacity()) blocks_.reserve(blocks_.capacity() * 2);
  if (spare_blocks_.capacity() < blocks_.capacity()) spare_blocks_.reserve(blocks_.capacity());
  if ((table_used_ + 1) * 2 > table_.size()) HashGrow();
}

uint64_t Tlsf::Allocate(uint64_t size, uint64_t alignment, uint32_t tag, Allocation* out) {
  EnsureRoom();
  const uint64_t min = min_alignment();
  const uint64_t need = (size + min - 1) >> shift_ << shift_;
  const uint64_t slack = alignment > min ? alignment - min : 0;
  const uint64_t search_units = (need + slack) >> shift_;
  uint64_t rounded = search_units;
  if (rounded >= kSlCount) {
    const int t = 63 - std::countl_zero(rounded);
    rounded += (uint64_t{1} << (t - kSlLog2)) - 1;
  }
  int fl = 0;
  int sl = 0;
  Mapping(rounded, &fl, &sl);
  uint32_t b = FindFree(fl, sl);
  if (b == kNil) {
    // Good fit skips the list of the exact size, whose blocks may be smaller
    // than the request; look at a few of them (a whole free segment is one).
    Mapping(search_units, &fl, &sl);
    uint32_t c = heads_[fl][sl];
    for (int i = 0; c != kNil && i < kExactListProbe; ++i, c = blocks_[c].next_free) {
      if (blocks_[c].size >= need + slack) {
        b = c;
        break;
      }
    }
    if (b == kNil) return 0;
  }
  RemoveFree(b);
  const uint64_t start = blocks_[b].addr;
  const uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
  if (aligned != start) {
    // The front gap stays a free block under b's descriptor (its physical
    // predecessor is live: free neighbours are always merged).
    const uint64_t gap = aligned - start;
    const uint32_t front = b;
    SplitTail(front, gap);  // files the rest as free ...
    b = blocks_[front].next_phys;
    RemoveFree(b);  // ... take it back out
    InsertFree(front);
  }
  if (blocks_[b].size > need) SplitTail(b, need);
  Block& block = blocks_[b];
  block.free = false;
  block.requested = size;
  block.tag = tag;
  HashInsert(aligned, b);
  *out = Allocation{aligned, need, size, tag};
  return aligned;
}

inline void Tlsf::Release(uint32_t b) {
  blocks_[b].pinned = false;
  const uint32_t prev = blocks_[b].prev_phys;
  if (prev != kNil && blocks_[prev].free) {
    RemoveFree(prev);
    blocks_[prev].size += blocks_[b].size;
    blocks_[prev].next_phys = blocks_[b].next_phys;
    if (blocks_[b].next_phys != kNil) blocks_[blocks_[b].next_phys].prev_phys = prev;
    DropBlock(b);
    b = prev;
  }
  const uint32_t next = blocks_[b].next_phys;
  if (next != kNil && blocks_[next].free) {
    RemoveFree(next);
    blocks_[b].size += blocks_[next].size;
    blocks_[b].next_phys = blocks_[next].next_phys;
    if (blocks_[next].next_phys != kNil) blocks_[blocks_[next].next_phys].prev_phys = b;
    DropBlock(next);
  }
  InsertFree(b);
}

bool Tlsf::Free(uint64_t addr, Allocation* out) {
  const uint32_t b = HashFind(addr);
  if (b == kNil || blocks_[b].pinned) return false;
  HashErase(addr);
  *out = Allocation{addr, blocks_[b].size, blocks_[b].requested, blocks_[b].tag};
  Release(b);
  return true;
}

[[gnu::cold]] void Tlsf::FreeChunks(uint32_t range, uint64_t chunk,
                                    std::vector<std::pair<uint64_t, uint64_t>>* out) const {
  const Range& r = ranges_[range];
  if (r.size == 0) return;
  for (uint32_t b = r.first; b != kNil; b = blocks_[b].next_phys) {
    const Block& block = blocks_[b];
    if (!block.free) continue;
    const uint64_t start = (block.addr + chunk - 1) & ~(chunk - 1);
    const uint64_t end = (block.addr + block.size) & ~(chunk - 1);
    if (end > start) out->emplace_back(start, end - start);
  }
}

[[gnu::cold]] bool Tlsf::Pin(uint64_t addr, uint64_t size) {
  EnsureRoom();
  uint32_t b = kNil;
  for (const Range& r : ranges_) {
    if (r.size == 0 || addr < r.base || addr - r.base >= r.size) continue;
    for (uint32_t c = r.first; c != kNil; c = blocks_[c].next_phys) {
      if (addr >= blocks_[c].addr && addr - blocks_[c].addr < blocks_[c].size) {
        b = c;
        break;
      }
    }
    break;
  }
  if (b == kNil || !blocks_[b].free || size == 0 || blocks_[b].addr + blocks_[b].size - addr < size) return false;
  RemoveFree(b);
  if (addr != blocks_[b].addr) {
    const uint32_t front = b;
    SplitTail(front, addr - blocks_[front].addr);
    b = blocks_[front].next_phys;
    RemoveFree(b);
    InsertFree(front);
  }
  if (blocks_[b].size > size) SplitTail(b, size);
  blocks_[b].pinned = true;
  blocks_[b].requested = 0;
  blocks_[b].tag = 0;
  HashInsert(addr, b);
  return true;
}

[[gnu::cold]] bool Tlsf::RangeHoldsNoLive(uint32_t range) const {
  const Range& r = ranges_[range];
  if (r.size == 0) return false;
  for (uint32_t b = r.first; b != kNil; b = blocks_[b].next_phys) {
    if (!blocks_[b].free && !blocks_[b].pinned) return false;
  }
  return true;
}

[[gnu::cold]] bool Tlsf::Unpin(uint64_t addr) {
  const uint32_t b = HashFind(addr);
  if (b == kNil || !blocks_[b].pinned) return false;
  HashErase(addr);
  Release(b);
  return true;
}

bool Tlsf::Lookup(uint64_t addr, Allocation* out) const {
  const uint32_t b = HashFind(addr);
  if (b == kNil || blocks_[b].pinned) return false;
  *out = Allocation{addr, blocks_[b].size, blocks_[b].requested, blocks_[b].tag};
  return true;
}

Tlsf::Where Tlsf::Classify(uint64_t addr) const {
  for (const Range& r : ranges_) {
    if (r.size == 0 || addr < r.base || addr - r.base >= r.size) continue;
    for (uint32_t b = r.first; b != kNil; b = blocks_[b].next_phys) {
      const Block& block = blocks_[b];
      if (addr < block.addr || addr - block.addr >= block.size) continue;
      if (block.free) return Where::kFree;
      if (block.pinned) return Where::kPinned;
      return addr == block.addr ? Where::kLiveStart : Where::kInsideLive;
    }
  }
  return Where::kOutside;
}

uint64_t Tlsf::LargestFree() const {
  if (fl_bitmap_ == 0) return 0;
  const int fl = 63 - std::countl_zero(fl_bitmap_);
  const int sl = 31 - std::countl_zero(sl_bitmap_[fl]);
  uint64_t largest = 0;
  for (uint32_t b = heads_[fl][sl]; b != kNil; b = blocks_[b].next_free) largest = std::max(largest, blocks_[b].size);
  return largest;
}

uint32_t Tlsf::HashFind(uint64_t addr) const {
  const size_t mask = table_.size() - 1;
  for (size_t i = Slot(addr);; i = (i + 1) & mask) {
    if (table_[i].addr == addr) return table_[i].block;
    if (table_[i].addr == 0) return kNil;
  }
}

void Tlsf::HashInsert(uint64_t addr, uint32_t b) {
  const size_t mask = table_.size() - 1;
  size_t i = Slot(addr);
  while (table_[i].addr != 0) i = (i + 1) & mask;
  table_[i] = Entry{addr, b};
  ++table_used_;
}

void Tlsf::HashErase(uint64_t addr) {
  const size_t mask = table_.size() - 1;
  size_t i = Slot(addr);
  while (table_[i].addr != addr) i = (i + 1) & mask;
  // Backward-shift deletion: pull later entries of the probe run into the
  // hole when their home slot is not between the hole and them.
  for (size_t j = (i + 1) & mask; table_[j].addr != 0; j = (j + 1) & mask) {
    const size_t home = Slot(table_[j].addr);
    const bool home_in_gap = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!home_in_gap) {
      table_[i] = table_[j];
      i = j;
    }
  }
  table_[i] = Entry{};
  --table_used_;
}

void Tlsf::HashGrow() {
  std::vector<Entry> old;
  old.swap(table_);
  ++table_bits_;
  table_.assign(size_t{1} << table_bits_, Entry{});
  const size_t mask = table_.size() - 1;
  for (const Entry& e : old) {
    if (e.addr == 0) continue;
    size_t i = Slot(e.addr);
    while (table_[i].addr != 0) i = (i + 1) & mask;
    table_[i] = e;
  }
}

}  // namespace drover::memory
