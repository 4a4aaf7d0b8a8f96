// Placeholder until the hwloc topology lands.
#include "drover/agent/devices/topology/host_topology.h"

namespace drover::agent {
const PciLocation* HostTopology::Find(const std::string&) const { return nullptr; }
std::string HostTopology::Summary() const { return ""; }
Result<HostTopology> DiscoverHostTopology(const std::string&) { return HostTopology{}; }
void AssignNumaNodes(const HostTopology&, std::vector<GpuDevice>*) {}
std::vector<DeviceLink> MergeLinks(const HostTopology&, const std::vector<GpuDevice>& devices,
                                   const std::vector<DeviceLink>& vendor_links) {
  if (vendor_links.size() == devices.size() * devices.size()) return vendor_links;
  return {};
}
}  // namespace drover::agent
