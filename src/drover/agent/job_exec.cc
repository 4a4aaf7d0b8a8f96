#include "drover/agent/job_exec.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "drover/agent/seccomp_profile.h"

namespace drover::agent {

void FailChild(int report, ChildError::Step step) {
  ChildError e{step, errno};
  ssize_t n = ::write(report, &e, sizeof e);
  (void)n;  // nobody to tell: the exit says it failed
  ::_exit(127);
}

void JoinCgroup(int report, const char* procs) {
  // "0": the writing process. From here on all the job runs is in the group.
  int fd = ::open(procs, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, "0", 1) != 1) FailChild(report, ChildError::kJoinCgroup);
  ::close(fd);
}

namespace {

// Becomes `u` for good: no supplementary groups, the capability bounding
// set emptied (so no exec regains one), then the ids (which clears the
// permitted, effective and ambient sets), then no_new_privs (no setuid or
// file-capability program raises them again). Raw system calls: glibc's
// wrappers would try to change every thread of a vfork child's parent.
bool BecomeUser(const ExecUser& u) {
  if (::syscall(SYS_setgroups, 0, nullptr) != 0) return false;
  if (::syscall(SYS_setresgid, u.gid, u.gid, u.gid) != 0) return false;
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return false;
  }
  if (::syscall(SYS_setresuid, u.uid, u.uid, u.uid) != 0) return false;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0 || errno == EINVAL;
}

// A mount namespace of this process's own, in which nothing it mounts
// reaches the node's (slave: the node's later mounts still show), and the
// container's root in it. Layers are untrusted: nodev and nosuid make a
// device node or a setuid file in one inert. Relative lower layers (short
// names, so that many fit in a mount's options) are found from lower_dir.
bool MountOverlay(const ExecOverlay& o) {
  if (::unshare(CLONE_NEWNS) != 0) return false;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return false;
  if (*o.lower_dir != '\0' && ::chdir(o.lower_dir) != 0) return false;
  return ::mount("overlay", o.target, "overlay", MS_NODEV | MS_NOSUID, o.options) == 0;
}

}  // namespace

void ExecJob(const ExecArgs& a, const char* join) {
  if (join != nullptr) JoinCgroup(a.report, join);
  if (a.pin && ::sched_setaffinity(0, sizeof(*a.cpus), a.cpus) != 0) FailChild(a.report, ChildError::kPin);
  // The job leads its own process group.
  if (a.own_group && ::setpgid(0, 0) != 0) FailChild(a.report, ChildError::kProcessGroup);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE}) ::signal(sig, SIG_DFL);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  if (::dup2(a.null_fd, 0) < 0 || ::dup2(a.log_fd, 1) < 0 || ::dup2(a.log_fd, 2) < 0) {
    FailChild(a.report, ChildError::kStdio);
  }
  // The job's own files get the usual umask, not the 077 the agent makes
  // its state with (docs/security.md, "Files"), as container runtimes give.
  ::umask(022);
  if (a.user != nullptr && !BecomeUser(*a.user)) FailChild(a.report, ChildError::kUser);
  if (a.overlay != nullptr && !MountOverlay(*a.overlay)) FailChild(a.report, ChildError::kContainerRoot);
  if (::chdir(a.work) != 0) FailChild(a.report, ChildError::kChdir);
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);  // nothing of the supervisor's leaks into the job
  // Last: the filter holds for the exec and everything after it.
  if (a.seccomp != nullptr && !LoadSeccomp(*a.seccomp)) FailChild(a.report, ChildError::kSeccomp);
  ::execvpe(a.argv[0], a.argv, a.envp);
  FailChild(a.report, ChildError::kExec);
}

std::string DescribeChildError(const ChildError& e, const std::string& cgroup_dir, const std::string& cpus,
                               const std::string& work) {
  const char* why = std::strerror(e.error);
  switch (e.step) {
    case ChildError::kJoinCgroup: return fmt::format("cannot join its cgroup '{}': {}", cgroup_dir, why);
    case ChildError::kPin: return fmt::format("cannot pin it to CPUs {}: {}", cpus, why);
    case ChildError::kChdir: return fmt::format("cannot enter its working directory '{}': {}", work, why);
    case ChildError::kExec: return why;
    case ChildError::kSandbox: return fmt::format("cannot set up its sandbox: {}", why);
    case ChildError::kUser: return fmt::format("cannot drop to its user: {}", why);
    case ChildError::kSeccomp: return fmt::format("cannot load its system-call filter (seccomp): {}", why);
    case ChildError::kContainerRoot: return fmt::format("cannot mount its container's root file system: {}", why);
    default: return fmt::format("cannot set up its process: {}", why);
  }
}

}  // namespace drover::agent
