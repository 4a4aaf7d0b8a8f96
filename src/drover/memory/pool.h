#pragma once
// Pool: the thin C++ face of libdrover_mem (drover_mem.h).
//
// Owns one pool handle (move-only; the destructor destroys the pool) and turns
// the C error codes into Status: "can never fit" (DROVER_MEM_ERR_TOO_LARGE)
// is kInvalidArgument, "cannot fit now" (DROVER_MEM_ERR_OUT_OF_MEMORY) is
// kResourceExhausted, a dead handle is kFailedPrecondition. Thread-safe like
// the C API (one mutex per pool).
//
//   auto pool = memory::Pool::Create({.reserve_bytes = 1 << 30});
//   auto p = pool->Allocate(4096, /*alignment=*/0, /*tag=*/tenant);
//   ... pool->Free(*p);

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "drover/common/status.h"
#include "drover/memory/drover_mem.h"

namespace drover::memory {

// The Status of a C error code; what names the call ("alloc of 4096 bytes").
inline Status StatusFromCode(int code, const std::string& what) {
  if (code == DROVER_MEM_OK) return Status::Ok();
  std::string message = what + ": " + drover_mem_strerror(code);
  switch (code) {
    case DROVER_MEM_ERR_OUT_OF_MEMORY:
    case DROVER_MEM_ERR_TOO_MANY_POOLS: return ResourceExhausted(std::move(message));
    case DROVER_MEM_ERR_INVALID_POOL: return FailedPrecondition(std::move(message));
    case DROVER_MEM_ERR_UNSUPPORTED: return Unimplemented(std::move(message));
    case DROVER_MEM_ERR_BACKEND: return Internal(std::move(message));
    default: return InvalidArgument(std::move(message));
  }
}

struct PoolOptions {
  drover_mem_backend_t backend = DROVER_MEM_BACKEND_HOST;
  int device = 0;
  size_t reserve_bytes = size_t{64} << 20;
  size_t limit_bytes = 0;  // 0: reserve_bytes
  size_t grow_bytes = 0;   // 0: reserve_bytes
  size_t min_alignment = 256;
  uint32_t max_tags = 256;
  uint32_t flags = 0;  // DROVER_MEM_FLAG_*
};

class Pool {
 public:
  static Result<Pool> Create(const PoolOptions& o) {
    drover_mem_options_t c;
    drover_mem_options_init(&c);
    c.backend = o.backend;
    c.device = o.device;
    c.reserve_bytes = o.reserve_bytes;
    c.limit_bytes = o.limit_bytes;
    c.grow_bytes = o.grow_bytes;
    c.min_alignment = o.min_alignment;
    c.max_tags = o.max_tags;
    c.flags = o.flags;
    drover_mem_pool_t handle;
    const int rc = drover_mem_pool_create(&c, &handle);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "create pool of " + std::to_string(o.reserve_bytes) + " bytes");
    return Pool(handle);
  }

  Pool(Pool&& other) noexcept : handle_(std::exchange(other.handle_, drover_mem_pool_t{0})) {}
  Pool& operator=(Pool&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, drover_mem_pool_t{0});
    }
    return *this;
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() { Reset(); }

  Result<void*> Allocate(size_t size, size_t alignment = 0, uint32_t tag = 0) {
    void* p = nullptr;
    const int rc = drover_mem_alloc(handle_, size, alignment, tag, &p);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "alloc of " + std::to_string(size) + " bytes");
    return p;
  }
  Status Free(void* p) { return StatusFromCode(drover_mem_free(handle_, p), "free"); }
  Result<size_t> UsableSize(const void* p) const {
    size_t size = 0;
    const int rc = drover_mem_usable_size(handle_, p, &size, nullptr);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "usable size");
    return size;
  }
  Result<drover_mem_stats_t> Stats() const {
    drover_mem_stats_t s;
    const int rc = drover_mem_stats(handle_, &s);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "stats");
    return s;
  }
  Result<drover_mem_tag_usage_t> TagUsage(uint32_t tag) const {
    drover_mem_tag_usage_t u;
    const int rc = drover_mem_tag_usage(handle_, tag, &u);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "usage of tag " + std::to_string(tag));
    return u;
  }
  Result<drover_mem_remap_stats_t> RemapStats() const {
    drover_mem_remap_stats_t s;
    const int rc = drover_mem_remap_stats(handle_, &s);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "remap stats");
    return s;
  }
  // Bytes of physical memory given back (drover_mem_release_free).
  Result<size_t> ReleaseFree() {
    size_t released = 0;
    const int rc = drover_mem_release_free(handle_, &released);
    if (rc != DROVER_MEM_OK) return StatusFromCode(rc, "release free memory");
    return released;
  }
  Status Trim() { return StatusFromCode(drover_mem_trim(handle_), "trim"); }

  // The C handle, for code that calls the C API (valid while this Pool lives).
  drover_mem_pool_t handle() const { return handle_; }

 private:
  explicit Pool(drover_mem_pool_t handle) : handle_(handle) {}
  void Reset() {
    if (handle_.id != 0) (void)drover_mem_pool_destroy(handle_);
    handle_.id = 0;
  }

  drover_mem_pool_t handle_{0};
};

}  // namespace drover::memory
