#include "drover/cli/node_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "drover/cli/client.h"
#include "drover/cli/table.h"
#include "drover/common/quantity.h"

namespace drover::cli {
namespace {

constexpr const char* kAbsent = "-";

// A reading worth showing: finite and not absurdly large (a garbled value
// from a driver shows as absent rather than as a 20-digit number).
std::optional<double> Finite(bool has, double v) {
  if (!has || !std::isfinite(v) || std::fabs(v) > 1e9) return std::nullopt;
  return v;
}

std::string Rounded(std::optional<double> v) {
  return v ? fmt::format("{}", static_cast<int64_t>(std::llround(*v))) : kAbsent;
}

std::string Plural(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

}  // namespace

std::string GpuHealthText(const v1::Gpu& g, size_t max) {
  switch (g.health()) {
    case v1::GPU_HEALTH_HEALTHY: return "Healthy";
    case v1::GPU_HEALTH_UNHEALTHY:
      return Cut(g.health_reason().empty() ? "Unhealthy" : "Unhealthy: " + g.health_reason(), max);
    default: return "Unknown";
  }
}

std::string UtilText(const v1::Gpu& g) {
  auto v = Finite(g.telemetry().has_utilization_pct(), g.telemetry().utilization_pct());
  return v ? Rounded(v) + "%" : kAbsent;
}

std::string MemUsedText(const v1::Gpu& g) {
  const v1::GpuTelemetry& t = g.telemetry();
  if (!t.has_memory_used_bytes() || t.memory_used_bytes() < 0) return kAbsent;
  int64_t total = t.has_memory_total_bytes() && t.memory_total_bytes() > 0 ? t.memory_total_bytes() : g.memory_bytes();
  return FormatBytes(t.memory_used_bytes()) + "/" + (total > 0 ? FormatBytes(total) : kAbsent);
}

std::string TempText(const v1::Gpu& g) {
  return Rounded(Finite(g.telemetry().has_temperature_c(), g.telemetry().temperature_c()));
}

std::string PowerText(const v1::Gpu& g) {
  const v1::GpuTelemetry& t = g.telemetry();
  auto power = Finite(t.has_power_w(), t.power_w());
  auto limit = Finite(t.has_power_limit_w(), t.power_limit_w());
  if (!power && !limit) return kAbsent;
  return Rounded(power) + "/" + Rounded(limit);
}

std::string SmClockText(const v1::Gpu& g) {
  const v1::GpuTelemetry& t = g.telemetry();
  return t.has_sm_clock_mhz() && t.sm_clock_mhz() >= 0 ? std::to_string(t.sm_clock_mhz()) : kAbsent;
}

std::string ThrottleText(const v1::Gpu& g) {
  const auto& r = g.telemetry().throttle_reasons();
  return r.empty() ? kAbsent : fmt::format("{}", fmt::join(r, ","));
}

std::string EccText(const v1::Gpu& g) {
  const v1::GpuTelemetry& t = g.telemetry();
  if (!t.has_ecc_corrected() && !t.has_ecc_uncorrected()) return kAbsent;
  auto count = [](bool has, int64_t v) { return has ? std::to_string(v) : std::string(kAbsent); };
  return count(t.has_ecc_corrected(), t.ecc_corrected()) + "/" + count(t.has_ecc_uncorrected(), t.ecc_uncorrected());
}

std::string XidText(const v1::Gpu& g) {
  if (!g.has_telemetry()) return kAbsent;
  const v1::GpuTelemetry& t = g.telemetry();
  if (t.xid_errors() <= 0) return "0";
  return fmt::format("{} (last {})", t.xid_errors(), t.last_xid());
}

std::string GpuHealthSummary(const v1::Node& n) {
  if (n.gpus().empty()) return kAbsent;
  int healthy = 0;
  for (const v1::Gpu& g : n.gpus()) healthy += g.health() == v1::GPU_HEALTH_HEALTHY ? 1 : 0;
  return fmt::format("{}/{} healthy", healthy, n.gpus_size());
}

std::string ConditionsText(const v1::Node& n, size_t max_message) {
  if (n.conditions().empty()) return kAbsent;
  std::vector<std::string> parts;
  for (const v1::NodeCondition& c : n.conditions()) {
    if (c.status()) {
      parts.push_back(c.type());
    } else {
      std::string why = c.message().empty() ? c.reason() : c.message();
      parts.push_back(why.empty() ? c.type() + "=False"
                                  : fmt::format("{}=False ({})", c.type(), Cut(why, max_message)));
    }
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string TopologySummary(const v1::HostTopology& t) {
  std::vector<std::string> parts;
  if (t.sockets() > 0) parts.push_back(Plural(t.sockets(), "socket", "sockets"));
  if (t.numa_nodes() > 0) parts.push_back(fmt::format("{} NUMA", t.numa_nodes()));
  if (t.cores() > 0) parts.push_back(Plural(t.cores(), "core", "cores"));
  if (t.nics_size() > 0) parts.push_back(Plural(t.nics_size(), "NIC", "NICs"));
  return parts.empty() ? kAbsent : fmt::format("{}", fmt::join(parts, ", "));
}

std::string LinkSummary(const v1::Node& n) {
  // Link codes of Node.links, best first.
  static constexpr std::array<std::pair<int, const char*>, 4> kKinds = {
      {{3, "fabric"}, {2, "pcie-switch"}, {1, "numa"}, {0, "cross-socket"}}};
  const int gpus = n.gpus_size();
  if (gpus < 2 || n.links_size() != gpus * gpus) return kAbsent;
  std::map<int, int> count;
  for (int i = 0; i < gpus; ++i) {
    for (int j = i + 1; j < gpus; ++j) {
      int link = n.links(i * gpus + j);
      if (link < 0 || link > 3) return kAbsent;
      ++count[link];
    }
  }
  std::vector<std::string> parts;
  for (const auto& [code, name] : kKinds) {
    if (count[code] > 0) parts.push_back(fmt::format("{} {}", count[code], name));
  }
  return fmt::format("{}: {}", Plural(gpus * (gpus - 1) / 2, "pair", "pairs"), fmt::join(parts, ", "));
}

std::vector<const v1::Node*> SortedNodes(const v1::ListNodesResponse& resp) {
  std::vector<const v1::Node*> out;
  for (const v1::Node& n : resp.nodes()) out.push_back(&n);
  std::stable_sort(out.begin(), out.end(), [](const v1::Node* a, const v1::Node* b) { return a->name() < b->name(); });
  return out;
}

std::vector<const v1::Gpu*> SortedGpus(const v1::Node& n) {
  std::vector<const v1::Gpu*> out;
  for (const v1::Gpu& g : n.gpus()) out.push_back(&g);
  std::stable_sort(out.begin(), out.end(), [](const v1::Gpu* a, const v1::Gpu* b) { return a->index() < b->index(); });
  return out;
}

void PrintGpuTable(const v1::ListNodesResponse& resp, bool wide, std::ostream& out) {
  // The plain view stays one screen wide: a long reason is cut (-o wide
  // shows it whole).
  constexpr size_t kPlainHealth = 72;
  std::vector<std::string> headers = {"NODE", "INDEX", "VENDOR", "MODEL", "MEMORY", "HEALTH", "JOB"};
  if (wide) {
    headers.insert(headers.end(), {"UTIL", "MEM-USED", "TEMP-C", "POWER-W", "SM-MHZ", "THROTTLE", "ECC", "XIDS",
                                   "PCI-BUS", "ARCH", "TENANT", "UUID", "BACKEND"});
  }
  Table t(headers);
  for (const v1::Node* n : SortedNodes(resp)) {
    for (const v1::Gpu* g : SortedGpus(*n)) {
      std::vector<std::string> row = {
          n->name(),      std::to_string(g->index()),     g->vendor(),
          g->model(),     FormatBytes(g->memory_bytes()), GpuHealthText(*g, wide ? 0 : kPlainHealth),
          Or(g->job_id())};
      if (wide) {
        row.insert(row.end(), {UtilText(*g), MemUsedText(*g), TempText(*g), PowerText(*g), SmClockText(*g),
                               ThrottleText(*g), EccText(*g), XidText(*g), Or(g->pci_bus_id(), kAbsent),
                               Or(g->architecture(), kAbsent), Or(g->tenant(), kAbsent), g->uuid(), g->backend()});
      }
      t.AddRow(row);
    }
  }
  t.Print(out);
}

void PrintImageTable(const v1::ListNodesResponse& resp, bool wide, int64_t now_nanos, std::ostream& out) {
  constexpr size_t kPlainReferences = 60;
  constexpr size_t kShortDigest = 7 + 12;  // "sha256:" and 12 hex digits, as docker images shows them
  Table t({"NODE", "IMAGE", "DIGEST", "SIZE", "IN USE", "LAST USED"});
  for (const v1::Node* n : SortedNodes(resp)) {
    for (const v1::NodeImage& im : n->images()) {
      // What the agent reported: escaped (terminal.h).
      std::string refs = im.references().empty() ? "<none>" : fmt::format("{}", fmt::join(im.references(), ","));
      t.AddRow({EscapeTerminal(n->name()), EscapeTerminal(wide ? refs : Cut(refs, kPlainReferences)),
                EscapeTerminal(wide ? im.digest() : im.digest().substr(0, kShortDigest)), FormatBytes(im.size_bytes()),
                std::to_string(im.in_use()),
                im.last_used_unix_nanos() > 0 ? Age(im.last_used_unix_nanos(), now_nanos) + " ago" : "-"});
    }
  }
  t.Print(out);
}

void PrintNodeTable(const v1::ListNodesResponse& resp, bool wide, int64_t now_nanos, std::ostream& out) {
  constexpr size_t kPlainMessage = 50;
  std::vector<std::string> headers = {"NAME", "STATUS", "GPUS", "MODEL", "HEALTH", "TOPOLOGY", "AGE", "CONDITIONS"};
  if (wide) headers.insert(headers.end(), {"CPU", "MEMORY", "VERSION", "LAST-HEARTBEAT", "GPU-LINKS", "LABELS"});
  Table t(headers);
  for (const v1::Node* n : SortedNodes(resp)) {
    int used = 0;
    std::set<std::string> models;
    for (const auto& g : n->gpus()) {
      used += g.job_id().empty() ? 0 : 1;
      models.insert(g.model());
    }
    std::string status = n->state() == v1::NODE_STATE_READY     ? "Ready"
                         : n->state() == v1::NODE_STATE_SUSPECT ? "Suspect"
                         : n->state() == v1::NODE_STATE_LOST    ? "Lost"
                                                                : "NotReady";
    if (n->lease_via_peers() && n->state() != v1::NODE_STATE_LOST) status += ",ViaPeers";
    if (n->drained()) status += ",Drained";
    std::vector<std::string> row = {n->name(),
                                    status,
                                    fmt::format("{}/{}", used, n->gpus_size()),
                                    models.empty() ? "<none>" : fmt::format("{}", fmt::join(models, ",")),
                                    GpuHealthSummary(*n),
                                    TopologySummary(n->topology()),
                                    Age(n->registered_unix_nanos(), now_nanos),
                                    ConditionsText(*n, wide ? 0 : kPlainMessage)};
    if (wide) {
      std::map<std::string, std::string> labels(n->labels().begin(), n->labels().end());
      std::vector<std::string> kvs;
      for (const auto& [k, v] : labels) kvs.push_back(k + "=" + v);
      row.insert(row.end(), {std::to_string(n->cpu_millis() / 1000), FormatBytes(n->memory_bytes()),
                             Or(n->agent_version()), Age(n->last_heartbeat_unix_nanos(), now_nanos) + " ago",
                             LinkSummary(*n), kvs.empty() ? "<none>" : fmt::format("{}", fmt::join(kvs, ","))});
    }
    t.AddRow(row);
  }
  t.Print(out);
}

}  // namespace drover::cli
