#include "drover/agent/devices/nvml/nvml_util.h"

#include <cstdio>

#include "drover/agent/devices/nvml/nvml_abi.h"

namespace drover::agent::nvml {

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Parses 1..max_digits hex digits; false on an empty or over-long field or junk.
bool ParseHex(std::string_view text, size_t max_digits, uint64_t* value) {
  if (text.empty() || text.size() > max_digits) return false;
  uint64_t result = 0;
  for (char c : text) {
    int digit = HexDigit(c);
    if (digit < 0) return false;
    result = result * 16 + static_cast<uint64_t>(digit);
  }
  *value = result;
  return true;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// kSameNuma / kPcieSwitch / kCrossSocket for an nvmlGpuTopologyLevel_t;
// false for a value nvml.h does not define.
bool LinkForLevel(int level, DeviceLink* link) {
  switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE:
    case NVML_TOPOLOGY_MULTIPLE: *link = DeviceLink::kPcieSwitch; return true;
    case NVML_TOPOLOGY_HOSTBRIDGE:
    case NVML_TOPOLOGY_NODE: *link = DeviceLink::kSameNuma; return true;
    case NVML_TOPOLOGY_SYSTEM: *link = DeviceLink::kCrossSocket; return true;
    default: return false;
  }
}

}  // namespace

Result<std::string> NormalizePciBusId(std::string_view bus_id) {
  const std::string quoted = "pci bus id '" + std::string(bus_id) + "'";
  size_t dot = bus_id.rfind('.');
  if (dot == std::string_view::npos) return InvalidArgument(quoted + " has no function number");
  std::string_view head = bus_id.substr(0, dot);
  std::string_view function_text = bus_id.substr(dot + 1);
  size_t last_colon = head.rfind(':');
  if (last_colon == std::string_view::npos) return InvalidArgument(quoted + " has no bus number");
  std::string_view device_text = head.substr(last_colon + 1);
  head = head.substr(0, last_colon);
  std::string_view bus_text = head;
  std::string_view domain_text = "0";
  size_t first_colon = head.rfind(':');
  if (first_colon != std::string_view::npos) {
    bus_text = head.substr(first_colon + 1);
    domain_text = head.substr(0, first_colon);
  }
  uint64_t domain = 0;
  uint64_t bus = 0;
  uint64_t device = 0;
  uint64_t function = 0;
  if (!ParseHex(domain_text, 8, &domain) || !ParseHex(bus_text, 2, &bus) || !ParseHex(device_text, 2, &device) ||
      !ParseHex(function_text, 1, &function)) {
    return InvalidArgument(quoted + " is not of the form dddd:bb:dd.f");
  }
  if (device > 0x1f || function > 7) {
    return InvalidArgument(quoted + " names device " + std::to_string(device) + " function " +
                           std::to_string(function) + ", beyond what PCI allows");
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%04llx:%02llx:%02llx.%llx", static_cast<unsigned long long>(domain),
                static_cast<unsigned long long>(bus), static_cast<unsigned long long>(device),
                static_cast<unsigned long long>(function));
  return std::string(text);
}

Result<std::string> BufferString(const char* buffer, size_t size) {
  size_t length = 0;
  while (length < size && buffer[length] != '\0') ++length;
  std::string_view text(buffer, length);
  while (!text.empty() && IsBlank(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsBlank(text.back())) text.remove_suffix(1);
  if (text.empty()) return InvalidArgument("empty string");
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      return InvalidArgument("string holds the control character " + std::to_string(byte));
    }
  }
  return std::string(text);
}

std::string ArchitectureFor(int major, int minor) {
  if (major < 1 || major > 99 || minor < 0 || minor > 9) return "";
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

uint32_t ThrottleBits(unsigned long long reasons) {
  constexpr unsigned long long kIgnored =
      nvmlClocksThrottleReasonGpuIdle | nvmlClocksThrottleReasonApplicationsClocksSetting;
  constexpr unsigned long long kThermal = nvmlClocksThrottleReasonHwSlowdown |
                                          nvmlClocksThrottleReasonHwThermalSlowdown |
                                          nvmlClocksThrottleReasonSwThermalSlowdown;
  constexpr unsigned long long kPower =
      nvmlClocksThrottleReasonSwPowerCap | nvmlClocksThrottleReasonHwPowerBrakeSlowdown;
  uint32_t bits = 0;
  if ((reasons & kThermal) != 0) bits |= kThrottleThermal;
  if ((reasons & kPower) != 0) bits |= kThrottlePower;
  if ((reasons & ~(kIgnored | kThermal | kPower)) != 0) bits |= kThrottleOther;
  return bits;
}

bool ProcessesV3LayoutIsBroken(std::string_view driver_version) {
  // "535.86.05" -> major 535, minor 86.
  unsigned major = 0;
  unsigned minor = 0;
  std::string text(driver_version);
  if (std::sscanf(text.c_str(), "%u.%u", &major, &minor) != 2) return false;
  return major == 535 && minor >= 43 && minor < 98;
}

std::vector<DeviceLink> BuildLinks(const LinkFacts& facts) {
  const int n = facts.count;
  if (n <= 0) return {};
  const auto cells = static_cast<size_t>(n) * static_cast<size_t>(n);
  auto at = [n](int i, int j) { return static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j); };

  std::vector<bool> fabric(cells, false);
  bool any_fabric = false;
  for (auto [i, j] : facts.nvlink_pairs) {
    if (i < 0 || j < 0 || i >= n || j >= n || i == j) continue;
    fabric[at(i, j)] = fabric[at(j, i)] = true;
    any_fabric = true;
  }
  if (facts.on_nvswitch.size() == static_cast<size_t>(n)) {
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (facts.on_nvswitch[static_cast<size_t>(i)] && facts.on_nvswitch[static_cast<size_t>(j)]) {
          fabric[at(i, j)] = fabric[at(j, i)] = true;
          any_fabric = true;
        }
      }
    }
  }

  const bool have_topology = facts.topology.size() == cells;
  std::vector<DeviceLink> links(cells, DeviceLink::kCrossSocket);
  for (int i = 0; i < n; ++i) {
    links[at(i, i)] = DeviceLink::kFabric;
    for (int j = i + 1; j < n; ++j) {
      DeviceLink link = DeviceLink::kCrossSocket;
      DeviceLink forward = DeviceLink::kCrossSocket;
      DeviceLink backward = DeviceLink::kCrossSocket;
      if (fabric[at(i, j)]) {
        link = DeviceLink::kFabric;
      } else if (have_topology && LinkForLevel(facts.topology[at(i, j)], &forward) &&
                 LinkForLevel(facts.topology[at(j, i)], &backward)) {
        // Should be symmetric; if not, trust the farther answer.
        link = static_cast<int>(forward) < static_cast<int>(backward) ? forward : backward;
      } else if (!any_fabric) {
        return {};  // nothing NVML knows that hwloc does not: let the agent derive it
      } else {
        const size_t ui = static_cast<size_t>(i);
        const size_t uj = static_cast<size_t>(j);
        bool numa_known = facts.numa_node.size() == static_cast<size_t>(n) && facts.numa_node[ui] >= 0;
        if (numa_known && facts.numa_node[ui] == facts.numa_node[uj]) link = DeviceLink::kSameNuma;
      }
      links[at(i, j)] = links[at(j, i)] = link;
    }
  }
  return links;
}

}  // namespace drover::agent::nvml
