#pragma once
// The sandbox every workload runs in (docs/security.md, "The job
// sandbox"): its own mount namespace, in which the agent's and the
// server's data and state directories, other jobs' directories and the
// node's credentials do not exist (an empty read-only tmpfs over each, the
// job's own directories bound back at their paths); its own PID namespace
// (it sees and signals only its own processes; a small init, the first
// process of the namespace, reaps them and takes them all down when the
// job's process ends); and, unless its tenant may run as root, a user of
// its tenant (a uid from the operator's range, the same on every node) with
// no supplementary groups, no capabilities in any set and no_new_privs;
// and a system-call filter (seccomp_profile.h). /proc/sys and the kernel's
// other knobs under /proc are read-only in it, as runc makes them.
//
// The agent decides what a job's sandbox is (MakeJobSandbox, from its
// SandboxPolicy) and writes it to isolation.json; the supervisor applies
// it (StartSandboxed) between the job's birth and its exec.

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "drover/agent/job_exec.h"
#include "drover/common/status.h"

namespace drover::agent {

// How an agent sandboxes its jobs (flags --sandbox, --sandbox-uid-base,
// --sandbox-uid-count, --root-tenants, --sandbox-hide).
struct SandboxPolicy {
  bool enabled = true;
  // A tenant's jobs run as uid = gid = uid_base + Fnv1a64(tenant) % uid_count.
  uid_t uid_base = 2'000'000'000;
  uint32_t uid_count = 1'000'000;
  // Tenants whose jobs run as root (still in their namespaces).
  std::set<std::string> root_tenants = {"default"};
  // Filter jobs' system calls (--sandbox-seccomp; seccomp_profile.h).
  bool seccomp = true;
  // What no job sees (with the agent's data and state directories, which
  // the agent adds): the server's data directory, credential files.
  std::vector<std::string> hide;
};

// What the supervisor does for one job.
struct JobSandbox {
  bool as_root = false;    // its tenant may run as root: `user` is unused
  bool namespaces = true;  // its mount and PID namespaces; false: only its user (the machine cannot)
  bool seccomp = true;     // its system-call filter (the root profile when as_root)
  ExecUser user{0, 0};
  // Directories replaced by an empty read-only tmpfs (a file: by /dev/null).
  std::vector<std::string> hide;
  // Directories under hidden ones that the job keeps, at the same paths.
  std::vector<std::string> keep;
  // Directories given to the job's user before it starts (its work and
  // checkpoint directories).
  std::vector<std::string> own;
  // Directories others may enter (mode o+x) so that the job reaches one of
  // its own inside.
  std::vector<std::string> enter;
  // The launch contract's names (docs/distributed.md): a file bound over
  // /etc/hosts (every replica's node name resolves to its address), and a
  // UTS namespace of its own whose host name is the node's name (what
  // torchrun's rendezvous tells the peers). Empty: the machine's.
  std::string hosts_file;
  std::string hostname;
};

// `path` is `dir` or inside it (lexically).
bool PathWithin(const std::string& path, const std::string& dir);

// The uid of `tenant`'s jobs under `policy`.
uid_t SandboxUid(const SandboxPolicy& policy, const std::string& tenant);

// The sandbox of a job of `tenant` that keeps `keep` and owns `own`. For a
// job that does not run as root, the highest directory above each kept one
// that others may not enter (a 0700 home) is hidden too: the job could not
// reach its own directories through it otherwise, and has no business there.
JobSandbox MakeJobSandbox(const SandboxPolicy& policy, const std::string& tenant, std::vector<std::string> hide,
                          std::vector<std::string> keep, std::vector<std::string> own);

// One step of making the job's view of the file system.
struct SandboxMount {
  enum Kind { kTmpfs, kKeep, kReadOnly, kNullFile } kind;
  std::string target;
  size_t keep = 0;  // kKeep: the index into JobSandbox::keep bound at `target`
};
// The steps for `s`, in order (pure; the supervisor checks which hidden
// paths are files): each hidden directory once (not one inside another),
// its kept directories bound back, then it turns read-only.
std::vector<SandboxMount> PlanSandboxMounts(const JobSandbox& s, const std::set<std::string>& files = {});

// Whether this machine can sandbox (namespaces, running as root): empty, or
// why not. Safe in a threaded process.
std::string ProbeSandbox();

// Gives the job's own directories to its user (unless it runs as root).
Status GiveOwnDirs(const JobSandbox& s);

// Starts the job of `a` in the sandbox `s`: the sandbox's init is born in
// the cgroup `cgroup_fd` (-1: none; `join` names its cgroup.procs when
// clone3 cannot) and leads the job's process group; the job is its child.
// Answers the init's pid; when the job ends, the init writes its wait
// status (an int) to `status_fd` and exits. What failed before the job's
// exec comes on `a.report`, as for a plain start.
Result<pid_t> StartSandboxed(const JobSandbox& s, int cgroup_fd, const char* join, const ExecArgs& a, int status_fd);

}  // namespace drover::agent
