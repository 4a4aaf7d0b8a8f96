#pragma once
// How the CLI shows nodes and GPUs: the cells of `drover nodes` and
// `drover gpus` (also used by `drover top`). Pure functions of the API's
// messages; every telemetry field the agent could not read shows as "-".

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "drover/cli/terminal.h"  // Cut
#include "drover/v1/api.pb.h"

namespace drover::cli {

// "Healthy", "Unknown" (never reported) or "Unhealthy: REASON", cut to `max`.
std::string GpuHealthText(const v1::Gpu& g, size_t max = 0);

// Telemetry cells.
std::string UtilText(const v1::Gpu& g);      // "67%"
std::string MemUsedText(const v1::Gpu& g);   // "12.5GiB/80GiB" (total from the GPU when the reading lacks it)
std::string TempText(const v1::Gpu& g);      // "45"
std::string PowerText(const v1::Gpu& g);     // "250/700", "250/-"
std::string SmClockText(const v1::Gpu& g);   // "1980"
std::string ThrottleText(const v1::Gpu& g);  // "thermal,power"
std::string EccText(const v1::Gpu& g);       // corrected/uncorrected: "0/0", "12/-"
std::string XidText(const v1::Gpu& g);       // "0", "2 (last 79)"

// "7/8 healthy"; "-" for a node without GPUs.
std::string GpuHealthSummary(const v1::Node& n);

// "Ready, GpusHealthy" while every condition holds; a false one with its
// message cut to `max_message`: "Ready, GpusHealthy=False (gpu 1: xid 79 ...)".
std::string ConditionsText(const v1::Node& n, size_t max_message = 0);

// "2 sockets, 2 NUMA, 64 cores, 2 NICs"; "-" when hwloc found nothing.
std::string TopologySummary(const v1::HostTopology& t);

// How the node's GPU pairs are linked: "6 pairs: 6 fabric", "6 pairs: 2
// fabric, 4 cross-socket"; "-" without a (well-formed) link matrix.
std::string LinkSummary(const v1::Node& n);

// Nodes sorted by name, each node's GPUs by index.
std::vector<const v1::Node*> SortedNodes(const v1::ListNodesResponse& resp);
std::vector<const v1::Gpu*> SortedGpus(const v1::Node& n);

// The tables of `drover gpus` and `drover nodes` (`wide`: -o wide).
void PrintGpuTable(const v1::ListNodesResponse& resp, bool wide, std::ostream& out);
void PrintNodeTable(const v1::ListNodesResponse& resp, bool wide, int64_t now_nanos, std::ostream& out);

// `drover images`: every node's image store, a row per node and image
// (NODE, IMAGE, DIGEST, SIZE, IN USE, LAST USED); the digest short
// ("sha256:0123456789ab") and the references cut unless `wide`.
void PrintImageTable(const v1::ListNodesResponse& resp, bool wide, int64_t now_nanos, std::ostream& out);

}  // namespace drover::cli
