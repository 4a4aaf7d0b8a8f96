#pragma once
// NodeReplica: what every node's view (GetNode, ListNodes, Fleet) is made
// of, as the last commit left it, for readers on any thread: node reads
// never wait behind the control loop, as job reads do not (JobReplica).
//
// The loop captures a NodeSnapshot of each node a batch changed after the
// batch commits (before it answers the batch's commands, so a client reads
// its own write), and of every node after it rebuilds its state from the
// store. A snapshot is cheap to take: shared pointers to the persisted
// record and the last readings, the liveness fields and the jobs on the
// node's GPUs; the reader renders it into a v1::Node (RenderNode) on its
// own thread. GPU readings and lease times alone republish a node at most
// once a second (ControlLoop::kPublishReadingsEveryNs): they may be that
// much older than the last heartbeat.
//
// Publishing swaps pointers under a short exclusive lock; a reader copies
// the pointers under a shared lock and renders after releasing it.
//
// Thread-safety: Replace, Update and SetUnavailable from the loop thread (one
// writer); Get and List from any thread.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/v1/common.pb.h"

namespace drover::server {

struct NodeSnapshot {
  std::shared_ptr<const v1::Node> record;  // as persisted: inventory, labels, drained, GPU health
  // The last readings by GPU index; null while the node has no session
  // (stale readings are left out).
  std::shared_ptr<const std::vector<v1::GpuTelemetry>> telemetry;
  // The node's image store as it last reported it; null: never reported.
  std::shared_ptr<const std::vector<v1::NodeImage>> images;
  v1::NodeState state = v1::NODE_STATE_UNSPECIFIED;
  std::string state_reason;
  bool session = false;
  int64_t lease_renewed_unix_nanos = 0;
  bool lease_via_peers = false;
  int64_t last_heartbeat_unix_nanos = 0;
  struct JobOnGpus {
    std::string job_id;
    std::string tenant;
    std::vector<int> gpus;  // this node's GPU indices
  };
  std::vector<JobOnGpus> jobs;
};

// The node's view: its record with state, lease, readings, the jobs on
// each GPU (a shared GPU lists every job, comma-separated) and conditions.
v1::Node RenderNode(const NodeSnapshot& snapshot);

class NodeReplica {
 public:
  using SnapshotPtr = std::shared_ptr<const NodeSnapshot>;

  // Every node, by name; reads are served again.
  void Replace(std::map<std::string, SnapshotPtr> nodes);
  // New or changed snapshots, replacing older ones of the same node.
  void Update(std::vector<SnapshotPtr> changed);
  // The loop cannot vouch for its state: reads fail with `why` until the
  // next Replace.
  void SetUnavailable(Status why);

  // The node's snapshot, null when unknown; an error while unavailable.
  Result<SnapshotPtr> Get(const std::string& name) const;
  // Every node's snapshot, by name.
  Result<std::vector<SnapshotPtr>> List() const;

 private:
  mutable SharedMutex mu_;
  std::map<std::string, SnapshotPtr> nodes_ DROVER_GUARDED_BY(mu_);
  Status available_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::server
