#pragma once
// DeviceBackend: how an agent finds, watches and checks the GPUs (and other
// accelerators) of its machine. One implementation per vendor library,
// loaded at run time with dlopen so that one binary runs with or without any
// vendor stack; picked by name (--devices nvml,rocm,level-zero,opencl,...).
//
// Lifecycle: IsAvailable() (cheap: can the library be loaded?), then
// Initialize(), then Discover() once; Sample(), TakeEvents() and the rest
// use the device indices of that Discover().
//
// Not thread-safe: owned by the agent that created it, called from its
// telemetry thread only.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/fault.h"
#include "drover/common/status.h"

namespace drover::agent {

// A MIG instance (NVIDIA) carved out of a GPU.
struct MigInstance {
  std::string uuid;  // "MIG-..."
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  int64_t memory_bytes = 0;
};

struct GpuDevice {
  int index = 0;       // node-local, 0..n-1, stable across restarts
  std::string uuid;    // stable identity ("GPU-..." for NVIDIA, "sim-..." simulated)
  std::string vendor;  // "nvidia", "amd", "intel" or "opencl"
  std::string model;   // "H100 80GB", "pthread-..." for PoCL
  int64_t memory_bytes = 0;
  bool healthy = true;
  std::string backend;  // the backend that found it
  int numa_node = 0;    // the NUMA node it is attached to
  // PCI address, "0000:3b:00.0" (lower-case domain:bus:device.function);
  // empty when the backend does not know. Joins vendor data with hwloc's.
  std::string pci_bus_id;
  // Compute capability or architecture: "sm_90" (NVIDIA), "gfx942" (AMD),
  // "xe-hpc" or a device id (Intel); empty when unknown.
  std::string architecture;
  std::string driver_version;
  bool mig_enabled = false;
  std::vector<MigInstance> mig_instances;
};

// Why a device runs slower than it could (a bitmask in GpuSample::throttle).
enum ThrottleReason : uint32_t {
  kThrottleThermal = 1u << 0,  // hardware or software thermal slowdown
  kThrottlePower = 1u << 1,    // power cap or power brake
  kThrottleOther = 1u << 2,    // anything else the vendor reports (sync boost, ...)
};

// GPU memory a process holds, as the vendor reports it.
struct ProcessUsage {
  int64_t pid = 0;
  int64_t memory_bytes = 0;
};

// One telemetry reading of one device. Whatever a backend cannot read stays
// unknown: -1 for counts and integers, NaN for the doubles (see Known()).
struct GpuSample {
  int64_t time_ns = 0;                  // CLOCK_MONOTONIC, set by the sampler
  double utilization_pct = NAN;         // share of time a kernel ran, 0..100
  double memory_utilization_pct = NAN;  // share of time memory was read or written
  int64_t memory_used_bytes = -1;
  int64_t memory_total_bytes = -1;
  double temperature_c = NAN;
  double power_w = NAN;
  double power_limit_w = NAN;
  int sm_clock_mhz = -1;
  int memory_clock_mhz = -1;
  uint32_t throttle = 0;         // ThrottleReason bits
  int64_t ecc_corrected = -1;    // single-bit (corrected) errors, volatile count
  int64_t ecc_uncorrected = -1;  // double-bit (uncorrected) errors, volatile count
  int row_remap_failure = -1;    // 1: the row remapper failed; 0: it did not; -1: unknown
  // NVLink errors over every link since the driver loaded; -1: unknown.
  int64_t nvlink_crc_errors = -1, nvlink_replay_errors = -1, nvlink_recovery_errors = -1;
  // Processes using the device; only meaningful when processes_known.
  bool processes_known = false;
  std::vector<ProcessUsage> processes;
};

inline bool Known(double v) { return !std::isnan(v); }

// Something the device or its driver reported that may take it out of
// service. The agent's health checker decides (see health.h).
struct HealthEvent {
  enum class Kind {
    kXid,  // NVIDIA XID (code = the XID number) or a vendor's equivalent
    kEccUncorrected,
    kDeviceLost,  // fell off the bus, driver lost it, cannot be queried
    kThermal,     // the vendor reports a thermal fault
  };
  int device = 0;  // index within the backend
  Kind kind = Kind::kXid;
  int64_t code = 0;
  std::string message;
};

// How closely two devices are linked, as the server's scheduler counts it
// (v1 Node.links): a larger value is closer.
enum class DeviceLink : int {
  kCrossSocket = 0,  // through the CPU interconnect
  kSameNuma = 1,     // same NUMA node / host bridge
  kPcieSwitch = 2,   // behind one PCIe switch
  kFabric = 3,       // NVLink / NVSwitch, xGMI, Xe Link
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string_view Name() const = 0;
  // Cheap check: is the vendor library present on this machine?
  virtual bool IsAvailable() = 0;
  virtual Status Initialize() = 0;
  // Every device, indexed 0..n-1 within this backend.
  virtual Result<std::vector<GpuDevice>> Discover() = 0;
  // Row-major n x n links among the devices of the last Discover(); empty
  // when the backend does not know (the agent then derives them from
  // hwloc's PCIe tree and the NUMA nodes).
  virtual std::vector<DeviceLink> Links() const { return {}; }
  // One reading of device `device` (index within this backend). Fails with
  // kUnavailable when the device cannot be queried (lost), kNotFound for an
  // index outside the last Discover().
  virtual Result<GpuSample> Sample(int device) = 0;
  // Health events since the last call; never blocks.
  virtual std::vector<HealthEvent> TakeEvents() { return {}; }
  // Tells a backend that models its devices how busy the work placed on
  // `device` is (0..1). Real hardware reports its own load: ignored there.
  virtual void SetLoad(int device, double load) {
    (void)device;
    (void)load;
  }
  // Fault injection; only backends that model their devices support it.
  virtual Status InjectFault(int device, const Fault& fault) {
    (void)device;
    (void)fault;
    return Unimplemented("device backend '" + std::string(Name()) + "' does not inject faults");
  }
};

// The environment variable that restricts a process to some devices of a
// vendor: "CUDA_VISIBLE_DEVICES" for nvidia, "ROCR_VISIBLE_DEVICES" for amd,
// "ZE_AFFINITY_MASK" for intel; empty for vendors without one.
std::string_view VisibilityVariable(std::string_view vendor);

struct SimulatedSpec {
  int count = 8;
  std::string model = "H100 80GB";
  std::string node_name;  // seeds the stable uuids
  // Seconds of simulated time per Sample() call; 0 uses the wall clock
  // between calls (tests pass a fixed step to be deterministic).
  double step_seconds = 0;
};

// A GPU model the simulator knows: vendor, memory and how a node of them is
// wired, and the numbers its behavioural model follows.
struct SimulatedModel {
  std::string_view model;
  std::string_view vendor;
  int64_t memory_bytes;
  // SXM / OAM boards: every 8 GPUs share one fabric (NVSwitch, xGMI, Xe
  // Link). Otherwise PCIe cards, in pairs behind one PCIe switch.
  bool fabric = false;
  double idle_w = 70;
  double tdp_w = 700;
  std::string_view architecture = "";
};
// Known models ("H100 80GB", "A100 80GB", "A100 40GB", "L4", "MI300X", ...).
const std::vector<SimulatedModel>& SimulatedModels();

// Simulated topology: GPUs [0, n/2) on NUMA node 0 and the rest on NUMA
// node 1; fabric models join every 8 GPUs in one island, PCIe models put
// pairs (0-1, 2-3, ...) behind one PCIe switch; other pairs are linked
// through their NUMA node or across sockets.
// Behaviour (see simulated_backend.cc): utilization follows SetLoad(),
// temperature and power follow utilization with thermal inertia, the clock
// throttles above the slowdown temperature; InjectFault() raises XIDs and
// ECC errors, loses a device or breaks its cooling.
// Fails with kInvalidArgument for an unknown model or a count outside 0..64.
Result<std::unique_ptr<DeviceBackend>> MakeSimulatedBackend(const SimulatedSpec& spec);
// Every device of every OpenCL platform, through libOpenCL.so.1 loaded at run time.
std::unique_ptr<DeviceBackend> MakeOpenClBackend();

// Where a vendor backend looks for its library: the names tried in order
// with dlopen. Tests point them at stand-in libraries.
struct VendorLibrary {
  std::vector<std::string> names;
};
// NVIDIA through NVML (libnvidia-ml.so.1).
std::unique_ptr<DeviceBackend> MakeNvmlBackend(VendorLibrary lib = {{"libnvidia-ml.so.1", "libnvidia-ml.so"}});
// AMD through ROCm SMI (librocm_smi64.so).
std::unique_ptr<DeviceBackend> MakeRocmSmiBackend(VendorLibrary lib = {{"librocm_smi64.so.1", "librocm_smi64.so.5",
                                                                        "librocm_smi64.so"}});
// Intel (and any Level Zero driver) through Sysman (libze_loader.so.1).
std::unique_ptr<DeviceBackend> MakeLevelZeroBackend(VendorLibrary lib = {{"libze_loader.so.1", "libze_loader.so"}});

}  // namespace drover::agent
