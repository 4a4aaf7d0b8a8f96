#pragma once
// Prefix-aware replica choice (private; issue 44, docs/gateway.md "Replica
// choice"): a request's prompt is hashed in fixed-size byte blocks, each
// block's hash chained to the one before (so block i's hash names the whole
// prefix up to block i), starting from the tenant's salt. Each replica
// remembers the chains the gateway sent it recently (PrefixCache); a new
// request's expected cache hit on a replica is the length of its longest
// remembered prefix. No tokenizer: the blocks are bytes of the message
// sequence as the client sent it (whitespace outside strings dropped),
// which a multi-turn chat repeats byte for byte turn after turn.
//
// Bounds (bad input): the prompt is looked for in the first kMaxScanBytes
// of the body, and at most kMaxBlocks blocks of kBlockBytes are hashed, so
// a request costs at most a 64 KiB scan and 16 KiB of hashing whatever its
// size; a replica holds at most kBlocksPerReplica hashes (about 64 bytes
// each), and one client (an API key) at most a quarter of them, so a client
// sending crafted prompts evicts mostly its own.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "drover/common/mutex.h"

namespace drover::gateway {

inline constexpr size_t kBlockBytes = 128;
inline constexpr size_t kMaxBlocks = 128;          // 16 KiB of prompt hashed
inline constexpr size_t kMaxScanBytes = 64 << 10;  // where the prompt must start
inline constexpr size_t kBlocksPerReplica = 16384;  // ~2 MiB of prompt text, ~1 MiB of memory

// The prompt of a chat or completions body: the bytes from the value of
// its top-level "messages" (or else "prompt") key to the end of the body;
// empty when neither starts within kMaxScanBytes. A scan of string and
// bracket state only, not a parse: it runs on bodies ParseRequest accepted.
std::string_view PromptOf(std::string_view body);

// The chained hashes of the whole blocks of `prompt`, whitespace outside
// JSON strings dropped (a tail shorter than a block is not hashed: no
// engine caches part of a block either), at most kMaxBlocks; the chain
// starts from `salt` (the tenant's), so two tenants' equal prompts share no
// hash.
//
// Example: a 300-byte prompt gives 2 hashes h1 = H(salt, bytes 0..127),
// h2 = H(h1, bytes 128..255); a second request with the same first 200
// bytes gives the same h1 and another h2.
std::vector<uint64_t> PrefixChain(std::string_view prompt, uint64_t salt);

// What one replica holds, as the gateway believes: the block hashes it sent
// there, each tagged with its tenant's salt and the client (owner) that
// first sent it. Thread-safe (a mutex: every io thread routes to the same
// replicas; held for O(log chain) per Match, O(chain) per Insert). Dropped
// with its replica.
//
// Eviction: least recently used first, except that an owner holding
// owner_share entries evicts its own least recently used one. So one
// client flooding a replica with crafted prompts holds at most owner_share
// entries, and everyone else keeps capacity - owner_share.
//
// Invariants: index_ names exactly the linked entries; the LRU list and
// the owner lists hold the same entries; size() <= capacity; every owner
// holds 1..owner_share entries; free_ and the linked entries partition
// slots_.
class PrefixCache {
 public:
  explicit PrefixCache(size_t capacity = kBlocksPerReplica, size_t owner_share = kBlocksPerReplica / 4);
  // How many leading blocks of `chain` of tenant `salt` this replica holds
  // (0..chain.size()). A binary search: Insert keeps a chain's first blocks
  // more recent than its later ones, so what is held is (nearly always) a
  // prefix of it.
  size_t Match(uint64_t salt, const std::vector<uint64_t>& chain) const;
  // Records that `chain` of tenant `salt` was sent here by `owner`: its
  // hashes become the most recent, its first block the most recent of all.
  // A hash already held keeps its owner.
  void Insert(uint64_t salt, uint64_t owner, const std::vector<uint64_t>& chain);
  // Forgets `chain` of tenant `salt` (a replica that failed the request it
  // was sent for never got the prompt).
  void Erase(uint64_t salt, const std::vector<uint64_t>& chain);
  size_t size() const;                  // hashes held
  size_t held_by(uint64_t owner) const;  // of which `owner`'s

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Entry {
    uint64_t hash = 0, salt = 0, owner = 0;
    uint32_t prev = kNil, next = kNil;    // the LRU list, most recent first
    uint32_t oprev = kNil, onext = kNil;  // the owner's list, most recent first
  };
  struct Owner {
    uint32_t head = kNil, tail = kNil;
    size_t count = 0;
  };
  bool Holds(uint64_t salt, uint64_t hash) const DROVER_REQUIRES(mu_);
  void Unlink(uint32_t i) DROVER_REQUIRES(mu_);
  void LinkFront(uint32_t i) DROVER_REQUIRES(mu_);
  void Evict(uint32_t i) DROVER_REQUIRES(mu_);

  const size_t capacity_, owner_share_;
  mutable Mutex mu_;
  std::vector<Entry> slots_ DROVER_GUARDED_BY(mu_);  // grows up to capacity_
  std::vector<uint32_t> free_ DROVER_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, uint32_t> index_ DROVER_GUARDED_BY(mu_);  // hash -> slot
  std::unordered_map<uint64_t, Owner> owners_ DROVER_GUARDED_BY(mu_);
  uint32_t head_ DROVER_GUARDED_BY(mu_) = kNil;
  uint32_t tail_ DROVER_GUARDED_BY(mu_) = kNil;
};

}  // namespace drover::gateway
