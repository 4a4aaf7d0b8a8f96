#pragma once
// What the simulator replays: a cluster and a list of jobs over virtual time.
// Loaders (loaders.h) build these from YAML or from public trace formats;
// the engine (engine.h) drives sched::Scheduler with them.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drover/sched/model.h"

namespace drover::sim {

struct SimJob {
  sched::JobRequest req;    // req.id unique; req.tenant set
  int64_t submit_ms = 0;    // arrival, virtual time
  int64_t duration_ms = 0;  // run time once started; 0 = never ends (packing mode)
};

struct Cluster {
  std::string name;
  std::vector<sched::NodeInfo> nodes;  // schedulable = true
  std::vector<sched::TenantInfo> tenants;
  int64_t gpus() const {
    int64_t n = 0;
    for (const auto& node : nodes) n += static_cast<int64_t>(node.gpus.size());
    return n;
  }
};

struct Workload {
  std::string name;
  std::vector<SimJob> jobs;  // sorted by submit_ms, then input order
  // The seed the jobs were drawn with (synthetic workloads); none for a trace.
  std::optional<uint64_t> seed;
};

}  // namespace drover::sim
