#include "drover/agent/cgroup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace drover::agent {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `value` to a cgroup file in one write(2), as the kernel wants it;
// the errno on failure (0 on success).
int WriteFile(const std::string& path, std::string_view value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = n == static_cast<ssize_t>(value.size()) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return err;
}

// "\040" -> " " (mountinfo escapes space, tab, newline and backslash).
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string Joined(const std::vector<std::string>& names, std::string_view prefix) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " ") + std::string(prefix) + n;
  return out;
}

// Enables `controllers` for the children of `dir`; the errno (0: done).
int EnableControllers(const std::string& dir, const std::vector<std::string>& controllers) {
  if (controllers.empty()) return 0;
  std::set<std::string> have = ParseControllers(Slurp(dir + "/cgroup.subtree_control"));
  bool all = true;
  for (const std::string& c : controllers) all = all && have.contains(c);
  if (all) return 0;
  return WriteFile(dir + "/cgroup.subtree_control", Joined(controllers, "+"));
}

// Whether this process is the only one in the group `dir`.
bool AloneIn(const std::string& dir) {
  std::istringstream in(Slurp(dir + "/cgroup.procs"));
  std::string pid;
  int others = 0;
  bool us = false;
  while (std::getline(in, pid)) {
    if (pid == std::to_string(::getpid())) {
      us = true;
    } else if (!pid.empty()) {
      ++others;
    }
  }
  return us && others == 0;
}

int MoveSelf(const std::string& dir) { return WriteFile(dir + "/cgroup.procs", std::to_string(::getpid())); }

CgroupHome Probe() {
  CgroupHome h;
  auto mount = FindCgroup2Mount(Slurp("/proc/self/mountinfo"));
  if (!mount) {
    h.problem = "no cgroup v2 hierarchy is mounted";
    return h;
  }
  h.mount = *mount;
  auto path = CgroupV2Path(Slurp("/proc/self/cgroup"));
  std::string home = path ? CgroupDir(*mount, *path) : "";
  if (home.empty()) {
    h.problem = fmt::format("the agent's cgroup v2 group ('{}') is not under the cgroup2 mount at {}",
                            path.value_or("none"), mount->mount_point);
    return h;
  }
  // cpu and memory for the job groups: available to H's children, then
  // enabled for them.
  std::set<std::string> available = ParseControllers(Slurp(home + "/cgroup.controllers"));
  std::vector<std::string> want;
  std::vector<std::string> missing;
  for (const char* c : {"cpu", "memory"}) (available.contains(c) ? want : missing).push_back(c);
  std::string delegation;
  if (!missing.empty()) {
    delegation = fmt::format("no cgroup v2 delegation: the {} controller{} not delegated to the agent's cgroup '{}'",
                             fmt::join(missing, " and "), missing.size() == 1 ? " is" : "s are", *path);
  }
  std::string current = home;  // where this process is
  int err = EnableControllers(home, want);
  if (err == EBUSY && AloneIn(home)) {
    // The agent alone in a delegated group (systemd's Delegate=yes): it
    // moves to a leaf of its own so that H may enable controllers.
    std::string leaf = home + "/drover-agent";
    if ((::mkdir(leaf.c_str(), 0755) == 0 || errno == EEXIST) && MoveSelf(leaf) == 0) {
      current = leaf;
      err = EnableControllers(home, want);
    }
  }
  if (err != 0) {
    delegation = fmt::format(
        "cannot enable {} for job groups under the agent's cgroup '{}': {}{}", fmt::join(want, " and "), *path,
        std::strerror(err),
        err == EBUSY ? " (it holds other processes: run the agent in a cgroup of its own, e.g. a systemd unit with "
                       "Delegate=yes)"
                     : "");
  }
  std::set<std::string> enabled = ParseControllers(Slurp(home + "/cgroup.subtree_control"));
  // Can a process be moved into a new group? The agent's own process goes
  // there and back.
  std::string probe = fmt::format("{}/drover-probe-{}", home, ::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    h.problem = fmt::format("cannot create cgroups under '{}': {}", *path, std::strerror(errno));
    return h;
  }
  err = MoveSelf(probe);
  if (err == 0 && (err = MoveSelf(current)) != 0) {
    spdlog::error("the agent cannot move back to its cgroup '{}': {}", current, std::strerror(err));
  }
  ::rmdir(probe.c_str());
  if (err != 0) {
    h.problem = fmt::format("cannot move a process into a new cgroup under '{}': {}", *path, std::strerror(err));
    return h;
  }
  h.dir = home;
  h.cpu = enabled.contains("cpu");
  h.memory = enabled.contains("memory");
  h.problem = delegation;
  return h;
}

}  // namespace

std::optional<CgroupMount> FindCgroup2Mount(std::string_view mountinfo) {
  size_t start = 0;
  while (start < mountinfo.size()) {
    size_t end = mountinfo.find('\n', start);
    if (end == std::string_view::npos) end = mountinfo.size();
    std::vector<std::string_view> f = Fields(mountinfo.substr(start, end - start));
    start = end + 1;
    // id parent major:minor root mount-point options [optional...] - type source super-options
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size() || f[dash + 1] != "cgroup2") continue;
    return CgroupMount{Unescape(f[4]), Unescape(f[3])};
  }
  return std::nullopt;
}

std::optional<std::string> CgroupV2Path(std::string_view proc_cgroup) {
  size_t start = 0;
  while (start < proc_cgroup.size()) {
    size_t end = proc_cgroup.find('\n', start);
    if (end == std::string_view::npos) end = proc_cgroup.size();
    std::string_view line = proc_cgroup.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("0::")) return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::string CgroupDir(const CgroupMount& mount, std::string_view path) {
  std::string_view root = mount.root;
  if (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  std::string_view rest;
  if (root == "/") {
    rest = path;
  } else if (path == root) {
    rest = "";
  } else if (path.starts_with(root) && path.size() > root.size() && path[root.size()] == '/') {
    rest = path.substr(root.size());
  } else {
    return "";
  }
  if (!rest.empty() && rest.front() != '/') return "";
  std::string dir = mount.mount_point;
  if (rest != "/") dir += std::string(rest);
  return dir;
}

std::string CgroupPath(const CgroupMount& mount, std::string_view dir) {
  std::string_view mp = mount.mount_point;
  if (!dir.starts_with(mp) || (dir.size() > mp.size() && dir[mp.size()] != '/')) return "";
  std::string_view rest = dir.substr(mp.size());
  std::string root = mount.root == "/" ? "" : mount.root;
  std::string out = root + std::string(rest);
  return out.empty() ? "/" : out;
}

std::set<std::string> ParseControllers(std::string_view text) {
  std::set<std::string> out;
  for (std::string_view f : Fields(text)) {
    while (!f.empty() && (f.back() == '\n' || f.back() == '\t')) f.remove_suffix(1);
    if (!f.empty()) out.emplace(f);
  }
  return out;
}

std::string CpuMax(int64_t cpu_millis, int64_t period_us) {
  if (cpu_millis <= 0) return fmt::format("max {}", period_us);
  int64_t quota = std::max<int64_t>(cpu_millis * period_us / 1000, 1000);
  return fmt::format("{} {}", quota, period_us);
}

int64_t OomKills(std::string_view memory_events) {
  constexpr std::string_view kKey = "oom_kill ";
  size_t at = 0;
  while ((at = memory_events.find(kKey, at)) != std::string_view::npos) {
    if (at == 0 || memory_events[at - 1] == '\n') {
      std::string_view rest = memory_events.substr(at + kKey.size());
      int64_t n = 0;
      auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
      (void)end;
      return ec == std::errc() ? n : 0;
    }
    at += kKey.size();
  }
  return 0;
}

const CgroupHome& ProcessCgroupHome() {
  static const CgroupHome home = [] {
    CgroupHome h = Probe();
    if (!h.problem.empty()) spdlog::warn("workload isolation: {}", h.problem);
    return h;
  }();
  return home;
}

Status EnsureAgentCgroup(const std::string& parent, const std::vector<std::string>& controllers) {
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return Unavailable(fmt::format("cannot create cgroup '{}': {}", parent, std::strerror(errno)));
  }
  if (int err = EnableControllers(parent, controllers); err != 0) {
    return Unavailable(fmt::format("cannot enable {} in cgroup '{}': {}", fmt::join(controllers, " and "), parent,
                                   std::strerror(err)));
  }
  return Status::Ok();
}

Status CreateJobCgroup(const JobCgroup& g) {
  // A supervisor whose job ended removes the agent's group when it was the
  // last one in it; a group made meanwhile finds its parent gone: again.
  for (int attempt = 0;; ++attempt) {
    DROVER_RETURN_IF_ERROR(EnsureAgentCgroup(g.parent, g.controllers));
    if (::mkdir(g.dir.c_str(), 0755) == 0) break;
    int err = errno;
    if (err == EEXIST && attempt < 5) {
      RemoveJobCgroup(g.dir, "", std::chrono::seconds(2));
      continue;
    }
    if (err == ENOENT && attempt < 5) continue;
    return Unavailable(fmt::format("cannot create cgroup '{}': {}", g.dir, std::strerror(err)));
  }
  auto fail = [&](std::string why) {
    ::rmdir(g.dir.c_str());
    return Unavailable(std::move(why));
  };
  auto has = [&](std::string_view c) {
    return std::find(g.controllers.begin(), g.controllers.end(), c) != g.controllers.end();
  };
  if (g.cpu_millis > 0 && has("cpu")) {
    if (int err = WriteFile(g.dir + "/cpu.max", CpuMax(g.cpu_millis)); err != 0) {
      return fail(fmt::format("cannot set cpu.max of cgroup '{}': {}", g.dir, std::strerror(err)));
    }
  }
  if (g.memory_bytes > 0 && has("memory")) {
    if (int err = WriteFile(g.dir + "/memory.max", std::to_string(g.memory_bytes)); err != 0) {
      return fail(fmt::format("cannot set memory.max of cgroup '{}': {}", g.dir, std::strerror(err)));
    }
    // An out-of-memory kill takes the whole job, not one of its processes.
    (void)WriteFile(g.dir + "/memory.oom.group", "1");
  }
  if (!g.deny_devices.empty()) {
    if (Status s = AttachDeviceFilter(g.dir, g.deny_devices); !s.ok()) return fail(s.message());
  }
  return Status::Ok();
}

void RemoveJobCgroup(const std::string& dir, const std::string& parent, std::chrono::milliseconds wait) {
  struct stat st {};
  if (!dir.empty() && ::stat(dir.c_str(), &st) == 0) {
    if (WriteFile(dir + "/cgroup.kill", "1") != 0) {
      // Kernels before 5.14: one by one.
      std::istringstream in(Slurp(dir + "/cgroup.procs"));
      std::string pid;
      while (std::getline(in, pid)) {
        pid_t p = 0;
        auto [end, ec] = std::from_chars(pid.data(), pid.data() + pid.size(), p);
        if (ec == std::errc() && end == pid.data() + pid.size() && p > 1) ::kill(p, SIGKILL);
      }
    }
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (::rmdir(dir.c_str()) != 0 && errno == EBUSY && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (!parent.empty()) ::rmdir(parent.c_str());  // EBUSY while other jobs have groups there
}

}  // namespace drover::agent
