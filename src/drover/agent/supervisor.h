#pragma once
// The per-job supervisor (`drover supervise --dir D`): the role of
// containerd-shim or Nomad's executor. The agent spawns it in a session of
// its own; it starts the job in a new process group with its output going to
// output.log, forwards SIGTERM/SIGINT/SIGHUP to that group, and records the
// start and the exit in the job directory. It outlives the agent, so a job
// survives an agent or server crash and its exit status is never lost.
//
// It confines the job as isolation.json says (docs/security.md, "Workload
// isolation"): it makes the job's cgroup v2 group (limits, device program)
// and, between fork and exec, moves the job into it and pins it to its
// CPUs; the job gets exactly the environment in spec.json. When the job
// ends it kills what the job left in its group and removes the group.
//
// Single-threaded by construction: it runs in a fresh exec of the binary and
// starts no library threads.

#include <sys/types.h>

#include <string>

#include "drover/common/status.h"

namespace drover::agent {

// The supervisor's main; returns the supervisor's exit code.
int RunSupervisor(const std::string& job_dir);

// Spawns `exe supervise --dir job_dir` in a new session (posix_spawn, no
// code runs between fork and exec) and returns its pid.
Result<pid_t> SpawnSupervisor(const std::string& exe, const std::string& job_dir);

// True when `pid` is alive and is the supervisor of `job_dir` (guards against
// a reused pid).
bool SupervisorAlive(pid_t pid, const std::string& job_dir);

}  // namespace drover::agent
