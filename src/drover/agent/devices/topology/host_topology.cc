// HostTopology through hwloc: the machine's sockets, NUMA nodes and cores,
// its PCI devices with the bridges above them, and its network adapters;
// then the pure merging of that with what the vendor libraries report.

#include "drover/agent/devices/topology/host_topology.h"

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace drover::agent {

namespace {

// An OS device name longer than this is not a name (Linux caps interface
// names at 15 bytes, InfiniBand device names at 63).
constexpr size_t kMaxNicNameBytes = 256;

struct TopologyDeleter {
  void operator()(hwloc_topology* topology) const { hwloc_topology_destroy(topology); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

std::string ErrnoText(int error) {
  char buffer[256];
  // GNU strerror_r: returns the message, which may or may not be `buffer`.
  const char* text = strerror_r(error, buffer, sizeof buffer);
  return std::string(text) + " (errno " + std::to_string(error) + ")";
}

std::string FormatBusId(unsigned domain, unsigned bus, unsigned device, unsigned function) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%04x:%02x:%02x.%x", domain, bus, device, function);
  return buffer;
}

// Parses 1..max_digits hex digits, all of `text`.
std::optional<uint32_t> ParseHex(std::string_view text, size_t max_digits) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  uint32_t value = 0;
  for (char c : text) {
    uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    value = value * 16 + digit;
  }
  return value;
}

int CountOf(hwloc_topology_t topology, hwloc_obj_type_t type) {
  // -1 means the type lives at several depths (never for these types).
  const int count = hwloc_get_nbobjs_by_type(topology, type);
  return count < 0 ? 0 : count;
}

// The NUMA node an I/O object is attached to: the one node of its first
// non-I/O ancestor's nodeset. -1 when that ancestor spans several nodes (a
// two-socket machine that attaches its PCI tree to the Machine object has
// no locality to report) or none.
int NumaNodeOf(hwloc_topology_t topology, hwloc_obj_t object) {
  hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topology, object);
  if (ancestor == nullptr || ancestor->nodeset == nullptr) return -1;
  if (hwloc_bitmap_weight(ancestor->nodeset) != 1) return -1;
  const int node = hwloc_bitmap_first(ancestor->nodeset);
  if (node < 0 || hwloc_get_numanode_obj_by_os_index(topology, static_cast<unsigned>(node)) == nullptr) return -1;
  return node;
}

std::string PciBusIdOf(hwloc_obj_t pci_device) {
  const auto& pci = pci_device->attr->pcidev;
  return FormatBusId(pci.domain, pci.bus, pci.dev, pci.func);
}

// The PCI-to-PCI bridges above `pci_device`, outermost first. Host bridges
// (upstream side not PCI) have no bus id of their own and join nothing.
std::vector<std::string> BridgesAbove(hwloc_obj_t pci_device) {
  std::vector<std::string> bridges;
  for (hwloc_obj_t parent = pci_device->parent; parent != nullptr && hwloc_obj_type_is_io(parent->type);
       parent = parent->parent) {
    if (parent->type != HWLOC_OBJ_BRIDGE || parent->attr == nullptr) continue;
    const auto& bridge = parent->attr->bridge;
    if (bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) continue;
    const auto& pci = bridge.upstream.pci;
    bridges.insert(bridges.begin(), FormatBusId(pci.domain, pci.bus, pci.dev, pci.func));
  }
  return bridges;
}

std::string Counted(int count, std::string_view singular) {
  std::string text = std::to_string(count) + " " + std::string(singular);
  if (count != 1) text += "s";
  return text;
}

// A vendor matrix entry, or nothing when it is not a DeviceLink value.
std::optional<DeviceLink> ValidLink(DeviceLink link) {
  const int value = static_cast<int>(link);
  if (value < static_cast<int>(DeviceLink::kCrossSocket) || value > static_cast<int>(DeviceLink::kFabric)) {
    return std::nullopt;
  }
  return link;
}

std::optional<DeviceLink> Closer(std::optional<DeviceLink> a, std::optional<DeviceLink> b) {
  if (!a) return b;
  if (!b) return a;
  return static_cast<int>(*a) >= static_cast<int>(*b) ? a : b;
}

bool ShareBridge(const PciLocation& a, const PciLocation& b) {
  for (const std::string& bridge : a.bridges) {
    for (const std::string& other : b.bridges) {
      if (bridge == other) return true;
    }
  }
  return false;
}

}  // namespace

std::string NormalizePciBusId(std::string_view bus_id) {
  // [domain:]bus:device.function
  const size_t dot = bus_id.rfind('.');
  if (dot == std::string_view::npos) return "";
  const size_t last_colon = bus_id.rfind(':', dot);
  if (last_colon == std::string_view::npos) return "";
  const size_t first_colon = last_colon == 0 ? std::string_view::npos : bus_id.rfind(':', last_colon - 1);
  std::optional<uint32_t> domain = 0;
  size_t bus_start = 0;
  if (first_colon != std::string_view::npos) {
    domain = ParseHex(bus_id.substr(0, first_colon), 8);
    bus_start = first_colon + 1;
  }
  const auto bus = ParseHex(bus_id.substr(bus_start, last_colon - bus_start), 2);
  const auto device = ParseHex(bus_id.substr(last_colon + 1, dot - last_colon - 1), 2);
  const auto function = ParseHex(bus_id.substr(dot + 1), 1);
  if (!domain || !bus || !device || !function || *device > 0x1f || *function > 7) return "";
  return FormatBusId(*domain, *bus, *device, *function);
}

const PciLocation* HostTopology::Find(const std::string& bus_id) const {
  const std::string canonical = NormalizePciBusId(bus_id);
  if (canonical.empty()) return nullptr;
  for (const PciLocation& location : pci) {
    if (location.bus_id == canonical) return &location;
  }
  return nullptr;
}

std::string HostTopology::Summary() const {
  return Counted(sockets, "socket") + ", " + Counted(numa_nodes, "NUMA node") + ", " + Counted(cores, "core") + ", " +
         Counted(static_cast<int>(nics.size()), "NIC");
}

Result<std::vector<int>> ParseCpuList(std::string_view text) {
  constexpr int kMaxCpu = 1 << 20;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::set<int> cpus;
  auto number = [&](std::string_view part, int* out) {
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), *out);
    return ec == std::errc() && end == part.data() + part.size() && !part.empty() && *out >= 0 && *out <= kMaxCpu;
  };
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view range = text.substr(start, comma - start);
    size_t dash = range.find('-');
    int first = 0;
    int last = 0;
    bool ok = dash == std::string_view::npos
                  ? number(range, &first) && number(range, &last)
                  : number(range.substr(0, dash), &first) && number(range.substr(dash + 1), &last) && first <= last;
    if (!ok) return InvalidArgument("'" + std::string(text.substr(0, 64)) + "' is not a CPU list (like 0-3,8)");
    for (int c = first; c <= last; ++c) cpus.insert(c);
    start = comma + 1;
    if (comma + 1 == text.size()) return InvalidArgument("'" + std::string(text.substr(0, 64)) + "' ends with a comma");
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<std::vector<int>> SplitCpus(const std::vector<int>& cpus, int parts) {
  std::vector<std::vector<int>> out(static_cast<size_t>(std::max(parts, 0)));
  const size_t n = cpus.size();
  if (n == 0) return out;
  for (size_t k = 0; k < out.size(); ++k) {
    if (n < out.size()) {
      out[k] = {cpus[k % n]};
      continue;
    }
    out[k].assign(cpus.begin() + static_cast<std::ptrdiff_t>(k * n / out.size()),
                  cpus.begin() + static_cast<std::ptrdiff_t>((k + 1) * n / out.size()));
  }
  return out;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::map<int, std::vector<int>> ReadSysfsNumaCpus(const std::string& root) {
  std::map<int, std::vector<int>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("node")) continue;
    int node = -1;
    std::string_view digits = std::string_view(name).substr(4);
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), node);
    if (err != std::errc() || end != digits.data() + digits.size() || digits.empty()) continue;
    std::ifstream in(entry.path() / "cpulist");
    std::stringstream text;
    text << in.rdbuf();
    auto cpus = ParseCpuList(text.str());
    if (in && cpus.ok() && !cpus->empty()) out[node] = std::move(*cpus);
  }
  return out;
}

Result<HostTopology> DiscoverHostTopology(const std::string& xml_path) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Unavailable("hwloc_topology_init: " + ErrnoText(errno));
  TopologyPtr topology(raw);
  // PCI devices, the bridges above them and OS devices (network interfaces),
  // without the uninteresting ones (host-internal PCI functions).
  if (hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
    return Unavailable("hwloc_topology_set_io_types_filter: " + ErrnoText(errno));
  }
  if (!xml_path.empty() && hwloc_topology_set_xml(raw, xml_path.c_str()) != 0) {
    return Unavailable("hwloc cannot read topology xml '" + xml_path + "': " + ErrnoText(errno));
  }
  if (hwloc_topology_load(raw) != 0) {
    const int error = errno;
    if (!xml_path.empty()) {
      return Unavailable("hwloc cannot load topology xml '" + xml_path + "': " + ErrnoText(error));
    }
    return Unavailable("hwloc_topology_load: " + ErrnoText(error));
  }

  HostTopology host;
  // Some platforms (virtual machines, some ARM servers) report no packages
  // or no cores; the machine still has one socket, and its PUs are its cores.
  const int packages = CountOf(raw, HWLOC_OBJ_PACKAGE);
  const int numa_nodes = CountOf(raw, HWLOC_OBJ_NUMANODE);
  const int cores = CountOf(raw, HWLOC_OBJ_CORE);
  host.sockets = packages > 0 ? packages : 1;
  host.numa_nodes = numa_nodes > 0 ? numa_nodes : 1;
  host.cores = cores > 0 ? cores : CountOf(raw, HWLOC_OBJ_PU);
  for (int i = 0; i < numa_nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (node == nullptr || node->cpuset == nullptr) continue;
    std::vector<int> cpus;
    for (int cpu = hwloc_bitmap_first(node->cpuset); cpu >= 0; cpu = hwloc_bitmap_next(node->cpuset, cpu)) {
      cpus.push_back(cpu);
    }
    if (!cpus.empty()) host.numa_cpus[static_cast<int>(node->os_index)] = std::move(cpus);
  }
  if (host.numa_cpus.empty() && xml_path.empty()) host.numa_cpus = ReadSysfsNumaCpus();

  for (hwloc_obj_t device = hwloc_get_next_pcidev(raw, nullptr); device != nullptr;
       device = hwloc_get_next_pcidev(raw, device)) {
    if (device->attr == nullptr) continue;
    PciLocation location;
    location.bus_id = PciBusIdOf(device);
    location.numa_node = NumaNodeOf(raw, device);
    location.bridges = BridgesAbove(device);
    host.pci.push_back(std::move(location));
  }

  for (hwloc_obj_t osdev = hwloc_get_next_osdev(raw, nullptr); osdev != nullptr;
       osdev = hwloc_get_next_osdev(raw, osdev)) {
    if (osdev->attr == nullptr) continue;
    const hwloc_obj_osdev_type_t type = osdev->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    if (osdev->name == nullptr) continue;
    const size_t length = strnlen(osdev->name, kMaxNicNameBytes + 1);
    if (length == 0 || length > kMaxNicNameBytes) continue;
    NicInfo nic;
    nic.name.assign(osdev->name, length);
    hwloc_obj_t parent = osdev->parent;
    if (parent != nullptr && parent->type == HWLOC_OBJ_PCI_DEVICE && parent->attr != nullptr) {
      nic.pci_bus_id = PciBusIdOf(parent);
    }
    nic.numa_node = NumaNodeOf(raw, osdev);
    host.nics.push_back(std::move(nic));
  }
  return host;
}

void AssignNumaNodes(const HostTopology& host, std::vector<GpuDevice>* devices) {
  if (devices == nullptr) return;
  for (GpuDevice& device : *devices) {
    if (device.pci_bus_id.empty()) continue;
    const PciLocation* location = host.Find(device.pci_bus_id);
    if (location != nullptr && location->numa_node >= 0) device.numa_node = location->numa_node;
  }
}

std::vector<DeviceLink> MergeLinks(const HostTopology& host, const std::vector<GpuDevice>& devices,
                                   const std::vector<DeviceLink>& vendor_links) {
  const size_t n = devices.size();
  const bool use_vendor = n > 0 && vendor_links.size() == n * n;
  std::vector<const PciLocation*> locations(n, nullptr);
  std::vector<int> numa(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (!devices[i].pci_bus_id.empty()) locations[i] = host.Find(devices[i].pci_bus_id);
    numa[i] = locations[i] != nullptr && locations[i]->numa_node >= 0 ? locations[i]->numa_node : devices[i].numa_node;
  }
  auto by_numa = [&](size_t i, size_t j) {
    return numa[i] >= 0 && numa[i] == numa[j] ? DeviceLink::kSameNuma : DeviceLink::kCrossSocket;
  };

  std::vector<DeviceLink> links(n * n, DeviceLink::kCrossSocket);
  for (size_t i = 0; i < n; ++i) {
    links[i * n + i] = DeviceLink::kFabric;
    for (size_t j = i + 1; j < n; ++j) {
      std::optional<DeviceLink> vendor;
      if (use_vendor) vendor = Closer(ValidLink(vendor_links[i * n + j]), ValidLink(vendor_links[j * n + i]));
      DeviceLink link;
      if (vendor && (*vendor == DeviceLink::kFabric || *vendor == DeviceLink::kPcieSwitch)) {
        link = *vendor;
      } else if (locations[i] != nullptr && locations[j] != nullptr) {
        link = ShareBridge(*locations[i], *locations[j]) ? DeviceLink::kPcieSwitch : by_numa(i, j);
      } else if (vendor) {
        link = *vendor;
      } else {
        link = by_numa(i, j);
      }
      links[i * n + j] = link;
      links[j * n + i] = link;
    }
  }
  return links;
}

}  // namespace drover::agent
