// The OpenCL backend: every device of every OpenCL platform, found through
// the ICD loader (libOpenCL.so.1) opened at run time. No CL header is
// included and nothing links OpenCL, so the agent runs where it is absent.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/hash.h"
#include "drover/common/quantity.h"
#include "drover/runtime/dynamic_library.h"

namespace drover::agent {

namespace {

// The few OpenCL 1.0 types, constants and entry points used here, spelled as
// in CL/cl.h (they are part of the stable ABI; CL_API_CALL is empty on Linux).
using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bool = cl_uint;
using cl_device_type = cl_ulong;
using cl_platform_info = cl_uint;
using cl_device_info = cl_uint;
// Opaque handles: never dereferenced, only passed back to the library.
struct ClPlatform;
struct ClDevice;
using cl_platform_id = ClPlatform*;
using cl_device_id = ClDevice*;

constexpr cl_int kClSuccess = 0;
constexpr cl_int kClDeviceNotFound = -1;
// From cl_khr_icd: the ICD loader found no vendor library at all.
constexpr cl_int kClPlatformNotFoundKhr = -1001;
constexpr cl_device_type kClDeviceTypeCpu = 1 << 1;
constexpr cl_device_type kClDeviceTypeAll = 0xFFFFFFFF;
constexpr cl_platform_info kClPlatformName = 0x0902;
constexpr cl_device_info kClDeviceType = 0x1000;
constexpr cl_device_info kClDeviceGlobalMemSize = 0x101F;
constexpr cl_device_info kClDeviceAvailable = 0x1027;
constexpr cl_device_info kClDeviceName = 0x102B;
constexpr cl_device_info kClDeviceVendor = 0x102C;

using ClGetPlatformIdsFn = cl_int(cl_uint, cl_platform_id*, cl_uint*);
using ClGetPlatformInfoFn = cl_int(cl_platform_id, cl_platform_info, size_t, void*, size_t*);
using ClGetDeviceIdsFn = cl_int(cl_platform_id, cl_device_type, cl_uint, cl_device_id*, cl_uint*);
using ClGetDeviceInfoFn = cl_int(cl_device_id, cl_device_info, size_t, void*, size_t*);

// Sanity limits on what a (possibly broken) vendor library reports: far above
// any real machine, low enough that a garbage count cannot make us allocate
// gigabytes or hand the scheduler nonsense.
constexpr cl_uint kMaxPlatforms = 64;
constexpr cl_uint kMaxDevicesPerPlatform = 256;
constexpr size_t kMaxInfoStringBytes = 4096;
constexpr int64_t kMaxDeviceMemoryBytes = 1024 * kTiB;

// The ICD loader, opened on first use and never closed: it and the drivers it
// loads keep threads and global state (PoCL's worker threads, the loader's
// platform list) that do not survive dlclose, so one process-wide handle is
// the only safe lifetime. A failure to load is remembered too: installing
// OpenCL under a running agent needs a restart.
Result<runtime::DynamicLibrary*> OpenClLibrary() {
  // The versioned name is what the runtime package installs; the bare one
  // only exists with -dev packages but is worth a try.
  static auto* const kLibrary = new Result<std::unique_ptr<runtime::DynamicLibrary>>(
      runtime::DynamicLibrary::Open({"libOpenCL.so.1", "libOpenCL.so"}));
  if (!kLibrary->ok()) return kLibrary->status();
  return kLibrary->value().get();
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Drops the terminating NUL(s) and the padding some drivers put around names.
std::string Trim(std::string text) {
  size_t nul = text.find('\0');
  if (nul != std::string::npos) text.resize(nul);
  size_t begin = 0;
  while (begin < text.size() && IsSpace(text[begin])) ++begin;
  size_t end = text.size();
  while (end > begin && IsSpace(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

bool StartsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// Maps a GPU's CL_DEVICE_VENDOR to the vendor names of GpuDevice. Prefixes,
// not substrings: PoCL's CPU device says "GenuineIntel", which is no Intel GPU.
std::string VendorFor(std::string_view cl_vendor, cl_device_type type) {
  // A CPU device is not restricted by CUDA_VISIBLE_DEVICES and friends, so it
  // must not claim a GPU vendor whatever its vendor string.
  if ((type & kClDeviceTypeCpu) != 0) return "opencl";
  if (StartsWith(cl_vendor, "NVIDIA")) return "nvidia";
  if (StartsWith(cl_vendor, "Advanced Micro Devices") || StartsWith(cl_vendor, "AMD")) {
    return "amd";
  }
  if (StartsWith(cl_vendor, "Intel")) return "intel";
  return "opencl";
}

std::string ClError(const std::string& call, cl_int code) {
  return call + " failed with OpenCL error " + std::to_string(code);
}

// Not thread-safe: owned by the agent that created it. Resolves its symbols
// in Initialize() (Discover() calls it when the caller did not); does not
// create contexts or touch the devices beyond reading their info.
class OpenClBackend final : public DeviceBackend {
 public:
  std::string_view Name() const override { return "opencl"; }

  bool IsAvailable() override { return OpenClLibrary().ok(); }

  Status Initialize() override {
    if (get_device_info_ != nullptr) return Status::Ok();
    DROVER_ASSIGN_OR_RETURN(runtime::DynamicLibrary * library, OpenClLibrary());
    DROVER_ASSIGN_OR_RETURN(auto* get_platform_ids, library->Symbol<ClGetPlatformIdsFn>("clGetPlatformIDs"));
    DROVER_ASSIGN_OR_RETURN(auto* get_platform_info, library->Symbol<ClGetPlatformInfoFn>("clGetPlatformInfo"));
    DROVER_ASSIGN_OR_RETURN(auto* get_device_ids, library->Symbol<ClGetDeviceIdsFn>("clGetDeviceIDs"));
    DROVER_ASSIGN_OR_RETURN(auto* get_device_info, library->Symbol<ClGetDeviceInfoFn>("clGetDeviceInfo"));
    // Set all four only once all resolved: get_device_info_ marks success.
    get_platform_ids_ = get_platform_ids;
    get_platform_info_ = get_platform_info;
    get_device_ids_ = get_device_ids;
    get_device_info_ = get_device_info;
    return Status::Ok();
  }

  Result<std::vector<GpuDevice>> Discover() override {
    DROVER_RETURN_IF_ERROR(Initialize());
    DROVER_ASSIGN_OR_RETURN(std::vector<cl_platform_id> platforms, Platforms());
    std::vector<GpuDevice> devices;
    ids_.clear();
    for (size_t p = 0; p < platforms.size(); ++p) {
      DROVER_ASSIGN_OR_RETURN(
          std::string platform_name,
          InfoString("platform " + std::to_string(p) + " name", [&](size_t size, void* value, size_t* size_ret) {
            return get_platform_info_(platforms[p], kClPlatformName, size, value, size_ret);
          }));
      DROVER_ASSIGN_OR_RETURN(std::vector<cl_device_id> ids, Devices(platforms[p], platform_name));
      for (cl_device_id id : ids) {
        DROVER_ASSIGN_OR_RETURN(GpuDevice device, Describe(id, platform_name, static_cast<int>(devices.size())));
        ids_.push_back({id, device.memory_bytes});
        devices.push_back(std::move(device));
      }
    }
    return devices;
  }

  // OpenCL reports no utilization, temperature or power: a sample is the
  // device's memory size and whether the driver still calls it available.
  Result<GpuSample> Sample(int device) override {
    if (device < 0 || static_cast<size_t>(device) >= ids_.size()) {
      return NotFound("opencl device " + std::to_string(device) + " was not discovered");
    }
    const std::string where = "device " + std::to_string(device);
    DROVER_ASSIGN_OR_RETURN(cl_bool available, DeviceInfo<cl_bool>(ids_[static_cast<size_t>(device)].id,
                                                                   kClDeviceAvailable, where + " availability"));
    if (available == 0) return Unavailable("opencl " + where + " is no longer available");
    GpuSample sample;
    sample.memory_total_bytes = ids_[static_cast<size_t>(device)].memory_bytes;
    return sample;
  }

 private:
  struct Found {
    cl_device_id id;
    int64_t memory_bytes;
  };

  Result<std::vector<cl_platform_id>> Platforms() {
    cl_uint count = 0;
    cl_int rc = get_platform_ids_(0, nullptr, &count);
    // An ICD loader with no vendor library installed: no devices, not an error.
    if (rc == kClPlatformNotFoundKhr) return std::vector<cl_platform_id>{};
    if (rc != kClSuccess) return Unavailable(ClError("clGetPlatformIDs", rc));
    if (count > kMaxPlatforms) {
      return Internal("opencl reported " + std::to_string(count) + " platforms, more than " +
                      std::to_string(kMaxPlatforms));
    }
    if (count == 0) return std::vector<cl_platform_id>{};
    std::vector<cl_platform_id> platforms(count, nullptr);
    cl_uint returned = 0;
    rc = get_platform_ids_(count, platforms.data(), &returned);
    if (rc != kClSuccess) return Unavailable(ClError("clGetPlatformIDs", rc));
    // A platform may vanish between the two calls; never read past what came back.
    if (returned < count) platforms.resize(returned);
    for (cl_platform_id platform : platforms) {
      if (platform == nullptr) return Internal("opencl returned a null platform id");
    }
    return platforms;
  }

  Result<std::vector<cl_device_id>> Devices(cl_platform_id platform, const std::string& name) {
    cl_uint count = 0;
    cl_int rc = get_device_ids_(platform, kClDeviceTypeAll, 0, nullptr, &count);
    if (rc == kClDeviceNotFound) return std::vector<cl_device_id>{};
    if (rc != kClSuccess) {
      return Unavailable(ClError("clGetDeviceIDs", rc) + " on platform '" + name + "'");
    }
    if (count > kMaxDevicesPerPlatform) {
      return Internal("opencl platform '" + name + "' reported " + std::to_string(count) + " devices, more than " +
                      std::to_string(kMaxDevicesPerPlatform));
    }
    if (count == 0) return std::vector<cl_device_id>{};
    std::vector<cl_device_id> ids(count, nullptr);
    cl_uint returned = 0;
    rc = get_device_ids_(platform, kClDeviceTypeAll, count, ids.data(), &returned);
    if (rc == kClDeviceNotFound) return std::vector<cl_device_id>{};
    if (rc != kClSuccess) {
      return Unavailable(ClError("clGetDeviceIDs", rc) + " on platform '" + name + "'");
    }
    if (returned < count) ids.resize(returned);
    for (cl_device_id id : ids) {
      if (id == nullptr) return Internal("opencl platform '" + name + "' returned a null device id");
    }
    return ids;
  }

  // Reads a string info value with the usual two calls (size, then value).
  // `query(size, value, size_ret)` is clGetPlatformInfo or clGetDeviceInfo.
  template <typename Query>
  Result<std::string> InfoString(const std::string& what, Query query) {
    size_t size = 0;
    cl_int rc = query(0, nullptr, &size);
    if (rc != kClSuccess) return Unavailable(ClError("reading opencl " + what, rc));
    if (size == 0 || size > kMaxInfoStringBytes) {
      return Internal("opencl " + what + " has an invalid length of " + std::to_string(size) + " bytes");
    }
    std::string value(size, '\0');
    rc = query(size, value.data(), nullptr);
    if (rc != kClSuccess) return Unavailable(ClError("reading opencl " + what, rc));
    value = Trim(std::move(value));
    if (value.empty()) return Internal("opencl " + what + " is empty");
    return value;
  }

  // Reads a fixed-size info value and checks that the library agrees on its size.
  template <typename T>
  Result<T> DeviceInfo(cl_device_id id, cl_device_info param, const std::string& what) {
    T value{};
    size_t size_ret = 0;
    cl_int rc = get_device_info_(id, param, sizeof(T), &value, &size_ret);
    if (rc != kClSuccess) return Unavailable(ClError("reading opencl " + what, rc));
    if (size_ret != sizeof(T)) {
      return Internal("opencl " + what + " has " + std::to_string(size_ret) + " bytes, expected " +
                      std::to_string(sizeof(T)));
    }
    return value;
  }

  Result<GpuDevice> Describe(cl_device_id id, const std::string& platform_name, int index) {
    const std::string where = "device " + std::to_string(index);
    auto device_string = [&](cl_device_info param) {
      return [this, id, param](size_t size, void* value, size_t* size_ret) {
        return get_device_info_(id, param, size, value, size_ret);
      };
    };
    DROVER_ASSIGN_OR_RETURN(std::string name, InfoString(where + " name", device_string(kClDeviceName)));
    DROVER_ASSIGN_OR_RETURN(std::string vendor, InfoString(where + " vendor", device_string(kClDeviceVendor)));
    DROVER_ASSIGN_OR_RETURN(cl_ulong memory,
                            DeviceInfo<cl_ulong>(id, kClDeviceGlobalMemSize, where + " global memory size"));
    DROVER_ASSIGN_OR_RETURN(cl_device_type type, DeviceInfo<cl_device_type>(id, kClDeviceType, where + " type"));
    DROVER_ASSIGN_OR_RETURN(cl_bool available, DeviceInfo<cl_bool>(id, kClDeviceAvailable, where + " availability"));
    if (memory == 0 || memory > static_cast<cl_ulong>(kMaxDeviceMemoryBytes)) {
      return Internal("opencl " + where + " ('" + name + "') reported " + std::to_string(memory) +
                      " bytes of global memory");
    }

    // Identity from where the device sits, since OpenCL 1.x has no uuid: it
    // is stable as long as the drivers enumerate in the same order.
    std::string key = platform_name;
    key += '\0';
    key += name;
    key += '\0';
    key += std::to_string(index);
    char hash[17];
    std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(Fnv1a64(key)));

    GpuDevice device;
    device.index = index;
    device.uuid = "ocl-" + std::string(hash);
    device.vendor = VendorFor(vendor, type);
    device.model = std::move(name);
    device.memory_bytes = static_cast<int64_t>(memory);
    device.healthy = available != 0;
    device.backend = "opencl";
    return device;
  }

  ClGetPlatformIdsFn* get_platform_ids_ = nullptr;
  ClGetPlatformInfoFn* get_platform_info_ = nullptr;
  ClGetDeviceIdsFn* get_device_ids_ = nullptr;
  ClGetDeviceInfoFn* get_device_info_ = nullptr;
  std::vector<Found> ids_;  // of the last Discover(), by device index
};

}  // namespace

std::unique_ptr<DeviceBackend> MakeOpenClBackend() { return std::make_unique<OpenClBackend>(); }

}  // namespace drover::agent
