#pragma once
// The per-job supervisor (`drover supervise --dir D`): the role of
// containerd-shim or Nomad's executor. The agent spawns it in a session of
// its own; it starts the job in a new process group with its output going to
// output.log, forwards SIGTERM/SIGINT/SIGHUP to that group, and records the
// start and the exit in the job directory. It outlives the agent, so a job
// survives an agent or server crash and its exit status is never lost.
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
