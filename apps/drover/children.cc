#include "children.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace drover::app {

pid_t SpawnChild(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setpgid(0, 0);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (out >= 0) ::close(out);
  if (in >= 0) ::close(in);
  return pid;
}

void StopChildren(std::vector<pid_t*> pids, std::chrono::milliseconds grace) {
  for (pid_t* pid : pids) {
    if (*pid > 0) ::kill(*pid, SIGTERM);
  }
  const auto until = std::chrono::steady_clock::now() + grace;
  for (pid_t* pid : pids) {
    bool reaped = false;
    while (*pid > 0 && !reaped && std::chrono::steady_clock::now() < until) {
      reaped = ::waitpid(*pid, nullptr, WNOHANG) != 0;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (*pid > 0 && !reaped) {
      ::kill(*pid, SIGKILL);
      ::waitpid(*pid, nullptr, 0);
    }
    *pid = -1;
  }
}

}  // namespace drover::app
