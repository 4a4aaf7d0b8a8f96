#pragma once
// HostTopology: what hwloc knows of the machine around its GPUs (NUMA nodes,
// sockets, cores, the PCIe tree, network adapters), and how that is merged
// with what the vendor libraries know (NVLink, xGMI) into the node's link
// matrix, the one the server's scheduler places by.
//
// Pure data once discovered; DiscoverHostTopology() is the only part that
// calls hwloc (linked, not dlopen'd: libhwloc is a plain Debian library).
// Not thread-safe to mutate; a const HostTopology may be shared freely.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/status.h"

namespace drover::agent {

// A PCI device as hwloc sees it.
struct PciLocation {
  std::string bus_id;  // "0000:3b:00.0", lower case
  int numa_node = -1;  // -1 when the machine does not say (or names several nodes)
  // PCI bridges from the host bridge down to the device (bus ids of the
  // bridges, outermost first); two devices behind one PCIe switch share a
  // bridge that is not a host bridge. Host bridges have no bus id and are
  // never listed.
  std::vector<std::string> bridges;
};

// A network adapter and where it sits, for placing jobs near their NIC.
struct NicInfo {
  std::string name;        // "eth0", "mlx5_0"
  std::string pci_bus_id;  // empty for virtual adapters
  int numa_node = -1;
};

struct HostTopology {
  int sockets = 1;
  int numa_nodes = 1;
  int cores = 0;
  std::vector<PciLocation> pci;  // every PCI device hwloc reports (bridges excluded)
  std::vector<NicInfo> nics;     // network and OpenFabrics OS devices
  // The CPUs (OS numbers, ascending) of each NUMA node, by its OS number:
  // where a job on that node's GPUs is pinned. Empty when unknown.
  std::map<int, std::vector<int>> numa_cpus;
  // The PciLocation of `bus_id` (any case, with or without a domain, NVML's
  // 8-digit domain too: "0000:3b:00.0", "3B:00.0", "00000000:3B:00.0");
  // null when hwloc did not see it or `bus_id` is not a PCI address.
  const PciLocation* Find(const std::string& bus_id) const;
  // "2 sockets, 2 NUMA nodes, 64 cores, 2 NICs" ("1 socket, 1 NUMA node,
  // 1 core, 1 NIC" in the singular).
  std::string Summary() const;
};

// The canonical form "dddd:bb:dd.f" (lower case, domain at least 4 hex
// digits) of a PCI address written as "bb:dd.f" or "d...d:bb:dd.f" in any
// case; empty when `bus_id` is not a PCI address. "00000000:3B:00.0" ->
// "0000:3b:00.0".
std::string NormalizePciBusId(std::string_view bus_id);

// A Linux CPU list ("0-3,8,10-11", as in /sys/devices/system/node/node0/
// cpulist and /proc/self/status Cpus_allowed_list): the CPUs, ascending and
// without repeats. Empty text is an empty list; anything malformed (or a CPU
// number over 1 << 20) is an error.
Result<std::vector<int>> ParseCpuList(std::string_view text);
// {0,1,2,3,8,10,11} -> "0-3,8,10-11"; {} -> "".
std::string FormatCpuList(const std::vector<int>& cpus);
// Splits `cpus` into `parts` contiguous runs of (nearly) equal size; with
// fewer CPUs than parts, part k gets CPU k % size. {0..7} in 2 -> {0-3},
// {4-7}; {0,1} in 3 -> {0},{1},{0}. Empty `cpus`: empty parts.
std::vector<std::vector<int>> SplitCpus(const std::vector<int>& cpus, int parts);
// The CPUs this process may run on (sched_getaffinity), ascending; empty
// when it cannot be read.
std::vector<int> AllowedCpus();
// The CPUs of each NUMA node from sysfs (`root` is normally
// /sys/devices/system/node: node<N>/cpulist); empty when there is none.
std::map<int, std::vector<int>> ReadSysfsNumaCpus(const std::string& root = "/sys/devices/system/node");

// Reads this machine's topology through hwloc, with its PCI devices,
// bridges and network OS devices, and the CPUs of each NUMA node (sysfs when
// hwloc has none for a live machine). `xml_path`, when not empty, loads an
// exported topology instead (hwloc's XML; tests use it). Fails with
// kUnavailable when hwloc cannot load the topology.
Result<HostTopology> DiscoverHostTopology(const std::string& xml_path = "");

// Fills each device's numa_node from hwloc where its pci_bus_id is known
// (a vendor's own NUMA answer wins when hwloc has none).
void AssignNumaNodes(const HostTopology& host, std::vector<GpuDevice>* devices);

// The n x n (row-major, n = devices.size(), always that size) link matrix of
// `devices`: a vendor link (`vendor_links`, n x n or empty; another size is
// ignored) of kFabric or kPcieSwitch wins; otherwise two devices behind one
// PCIe switch (a shared non-host bridge) are kPcieSwitch, on one NUMA node
// kSameNuma, else kCrossSocket. For a device hwloc does not know (no
// pci_bus_id, or not found) the vendor link is taken as is, or without one
// the NUMA nodes are compared. The NUMA node of a device is hwloc's where it
// has one, else the device's numa_node. The diagonal is kFabric; the result
// is symmetric (the closer of a vendor's two directions counts).
std::vector<DeviceLink> MergeLinks(const HostTopology& host, const std::vector<GpuDevice>& devices,
                                   const std::vector<DeviceLink>& vendor_links);

}  // namespace drover::agent
