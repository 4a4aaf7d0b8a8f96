#include "drover/agent/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "drover/agent/job_dir.h"

extern char** environ;

namespace drover::agent {
namespace {

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::string> BuildEnv(const JobSpecFile& spec) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

int RunSupervisor(const std::string& dir) {
  JobDir job(dir);
  auto spec = job.ReadSpec();
  if (!spec.ok()) {
    (void)job.WriteExit(ExitFile{127, 0, NowNanos(), spec.status().message(), true});
    return 1;
  }
  const int kForwarded[] = {SIGTERM, SIGINT, SIGHUP};
  sigset_t waitset;
  sigemptyset(&waitset);
  for (int s : kForwarded) sigaddset(&waitset, s);
  sigaddset(&waitset, SIGCHLD);
  sigprocmask(SIG_BLOCK, &waitset, nullptr);

  std::string log = job.File("output.log");
  std::string work = spec->working_dir.empty() ? job.File("work") : spec->working_dir;
  if (spec->working_dir.empty()) ::mkdir(work.c_str(), 0755);
  struct stat st{};
  if (::stat(work.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::string why = fmt::format("cannot start '{}': working directory '{}' does not exist", spec->command[0], work);
    std::ofstream(log, std::ios::app) << "drover: " << why << "\n";
    (void)job.WriteExit(ExitFile{127, 0, NowNanos(), why, true});
    return 0;
  }

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addchdir_np(&fa, work.c_str());
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);  // the job leads its own process group
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv_s = spec->command;
  std::vector<std::string> env_s = BuildEnv(*spec);
  std::vector<char*> argv = Pointers(argv_s);
  std::vector<char*> envp = Pointers(env_s);
  pid_t child = 0;
  int64_t start = NowNanos();
  int rc = posix_spawnp(&child, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    std::string why = fmt::format("cannot start '{}': {}", spec->command[0], std::strerror(rc));
    std::ofstream(log, std::ios::app) << "drover: " << why << "\n";
    (void)job.WriteExit(ExitFile{127, 0, NowNanos(), why, true});
    return 0;
  }
  (void)job.WriteStarted(StartedFile{child, start});

  int status = 0;
  for (;;) {
    pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      ExitFile lost{-1, 0, NowNanos(), fmt::format("lost track of the job: waitpid: {}", std::strerror(errno)), false};
      return job.WriteExit(lost).ok() ? 0 : 1;
    }
    siginfo_t info;
    int sig = sigwaitinfo(&waitset, &info);
    if (sig > 0 && sig != SIGCHLD) ::kill(-child, sig);
  }
  ExitFile e;
  e.end_unix_nanos = NowNanos();
  if (WIFEXITED(status)) {
    e.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.exit_code = -1;
    e.signal = WTERMSIG(status);
  }
  if (Status s = job.WriteExit(e); !s.ok()) return 1;
  return 0;
}

Result<pid_t> SpawnSupervisor(const std::string& exe, const std::string& job_dir) {
  std::vector<std::string> args = {exe, "supervise", "--dir", job_dir};
  std::vector<char*> argv = Pointers(args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, (job_dir + "/supervisor.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
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
  return argv.size() == 4 && argv[1] == "supervise" && argv[2] == "--dir" && argv[3] == job_dir;
}

}  // namespace drover::agent
