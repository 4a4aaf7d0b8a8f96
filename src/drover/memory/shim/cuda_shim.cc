// libdrover_cuda_shim.so: the GPU memory-limit shim (issue 19 item 5,
// docs/memory.md "The memory-limit shim").
//
// Preloaded (LD_PRELOAD) into a job by the agent. It interposes the driver
// API's allocation calls and keeps the process under DROVER_GPU_MEMORY_LIMIT
// bytes: an allocation beyond it fails with CUDA_ERROR_OUT_OF_MEMORY before
// it reaches the driver, and cuMemGetInfo reports the limit as the total and
// what is left of it as free. It reaches the calls three ways:
//   - by symbol: a program linked to libcuda.so.1 binds to the shim's
//     cuMemAlloc_v2 ... first (the shim is ahead of libcuda in the lookup);
//   - by dlsym: the CUDA runtime and PyTorch dlopen libcuda.so.1 and dlsym
//     from its handle, which bypasses LD_PRELOAD, so the shim interposes
//     dlsym itself and answers the names it intercepts with its wrappers;
//   - by cuGetProcAddress: the CUDA runtime (11.3+) finds every entry point
//     through it, so the shim's cuGetProcAddress asks the driver, then hands
//     back its wrapper for the names it intercepts (and itself for
//     cuGetProcAddress, so that later lookups come back here too).
//
// Accounting: bytes are charged when an allocation is asked for (a
// compare-and-swap on one atomic counter, so concurrent threads can never
// overshoot the limit together), refunded if the driver refuses, and
// refunded at the free of a pointer or release of a handle the shim saw
// allocated. A table from pointer (or VMM handle) to size, in mmap'd memory
// under a mutex, remembers what each allocation charged. Physical VMM memory
// is charged at cuMemCreate (mapping it again costs nothing), managed memory
// as if it were device memory.
//
// Reporting: with DROVER_GPU_MEMORY_REPORT=<dir>, the bytes in use are
// written to <dir>/<pid> (decimal, by write + rename, so a reader sees a
// whole number) after every change and removed at exit; the agent sums the
// files of live processes for drover_gpu_job_memory_used_bytes.
//
// Bad input never crashes the host process: a limit that is not a byte count
// or is smaller than one allocation granule (2 MiB) refuses every allocation
// (CUDA_ERROR_OUT_OF_MEMORY) and says why once on stderr; a free of a pointer
// the shim did not see goes to the driver unaccounted.
//
// Thread-safe. Async-signal-safety: the wrappers allocate no heap memory (the
// table is mmap'd, messages are write(2)s) and the report is written with
// open/write/rename only, so a wrapper interrupted by a signal whose handler
// frees GPU memory cannot deadlock in malloc. The table's mutex is not
// re-entrant: a signal handler that allocates GPU memory while its thread is
// inside a wrapper is not supported (nor is it by the driver).

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "drover/memory/standin_cuda/cu_subset.h"

#define SHIM_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr uint64_t kGranule = 2ull << 20;

// ---- small async-signal-safe helpers ------------------------------------------

void WriteAll(int fd, const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void Say(const char* a, const char* b = "", const char* c = "") {
  WriteAll(2, a, std::strlen(a));
  WriteAll(2, b, std::strlen(b));
  WriteAll(2, c, std::strlen(c));
}

// Decimal of v into buf (at least 21 bytes), returns its length.
size_t FormatU64(uint64_t v, char* buf) {
  char tmp[21];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  buf[n] = '\0';
  return n;
}

// Digits only, no overflow; false otherwise.
bool ParseU64(const char* s, uint64_t* out) {
  if (s == nullptr || *s == '\0') return false;
  uint64_t v = 0;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9') return false;
    uint64_t d = static_cast<uint64_t>(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// ---- the table of live allocations ---------------------------------------------

// Open addressing with linear probing over mmap'd slots (no heap: the
// wrappers may run where malloc must not). Key 0 marks an empty slot, key 1
// a deleted one: the driver hands out neither as a pointer or a handle.
//
// Invariants: capacity is a power of two; live + deleted < capacity * 3/4
// after every Put; every live key is reachable from its hash slot without
// crossing an empty slot. Guarded by mu.
class SizeTable {
 public:
  void Init() { pthread_mutex_init(&mu_, nullptr); }
  // After fork in the child: the parent's other threads are gone, with any
  // lock they held.
  void ResetAfterFork() {
    pthread_mutex_init(&mu_, nullptr);
    if (slots_ != nullptr) munmap(slots_, capacity_ * sizeof(Slot));
    slots_ = nullptr;
    capacity_ = live_ = deleted_ = 0;
  }

  bool Put(uint64_t key, uint64_t size) {
    pthread_mutex_lock(&mu_);
    bool ok = (live_ + deleted_ + 1) * 4 < capacity_ * 3 || Grow();
    if (ok) {
      uint64_t i = Hash(key) & (capacity_ - 1);
      while (slots_[i].key > kDeleted && slots_[i].key != key) i = (i + 1) & (capacity_ - 1);
      if (slots_[i].key == kDeleted) --deleted_;
      if (slots_[i].key != key) ++live_;
      slots_[i] = Slot{key, size};
    }
    pthread_mutex_unlock(&mu_);
    return ok;
  }

  // Removes key and returns its size in *size; false when absent.
  bool Take(uint64_t key, uint64_t* size) {
    pthread_mutex_lock(&mu_);
    bool found = false;
    if (capacity_ > 0) {
      uint64_t i = Hash(key) & (capacity_ - 1);
      while (slots_[i].key != kEmpty) {
        if (slots_[i].key == key) {
          *size = slots_[i].size;
          slots_[i].key = kDeleted;
          --live_;
          ++deleted_;
          found = true;
          break;
        }
        i = (i + 1) & (capacity_ - 1);
      }
    }
    pthread_mutex_unlock(&mu_);
    return found;
  }

 private:
  struct Slot {
    uint64_t key;
    uint64_t size;
  };
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kDeleted = 1;

  static uint64_t Hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }

  // Doubles (or cleans, when most of the load is deleted slots) the table.
  bool Grow() {
    uint64_t cap = capacity_ == 0 ? 1024 : (live_ * 2 >= capacity_ / 2 ? capacity_ * 2 : capacity_);
    void* mem = mmap(nullptr, cap * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return false;
    auto* fresh = static_cast<Slot*>(mem);  // zeroed: every slot empty
    for (uint64_t j = 0; j < capacity_; ++j) {
      if (slots_[j].key <= kDeleted) continue;
      uint64_t i = Hash(slots_[j].key) & (cap - 1);
      while (fresh[i].key != kEmpty) i = (i + 1) & (cap - 1);
      fresh[i] = slots_[j];
    }
    if (slots_ != nullptr) munmap(slots_, capacity_ * sizeof(Slot));
    slots_ = fresh;
    capacity_ = cap;
    deleted_ = 0;
    return true;
  }

  pthread_mutex_t mu_;
  Slot* slots_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t live_ = 0;
  uint64_t deleted_ = 0;
};

// ---- the real driver -----------------------------------------------------------

using DlsymFn = void* (*)(void*, const char*);
using MemAllocFn = CUresult (*)(CUdeviceptr*, size_t);
using MemAllocManagedFn = CUresult (*)(CUdeviceptr*, size_t, unsigned int);
using MemAllocPitchFn = CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
using MemAllocAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using MemAllocFromPoolAsyncFn = CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
using MemFreeFn = CUresult (*)(CUdeviceptr);
using MemFreeAsyncFn = CUresult (*)(CUdeviceptr, CUstream);
using MemCreateFn = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
using MemReleaseFn = CUresult (*)(CUmemGenericAllocationHandle);
using MemGetInfoFn = CUresult (*)(size_t*, size_t*);
using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcAddressV2Fn = CUresult (*)(const char*, void**, int, cuuint64_t, int*);

struct Real {
  MemAllocFn mem_alloc = nullptr;
  MemAllocManagedFn mem_alloc_managed = nullptr;
  MemAllocPitchFn mem_alloc_pitch = nullptr;
  MemAllocAsyncFn mem_alloc_async = nullptr;
  MemAllocAsyncFn mem_alloc_async_ptsz = nullptr;
  MemAllocFromPoolAsyncFn mem_alloc_from_pool_async = nullptr;
  MemAllocFromPoolAsyncFn mem_alloc_from_pool_async_ptsz = nullptr;
  MemFreeFn mem_free = nullptr;
  MemFreeAsyncFn mem_free_async = nullptr;
  MemFreeAsyncFn mem_free_async_ptsz = nullptr;
  MemCreateFn mem_create = nullptr;
  MemReleaseFn mem_release = nullptr;
  MemGetInfoFn mem_get_info = nullptr;
  GetProcAddressFn get_proc_address = nullptr;
  GetProcAddressV2Fn get_proc_address_v2 = nullptr;
};

Real g_real;
pthread_once_t g_real_once = PTHREAD_ONCE_INIT;
std::atomic<DlsymFn> g_real_dlsym{nullptr};

DlsymFn RealDlsym() {
  DlsymFn f = g_real_dlsym.load(std::memory_order_acquire);
  if (f != nullptr) return f;
  // dlvsym is not interposed; glibc 2.34 moved dlsym into libc (new version),
  // older glibc has only the 2.2.5 one.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  f = reinterpret_cast<DlsymFn>(p);
  g_real_dlsym.store(f, std::memory_order_release);
  return f;
}

template <typename F>
void Resolve(void* lib, const char* name, F* out) {
  DlsymFn real = RealDlsym();
  *out = real != nullptr ? reinterpret_cast<F>(real(lib, name)) : nullptr;
}

void ResolveReal() {
  // The driver the process would use without the shim: the libcuda.so.1 on
  // its library path (loaded already when the program links it).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    Say("drover shim: cannot load libcuda.so.1: every CUDA call through the shim fails\n");
    return;
  }
  Resolve(lib, "cuMemAlloc_v2", &g_real.mem_alloc);
  Resolve(lib, "cuMemAllocManaged", &g_real.mem_alloc_managed);
  Resolve(lib, "cuMemAllocPitch_v2", &g_real.mem_alloc_pitch);
  Resolve(lib, "cuMemAllocAsync", &g_real.mem_alloc_async);
  Resolve(lib, "cuMemAllocAsync_ptsz", &g_real.mem_alloc_async_ptsz);
  Resolve(lib, "cuMemAllocFromPoolAsync", &g_real.mem_alloc_from_pool_async);
  Resolve(lib, "cuMemAllocFromPoolAsync_ptsz", &g_real.mem_alloc_from_pool_async_ptsz);
  Resolve(lib, "cuMemFree_v2", &g_real.mem_free);
  Resolve(lib, "cuMemFreeAsync", &g_real.mem_free_async);
  Resolve(lib, "cuMemFreeAsync_ptsz", &g_real.mem_free_async_ptsz);
  Resolve(lib, "cuMemCreate", &g_real.mem_create);
  Resolve(lib, "cuMemRelease", &g_real.mem_release);
  Resolve(lib, "cuMemGetInfo_v2", &g_real.mem_get_info);
  Resolve(lib, "cuGetProcAddress", &g_real.get_proc_address);
  Resolve(lib, "cuGetProcAddress_v2", &g_real.get_proc_address_v2);
}

const Real& R() {
  pthread_once(&g_real_once, ResolveReal);
  return g_real;
}

// ---- accounting ------------------------------------------------------------------

enum class LimitState { kNone, kSet, kBad };

struct Accounting {
  LimitState state = LimitState::kNone;
  uint64_t limit = UINT64_MAX;
  std::atomic<uint64_t> used{0};
  std::atomic<bool> warned{false};
  SizeTable pointers;  // device pointer -> bytes charged
  SizeTable handles;   // cuMemCreate handle -> bytes charged
  char report_dir[512] = {0};
  const char* bad_value = "";
};

Accounting g_acct;

// Charges size bytes if that keeps the process under its limit.
bool Charge(uint64_t size) {
  if (g_acct.state == LimitState::kBad) {
    if (!g_acct.warned.exchange(true)) {
      Say("drover shim: DROVER_GPU_MEMORY_LIMIT='", g_acct.bad_value,
          "' is not a byte count of at least one allocation granule (2097152); every GPU allocation is "
          "refused with CUDA_ERROR_OUT_OF_MEMORY\n");
    }
    return false;
  }
  uint64_t cur = g_acct.used.load(std::memory_order_relaxed);
  do {
    if (size > g_acct.limit || cur > g_acct.limit - size) return false;
  } while (!g_acct.used.compare_exchange_weak(cur, cur + size, std::memory_order_relaxed));
  return true;
}

void Refund(uint64_t size) { g_acct.used.fetch_sub(size, std::memory_order_relaxed); }

// Writes the bytes in use to <dir>/<pid> by rename; rewrites when another
// thread changed them meanwhile, so the last report is the final count.
void Report() {
  if (g_acct.report_dir[0] == '\0') return;
  char path[600], tmp[640], num[24];
  char pid[24], tid[24];
  FormatU64(static_cast<uint64_t>(getpid()), pid);
  FormatU64(static_cast<uint64_t>(syscall(SYS_gettid)), tid);
  size_t d = std::strlen(g_acct.report_dir);
  std::memcpy(path, g_acct.report_dir, d);
  path[d] = '/';
  std::strcpy(path + d + 1, pid);
  std::memcpy(tmp, g_acct.report_dir, d);
  tmp[d] = '/';
  tmp[d + 1] = '.';
  std::strcpy(tmp + d + 2, tid);
  std::strcat(tmp, ".tmp");
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint64_t v = g_acct.used.load(std::memory_order_relaxed);
    size_t n = FormatU64(v, num);
    num[n++] = '\n';
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    WriteAll(fd, num, n);
    close(fd);
    if (rename(tmp, path) != 0) {
      unlink(tmp);
      return;
    }
    if (g_acct.used.load(std::memory_order_relaxed) == v) return;
  }
}

void Record(CUdeviceptr p, uint64_t size) {
  if (!g_acct.pointers.Put(p, size)) {
    // No memory for the table: the allocation stands, uncharged (its free
    // will not be found), and the count stays exact.
    Refund(size);
  }
  Report();
}

CUresult Forget(CUdeviceptr p, CUresult (*free_fn)(CUdeviceptr, void*), void* arg) {
  uint64_t size = 0;
  bool known = p != 0 && g_acct.pointers.Take(p, &size);
  CUresult r = free_fn(p, arg);
  if (!known) return r;
  if (r != CUDA_SUCCESS) {
    // Not freed: nobody else can have been given p, so put it back.
    g_acct.pointers.Put(p, size);
    return r;
  }
  Refund(size);
  Report();
  return r;
}

void OnForkChild() {
  // The child holds no GPU memory of its parent's (CUDA does not survive
  // fork) and is a process of its own in the report.
  g_acct.used.store(0);
  g_acct.pointers.ResetAfterFork();
  g_acct.handles.ResetAfterFork();
}

void ShimInit() {
  g_acct.pointers.Init();
  g_acct.handles.Init();
  const char* limit = getenv("DROVER_GPU_MEMORY_LIMIT");
  if (limit != nullptr && *limit != '\0') {
    uint64_t v = 0;
    if (ParseU64(limit, &v) && v >= kGranule) {
      g_acct.state = LimitState::kSet;
      g_acct.limit = v;
    } else {
      g_acct.state = LimitState::kBad;
      g_acct.limit = 0;
      g_acct.bad_value = limit;
    }
  }
  const char* dir = getenv("DROVER_GPU_MEMORY_REPORT");
  if (dir != nullptr && std::strlen(dir) < sizeof g_acct.report_dir - 64) {
    std::strcpy(g_acct.report_dir, dir);
  }
  pthread_atfork(nullptr, nullptr, OnForkChild);
  RealDlsym();
}

// Run by this file's dynamic initialisation, after g_acct's (a
// constructor attribute may run before it and be undone).
const bool g_initialised = (ShimInit(), true);

__attribute__((destructor)) void ShimFini() {
  if (g_acct.report_dir[0] == '\0') return;
  char path[600], pid[24];
  FormatU64(static_cast<uint64_t>(getpid()), pid);
  size_t d = std::strlen(g_acct.report_dir);
  std::memcpy(path, g_acct.report_dir, d);
  path[d] = '/';
  std::strcpy(path + d + 1, pid);
  unlink(path);
}

// Charge, call, record: the common path of every allocating wrapper.
template <typename Call>
CUresult Allocate(CUdeviceptr* dptr, uint64_t size, Call call) {
  if (dptr == nullptr || size == 0) return call();  // the driver's own answer to bad arguments
  if (!Charge(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = call();
  if (r != CUDA_SUCCESS) {
    Refund(size);
    return r;
  }
  Record(*dptr, size);
  return r;
}

}  // namespace

// ---- the wrappers ------------------------------------------------------------------

SHIM_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) {
  const Real& real = R();
  if (real.mem_alloc == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return Allocate(dptr, size, [&] { return real.mem_alloc(dptr, size); });
}

SHIM_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) {
  const Real& real = R();
  if (real.mem_alloc_managed == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return Allocate(dptr, size, [&] { return real.mem_alloc_managed(dptr, size, flags); });
}

SHIM_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream stream) {
  const Real& real = R();
  if (real.mem_alloc_async == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return Allocate(dptr, size, [&] { return real.mem_alloc_async(dptr, size, stream); });
}

SHIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream stream) {
  const Real& real = R();
  if (real.mem_alloc_async_ptsz == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return Allocate(dptr, size, [&] { return real.mem_alloc_async_ptsz(dptr, size, stream); });
}

SHIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream) {
  const Real& real = R();
  if (real.mem_alloc_from_pool_async == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return Allocate(dptr, size, [&] { return real.mem_alloc_from_pool_async(dptr, size, pool, stream); });
}

SHIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream) {
  const Real& real = R();
  if (real.mem_alloc_from_pool_async_ptsz == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return Allocate(dptr, size, [&] { return real.mem_alloc_from_pool_async_ptsz(dptr, size, pool, stream); });
}

SHIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                     unsigned int element_size) {
  const Real& real = R();
  if (real.mem_alloc_pitch == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) {
    return real.mem_alloc_pitch(dptr, pitch, width, height, element_size);
  }
  // The pitch is known only afterwards: charge width x height first (the
  // least it can cost), then the padding the driver chose.
  if (height > UINT64_MAX / width) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t least = static_cast<uint64_t>(width) * height;
  if (!Charge(least)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real.mem_alloc_pitch(dptr, pitch, width, height, element_size);
  if (r != CUDA_SUCCESS) {
    Refund(least);
    return r;
  }
  uint64_t actual = static_cast<uint64_t>(*pitch) * height;
  if (actual > least && !Charge(actual - least)) {
    if (R().mem_free != nullptr) R().mem_free(*dptr);
    Refund(least);
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Record(*dptr, actual > least ? actual : least);
  return r;
}

SHIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  const Real& real = R();
  if (real.mem_free == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return Forget(
      dptr, [](CUdeviceptr p, void* fn) { return reinterpret_cast<MemFreeFn>(fn)(p); },
      reinterpret_cast<void*>(real.mem_free));
}

namespace {
struct AsyncFree {
  MemFreeAsyncFn fn;
  CUstream stream;
};
CUresult FreeAsync(MemFreeAsyncFn fn, CUdeviceptr dptr, CUstream stream) {
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  AsyncFree call{fn, stream};
  // Refunded when the free is enqueued: the memory goes back to the
  // stream's pool, which the shim does not see (docs/memory.md).
  return Forget(
      dptr,
      [](CUdeviceptr p, void* arg) {
        auto* c = static_cast<AsyncFree*>(arg);
        return c->fn(p, c->stream);
      },
      &call);
}
}  // namespace

SHIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(R().mem_free_async, dptr, stream);
}

SHIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return FreeAsync(R().mem_free_async_ptsz, dptr, stream);
}

SHIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                              unsigned long long flags) {
  const Real& real = R();
  if (real.mem_create == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (handle == nullptr || size == 0) return real.mem_create(handle, size, prop, flags);
  if (!Charge(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = real.mem_create(handle, size, prop, flags);
  if (r != CUDA_SUCCESS) {
    Refund(size);
    return r;
  }
  if (!g_acct.handles.Put(*handle, size)) Refund(size);
  Report();
  return r;
}

SHIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const Real& real = R();
  if (real.mem_release == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  uint64_t size = 0;
  bool known = g_acct.handles.Take(handle, &size);
  CUresult r = real.mem_release(handle);
  if (!known) return r;
  if (r != CUDA_SUCCESS) {
    g_acct.handles.Put(handle, size);
    return r;
  }
  Refund(size);
  Report();
  return r;
}

SHIM_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  const Real& real = R();
  if (real.mem_get_info == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real.mem_get_info(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || g_acct.state == LimitState::kNone) return r;
  uint64_t limit = g_acct.limit;
  uint64_t used = g_acct.used.load(std::memory_order_relaxed);
  uint64_t left = used >= limit ? 0 : limit - used;
  if (limit < *total_bytes) *total_bytes = limit;
  if (left < *free_bytes) *free_bytes = left;
  return r;
}

// ---- lookups: cuGetProcAddress and dlsym ---------------------------------------------

SHIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
SHIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags, int* status);

namespace {

struct Intercept {
  const char* name;  // as cuGetProcAddress is asked (the base name)
  int min_version;   // the CUDA version from which the driver answers this signature
  void* fn;          // the default-stream variant
  void* fn_ptsz;     // the per-thread-default-stream variant (or fn)
};

#define P(f) reinterpret_cast<void*>(&f)
const Intercept kIntercepts[] = {
    {"cuMemAlloc", 3020, P(cuMemAlloc_v2), P(cuMemAlloc_v2)},
    {"cuMemAllocManaged", 6000, P(cuMemAllocManaged), P(cuMemAllocManaged)},
    {"cuMemAllocPitch", 3020, P(cuMemAllocPitch_v2), P(cuMemAllocPitch_v2)},
    {"cuMemAllocAsync", 11020, P(cuMemAllocAsync), P(cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", 11020, P(cuMemAllocFromPoolAsync), P(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemFree", 3020, P(cuMemFree_v2), P(cuMemFree_v2)},
    {"cuMemFreeAsync", 11020, P(cuMemFreeAsync), P(cuMemFreeAsync_ptsz)},
    {"cuMemCreate", 10020, P(cuMemCreate), P(cuMemCreate)},
    {"cuMemRelease", 10020, P(cuMemRelease), P(cuMemRelease)},
    {"cuMemGetInfo", 3020, P(cuMemGetInfo_v2), P(cuMemGetInfo_v2)},
    {"cuGetProcAddress", 11030, P(cuGetProcAddress), P(cuGetProcAddress)},
    {"cuGetProcAddress", 12000, P(cuGetProcAddress_v2), P(cuGetProcAddress_v2)},
};

// Exported names that dlsym may be asked for.
struct Named {
  const char* name;
  void* fn;
};
const Named kNamed[] = {
    {"cuMemAlloc_v2", P(cuMemAlloc_v2)},
    {"cuMemAllocManaged", P(cuMemAllocManaged)},
    {"cuMemAllocPitch_v2", P(cuMemAllocPitch_v2)},
    {"cuMemAllocAsync", P(cuMemAllocAsync)},
    {"cuMemAllocAsync_ptsz", P(cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", P(cuMemAllocFromPoolAsync)},
    {"cuMemAllocFromPoolAsync_ptsz", P(cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemFree_v2", P(cuMemFree_v2)},
    {"cuMemFreeAsync", P(cuMemFreeAsync)},
    {"cuMemFreeAsync_ptsz", P(cuMemFreeAsync_ptsz)},
    {"cuMemCreate", P(cuMemCreate)},
    {"cuMemRelease", P(cuMemRelease)},
    {"cuMemGetInfo_v2", P(cuMemGetInfo_v2)},
    {"cuGetProcAddress", P(cuGetProcAddress)},
    {"cuGetProcAddress_v2", P(cuGetProcAddress_v2)},
};
#undef P

// The wrapper for what the driver answered for (symbol, version, flags), or
// null to hand back the driver's own.
void* WrapperFor(const char* symbol, int version, cuuint64_t flags) {
  const Intercept* best = nullptr;
  for (const Intercept& i : kIntercepts) {
    if (std::strcmp(i.name, symbol) != 0 || i.min_version > version) continue;
    if (best == nullptr || i.min_version > best->min_version) best = &i;
  }
  if (best == nullptr) return nullptr;  // an older signature than the wrappers': not ours
  return (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 ? best->fn_ptsz : best->fn;
}

}  // namespace

SHIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags, int* status) {
  const Real& real = R();
  if (real.get_proc_address_v2 == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real.get_proc_address_v2(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr && symbol != nullptr) {
    if (void* w = WrapperFor(symbol, version, flags); w != nullptr) *pfn = w;
  }
  return r;
}

SHIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  const Real& real = R();
  if (real.get_proc_address == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUresult r = real.get_proc_address(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr && *pfn != nullptr && symbol != nullptr) {
    if (void* w = WrapperFor(symbol, version, flags); w != nullptr) *pfn = w;
  }
  return r;
}

// dlsym from a handle searches that library only, not the preloaded shim: a
// name the shim intercepts, found in the library asked, is answered with the
// wrapper. RTLD_NEXT lookups are made as if from the shim (glibc takes the
// caller from the return address), which is what they would find anyway for
// any library the shim is ahead of.
SHIM_API void* dlsym(void* handle, const char* name) noexcept {
  DlsymFn real = RealDlsym();
  if (real == nullptr) return nullptr;
  void* found = real(handle, name);
  if (found == nullptr || name[0] != 'c' || name[1] != 'u') return found;
  for (const Named& n : kNamed) {
    if (std::strcmp(n.name, name) == 0) return n.fn;
  }
  return found;
}
