// The C API of libdrover_mem: pool handles, option checks, and the calls that
// run a PoolState (pool_state.h: accounting, growth, stitching) under its
// slot's mutex.
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
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/memory/backend.h"
#include "drover/memory/drover_mem.h"
#include "drover/memory/pool_state.h"

namespace drover::memory {
namespace {

constexpr int kSlotBits = 12;
static_assert((1 << kSlotBits) == DROVER_MEM_MAX_POOLS);
constexpr uint64_t kDefaultReserve = uint64_t{64} << 20;
constexpr uint64_t kDefaultMinAlignment = 256;
constexpr uint32_t kDefaultMaxTags = 256;
constexpr uint32_t kMaxTags = 65536;

struct alignas(64) Slot {
  Mutex mu;
  uint64_t generation DROVER_GUARDED_BY(mu) = 1;
  PoolState* pool DROVER_GUARDED_BY(mu) = nullptr;
};

Slot g_slots[DROVER_MEM_MAX_POOLS];
Mutex g_registry_mu;
bool g_taken[DROVER_MEM_MAX_POOLS] DROVER_GUARDED_BY(g_registry_mu);

// Runs f(pool) under the pool's mutex when handle names a live pool.
template <typename F>
int WithPool(drover_mem_pool_t handle, F&& f) {
  const uint64_t index = handle.id & (DROVER_MEM_MAX_POOLS - 1);
  const uint64_t generation = handle.id >> kSlotBits;
  if (generation == 0) return DROVER_MEM_ERR_INVALID_POOL;
  Slot& slot = g_slots[index];
  MutexLock lock(&slot.mu);
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

int CreatePool(std::unique_ptr<MemoryBackend> backend, const drover_mem_options_t& options, drover_mem_pool_t* pool) {
  if (backend == nullptr || pool == nullptr) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  pool->id = 0;
  if (options.max_tags == 0 || options.max_tags > kMaxTags) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  if ((options.flags & ~uint32_t{DROVER_MEM_FLAG_NO_REMAP}) != 0) return DROVER_MEM_ERR_INVALID_ARGUMENT;
  if (options.reserve_bytes == 0 || options.reserve_bytes >= kMaxSize || options.limit_bytes >= kMaxSize ||
      options.grow_bytes >= kMaxSize) {
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
      MutexLock lock(&g_registry_mu);
      while (index < DROVER_MEM_MAX_POOLS && g_taken[index]) ++index;
      if (index == DROVER_MEM_MAX_POOLS) return DROVER_MEM_ERR_TOO_MANY_POOLS;
      g_taken[index] = true;
    }
    Slot& slot = g_slots[index];
    MutexLock lock(&slot.mu);
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
    drover::MutexLock lock(&slot.mu);
    if (slot.pool == nullptr || slot.generation != generation) return DROVER_MEM_ERR_INVALID_POOL;
    doomed = slot.pool;
    slot.pool = nullptr;
    ++slot.generation;
  }
  delete doomed;  // releases the segments outside the lock
  drover::MutexLock lock(&m::g_registry_mu);
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
  return WithPool(
      pool, [&](PoolState& p) { return ptr == nullptr ? DROVER_MEM_OK : p.Free(reinterpret_cast<uint64_t>(ptr)); });
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
