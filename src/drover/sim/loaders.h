#pragma once
// Simulator inputs: a cluster and a workload from a spec string, either
// FORMAT:PATH for a public trace or the path of a YAML file. Every format,
// mapping and assumption is in docs/simulator-inputs.md.
//
//   LoadCluster("itp:traces/microsoft-itp-elasticflow/raw/cluster08.csv")
//       -> 128 nodes x 8 A100 (ElasticFlow's sizing of ITP cluster08)
//   LoadWorkload("pai2023:traces/alibaba-pai-2023/openb_pod_list_default.csv")
//       -> 8,152 jobs
//   LoadWorkload("examples/mixed.yaml")  // kind: synthetic (synthetic.h)
//
// Formats: itp, pai2023, pai2020 (cluster only), philly-vc. Inputs are read
// strictly: a malformed row fails the whole load with an error naming the
// file, the line and the column ("cluster01.csv:17: column 'num_gpu': 'abc'
// is not an integer"), never a skipped row.
//
// Pure functions of their inputs (and the seed): no global state, safe to
// call from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/sim/workload.h"

namespace drover::sim {

// A cluster: itp:PATH, pai2023:PATH (a node list), pai2020:PATH (the machine
// spec), philly-vc:PATH, or a YAML file with node_groups.
Result<Cluster> LoadCluster(std::string_view spec);

// A workload: itp:PATH, pai2023:PATH (a pod list), philly-vc:PATH, or a YAML
// file with `kind: synthetic`. `seed` replaces the YAML file's seed (the
// CLI's --seed); trace files ignore it. Jobs come sorted by submit_ms, then
// file order.
Result<Workload> LoadWorkload(std::string_view spec, std::optional<uint64_t> seed = std::nullopt);

// The formats a spec may name, for help texts: {"itp", "pai2023", ...}.
const std::vector<std::string>& TraceFormats();

// A gang of whole GPUs for `gpus` GPUs on nodes of `per_node` GPUs:
// up to per_node, one replica; above, replicas = ceil(gpus / per_node) of
// ceil(gpus / replicas) GPUs each (64 -> 8 x 8, 12 -> 2 x 6, 20 -> 3 x 7,
// which asks for 21: the total rounds up to a multiple of the replicas).
struct GangShape {
  int replicas = 1;
  int gpus = 1;
};
GangShape ShapeGang(int64_t gpus, int per_node = 8);

// The GPU memory assumed for a GPU model named in the Alibaba PAI traces
// ("V100M32" -> 32 GiB); 0 for a name it does not know.
int64_t PaiGpuMemoryBytes(std::string_view model);

}  // namespace drover::sim
