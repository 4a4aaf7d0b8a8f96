#include "drover/agent/job_env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace drover::agent {

bool EnvAllowed(std::string_view name, const std::vector<std::string>& allow) {
  for (const std::string& a : allow) {
    if (!a.empty() && a.back() == '*') {
      if (name.starts_with(std::string_view(a).substr(0, a.size() - 1))) return true;
    } else if (name == a) {
      return true;
    }
  }
  return false;
}

std::map<std::string, std::string> EnvMap(const char* const* environ) {
  std::map<std::string, std::string> out;
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    out.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return out;
}

std::map<std::string, std::string> BuildJobEnv(const std::map<std::string, std::string>& agent_env,
                                               const std::vector<std::string>& allow,
                                               const std::map<std::string, std::string>& job_env,
                                               const std::map<std::string, std::string>& drover_env) {
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : agent_env) {
    if (EnvAllowed(k, allow)) env[k] = v;
  }
  env.emplace("PATH", std::string(kDefaultPath));
  for (const auto& [k, v] : job_env) env[k] = v;
  for (const auto& [k, v] : drover_env) env[k] = v;
  return env;
}

v1::LaunchContract LaunchContractOf(const v1::Workload& w, const std::string& node, const std::string& own_addr) {
  if (w.has_launch() && w.launch().nnodes() > 0 && w.launch().hosts_size() == w.launch().nnodes() &&
      w.launch().nodes_size() == w.launch().nnodes()) {
    return w.launch();
  }
  v1::LaunchContract c;
  c.set_nnodes(1);
  c.set_master_addr(own_addr);
  c.add_hosts(own_addr);
  c.add_nodes(node);
  return c;
}

std::string ReplicaHostName(const std::string& job_id, int rank) { return fmt::format("{}-r{}", job_id, rank); }

std::string LaunchHostsFile(const v1::LaunchContract& c, const std::string& job_id, const std::string& own_addr,
                            const std::string& machine) {
  std::string out = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  std::set<std::string> named;
  for (int r = 0; r < c.hosts_size() && r < c.nodes_size(); ++r) {
    out += fmt::format("{}\t{}", c.hosts(r), ReplicaHostName(job_id, r));
    if (named.insert(c.nodes(r)).second) out += "\t" + c.nodes(r);
    out += "\n";
  }
  if (!machine.empty() && !named.contains(machine)) out += fmt::format("{}\t{}\n", own_addr, machine);
  return out;
}

std::string LaunchHostfile(const v1::LaunchContract& c, const std::string& job_id) {
  std::string out;
  for (int r = 0; r < c.nnodes(); ++r) out += ReplicaHostName(job_id, r) + " slots=1\n";
  return out;
}

std::map<std::string, std::string> LaunchEnv(const v1::LaunchContract& c, const std::string& hostfile,
                                             const std::string& ifname,
                                             const std::map<std::string, std::string>& job_env) {
  std::map<std::string, std::string> env;
  const std::string rank = std::to_string(c.node_rank()), nnodes = std::to_string(c.nnodes());
  const std::string port = c.master_port() > 0 ? std::to_string(c.master_port()) : "";
  env["DROVER_NODE_RANK"] = rank;
  env["DROVER_NNODES"] = nnodes;
  env["DROVER_MASTER_ADDR"] = c.master_addr();
  env["DROVER_HOSTS"] = fmt::format("{}", fmt::join(c.hosts(), ","));
  if (!port.empty()) env["DROVER_MASTER_PORT"] = port;
  if (!hostfile.empty()) env["DROVER_HOSTFILE"] = hostfile;
  auto unless_set = [&](const std::string& name, const std::string& value) {
    if (!value.empty() && !job_env.contains(name)) env[name] = value;
  };
  for (const char* prefix : {"", "PET_"}) {
    const std::string p = prefix;
    unless_set(p + "MASTER_ADDR", c.master_addr());
    unless_set(p + "MASTER_PORT", port);
    unless_set(p + "NODE_RANK", rank);
  }
  unless_set("PET_NNODES", nnodes);
  unless_set("PET_NPROC_PER_NODE", "1");
  unless_set("WORLD_SIZE", nnodes);
  unless_set("RANK", rank);
  unless_set("LOCAL_RANK", "0");
  unless_set("LOCAL_WORLD_SIZE", "1");
  unless_set("NCCL_SOCKET_IFNAME", ifname);
  unless_set("GLOO_SOCKET_IFNAME", ifname);
  return env;
}

std::string InterfaceWithAddress(const std::string& addr) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, addr.c_str(), &v4) == 1;
  if (!is_v4 && inet_pton(AF_INET6, addr.c_str(), &v6) != 1) return "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_name == nullptr) continue;
    if (is_v4 && i->ifa_addr->sa_family == AF_INET) {
      if (reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr) name = i->ifa_name;
    } else if (!is_v4 && i->ifa_addr->sa_family == AF_INET6) {
      const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (std::memcmp(&a, &v6, sizeof a) == 0) name = i->ifa_name;
    }
  }
  freeifaddrs(list);
  return name;
}

Result<std::string> FindCudaShim(const std::string& configured, const std::string& exe) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!configured.empty()) {
    if (fs::is_regular_file(configured, ec)) return configured;
    return NotFound(fmt::format("the GPU memory-limit shim '{}' (DROVER_CUDA_SHIM) does not exist", configured));
  }
  fs::path dir = fs::path(exe).parent_path();
  std::vector<fs::path> places = {dir / kCudaShimName, dir / ".." / "lib" / "drover" / kCudaShimName};
  for (const fs::path& p : places) {
    if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
  }
  return NotFound(fmt::format("the GPU memory-limit shim {} is not at {} or {}; set DROVER_CUDA_SHIM", kCudaShimName,
                              places[0].string(), places[1].string()));
}

Result<int64_t> GpuMemoryLimitOf(int64_t workload_limit, const std::map<std::string, std::string>& env) {
  int64_t limit = workload_limit;
  if (limit <= 0) {
    auto it = env.find("DROVER_GPU_MEMORY_LIMIT");
    if (it == env.end()) return int64_t{0};
    const std::string& v = it->second;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), limit);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size() || limit <= 0) {
      return InvalidArgument(fmt::format("DROVER_GPU_MEMORY_LIMIT='{}' is not a number of bytes", v));
    }
  }
  if (limit < kMinGpuMemoryLimit) {
    return InvalidArgument(fmt::format(
        "a GPU memory limit of {} bytes is smaller than one allocation granule ({} bytes): no allocation could succeed",
        limit, kMinGpuMemoryLimit));
  }
  return limit;
}

void ApplyGpuMemoryLimit(int64_t limit, const std::string& shim, const std::string& report_dir,
                         std::map<std::string, std::string>* env) {
  std::string preload = shim;
  if (auto it = env->find("LD_PRELOAD"); it != env->end()) {
    // LD_PRELOAD takes spaces or colons between entries.
    std::string_view rest = it->second;
    while (!rest.empty()) {
      size_t cut = rest.find_first_of(" :");
      std::string_view entry = rest.substr(0, cut);
      if (!entry.empty() && entry != shim) preload += ":" + std::string(entry);
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
  }
  (*env)["LD_PRELOAD"] = preload;
  (*env)["DROVER_GPU_MEMORY_LIMIT"] = std::to_string(limit);
  (*env)["DROVER_GPU_MEMORY_REPORT"] = report_dir;
}

Status AddGpuMemoryLimit(int64_t workload_limit, const std::string& report_dir,
                         std::map<std::string, std::string>* env) {
  DROVER_ASSIGN_OR_RETURN(int64_t limit, GpuMemoryLimitOf(workload_limit, *env));
  if (limit == 0) return Status::Ok();
  const char* configured = std::getenv("DROVER_CUDA_SHIM");
  std::error_code ec;
  std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  DROVER_ASSIGN_OR_RETURN(std::string shim, FindCudaShim(configured != nullptr ? configured : "", exe));
  std::filesystem::create_directories(report_dir, ec);
  if (ec) {
    return Unavailable(fmt::format("cannot create '{}' for the GPU memory reports: {}", report_dir, ec.message()));
  }
  ApplyGpuMemoryLimit(limit, shim, report_dir, env);
  return Status::Ok();
}

std::optional<std::map<int64_t, int64_t>> NamespacePids(int64_t leader) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path self_ns = fs::read_symlink("/proc/self/ns/pid", ec);
  if (ec) return std::nullopt;
  std::map<int64_t, int64_t> out;
  const fs::path ns = fs::read_symlink(fmt::format("/proc/{}/ns/pid", leader), ec);
  if (ec) return out;  // gone, and everything under it
  if (ns == self_ns) return std::nullopt;
  // Down the tree from the leader: every thread's children (a child is
  // listed under the thread that made it). Bounded: a job cannot make
  // this walk the agent's whole period.
  std::vector<int64_t> todo = {leader};
  while (!todo.empty() && out.size() < 65'536) {
    const int64_t pid = todo.back();
    todo.pop_back();
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(status, line)) {
      if (!line.starts_with("NSpid:")) continue;
      // "NSpid:\t<node's>\t...\t<its namespace's>"; the last is the job's own.
      std::istringstream in(line.substr(6));
      int64_t node_pid = 0, own = 0;
      if (in >> node_pid) {
        own = node_pid;
        for (int64_t next = 0; in >> next;) own = next;
        if (node_pid == pid) out[own] = node_pid;
      }
      break;
    }
    for (const fs::directory_entry& task : fs::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
      std::ifstream children(task.path() / "children");
      for (int64_t child = 0; children >> child;) todo.push_back(child);
    }
  }
  return out;
}

std::map<int64_t, int64_t> ReadGpuMemoryReportsByPid(const std::string& report_dir, int64_t leader) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::map<int64_t, int64_t> out;
  const std::optional<std::map<int64_t, int64_t>> ns = leader > 0 ? NamespacePids(leader) : std::nullopt;
  for (const fs::directory_entry& e : fs::directory_iterator(report_dir, ec)) {
    const std::string name = e.path().filename().string();
    int pid = 0;
    auto [end, pec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (pec != std::errc() || end != name.data() + name.size() || pid <= 0) continue;  // a .tmp, or not a report
    int64_t node_pid = pid;
    if (ns) {
      auto it = ns->find(pid);
      if (it == ns->end()) continue;  // no such process under the leader: it died without removing it
      node_pid = it->second;
    } else if (kill(pid, 0) != 0 && errno == ESRCH) {
      continue;  // a process that died without removing it
    }
    std::ifstream in(e.path());
    int64_t bytes = 0;
    if (in >> bytes && bytes >= 0) out[node_pid] = bytes;
  }
  return out;
}

int64_t ReadGpuMemoryReports(const std::string& report_dir) {
  int64_t total = 0;
  for (const auto& [pid, bytes] : ReadGpuMemoryReportsByPid(report_dir)) total += bytes;
  return total;
}

void AddGpuMemoryReports(const std::vector<ShimReport>& jobs, v1::GpuTelemetry* t) {
  if (t->processes_known()) return;
  bool added = false;
  for (const ShimReport& j : jobs) {
    for (const auto& [pid, bytes] : ReadGpuMemoryReportsByPid(j.report_dir, j.leader)) {
      v1::GpuProcess* p = t->add_processes();
      p->set_pid(pid);
      p->set_memory_bytes(bytes);
      p->set_job_id(j.job_id);
      added = true;
    }
  }
  if (added) t->set_processes_known(true);
}

}  // namespace drover::agent
