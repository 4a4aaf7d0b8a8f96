#include "drover/agent/job_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "drover/common/hash.h"

namespace drover::agent {
namespace {

using nlohmann::json;

std::optional<json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

template <typename T>
T Get(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

// What a job directory says while its processes live is read back only by
// an agent that restarted beside them: atomic (a rename) against a crash of
// the writer, not synced against one of the machine, which ends the
// processes too. Each sync cost the agent's loop milliseconds per job start
// (three of them before a supervisor ran). The exit record stays durable:
// after a reboot it is the job's only word on how it ended.
constexpr bool kWhileAlive = false;

// A job's state is its owner's only: spec.json holds the job's whole
// environment, secrets included (docs/security.md, "Files").
constexpr unsigned kPrivateFile = 0600;

// The data directory a state root was made for ("" when unknown).
std::string OwnerOf(const std::string& root) {
  Result<std::string> owner = ReadTextFile(root + "/owner", 4096);
  return owner.ok() ? *owner : "";
}

bool InMemory(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

// A directory of ours: made (0700) if missing, then taken only if it is a
// directory, not a link, owned by this user, that nobody else may enter.
// Someone who made it first in a shared place gets it refused.
bool PrivateDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return false;
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 077) == 0;
}

}  // namespace

SpareDirs::SpareDirs(std::string root, std::string prefix, int count, std::function<void(const std::string&)> fill)
    : root_(std::move(root)), prefix_(std::move(prefix)), count_(count), fill_(std::move(fill)) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix_) || !entry.is_directory(ec)) continue;
    ready_.push_back(entry.path().string());
    uint64_t n = 0;
    std::from_chars(name.data() + prefix_.size(), name.data() + name.size(), n);
    next_ = std::max(next_, n + 1);
  }
}

std::error_code SpareDirs::Take(const std::string& target) {
  std::error_code ec;
  if (std::filesystem::is_directory(target, ec)) return {};
  for (;;) {
    std::string spare;
    {
      // Busy (Refill, on a thread that may not run soon): make it here.
      if (!mu_.TryLock()) break;
      if (ready_.empty()) {
        mu_.Unlock();
        break;
      }
      spare = std::move(ready_.back());
      ready_.pop_back();
      mu_.Unlock();
    }
    if (::rename(spare.c_str(), target.c_str()) == 0) return {};
    // Gone, or the target appeared meanwhile: the next, or make it.
    if (std::filesystem::is_directory(target, ec)) return {};
  }
  std::filesystem::create_directories(target, ec);
  if (!ec && fill_) fill_(target);
  return ec;
}

void SpareDirs::Refill() {
  for (;;) {
    std::string dir;
    {
      MutexLock lock(&mu_);
      if (static_cast<int>(ready_.size()) >= count_) return;
      dir = fmt::format("{}/{}{}", root_, prefix_, next_++);
    }
    std::error_code ec;
    if (!std::filesystem::create_directory(dir, ec) || ec) return;
    if (fill_) fill_(dir);
    MutexLock lock(&mu_);
    ready_.push_back(std::move(dir));
  }
}

std::vector<std::string> JobStateBases() {
  std::vector<std::string> bases;
  if (::geteuid() == 0) bases.push_back("/run/drover");
  bases.push_back(fmt::format("/dev/shm/drover-{}", ::geteuid()));
  return bases;
}

std::string JobStateRoot(const std::string& data_dir) { return JobStateRoot(data_dir, JobStateBases()); }

std::string JobStateRoot(const std::string& data_dir, const std::vector<std::string>& bases) {
  std::error_code ec;
  // Made first: a root whose owner does not exist is swept (below) by the
  // next agent that starts, which may be now.
  std::filesystem::create_directories(data_dir, ec);
  std::string name = std::filesystem::weakly_canonical(data_dir, ec).string();
  if (ec || name.empty()) name = data_dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  const uint64_t h = Fnv1a64(name);  // the same id for the same directory, run after run
  for (const std::string& base : bases) {
    const std::string parent = std::filesystem::path(base).parent_path().string();
    if (!InMemory(parent) || !PrivateDir(base)) continue;
    std::string root = fmt::format("{}/{:016x}", base, h);
    if (!PrivateDir(root)) continue;
    // Whose it is, for SweepJobStateRoots.
    if (OwnerOf(root) != name) {
      WriteFileAtomic(root + "/owner", name, 0600, /*durable=*/false)
          .IgnoreError("best effort: a root without an owner is kept, never swept");
    }
    return root;
  }
  return data_dir + "/run";
}

void SweepJobStateRoots(const std::string& keep, const std::vector<std::string>& bases) {
  std::error_code ec;
  for (const std::string& base : bases) {
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      if (entry.path() == keep) continue;
      std::string owner = OwnerOf(entry.path().string());
      if (!owner.empty() && owner.front() == '/' && !std::filesystem::exists(owner, ec) && !ec) {
        std::filesystem::remove_all(entry.path(), ec);
      }
    }
  }
}

Status JobDir::WriteSpec(const JobSpecFile& s) const {
  json j{{"job_id", s.job_id},
         {"command", s.command},
         {"env", s.env},
         {"working_dir", s.working_dir},
         {"grace_seconds", s.grace_seconds},
         {"lease_file", s.lease_file},
         {"output_dir", s.output_dir}};
  if (s.container) {
    const ContainerRun& c = *s.container;
    j["container"] = json{{"runtime", c.runtime},     {"root", c.root},    {"id", c.id},       {"bundle", c.bundle},
                          {"lower_dir", c.lower_dir}, {"lower", c.lower},  {"upper", c.upper}, {"work", c.work},
                          {"image", c.image},         {"digest", c.digest}};
  }
  return WriteFileAtomic(File("spec.json"), j.dump(), kPrivateFile, kWhileAlive);
}

Result<JobSpecFile> JobDir::ReadSpec() const {
  auto j = ReadJson(File("spec.json"));
  if (!j) return NotFound(fmt::format("job directory '{}' has no readable spec.json", path_));
  JobSpecFile s;
  s.job_id = Get<std::string>(*j, "job_id", "");
  s.command = Get<std::vector<std::string>>(*j, "command", {});
  s.env = Get<std::map<std::string, std::string>>(*j, "env", {});
  s.working_dir = Get<std::string>(*j, "working_dir", "");
  s.grace_seconds = Get<int>(*j, "grace_seconds", 10);
  s.lease_file = Get<std::string>(*j, "lease_file", "");
  s.output_dir = Get<std::string>(*j, "output_dir", "");
  if (j->contains("container") && (*j)["container"].is_object()) {
    const json& c = (*j)["container"];
    ContainerRun r;
    r.runtime = Get<std::string>(c, "runtime", "");
    r.root = Get<std::string>(c, "root", "");
    r.id = Get<std::string>(c, "id", "");
    r.bundle = Get<std::string>(c, "bundle", "");
    r.lower_dir = Get<std::string>(c, "lower_dir", "");
    r.lower = Get<std::string>(c, "lower", "");
    r.upper = Get<std::string>(c, "upper", "");
    r.work = Get<std::string>(c, "work", "");
    r.image = Get<std::string>(c, "image", "");
    r.digest = Get<std::string>(c, "digest", "");
    if (r.runtime.empty() || r.id.empty() || r.bundle.empty() || r.lower.empty() || r.upper.empty() || r.work.empty()) {
      return InvalidArgument(fmt::format("'{}/spec.json' has an incomplete container", path_));
    }
    s.container = std::move(r);
  }
  if (s.job_id.empty() || s.command.empty()) return InvalidArgument(fmt::format("'{}/spec.json' is incomplete", path_));
  return s;
}

Status JobDir::WriteIsolation(const JobIsolation& iso) const {
  json j{{"cpus", iso.cpus}};
  if (iso.cgroup) {
    const JobCgroup& g = *iso.cgroup;
    json deny = json::array();
    for (const DeviceRule& r : g.deny_devices) deny.push_back(json{std::string(1, r.type), r.major, r.minor});
    j["cgroup"] = json{{"parent", g.parent},
                       {"dir", g.dir},
                       {"controllers", g.controllers},
                       {"cpu_millis", g.cpu_millis},
                       {"memory_bytes", g.memory_bytes},
                       {"deny_devices", deny}};
  }
  if (iso.sandbox) {
    const JobSandbox& b = *iso.sandbox;
    j["sandbox"] = json{{"as_root", b.as_root},  {"namespaces", b.namespaces},
                        {"uid", b.user.uid},     {"gid", b.user.gid},
                        {"hide", b.hide},        {"keep", b.keep},
                        {"own", b.own},          {"enter", b.enter},
                        {"seccomp", b.seccomp},  {"hosts_file", b.hosts_file},
                        {"hostname", b.hostname}};
  }
  return WriteFileAtomic(File("isolation.json"), j.dump(), kPrivateFile, kWhileAlive);
}

Result<JobIsolation> JobDir::ReadIsolation() const {
  JobIsolation iso;
  if (::access(File("isolation.json").c_str(), F_OK) != 0) return iso;
  auto j = ReadJson(File("isolation.json"));
  if (!j) return InvalidArgument(fmt::format("'{}/isolation.json' is not readable", path_));
  try {
    iso.cpus = j->value("cpus", std::vector<int>{});
    if (auto it = j->find("cgroup"); it != j->end() && it->is_object()) {
      JobCgroup g;
      g.parent = it->at("parent").get<std::string>();
      g.dir = it->at("dir").get<std::string>();
      g.controllers = it->value("controllers", std::vector<std::string>{});
      g.cpu_millis = it->value("cpu_millis", int64_t{0});
      g.memory_bytes = it->value("memory_bytes", int64_t{0});
      for (const json& r : it->value("deny_devices", json::array())) {
        std::string type = r.at(0).get<std::string>();
        g.deny_devices.push_back(DeviceRule{type == "b" ? 'b' : 'c', r.at(1).get<uint32_t>(), r.at(2).get<uint32_t>()});
      }
      if (g.dir.empty() || g.parent.empty()) throw std::invalid_argument("no cgroup dir");
      iso.cgroup = std::move(g);
    }
    if (auto it = j->find("sandbox"); it != j->end() && it->is_object()) {
      JobSandbox b;
      b.as_root = it->at("as_root").get<bool>();
      b.namespaces = it->value("namespaces", true);
      b.user.uid = it->at("uid").get<uid_t>();
      b.user.gid = it->at("gid").get<gid_t>();
      b.hide = it->value("hide", std::vector<std::string>{});
      b.keep = it->value("keep", std::vector<std::string>{});
      b.own = it->value("own", std::vector<std::string>{});
      b.enter = it->value("enter", std::vector<std::string>{});
      b.seccomp = it->value("seccomp", true);
      b.hosts_file = it->value("hosts_file", std::string());
      b.hostname = it->value("hostname", std::string());
      // Never root by a missing or zero id: root is said, not defaulted.
      if (!b.as_root && (b.user.uid == 0 || b.user.gid == 0)) throw std::invalid_argument("a sandbox user of 0");
      iso.sandbox = std::move(b);
    }
  } catch (const std::exception&) {
    return InvalidArgument(fmt::format("'{}/isolation.json' is malformed", path_));
  }
  return iso;
}

Status JobDir::WriteStarted(const StartedFile& s) const {
  return WriteFileAtomic(File("started.json"), json{{"pid", s.pid}, {"start_unix_nanos", s.start_unix_nanos}}.dump(),
                         kPrivateFile, kWhileAlive);
}

std::optional<StartedFile> JobDir::ReadStarted() const {
  auto j = ReadJson(File("started.json"));
  if (!j) return std::nullopt;
  StartedFile s{Get<pid_t>(*j, "pid", 0), Get<int64_t>(*j, "start_unix_nanos", 0)};
  if (s.pid <= 1) return std::nullopt;
  return s;
}

Status JobDir::WriteExit(const ExitFile& e, bool durable) const {
  json j{{"exit_code", e.exit_code},
         {"signal", e.signal},
         {"end_unix_nanos", e.end_unix_nanos},
         {"message", e.message},
         {"failed_to_start", e.failed_to_start},
         {"fenced", e.fenced}};
  return WriteFileAtomic(File("exit.json"), j.dump(), kPrivateFile, durable);
}

Status JobDir::SyncExit() const { return SyncFile(File("exit.json")); }

std::optional<ExitFile> JobDir::ReadExit() const {
  auto j = ReadJson(File("exit.json"));
  if (!j) return std::nullopt;
  return ExitFile{Get<int>(*j, "exit_code", -1),           Get<int>(*j, "signal", 0),
                  Get<int64_t>(*j, "end_unix_nanos", 0),   Get<std::string>(*j, "message", ""),
                  Get<bool>(*j, "failed_to_start", false), Get<bool>(*j, "fenced", false)};
}

Status WriteNodeLease(const std::string& path, const NodeLease& lease) {
  return WriteFileAtomic(path, fmt::format("{} {}\n", lease.fence_at_mono_ns, lease.grace_ms), kPrivateFile,
                         /*durable=*/false);
}

Result<NodeLease> ReadNodeLease(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("no lease file '{}'", path));
  NodeLease lease;
  if (!(in >> lease.fence_at_mono_ns >> lease.grace_ms) || lease.grace_ms < 0) {
    return InvalidArgument(fmt::format("lease file '{}' is malformed", path));
  }
  return lease;
}

Status JobDir::WriteStop(int64_t ns) const {
  return WriteFileAtomic(File("stop.json"), json{{"sigterm_unix_nanos", ns}}.dump(), kPrivateFile);
}

std::optional<int64_t> JobDir::ReadStop() const {
  auto j = ReadJson(File("stop.json"));
  if (!j) return std::nullopt;
  return Get<int64_t>(*j, "sigterm_unix_nanos", 0);
}

Status JobDir::WriteSupervisorPid(pid_t pid) const {
  return WriteFileAtomic(File("supervisor.pid"), std::to_string(pid), kPrivateFile, kWhileAlive);
}

std::optional<pid_t> JobDir::ReadSupervisorPid() const {
  std::ifstream in(File("supervisor.pid"));
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 1) return std::nullopt;
  return pid;
}

}  // namespace drover::agent
