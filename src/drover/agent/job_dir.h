#pragma once
// JobDir: the record of one workload on a node. It is what lets a job
// outlive its agent: the per-job supervisor writes how the job started and
// ended there, and a restarted agent reads it back instead of starting the
// job again. Its small state files live in memory (JobStateRoot below), the
// job's output on disk:
//
//   <state>/jobs/<job-id>/
//     spec.json        what to run (written by the agent before the spawn)
//     isolation.json   how to confine it: CPUs, cgroup (agent, before the
//                      spawn; absent: not confined)
//     supervisor.pid   the supervisor's pid (agent)
//     supervisor.log   what the supervisor itself had to say
//     started.json     {"pid", "start_unix_nanos"} (supervisor, after the spawn)
//     stop.json        {"sigterm_unix_nanos"} (agent, when it asked the job to stop)
//     exit.json        {"exit_code", "signal", "end_unix_nanos", "message",
//                       "failed_to_start"} (supervisor, when the job ended)
//   <agent-data>/jobs/<job-id>/   (spec.json's output_dir)
//     output.log       stdout and stderr of the job
//     work/            the default working directory
//
// Every JSON file is written to a temporary name and renamed, so a reader
// sees it whole or not at all. The state goes with a reboot, as the job's
// processes do; the agent then finds the job's output directory without its
// state and reports the job as ended by the restart.

#include <sys/types.h>

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "drover/agent/cgroup.h"
#include "drover/agent/sandbox.h"
#include "drover/common/files.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"

namespace drover::agent {

// A container workload's run (oci_bundle.h, docs/containers.md): the
// supervisor mounts the overlay (`lower` the image's layers, read-only, as
// overlay's lowerdir, relative to `lower_dir`; `upper` and `work` the job's
// writable layer) at <bundle>/rootfs in a
// mount namespace of the runtime's own, then runs
// `<runtime> --root <root> run --bundle <bundle> <id>` as the job's process;
// once it ends, `<runtime> --root <root> delete --force <id>`.
struct ContainerRun {
  std::string runtime;
  std::string root;
  std::string id;
  std::string bundle;
  std::string lower_dir, lower, upper, work;
  std::string image;   // the reference, for what the agent reports
  std::string digest;  // the image's manifest digest
};

struct JobSpecFile {
  std::string job_id;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;  // the job's whole environment (see job_env.h)
  std::string working_dir;
  int grace_seconds = 10;
  // The node's lease file (NodeLease below); empty: the job is never fenced
  // (agents that share the server's process, `drover up`).
  std::string lease_file;
  // Where output.log and the default work/ go; empty: the job directory.
  std::string output_dir;
  // Set for a container workload: `command` is then what runs inside it.
  std::optional<ContainerRun> container;
};

// Where this node keeps the state directories of its jobs, for the agent
// whose data directory is `data_dir`: in memory, where creating and removing
// a few small files per job costs microseconds instead of an ext4 inode
// search each (docs/performance.md). /run/drover/<id> for root where /run is
// a tmpfs, else /dev/shm/drover-<uid>/<id> (made 0700, refused unless it is
// a directory of ours that nobody else may write), else <data_dir>/run; <id>
// names `data_dir` (and the root names it in `owner`), so a restarted agent
// finds its jobs again.
std::string JobStateRoot(const std::string& data_dir, const std::vector<std::string>& bases);
std::string JobStateRoot(const std::string& data_dir);
// The shared places JobStateRoot tries, in this order.
std::vector<std::string> JobStateBases();
// Removes the roots in `bases`, but `keep`, whose data directory no longer
// exists (a test's, an agent killed before it could clean up): their state
// is nobody's. Once per agent process, at start (with a thousand simulated
// nodes in one process, once per node would read every root a thousand
// times).
void SweepJobStateRoots(const std::string& keep, const std::vector<std::string>& bases = JobStateBases());

// The node's lease as its agent last had it acknowledged, for the job
// supervisors: once `fence_at` (CLOCK_MONOTONIC ns, the same clock in every
// process of one boot) has passed, a supervisor stops its job (SIGTERM,
// then SIGKILL after `grace_ms`) even when the agent itself is hung or gone.
struct NodeLease {
  int64_t fence_at_mono_ns = 0;
  int64_t grace_ms = 0;
};
// Written atomically (rename) but not fsynced: a monotonic deadline means
// nothing after a reboot.
Status WriteNodeLease(const std::string& path, const NodeLease& lease);
// kNotFound when missing; kInvalidArgument when unreadable.
Result<NodeLease> ReadNodeLease(const std::string& path);

// How the supervisor confines the job before it runs it (docs/security.md,
// "Workload isolation").
struct JobIsolation {
  std::vector<int> cpus;              // its CPU affinity; empty: not pinned
  std::optional<JobCgroup> cgroup;    // its cgroup v2 group; none: no group
  std::optional<JobSandbox> sandbox;  // its namespaces and user (sandbox.h); none: the supervisor's
};

struct StartedFile {
  pid_t pid = 0;  // the job's process and process group
  int64_t start_unix_nanos = 0;
};

struct ExitFile {
  int exit_code = 0;  // -1 when killed by a signal
  int signal = 0;
  int64_t end_unix_nanos = 0;
  std::string message;
  bool failed_to_start = false;
  bool fenced = false;  // the supervisor stopped it: the node's lease ran out
};

// Directories made ahead of need, in `root`: on ext4 a directory or file
// made beside thousands just removed costs an inode search (60-250 µs each
// on this VM, docs/performance.md); renaming one made earlier costs none.
// Take() renames a spare to `target` (or makes `target` when none is left);
// Refill(), off the launch path, makes spares up to `count`, each filled by
// `fill` (its contents made ahead too). Spares are named `prefix`N; those a
// stopped agent left are taken first. Take and Refill may run on different
// threads; Take never waits for Refill (it makes the directory itself).
class SpareDirs {
 public:
  SpareDirs(std::string root, std::string prefix, int count, std::function<void(const std::string&)> fill = nullptr);
  // `target` is a directory afterwards (a spare, made, or already there:
  // left as it is), or the error says why not.
  std::error_code Take(const std::string& target);
  void Refill();

 private:
  std::string root_, prefix_;
  int count_;
  std::function<void(const std::string&)> fill_;
  Mutex mu_;
  std::vector<std::string> ready_ DROVER_GUARDED_BY(mu_);
  uint64_t next_ DROVER_GUARDED_BY(mu_) = 0;
};

class JobDir {
 public:
  explicit JobDir(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  std::string File(const char* name) const { return path_ + "/" + name; }
  // output.log and the default work/: in spec.output_dir, else here.
  std::string OutputDir(const JobSpecFile& spec) const { return spec.output_dir.empty() ? path_ : spec.output_dir; }

  Status WriteSpec(const JobSpecFile& spec) const;
  Result<JobSpecFile> ReadSpec() const;
  Status WriteIsolation(const JobIsolation& isolation) const;
  // Nothing when the file is absent; an error when it is unreadable (the
  // supervisor then does not start the job unconfined).
  Result<JobIsolation> ReadIsolation() const;
  Status WriteStarted(const StartedFile& s) const;
  std::optional<StartedFile> ReadStarted() const;
  // Durable unless `durable` is false: then SyncExit makes it so later.
  Status WriteExit(const ExitFile& e, bool durable = true) const;
  Status SyncExit() const;
  std::optional<ExitFile> ReadExit() const;
  Status WriteStop(int64_t sigterm_unix_nanos) const;
  std::optional<int64_t> ReadStop() const;
  Status WriteSupervisorPid(pid_t pid) const;
  std::optional<pid_t> ReadSupervisorPid() const;

 private:
  std::string path_;
};

}  // namespace drover::agent
