#include "drover/gateway/prefix_scorer.h"

#include <algorithm>
#include <cstring>

namespace drover::gateway {
namespace {

uint64_t Fmix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

// One block folded into `h`, 16 bytes a step in two independent lanes of
// a multiply-rotate each (the multiplies' latency overlaps), then a
// finalizer (equality is all that matters: the chains are never trusted
// across tenants, whose entries are kept apart by salt).
uint64_t HashBlock(uint64_t h, const char* p) {
  static_assert(kBlockBytes % 16 == 0);
  uint64_t a = h, b = h ^ 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < kBlockBytes; i += 16) {
    uint64_t w1, w2;
    std::memcpy(&w1, p + i, 8);
    std::memcpy(&w2, p + i + 8, 8);
    a ^= w1;
    b ^= w2;
    a = ((a << 31) | (a >> 33)) * 0x9e3779b97f4a7c15ULL;
    b = ((b << 27) | (b >> 37)) * 0xc2b2ae3d27d4eb4fULL;
  }
  return Fmix(a ^ ((b << 17) | (b >> 47)));
}

// Whether any byte of `w` is `c` (SWAR: the classic has-zero-byte test).
constexpr uint64_t kOnes = 0x0101010101010101ULL;
uint64_t HasByte(uint64_t w, unsigned char c) {
  const uint64_t x = w ^ (kOnes * c);
  return (x - kOnes) & ~x & (kOnes << 7);
}

bool Space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::string_view PromptOf(std::string_view body) {
  const size_t n = std::min(body.size(), kMaxScanBytes);
  int depth = 0;
  size_t prompt_at = std::string_view::npos;
  for (size_t i = 0; i < n; ++i) {
    const char c = body[i];
    if (c == '"') {
      const size_t start = ++i;
      while (i < n && body[i] != '"') i += body[i] == '\\' ? 2 : 1;
      if (i >= n) break;
      if (depth != 1) continue;
      const std::string_view s = body.substr(start, i - start);
      size_t j = i + 1;
      while (j < n && Space(body[j])) ++j;
      if (j >= n || body[j] != ':') continue;  // a value, not a key
      if (s == "messages") return body.substr(j + 1);
      if (s == "prompt" && prompt_at == std::string_view::npos) prompt_at = j + 1;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return prompt_at == std::string_view::npos ? std::string_view() : body.substr(prompt_at);
}

std::vector<uint64_t> PrefixChain(std::string_view prompt, uint64_t salt) {
  std::vector<uint64_t> chain;
  chain.reserve(std::min(prompt.size() / kBlockBytes, kMaxBlocks));
  uint64_t h = Fmix(salt ^ 0x6a09e667f3bcc908ULL);
  char block[kBlockBytes];
  size_t fill = 0;
  // Hashes the block once full. Fixed-size copies below, so that the
  // compiler inlines them (a copy of a variable size is a call per word).
  auto full = [&] {
    if (fill < kBlockBytes) return false;
    h = HashBlock(h, block);
    chain.push_back(h);
    fill = 0;
    return chain.size() == kMaxBlocks;
  };
  auto keep8 = [&](const char* q) {
    if (fill + 8 <= kBlockBytes) {
      std::memcpy(block + fill, q, 8);
      fill += 8;
      return full();
    }
    for (int j = 0; j < 8; ++j) {
      block[fill++] = q[j];
      if (full()) return true;
    }
    return false;
  };
  bool in_string = false, escaped = false;
  // Bounded in the input read too, not only in the blocks made: a prompt
  // of whitespace alone (dropped) would otherwise be walked to its end.
  const size_t limit = std::min(prompt.size(), 4 * kMaxBlocks * kBlockBytes);
  const char* p = prompt.data();
  size_t i = 0;
  while (i < limit) {
    // Eight bytes at once where none of them changes the state (most of a
    // prompt: the text inside its strings).
    if (i + 8 <= limit && !escaped) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      const uint64_t special = in_string ? HasByte(w, '"') | HasByte(w, '\\')
                                         : HasByte(w, '"') | HasByte(w, ' ') | HasByte(w, '\n') |
                                               HasByte(w, '\t') | HasByte(w, '\r');
      if (special == 0) {
        if (keep8(p + i)) break;
        i += 8;
        continue;
      }
    }
    const char c = p[i++];
    if (escaped) {
      escaped = false;
    } else if (in_string) {
      if (c == '\\') escaped = true;
      if (c == '"') in_string = false;
    } else if (Space(c)) {
      continue;
    } else if (c == '"') {
      in_string = true;
    }
    block[fill++] = c;
    if (full()) break;
  }
  return chain;
}

PrefixCache::PrefixCache(size_t capacity, size_t owner_share)
    : capacity_(std::min<size_t>(capacity, kNil - 1)), owner_share_(std::max<size_t>(owner_share, 1)) {}

bool PrefixCache::Holds(uint64_t salt, uint64_t hash) const {
  auto it = index_.find(hash);
  return it != index_.end() && slots_[it->second].salt == salt;
}

size_t PrefixCache::Match(uint64_t salt, const std::vector<uint64_t>& chain) const {
  MutexLock lock(&mu_);
  if (index_.empty() || chain.empty()) return 0;
  // The largest k with chain[k-1] held, taking "held" as prefix-closed.
  size_t lo = 0, hi = chain.size();
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    if (Holds(salt, chain[mid - 1])) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

void PrefixCache::Unlink(uint32_t i) {
  Entry& e = slots_[i];
  (e.prev == kNil ? head_ : slots_[e.prev].next) = e.next;
  (e.next == kNil ? tail_ : slots_[e.next].prev) = e.prev;
  Owner& o = owners_[e.owner];
  (e.oprev == kNil ? o.head : slots_[e.oprev].onext) = e.onext;
  (e.onext == kNil ? o.tail : slots_[e.onext].oprev) = e.oprev;
  e.prev = e.next = e.oprev = e.onext = kNil;
  if (--o.count == 0) owners_.erase(e.owner);
}

void PrefixCache::LinkFront(uint32_t i) {
  Entry& e = slots_[i];
  e.prev = kNil;
  e.next = head_;
  if (head_ != kNil) slots_[head_].prev = i;
  head_ = i;
  if (tail_ == kNil) tail_ = i;
  Owner& o = owners_[e.owner];
  e.oprev = kNil;
  e.onext = o.head;
  if (o.head != kNil) slots_[o.head].oprev = i;
  o.head = i;
  if (o.tail == kNil) o.tail = i;
  ++o.count;
}

void PrefixCache::Evict(uint32_t i) {
  Unlink(i);
  index_.erase(slots_[i].hash);
  free_.push_back(i);
}

void PrefixCache::Insert(uint64_t salt, uint64_t owner, const std::vector<uint64_t>& chain) {
  if (chain.empty() || capacity_ == 0) return;
  MutexLock lock(&mu_);
  // Last block first, so that the first blocks (shared by the most
  // requests) are the most recent and the last to go.
  for (auto h = chain.rbegin(); h != chain.rend(); ++h) {
    if (auto it = index_.find(*h); it != index_.end()) {
      if (slots_[it->second].salt != salt) continue;  // another tenant's (a 2^-64 collision): left alone
      Unlink(it->second);
      LinkFront(it->second);
      continue;
    }
    // Room first: the owner's own oldest when it holds its share, else the
    // oldest of all when full.
    if (auto o = owners_.find(owner); o != owners_.end() && o->second.count >= owner_share_) {
      Evict(o->second.tail);
    } else if (index_.size() >= capacity_) {
      Evict(tail_);
    }
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else {
      i = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    slots_[i].hash = *h;
    slots_[i].salt = salt;
    slots_[i].owner = owner;
    LinkFront(i);
    index_.emplace(*h, i);
  }
}

void PrefixCache::Erase(uint64_t salt, const std::vector<uint64_t>& chain) {
  MutexLock lock(&mu_);
  for (uint64_t h : chain) {
    auto it = index_.find(h);
    if (it != index_.end() && slots_[it->second].salt == salt) Evict(it->second);
  }
}

size_t PrefixCache::size() const {
  MutexLock lock(&mu_);
  return index_.size();
}

size_t PrefixCache::held_by(uint64_t owner) const {
  MutexLock lock(&mu_);
  auto it = owners_.find(owner);
  return it == owners_.end() ? 0 : it->second.count;
}

}  // namespace drover::gateway
