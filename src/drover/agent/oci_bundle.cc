#include "drover/agent/oci_bundle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "drover/agent/cgroup.h"
#include "drover/agent/devices/topology/host_topology.h"
#include "drover/common/hash.h"

namespace drover::agent {
namespace {

using json = nlohmann::json;

// runc's and docker's defaults (runc `spec`, moby's oci defaults).
constexpr const char* kMaskedPaths[] = {"/proc/acpi",
                                        "/proc/asound",
                                        "/proc/kcore",
                                        "/proc/keys",
                                        "/proc/latency_stats",
                                        "/proc/timer_list",
                                        "/proc/timer_stats",
                                        "/proc/sched_debug",
                                        "/proc/scsi",
                                        "/sys/firmware",
                                        "/sys/devices/virtual/powercap"};
constexpr const char* kReadonlyPaths[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"};
constexpr const char* kRootCapabilities[] = {
    "CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
    "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
    "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
    "CAP_KILL",    "CAP_AUDIT_WRITE"};

json Mount(const std::string& dest, const std::string& type, const std::string& source,
           std::vector<std::string> options) {
  return json{{"destination", dest}, {"type", type}, {"source", source}, {"options", std::move(options)}};
}

}  // namespace

Result<std::vector<std::string>> ContainerArgs(const ImageConfig& image, const std::vector<std::string>& command) {
  std::vector<std::string> args = image.entrypoint;
  const std::vector<std::string>& rest = command.empty() ? image.cmd : command;
  args.insert(args.end(), rest.begin(), rest.end());
  if (args.empty()) return InvalidArgument("the image has no entrypoint or command, and the job gives no command");
  return args;
}

std::vector<std::string> ContainerEnv(const ImageConfig& image, const std::map<std::string, std::string>& job) {
  std::map<std::string, std::string> env;
  std::vector<std::string> order;
  for (const std::string& kv : image.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string k = kv.substr(0, eq);
    if (!env.contains(k)) order.push_back(k);
    env[k] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : job) {
    if (!env.contains(k)) order.push_back(k);
    env[k] = v;
  }
  if (!env.contains("PATH")) {
    order.push_back("PATH");
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  }
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const std::string& k : order) out.push_back(k + "=" + env[k]);
  return out;
}

int64_t ShmBytes(int64_t asked, int64_t memory_bytes) {
  if (asked > 0) return asked;
  if (memory_bytes > 0) return memory_bytes / 2;
  return int64_t{1} << 30;
}

std::string ContainerId(const std::string& key) {
  std::string id = "drover-";
  for (char c : key) {
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
    id += ok ? c : '_';
  }
  // Two keys that differ only in a replaced character stay apart.
  return fmt::format("{}-{:08x}", id, Fnv1a64(key) & 0xffffffffu);
}

std::string RuntimeSpecJson(const ContainerInputs& in) {
  json process{{"terminal", false},
               {"user", {{"uid", in.uid}, {"gid", in.gid}}},
               {"args", in.args},
               {"env", in.env},
               {"cwd", in.cwd.empty() ? "/" : in.cwd},
               {"noNewPrivileges", !in.as_root},
               {"rlimits", json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", in.nofile}, {"soft", in.nofile}},
                                        {{"type", "RLIMIT_MEMLOCK"}, {"hard", in.memlock}, {"soft", in.memlock}}})}};
  json caps = json::array();
  if (in.as_root) {
    for (const char* c : kRootCapabilities) caps.push_back(c);
  }
  process["capabilities"] = {{"bounding", caps},
                             {"effective", caps},
                             {"permitted", caps},
                             {"inheritable", json::array()},
                             {"ambient", json::array()}};

  json mounts = json::array();
  mounts.push_back(Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}));
  mounts.push_back(Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}));
  mounts.push_back(
      Mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}));
  mounts.push_back(Mount("/dev/shm", "tmpfs", "shm",
                         {"nosuid", "noexec", "nodev", "mode=1777", fmt::format("size={}", in.shm_bytes)}));
  mounts.push_back(Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}));
  mounts.push_back(Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}));
  if (!in.network_none) {
    for (const char* f : {"/etc/resolv.conf", "/etc/hosts"}) {
      mounts.push_back(Mount(f, "bind", f, {"rbind", "ro", "nosuid", "nodev"}));
    }
  }
  for (const BindMount& b : in.binds) {
    std::vector<std::string> o = {"rbind", "nosuid", "nodev"};
    if (b.read_only) o.push_back("ro");
    mounts.push_back(Mount(b.target, "bind", b.source, std::move(o)));
  }

  json namespaces = json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}});
  if (in.network_none) namespaces.push_back({{"type", "network"}});

  json devices = json::array();
  json allowed = json::array({{{"allow", false}, {"access", "rwm"}}});
  for (const DeviceNode& d : in.devices) {
    devices.push_back({{"path", d.path},
                       {"type", std::string(1, d.type)},
                       {"major", d.major},
                       {"minor", d.minor},
                       {"fileMode", d.file_mode},
                       {"uid", 0},
                       {"gid", 0}});
    allowed.push_back(
        {{"allow", true}, {"type", std::string(1, d.type)}, {"major", d.major}, {"minor", d.minor}, {"access", "rwm"}});
  }
  json resources{{"devices", allowed}};
  if (in.memory_bytes > 0) resources["memory"] = {{"limit", in.memory_bytes}};
  json cpu = json::object();
  if (in.cpu_millis > 0) {
    cpu["period"] = kCpuPeriodUs;
    cpu["quota"] = std::max<int64_t>(1000, in.cpu_millis * kCpuPeriodUs / 1000);
  }
  if (!in.cpus.empty()) cpu["cpus"] = FormatCpuList(in.cpus);
  if (!cpu.empty()) resources["cpu"] = cpu;

  json linux{{"namespaces", namespaces},
             {"devices", devices},
             {"resources", resources},
             {"maskedPaths", std::vector<std::string>(std::begin(kMaskedPaths), std::end(kMaskedPaths))},
             {"readonlyPaths", std::vector<std::string>(std::begin(kReadonlyPaths), std::end(kReadonlyPaths))}};
  if (!in.cgroups_path.empty()) linux["cgroupsPath"] = in.cgroups_path;
  if (!in.seccomp_json.empty()) linux["seccomp"] = json::parse(in.seccomp_json);

  json spec{{"ociVersion", "1.0.2"},   {"process", process}, {"root", {{"path", "rootfs"}, {"readonly", false}}},
            {"hostname", in.hostname}, {"mounts", mounts},   {"linux", linux}};
  return spec.dump(1);
}

}  // namespace drover::agent
