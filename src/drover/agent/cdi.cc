#include "drover/agent/cdi.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace drover::agent {

std::string CdiSpecJson(const CdiSpec& spec) {
  using json = nlohmann::json;
  json devices = json::array();
  for (const CdiDevice& d : spec.devices) {
    json nodes = json::array();
    for (const CdiDeviceNode& n : d.nodes) {
      json e{{"path", n.path},
             {"type", std::string(1, n.node.type)},
             {"major", n.node.major},
             {"minor", n.node.minor},
             {"permissions", "rw"}};
      if (!n.host_path.empty() && n.host_path != n.path) e["hostPath"] = n.host_path;
      nodes.push_back(std::move(e));
    }
    devices.push_back({{"name", d.name}, {"containerEdits", {{"deviceNodes", nodes}}}});
  }
  return json{{"cdiVersion", kCdiVersion}, {"kind", kCdiKind}, {"devices", devices}}.dump(1);
}

std::vector<DeviceNode> CdiEditsFor(const CdiSpec& spec, const std::vector<std::string>& names) {
  std::vector<DeviceNode> out;
  std::set<std::string> paths;
  for (const std::string& name : names) {
    auto d = std::find_if(spec.devices.begin(), spec.devices.end(), [&](const CdiDevice& x) { return x.name == name; });
    if (d == spec.devices.end()) continue;
    for (const CdiDeviceNode& n : d->nodes) {
      if (!paths.insert(n.path).second) continue;
      DeviceNode node = n.node;
      node.path = n.path;
      out.push_back(node);
    }
  }
  return out;
}

}  // namespace drover::agent
