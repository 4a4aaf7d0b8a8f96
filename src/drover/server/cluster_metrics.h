// What the server's /metrics reads from the control loop at scrape time:
// job, queue, node and GPU counts, each node's state, each tenant's usage
// against its quota and budget, the oldest pending job per tenant and
// reason, and every ready node's GPUs under DCGM names. The alert rules in
// deploy/prometheus/ are written against these families (docs/alerts.md).
//
// The Write* functions are pure (views in, samples out) so that a test
// drives them without a loop; CollectCluster asks the loop for the views.

#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drover/common/metrics.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

class ControlLoop;

// One node's state as one-hot series over every state (so that a node's
// series never change their labels), and whether it is drained.
//   drover_node_state{node, state} 0|1, drover_node_drained{node} 0|1
void WriteNodeMetrics(const std::vector<v1::Node>& nodes, metrics::Exposition& out);

// Each tenant's GPUs held, its whole-cluster GPU quota, pending jobs and
// their limit, and GPU-hours used and budgeted in the current period, with
// the period's end. Limits that are not set are left out.
void WriteTenantMetrics(const v1::ListTenantsResponse& tenants, int64_t now_unix_nanos, metrics::Exposition& out);

// Per (tenant, wait class): how many jobs wait and how long the oldest has,
// with its id. Bounded: tenants x classes series, however long the queue.
void WritePendingJobMetrics(const std::vector<v1::Job>& pending, int64_t now_unix_nanos, metrics::Exposition& out);

// Facts the server knows apart from the loop.
struct ServerFacts {
  int64_t leader_epoch = 0;  // the leadership's epoch (etcd); 0: a single server
  // The certificates it serves with ("server", "ca") and when each expires.
  std::vector<std::pair<std::string, int64_t>> certificate_not_after_unix;
};
void WriteServerMetrics(const ServerFacts& facts, metrics::Exposition& out);

// All of the above, from the loop's views (skipped, whole, when the loop
// does not answer within 5 s).
void CollectCluster(ControlLoop* loop, const ServerFacts& facts, metrics::Exposition& out);

}  // namespace drover::server
