#pragma once
// What an agent can confine its jobs with on this machine (docs/security.md,
// "Workload isolation"), found once at start, logged, and reported to the
// server (the node's WorkloadIsolation condition in `drover nodes`):
//
//   cpu and memory limits   cgroup v2 cpu.max / memory.max from the job's
//                           request: needs the controllers delegated
//   device limits           a cgroup device program refusing other GPUs'
//                           device files: needs a job group and CAP_BPF
//   CPU pinning             the CPUs of the job's GPUs' NUMA nodes
//   clean environment       always on
//
// A part the machine does not allow is off, said once with the reason; the
// rest still works.

#include <string>
#include <vector>

namespace drover::agent {

struct NodeIsolation {
  std::string cgroup_parent;             // the agent's group (directory); empty: jobs get no group
  std::string cgroup_parent_path;        // the same in /proc/<pid>/cgroup's spelling
  std::vector<std::string> controllers;  // enabled for job groups: "cpu", "memory"
  bool device_limits = false;
  bool cpu_pinning = false;
  bool clean_environment = true;
  // Jobs get mount and PID namespaces (sandbox.h); off: where the machine
  // cannot, a job still runs as its tenant's user when the agent is root.
  bool sandbox = false;
  // Jobs' system calls are filtered (seccomp_profile.h).
  bool seccomp = false;
  std::string message;  // every part, on or off, and why (the off ones first)

  bool cpu_limits() const;
  bool memory_limits() const;
};

// Probes this machine for the agent whose group under the process's cgroup
// home is `group_name` ("drover-<node>-<tag>"; made and removed again: it
// exists while the agent has jobs). `pinning_problem` says why jobs cannot
// be pinned (empty: they can).
NodeIsolation ProbeNodeIsolation(const std::string& group_name, const std::string& pinning_problem);

// The message of `iso` given why each off part is off (pure; for tests).
std::string IsolationMessage(const NodeIsolation& iso, const std::string& cgroup_problem,
                             const std::string& device_problem, const std::string& pinning_problem);

}  // namespace drover::agent
