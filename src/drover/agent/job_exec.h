#pragma once
// The last steps of a job's process before its exec, shared by the
// supervisor's plain start (supervisor.cc) and the sandboxed one
// (sandbox.cc): what it must do, and how it says what it could not do.
// Only system calls (no allocation, no library state): it runs in a vfork
// child too, on the supervisor's memory.

#include <sched.h>
#include <sys/types.h>

#include <string>

#include "drover/common/status.h"

namespace drover::agent {

struct SeccompFilter;  // seccomp_profile.h

// What the job's process could not do before exec, and the errno; written
// to ExecArgs::report (a close-on-exec pipe: end of file means it ran).
struct ChildError {
  enum Step : int {
    kJoinCgroup = 1,
    kPin,
    kProcessGroup,
    kStdio,
    kChdir,
    kExec,
    kSandbox,
    kUser,
    kSeccomp,
    kContainerRoot
  } step;
  int error;
};

// The user a sandboxed job runs as (sandbox.h): no supplementary groups,
// no capabilities in any set (the bounding set emptied), no_new_privs.
struct ExecUser {
  uid_t uid;
  gid_t gid;
};

// A container's root file system (job_dir.h, ContainerRun): an overlay
// mounted at `target` in a mount namespace of the process's own, which the
// runtime it execs inherits; gone with the namespace when the runtime and
// the container have ended.
struct ExecOverlay {
  const char* target;
  const char* options;    // "lowerdir=...,upperdir=...,workdir=..."
  const char* lower_dir;  // what relative lowerdirs are relative to; "" none
};

// What the job's process needs between its birth and exec.
struct ExecArgs {
  int report;  // where a ChildError goes
  bool pin;
  const cpu_set_t* cpus;
  int null_fd;
  int log_fd;
  const char* work;
  char* const* argv;
  char* const* envp;
  bool own_group = true;                   // lead a process group of its own (else stay in the parent's)
  const ExecUser* user = nullptr;          // become this user first; null: stay as the supervisor is
  const SeccompFilter* seccomp = nullptr;  // loaded last, just before the exec; null: none
  const ExecOverlay* overlay = nullptr;    // mounted before the chdir; null: none
};

// Everything the job's process does between its birth and exec, then exec:
// join the group whose cgroup.procs is `join` (when not born in it), pin,
// lead its own process group, default signals, stdio, become its user,
// chdir (as that user), load its system-call filter. Leaves by exec, or by _exit(127) after writing a
// ChildError to `a.report`.
[[noreturn]] void ExecJob(const ExecArgs& a, const char* join);

// Reports `step` and `errno` on `report` and ends the process (127).
[[noreturn]] void FailChild(int report, ChildError::Step step);

// Moves this process into the cgroup whose cgroup.procs is `procs`, or
// fails the child (kJoinCgroup).
void JoinCgroup(int report, const char* procs);

// Why the job did not start, said for exit.json; `cgroup_dir`, `cpus` and
// `work` name what the step was about.
std::string DescribeChildError(const ChildError& e, const std::string& cgroup_dir, const std::string& cpus,
                               const std::string& work);

}  // namespace drover::agent
