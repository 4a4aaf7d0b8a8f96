#include "drover/server/launch_contract.h"

#include <fmt/format.h>

namespace drover::server {

LaunchPortRange LaunchPortsOf(const v1::Node* node) {
  if (node == nullptr || node->launch_port_first() <= 0 || node->launch_port_last() < node->launch_port_first()) {
    return kDefaultLaunchPorts;
  }
  return {node->launch_port_first(), node->launch_port_last()};
}

Result<int> PickLaunchPort(const std::string& node, LaunchPortRange range, const std::set<int>& held) {
  for (int p = range.first; p <= range.last; ++p) {
    if (!held.contains(p)) return p;
  }
  return ResourceExhausted(fmt::format(
      "waiting for a launch port on node '{}': every port of its range {}-{} is held by another job's master", node,
      range.first, range.last));
}

std::set<int> LaunchPortsHeld(const JobTable& table, const std::string& node) {
  std::set<int> held;
  for (uint64_t seq : table.ActiveOn(node)) {
    const v1::JobStatus& st = table.at(seq).status();
    if (st.attempts_size() == 0) continue;
    const v1::Attempt& a = st.attempts(st.attempts_size() - 1);
    if (a.number() != st.attempt() || a.master_port() <= 0 || a.nodes_size() == 0 || a.nodes(0) != node) continue;
    held.insert(a.master_port());
  }
  return held;
}

Status FillAttemptContract(const JobTable& table, const NodeLookup& node_of, v1::Attempt* a) {
  a->clear_hosts();
  a->clear_master_port();
  for (const std::string& n : a->nodes()) {
    const v1::Node* node = node_of ? node_of(n) : nullptr;
    a->add_hosts(node != nullptr && !node->advertise_host().empty() ? node->advertise_host() : n);
  }
  if (a->nodes_size() == 0) return Status::Ok();
  const std::string& master = a->nodes(0);
  Result<int> port =
      PickLaunchPort(master, LaunchPortsOf(node_of ? node_of(master) : nullptr), LaunchPortsHeld(table, master));
  if (port.ok()) {
    a->set_master_port(*port);
  } else if (a->nodes_size() > 1) {
    return port.status();
  }
  // A job of one node is never held back for a port: it runs without one.
  return Status::Ok();
}

void FillLaunch(const v1::Job& job, int replica, v1::Workload* w) {
  const v1::JobStatus& st = job.status();
  if (st.attempts_size() == 0) return;
  const v1::Attempt& a = st.attempts(st.attempts_size() - 1);
  if (a.number() != st.attempt() || a.nodes_size() == 0) return;
  v1::LaunchContract* c = w->mutable_launch();
  c->set_node_rank(replica);
  c->set_nnodes(a.nodes_size());
  *c->mutable_nodes() = a.nodes();
  if (a.hosts_size() == a.nodes_size()) {
    *c->mutable_hosts() = a.hosts();
  } else {
    *c->mutable_hosts() = a.nodes();
  }
  c->set_master_addr(c->hosts(0));
  c->set_master_port(a.master_port());
}

}  // namespace drover::server
