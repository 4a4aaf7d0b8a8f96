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
// Two programs carry it and run this same code: the small static
// `drover-supervise` (apps/drover-supervise; what the agent spawns when it
// lies beside the drover binary: an exec of it costs a few milliseconds
// where one of drover, with its shared libraries and gRPC's static
// initialisers, costs tens) and `drover supervise`, kept for agents without
// the small program and for supervisors an older agent started.
//
// Single-threaded by construction: it runs in a fresh exec of either
// program and starts no library threads.

#include <sys/types.h>

#include <string>

#include "drover/common/status.h"

namespace drover::agent {

// The supervisor's main; returns the supervisor's exit code.
int RunSupervisor(const std::string& job_dir);

// Spawns `exe supervise --dir job_dir` in a new session (posix_spawn, no
// code runs between fork and exec) and returns its pid. `exe` is either
// program: drover-supervise accepts (and ignores) the `supervise` verb, so
// the argv, which SupervisorAlive checks, is the same for both.
Result<pid_t> SpawnSupervisor(const std::string& exe, const std::string& job_dir);

// True when `pid` is alive and is the supervisor of `job_dir` (guards against
// a reused pid). A supervisor that began as a pool's spare is recognised by
// its working directory, which it moves to the job's when handed one.
bool SupervisorAlive(pid_t pid, const std::string& job_dir);

// The spare's main (`drover-supervise supervise --spare`): waits for a job
// directory on its standard input (the pool writes it and closes the pipe),
// then runs RunSupervisor for it with its stderr in the directory's
// supervisor.log, as a spawned supervisor has it. End of input with no
// directory (the pool or its agent went away): exits 0 at once.
int RunSpareSupervisor();

// SupervisorPool: one spare supervisor process started ahead of need and
// blocked reading a pipe, so that starting a job's supervisor costs a write
// and a close instead of a process start and an exec. Launch hands the
// spare its job directory (or, with none waiting, spawns as SpawnSupervisor
// does); the owner calls Refill for the next spare once the job has had
// its start: a spare spawned at once took a core from the job it had just
// handed over (on 2 cores, ~2 ms of a `submit --wait`). What Launch returns
// is used exactly like SpawnSupervisor's pid: a child of this process in a
// session of its own, reaped by the caller, re-adopted by SupervisorAlive.
//
// Only drover-supervise has the spare mode; for any other `exe` (drover
// itself) Launch is SpawnSupervisor.
//
// Not thread-safe: owned by the agent's loop. posix_spawn only, so it is
// safe in a threaded process.
class SupervisorPool {
 public:
  explicit SupervisorPool(std::string exe);
  ~SupervisorPool();  // the unused spare sees its pipe close, exits, and is reaped
  SupervisorPool(const SupervisorPool&) = delete;
  SupervisorPool& operator=(const SupervisorPool&) = delete;

  // The supervisor of `job_dir`, started (a relative `job_dir` is taken
  // from this process's working directory, as SpawnSupervisor's is).
  Result<pid_t> Launch(const std::string& job_dir);
  // Starts the spare if there is none.
  void Refill();

 private:
  std::string exe_;
  bool spares_;          // exe_ is drover-supervise
  pid_t spare_ = -1;     // -1: none
  int spare_input_ = -1;  // the write end of the spare's standard input
};

}  // namespace drover::agent
