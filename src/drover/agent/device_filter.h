#pragma once
// Device access limits for a job's cgroup v2 group: a BPF_CGROUP_DEVICE
// program that refuses the device files of the node's other GPUs
// (/dev/nvidia3, /dev/dri/renderD129 ...) and allows every other device, so
// a job can open only its own GPUs' files where the vendor has per-GPU files.
// cgroup v2 has no devices controller: the kernel runs the program attached
// to the job's group (and its ancestors') on every open and mknod.
//
// A deny-list, not an allow-list: a job keeps /dev/null, its terminal,
// /dev/shm, InfiniBand and the shared GPU control files (/dev/nvidiactl,
// /dev/nvidia-uvm, /dev/kfd) it needs.
//
// Loading needs CAP_BPF (or CAP_SYS_ADMIN) and a kernel with cgroup BPF;
// ProbeDeviceFilter() tells whether this machine allows it. No library: the
// program is a dozen instructions built here and loaded with bpf(2).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover::agent {

// A device file by kind and number, as the kernel checks access.
struct DeviceRule {
  char type = 'c';  // 'c' character, 'b' block
  uint32_t major = 0;
  uint32_t minor = 0;
  bool operator==(const DeviceRule&) const = default;
  bool operator<(const DeviceRule& o) const {
    return type != o.type ? type < o.type : major != o.major ? major < o.major : minor < o.minor;
  }
};

// The rule of the device file at `path`; nullopt when it is missing or is
// not a device file.
std::optional<DeviceRule> DeviceRuleOf(const std::string& path);

// Attaches to the cgroup v2 group `cgroup_dir` a program that refuses
// `deny` (the group's own program; BPF_F_ALLOW_MULTI, so an ancestor's
// program still runs as well). The program stays attached while the group
// lives.
Status AttachDeviceFilter(const std::string& cgroup_dir, const std::vector<DeviceRule>& deny);

// Whether this process may load and attach a device program: attaches an
// allow-all program to `cgroup_dir` and detaches it. The error says why not.
Status ProbeDeviceFilter(const std::string& cgroup_dir);

// "Device Minor: 3" from /proc/driver/nvidia/gpus/<bus id>/information;
// -1 when absent.
int NvidiaDeviceMinor(std::string_view information);

// The per-GPU device files of the GPU at PCI address `pci_bus_id`, as the
// kernel exposes them: /dev/nvidia<minor> (NVIDIA's driver, from
// <proc>/driver/nvidia/gpus/<bus id>/information) and /dev/dri/card<N>,
// /dev/dri/renderD<N> (DRM: AMD, Intel, nvidia-drm; from
// <sys>/bus/pci/devices/<bus id>/drm/). Empty for a GPU without a PCI
// address or files (simulated, OpenCL on a CPU).
std::vector<std::string> GpuDeviceFiles(const std::string& pci_bus_id, const std::string& proc = "/proc",
                                        const std::string& sys = "/sys");

}  // namespace drover::agent
