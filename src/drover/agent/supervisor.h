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

#include <map>
#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::agent {

// The supervisor's main; returns the supervisor's exit code. With a
// `started_fd` (a pooled supervisor's socket), writes "started\n" there
// once the job's start is on record (started.json), so that its agent
// reports it running at once.
int RunSupervisor(const std::string& job_dir, int started_fd = -1);

// Spawns `exe supervise --dir job_dir` in a new session (posix_spawn, no
// code runs between fork and exec) and returns its pid. `exe` is either
// program: drover-supervise accepts (and ignores) the `supervise` verb, so
// the argv, which SupervisorAlive checks, is the same for both.
Result<pid_t> SpawnSupervisor(const std::string& exe, const std::string& job_dir);

// True when `pid` is alive and is the supervisor of `job_dir` (guards against
// a reused pid). A supervisor that began as a pool's spare is recognised by
// its working directory, which it moves to the job's when handed one.
bool SupervisorAlive(pid_t pid, const std::string& job_dir);

// A pooled supervisor's main (`drover-supervise supervise --spare`), its
// socket on standard input: see SupervisorPool.
int RunSpareSupervisor();

// SupervisorPool: supervisor processes started ahead of need and kept
// between jobs, so that starting a job's supervisor costs a write instead
// of a process start and an exec, and in steady state no supervisor is
// started at all (on the 2-core development VM a process start is ~2 ms,
// and a task of a job array used to be two of them).
//
// A pooled supervisor (`drover-supervise supervise --spare`) reads a job
// directory and a newline from its socket, runs RunSupervisor for it with
// its stderr in the directory's supervisor.log (as a spawned supervisor has
// it), says "started\n" once the job's start is on record, goes back to "/"
// and answers "done\n" once exit.json is written (synced after the answer);
// then it waits for the
// next directory. At the end of its input (the pool or its
// agent went away) it exits: at once when idle, after its job when busy.
//
// The owner watches the descriptor Launch returns: readable once the
// supervisor spoke or ended; then Hear says what (watch again after
// kStarted or kNothing), and once it is not those the job's end is in
// exit.json either way. A supervisor the pool lets go (kRetired, kGone)
// is the caller's child to reap, as one from SpawnSupervisor.
//
// Launch with no idle supervisor starts a new pooled one for the job (so a
// burst of jobs leaves as many to reuse, up to the idle limit); the owner
// calls Refill once the job has had its start, for the next job (a spare
// spawned at once took a core from the job it had just handed over: ~2 ms
// of a `submit --wait`).
// What Launch returns is used exactly like SpawnSupervisor's pid: a child of
// this process in a session of its own, re-adopted by SupervisorAlive
// (which knows a pooled one by its working directory).
//
// Only drover-supervise has the spare mode; for any other `exe` (drover
// itself), or when a pooled one cannot be started, Launch is
// SpawnSupervisor.
//
// Not thread-safe: owned by the agent's loop. posix_spawn only, so it is
// safe in a threaded process.
class SupervisorPool {
 public:
  // Keeps at most `max_idle` supervisors waiting (1 at least).
  explicit SupervisorPool(std::string exe, size_t max_idle = 8);
  ~SupervisorPool();
  SupervisorPool(const SupervisorPool&) = delete;
  SupervisorPool& operator=(const SupervisorPool&) = delete;

  struct Launched {
    pid_t pid = -1;
    int done_fd = -1;  // a pooled supervisor's socket (the pool's), or -1 for a spawned one
  };
  // The supervisor of `job_dir`, started (a relative `job_dir` is taken
  // from this process's working directory, as SpawnSupervisor's is).
  Result<Launched> Launch(const std::string& job_dir);

  enum class Heard {
    kNothing,  // nothing to read yet: watch again
    kStarted,  // the job's start is on record (started.json); watch again for its end
    kDone,     // the job ended; the supervisor waits for the next one
    kRetired,  // the job ended; the supervisor exits (enough are idle)
    kGone,     // the supervisor ended (killed, or it could not record the end)
  };
  // What the pooled supervisor `pid` (a Launched with a done_fd) said.
  Heard Hear(pid_t pid);

  // Starts a spare if none is idle.
  void Refill();

 private:
  bool SpawnIdle();  // one more idle supervisor
  struct Idle {
    pid_t pid;
    int fd;
  };
  std::string exe_;
  bool spares_;  // exe_ is drover-supervise
  size_t max_idle_;
  std::vector<Idle> idle_;
  struct Busy {
    int fd;
    std::string heard;  // what it said that is not yet a whole line
  };
  std::map<pid_t, Busy> busy_;  // pooled supervisors with a job
};

}  // namespace drover::agent
