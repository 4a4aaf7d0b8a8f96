#include "drover/sched/model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "drover/common/config.h"

namespace drover::sched {

std::string_view LinkName(Link link) {
  switch (link) {
    case Link::kCrossSocket: return "cross-socket";
    case Link::kSameNuma: return "same-numa";
    case Link::kPcieSwitch: return "pcie-switch";
    case Link::kFabric: return "nvlink";
  }
  return "unknown";
}

std::string_view TopologyName(Topology t) {
  switch (t) {
    case Topology::kBestEffort: return "best-effort";
    case Topology::kIsland: return "island";
    case Topology::kNuma: return "numa";
    case Topology::kSwitch: return "switch";
    case Topology::kRack: return "rack";
  }
  return "unknown";
}

Result<Topology> ParseTopology(std::string_view s) {
  if (s.empty() || s == "best-effort") return Topology::kBestEffort;
  if (s == "island") return Topology::kIsland;
  if (s == "numa") return Topology::kNuma;
  if (s == "switch") return Topology::kSwitch;
  if (s == "rack") return Topology::kRack;
  return InvalidArgument(fmt::format("topology '{}' is unknown (use best-effort, island, numa, switch or rack)", s));
}

std::string_view QueuePolicyName(QueuePolicy p) {
  switch (p) {
    case QueuePolicy::kFifo: return "fifo";
    case QueuePolicy::kPriority: return "priority";
    case QueuePolicy::kFairShare: return "fair-share";
    case QueuePolicy::kLas: return "las";
    case QueuePolicy::kSjf: return "sjf";
  }
  return "unknown";
}

std::string_view PlacementPolicyName(PlacementPolicy p) {
  switch (p) {
    case PlacementPolicy::kBinpack: return "binpack";
    case PlacementPolicy::kSpread: return "spread";
    case PlacementPolicy::kBestFit: return "best-fit";
    case PlacementPolicy::kRandom: return "random";
    case PlacementPolicy::kFrag: return "frag";
  }
  return "unknown";
}

Result<QueuePolicy> ParseQueuePolicy(std::string_view s) {
  for (QueuePolicy p :
       {QueuePolicy::kFifo, QueuePolicy::kPriority, QueuePolicy::kFairShare, QueuePolicy::kLas, QueuePolicy::kSjf}) {
    if (s == QueuePolicyName(p)) return p;
  }
  return InvalidArgument(fmt::format("queue policy '{}' is unknown (use fifo, priority, fair-share, las or sjf)", s));
}

Result<PlacementPolicy> ParsePlacementPolicy(std::string_view s) {
  for (PlacementPolicy p : {PlacementPolicy::kBinpack, PlacementPolicy::kSpread, PlacementPolicy::kBestFit,
                            PlacementPolicy::kRandom, PlacementPolicy::kFrag}) {
    if (s == PlacementPolicyName(p)) return p;
  }
  return InvalidArgument(
      fmt::format("placement policy '{}' is unknown (use binpack, spread, best-fit, random or frag)", s));
}

Result<std::vector<int64_t>> ParseLasThresholds(std::string_view s) {
  std::vector<int64_t> out;
  if (s == "0" || s == "none") return out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string_view item = s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    auto d = ParseDurationMs(item);
    if (!d.ok() || *d <= 0) {
      return InvalidArgument(fmt::format(
          "LAS thresholds '{}': '{}' is not a positive duration of GPU time (use e.g. 1h,10h for 1 and 10 GPU-hours, "
          "or none)",
          s, item));
    }
    if (!out.empty() && *d <= out.back()) {
      return InvalidArgument(fmt::format("LAS thresholds '{}': they must be ascending", s));
    }
    out.push_back(*d);
    if (out.size() > 8) return InvalidArgument(fmt::format("LAS thresholds '{}': at most 8", s));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<double> ParseStarvationFactor(std::string_view s) {
  std::string text(s);
  char* end = nullptr;
  double k = text.empty() ? -1 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(k) || k < 0 || k > 1e6) {
    return InvalidArgument(fmt::format(
        "LAS starvation factor '{}' is not a number from 0 to 1000000 (e.g. 4: a job that waited 4 times as long "
        "as it ran is promoted; 0: never)",
        s));
  }
  return k;
}

}  // namespace drover::sched
