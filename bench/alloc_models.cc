#include "alloc_models.h"

#include <algorithm>

namespace drover::bench {
namespace {

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
uint64_t RoundDown(uint64_t v, uint64_t a) { return v / a * a; }

}  // namespace

// --- AddrTable ---

size_t AddrTable::Slot(uint64_t addr) const {
  return static_cast<size_t>((addr * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
}

void AddrTable::Grow() {
  std::vector<Entry> old = std::move(table_);
  bits_ = bits_ == 0 ? 10 : bits_ + 1;
  table_.assign(size_t{1} << bits_, Entry{});
  used_ = 0;
  for (const Entry& e : old) {
    if (e.addr != 0) Insert(e.addr, e.value);
  }
}

void AddrTable::Insert(uint64_t addr, uint32_t value) {
  if ((used_ + 1) * 4 > table_.size() * 3) Grow();
  const size_t mask = table_.size() - 1;
  size_t i = Slot(addr);
  while (table_[i].addr != 0) i = (i + 1) & mask;
  table_[i] = Entry{addr, value};
  ++used_;
}

uint32_t AddrTable::Find(uint64_t addr) const {
  if (table_.empty()) return kNone;
  const size_t mask = table_.size() - 1;
  for (size_t i = Slot(addr);; i = (i + 1) & mask) {
    if (table_[i].addr == addr) return table_[i].value;
    if (table_[i].addr == 0) return kNone;
  }
}

void AddrTable::Erase(uint64_t addr) {
  if (table_.empty()) return;
  const size_t mask = table_.size() - 1;
  size_t i = Slot(addr);
  while (table_[i].addr != addr) {
    if (table_[i].addr == 0) return;
    i = (i + 1) & mask;
  }
  // Backward shift: move later entries of the probe run into the hole when
  // their home slot is not cyclically in (hole, their slot].
  for (size_t j = (i + 1) & mask; table_[j].addr != 0; j = (j + 1) & mask) {
    const size_t home = Slot(table_[j].addr);
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      table_[i] = table_[j];
      i = j;
    }
  }
  table_[i] = Entry{};
  --used_;
}

// --- FreeListAllocator ---

FreeListAllocator::FreeListAllocator(Fit fit, uint64_t base, uint64_t capacity) : fit_(fit), base_(base) {
  blocks_.push_back(Block{base, RoundDown(capacity, kAlign), kNil, kNil, kNil, kNil, true});
  head_ = 0;
  free_count_ = 1;
}

uint32_t FreeListAllocator::NewBlock() {
  if (!spare_.empty()) {
    const uint32_t b = spare_.back();
    spare_.pop_back();
    return b;
  }
  blocks_.emplace_back();
  return static_cast<uint32_t>(blocks_.size() - 1);
}

void FreeListAllocator::Unlink(uint32_t b) {
  Block& k = blocks_[b];
  if (k.prev_free != kNil) {
    blocks_[k.prev_free].next_free = k.next_free;
  } else {
    head_ = k.next_free;
  }
  if (k.next_free != kNil) blocks_[k.next_free].prev_free = k.prev_free;
  k.prev_free = k.next_free = kNil;
  --free_count_;
}

void FreeListAllocator::LinkAfter(uint32_t after, uint32_t b) {
  Block& k = blocks_[b];
  k.prev_free = after;
  k.next_free = after == kNil ? head_ : blocks_[after].next_free;
  if (k.next_free != kNil) blocks_[k.next_free].prev_free = b;
  if (after == kNil) {
    head_ = b;
  } else {
    blocks_[after].next_free = b;
  }
  ++free_count_;
}

uint64_t FreeListAllocator::Allocate(uint64_t size) {
  const uint64_t n = RoundUp(std::max<uint64_t>(size, 1), kAlign);
  uint32_t pick = kNil;
  for (uint32_t b = head_; b != kNil; b = blocks_[b].next_free) {
    const uint64_t s = blocks_[b].size;
    if (s < n) continue;
    if (fit_ == Fit::kFirst) {
      pick = b;
      break;
    }
    if (pick == kNil || s < blocks_[pick].size) pick = b;
    if (s == n) break;
  }
  if (pick == kNil) return 0;
  if (blocks_[pick].size > n) {
    const uint32_t t = NewBlock();  // may move blocks_: indices only until here
    Block& k = blocks_[pick];
    blocks_[t] = Block{k.addr + n, k.size - n, pick, k.next_phys, kNil, kNil, true};
    if (k.next_phys != kNil) blocks_[k.next_phys].prev_phys = t;
    k.next_phys = t;
    k.size = n;
    LinkAfter(pick, t);
  }
  Unlink(pick);
  Block& k = blocks_[pick];
  k.free = false;
  live_.Insert(k.addr, pick);
  held_ += n;
  top_ = std::max(top_, k.addr + n - base_);
  return k.addr;
}

bool FreeListAllocator::Free(uint64_t addr) {
  const uint32_t b = live_.Find(addr);
  if (b == AddrTable::kNone) return false;
  live_.Erase(addr);
  held_ -= blocks_[b].size;
  blocks_[b].free = true;
  bool linked = false;
  const uint32_t next = blocks_[b].next_phys;
  if (next != kNil && blocks_[next].free) {
    // b takes next's place in the list: no free block lies between them.
    Block& k = blocks_[b];
    Block& x = blocks_[next];
    k.size += x.size;
    k.next_phys = x.next_phys;
    if (k.next_phys != kNil) blocks_[k.next_phys].prev_phys = b;
    k.prev_free = x.prev_free;
    k.next_free = x.next_free;
    if (k.prev_free != kNil) {
      blocks_[k.prev_free].next_free = b;
    } else {
      head_ = b;
    }
    if (k.next_free != kNil) blocks_[k.next_free].prev_free = b;
    x = Block{};
    spare_.push_back(next);
    linked = true;
  }
  const uint32_t prev = blocks_[b].prev_phys;
  if (prev != kNil && blocks_[prev].free) {
    if (linked) Unlink(b);
    Block& k = blocks_[b];
    blocks_[prev].size += k.size;
    blocks_[prev].next_phys = k.next_phys;
    if (k.next_phys != kNil) blocks_[k.next_phys].prev_phys = prev;
    k = Block{};
    spare_.push_back(b);
    return true;
  }
  if (!linked) {
    uint32_t after = kNil;
    for (uint32_t q = head_; q != kNil && blocks_[q].addr < addr; q = blocks_[q].next_free) after = q;
    LinkAfter(after, b);
  }
  return true;
}

AllocatorState FreeListAllocator::State() const {
  AllocatorState s;
  s.held = held_;
  s.footprint = top_;
  s.peak_footprint = top_;
  for (uint32_t b = head_; b != kNil; b = blocks_[b].next_free) {
    s.largest_allocation = std::max(s.largest_allocation, blocks_[b].size);
  }
  return s;
}

// --- CachingAllocator ---

CachingAllocator::CachingAllocator(uint64_t capacity) : capacity_(capacity) {}

uint32_t CachingAllocator::NewBlock() {
  if (!spare_.empty()) {
    const uint32_t b = spare_.back();
    spare_.pop_back();
    return b;
  }
  blocks_.emplace_back();
  return static_cast<uint32_t>(blocks_.size() - 1);
}

bool CachingAllocator::ReleaseCached() {
  bool any = false;
  for (std::set<Key>* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const uint32_t b = std::get<2>(*it);
      if (blocks_[b].prev != kNil || blocks_[b].next != kNil) {
        ++it;
        continue;
      }
      reserved_ -= blocks_[b].size;
      blocks_[b] = Block{};
      spare_.push_back(b);
      it = pool->erase(it);
      ++segments_released_;
      any = true;
    }
  }
  return any;
}

uint64_t CachingAllocator::Allocate(uint64_t size) {
  const uint64_t rs = size < kMinBlock ? kMinBlock : RoundUp(size, kMinBlock);
  const bool small = rs <= kSmallSize;
  std::set<Key>& pool = PoolOf(small);
  uint32_t b = kNil;
  if (auto it = pool.lower_bound(Key{rs, 0, 0}); it != pool.end()) {
    b = std::get<2>(*it);
    pool.erase(it);
  } else {
    const uint64_t segment = small ? kSmallBuffer : rs < kMinLargeAlloc ? kLargeBuffer : RoundUp(rs, kRoundLarge);
    if (reserved_ + segment > capacity_) {
      // cudaMalloc failed: free the cached segments and try once more.
      if (!ReleaseCached() || reserved_ + segment > capacity_) return 0;
    }
    b = NewBlock();
    blocks_[b] = Block{next_addr_, segment, kNil, kNil, small, false};
    next_addr_ += segment + kRoundLarge;
    reserved_ += segment;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  const uint64_t remaining = blocks_[b].size - rs;
  if (small ? remaining >= kMinBlock : remaining > kSmallSize) {
    const uint32_t r = NewBlock();
    Block& k = blocks_[b];
    blocks_[r] = Block{k.addr + rs, remaining, b, k.next, small, false};
    if (k.next != kNil) blocks_[k.next].prev = r;
    k.next = r;
    k.size = rs;
    pool.insert(Key{remaining, blocks_[r].addr, r});
  }
  Block& k = blocks_[b];
  k.allocated = true;
  held_ += k.size;
  live_.Insert(k.addr, b);
  return k.addr;
}

bool CachingAllocator::Free(uint64_t addr) {
  const uint32_t b = live_.Find(addr);
  if (b == AddrTable::kNone) return false;
  live_.Erase(addr);
  std::set<Key>& pool = PoolOf(blocks_[b].small);
  held_ -= blocks_[b].size;
  blocks_[b].allocated = false;
  if (const uint32_t p = blocks_[b].prev; p != kNil && !blocks_[p].allocated) {
    pool.erase(Key{blocks_[p].size, blocks_[p].addr, p});
    Block& k = blocks_[b];
    k.addr = blocks_[p].addr;
    k.size += blocks_[p].size;
    k.prev = blocks_[p].prev;
    if (k.prev != kNil) blocks_[k.prev].next = b;
    blocks_[p] = Block{};
    spare_.push_back(p);
  }
  if (const uint32_t n = blocks_[b].next; n != kNil && !blocks_[n].allocated) {
    pool.erase(Key{blocks_[n].size, blocks_[n].addr, n});
    Block& k = blocks_[b];
    k.size += blocks_[n].size;
    k.next = blocks_[n].next;
    if (k.next != kNil) blocks_[k.next].prev = b;
    blocks_[n] = Block{};
    spare_.push_back(n);
  }
  pool.insert(Key{blocks_[b].size, blocks_[b].addr, b});
  return true;
}

AllocatorState CachingAllocator::State() const {
  AllocatorState s;
  s.held = held_;
  s.footprint = reserved_;
  s.peak_footprint = peak_reserved_;
  // A new segment can take what the device has left plus every cached whole
  // segment (released on the retry); a cached block serves from its pool.
  uint64_t releasable = 0;
  for (const std::set<Key>* pool : {&small_pool_, &large_pool_}) {
    for (const Key& key : *pool) {
      const Block& k = blocks_[std::get<2>(key)];
      if (k.prev == kNil && k.next == kNil) releasable += k.size;
    }
  }
  s.largest_allocation = RoundDown(capacity_ - reserved_ + releasable, kRoundLarge);
  if (!large_pool_.empty()) s.largest_allocation = std::max(s.largest_allocation, std::get<0>(*large_pool_.rbegin()));
  if (!small_pool_.empty()) {
    s.largest_allocation = std::max(s.largest_allocation, std::min(kSmallSize, std::get<0>(*small_pool_.rbegin())));
  }
  return s;
}

}  // namespace drover::bench
