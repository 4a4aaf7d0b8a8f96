#pragma once
// Stable hashing for identities that must not change across runs, builds
// and machines (std::hash promises none of that).

#include <cstdint>
#include <string_view>

namespace drover {

// FNV-1a, 64 bit.
constexpr uint64_t Fnv1a64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace drover
