#include "drover/agent/isolation.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "drover/agent/cgroup.h"
#include "drover/agent/device_filter.h"

namespace drover::agent {

bool NodeIsolation::cpu_limits() const {
  return std::find(controllers.begin(), controllers.end(), "cpu") != controllers.end();
}

bool NodeIsolation::memory_limits() const {
  return std::find(controllers.begin(), controllers.end(), "memory") != controllers.end();
}

std::string IsolationMessage(const NodeIsolation& iso, const std::string& cgroup_problem,
                             const std::string& device_problem, const std::string& pinning_problem) {
  std::vector<std::string> off;
  std::vector<std::string> on;
  auto why = [](const std::string& problem) { return problem.empty() ? std::string() : ": " + problem; };
  if (iso.cpu_limits() && iso.memory_limits()) {
    on.push_back("cpu and memory limits on (cgroup v2)");
  } else if (iso.cpu_limits() || iso.memory_limits()) {
    on.push_back(fmt::format("{} limits on (cgroup v2)", iso.cpu_limits() ? "cpu" : "memory"));
    off.push_back(fmt::format("{} limits off{}", iso.cpu_limits() ? "memory" : "cpu", why(cgroup_problem)));
  } else {
    off.push_back("cpu and memory limits off" + why(cgroup_problem));
  }
  (iso.device_limits ? on : off)
      .push_back(iso.device_limits ? "device limits on" : "device limits off" + why(device_problem));
  (iso.cpu_pinning ? on : off).push_back(iso.cpu_pinning ? "CPU pinning on" : "CPU pinning off" + why(pinning_problem));
  (iso.clean_environment ? on : off)
      .push_back(iso.clean_environment ? "clean environment on" : "clean environment off");
  off.insert(off.end(), on.begin(), on.end());
  return fmt::format("{}", fmt::join(off, "; "));
}

NodeIsolation ProbeNodeIsolation(const std::string& group_name, const std::string& pinning_problem) {
  NodeIsolation iso;
  iso.cpu_pinning = pinning_problem.empty();
  const CgroupHome& home = ProcessCgroupHome();
  std::string cgroup_problem = home.problem;
  std::string device_problem;
  if (home.dir.empty()) {
    device_problem = "jobs get no cgroup";
  } else {
    std::vector<std::string> controllers;
    if (home.cpu) controllers.push_back("cpu");
    if (home.memory) controllers.push_back("memory");
    std::string parent = home.dir + "/" + group_name;
    if (Status s = EnsureAgentCgroup(parent, controllers); !s.ok()) {
      cgroup_problem = s.message();
      device_problem = "jobs get no cgroup";
    } else {
      iso.cgroup_parent = parent;
      iso.cgroup_parent_path = CgroupPath(home.mount, parent);
      iso.controllers = controllers;
      Status d = ProbeDeviceFilter(parent);
      iso.device_limits = d.ok();
      device_problem = d.message();
      ::rmdir(parent.c_str());  // made again by the first job's supervisor
    }
  }
  iso.message = IsolationMessage(iso, cgroup_problem, device_problem, pinning_problem);
  return iso;
}

}  // namespace drover::agent
