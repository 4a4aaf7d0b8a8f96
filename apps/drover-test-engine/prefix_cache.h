#pragma once
// The test engine's model of an engine's prefix cache (vLLM's automatic
// prefix caching, SGLang's radix cache), in words rather than tokens: a
// prompt's words in blocks of kBlockWords, each block's hash chained to the
// one before, an LRU of block hashes up to a capacity. A request's cached
// words are its leading blocks found in the cache; it then holds all its
// blocks, its first most recent. Header-only: the engine links no Drover
// library. Thread-safe (a mutex).
//
// Invariants: lru_ and index_ hold the same hashes; at most capacity_blocks_.
//
// Example: capacity 64 words (4 blocks); a 40-word prompt P caches 2 blocks
// (the last 8 words are no whole block); P again with 20 more words: 32
// words cached, 60 queried, and 3 blocks held.

#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "drover/common/mutex.h"

namespace drover::test_engine {

inline constexpr int64_t kBlockWords = 16;

class PrefixCacheModel {
 public:
  explicit PrefixCacheModel(int64_t capacity_words) : capacity_blocks_(capacity_words / kBlockWords) {}

  // The words of `prompt` already cached; records the prompt as cached.
  // Counts queried and hit words for the metrics.
  int64_t Admit(std::string_view prompt) {
    std::vector<uint64_t> chain = Chain(prompt);
    MutexLock lock(&mu_);
    size_t held = 0;
    while (held < chain.size() && index_.count(chain[held]) != 0) ++held;
    queried_ += Words(prompt);
    hits_ += static_cast<int64_t>(held) * kBlockWords;
    if (capacity_blocks_ > 0) {
      for (auto h = chain.rbegin(); h != chain.rend(); ++h) {
        if (auto it = index_.find(*h); it != index_.end()) {
          lru_.splice(lru_.begin(), lru_, it->second);
          continue;
        }
        lru_.push_front(*h);
        index_.emplace(*h, lru_.begin());
        if (static_cast<int64_t>(lru_.size()) > capacity_blocks_) {
          index_.erase(lru_.back());
          lru_.pop_back();
        }
      }
    }
    return static_cast<int64_t>(held) * kBlockWords;
  }
  int64_t queried() const {
    MutexLock lock(&mu_);
    return queried_;
  }
  int64_t hits() const {
    MutexLock lock(&mu_);
    return hits_;
  }
  int64_t held_words() const {
    MutexLock lock(&mu_);
    return static_cast<int64_t>(lru_.size()) * kBlockWords;
  }

  static int64_t Words(std::string_view s) {
    int64_t n = 0;
    bool in = false;
    for (char c : s) {
      const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
      if (!space && !in) ++n;
      in = !space;
    }
    return n;
  }

 private:
  // The chained hashes of the whole blocks of words of `prompt`.
  static std::vector<uint64_t> Chain(std::string_view prompt) {
    std::vector<uint64_t> chain;
    uint64_t h = 1469598103934665603ULL;
    int64_t words = 0;
    bool in = false;
    for (char c : prompt) {
      const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
      if (space) {
        if (in && ++words % kBlockWords == 0) chain.push_back(h);
        in = false;
        continue;
      }
      if (!in) h = (h ^ 0x20) * 1099511628211ULL;  // a word boundary
      in = true;
      h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
    if (in && ++words % kBlockWords == 0) chain.push_back(h);
    return chain;
  }

  const int64_t capacity_blocks_;
  mutable Mutex mu_;
  std::list<uint64_t> lru_ DROVER_GUARDED_BY(mu_);  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_ DROVER_GUARDED_BY(mu_);
  int64_t queried_ DROVER_GUARDED_BY(mu_) = 0;
  int64_t hits_ DROVER_GUARDED_BY(mu_) = 0;
};

}  // namespace drover::test_engine
