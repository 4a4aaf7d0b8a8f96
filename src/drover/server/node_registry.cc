// The node registry's records, sessions and reports (node_registry.h); the
// leases are in node_leases.cc. Runs on the loop thread only.

#include "drover/server/node_registry.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/fault.h"
#include "drover/rpc/convert.h"

namespace drover::server {

// ---- recovery ----

Result<NodeRegistry::Map> NodeRegistry::Rebuild(std::vector<v1::Node> stored, sched::Scheduler* sched) {
  Map out;
  for (v1::Node& node : stored) {
    Entry entry;
    if (auto it = nodes_.find(node.name()); it != nodes_.end()) {
      // Rebuilt after a failed commit: what was live stays (copied: the
      // live entry is untouched until Replace).
      entry = it->second;
    } else {
      // A fresh start: every node gets a full lease to reconnect in.
      entry.heard_direct_ns = LeaseNowNs();
    }
    entry.node = std::move(node);
    entry.record.reset();
    DROVER_RETURN_IF_ERROR(sched->UpsertNode(rpc::ToNodeInfo(entry.node, Schedulable(entry))));
    std::string name = entry.node.name();
    out[name] = std::move(entry);
  }
  return out;
}

void NodeRegistry::Replace(Map nodes) {
  nodes_ = std::move(nodes);
  for (const auto& [name, entry] : nodes_) {
    if (entry.sink) batch_->MarkDesired(name);
  }
}

void NodeRegistry::ResetSessions() {
  for (auto& [name, entry] : nodes_) {
    if (entry.sink) entry.sink->Reset();
  }
}

void NodeRegistry::Persist(const v1::Node& node) {
  if (auto it = nodes_.find(node.name()); it != nodes_.end()) it->second.record.reset();  // it changed
  batch_->PutNode(node);
}

bool NodeRegistry::Schedulable(const Entry& entry) const {
  return entry.sink != nullptr && !entry.node.drained() && entry.liveness == Liveness::kAlive &&
         !entry.awaiting_clean_report;
}

void NodeRegistry::UpdateSchedulable(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  Touch(name);
  sched_->SetSchedulable(name, Schedulable(it->second));
}

// ---- agents ----

Status NodeRegistry::Register(const v1::RegisterRequest& req) {
  auto it = nodes_.find(req.node_name());
  bool is_new = it == nodes_.end();
  // Changed on a copy: an inventory the scheduler refuses changes nothing.
  v1::Node node = is_new ? v1::Node() : it->second.node;
  node.set_name(req.node_name());
  *node.mutable_gpus() = req.gpus();
  node.set_cpu_millis(req.cpu_millis());
  node.set_memory_bytes(req.memory_bytes());
  node.set_agent_version(req.agent_version());
  *node.mutable_labels() = req.labels();
  *node.mutable_links() = req.links();
  *node.mutable_topology() = req.topology();
  if (req.has_isolation()) {
    *node.mutable_isolation() = req.isolation();
  } else {
    node.clear_isolation();  // an agent that does not report it
  }
  if (is_new) node.set_registered_unix_nanos(NowNs());
  if (node.gossip_address() != req.gossip_address()) ++peers_version_;
  node.set_gossip_address(req.gossip_address());
  node.set_advertise_host(req.advertise_host());
  node.set_launch_port_first(req.launch_port_first());
  node.set_launch_port_last(req.launch_port_last());
  for (v1::Gpu& g : *node.mutable_gpus()) g.set_health_changed_unix_nanos(NowNs());
  bool schedulable = !is_new && Schedulable(it->second);
  DROVER_RETURN_IF_ERROR(sched_->UpsertNode(rpc::ToNodeInfo(node, schedulable)));
  Entry& entry = nodes_[req.node_name()];
  entry.node = node;
  if (is_new || entry.liveness == Liveness::kLost) {
    // It (re)joins with a fresh lease; back from Lost, it takes work only
    // once its first full report shows it runs nothing it should not.
    entry.awaiting_clean_report = !is_new;
    if (!is_new) spdlog::warn("node '{}', declared lost, registers again", node.name());
    entry.liveness = Liveness::kAlive;
    entry.liveness_reason.clear();
    entry.heard_direct_ns = LeaseNowNs();
    ++peers_version_;
  }
  entry.telemetry.clear();
  entry.readings.reset();
  entry.images.reset();  // a registering agent reports its store again
  board_->DropHistory(node.name());
  Persist(node);
  spdlog::info("node '{}' registered with {} GPUs", node.name(), node.gpus_size());
  for (const v1::Gpu& g : node.gpus()) {
    if (g.health() == v1::GPU_HEALTH_UNHEALTHY) jobs_->StopJobsOnGpu(node.name(), g.index(), g.health_reason());
  }
  return Status::Ok();
}

Status NodeRegistry::Open(const std::string& node, std::shared_ptr<AgentSink> sink) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound(fmt::format("node '{}' is not registered", node));
  Entry& entry = it->second;
  if (entry.liveness == Liveness::kLost) {
    return FailedPrecondition(
        fmt::format("node '{}' was declared lost ({}); it must register again", node, entry.liveness_reason));
  }
  if (entry.sink && entry.sink != sink) entry.sink->Reset();  // the older session is stale
  entry.sink = std::move(sink);
  entry.last_heartbeat_ns = NowNs();
  entry.heard_direct_ns = LeaseNowNs();
  entry.full_report_seen = false;
  UpdateSchedulable(node);
  batch_->MarkDesired(node);
  spdlog::info(
      "node '{}' is ready{}", node,
      entry.awaiting_clean_report ? "; it takes work once its report shows it runs nothing it should not" : "");
  return Status::Ok();
}

void NodeRegistry::Close(const std::string& node, const AgentSink* sink) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.sink.get() != sink) return;  // a newer session took over
  it->second.sink.reset();
  UpdateSchedulable(node);
  spdlog::warn("node '{}' lost its session; not ready", node);
}

void NodeRegistry::Report(const std::string& node, const v1::StatusReport& report) {
  auto it = nodes_.find(node);
  // A lost node's reports are not trusted until it registers again.
  if (it == nodes_.end() || it->second.liveness == Liveness::kLost) return;
  Touch(node);
  std::set<std::string> reported;
  for (const v1::WorkloadStatus& ws : report.workloads()) {
    reported.insert(ws.workload_id().empty() ? ws.job_id() : ws.workload_id());
    jobs_->ApplyWorkloadStatus(node, ws);
  }
  if (report.full()) jobs_->ApplyLost(node, reported);
  NoteUndesired(&it->second, report);
}

void NodeRegistry::NoteUndesired(Entry* entry, const v1::StatusReport& report) {
  // Only a node back from Lost is watched; its session's first report is full.
  if (!entry->awaiting_clean_report) return;
  std::set<std::string> wanted;
  const v1::DesiredWorkloads desired = DesiredFor(entry->node.name());
  for (const v1::Workload& w : desired.workloads()) wanted.insert(w.workload_id());
  if (report.full()) {
    entry->undesired_running.clear();
    entry->full_report_seen = true;
  }
  for (const v1::WorkloadStatus& ws : report.workloads()) {
    std::string id = ws.workload_id().empty() ? ws.job_id() : ws.workload_id();
    if (ws.state() == v1::WORKLOAD_STATE_RUNNING && !wanted.contains(id)) {
      entry->undesired_running.insert(id);
    } else {
      entry->undesired_running.erase(id);
    }
  }
  if (!entry->full_report_seen) return;
  if (!entry->undesired_running.empty()) {
    if (report.full()) {
      spdlog::warn("node '{}' still runs {} workloads it should not ('{}', ...); no new work until they are stopped",
                   entry->node.name(), entry->undesired_running.size(), *entry->undesired_running.begin());
    }
    return;
  }
  entry->awaiting_clean_report = false;
  UpdateSchedulable(entry->node.name());
}

Status NodeRegistry::InjectFault(const std::string& node, int gpu, const std::string& fault) {
  DROVER_RETURN_IF_ERROR(ParseFault(fault).status());
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound(fmt::format("node '{}' is not registered", node));
  const v1::Node& n = it->second.node;
  if (gpu < 0 || gpu >= n.gpus_size()) {
    return InvalidArgument(fmt::format("node '{}' has no gpu {} (it has {})", node, gpu, n.gpus_size()));
  }
  if (n.gpus(gpu).backend() != "simulated") {
    return FailedPrecondition(
        fmt::format("gpu {} of node '{}' is a {} device; faults can only be injected into "
                    "simulated GPUs",
                    gpu, node, n.gpus(gpu).backend()));
  }
  if (!it->second.sink) return Unavailable(fmt::format("node '{}' has no session; try again when it is ready", node));
  v1::InjectFault msg;
  msg.set_gpu_index(gpu);
  msg.set_fault(fault);
  it->second.sink->SendInjectFault(msg);
  spdlog::warn("fault '{}' injected into gpu {} of node '{}'", fault, gpu, node);
  return Status::Ok();
}

Result<std::vector<std::string>> NodeRegistry::PullImage(const std::vector<std::string>& nodes,
                                                         const v1::PullImage& pull) {
  // Nothing goes to an agent from a deposed leader.
  if (!Leading()) return Unavailable("this server no longer leads the cluster; ask the leader");
  std::vector<Entry*> told;
  std::vector<std::string> names;
  if (nodes.empty()) {
    for (auto& [name, entry] : nodes_) {
      if (entry.sink && entry.liveness == Liveness::kAlive) {
        told.push_back(&entry);
        names.push_back(name);
      }
    }
  }
  for (const std::string& name : nodes) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return NotFound(fmt::format("node '{}' is not registered", name));
    if (!it->second.sink) {
      return Unavailable(fmt::format("node '{}' has no session; try again when it is ready", name));
    }
    told.push_back(&it->second);
    names.push_back(name);
  }
  for (Entry* entry : told) entry->sink->SendPullImage(pull);
  if (pull.has_archive()) {
    spdlog::info("image archive {} ({} bytes) to be loaded by {} nodes", pull.archive().load_id(),
                 pull.archive().size_bytes(), names.size());
  } else {
    spdlog::info("image '{}' ({}) to be pulled by {} nodes", pull.reference(),
                 pull.pull_policy().empty() ? "if-not-present" : pull.pull_policy(), names.size());
  }
  return names;
}

Result<v1::Node> NodeRegistry::SetDrained(const std::string& name, bool drained, bool requeue) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return NotFound(fmt::format("node '{}' not found", name));
  if (it->second.node.drained() != drained) {
    it->second.node.set_drained(drained);
    UpdateSchedulable(name);
    Persist(it->second.node);
  }
  // As a preemption for nobody: the checkpoint signal, the job's own grace,
  // then queued again in its submission order.
  if (requeue) jobs_->Drain(name);
  return RenderNode(*Capture(it->second));
}

void NodeRegistry::JobEndedOn(const v1::Job& job, const std::set<std::string>& nodes) {
  constexpr size_t kEndedJobsPerNode = 256;
  for (const std::string& node : nodes) {
    auto n = nodes_.find(node);
    if (n == nodes_.end()) continue;
    n->second.ended_jobs.push_back(job.id());
    if (n->second.ended_jobs.size() > kEndedJobsPerNode) n->second.ended_jobs.pop_front();
  }
}

// ---- what goes out at commit ----

void NodeRegistry::SendDesired() const {
  if (!Leading()) return;
  for (const std::string& name : batch_->desired()) {
    auto it = nodes_.find(name);
    if (it != nodes_.end() && it->second.sink) it->second.sink->SendDesired(DesiredFor(name));
  }
}

v1::DesiredWorkloads NodeRegistry::DesiredFor(const std::string& node) const {
  v1::DesiredWorkloads out;
  if (auto n = nodes_.find(node); n != nodes_.end()) {
    for (const std::string& id : n->second.ended_jobs) out.add_ended_jobs(id);
  }
  jobs_->AddDesired(node, &out);
  return out;
}

void NodeRegistry::Publish(NodeReplica* replica) {
  std::vector<NodeReplica::SnapshotPtr> views;
  const int64_t now = LeaseNowNs();
  auto publish = [&](const std::string& name) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return;
    views.push_back(Capture(it->second));
    it->second.published_ns = now;
  };
  for (const std::string& name : batch_->touched()) publish(name);
  for (const std::string& name : batch_->desired()) {
    if (!batch_->touched().contains(name)) publish(name);
  }
  batch_->ClearTouched();
  replica->Update(std::move(views));
}

std::map<std::string, NodeReplica::SnapshotPtr> NodeRegistry::CaptureAll() const {
  std::map<std::string, NodeReplica::SnapshotPtr> out;
  for (const auto& [name, entry] : nodes_) out.emplace_hint(out.end(), name, Capture(entry));
  return out;
}

NodeReplica::SnapshotPtr NodeRegistry::Capture(const Entry& entry) const {
  auto out = std::make_shared<NodeSnapshot>();
  // Copied once per change of the record (Persist drops the shared copy).
  if (entry.record == nullptr) entry.record = std::make_shared<const v1::Node>(entry.node);
  out->record = entry.record;
  switch (entry.liveness) {
    case Liveness::kLost: out->state = v1::NODE_STATE_LOST; break;
    case Liveness::kSuspect: out->state = v1::NODE_STATE_SUSPECT; break;
    case Liveness::kAlive: out->state = entry.sink ? v1::NODE_STATE_READY : v1::NODE_STATE_NOT_READY;
  }
  if (!entry.liveness_reason.empty()) {
    out->state_reason = entry.liveness_reason;
  } else if (entry.sink && entry.awaiting_clean_report) {
    out->state_reason = entry.undesired_running.empty()
                            ? "waiting for the agent's first report"
                            : fmt::format("stopping {} workloads it should not run", entry.undesired_running.size());
  }
  out->session = entry.sink != nullptr;
  out->images = entry.images;
  // Telemetry of a node whose session is down is stale: left out.
  if (entry.sink && !entry.telemetry.empty()) {
    if (entry.readings == nullptr)
      entry.readings = std::make_shared<const std::vector<v1::GpuTelemetry>>(entry.telemetry);
    out->telemetry = entry.readings;
  }
  // On the wall clock: the lease clock's time means nothing outside.
  int64_t renewed = std::max(entry.heard_direct_ns, entry.heard_via_peer_ns);
  out->lease_renewed_unix_nanos = NowNs() - (LeaseNowNs() - renewed);
  out->lease_via_peers = entry.heard_via_peer_ns > entry.heard_direct_ns;
  out->last_heartbeat_unix_nanos = entry.last_heartbeat_ns;
  const std::string& name = entry.node.name();
  const JobTable& table = jobs_->table();
  for (uint64_t seq : table.ActiveOn(name)) {
    const v1::Job& job = table.at(seq);
    auto add = [&](const v1::Allocation& a) {
      if (a.node() != name) return;
      out->jobs.push_back({job.id(), job.spec().tenant(), {a.gpu_indices().begin(), a.gpu_indices().end()}});
    };
    if (job.status().replicas_size() > 0) {
      for (const v1::Allocation& a : job.status().replicas()) add(a);
    } else {
      add(job.status().allocation());
    }
  }
  return out;
}

}  // namespace drover::server
