#pragma once
// HostTopology: what hwloc knows of the machine around its GPUs (NUMA nodes,
// sockets, cores, the PCIe tree, network adapters), and how that is merged
// with what the vendor libraries know (NVLink, xGMI) into the node's link
// matrix, the one the server's scheduler places by.
//
// Pure data once discovered; DiscoverHostTopology() is the only part that
// calls hwloc (linked, not dlopen'd: libhwloc is a plain Debian library).

#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/status.h"

namespace drover::agent {

// A PCI device as hwloc sees it.
struct PciLocation {
  std::string bus_id;  // "0000:3b:00.0", lower case
  int numa_node = -1;  // -1 when the machine does not say
  // PCI bridges from the host bridge down to the device (bus ids of the
  // bridges, outermost first); two devices behind one PCIe switch share a
  // bridge that is not a host bridge.
  std::vector<std::string> bridges;
};

// A network adapter and where it sits, for placing jobs near their NIC.
struct NicInfo {
  std::string name;  // "eth0", "mlx5_0"
  std::string pci_bus_id;  // empty for virtual adapters
  int numa_node = -1;
};

struct HostTopology {
  int sockets = 1;
  int numa_nodes = 1;
  int cores = 0;
  std::vector<PciLocation> pci;  // every PCI device hwloc reports
  std::vector<NicInfo> nics;
  // The PciLocation of `bus_id` (any case, with or without a domain);
  // null when hwloc did not see it.
  const PciLocation* Find(const std::string& bus_id) const;
  // "2 sockets, 2 NUMA nodes, 64 cores, 2 NICs".
  std::string Summary() const;
};

// Reads this machine's topology through hwloc. `xml_path`, when not empty,
// loads an exported topology instead (hwloc's XML; tests use it).
Result<HostTopology> DiscoverHostTopology(const std::string& xml_path = "");

// Fills each device's numa_node from hwloc where its pci_bus_id is known
// (a vendor's own NUMA answer wins when hwloc has none).
void AssignNumaNodes(const HostTopology& host, std::vector<GpuDevice>* devices);

// The n x n link matrix of `devices`: a vendor link (`vendor_links`, n x n
// or empty) of kFabric wins; otherwise two devices behind one PCIe switch
// (a shared non-host bridge) are kPcieSwitch, on one NUMA node kSameNuma,
// else kCrossSocket. The diagonal is kFabric.
std::vector<DeviceLink> MergeLinks(const HostTopology& host, const std::vector<GpuDevice>& devices,
                                   const std::vector<DeviceLink>& vendor_links);

}  // namespace drover::agent
