// libdrover_torch_alloc.so: the two functions PyTorch's
// torch.cuda.memory.CUDAPluggableAllocator loads (issue 19 item 4), over
// libdrover_mem pools, so a training or serving process runs on Drover's
// pool without changing its model code (docs/memory.md "PyTorch"):
//
//   import torch
//   alloc = torch.cuda.memory.CUDAPluggableAllocator(
//       "/usr/lib/drover/libdrover_torch_alloc.so", "drover_torch_malloc", "drover_torch_free")
//   torch.cuda.memory.change_current_allocator(alloc)   # before the first CUDA tensor
//
// One pool per device, created at the device's first allocation on the CUDA
// backend (DROVER_TORCH_BACKEND=host gives host memory, for tests without a
// GPU). Its limit is DROVER_TORCH_POOL_LIMIT, else DROVER_GPU_MEMORY_LIMIT
// (the agent's limit for the job), else what the device gives; it reserves
// DROVER_TORCH_POOL_RESERVE bytes at a time (default 256 MiB).
//
// Errors: PyTorch's malloc has no error code, so a refusal returns NULL
// (PyTorch raises torch.cuda.OutOfMemoryError) and the reason goes to stderr;
// a bad free is reported on stderr and otherwise ignored (the process goes
// on). Thread-safe: pools are thread-safe and their creation is under a
// mutex. Streams are not used: a freed block is reused at once by any
// stream, so memory freed while another stream still reads it must be
// synchronised by the caller (PyTorch does so for the default stream;
// record_stream is not honoured by pluggable allocators).

#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "drover/memory/drover_mem.h"

#define TORCH_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxDevices = 64;

struct Pools {
  std::mutex mu;
  drover_mem_pool_t pool[kMaxDevices] = {};
  int error[kMaxDevices] = {};  // the creation's error, kept: no retry storm
};

Pools& P() {
  static Pools* p = new Pools;  // never destroyed: frees may come at exit
  return *p;
}

uint64_t EnvBytes(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || x == 0) {
    std::fprintf(stderr, "drover_torch: %s='%s' is not a byte count; using %llu\n", name, v,
                 static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return x;
}

// The device's pool, created on first use; 0 with an error printed once.
drover_mem_pool_t PoolFor(int device) {
  Pools& p = P();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.pool[device].id != 0 || p.error[device] != 0) return p.pool[device];
  drover_mem_options_t opt;
  drover_mem_options_init(&opt);
  const char* backend = std::getenv("DROVER_TORCH_BACKEND");
  if (backend == nullptr || *backend == '\0' || std::strcmp(backend, "cuda") == 0) {
    opt.backend = DROVER_MEM_BACKEND_CUDA;
  } else if (std::strcmp(backend, "host") == 0) {
    opt.backend = DROVER_MEM_BACKEND_HOST;
  } else {
    p.error[device] = DROVER_MEM_ERR_INVALID_ARGUMENT;
    std::fprintf(stderr, "drover_torch: DROVER_TORCH_BACKEND='%s' is neither 'cuda' nor 'host'\n", backend);
    return p.pool[device];
  }
  opt.device = device;
  opt.reserve_bytes = EnvBytes("DROVER_TORCH_POOL_RESERVE", 256ull << 20);
  uint64_t limit = EnvBytes("DROVER_GPU_MEMORY_LIMIT", 1ull << 40);
  opt.limit_bytes = EnvBytes("DROVER_TORCH_POOL_LIMIT", limit);
  if (opt.reserve_bytes > opt.limit_bytes) opt.reserve_bytes = opt.limit_bytes;
  opt.grow_bytes = opt.reserve_bytes;
  opt.min_alignment = 512;  // what PyTorch's own allocator rounds to
  int rc = drover_mem_pool_create(&opt, &p.pool[device]);
  if (rc != DROVER_MEM_OK) {
    p.error[device] = rc;
    p.pool[device].id = 0;
    std::fprintf(stderr, "drover_torch: cannot create the pool of device %d: %s\n", device, drover_mem_strerror(rc));
  }
  return p.pool[device];
}

}  // namespace

// PyTorch: void* alloc_fn(ssize_t size, int device, cudaStream_t stream).
TORCH_API void* drover_torch_malloc(ssize_t size, int device, void* stream) {
  (void)stream;
  if (size <= 0 || device < 0 || device >= kMaxDevices) {
    std::fprintf(stderr, "drover_torch_malloc: bad size %zd or device %d\n", size, device);
    return nullptr;
  }
  drover_mem_pool_t pool = PoolFor(device);
  if (pool.id == 0) return nullptr;
  void* ptr = nullptr;
  int rc = drover_mem_alloc(pool, static_cast<size_t>(size), 0, 0, &ptr);
  if (rc != DROVER_MEM_OK) {
    // Out of memory is PyTorch's to report (it may free its cache and retry).
    if (rc != DROVER_MEM_ERR_OUT_OF_MEMORY && rc != DROVER_MEM_ERR_TOO_LARGE) {
      std::fprintf(stderr, "drover_torch_malloc: %zd bytes on device %d: %s\n", size, device, drover_mem_strerror(rc));
    }
    return nullptr;
  }
  return ptr;
}

// PyTorch: void free_fn(void* ptr, ssize_t size, int device, cudaStream_t stream).
TORCH_API void drover_torch_free(void* ptr, ssize_t size, int device, void* stream) {
  (void)stream;
  if (ptr == nullptr) return;
  if (device < 0 || device >= kMaxDevices) {
    std::fprintf(stderr, "drover_torch_free: bad device %d for %p\n", device, ptr);
    return;
  }
  drover_mem_pool_t pool;
  {
    Pools& p = P();
    std::lock_guard<std::mutex> lock(p.mu);
    pool = p.pool[device];
  }
  int rc = pool.id == 0 ? DROVER_MEM_ERR_FOREIGN_POINTER : drover_mem_free(pool, ptr);
  if (rc != DROVER_MEM_OK) {
    std::fprintf(stderr, "drover_torch_free: %p (%zd bytes) on device %d: %s\n", ptr, size, device,
                 drover_mem_strerror(rc));
  }
}

// For tests and monitoring: the bytes in use on a device's pool (0 without one).
TORCH_API size_t drover_torch_bytes_in_use(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  drover_mem_pool_t pool;
  {
    Pools& p = P();
    std::lock_guard<std::mutex> lock(p.mu);
    pool = p.pool[device];
  }
  drover_mem_stats_t st;
  if (pool.id == 0 || drover_mem_stats(pool, &st) != DROVER_MEM_OK) return 0;
  return st.bytes_in_use;
}
