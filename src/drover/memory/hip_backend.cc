// The HIP backend: ROCm's HIP runtime (libamdhip64.so) opened with dlopen,
// the subset called declared below with hip_runtime_api.h's types and values.
// Same shape as CUDA (vmm_backend.cc): hipMemAddressReserve / hipMemCreate /
// hipMemMap / hipMemSetAccess where hipMemGetAllocationGranularity answers
// (ROCm 5.3 and later on GPUs with VMM), hipMalloc otherwise. Where the
// library is absent the backend is DROVER_MEM_ERR_UNSUPPORTED, never faked.
// Calls run with the pool's device made current (hipSetDevice) and the
// caller's restored after.

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "drover/memory/backend.h"
#include "drover/memory/vmm_backend.h"

namespace drover::memory {
namespace {

using hipError_t = int;
constexpr hipError_t kHipSuccess = 0;
constexpr hipError_t kHipErrorOutOfMemory = 2;
constexpr int kHipMemLocationTypeDevice = 1;
constexpr int kHipMemAllocationTypePinned = 1;
constexpr int kHipMemAccessFlagsProtReadWrite = 3;
constexpr int kHipMemAllocationGranularityRecommended = 1;

struct HipMemLocation {
  int type;
  int id;
};
// hipMemAllocationProp, padded to CUDA's 32 bytes (zeros past HIP's fields).
struct HipMemAllocationProp {
  int type;
  int requestedHandleType;
  HipMemLocation location;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
};
struct HipMemAccessDesc {
  HipMemLocation location;
  int flags;
};
struct HipHandle;  // ihipMemGenericAllocationHandle

struct HipApi {
  hipError_t (*init)(unsigned) = nullptr;
  hipError_t (*get_device_count)(int*) = nullptr;
  hipError_t (*get_device)(int*) = nullptr;
  hipError_t (*set_device)(int) = nullptr;
  hipError_t (*malloc)(void**, size_t) = nullptr;
  hipError_t (*free)(void*) = nullptr;
  const char* (*error_string)(hipError_t) = nullptr;  // optional
  hipError_t (*granularity)(size_t*, const HipMemAllocationProp*, int) = nullptr;
  hipError_t (*address_reserve)(void**, size_t, size_t, void*, unsigned long long) = nullptr;  // NOLINT
  hipError_t (*address_free)(void*, size_t) = nullptr;
  hipError_t (*create)(HipHandle**, size_t, const HipMemAllocationProp*, unsigned long long) = nullptr;  // NOLINT
  hipError_t (*release)(HipHandle*) = nullptr;
  hipError_t (*map)(void*, size_t, size_t, HipHandle*, unsigned long long) = nullptr;  // NOLINT
  hipError_t (*unmap)(void*, size_t) = nullptr;
  hipError_t (*set_access)(void*, size_t, const HipMemAccessDesc*, size_t) = nullptr;
  bool has_vmm = false;
};

template <typename Fn>
bool Load(void* lib, Fn** out, const char* name) {
  void* p = ::dlsym(lib, name);
  *out = reinterpret_cast<Fn*>(p);
  return p != nullptr;
}

// Loaded once per name list and never closed (see cuda_vmm_backend.cc).
const HipApi* LoadHip(const std::vector<std::string>& names, std::string* detail) {
  static std::mutex mu;
  static auto* apis = new std::map<std::string, HipApi>();
  std::lock_guard<std::mutex> lock(mu);
  std::string key;
  for (const auto& n : names) key += n + ";";
  if (auto it = apis->find(key); it != apis->end()) return &it->second;
  void* lib = nullptr;
  std::string errors;
  for (const auto& n : names) {
    lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
    const char* e = ::dlerror();
    errors += (errors.empty() ? "" : "; ") + std::string(e != nullptr ? e : n + ": failed");
  }
  if (lib == nullptr) {
    *detail = "dlopen libamdhip64: " + errors;
    return nullptr;
  }
  HipApi a;
  if (!(Load(lib, &a.init, "hipInit") && Load(lib, &a.get_device_count, "hipGetDeviceCount") &&
        Load(lib, &a.get_device, "hipGetDevice") && Load(lib, &a.set_device, "hipSetDevice") &&
        Load(lib, &a.malloc, "hipMalloc") && Load(lib, &a.free, "hipFree"))) {
    *detail = "libamdhip64 lacks a HIP entry point (hipInit, hipSetDevice, hipMalloc ...)";
    ::dlclose(lib);
    return nullptr;
  }
  (void)Load(lib, &a.error_string, "hipGetErrorString");
  a.has_vmm = Load(lib, &a.granularity, "hipMemGetAllocationGranularity") &&
              Load(lib, &a.address_reserve, "hipMemAddressReserve") &&
              Load(lib, &a.address_free, "hipMemAddressFree") && Load(lib, &a.create, "hipMemCreate") &&
              Load(lib, &a.release, "hipMemRelease") && Load(lib, &a.map, "hipMemMap") &&
              Load(lib, &a.unmap, "hipMemUnmap") && Load(lib, &a.set_access, "hipMemSetAccess");
  return &apis->emplace(key, a).first->second;
}

std::string Describe(const HipApi* api, hipError_t status) {
  const char* text = api->error_string != nullptr ? api->error_string(status) : nullptr;
  return "HIP error " + std::to_string(status) + (text != nullptr ? std::string(" (") + text + ")" : "");
}

void* Ptr(uint64_t address) { return reinterpret_cast<void*>(address); }

}  // namespace

std::unique_ptr<MemoryBackend> MakeHipBackend(int device, const std::string& library, int* error, std::string* detail) {
  *error = DROVER_MEM_OK;
  std::vector<std::string> names;
  if (!library.empty()) {
    names.push_back(library);
  } else if (const char* env = std::getenv("DROVER_LIBAMDHIP64"); env != nullptr && env[0] != '\0') {
    names.emplace_back(env);
  } else {
    names = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
  }
  auto unsupported = [&](const std::string& why) -> std::unique_ptr<MemoryBackend> {
    *error = DROVER_MEM_ERR_UNSUPPORTED;
    if (detail != nullptr) *detail = why;
    return nullptr;
  };
  std::string why;
  const HipApi* api = LoadHip(names, &why);
  if (api == nullptr) return unsupported(why);
  if (hipError_t r = api->init(0); r != kHipSuccess) return unsupported("hipInit: " + Describe(api, r));
  int count = 0;
  if (hipError_t r = api->get_device_count(&count); r != kHipSuccess || count == 0) {
    return unsupported("hipGetDeviceCount: " + (r != kHipSuccess ? Describe(api, r) : std::string("no device")));
  }
  if (device < 0 || device >= count) {
    *error = DROVER_MEM_ERR_INVALID_ARGUMENT;
    if (detail != nullptr) *detail = "HIP device " + std::to_string(device) + " of " + std::to_string(count);
    return nullptr;
  }
  // The caller's current device, saved by enter and restored by leave (the
  // backend is used under the pool's mutex, so one saved value suffices).
  auto saved = std::make_shared<int>(0);
  auto enter = [api, device, saved] {
    if (api->get_device(saved.get()) != kHipSuccess) *saved = device;
    (void)api->set_device(device);
  };
  auto leave = [api, saved] { (void)api->set_device(*saved); };
  auto describe = [api](int status) { return Describe(api, status); };

  HipMemAllocationProp prop{};
  prop.type = kHipMemAllocationTypePinned;
  prop.location.type = kHipMemLocationTypeDevice;
  prop.location.id = device;
  size_t granularity = 0;
  if (api->has_vmm) {
    enter();
    if (api->granularity(&granularity, &prop, kHipMemAllocationGranularityRecommended) != kHipSuccess) granularity = 0;
    leave();
  }
  if (granularity != 0 && (granularity & (granularity - 1)) == 0) {
    VmmDriver d;
    d.name = "hip";
    d.prefix = "hipMem";
    d.chunk = std::max<uint64_t>(granularity, uint64_t{2} << 20);
    d.out_of_memory = kHipErrorOutOfMemory;
    d.address_reserve = [api](uint64_t size, uint64_t alignment, uint64_t* va) {
      void* p = nullptr;
      const hipError_t r = api->address_reserve(&p, size, alignment, nullptr, 0);
      *va = reinterpret_cast<uint64_t>(p);
      return r;
    };
    d.address_free = [api](uint64_t va, uint64_t size) { return api->address_free(Ptr(va), size); };
    d.create = [api, prop](uint64_t size, uint64_t* handle) {
      HipHandle* h = nullptr;
      const hipError_t r = api->create(&h, size, &prop, 0);
      *handle = reinterpret_cast<uint64_t>(h);
      return r;
    };
    d.release = [api](uint64_t handle) { return api->release(reinterpret_cast<HipHandle*>(handle)); };
    d.map = [api](uint64_t va, uint64_t size, uint64_t handle) {
      return api->map(Ptr(va), size, 0, reinterpret_cast<HipHandle*>(handle), 0);
    };
    d.unmap = [api](uint64_t va, uint64_t size) { return api->unmap(Ptr(va), size); };
    d.set_access = [api, device](uint64_t va, uint64_t size) {
      HipMemAccessDesc desc{};
      desc.location.type = kHipMemLocationTypeDevice;
      desc.location.id = device;
      desc.flags = kHipMemAccessFlagsProtReadWrite;
      return api->set_access(Ptr(va), size, &desc, 1);
    };
    d.describe = describe;
    d.enter = enter;
    d.leave = leave;
    return MakeVmmBackend(std::move(d));
  }
  PlainDriver d;
  d.name = "hip-plain";
  d.alloc_name = "hipMalloc";
  d.granule = uint64_t{2} << 20;
  d.out_of_memory = kHipErrorOutOfMemory;
  d.alloc = [api](uint64_t size, uint64_t* ptr) {
    void* p = nullptr;
    const hipError_t r = api->malloc(&p, size);
    *ptr = reinterpret_cast<uint64_t>(p);
    return r;
  };
  d.free = [api](uint64_t ptr) { return api->free(Ptr(ptr)); };
  d.describe = describe;
  d.enter = enter;
  d.leave = leave;
  return MakePlainDeviceBackend(std::move(d));
}

}  // namespace drover::memory
