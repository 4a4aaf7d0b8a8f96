// Workload isolation helpers: the job environment's allow-list, parsing what
// the kernel says of cgroups (mountinfo, /proc/<pid>/cgroup, controllers,
// memory.events), cpu.max, GPU device files, the node's isolation message;
// then, where this machine allows (root, cgroup v2, CAP_BPF), real groups
// and a real device program. Those skip themselves and say why.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <thread>

#include "drover/agent/cgroup.h"
#include "drover/agent/device_filter.h"
#include "drover/agent/isolation.h"
#include "drover/agent/job_env.h"

namespace drover::agent {
namespace {

namespace fs = std::filesystem;
using Env = std::map<std::string, std::string>;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- the environment ----

TEST(JobEnvTest, AllowListNamesAndPrefixes) {
  std::vector<std::string> allow = {"PATH", "LC_*", "NCCL_*"};
  EXPECT_TRUE(EnvAllowed("PATH", allow));
  EXPECT_TRUE(EnvAllowed("LC_ALL", allow));
  EXPECT_TRUE(EnvAllowed("NCCL_DEBUG", allow));
  EXPECT_FALSE(EnvAllowed("PATHX", allow));
  EXPECT_FALSE(EnvAllowed("XPATH", allow));
  EXPECT_FALSE(EnvAllowed("LC", allow));
  EXPECT_FALSE(EnvAllowed("AWS_SECRET_ACCESS_KEY", kDefaultEnvAllowList));
  EXPECT_FALSE(EnvAllowed("DROVER_TOKEN", kDefaultEnvAllowList));
  EXPECT_FALSE(EnvAllowed("LD_PRELOAD", kDefaultEnvAllowList));
  EXPECT_TRUE(EnvAllowed("HOME", kDefaultEnvAllowList));
  EXPECT_TRUE(EnvAllowed("LC_CTYPE", kDefaultEnvAllowList));
}

TEST(JobEnvTest, OnlyAllowListedAgentVariablesReachTheJob) {
  Env agent = {{"PATH", "/agent/bin"},        {"HOME", "/root"},   {"AWS_SECRET_ACCESS_KEY", "s3cr3t"},
               {"DROVER_TOKEN", "drv_admin"}, {"LANG", "C.UTF-8"}, {"LD_PRELOAD", "/evil.so"},
               {"DROVER_SIM_LOAD", "0.1"}};
  Env job = {{"MY_VAR", "mine"}, {"HOME", "/job-home"}, {"DROVER_SIM_LOAD", "0.5"}};
  Env drover = {{"DROVER_JOB_ID", "j-000001"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  Env env = BuildJobEnv(agent, kDefaultEnvAllowList, job, drover);
  EXPECT_EQ(env, (Env{{"PATH", "/agent/bin"},
                      {"HOME", "/job-home"},  // the job's own wins over the agent's
                      {"LANG", "C.UTF-8"},
                      {"MY_VAR", "mine"},
                      {"DROVER_SIM_LOAD", "0.5"},  // the job's word, not the agent's
                      {"DROVER_JOB_ID", "j-000001"},
                      {"CUDA_VISIBLE_DEVICES", "0,1"}}));
}

TEST(JobEnvTest, DroverVariablesWinAndPathHasADefault) {
  Env env =
      BuildJobEnv({}, kDefaultEnvAllowList, {{"DROVER_JOB_ID", "forged"}, {"A", "1"}}, {{"DROVER_JOB_ID", "j-000002"}});
  EXPECT_EQ(env.at("DROVER_JOB_ID"), "j-000002");
  EXPECT_EQ(env.at("PATH"), kDefaultPath);
  EXPECT_EQ(env.at("A"), "1");
  EXPECT_EQ(env.size(), 3u);
  // A job may set its own PATH.
  EXPECT_EQ(BuildJobEnv({{"PATH", "/a"}}, kDefaultEnvAllowList, {{"PATH", "/b"}}, {}).at("PATH"), "/b");
}

TEST(JobEnvTest, EnvMapSplitsAtTheFirstEquals) {
  const char* environ[] = {"A=1", "B=x=y", "EMPTY=", "NOEQUALS", "=nameless", nullptr};
  EXPECT_EQ(EnvMap(environ), (Env{{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}}));
  EXPECT_TRUE(EnvMap(nullptr).empty());
}

// ---- what the kernel says of cgroups ----

// This development machine: cgroup v1 controllers, cgroup2 beside them.
constexpr std::string_view kHybridMountinfo =
    "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(CgroupTest, FindsTheCgroup2Mount) {
  auto hybrid = FindCgroup2Mount(kHybridMountinfo);
  ASSERT_TRUE(hybrid);
  EXPECT_EQ(hybrid->mount_point, "/sys/fs/cgroup/unified");
  EXPECT_EQ(hybrid->root, "/");
  // Unified, with optional fields before the separator.
  auto unified = FindCgroup2Mount(
      "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 master:1 - cgroup2 cgroup2 "
      "rw,nsdelegate,memory_recursiveprot\n");
  ASSERT_TRUE(unified);
  EXPECT_EQ(unified->mount_point, "/sys/fs/cgroup");
  // A bind mount of a sub-tree, with an escaped space.
  auto sub = FindCgroup2Mount("50 1 0:26 /system.slice/x /mnt/cg\\040here rw - cgroup2 none rw\n");
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->mount_point, "/mnt/cg here");
  EXPECT_EQ(sub->root, "/system.slice/x");
  EXPECT_FALSE(FindCgroup2Mount("31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"));
  EXPECT_FALSE(FindCgroup2Mount(""));
  EXPECT_FALSE(FindCgroup2Mount("garbage\n- cgroup2\n"));
}

TEST(CgroupTest, ProcCgroupPath) {
  EXPECT_EQ(CgroupV2Path("12:cpu:/a\n0::/user.slice/session-1.scope\n"), "/user.slice/session-1.scope");
  EXPECT_EQ(CgroupV2Path("0::/\n"), "/");
  EXPECT_FALSE(CgroupV2Path("4:memory:/x\n"));
}

TEST(CgroupTest, DirectoriesAndPaths) {
  CgroupMount root{"/sys/fs/cgroup", "/"};
  EXPECT_EQ(CgroupDir(root, "/"), "/sys/fs/cgroup");
  EXPECT_EQ(CgroupDir(root, "/a/b"), "/sys/fs/cgroup/a/b");
  EXPECT_EQ(CgroupPath(root, "/sys/fs/cgroup/a/b"), "/a/b");
  EXPECT_EQ(CgroupPath(root, "/sys/fs/cgroup"), "/");
  EXPECT_EQ(CgroupPath(root, "/sys/fs/cgroupx/a"), "");
  CgroupMount sub{"/mnt/cg", "/system.slice/x"};
  EXPECT_EQ(CgroupDir(sub, "/system.slice/x/job"), "/mnt/cg/job");
  EXPECT_EQ(CgroupDir(sub, "/system.slice/x"), "/mnt/cg");
  EXPECT_EQ(CgroupDir(sub, "/system.slice/xy"), "");
  EXPECT_EQ(CgroupDir(sub, "/other"), "");
  EXPECT_EQ(CgroupPath(sub, "/mnt/cg/job"), "/system.slice/x/job");
}

TEST(CgroupTest, ControllersCpuMaxAndOomKills) {
  EXPECT_EQ(ParseControllers("cpuset cpu io memory pids\n"),
            (std::set<std::string>{"cpuset", "cpu", "io", "memory", "pids"}));
  EXPECT_TRUE(ParseControllers("\n").empty());
  EXPECT_EQ(CpuMax(500), "50000 100000");
  EXPECT_EQ(CpuMax(2000), "200000 100000");
  EXPECT_EQ(CpuMax(1500), "150000 100000");
  EXPECT_EQ(CpuMax(1), "1000 100000");  // the kernel's minimum quota
  EXPECT_EQ(CpuMax(0), "max 100000");
  EXPECT_EQ(CpuMax(250, 1'000'000), "250000 1000000");
  EXPECT_EQ(OomKills("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n"), 2);
  EXPECT_EQ(OomKills("low 0\n"), 0);
  EXPECT_EQ(OomKills(""), 0);
}

// ---- GPU device files ----

TEST(DeviceFilterTest, NvidiaMinorAndDeviceFilesFromProcAndSys) {
  EXPECT_EQ(NvidiaDeviceMinor("Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 180\nDevice Minor: \t 3\n"), 3);
  EXPECT_EQ(NvidiaDeviceMinor("Model: x\n"), -1);
  std::string root = ::testing::TempDir() + "/gpu-files-" + std::to_string(::getpid());
  fs::create_directories(root + "/proc/driver/nvidia/gpus/0000:3b:00.0");
  std::ofstream(root + "/proc/driver/nvidia/gpus/0000:3b:00.0/information") << "Device Minor: \t 5\n";
  fs::create_directories(root + "/sys/bus/pci/devices/0000:3b:00.0/drm/card1");
  fs::create_directories(root + "/sys/bus/pci/devices/0000:3b:00.0/drm/renderD129");
  fs::create_directories(root + "/sys/bus/pci/devices/0000:c1:00.0/drm/renderD128");
  // Any spelling of the bus id (NVML's 8-digit domain, upper case).
  EXPECT_EQ(GpuDeviceFiles("00000000:3B:00.0", root + "/proc", root + "/sys"),
            (std::vector<std::string>{"/dev/nvidia5", "/dev/dri/card1", "/dev/dri/renderD129"}));
  EXPECT_EQ(GpuDeviceFiles("c1:00.0", root + "/proc", root + "/sys"),
            (std::vector<std::string>{"/dev/dri/renderD128"}));
  EXPECT_TRUE(GpuDeviceFiles("", root + "/proc", root + "/sys").empty());
  EXPECT_TRUE(GpuDeviceFiles("0000:10:00.0", root + "/proc", root + "/sys").empty());  // simulated
  fs::remove_all(root);
  auto null = DeviceRuleOf("/dev/null");
  ASSERT_TRUE(null);
  EXPECT_EQ(*null, (DeviceRule{'c', 1, 3}));
  EXPECT_FALSE(DeviceRuleOf("/etc/hostname"));
  EXPECT_FALSE(DeviceRuleOf("/dev/does-not-exist"));
}

// ---- the node's report ----

TEST(IsolationTest, MessageListsWhatIsOffFirst) {
  NodeIsolation none;
  none.cpu_pinning = true;
  EXPECT_EQ(IsolationMessage(none, "no cgroup v2 delegation", "jobs get no cgroup", ""),
            "cpu and memory limits off: no cgroup v2 delegation; device limits off: jobs get no cgroup; "
            "CPU pinning on; clean environment on");
  NodeIsolation all;
  all.controllers = {"cpu", "memory"};
  all.device_limits = true;
  all.cpu_pinning = true;
  EXPECT_EQ(IsolationMessage(all, "", "", ""),
            "cpu and memory limits on (cgroup v2); device limits on; CPU pinning on; clean environment on");
  NodeIsolation cpu_only = all;
  cpu_only.controllers = {"cpu"};
  cpu_only.cpu_pinning = false;
  EXPECT_EQ(IsolationMessage(cpu_only, "memory not delegated", "", "no NUMA CPUs"),
            "memory limits off: memory not delegated; CPU pinning off: no NUMA CPUs; cpu limits on (cgroup v2); "
            "device limits on; clean environment on");
}

// ---- on this machine, where it allows ----

// A group of this test's own under the process's cgroup home; skips the
// test (with the reason) where jobs would get no group.
class LiveCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CgroupHome& home = ProcessCgroupHome();
    if (home.dir.empty()) GTEST_SKIP() << "jobs get no cgroup on this machine: " << home.problem;
    parent_ = home.dir + "/drover-isolation-test-" + std::to_string(::getpid());
    dir_ = parent_ + "/job";
  }
  void TearDown() override {
    if (!parent_.empty()) RemoveJobCgroup(dir_, parent_, std::chrono::seconds(5));
  }
  // Forks a child that joins `dir`, runs `body` and exits with its result.
  int InGroup(const std::string& dir, const std::function<int()>& body) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY);
      if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(100);
      ::close(fd);
      ::_exit(body());
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string parent_, dir_;
};

TEST_F(LiveCgroupTest, DeviceProgramRefusesOnlyTheListedDevices) {
  ASSERT_TRUE(EnsureAgentCgroup(parent_, {}).ok());
  if (Status s = ProbeDeviceFilter(parent_); !s.ok()) GTEST_SKIP() << s.message();
  auto zero = DeviceRuleOf("/dev/zero");
  ASSERT_TRUE(zero);
  JobCgroup g{parent_, dir_, {}, 0, 0, {*zero}};
  ASSERT_TRUE(CreateJobCgroup(g).ok());
  int rc = InGroup(dir_, [] {
    int z = ::open("/dev/zero", O_RDONLY);
    if (z >= 0 || errno != EPERM) return 1;
    int n = ::open("/dev/null", O_RDONLY);
    return n >= 0 ? 0 : 2;
  });
  EXPECT_EQ(rc, 0) << "1: /dev/zero opened in the group; 2: /dev/null refused; 100: could not join";
}

TEST_F(LiveCgroupTest, LimitsAreWrittenWhereDelegated) {
  const CgroupHome& home = ProcessCgroupHome();
  if (!home.cpu || !home.memory) GTEST_SKIP() << "cpu and memory are not delegated here: " << home.problem;
  JobCgroup g{parent_, dir_, {"cpu", "memory"}, 500, 64 << 20, {}};
  ASSERT_TRUE(CreateJobCgroup(g).ok());
  EXPECT_EQ(Slurp(dir_ + "/cpu.max"), "50000 100000\n");
  EXPECT_EQ(Slurp(dir_ + "/memory.max"), std::to_string(64 << 20) + "\n");
}

TEST_F(LiveCgroupTest, RemovingTheGroupKillsWhatIsLeftInIt) {
  JobCgroup g{parent_, dir_, {}, 0, 0, {}};
  ASSERT_TRUE(CreateJobCgroup(g).ok());
  int joined[2];
  ASSERT_EQ(::pipe(joined), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open((dir_ + "/cgroup.procs").c_str(), O_WRONLY);
    if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(100);
    if (::write(joined[1], "j", 1) != 1) ::_exit(101);  // now in the group
    ::pause();
    ::_exit(0);
  }
  ::close(joined[1]);
  // Wait until the child is in the group (it says so), then remove it.
  char byte = 0;
  ASSERT_EQ(::read(joined[0], &byte, 1), 1) << "the child could not join the group";
  ::close(joined[0]);
  RemoveJobCgroup(dir_, parent_, std::chrono::seconds(5));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_FALSE(fs::exists(dir_));
  EXPECT_FALSE(fs::exists(parent_));  // the last job's group took the agent's group with it
}

TEST(IsolationLiveTest, ProbeReportsEveryPart) {
  NodeIsolation iso = ProbeNodeIsolation("drover-probe-test-" + std::to_string(::getpid()), "");
  EXPECT_TRUE(iso.cpu_pinning);
  EXPECT_TRUE(iso.clean_environment);
  EXPECT_NE(iso.message.find("cpu"), std::string::npos) << iso.message;
  EXPECT_NE(iso.message.find("device limits"), std::string::npos) << iso.message;
  EXPECT_NE(iso.message.find("clean environment on"), std::string::npos) << iso.message;
  if (!iso.cgroup_parent.empty()) {
    EXPECT_FALSE(fs::exists(iso.cgroup_parent)) << "the probe leaves no group behind";
    EXPECT_EQ(CgroupDir(ProcessCgroupHome().mount, iso.cgroup_parent_path), iso.cgroup_parent);
  }
  std::cout << "this machine: " << iso.message << "\n";
}

}  // namespace
}  // namespace drover::agent
