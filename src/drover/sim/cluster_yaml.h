#pragma once
// Clusters from node groups: the YAML cluster file (node_groups:, tenants:)
// and the node builder that the trace clusters of loaders.cc share with it.
// Internal to the simulator: nothing outside src/drover/sim includes this.
//
//   node_groups:
//     - {name: dgx, count: 4, gpus_per_node: 8, model: H100, topology: hgx}
//       -> nodes dgx-0 ... dgx-3, 8 GPUs each on one NVLink island

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>

#include "drover/common/status.h"
#include "drover/sim/workload.h"

namespace drover::sim::detail {

// ---- nodes ----

enum class Wiring : uint8_t {
  kHgx,   // one NVLink island, two NUMA halves
  kPcie,  // pairs behind PCIe switches, two NUMA halves
  kNone,  // no links known: every GPU on NUMA node 0, the scheduler sees no topology
};

struct NodeGroup {
  std::string name;  // nodes are <name>-<i>
  int64_t count = 0;
  int gpus = 0;
  std::string model;
  std::string vendor = "nvidia";
  int64_t gpu_memory = 0;
  int64_t cpu_milli = 0;     // 0 = not tracked
  int64_t memory_bytes = 0;  // 0 = not tracked
  Wiring wiring = Wiring::kNone;
  int64_t per_rack = 0;    // 0 = no rack label
  int64_t per_switch = 0;  // 0 = no switch label
  std::map<std::string, std::string> labels;
};

// One node of the group, unnamed: its GPUs, links and labels.
sched::NodeInfo MakeNode(const NodeGroup& g);

// Appends g's nodes. Racks and switches are numbered across the cluster
// (rack-0, rack-1, ...); each group starts a new rack and a new switch.
void AddGroup(const NodeGroup& g, Cluster* c, int64_t* racks, int64_t* switches);

// A cluster of the one group g.
Cluster UniformCluster(std::string name, const NodeGroup& g);

// ---- YAML clusters ----

// A scalar's text; "" for a mapping, a list or nothing.
std::string Scalar(const YAML::Node& n);
// A node for an error message: "'abc'", "a mapping", "a list", "empty".
std::string Show(const YAML::Node& n);
// A scalar as an integer / a finite number in [lo, hi]; errors start with
// `where` ("duration.sigma: 'x' is not a number").
Result<int64_t> YInt(const YAML::Node& n, const std::string& where, int64_t lo, int64_t hi);
Result<double> YReal(const YAML::Node& n, const std::string& where, double lo, double hi);

// `text` parsed as a YAML mapping; `file` names it in errors.
Result<YAML::Node> ParseYaml(const std::string& text, const std::string& file);

// The cluster of a YAML file already parsed from `path` (named after the
// file unless it says name:). May throw YAML::Exception on a key that is not
// a scalar; the caller turns that into an error.
Result<Cluster> YamlCluster(const std::string& path, const YAML::Node& root);

}  // namespace drover::sim::detail
