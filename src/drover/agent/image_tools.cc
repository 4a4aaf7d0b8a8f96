#include "drover/agent/image_tools.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

extern char** environ;

namespace drover::agent {
namespace {

constexpr size_t kMaxToolOutput = 8 << 20;  // a manifest is at most 4 MiB
constexpr size_t kMaxToolError = 4096;

}  // namespace

// Runs `argv` (posix_spawn: safe in this threaded process) with the
// agent's environment and `env` ("K=V", overriding), its output kept up to
// bounds; `tick` is called about every 250 ms while it runs, and when it
// answers a reason, the tool is killed and that is the error.
Result<ToolResult> RunTool(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const std::function<std::string()>& tick) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const std::string_view k = kv.substr(0, kv.find('=') + 1);
    if (std::none_of(env.begin(), env.end(), [&](const std::string& o) { return o.compare(0, k.size(), k) == 0; })) {
      envp.push_back(*e);
    }
  }
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return Unavailable(fmt::format("cannot run '{}': {}", argv[0], std::strerror(rc)));
  }
  ToolResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  std::string stopped;
  auto last_tick = std::chrono::steady_clock::now();
  while (open_fds > 0) {
    int n = ::poll(fds, 2, 250);
    if (n < 0 && errno != EINTR) break;
    if (tick && std::chrono::steady_clock::now() - last_tick >= std::chrono::milliseconds(250)) {
      last_tick = std::chrono::steady_clock::now();
      stopped = tick();
      if (!stopped.empty()) {
        ::kill(pid, SIGKILL);
        break;
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& into = i == 0 ? r.out : r.err;
      const size_t cap = i == 0 ? kMaxToolOutput : kMaxToolError;
      if (into.size() < cap) into.append(buf, std::min<size_t>(static_cast<size_t>(got), cap - into.size()));
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  if (!stopped.empty()) return Unavailable(stopped);
  return r;
}

// The last line a tool wrote to stderr, trimmed of its log prefix.
std::string LastLine(const std::string& err) {
  std::string s = err;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (size_t nl = s.rfind('\n'); nl != std::string::npos) s = s.substr(nl + 1);
  // skopeo: `time="..." level=fatal msg="..."`
  if (size_t m = s.find("msg=\""); m != std::string::npos) {
    s = s.substr(m + 5);
    if (!s.empty() && s.back() == '"') s.pop_back();
  }
  if (s.size() > 500) s = s.substr(0, 500) + "...";
  return s;
}

bool Exited0(const ToolResult& r) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

}  // namespace drover::agent
