// The CUDA backend: the driver API (libcuda.so.1) opened with dlopen, so that
// nothing links libcuda and no CUDA toolkit is needed to build. The subset
// called is declared below with the types and layouts of cuda.h (CUDA 11.2
// and later, 64-bit Linux).
//
// With virtual memory management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_
// MANAGEMENT_SUPPORTED) segments are cuMemAddressReserve'd ranges backed by
// cuMemCreate'd chunks mapped with cuMemMap and opened to the device with
// cuMemSetAccess (vmm_backend.cc), and the pool can stitch. Without it (or
// with CudaBackendOptions::force_plain) a segment is one cuMemAlloc and the
// pool sub-allocates plainly. Calls run in the device's primary context,
// pushed and popped around each call, so the caller's current context is
// left as it was.

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "drover/memory/backend.h"
#include "drover/memory/vmm_backend.h"

namespace drover::memory {
namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;                   // NOLINT(runtime/int): cuda.h's type
using CUmemGenericAllocationHandle = unsigned long long;  // NOLINT(runtime/int)
struct CUctx_st;
using CUcontext = CUctx_st*;

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorOutOfMemory = 2;
constexpr int kAttrVirtualMemoryManagementSupported = 102;
constexpr int kMemLocationTypeDevice = 1;
constexpr int kMemAllocationTypePinned = 1;
constexpr int kMemAccessFlagsProtReadWrite = 3;
constexpr int kMemAllocGranularityRecommended = 1;

struct CUmemLocation {
  int type;
  int id;
};
struct CUmemAllocationProp {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;  // NOLINT(runtime/int)
    unsigned char reserved[4];
  } allocFlags;
};
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;
};
static_assert(sizeof(CUmemAllocationProp) == 32 && sizeof(CUmemAccessDesc) == 12);

// Entry points by their exported names (the _v2 ones are what cuda.h's
// macros call).
struct CudaApi {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, int, CUdevice) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext*) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;  // optional
  // VMM (all or none).
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*, int) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;  // NOLINT
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                     unsigned long long) = nullptr;  // NOLINT
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;  // NOLINT
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  bool has_vmm = false;
};

template <typename Fn>
bool Load(void* lib, Fn** out, const char* name, const char* fallback = nullptr) {
  void* p = ::dlsym(lib, name);
  if (p == nullptr && fallback != nullptr) p = ::dlsym(lib, fallback);
  *out = reinterpret_cast<Fn*>(p);
  return p != nullptr;
}

// The API of the library at path, loaded once per path and never closed (a
// driver keeps threads and state that do not survive dlclose); null with
// *detail when it cannot be loaded or lacks a required entry point.
const CudaApi* LoadCuda(const std::string& path, std::string* detail) {
  static std::mutex mu;
  static auto* apis = new std::map<std::string, CudaApi>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = apis->find(path); it != apis->end()) return &it->second;
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    *detail = "dlopen " + path + ": " + (e != nullptr ? e : "failed");
    return nullptr;
  }
  CudaApi a;
  bool ok = Load(lib, &a.init, "cuInit") && Load(lib, &a.device_get_count, "cuDeviceGetCount") &&
            Load(lib, &a.device_get, "cuDeviceGet") && Load(lib, &a.device_get_attribute, "cuDeviceGetAttribute") &&
            Load(lib, &a.primary_ctx_retain, "cuDevicePrimaryCtxRetain") &&
            Load(lib, &a.primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease") &&
            Load(lib, &a.ctx_push, "cuCtxPushCurrent_v2", "cuCtxPushCurrent") &&
            Load(lib, &a.ctx_pop, "cuCtxPopCurrent_v2", "cuCtxPopCurrent") &&
            Load(lib, &a.mem_alloc, "cuMemAlloc_v2") && Load(lib, &a.mem_free, "cuMemFree_v2");
  if (!ok) {
    *detail = path + " lacks a CUDA driver entry point (cuInit, cuCtxPushCurrent_v2, cuMemAlloc_v2 ...)";
    ::dlclose(lib);
    return nullptr;
  }
  (void)Load(lib, &a.get_error_string, "cuGetErrorString");
  a.has_vmm = Load(lib, &a.granularity, "cuMemGetAllocationGranularity") &&
              Load(lib, &a.address_reserve, "cuMemAddressReserve") && Load(lib, &a.address_free, "cuMemAddressFree") &&
              Load(lib, &a.create, "cuMemCreate") && Load(lib, &a.release, "cuMemRelease") &&
              Load(lib, &a.map, "cuMemMap") && Load(lib, &a.unmap, "cuMemUnmap") &&
              Load(lib, &a.set_access, "cuMemSetAccess");
  return &apis->emplace(path, a).first->second;
}

std::string Describe(const CudaApi* api, CUresult status) {
  const char* text = nullptr;
  if (api->get_error_string != nullptr && api->get_error_string(status, &text) == kCudaSuccess && text != nullptr) {
    return "CUDA error " + std::to_string(status) + " (" + text + ")";
  }
  return "CUDA error " + std::to_string(status);
}

CUmemAllocationProp DeviceProp(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = kMemAllocationTypePinned;
  prop.location.type = kMemLocationTypeDevice;
  prop.location.id = device;
  return prop;
}

int Unsupported(int* error, std::string* detail, const std::string& text) {
  *error = DROVER_MEM_ERR_UNSUPPORTED;
  if (detail != nullptr) *detail = text;
  return *error;
}

}  // namespace

std::unique_ptr<MemoryBackend> MakeCudaBackend(const CudaBackendOptions& options, int* error, std::string* detail) {
  *error = DROVER_MEM_OK;
  std::string path = options.library;
  if (path.empty()) {
    const char* env = std::getenv("DROVER_LIBCUDA");
    path = env != nullptr && env[0] != '\0' ? env : "libcuda.so.1";
  }
  std::string why;
  const CudaApi* api = LoadCuda(path, &why);
  if (api == nullptr) {
    Unsupported(error, detail, why);
    return nullptr;
  }
  if (CUresult r = api->init(0); r != kCudaSuccess) {
    Unsupported(error, detail, "cuInit: " + Describe(api, r));
    return nullptr;
  }
  int count = 0;
  if (CUresult r = api->device_get_count(&count); r != kCudaSuccess) {
    Unsupported(error, detail, "cuDeviceGetCount: " + Describe(api, r));
    return nullptr;
  }
  if (options.device < 0 || options.device >= count) {
    *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
    if (detail != nullptr) *detail = "CUDA device " + std::to_string(options.device) + " of " + std::to_string(count);
    return nullptr;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (CUresult r = api->device_get(&dev, options.device); r != kCudaSuccess) {
    Unsupported(error, detail, "cuDeviceGet: " + Describe(api, r));
    return nullptr;
  }
  if (CUresult r = api->primary_ctx_retain(&ctx, dev); r != kCudaSuccess) {
    Unsupported(error, detail, "cuDevicePrimaryCtxRetain: " + Describe(api, r));
    return nullptr;
  }
  auto enter = [api, ctx] { (void)api->ctx_push(ctx); };
  auto leave = [api] {
    CUcontext popped = nullptr;
    (void)api->ctx_pop(&popped);
  };
  auto close = [api, dev] { (void)api->primary_ctx_release(dev); };
  auto describe = [api](int status) { return Describe(api, status); };

  int vmm = 0;
  if (api->has_vmm && !options.force_plain &&
      api->device_get_attribute(&vmm, kAttrVirtualMemoryManagementSupported, dev) == kCudaSuccess && vmm != 0) {
    const CUmemAllocationProp prop = DeviceProp(dev);
    size_t granularity = 0;
    enter();
    const CUresult gr = api->granularity(&granularity, &prop, kMemAllocGranularityRecommended);
    leave();
    uint64_t chunk = options.chunk_bytes;
    if (gr != kCudaSuccess || granularity == 0 || (granularity & (granularity - 1)) != 0) {
      close();
      *error = DROVER_MEM_ERR_BACKEND;
      if (detail != nullptr) *detail = "cuMemGetAllocationGranularity: " + Describe(api, gr);
      return nullptr;
    }
    if (chunk == 0) chunk = std::max<uint64_t>(granularity, uint64_t{2} << 20);
    if ((chunk & (chunk - 1)) != 0 || chunk % granularity != 0) {
      close();
      *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
      if (detail != nullptr) {
        *detail = "chunk of " + std::to_string(chunk) + " bytes is not a power-of-two multiple of the granularity " +
                  std::to_string(granularity);
      }
      return nullptr;
    }
    VmmDriver d;
    d.name = "cuda";
    d.prefix = "cuMem";
    d.chunk = chunk;
    d.out_of_memory = kCudaErrorOutOfMemory;
    d.address_reserve = [api](uint64_t size, uint64_t alignment, uint64_t* va) {
      CUdeviceptr p = 0;
      const CUresult r = api->address_reserve(&p, size, alignment, 0, 0);
      *va = p;
      return r;
    };
    d.address_free = [api](uint64_t va, uint64_t size) { return api->address_free(va, size); };
    d.create = [api, prop](uint64_t size, uint64_t* handle) {
      CUmemGenericAllocationHandle h = 0;
      const CUresult r = api->create(&h, size, &prop, 0);
      *handle = h;
      return r;
    };
    d.release = [api](uint64_t handle) { return api->release(handle); };
    d.map = [api](uint64_t va, uint64_t size, uint64_t handle) { return api->map(va, size, 0, handle, 0); };
    d.unmap = [api](uint64_t va, uint64_t size) { return api->unmap(va, size); };
    d.set_access = [api, dev](uint64_t va, uint64_t size) {
      CUmemAccessDesc desc{};
      desc.location.type = kMemLocationTypeDevice;
      desc.location.id = dev;
      desc.flags = kMemAccessFlagsProtReadWrite;
      return api->set_access(va, size, &desc, 1);
    };
    d.describe = describe;
    d.enter = enter;
    d.leave = leave;
    d.close = close;
    return MakeVmmBackend(std::move(d));
  }
  PlainDriver d;
  d.name = "cuda-plain";
  d.alloc_name = "cuMemAlloc";
  d.granule = uint64_t{2} << 20;
  d.out_of_memory = kCudaErrorOutOfMemory;
  d.alloc = [api](uint64_t size, uint64_t* ptr) {
    CUdeviceptr p = 0;
    const CUresult r = api->mem_alloc(&p, size);
    *ptr = p;
    return r;
  };
  d.free = [api](uint64_t ptr) { return api->mem_free(ptr); };
  d.describe = describe;
  d.enter = enter;
  d.leave = leave;
  d.close = close;
  return MakePlainDeviceBackend(std::move(d));
}

}  // namespace drover::memory
