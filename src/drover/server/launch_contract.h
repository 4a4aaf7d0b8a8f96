#pragma once
// The launch contract of a job's attempt (docs/distributed.md): what its
// replicas need to find each other (their ranks, replica 0's address and a
// port reserved on its node, every replica's address), fixed once when the
// attempt is bound and kept in its Attempt record, so that an agent's
// restart or a server's failover sends the same values.
//
// The master port comes from replica 0's node's launch port range (`drover
// agent --launch-ports`, as Nomad's dynamic ports): the lowest port of it
// that no other live attempt on that node holds. A port is held while its
// job holds resources on the node (JobTable::ActiveOn), so it is free again
// once the attempt's processes are gone, before a next attempt is bound.
//
// Pure functions over the job table and node records; the caller (the
// control loop's JobLifecycle) owns both.

#include <functional>
#include <set>
#include <string>

#include "drover/common/status.h"
#include "drover/server/job_table.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

struct LaunchPortRange {
  int first = 0;
  int last = 0;
};
// What a node that registered no range of its own gets (torchrun's own
// default, 29400, first).
inline constexpr LaunchPortRange kDefaultLaunchPorts{29400, 29499};

// The node's registered range, or kDefaultLaunchPorts (also for a null node).
LaunchPortRange LaunchPortsOf(const v1::Node* node);

// The lowest port of `range` not in `held`; kResourceExhausted naming the
// node and its range when every one is held.
Result<int> PickLaunchPort(const std::string& node, LaunchPortRange range, const std::set<int>& held);

// The master ports that the current attempts of the jobs active on `node`
// hold there (those whose replica 0 runs on it).
std::set<int> LaunchPortsHeld(const JobTable& table, const std::string& node);

// A node's record by name; null when unknown.
using NodeLookup = std::function<const v1::Node*(const std::string& name)>;

// Fills the contract of a new attempt `a` (its nodes set, in rank order):
// each replica's address (its node's advertised host; the node's name when
// it registered none) and a master port on replica 0's node. A gang whose
// master node has no port free gets kResourceExhausted (it waits); a job
// of one node runs without a port (no MASTER_PORT) rather than wait.
Status FillAttemptContract(const JobTable& table, const NodeLookup& node_of, v1::Attempt* a);

// Replica `replica`'s contract from the job's current attempt into `w`.
// A job whose attempt was bound by an older server (no hosts) gets its
// node names as addresses and no master port.
void FillLaunch(const v1::Job& job, int replica, v1::Workload* w);

}  // namespace drover::server
