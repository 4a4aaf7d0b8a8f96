#pragma once
// Child processes of the roles that run other programs: `up --ha` (etcd
// members and servers) and `up --monitoring` (Prometheus, Alertmanager, the
// node exporter).
//
// Thread-safety: plain functions; a child started by a thread is killed
// when that thread ends (PR_SET_PDEATHSIG), so start children on a thread
// that outlives them.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace drover::app {

// fork + exec of `argv` (argv[0] an absolute path) with the signals main()
// blocked unblocked again, output appended to `log`, in a process group of
// its own (a terminal's Ctrl-C reaches only the parent, which stops the
// children in order), and killed if the thread that started it ends.
// -1 when fork fails.
pid_t SpawnChild(const std::vector<std::string>& argv, const std::string& log);

// SIGTERM to every child of `pids` (those > 0), then up to `grace` for them
// all to exit, then SIGKILL to those left; each is reaped and set to -1.
void StopChildren(std::vector<pid_t*> pids, std::chrono::milliseconds grace);

}  // namespace drover::app
