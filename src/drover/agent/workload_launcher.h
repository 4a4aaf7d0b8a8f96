#pragma once
// WorkloadLauncher: how the workload runner (workload_runner.h) starts a
// workload whose job directory it has written (spec.json, isolation.json,
// and for a service service.json). The runner decides what runs and
// watches how it ends; a launcher only starts it, in a process that owns
// the workload and records its start and end in the job directory
// (started.json, exit.json: job_dir.h), and keeps running when the agent
// dies, so that a restarted agent adopts it.
//
// Today's one implementation runs each workload under a per-job supervisor
// process (SupervisorLauncher: supervisor.h, a pooled spare when there is
// one). A container runtime (OCI: the supervisor's role taken by a shim
// that runs the bundle) is another implementation of this interface, and
// a multi-node launch (a gang's replicas meeting at a rendezvous) is a
// launcher that wraps one of these and adds its contract to the job's
// environment before the spec is written.
//
// Not thread-safe: owned by the workload runner, used on the agent's loop.

#include <sys/types.h>

#include <memory>
#include <string>

#include "drover/agent/supervisor.h"
#include "drover/common/status.h"

namespace drover::agent {

class WorkloadLauncher {
 public:
  struct Launched {
    pid_t pid = -1;    // the owning process: a child of the agent, to be reaped
    int done_fd = -1;  // readable when it has news (a pooled supervisor), or -1: watch its pid
  };
  // What a launched process with a done_fd said (SupervisorPool::Heard).
  using Heard = SupervisorPool::Heard;

  virtual ~WorkloadLauncher() = default;
  // Starts the workload of `job_dir`.
  virtual Result<Launched> Launch(const std::string& job_dir) = 0;
  // What the process `pid` (launched with a done_fd) has to say.
  virtual Heard Hear(pid_t pid) = 0;
  // Gets ready for the next launch (a spare), after the last one has had
  // its start.
  virtual void Refill() = 0;
};

// Workloads under drover's per-job supervisor (`exe supervise --dir D`):
// from a pool keeping a spare waiting when `spare` (drover-supervise only),
// else spawned one per workload.
std::unique_ptr<WorkloadLauncher> MakeSupervisorLauncher(const std::string& exe, bool spare);

}  // namespace drover::agent
