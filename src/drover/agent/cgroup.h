#pragma once
// cgroup v2 groups for jobs (docs/security.md, "Workload isolation").
//
// Layout, under the cgroup H the agent's process was started in:
//
//   H/                             cpu and memory enabled for its children
//   H/drover-agent/                the agent's process, moved here when it
//                                  was alone in H (a group that enables
//                                  controllers for its children may hold no
//                                  process itself)
//   H/drover-<node>-<tag>/         one per agent (tag: its data directory);
//                                  exists while it has jobs
//   H/drover-<node>-<tag>/<key>/   one job: cpu.max, memory.max, a device
//                                  program; removed when the job ends
//
// What the machine allows is found once per process (ProcessCgroupHome):
// no cgroup v2 mount, a read-only one, no cpu or memory controller
// delegated to H, or H shared with other processes each turn a part off,
// and the rest still works. Groups without controllers still carry a device
// program and let the supervisor kill what a job leaves behind.
//
// The pure parts (parsing mountinfo, /proc/<pid>/cgroup, cgroup.controllers,
// memory.events; computing cpu.max) are separate functions for tests.
// Thread-safety: free functions; ProcessCgroupHome is computed once, safely.

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "drover/agent/device_filter.h"
#include "drover/common/status.h"

namespace drover::agent {

// cpu.max's period: 100 ms, the kernel's default.
inline constexpr int64_t kCpuPeriodUs = 100'000;

// The cgroup2 file system as /proc/self/mountinfo lists it.
struct CgroupMount {
  std::string mount_point;  // "/sys/fs/cgroup" ("/sys/fs/cgroup/unified" on hybrid machines)
  std::string root;         // the hierarchy path mounted there, normally "/"
};

// The first cgroup2 mount in a /proc/<pid>/mountinfo text (octal escapes
// such as \040 decoded); nullopt when there is none.
std::optional<CgroupMount> FindCgroup2Mount(std::string_view mountinfo);

// The cgroup v2 path ("0::/a/b" -> "/a/b") in a /proc/<pid>/cgroup text.
std::optional<std::string> CgroupV2Path(std::string_view proc_cgroup);

// The directory of hierarchy path `path` under `mount`; empty when `path`
// is not under the mount's root. ({"/sys/fs/cgroup", "/"}, "/a") ->
// "/sys/fs/cgroup/a".
std::string CgroupDir(const CgroupMount& mount, std::string_view path);

// The hierarchy path of directory `dir` (CgroupDir's inverse), as
// /proc/<pid>/cgroup writes it; empty when `dir` is not under the mount.
std::string CgroupPath(const CgroupMount& mount, std::string_view dir);

// "cpu io memory pids\n" -> {cpu, io, memory, pids}.
std::set<std::string> ParseControllers(std::string_view text);

// cpu.max for `cpu_millis` thousandths of a CPU: "<quota> <period>" in
// microseconds, the quota at least the kernel's 1 ms. 500 -> "50000 100000";
// 2000 -> "200000 100000"; 0 -> "max 100000".
std::string CpuMax(int64_t cpu_millis, int64_t period_us = kCpuPeriodUs);

// The oom_kill count in a memory.events text; 0 when absent.
int64_t OomKills(std::string_view memory_events);

// What this process may do with cgroup v2, found once (see the layout).
struct CgroupHome {
  CgroupMount mount;
  std::string dir;   // H, where agent groups go; empty: jobs get no group
  bool cpu = false;  // enabled for H's children
  bool memory = false;
  std::string problem;  // why a part is off, in words; empty when none is
};
const CgroupHome& ProcessCgroupHome();

// One job's group as the agent plans it (isolation.json) and the
// supervisor makes it.
struct JobCgroup {
  std::string parent;                    // the agent's group, made on demand
  std::string dir;                       // parent/<workload key>
  std::vector<std::string> controllers;  // enabled in parent: "cpu", "memory"
  int64_t cpu_millis = 0;                // cpu.max; 0: no limit
  int64_t memory_bytes = 0;              // memory.max; 0: no limit
  std::vector<DeviceRule> deny_devices;  // device files the job may not open
};

// Makes the agent's group `parent` (when missing) with `controllers`
// enabled for its children.
Status EnsureAgentCgroup(const std::string& parent, const std::vector<std::string>& controllers);

// Makes the job's group with its limits and device program. A group of
// that name left behind is emptied and made again.
Status CreateJobCgroup(const JobCgroup& group);

// Kills whatever is left in the group `dir` (a job's background processes),
// waits up to `wait` for it to go, removes the group, then `parent` when it
// is empty (`parent` may be empty: left alone). Best effort.
void RemoveJobCgroup(const std::string& dir, const std::string& parent, std::chrono::milliseconds wait);

}  // namespace drover::agent
