#pragma once

#include <cstdint>
#include <map>

#include "drover/v1/common.pb.h"

namespace drover::server {

// What /metrics reports of the control loop (ControlLoop::Stats), read off
// the loop from what it publishes.
struct LoopStats {
  std::map<v1::JobState, int64_t> jobs;          // every state, zero included
  int64_t queue_depth = 0;                       // pending jobs
  int64_t nodes_ready = 0, nodes_not_ready = 0;  // not ready includes suspect and lost
  int64_t nodes_lost = 0;
  int64_t gpus_healthy = 0, gpus_unhealthy = 0;
  // Since start: lease renewals by the node's own heartbeat and by a peer
  // that heard it (gossip); nodes declared Lost.
  uint64_t renewals_direct = 0, renewals_via_peers = 0, node_losses = 0;
  // Batches after which a scheduling pass ran, and those that needed none
  // (nothing the scheduler reads had changed: reads, most reports).
  uint64_t passes_run = 0, passes_skipped = 0;
};

}  // namespace drover::server
