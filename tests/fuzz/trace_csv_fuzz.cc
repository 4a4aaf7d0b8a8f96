// The public-trace loaders of the simulator (sim/loaders.cc over the strict
// CSV reader of sim/csv_reader.cc): `drover sim --cluster/--workload
// FORMAT:PATH`. The first byte picks the format and file name; the rest is
// written to that file and loaded through LoadCluster / LoadWorkload:
//   0 itp:cluster01.csv             (Microsoft ITP jobs)
//   1 pai2023:openb_pod_list.csv    (Alibaba PAI 2023 pods)
//   2 pai2023:openb_node_list.csv   (its nodes, a cluster)
//   3 pai2020:pai_machine_spec.csv  (Alibaba PAI 2020 machines, headerless)
//   4 philly-vc:trace_0e4a51.csv    (Philly jobs of a VC Helios sized)
//   5 philly-vc:trace_fuzz.csv      (a VC it did not: its jobs size it)
//
// Properties: a workload comes sorted by submit time with unique ids and
// jobs the scheduler can take (1..kMaxGpusPerNode GPUs per replica, shares
// of one GPU only for one-GPU jobs); a cluster has uniquely named nodes
// with GPUs indexed 0..n-1; the cluster of a VC whose jobs load is refused
// only for its size.

#include <algorithm>
#include <set>

#include "drover/sim/loaders.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;
using drover::fuzz::WriteTempFile;
namespace sched = drover::sched;
namespace sim = drover::sim;

void CheckWorkload(const sim::Workload& w) {
  std::set<std::string> ids;
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    const sim::SimJob& j = w.jobs[i];
    FUZZ_CHECK(!j.req.id.empty() && ids.insert(j.req.id).second);
    FUZZ_CHECK(i == 0 || w.jobs[i - 1].submit_ms <= j.submit_ms);
    FUZZ_CHECK(j.submit_ms >= 0 && j.duration_ms >= 0);
    FUZZ_CHECK(j.req.replicas >= 1 && j.req.gpus >= 0 && j.req.gpus <= sched::kMaxGpusPerNode);
    FUZZ_CHECK(j.req.gpu_milli >= 1 && j.req.gpu_milli <= sched::kWholeGpu);
    FUZZ_CHECK(j.req.gpu_milli == sched::kWholeGpu || (j.req.gpus == 1 && j.req.replicas == 1));
  }
}

void CheckCluster(const sim::Cluster& c) {
  FUZZ_CHECK(!c.nodes.empty());
  std::set<std::string> names;
  for (const sched::NodeInfo& n : c.nodes) {
    FUZZ_CHECK(!n.name.empty() && names.insert(n.name).second);
    FUZZ_CHECK(n.gpus.size() <= static_cast<size_t>(sched::kMaxGpusPerNode));
    for (size_t i = 0; i < n.gpus.size(); ++i) FUZZ_CHECK(n.gpus[i].index == static_cast<int>(i));
    FUZZ_CHECK(n.links.empty() || n.links.size() == n.gpus.size() * n.gpus.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text = AsText(data + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      auto w = sim::LoadWorkload("itp:" + WriteTempFile("cluster01.csv", text));
      if (w.ok()) CheckWorkload(*w);
      break;
    }
    case 1: {
      auto w = sim::LoadWorkload("pai2023:" + WriteTempFile("openb_pod_list.csv", text));
      if (w.ok()) CheckWorkload(*w);
      break;
    }
    case 2: {
      auto c = sim::LoadCluster("pai2023:" + WriteTempFile("openb_node_list.csv", text));
      if (c.ok()) CheckCluster(*c);
      break;
    }
    case 3: {
      auto c = sim::LoadCluster("pai2020:" + WriteTempFile("pai_machine_spec.csv", text));
      if (c.ok()) CheckCluster(*c);
      break;
    }
    default: {
      const std::string path = WriteTempFile(data[0] % 6 == 4 ? "trace_0e4a51.csv" : "trace_fuzz.csv", text);
      auto w = sim::LoadWorkload("philly-vc:" + path);
      if (!w.ok()) break;
      CheckWorkload(*w);
      // The VC's jobs size its cluster: it loads unless they need too many nodes.
      auto c = sim::LoadCluster("philly-vc:" + path);
      if (!c.ok()) {
        FUZZ_CHECK(c.status().message().find("nodes, more than") != std::string::npos);
        break;
      }
      CheckCluster(*c);
      break;
    }
  }
  return 0;
}
