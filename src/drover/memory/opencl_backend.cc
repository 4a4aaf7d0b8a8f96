// The OpenCL backend: segments of coarse-grained shared virtual memory
// (clSVMAlloc, OpenCL 2.0), so that the pool hands out pointers a kernel
// takes through clSetKernelArgSVMPointer and clEnqueueSVM* commands accept (a
// cl_mem buffer has no addresses to sub-allocate). Types come from Debian's
// opencl-headers; the ICD loader (libOpenCL.so.1) is opened with dlopen, so
// libdrover_mem runs where OpenCL is absent. PoCL's CPU device is a real one
// here.
//
// OpenCL has no virtual memory management: Reserve allocates and commits a
// whole segment, Decommit is unsupported, SupportsRemap() is false and the
// pool sub-allocates plainly. A segment is at most the device's
// CL_DEVICE_MAX_MEM_ALLOC_SIZE. clSVMFree does not wait for commands that
// still use the memory: destroying a pool with work in flight is the
// caller's bug, as with clSVMFree itself.

#define CL_TARGET_OPENCL_VERSION 200
#include <CL/cl.h>
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "drover/memory/backend.h"

namespace drover::memory {
namespace {

struct OpenClApi {
  decltype(&clGetPlatformIDs) get_platform_ids = nullptr;
  decltype(&clGetDeviceIDs) get_device_ids = nullptr;
  decltype(&clGetDeviceInfo) get_device_info = nullptr;
  decltype(&clCreateContext) create_context = nullptr;
  decltype(&clRetainContext) retain_context = nullptr;
  decltype(&clReleaseContext) release_context = nullptr;
  decltype(&clSVMAlloc) svm_alloc = nullptr;
  decltype(&clSVMFree) svm_free = nullptr;
};

template <typename Fn>
bool Load(void* lib, Fn* out, const char* name) {
  void* p = ::dlsym(lib, name);
  *out = reinterpret_cast<Fn>(p);
  return p != nullptr;
}

// The ICD loader, opened once and never closed: it and the drivers it loads
// keep threads and state that do not survive dlclose (as in the agent's
// OpenCL device backend).
const OpenClApi* LoadOpenCl(std::string* detail) {
  static std::once_flag once;
  static OpenClApi* api = nullptr;
  static std::string* error = new std::string();
  std::call_once(once, [] {
    void* lib = ::dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = ::dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = ::dlerror();
      *error = std::string("dlopen libOpenCL.so.1: ") + (e != nullptr ? e : "failed");
      return;
    }
    auto* a = new OpenClApi();
    if (!(Load(lib, &a->get_platform_ids, "clGetPlatformIDs") && Load(lib, &a->get_device_ids, "clGetDeviceIDs") &&
          Load(lib, &a->get_device_info, "clGetDeviceInfo") && Load(lib, &a->create_context, "clCreateContext") &&
          Load(lib, &a->retain_context, "clRetainContext") && Load(lib, &a->release_context, "clReleaseContext") &&
          Load(lib, &a->svm_alloc, "clSVMAlloc") && Load(lib, &a->svm_free, "clSVMFree"))) {
      *error = "libOpenCL.so.1 lacks an OpenCL 2.0 entry point (clSVMAlloc ...)";
      delete a;
      return;
    }
    api = a;
  });
  if (api == nullptr) *detail = *error;
  return api;
}

constexpr uint64_t kGranule = 4096;

class OpenClBackend final : public MemoryBackend {
 public:
  OpenClBackend(const OpenClApi* api, cl_context context, uint64_t max_alloc)
      : api_(api), context_(context), max_alloc_(max_alloc) {}
  ~OpenClBackend() override { (void)api_->release_context(context_); }

  const char* Name() const override { return "opencl"; }
  uint64_t Granule() const override { return kGranule; }
  bool SupportsRemap() const override { return false; }

  int Reserve(uint64_t size, uint64_t* base) override {
    if (size > max_alloc_) {
      last_error_ = "clSVMAlloc of " + std::to_string(size) + " bytes: above CL_DEVICE_MAX_MEM_ALLOC_SIZE " +
                    std::to_string(max_alloc_);
      return DROVER_MEM_ERR_OUT_OF_MEMORY;
    }
    void* p = api_->svm_alloc(context_, CL_MEM_READ_WRITE, size, kGranule);
    uint64_t aligned = reinterpret_cast<uint64_t>(p);
    if (p == nullptr && max_alloc_ >= kGranule && size <= max_alloc_ - kGranule) {
      // Drivers may cap the alignment they honour (PoCL: 128 bytes, its
      // largest data type): take a granule more and align inside it.
      p = api_->svm_alloc(context_, CL_MEM_READ_WRITE, size + kGranule, 0);
      aligned = (reinterpret_cast<uint64_t>(p) + kGranule - 1) & ~(kGranule - 1);
    }
    if (p == nullptr) {
      last_error_ = "clSVMAlloc of " + std::to_string(size) + " bytes failed";
      return DROVER_MEM_ERR_OUT_OF_MEMORY;
    }
    try {
      raw_[aligned] = p;
    } catch (...) {
      api_->svm_free(context_, p);
      last_error_ = "out of host memory";
      return DROVER_MEM_ERR_OUT_OF_MEMORY;
    }
    *base = aligned;
    return DROVER_MEM_OK;
  }
  int Commit(uint64_t, uint64_t, uint64_t) override { return DROVER_MEM_OK; }
  int Decommit(uint64_t, uint64_t, uint64_t size) override {
    last_error_ = "opencl: decommit of " + std::to_string(size) + " bytes: no VMM";
    return DROVER_MEM_ERR_UNSUPPORTED;
  }
  void Release(uint64_t base, uint64_t) override {
    auto it = raw_.find(base);
    if (it == raw_.end()) return;
    api_->svm_free(context_, it->second);
    raw_.erase(it);
  }

 private:
  const OpenClApi* api_;
  cl_context context_;  // retained
  uint64_t max_alloc_;
  std::map<uint64_t, void*> raw_;  // segment base -> what clSVMAlloc returned
};

int Fail(int* error, std::string* detail, int code, const std::string& text) {
  *error = code;
  if (detail != nullptr) *detail = text;
  return code;
}

// The device's SVM support and allocation limit; false with *why when it
// cannot hold pool segments.
bool CheckDevice(const OpenClApi* api, cl_device_id device, uint64_t* max_alloc, std::string* why) {
  cl_device_svm_capabilities caps = 0;
  if (api->get_device_info(device, CL_DEVICE_SVM_CAPABILITIES, sizeof(caps), &caps, nullptr) != CL_SUCCESS ||
      (caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER) == 0) {
    *why = "the OpenCL device has no shared virtual memory (OpenCL 2.0 coarse-grained SVM)";
    return false;
  }
  cl_ulong bytes = 0;
  if (api->get_device_info(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(bytes), &bytes, nullptr) != CL_SUCCESS) {
    *why = "clGetDeviceInfo(CL_DEVICE_MAX_MEM_ALLOC_SIZE) failed";
    return false;
  }
  *max_alloc = bytes;
  return true;
}

}  // namespace

std::unique_ptr<MemoryBackend> MakeOpenClBackend(void* cl_context_ptr, void* cl_device_ptr, int* error,
                                                 std::string* detail) {
  *error = DROVER_MEM_OK;
  if (cl_context_ptr == nullptr || cl_device_ptr == nullptr) {
    Fail(error, detail, DROVER_MEM_ERR_INVALID_ARGUMENT, "null OpenCL context or device");
    return nullptr;
  }
  std::string why;
  const OpenClApi* api = LoadOpenCl(&why);
  if (api == nullptr) {
    Fail(error, detail, DROVER_MEM_ERR_UNSUPPORTED, why);
    return nullptr;
  }
  uint64_t max_alloc = 0;
  if (!CheckDevice(api, static_cast<cl_device_id>(cl_device_ptr), &max_alloc, &why)) {
    Fail(error, detail, DROVER_MEM_ERR_UNSUPPORTED, why);
    return nullptr;
  }
  auto context = static_cast<cl_context>(cl_context_ptr);
  if (api->retain_context(context) != CL_SUCCESS) {
    Fail(error, detail, DROVER_MEM_ERR_INVALID_ARGUMENT, "clRetainContext failed: not a context");
    return nullptr;
  }
  return std::make_unique<OpenClBackend>(api, context, max_alloc);
}

std::unique_ptr<MemoryBackend> MakeOpenClBackendOnDevice(int device, int* error, std::string* detail) {
  *error = DROVER_MEM_OK;
  std::string why;
  const OpenClApi* api = LoadOpenCl(&why);
  if (api == nullptr) {
    Fail(error, detail, DROVER_MEM_ERR_UNSUPPORTED, why);
    return nullptr;
  }
  // The devices of every platform, in the loader's order.
  std::vector<cl_device_id> devices;
  cl_uint platforms = 0;
  if (api->get_platform_ids(0, nullptr, &platforms) == CL_SUCCESS && platforms > 0 && platforms <= 64) {
    std::vector<cl_platform_id> ids(platforms);
    if (api->get_platform_ids(platforms, ids.data(), nullptr) == CL_SUCCESS) {
      for (cl_platform_id p : ids) {
        cl_uint n = 0;
        if (api->get_device_ids(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0 || n > 256) continue;
        std::vector<cl_device_id> d(n);
        if (api->get_device_ids(p, CL_DEVICE_TYPE_ALL, n, d.data(), nullptr) == CL_SUCCESS) {
          devices.insert(devices.end(), d.begin(), d.end());
        }
      }
    }
  }
  if (devices.empty()) {
    Fail(error, detail, DROVER_MEM_ERR_UNSUPPORTED, "no OpenCL device");
    return nullptr;
  }
  if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
    Fail(error, detail, DROVER_MEM_ERR_INVALID_ARGUMENT,
         "OpenCL device " + std::to_string(device) + " of " + std::to_string(devices.size()));
    return nullptr;
  }
  cl_device_id dev = devices[static_cast<size_t>(device)];
  uint64_t max_alloc = 0;
  if (!CheckDevice(api, dev, &max_alloc, &why)) {
    Fail(error, detail, DROVER_MEM_ERR_UNSUPPORTED, why);
    return nullptr;
  }
  cl_int rc = CL_SUCCESS;
  cl_context context = api->create_context(nullptr, 1, &dev, nullptr, nullptr, &rc);
  if (context == nullptr || rc != CL_SUCCESS) {
    Fail(error, detail, DROVER_MEM_ERR_BACKEND, "clCreateContext: error " + std::to_string(rc));
    return nullptr;
  }
  return std::make_unique<OpenClBackend>(api, context, max_alloc);  // owns the context's one reference
}

}  // namespace drover::memory
