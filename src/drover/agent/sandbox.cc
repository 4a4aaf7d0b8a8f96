#include "drover/agent/sandbox.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "drover/common/hash.h"

namespace drover::agent {
namespace {

namespace fs = std::filesystem;

std::string Normal(const std::string& path) {
  std::string p = fs::path(path).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// `path` is `dir` or inside it.
bool Within(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

pid_t Clone3(uint64_t flags, int cgroup_fd) {
  clone_args args{};
  args.flags = flags;
  args.exit_signal = SIGCHLD;
  if (cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  // No CLONE_VM: the child runs on a copy of this process, as after fork.
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

// mkdir -p of `path` (absolute) with mode 0755; true when it is a directory.
bool MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string part = path.substr(0, i);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// The job's view of the file system, in its new mount namespace: nothing it
// does propagates back to the host; the hidden directories are empty and
// read-only but for its own, bound back; /proc is its PID namespace's.
bool EnterMounts(const JobSandbox& s) {
  // (The caller has made the namespaces.)
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return false;
  // Before anything covers the job's directories, where the file is.
  // (A machine without /etc/hosts has nothing to bind it over.)
  if (!s.hosts_file.empty() && ::mount(s.hosts_file.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0 &&
      errno != ENOENT) {
    return false;
  }
  std::set<std::string> files;
  for (const std::string& h : s.hide) {
    struct stat st {};
    if (::stat(h.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) files.insert(Normal(h));
  }
  // The kept directories, opened before anything covers them.
  std::vector<int> keep_fds;
  for (const std::string& k : s.keep) keep_fds.push_back(::open(k.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  for (const SandboxMount& m : PlanSandboxMounts(s, files)) {
    const char* target = m.target.c_str();
    switch (m.kind) {
      case SandboxMount::kTmpfs: {
        struct stat st {};
        if (::stat(target, &st) != 0) continue;  // nothing there to hide
        if (::mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k,nr_inodes=1024") != 0) {
          return false;
        }
        break;
      }
      case SandboxMount::kKeep: {
        int fd = keep_fds[m.keep];
        if (fd < 0) continue;  // it does not exist: nothing to keep
        if (!MakeDirs(m.target)) return false;
        std::string from = fmt::format("/proc/self/fd/{}", fd);
        if (::mount(from.c_str(), target, nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
        break;
      }
      case SandboxMount::kReadOnly: {
        struct stat st {};
        if (::stat(target, &st) != 0) continue;
        if (::mount(nullptr, target, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0) {
          return false;
        }
        break;
      }
      case SandboxMount::kNullFile:
        if (::mount("/dev/null", target, nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT) return false;
        break;
    }
  }
  for (int fd : keep_fds) {
    if (fd >= 0) ::close(fd);
  }
  // The namespace's own /proc: the host's processes are not there.
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) return false;
  // The kernel's knobs read-only (a bind of each over itself, without
  // what is mounted below it), its secrets gone, as runc does.
  for (const char* knob : {"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq"}) {
    if (::mount(knob, knob, nullptr, MS_BIND, nullptr) != 0) {
      if (errno == ENOENT) continue;
      return false;
    }
    if (::mount(nullptr, knob, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) !=
        0) {
      return false;
    }
  }
  for (const char* secret : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"}) {
    if (::mount("/dev/null", secret, nullptr, MS_BIND, nullptr) != 0 && errno != ENOENT) return false;
  }
  return true;
}

// The first process of the job's PID namespace: it makes the view, starts
// the job as its child and reaps whatever ends. Signals from outside that
// it has no handler for never reach it (the kernel's rule for a
// namespace's init), so a stop goes to the job alone (its process group is
// the init's); when the job ends, its status goes to `status_fd` and the
// init exits, which ends every process left in the namespace.
[[noreturn]] void RunInit(const JobSandbox& s, const char* join, const ExecArgs& a, int status_fd) {
  if (::setpgid(0, 0) != 0) FailChild(a.report, ChildError::kProcessGroup);
  if (join != nullptr) JoinCgroup(a.report, join);
  // The way to the job's own directories must be open to its user: not
  // the agent's 077.
  ::umask(022);
  if (!s.hostname.empty() && ::sethostname(s.hostname.data(), s.hostname.size()) != 0) {
    FailChild(a.report, ChildError::kSandbox);
  }
  if (!EnterMounts(s)) FailChild(a.report, ChildError::kSandbox);
  pid_t job = ::fork();
  if (job < 0) FailChild(a.report, ChildError::kSandbox);
  if (job == 0) {
    ExecArgs b = a;
    b.own_group = false;
    b.user = s.as_root ? nullptr : &s.user;
    ExecJob(b, nullptr);
  }
  // The init holds nothing of the supervisor's but the status pipe.
  if (status_fd > 0) ::close_range(0, static_cast<unsigned>(status_fd) - 1, 0);
  ::close_range(static_cast<unsigned>(status_fd) + 1, ~0U, 0);
  for (;;) {
    int status = 0;
    pid_t done = ::waitpid(-1, &status, 0);
    if (done == job) {
      ssize_t n = ::write(status_fd, &status, sizeof status);
      (void)n;  // nobody to tell: the init's own end says the job was lost
      ::_exit(0);
    }
    if (done < 0 && errno != EINTR) ::_exit(1);
  }
}

}  // namespace

bool PathWithin(const std::string& path, const std::string& dir) { return Within(Normal(path), Normal(dir)); }

uid_t SandboxUid(const SandboxPolicy& policy, const std::string& tenant) {
  return policy.uid_base + static_cast<uid_t>(Fnv1a64(tenant) % std::max<uint32_t>(policy.uid_count, 1));
}

JobSandbox MakeJobSandbox(const SandboxPolicy& policy, const std::string& tenant, std::vector<std::string> hide,
                          std::vector<std::string> keep, std::vector<std::string> own) {
  JobSandbox s;
  s.as_root = policy.root_tenants.contains(tenant);
  s.seccomp = policy.seccomp;
  const uid_t uid = SandboxUid(policy, tenant);
  s.user = ExecUser{uid, static_cast<gid_t>(uid)};
  hide.insert(hide.end(), policy.hide.begin(), policy.hide.end());
  // The supervisor works elsewhere: every path absolute, as this process sees it.
  for (auto* v : {&hide, &keep, &own}) {
    for (std::string& p : *v) p = Normal(fs::absolute(p).string());
  }
  if (!s.as_root) {
    for (const std::string& k : keep) {
      // The highest ancestor others may not enter.
      std::string top;
      for (fs::path p = fs::path(Normal(k)).parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
        struct stat st {};
        if (::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) top = p.string();
      }
      if (!top.empty()) hide.push_back(top);
    }
  }
  s.hide = std::move(hide);
  s.keep = std::move(keep);
  s.own = std::move(own);
  return s;
}

std::vector<SandboxMount> PlanSandboxMounts(const JobSandbox& s, const std::set<std::string>& files) {
  std::vector<std::string> hide;
  for (const std::string& h : s.hide) {
    if (!h.empty() && h[0] == '/') hide.push_back(Normal(h));
  }
  std::sort(hide.begin(), hide.end());
  hide.erase(std::unique(hide.begin(), hide.end()), hide.end());
  std::vector<std::string> keep;
  for (const std::string& k : s.keep) keep.push_back(Normal(k));
  std::vector<SandboxMount> out;
  std::vector<std::string> done;  // hidden directories so far
  for (const std::string& h : hide) {
    if (h == "/") continue;  // hiding everything hides the job's own program
    if (std::any_of(done.begin(), done.end(), [&](const std::string& d) { return Within(h, d); })) continue;
    // A hidden path inside a kept directory stays: the job's own is its own.
    if (std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return Within(h, k); })) continue;
    if (files.contains(h)) {
      out.push_back({SandboxMount::kNullFile, h, 0});
      continue;
    }
    done.push_back(h);
    out.push_back({SandboxMount::kTmpfs, h, 0});
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i] != h && Within(keep[i], h)) out.push_back({SandboxMount::kKeep, keep[i], i});
    }
    out.push_back({SandboxMount::kReadOnly, h, 0});
  }
  return out;
}

namespace {

std::string ProbeSandboxOnce() {
  if (::geteuid() != 0) return "the agent does not run as root: jobs run as its user, in its namespaces";
  pid_t pid = Clone3(CLONE_NEWNS | CLONE_NEWPID, -1);
  if (pid < 0) return fmt::format("cannot create mount and PID namespaces: {}", std::strerror(errno));
  if (pid == 0) ::_exit(::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) == 0 ? 0 : 1);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "cannot make a private mount namespace";
  return "";
}

}  // namespace

std::string ProbeSandbox() {
  // What the machine allows does not change while the process runs: probed
  // once, however many agents (simulated nodes) share it.
  static const std::string kProblem = ProbeSandboxOnce();
  return kProblem;
}

Status GiveOwnDirs(const JobSandbox& s) {
  if (s.as_root) return Status::Ok();
  for (const std::string& d : s.own) {
    if (::chown(d.c_str(), s.user.uid, s.user.gid) != 0 && errno != ENOENT) {
      return Unavailable(fmt::format("cannot give '{}' to uid {}: {}", d, s.user.uid, std::strerror(errno)));
    }
  }
  for (const std::string& d : s.enter) {
    struct stat st {};
    if (::stat(d.c_str(), &st) == 0 && ::chmod(d.c_str(), (st.st_mode & 07777) | S_IXOTH) != 0) {
      return Unavailable(fmt::format("cannot open the way through '{}': {}", d, std::strerror(errno)));
    }
  }
  return Status::Ok();
}

Result<pid_t> StartSandboxed(const JobSandbox& s, int cgroup_fd, const char* join, const ExecArgs& a, int status_fd) {
  DROVER_RETURN_IF_ERROR(GiveOwnDirs(s));
  const uint64_t flags = CLONE_NEWNS | CLONE_NEWPID | (s.hostname.empty() ? 0 : CLONE_NEWUTS);
  pid_t pid = Clone3(flags, cgroup_fd);
  const char* joining = cgroup_fd >= 0 ? nullptr : join;
  if (pid < 0 && cgroup_fd >= 0) {
    // No CLONE_INTO_CGROUP here: the init moves itself.
    pid = Clone3(flags, -1);
    joining = join;
  }
  if (pid == 0) RunInit(s, joining, a, status_fd);
  if (pid < 0) return Unavailable(fmt::format("cannot create its namespaces: {}", std::strerror(errno)));
  // Its process group exists before anyone may signal it (the init makes
  // it too; whichever comes first).
  ::setpgid(pid, pid);
  return pid;
}

}  // namespace drover::agent
