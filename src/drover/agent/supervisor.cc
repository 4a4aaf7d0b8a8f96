#include "drover/agent/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/agent/cgroup.h"
#include "drover/agent/devices/topology/host_topology.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/job_exec.h"
#include "drover/agent/sandbox.h"
#include "drover/agent/seccomp_profile.h"
#include "drover/common/quantity.h"

extern char** environ;

namespace drover::agent {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The job's environment is the spec's, whole: the agent built it (clean,
// see job_env.h); nothing of the supervisor's own environment is added.
std::vector<std::string> BuildEnv(const JobSpecFile& spec) {
  std::vector<std::string> out;
  for (const auto& [k, v] : spec.env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// clone3(CLONE_INTO_CGROUP): a child born in the group `cgroup_fd` that
// runs ExecJob(`a`, not joining). On x86-64 it is vfork's: it borrows the
// supervisor's memory (CLONE_VM) on a stack of its own while the
// supervisor waits for its exec or exit (CLONE_VFORK); it starts in
// assembly, since C cannot go on from a system call that switched stacks.
// Elsewhere the child gets a copy of the supervisor's memory as fork gives
// it (the supervisor maps about 2 MB; the copy cost about 0.3 ms more from
// start to exit in bench/spawn_bench). -1 with errno on failure.
pid_t CloneIntoCgroup(int cgroup_fd, const ExecArgs& a) {
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgroup_fd);
#if defined(__x86_64__)
  // One child at a time, from a single-threaded process: one stack does.
  alignas(64) static char stack[64 * 1024];
  args.flags |= CLONE_VM | CLONE_VFORK;
  args.stack = reinterpret_cast<uint64_t>(stack);
  args.stack_size = sizeof stack;
  void (*entry)(const ExecArgs*) = [](const ExecArgs* x) { ExecJob(*x, nullptr); };
  long ret = SYS_clone3;
  register void (*fn)(const ExecArgs*) asm("r12") = entry;
  register const ExecArgs* arg asm("r13") = &a;
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      // The child, on `stack` (16-byte aligned: the call makes the frame
      // the ABI expects). ExecJob execs or exits; were it to return, exit.
      "xorl %%ebp, %%ebp\n\t"
      "movq %%r13, %%rdi\n\t"
      "callq *%%r12\n\t"
      "movl $127, %%edi\n\t"
      "movl $60, %%eax\n\t"  // SYS_exit
      "syscall\n\t"
      "hlt\n"
      "1:"
      : "+a"(ret)
      : "D"(&args), "S"(sizeof args), "r"(fn), "r"(arg)
      : "rcx", "r11", "memory", "cc");
  if (ret < 0) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return static_cast<pid_t>(ret);
#else
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (pid == 0) ExecJob(a, nullptr);
  return pid;
#endif
}

// Starts the job: create its process in its cgroup, confine, exec. The
// supervisor is single-threaded (a fresh exec of the binary that starts no
// threads), so unlike the agent it may do more between fork and exec than
// posix_spawn offers.
//
// A job with a cgroup is born in it (clone3 with CLONE_INTO_CGROUP), so that
// nothing the job runs escapes its limits. Moving a process into a group
// instead (writing cgroup.procs) takes the kernel's cgroup_threadgroup_rwsem
// for writing, which waits for an RCU grace period unless another move
// happened just before: on the development VM that write took 10 ms of
// every job start when jobs came 0.1 s apart and almost nothing back to
// back (docs/performance.md). Only where clone3 cannot do that does the
// child still move itself.
//
// A job without a cgroup starts with vfork: the child borrows the
// supervisor's memory until it execs instead of copying its page tables
// (as CloneIntoCgroup's does on x86-64).
// How the exec went comes back on a close-on-exec pipe: end of file means
// the job runs.
Result<pid_t> StartJob(const JobIsolation& iso, const std::string& log, const std::string& work,
                       std::vector<char*>& argv, std::vector<char*>& envp, int status_fd, const ExecOverlay* overlay) {
  // Without namespaces the job still runs as its tenant's user (its own
  // directories first); StartSandboxed gives them itself.
  const bool plain_user = iso.sandbox && !iso.sandbox->namespaces && !iso.sandbox->as_root;
  const SeccompFilter* filter = nullptr;
  if (iso.sandbox && iso.sandbox->seccomp) {
    auto profile = SeccompProfile(iso.sandbox->as_root);
    if (!profile.ok()) return Unavailable("cannot build its system-call filter: " + profile.status().message());
    filter = *profile;
  }
  if (plain_user) DROVER_RETURN_IF_ERROR(GiveOwnDirs(*iso.sandbox));
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int pipe_fds[2] = {-1, -1};
  if (null_fd < 0 || log_fd < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    int err = errno;
    for (int fd : {null_fd, log_fd}) {
      if (fd >= 0) ::close(fd);
    }
    return Unavailable(fmt::format("cannot open its output '{}': {}", log, std::strerror(err)));
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : iso.cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &cpus);
  }
  ExecArgs exec{pipe_fds[1], !iso.cpus.empty(), &cpus, null_fd, log_fd, work.c_str(), argv.data(), envp.data()};
  pid_t pid = -1;
  int fork_error = 0;
  std::string problem;
  const std::string procs = iso.cgroup ? iso.cgroup->dir + "/cgroup.procs" : "";
  if (plain_user) exec.user = &iso.sandbox->user;
  exec.seccomp = filter;
  exec.overlay = overlay;
  if (iso.sandbox && iso.sandbox->namespaces) {
    int group_fd = iso.cgroup ? ::open(iso.cgroup->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    auto started = StartSandboxed(*iso.sandbox, group_fd, iso.cgroup ? procs.c_str() : nullptr, exec, status_fd);
    if (group_fd >= 0) ::close(group_fd);
    if (started.ok()) {
      pid = *started;
    } else {
      problem = started.status().message();
    }
  } else if (!iso.cgroup) {
    pid = ::vfork();
    if (pid == 0) ExecJob(exec, nullptr);
    fork_error = errno;
  } else {
    int group_fd = ::open(iso.cgroup->dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (group_fd >= 0) {
      pid = CloneIntoCgroup(group_fd, exec);
      ::close(group_fd);
    }
    if (pid < 0) {
      // No clone3 with CLONE_INTO_CGROUP (a kernel older than 5.7, a
      // seccomp filter that refuses clone3) or no such group: the vfork
      // child moves itself, and says why it could not.
      pid = ::vfork();
      if (pid == 0) ExecJob(exec, procs.c_str());
      fork_error = errno;
    }
  }
  ::close(pipe_fds[1]);
  ::close(null_fd);
  ::close(log_fd);
  if (pid < 0) {
    ::close(pipe_fds[0]);
    if (!problem.empty()) return Unavailable(problem);
    return Unavailable(fmt::format("cannot create its process: {}", std::strerror(fork_error)));
  }
  ChildError e{};
  ssize_t n = 0;
  do {
    n = ::read(pipe_fds[0], &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fds[0]);
  if (n <= 0) return pid;
  ::waitpid(pid, nullptr, 0);
  return Unavailable(DescribeChildError(e, iso.cgroup ? iso.cgroup->dir : "", FormatCpuList(iso.cpus), work));
}

// How the supervisor starts a container (job_dir.h, ContainerRun): the
// runtime's argv, and the overlay mounted for it.
struct ContainerStart {
  std::vector<std::string> argv;
  std::string target, options, lower_dir;
};
ContainerStart ContainerStartOf(const JobSpecFile& spec) {
  if (!spec.container) return {};
  const ContainerRun& c = *spec.container;
  return {{c.runtime, "--root", c.root, "run", "--bundle", c.bundle, c.id},
          c.bundle + "/rootfs",
          fmt::format("lowerdir={},upperdir={},workdir={}", c.lower, c.upper, c.work), c.lower_dir};
}

// `runtime delete --force id` once the job ended: the runtime's record, and
// whatever of the container outlived the runtime's own process (killed after
// its grace). Waited for: a few milliseconds, bounded by the runtime itself.
void DeleteContainer(const ContainerRun& c) {
  std::vector<std::string> args = {c.runtime, "--root", c.root, "delete", "--force", c.id};
  std::vector<char*> argv = Pointers(args);
  pid_t pid = ::vfork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd >= 0) {
      ::dup2(null_fd, 0);
      ::dup2(null_fd, 1);
    }
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  if (pid > 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

// How often a supervisor with a lease file looks at it.
constexpr long kLeaseCheckNs = 50'000'000;

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int RunSupervisor(const std::string& dir, int started_fd) {
  JobDir job(dir);
  auto spec = job.ReadSpec();
  if (!spec.ok()) {
    job.WriteExit(ExitFile{127, 0, NowNanos(), spec.status().message(), true})
        .IgnoreError("if it fails, the agent reports a supervisor that died without an exit");
    return 1;
  }
  const int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};
  sigset_t waitset;
  sigemptyset(&waitset);
  for (int s : kForwarded) sigaddset(&waitset, s);
  sigaddset(&waitset, SIGCHLD);
  sigprocmask(SIG_BLOCK, &waitset, nullptr);

  const std::string out = job.OutputDir(*spec);
  std::string log = out + "/output.log";
  std::string work = spec->working_dir.empty() ? out + "/work" : spec->working_dir;
  if (spec->working_dir.empty()) ::mkdir(work.c_str(), 0755);
  // The job could not start: said in its output and in exit.json.
  auto not_started = [&](std::string_view why) {
    std::string message = fmt::format("cannot start '{}': {}", spec->command[0], why);
    std::ofstream(log, std::ios::app) << "drover: " << message << "\n";
    job.WriteExit(ExitFile{127, 0, NowNanos(), message, true})
        .IgnoreError("if it fails, the agent reports a supervisor that died without an exit");
    return 0;
  };
  struct stat st {};
  if (::stat(work.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return not_started(fmt::format("working directory '{}' does not exist", work));
  }

  auto isolation = job.ReadIsolation();
  if (!isolation.ok()) return not_started(isolation.status().message());
  // A container: confined by its runtime (config.json), which runs here.
  const ContainerStart run = ContainerStartOf(*spec);
  if (spec->container) {
    isolation->sandbox.reset();
    work = spec->container->bundle;
  }
  const std::optional<JobCgroup>& group = isolation->cgroup;
  if (group) {
    if (Status s = CreateJobCgroup(*group); !s.ok()) {
      RemoveJobCgroup(group->dir, group->parent, std::chrono::seconds(2));
      return not_started(s.message());
    }
  }

  std::vector<std::string> argv_s = spec->container ? run.argv : spec->command;
  std::vector<std::string> env_s = BuildEnv(*spec);
  std::vector<char*> argv = Pointers(argv_s);
  std::vector<char*> envp = Pointers(env_s);
  // A sandboxed job's status comes from its init (sandbox.h).
  int status_fds[2] = {-1, -1};
  if (isolation->sandbox && isolation->sandbox->namespaces && ::pipe2(status_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    if (group) RemoveJobCgroup(group->dir, group->parent, std::chrono::seconds(2));
    return not_started(fmt::format("cannot make a pipe: {}", std::strerror(errno)));
  }
  int64_t start = NowNanos();
  const ExecOverlay overlay{run.target.c_str(), run.options.c_str(), run.lower_dir.c_str()};
  auto child = StartJob(*isolation, log, work, argv, envp, status_fds[1], spec->container ? &overlay : nullptr);
  if (status_fds[1] >= 0) ::close(status_fds[1]);
  if (!child.ok()) {
    if (status_fds[0] >= 0) ::close(status_fds[0]);
    if (group) RemoveJobCgroup(group->dir, group->parent, std::chrono::seconds(2));
    return not_started(child.status().message());
  }
  if (Status w = job.WriteStarted(StartedFile{*child, start}); !w.ok()) {
    // Nobody could stop a job whose process group is not on record: it
    // does not run at all.
    ::kill(-*child, SIGKILL);
    ::waitpid(*child, nullptr, 0);
    if (group) RemoveJobCgroup(group->dir, group->parent, std::chrono::seconds(2));
    return not_started(fmt::format("could not record its start: {}", w.message()));
  }
  // Nobody to tell (its agent went away): the job runs on, as it would.
  if (started_fd >= 0) (void)::send(started_fd, "started\n", 8, MSG_NOSIGNAL);

  int status = 0;
  // Fencing (docs/failures.md): the job stops once the lease file's lease ran out, whatever the agent does.
  std::optional<int64_t> fenced_at;  // monotonic ns of the fence's SIGTERM
  std::string fence_reason;
  for (;;) {
    pid_t done = ::waitpid(*child, &status, WNOHANG);
    if (done == *child) break;
    if (done < 0 && errno != EINTR) {
      ExitFile lost{-1, 0, NowNanos(), fmt::format("lost track of the job: waitpid: {}", std::strerror(errno)), false};
      return job.WriteExit(lost).ok() ? 0 : 1;
    }
    siginfo_t info;
    int sig = 0;
    if (spec->lease_file.empty()) {
      sig = sigwaitinfo(&waitset, &info);
    } else {
      struct timespec wait {
        0, kLeaseCheckNs
      };
      sig = sigtimedwait(&waitset, &info, &wait);
      int64_t now = MonotonicNanos();
      auto lease = ReadNodeLease(spec->lease_file);
      if (!fenced_at && (!lease.ok() || now >= lease->fence_at_mono_ns)) {
        fence_reason = lease.ok() ? "fenced: the node had no acknowledged contact with the control plane"
                                  : "fenced: " + lease.status().message();
        (void)::write(2, (fence_reason + "\n").data(), fence_reason.size() + 1);
        ::kill(-*child, SIGTERM);
        fenced_at = now;
      } else if (fenced_at && now - *fenced_at >= (lease.ok() ? lease->grace_ms : 0) * 1'000'000) {
        ::kill(-*child, SIGKILL);
      }
    }
    if (sig > 0 && sig != SIGCHLD) ::kill(-*child, sig);
  }
  if (status_fds[0] >= 0) {
    // The job's own status, when its init lived to tell it (else the
    // init's: killed, with everything in the namespace).
    int job_status = 0;
    if (::read(status_fds[0], &job_status, sizeof job_status) == sizeof job_status) status = job_status;
    ::close(status_fds[0]);
  }
  ExitFile e;
  e.end_unix_nanos = NowNanos();
  if (fenced_at) {
    e.fenced = true;
    e.message = fence_reason;
  }
  if (WIFEXITED(status)) {
    e.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.exit_code = -1;
    e.signal = WTERMSIG(status);
  }
  // Stopped by its system-call filter: say so, and for what.
  if (isolation->sandbox && isolation->sandbox->seccomp && e.message.empty()) {
    e.message = DescribeSeccompEnd(e.exit_code, e.signal);
  }
  if (spec->container) DeleteContainer(*spec->container);
  if (group) {
    // Killed for memory: say so (the kernel's SIGKILL alone says nothing).
    if (e.signal == SIGKILL && OomKills(Slurp(group->dir + "/memory.events")) > 0) {
      e.message = fmt::format("out of memory: the kernel killed the job at its memory limit ({})",
                              FormatBytes(group->memory_bytes));
    }
    // What the job left running goes with it.
    RemoveJobCgroup(group->dir, group->parent, std::chrono::seconds(5));
  }
  // A pooled supervisor (started_fd >= 0) syncs it after its "done", so that
  // the agent reports the end while the disk works (docs/performance.md).
  if (Status s = job.WriteExit(e, /*durable=*/started_fd < 0); !s.ok()) return 1;
  return 0;
}

namespace {

// posix_spawn of a supervisor program: `stdin_fd` (-1: /dev/null) as its
// standard input, `stderr_path` as its stderr, in a session of its own,
// with default signal handling and nothing else of the caller's descriptors.
Result<pid_t> SpawnProgram(const std::string& exe, std::vector<std::string> args, int stdin_fd,
                           const std::string& stderr_path) {
  std::vector<char*> argv = Pointers(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (stdin_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  // Listening sockets and store files of the agent's process must not leak
  // into a process that outlives it (a leaked listener blocks a restart).
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  // A session of its own: a signal to the agent's group (Ctrl-C) does not reach it.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Unavailable(fmt::format("cannot spawn supervisor '{}': {}", exe, std::strerror(rc)));
  return pid;
}

}  // namespace

Result<pid_t> SpawnSupervisor(const std::string& exe, const std::string& job_dir) {
  return SpawnProgram(exe, {exe, "supervise", "--dir", job_dir}, -1, job_dir + "/supervisor.log");
}

bool SupervisorAlive(pid_t pid, const std::string& job_dir) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid));
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  // argv exactly as SpawnSupervisor wrote it, so a reused pid or the
  // supervisor of another job (j-10 for j-1) does not pass. A zombie has an
  // empty cmdline: dead, only not yet reaped.
  std::vector<std::string> argv;
  std::string arg;
  while (std::getline(ss, arg, '\0')) argv.push_back(arg);
  if (argv.size() == 4) return argv[1] == "supervise" && argv[2] == "--dir" && argv[3] == job_dir;
  // A pool's spare: it works in the directory of the job it was handed (an
  // idle spare in "/"). Compared as files, since the kernel's name for the
  // directory may differ from the caller's (symlinks, "..").
  if (argv.size() != 3 || argv[1] != "supervise" || argv[2] != "--spare") return false;
  struct stat cwd {};
  struct stat dir {};
  return ::stat(fmt::format("/proc/{}/cwd", pid).c_str(), &cwd) == 0 && ::stat(job_dir.c_str(), &dir) == 0 &&
         cwd.st_dev == dir.st_dev && cwd.st_ino == dir.st_ino;
}

int RunSpareSupervisor() {
  // The pool's socket leaves standard input (the job gets /dev/null there)
  // for a descriptor the job never sees (StartJob closes 3 and up).
  const int pool = ::fcntl(0, F_DUPFD_CLOEXEC, 3);
  const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (pool < 0 || null_fd < 0) return 1;
  ::dup2(null_fd, 0);
  sigset_t idle_mask;
  ::sigprocmask(SIG_SETMASK, nullptr, &idle_mask);
  // The system-call filters (both profiles, ~0.25 ms) are built while
  // idle, not on the job's start: StartJob finds them made.
  SeccompProfile(false).IgnoreError("built ahead; StartJob asks again and says what failed");
  std::string input;
  for (;;) {
    // Idle: hold no directory of the agent's, and match no job.
    if (::chdir("/") != 0) return 1;
    ::dup2(null_fd, 2);
    size_t eol;
    while ((eol = input.find('\n')) == std::string::npos) {
      char buf[4096];
      ssize_t n = ::read(pool, buf, sizeof buf);
      if (n > 0) {
        input.append(buf, static_cast<size_t>(n));
        if (input.size() > 65536) return 1;
      } else if (n == 0) {
        return 0;  // the pool or its agent went away
      } else if (errno != EINTR) {
        return 1;
      }
    }
    std::string dir = input.substr(0, eol);
    input.erase(0, eol + 1);
    // From here on, as SpawnSupervisor would have started it.
    int log_fd = ::open((dir + "/supervisor.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd >= 0) {
      ::dup2(log_fd, 2);
      ::close(log_fd);
    }
    // SupervisorAlive's mark; a directory that cannot be entered fails in
    // RunSupervisor, which says why in exit.json.
    (void)::chdir(dir.c_str());
    if (int rc = RunSupervisor(dir, pool); rc != 0) return rc;  // exit.json not written: the end says it
    // exit.json is written. Out of the job's directory before saying so
    // (SupervisorAlive must no longer take this process for its
    // supervisor); a signal sent to the job's supervisor meanwhile ends
    // this one instead of the next job.
    if (::chdir("/") != 0) return 1;
    ::sigprocmask(SIG_SETMASK, &idle_mask, nullptr);
    // Nobody to tell (the agent went away): end, which its successor sees.
    bool told = ::send(pool, "done\n", 5, MSG_NOSIGNAL) == 5;
    // exit.json becomes durable while the agent reads it and reports the
    // end (its rename made it whole already): a crash of the machine in
    // between loses the exit as one while the job ran would. The agent may
    // have removed the directory by now, its end being on record.
    JobDir(dir).SyncExit().IgnoreError("best effort: exit.json is whole already, only its durability is at stake");
    if (!told) return 0;
  }
}

SupervisorPool::SupervisorPool(std::string exe, size_t max_idle)
    : exe_(std::move(exe)),
      spares_(std::filesystem::path(exe_).filename() == "drover-supervise"),
      max_idle_(std::max<size_t>(max_idle, 1)) {}

SupervisorPool::~SupervisorPool() {
  // Busy ones finish their job, fail to say so and exit (their agent's
  // successor, if any, sees that); idle ones read the end and exit.
  for (const auto& [pid, busy] : busy_) ::close(busy.fd);
  for (const Idle& idle : idle_) {
    ::close(idle.fd);
    ::waitpid(idle.pid, nullptr, 0);
  }
}

bool SupervisorPool::SpawnIdle() {
  // A socket rather than a pipe: both ways (the job's directory, then
  // "done"), and a write to a supervisor that died fails with EPIPE
  // (MSG_NOSIGNAL) instead of raising SIGPIPE in the agent.
  int fds[2] = {-1, -1};
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return false;
  auto pid = SpawnProgram(exe_, {exe_, "supervise", "--spare"}, fds[1], "/dev/null");
  ::close(fds[1]);
  if (!pid.ok()) {
    ::close(fds[0]);
    return false;
  }
  idle_.push_back(Idle{*pid, fds[0]});
  return true;
}

void SupervisorPool::Refill() {
  if (spares_ && idle_.empty()) (void)SpawnIdle();
}

Result<SupervisorPool::Launched> SupervisorPool::Launch(const std::string& job_dir) {
  if (spares_ && job_dir.find('\n') == std::string::npos) {
    // Absolute: the spare works in "/", not in the caller's directory.
    std::error_code ec;
    std::string dir = std::filesystem::absolute(job_dir, ec).string();
    if (ec) dir = job_dir;
    dir += '\n';
    // An idle one, or else a new one, kept after this job like the others
    // (it reads the directory once it has started).
    while (!idle_.empty() || SpawnIdle()) {
      Idle idle = idle_.back();  // the most recently used: warm
      idle_.pop_back();
      if (::send(idle.fd, dir.data(), dir.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(dir.size())) {
        busy_[idle.pid] = Busy{idle.fd, {}};
        return Launched{idle.pid, idle.fd};
      }
      // It died idle: it is ours to reap.
      ::close(idle.fd);
      ::kill(idle.pid, SIGKILL);
      ::waitpid(idle.pid, nullptr, 0);
    }
  }
  auto pid = SpawnSupervisor(exe_, job_dir);
  if (!pid.ok()) return pid.status();
  return Launched{*pid, -1};
}

SupervisorPool::Heard SupervisorPool::Hear(pid_t pid) {
  auto it = busy_.find(pid);
  if (it == busy_.end()) return Heard::kGone;
  const int fd = it->second.fd;
  std::string& heard = it->second.heard;
  // Whole lines: "started", then "done"; anything else, or
  // the end of its output, and it is gone.
  bool started = false;
  bool done = false;
  bool gone = false;
  while (!done && !gone) {
    char buf[32];
    ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      gone = true;
      break;
    }
    heard.append(buf, static_cast<size_t>(n));
    for (size_t eol; !done && !gone && (eol = heard.find('\n')) != std::string::npos;) {
      std::string line = heard.substr(0, eol);
      heard.erase(0, eol + 1);
      if (line == "started") {
        started = true;
      } else if (line == "done") {
        done = true;
      } else {
        gone = true;
      }
    }
    if (heard.size() > 16) gone = true;  // no line of ours is that long
  }
  if (!done && !gone) return started ? Heard::kStarted : Heard::kNothing;
  if (!heard.empty()) done = false;  // more after "done": not ours to trust
  busy_.erase(it);
  if (done && idle_.size() < max_idle_) {
    idle_.push_back(Idle{pid, fd});  // waits for its next job
    return Heard::kDone;
  }
  ::close(fd);  // the end of its input: it exits, if it has not
  return done ? Heard::kRetired : Heard::kGone;
}

}  // namespace drover::agent
