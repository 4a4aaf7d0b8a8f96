#include "drover/server/node_replica.h"

#include <fmt/format.h>

#include <mutex>
#include <utility>

namespace drover::server {

v1::Node RenderNode(const NodeSnapshot& s) {
  v1::Node out = *s.record;
  out.set_state(s.state);
  if (!s.state_reason.empty()) out.set_state_reason(s.state_reason);
  out.set_lease_renewed_unix_nanos(s.lease_renewed_unix_nanos);
  out.set_lease_via_peers(s.lease_via_peers);
  out.set_last_heartbeat_unix_nanos(s.last_heartbeat_unix_nanos);
  if (s.telemetry != nullptr) {
    for (int i = 0; i < out.gpus_size() && static_cast<size_t>(i) < s.telemetry->size(); ++i) {
      *out.mutable_gpus(i)->mutable_telemetry() = (*s.telemetry)[static_cast<size_t>(i)];
    }
  }
  if (s.images != nullptr) {
    out.mutable_images()->Reserve(static_cast<int>(s.images->size()));
    for (const v1::NodeImage& im : *s.images) *out.add_images() = im;
  }
  v1::NodeCondition* ready = out.add_conditions();
  ready->set_type("Ready");
  ready->set_status(s.session);
  ready->set_reason(s.session ? "SessionUp" : "SessionDown");
  ready->set_message(s.session ? "the agent's session is connected" : "no session with the agent");
  v1::NodeCondition* gpus = out.add_conditions();
  gpus->set_type("GpusHealthy");
  std::string sick;
  for (const v1::Gpu& g : out.gpus()) {
    if (g.health() != v1::GPU_HEALTH_UNHEALTHY) continue;
    sick += fmt::format("{}gpu {}: {}", sick.empty() ? "" : "; ", g.index(), g.health_reason());
  }
  gpus->set_status(sick.empty());
  gpus->set_reason(sick.empty() ? "AllHealthy" : "UnhealthyGpus");
  gpus->set_message(sick.empty() ? fmt::format("{} GPUs in service", out.gpus_size()) : sick);
  // Agents that predate isolation reports say nothing: no condition.
  if (out.has_isolation()) {
    const v1::WorkloadIsolation& iso = out.isolation();
    bool full = iso.cpu_limits() && iso.memory_limits() && iso.device_limits() && iso.cpu_pinning() &&
                iso.clean_environment() && iso.sandbox();
    v1::NodeCondition* c = out.add_conditions();
    c->set_type("WorkloadIsolation");
    c->set_status(full);
    c->set_reason(full ? "Isolated" : "PartlyIsolated");
    c->set_message(iso.message());
  }
  for (const NodeSnapshot::JobOnGpus& j : s.jobs) {
    for (int i : j.gpus) {
      if (i < 0 || i >= out.gpus_size()) continue;
      v1::Gpu* g = out.mutable_gpus(i);
      g->set_job_id(g->job_id().empty() ? j.job_id : g->job_id() + "," + j.job_id);
      g->set_tenant(g->tenant().empty() ? j.tenant : g->tenant() + "," + j.tenant);
    }
  }
  return out;
}

void NodeReplica::Replace(std::map<std::string, SnapshotPtr> nodes) {
  WriterMutexLock lock(&mu_);
  nodes_.swap(nodes);
  available_ = Status::Ok();
  // The older snapshots go out with `nodes`, after the lock.
}

void NodeReplica::Update(std::vector<SnapshotPtr> changed) {
  if (changed.empty()) return;
  {
    WriterMutexLock lock(&mu_);
    for (SnapshotPtr& node : changed) {
      auto [it, inserted] = nodes_.try_emplace(node->record->name(), nullptr);
      // The older snapshot goes out in `changed`: freed after the lock.
      std::swap(it->second, node);
    }
  }
  changed.clear();
}

void NodeReplica::SetUnavailable(Status why) {
  WriterMutexLock lock(&mu_);
  available_ = std::move(why);
}

Result<NodeReplica::SnapshotPtr> NodeReplica::Get(const std::string& name) const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second;
}

Result<std::vector<NodeReplica::SnapshotPtr>> NodeReplica::List() const {
  ReaderMutexLock lock(&mu_);
  if (!available_.ok()) return available_;
  std::vector<SnapshotPtr> out;
  out.reserve(nodes_.size());
  for (const auto& [name, node] : nodes_) out.push_back(node);
  return out;
}

}  // namespace drover::server
