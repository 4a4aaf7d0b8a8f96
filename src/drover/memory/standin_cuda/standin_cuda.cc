// A stand-in CUDA driver (libcuda.so.1) over host memory, for tests.
//
// It implements the driver entry points that Drover's memory code and its
// tests use: initialisation, devices, contexts (created and primary), plain
// allocations (cuMemAlloc, cuMemAllocManaged, cuMemAllocPitch, cuMemFree,
// cuMemGetInfo, copies and memsets), the virtual memory management calls
// (cuMemAddressReserve, cuMemCreate backed by a memfd, cuMemMap as an
// mmap(MAP_FIXED) of that memfd into the reservation, cuMemSetAccess as
// mprotect, cuMemUnmap, cuMemRelease, cuMemGetAllocationGranularity: 2 MiB),
// and cuGetProcAddress, through which the CUDA runtime and the memory-limit
// shim find the others. A device pointer is a host address, so a test can
// read what it wrote.
//
// Configuration (environment, read at cuInit):
//   DROVER_STANDIN_CUDA_MEMORY   bytes of memory per device (default 8 GiB)
//   DROVER_STANDIN_CUDA_DEVICES  device count (default 1; 0 gives CUDA_ERROR_NO_DEVICE)
//   DROVER_STANDIN_CUDA_TRACE    1: print every cuGetProcAddress and
//                                cuGetExportTable request to stderr
//
// A device's memory is exact: an allocation that would take the device past
// its size fails with CUDA_ERROR_OUT_OF_MEMORY, as on a real GPU. Memory is
// reserved with MAP_NORESERVE, so a large "device" costs only what is
// touched.
//
// Thread-safe: one mutex for all state; the current context is per thread.
// It never launches kernels: module and launch calls are not provided (a
// lookup of them answers CUDA_ERROR_NOT_FOUND). A test-only artifact, never
// installed.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "drover/memory/standin_cuda/cu_subset.h"

#define STANDIN_API extern "C" __attribute__((visibility("default")))

struct CUctx_st {
  CUdevice device;
  bool primary;
  unsigned flags;
};

namespace {

constexpr uint64_t kGranule = 2ull << 20;  // VMM granularity, as on current NVIDIA GPUs
constexpr uint64_t kPage = 4096;
constexpr int kDriverVersion = 13000;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

struct Allocation {
  uint64_t size;    // bytes charged to the device
  uint64_t mapped;  // bytes of the host mapping
  CUdevice device;
};

struct Physical {  // a cuMemCreate handle
  int fd;
  uint64_t size;
  CUdevice device;
  int mappings;  // live cuMemMap of it
  bool released;
};

struct Mapping {  // a cuMemMap
  uint64_t size;
  CUmemGenericAllocationHandle handle;
};

struct Device {
  uint64_t total = 8ull << 30;
  uint64_t used = 0;
  CUctx_st primary{0, true, 0};
  int primary_refs = 0;
};

struct State {
  std::mutex mu;
  bool initialized = false;
  bool trace = false;
  std::vector<Device> devices;
  std::map<CUdeviceptr, Allocation> allocations;  // cuMemAlloc*, by address
  std::map<CUdeviceptr, uint64_t> reservations;   // cuMemAddressReserve: base -> size
  std::map<CUmemGenericAllocationHandle, Physical> physical;
  std::map<CUdeviceptr, Mapping> mappings;  // cuMemMap: address -> mapping
  CUmemGenericAllocationHandle next_handle = 1;
};

State& S() {
  // Never destroyed: calls may come from atexit handlers. The trace flag is
  // read here, not in cuInit: the CUDA runtime looks entry points up first.
  static State* s = [] {
    auto* st = new State;
    const char* trace = std::getenv("DROVER_STANDIN_CUDA_TRACE");
    st->trace = trace != nullptr && std::strcmp(trace, "1") == 0;
    return st;
  }();
  return *s;
}

thread_local CUctx_st* tls_current = nullptr;

uint64_t EnvU64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') {
    std::fprintf(stderr, "standin libcuda: %s='%s' is not a number of bytes, using %llu\n", name, v,
                 static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return x;
}

// The device of the calling thread's context (0 without one, as the runtime
// always has one by the time it allocates).
CUdevice CurrentDevice() { return tls_current != nullptr ? tls_current->device : 0; }

bool ValidDevice(const State& s, CUdevice d) { return d >= 0 && static_cast<size_t>(d) < s.devices.size(); }

// Charges size bytes to device d, or answers CUDA_ERROR_OUT_OF_MEMORY.
CUresult Charge(State& s, CUdevice d, uint64_t size) {
  Device& dev = s.devices[static_cast<size_t>(d)];
  if (size > dev.total - dev.used) return CUDA_ERROR_OUT_OF_MEMORY;
  dev.used += size;
  return CUDA_SUCCESS;
}

CUresult AllocHost(CUdeviceptr* dptr, uint64_t size, uint64_t charge) {
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  CUdevice d = CurrentDevice();
  if (!ValidDevice(s, d)) return CUDA_ERROR_INVALID_CONTEXT;
  if (CUresult r = Charge(s, d, charge); r != CUDA_SUCCESS) return r;
  uint64_t mapped = RoundUp(size, kPage);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    s.devices[static_cast<size_t>(d)].used -= charge;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  s.allocations[*dptr] = Allocation{charge, mapped, d};
  return CUDA_SUCCESS;
}

}  // namespace

// ---- initialisation and devices ---------------------------------------------

STANDIN_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.initialized) return CUDA_SUCCESS;
  uint64_t count = EnvU64("DROVER_STANDIN_CUDA_DEVICES", 1);
  uint64_t memory = EnvU64("DROVER_STANDIN_CUDA_MEMORY", 8ull << 30);
  if (count == 0) return CUDA_ERROR_NO_DEVICE;
  if (count > 64) count = 64;
  s.devices.resize(count);
  for (size_t i = 0; i < s.devices.size(); ++i) {
    s.devices[i].total = memory;
    s.devices[i].primary.device = static_cast<CUdevice>(i);
  }
  s.initialized = true;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = static_cast<int>(s.devices.size());
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(s, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "Drover stand-in GPU %d", dev);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, "drover", 6);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

STANDIN_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = s.devices[static_cast<size_t>(dev)].total;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice dev) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1000000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *value = 512; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = dev + 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 1000000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 256; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; break;
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}

// ---- contexts -----------------------------------------------------------------

STANDIN_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  Device& d = s.devices[static_cast<size_t>(dev)];
  ++d.primary_refs;
  *ctx = &d.primary;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  Device& d = s.devices[static_cast<size_t>(dev)];
  if (d.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --d.primary_refs;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }

STANDIN_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  const Device& d = s.devices[static_cast<size_t>(dev)];
  *flags = d.primary.flags;
  *active = d.primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  s.devices[static_cast<size_t>(dev)].primary.flags = flags;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

STANDIN_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

STANDIN_API CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned int flags, CUdevice dev) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ValidDevice(s, dev)) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = new CUctx_st{dev, false, flags};
  tls_current = *ctx;  // cuCtxCreate makes the new context current
  return CUDA_SUCCESS;
}

// CUDA 12.5+: cuCtxCreate(CUcontext*, CUctxCreateParams*, flags, dev); the
// parameters (execution affinity, CIG) are not modelled and must be null.
STANDIN_API CUresult cuCtxCreate_v4(CUcontext* ctx, void* params, unsigned int flags, CUdevice dev) {
  if (params != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return cuCtxCreate_v2(ctx, flags, dev);
}

STANDIN_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  if (tls_current == ctx) tls_current = nullptr;
  delete ctx;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = tls_current;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  tls_current = ctx;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return cuCtxSetCurrent(ctx); }

STANDIN_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  if (ctx != nullptr) *ctx = tls_current;
  tls_current = nullptr;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuCtxGetDevice(CUdevice* dev) {
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (tls_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *dev = tls_current->device;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

// ---- plain allocations -----------------------------------------------------------

STANDIN_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) { return AllocHost(dptr, bytesize, bytesize); }

STANDIN_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  (void)flags;
  return AllocHost(dptr, bytesize, bytesize);
}

STANDIN_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                        unsigned int element_size) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = RoundUp(width, 512);  // CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT
  if (height > UINT64_MAX / p) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = AllocHost(dptr, p * height, p * height);
  if (r == CUDA_SUCCESS) *pitch = p;
  return r;
}

STANDIN_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.find(dptr);
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(dptr), it->second.mapped);
  s.devices[static_cast<size_t>(it->second.device)].used -= it->second.size;
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  CUdevice d = CurrentDevice();
  if (tls_current == nullptr || !ValidDevice(s, d)) return CUDA_ERROR_INVALID_CONTEXT;
  const Device& dev = s.devices[static_cast<size_t>(d)];
  *free_bytes = dev.total - dev.used;
  *total_bytes = dev.total;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.upper_bound(dptr);
  if (it == s.allocations.begin()) return CUDA_ERROR_NOT_FOUND;
  --it;
  if (dptr >= it->first + it->second.mapped) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.size;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  if (n != 0) std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  if (n != 0) std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (n != 0) std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoD_v2(dst, src, n); }

STANDIN_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  if (n != 0) std::memset(reinterpret_cast<void*>(dst), value, n);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
  auto* p = reinterpret_cast<unsigned int*>(dst);
  for (size_t i = 0; i < n; ++i) p[i] = value;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

// ---- virtual memory management ---------------------------------------------------

STANDIN_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop, int option) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kGranule;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags) {
  if (ptr == nullptr || size == 0 || size % kGranule != 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t align = alignment > kGranule ? alignment : kGranule;
  // Over-reserve by the alignment and trim both ends, so the range is aligned.
  uint64_t span = size + align;
  void* hint = reinterpret_cast<void*>(addr);
  void* p = mmap(hint, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t raw = reinterpret_cast<uint64_t>(p);
  uint64_t base = RoundUp(raw, align);
  if (base > raw) munmap(p, base - raw);
  uint64_t tail = raw + span - (base + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(base + size), tail);
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  // A range with live mappings cannot be freed (the real driver says so too).
  auto m = s.mappings.lower_bound(ptr);
  if (m != s.mappings.end() && m->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || size == 0 || size % kGranule != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  CUdevice d = prop->location.id;
  if (!ValidDevice(s, d)) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult r = Charge(s, d, size); r != CUDA_SUCCESS) return r;
  int fd = memfd_create("drover-standin-cuda", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    s.devices[static_cast<size_t>(d)].used -= size;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUmemGenericAllocationHandle h = s.next_handle++;
  s.physical[h] = Physical{fd, size, d, 0, false};
  *handle = h;
  return CUDA_SUCCESS;
}

namespace {
// Drops a released handle once nothing maps it (the driver frees physical
// memory only when its last mapping goes). Called with the mutex held.
void MaybeFreePhysical(State& s, CUmemGenericAllocationHandle h) {
  auto it = s.physical.find(h);
  if (it == s.physical.end() || !it->second.released || it->second.mappings > 0) return;
  close(it->second.fd);
  s.devices[static_cast<size_t>(it->second.device)].used -= it->second.size;
  s.physical.erase(it);
}
}  // namespace

STANDIN_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.physical.find(handle);
  if (it == s.physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  MaybeFreePhysical(s, handle);
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                              unsigned long long flags) {
  if (flags != 0 || size == 0 || size % kGranule != 0 || offset % kGranule != 0 || ptr % kGranule != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto ph = s.physical.find(handle);
  if (ph == s.physical.end() || ph->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > ph->second.size || size > ph->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
  // The range must lie inside one reservation and overlap no mapping.
  auto r = s.reservations.upper_bound(ptr);
  if (r == s.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (ptr + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.mappings.lower_bound(ptr);
  if (m != s.mappings.end() && m->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  if (m != s.mappings.begin()) {
    auto prev = std::prev(m);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_ALREADY_MAPPED;
  }
  // Mapped without access until cuMemSetAccess, as with the driver.
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->second.fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++ph->second.mappings;
  s.mappings[ptr] = Mapping{size, handle};
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  // Every mapping in [ptr, ptr + size) must lie wholly inside it.
  uint64_t end = ptr + size;
  auto first = s.mappings.lower_bound(ptr);
  if (first != s.mappings.begin()) {
    auto prev = std::prev(first);
    if (prev->first + prev->second.size > ptr) return CUDA_ERROR_INVALID_VALUE;
  }
  auto last = first;
  while (last != s.mappings.end() && last->first < end) {
    if (last->first + last->second.size > end) return CUDA_ERROR_INVALID_VALUE;
    ++last;
  }
  if (first == last) return CUDA_ERROR_NOT_MAPPED;
  // Put the reservation back (no access, no backing) over the whole range.
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_UNKNOWN;
  std::vector<CUmemGenericAllocationHandle> handles;
  for (auto it = first; it != last; ++it) handles.push_back(it->second.handle);
  s.mappings.erase(first, last);
  for (CUmemGenericAllocationHandle h : handles) {
    auto ph = s.physical.find(h);
    if (ph != s.physical.end()) --ph->second.mappings;
    MaybeFreePhysical(s, h);
  }
  return CUDA_SUCCESS;
}

STANDIN_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      prot = PROT_READ | PROT_WRITE;
    else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
      prot = PROT_READ;
    else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  // The whole range must be mapped, without holes.
  uint64_t at = ptr;
  auto m = s.mappings.upper_bound(ptr);
  if (m == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --m;
  while (at < ptr + size) {
    if (m == s.mappings.end() || m->first > at || m->first + m->second.size <= at) return CUDA_ERROR_INVALID_VALUE;
    at = m->first + m->second.size;
    ++m;
  }
  if (mprotect(reinterpret_cast<void*>(ptr), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// ---- errors --------------------------------------------------------------------

namespace {
struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};
}  // namespace

STANDIN_API CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *name = e.name;
      return CUDA_SUCCESS;
    }
  }
  *name = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

STANDIN_API CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *text = e.text;
      return CUDA_SUCCESS;
    }
  }
  *text = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// The runtime asks for private tables by UUID (context-local storage, tools
// hooks, an integrity check of the driver ...); their layouts are not public,
// so the stand-in has none and the CUDA runtime does not start on it (its
// first call fails: docs/memory.md says what it asked for). Programs under
// test use the driver API.
STANDIN_API CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table != nullptr) *table = nullptr;
  if (S().trace && id != nullptr) {
    std::fprintf(stderr, "standin libcuda: cuGetExportTable {");
    for (char b : id->bytes) std::fprintf(stderr, "%02x", static_cast<unsigned char>(b));
    std::fprintf(stderr, "} -> CUDA_ERROR_NOT_SUPPORTED\n");
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// ---- cuGetProcAddress -----------------------------------------------------------

namespace {
struct Entry {
  const char* name;  // the name callers ask for (the base name, or a versioned one)
  int min_version;   // the oldest CUDA version this variant serves
  void* fn;
};

#define E(name, version, fn) \
  { name, version, reinterpret_cast<void*>(&fn) }
const Entry kEntries[] = {
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxCreate", 12050, cuCtxCreate_v4),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    E("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    E("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    E("cuMemcpy", 4000, cuMemcpy),
    E("cuMemsetD8", 3020, cuMemsetD8_v2),
    E("cuMemsetD32", 3020, cuMemsetD32_v2),
    E("cuStreamSynchronize", 2000, cuStreamSynchronize),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetExportTable", 3000, cuGetExportTable),
};
#undef E

void* ExactName(const char* symbol);

CUresult Lookup(const char* symbol, void** pfn, int version, int* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const Entry* best = nullptr;
  bool known = false;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    known = true;
    if (e.min_version <= version && (best == nullptr || e.min_version > best->min_version)) best = &e;
  }
  void* fn = best != nullptr ? best->fn : nullptr;
  if (fn == nullptr && !known) fn = ExactName(symbol);  // "cuMemAlloc_v2", "cuGetProcAddress" ...
  if (S().trace) {
    std::fprintf(stderr, "standin libcuda: cuGetProcAddress %s (version %d) -> %s\n", symbol, version,
                 fn != nullptr ? "found" : "not found");
  }
  *pfn = fn;
  if (fn != nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status != nullptr) {
    *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return CUDA_ERROR_NOT_FOUND;
}
}  // namespace

STANDIN_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags, int* status) {
  (void)flags;  // no per-thread-default-stream variants: every stream is the same here
  return Lookup(symbol, pfn, version, status);
}

STANDIN_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  (void)flags;
  return Lookup(symbol, pfn, version, nullptr);
}

namespace {
#define X(fn) \
  { #fn, 0, reinterpret_cast < void*>(&fn) }
const Entry kExact[] = {
    X(cuInit),
    X(cuDriverGetVersion),
    X(cuDeviceGet),
    X(cuDeviceGetCount),
    X(cuDeviceGetName),
    X(cuDeviceGetUuid_v2),
    X(cuDeviceTotalMem_v2),
    X(cuDeviceGetAttribute),
    X(cuDevicePrimaryCtxRetain),
    X(cuDevicePrimaryCtxRelease_v2),
    X(cuDevicePrimaryCtxSetFlags_v2),
    X(cuDevicePrimaryCtxReset_v2),
    X(cuCtxCreate_v2),
    X(cuCtxCreate_v4),
    X(cuCtxDestroy_v2),
    X(cuCtxPushCurrent_v2),
    X(cuCtxPopCurrent_v2),
    X(cuMemAlloc_v2),
    X(cuMemAllocPitch_v2),
    X(cuMemFree_v2),
    X(cuMemGetInfo_v2),
    X(cuMemGetAddressRange_v2),
    X(cuMemcpyHtoD_v2),
    X(cuMemcpyDtoH_v2),
    X(cuMemcpyDtoD_v2),
    X(cuMemsetD8_v2),
    X(cuMemsetD32_v2),
    X(cuGetProcAddress),
    X(cuGetProcAddress_v2),
};
#undef X

void* ExactName(const char* symbol) {
  for (const Entry& e : kExact) {
    if (std::strcmp(e.name, symbol) == 0) return e.fn;
  }
  return nullptr;
}
}  // namespace
