#include "drover/sim/cluster_yaml.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>

#include "drover/common/config.h"
#include "drover/common/ids.h"
#include "drover/common/quantity.h"
#include "drover/sim/csv_reader.h"

namespace drover::sim::detail {

// ---- nodes ----

sched::NodeInfo MakeNode(const NodeGroup& g) {
  sched::NodeInfo n;
  n.schedulable = true;
  n.cpu_milli = g.cpu_milli;
  n.memory_bytes = g.memory_bytes;
  n.labels = g.labels;
  const int k = g.gpus;
  auto numa = [&](int i) { return g.wiring != Wiring::kNone && k >= 2 && i >= (k + 1) / 2 ? 1 : 0; };
  for (int i = 0; i < k; ++i) n.gpus.push_back(sched::GpuInfo{i, g.vendor, g.model, g.gpu_memory, true, numa(i)});
  if (g.wiring == Wiring::kNone || k == 0) return n;
  n.links.resize(static_cast<size_t>(k) * k);
  for (int i = 0; i < k; ++i) {
    for (int j = 0; j < k; ++j) {
      sched::Link l = numa(i) == numa(j) ? sched::Link::kSameNuma : sched::Link::kCrossSocket;
      if (g.wiring == Wiring::kHgx) l = sched::Link::kFabric;
      if (g.wiring == Wiring::kPcie && i / 2 == j / 2) l = sched::Link::kPcieSwitch;
      n.links[static_cast<size_t>(i) * k + j] = l;
    }
  }
  return n;
}

// Appends g's nodes. Racks and switches are numbered across the cluster
// (rack-0, rack-1, ...); each group starts a new rack and a new switch.
void AddGroup(const NodeGroup& g, Cluster* c, int64_t* racks, int64_t* switches) {
  sched::NodeInfo proto = MakeNode(g);
  const size_t width = std::to_string(std::max<int64_t>(g.count - 1, 0)).size();
  for (int64_t i = 0; i < g.count; ++i) {
    sched::NodeInfo n = proto;
    n.name = fmt::format("{}-{:0{}d}", g.name, i, width);
    if (g.per_rack > 0) n.labels["rack"] = fmt::format("rack-{}", *racks + i / g.per_rack);
    if (g.per_switch > 0) n.labels["switch"] = fmt::format("switch-{}", *switches + i / g.per_switch);
    c->nodes.push_back(std::move(n));
  }
  if (g.per_rack > 0) *racks += (g.count + g.per_rack - 1) / g.per_rack;
  if (g.per_switch > 0) *switches += (g.count + g.per_switch - 1) / g.per_switch;
}

Cluster UniformCluster(std::string name, const NodeGroup& g) {
  Cluster c;
  c.name = std::move(name);
  int64_t racks = 0, switches = 0;
  AddGroup(g, &c, &racks, &switches);
  return c;
}

// ---- YAML clusters ----

std::string Scalar(const YAML::Node& n) { return n.IsScalar() ? n.as<std::string>() : ""; }
std::string Show(const YAML::Node& n) {
  return n.IsScalar() ? "'" + n.as<std::string>() + "'" : n.IsMap() ? "a mapping" : n.IsSequence() ? "a list" : "empty";
}
Result<int64_t> YInt(const YAML::Node& n, const std::string& where, int64_t lo, int64_t hi) {
  std::string s = Scalar(n);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    return InvalidArgument(fmt::format("{}: {} is not an integer", where, Show(n)));
  }
  if (v < lo || v > hi) return InvalidArgument(fmt::format("{}: {} is outside {}..{}", where, v, lo, hi));
  return v;
}
Result<double> YReal(const YAML::Node& n, const std::string& where, double lo, double hi) {
  std::string s = Scalar(n);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return InvalidArgument(fmt::format("{}: {} is not a number", where, Show(n)));
  }
  if (v < lo || v > hi) return InvalidArgument(fmt::format("{}: {} is outside {}..{}", where, s, lo, hi));
  return v;
}

namespace {

constexpr int64_t kMaxNodes = 200'000;

Result<int64_t> YBytes(const YAML::Node& n, const std::string& where) {
  auto b = ParseBytes(Scalar(n));
  if (!b.ok()) return InvalidArgument(fmt::format("{}: {} is not a size (e.g. 80GiB)", where, Show(n)));
  return *b;
}

Result<NodeGroup> ParseGroup(const YAML::Node& y, const std::string& at) {
  if (!y.IsMap()) return InvalidArgument(fmt::format("{}: must be a mapping", at));
  NodeGroup g;
  bool has_cpu = false;
  for (const auto& kv : y) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string where = at + "." + key;
    if (key == "name") {
      g.name = Scalar(v);
      if (Status s = ValidateName(where, g.name); !s.ok()) return s;
    } else if (key == "count") {
      DROVER_ASSIGN_OR_RETURN(g.count, YInt(v, where, 1, kMaxNodes));
    } else if (key == "gpus_per_node") {
      DROVER_ASSIGN_OR_RETURN(int64_t n, YInt(v, where, 0, sched::kMaxGpusPerNode));
      g.gpus = static_cast<int>(n);
    } else if (key == "model") {
      g.model = Scalar(v);
    } else if (key == "vendor") {
      g.vendor = Scalar(v);
    } else if (key == "gpu_memory") {
      DROVER_ASSIGN_OR_RETURN(g.gpu_memory, YBytes(v, where));
    } else if (key == "memory") {
      DROVER_ASSIGN_OR_RETURN(g.memory_bytes, YBytes(v, where));
    } else if (key == "cpu" || key == "cpu_milli") {
      if (has_cpu) return InvalidArgument(fmt::format("{}: give cpu (cores) or cpu_milli, not both", at));
      has_cpu = true;
      if (key == "cpu_milli") {
        DROVER_ASSIGN_OR_RETURN(g.cpu_milli, YInt(v, where, 0, 1'000'000'000));
      } else {
        double cores = 0;
        std::string s = Scalar(v);
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), cores);
        if (s.empty() || ec != std::errc() || p != s.data() + s.size() || !(cores >= 0 && cores <= 1e6)) {
          return InvalidArgument(fmt::format("{}: {} is not a number of cores in 0..1000000", where, Show(v)));
        }
        g.cpu_milli = std::llround(cores * 1000);
      }
    } else if (key == "topology") {
      std::string t = Scalar(v);
      if (t == "hgx") {
        g.wiring = Wiring::kHgx;
      } else if (t == "pcie") {
        g.wiring = Wiring::kPcie;
      } else if (t == "none") {
        g.wiring = Wiring::kNone;
      } else {
        return InvalidArgument(fmt::format("{}: {} is unknown (use hgx, pcie or none)", where, Show(v)));
      }
    } else if (key == "nodes_per_rack") {
      DROVER_ASSIGN_OR_RETURN(g.per_rack, YInt(v, where, 0, kMaxNodes));
    } else if (key == "nodes_per_switch") {
      DROVER_ASSIGN_OR_RETURN(g.per_switch, YInt(v, where, 0, kMaxNodes));
    } else if (key == "labels") {
      if (!v.IsMap()) return InvalidArgument(fmt::format("{}: must map label names to values", where));
      for (const auto& l : v) g.labels[l.first.as<std::string>()] = Scalar(l.second);
    } else {
      return InvalidArgument(fmt::format(
          "{}: key '{}' is unknown (use name, count, gpus_per_node, model, vendor, gpu_memory, cpu, cpu_milli, memory, "
          "topology, nodes_per_rack, nodes_per_switch, labels)",
          at, key));
    }
  }
  if (g.name.empty()) return InvalidArgument(fmt::format("{}.name: is missing", at));
  if (g.count == 0) return InvalidArgument(fmt::format("{}.count: is missing", at));
  if (!y["gpus_per_node"])
    return InvalidArgument(fmt::format("{}.gpus_per_node: is missing (0 for CPU-only nodes)", at));
  if (g.gpus > 0 && g.model.empty()) return InvalidArgument(fmt::format("{}.model: is missing", at));
  if ((g.per_rack > 0 && g.labels.contains("rack")) || (g.per_switch > 0 && g.labels.contains("switch"))) {
    return InvalidArgument(
        fmt::format("{}.labels: rack and switch are generated from nodes_per_rack/nodes_per_switch", at));
  }
  return g;
}

}  // namespace

Result<Cluster> YamlCluster(const std::string& path, const YAML::Node& root) {
  const std::string file = BaseName(path);
  Cluster c;
  c.name = Stem(path);
  YAML::Node groups, tenants;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key == "name") {
      c.name = Scalar(kv.second);
    } else if (key == "kind") {
      if (Scalar(kv.second) == "synthetic") {
        return InvalidArgument(fmt::format("{}: this is a workload (kind: synthetic), not a cluster", file));
      }
      if (Scalar(kv.second) != "cluster") {
        return InvalidArgument(
            fmt::format("{}: kind: {} is unknown for a cluster (use cluster)", file, Show(kv.second)));
      }
    } else if (key == "node_groups") {
      groups = kv.second;
    } else if (key == "tenants") {
      tenants = kv.second;
    } else {
      return InvalidArgument(fmt::format("{}: key '{}' is unknown (use name, node_groups, tenants)", file, key));
    }
  }
  if (!groups || !groups.IsSequence() || groups.size() == 0) {
    return InvalidArgument(fmt::format("{}: node_groups: must be a non-empty list of node groups", file));
  }
  int64_t racks = 0, switches = 0;
  std::set<std::string> names;
  for (size_t i = 0; i < groups.size(); ++i) {
    auto g = ParseGroup(groups[i], fmt::format("node_groups[{}]", i));
    if (!g.ok()) return InvalidArgument(fmt::format("{}: {}", file, g.status().message()));
    if (!names.insert(g->name).second) {
      return InvalidArgument(fmt::format("{}: node_groups[{}].name: '{}' is used twice", file, i, g->name));
    }
    if (static_cast<int64_t>(c.nodes.size()) + g->count > kMaxNodes) {
      return InvalidArgument(fmt::format("{}: more than {} nodes", file, kMaxNodes));
    }
    AddGroup(*g, &c, &racks, &switches);
  }
  if (tenants) {
    // The server's tenants: schema (ParseTenants); borrow_limit is accepted
    // for borrow-limit so that the file reads like the rest of this one.
    YAML::Node copy = YAML::Clone(tenants);
    if (copy.IsSequence()) {
      for (YAML::Node t : copy) {
        const YAML::Node& read = t;
        if (!t.IsMap() || !read["borrow_limit"]) continue;
        t["borrow-limit"] = read["borrow_limit"];
        t.remove("borrow_limit");
      }
    }
    YAML::Emitter e;
    e << copy;
    auto parsed = ParseTenants(e.c_str());
    if (!parsed.ok()) return InvalidArgument(fmt::format("{}: {}", file, parsed.status().message()));
    for (auto& t : *parsed) c.tenants.push_back({t.name, t.weight, t.guaranteed, t.borrow_limit});
  }
  return c;
}

Result<YAML::Node> ParseYaml(const std::string& text, const std::string& file) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) return InvalidArgument(fmt::format("{}: must be a YAML mapping", file));
    return root;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}: not valid YAML: {}", file, e.what()));
  }
}

}  // namespace drover::sim::detail
