// The memory-limit shim's part of a job's environment (job_env.h): which
// limit, where the shim is, LD_PRELOAD composed (never dropping the job's
// own), and the reports the agent reads back.

#include "drover/agent/job_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace drover::agent {
namespace {

namespace fs = std::filesystem;

class JobEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("job_env_test." + std::to_string(getpid()) + "." +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    unsetenv("DROVER_CUDA_SHIM");
    fs::remove_all(dir_);
  }
  void Touch(const fs::path& p, const std::string& text = "") {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  fs::path dir_;
};

TEST_F(JobEnvTest, TheLimitComesFromTheShareOrFromTheJobsOwnRequest) {
  EXPECT_EQ(*GpuMemoryLimitOf(int64_t{1} << 30, {}), int64_t{1} << 30);
  // A share's limit wins over what the job says (it cannot raise it).
  EXPECT_EQ(*GpuMemoryLimitOf(int64_t{1} << 30, {{"DROVER_GPU_MEMORY_LIMIT", "99999999999"}}), int64_t{1} << 30);
  EXPECT_EQ(*GpuMemoryLimitOf(0, {{"DROVER_GPU_MEMORY_LIMIT", "4194304"}}), 4194304);
  EXPECT_EQ(*GpuMemoryLimitOf(0, {{"PATH", "/bin"}}), 0);  // none asked
}

TEST_F(JobEnvTest, ALimitBelowOneGranuleOrNotANumberIsRefused) {
  for (const char* bad : {"abc", "", "-4194304", "12MiB", "4194304 "}) {
    Result<int64_t> r = GpuMemoryLimitOf(0, {{"DROVER_GPU_MEMORY_LIMIT", bad}});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("is not a number of bytes"), std::string::npos) << r.status().message();
  }
  Result<int64_t> small = GpuMemoryLimitOf(1 << 20, {});
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), Code::kInvalidArgument);
  EXPECT_NE(small.status().message().find("smaller than one allocation granule"), std::string::npos);
  EXPECT_FALSE(GpuMemoryLimitOf(0, {{"DROVER_GPU_MEMORY_LIMIT", "2097151"}}).ok());
  EXPECT_TRUE(GpuMemoryLimitOf(0, {{"DROVER_GPU_MEMORY_LIMIT", "2097152"}}).ok());
}

TEST_F(JobEnvTest, TheShimGoesFirstAndTheJobsOwnPreloadStays) {
  std::map<std::string, std::string> env = {{"LD_PRELOAD", "/opt/a.so /opt/b.so:/opt/c.so"},
                                            {"DROVER_GPU_MEMORY_LIMIT", "1"}};
  ApplyGpuMemoryLimit(int64_t{1} << 30, "/lib/drover/libdrover_cuda_shim.so", "/run/j/gpu-memory", &env);
  EXPECT_EQ(env["LD_PRELOAD"], "/lib/drover/libdrover_cuda_shim.so:/opt/a.so:/opt/b.so:/opt/c.so");
  EXPECT_EQ(env["DROVER_GPU_MEMORY_LIMIT"], "1073741824");
  EXPECT_EQ(env["DROVER_GPU_MEMORY_REPORT"], "/run/j/gpu-memory");

  // A job that preloads the shim itself gets it once; none gets it alone.
  env = {{"LD_PRELOAD", "/lib/drover/libdrover_cuda_shim.so"}};
  ApplyGpuMemoryLimit(4194304, "/lib/drover/libdrover_cuda_shim.so", "/r", &env);
  EXPECT_EQ(env["LD_PRELOAD"], "/lib/drover/libdrover_cuda_shim.so");
  env.clear();
  ApplyGpuMemoryLimit(4194304, "/s.so", "/r", &env);
  EXPECT_EQ(env["LD_PRELOAD"], "/s.so");
}

TEST_F(JobEnvTest, TheShimIsFoundBesideTheAgentOrWhereConfigured) {
  fs::path exe = dir_ / "bin" / "drover-core";
  Touch(exe);
  Result<std::string> none = FindCudaShim("", exe.string());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
  EXPECT_NE(none.status().message().find("DROVER_CUDA_SHIM"), std::string::npos);

  Touch(dir_ / "lib" / "drover" / "libdrover_cuda_shim.so");
  EXPECT_EQ(*FindCudaShim("", exe.string()), (dir_ / "lib" / "drover" / "libdrover_cuda_shim.so").string());
  Touch(dir_ / "bin" / "libdrover_cuda_shim.so");
  EXPECT_EQ(*FindCudaShim("", exe.string()), (dir_ / "bin" / "libdrover_cuda_shim.so").string());

  Touch(dir_ / "elsewhere.so");
  EXPECT_EQ(*FindCudaShim((dir_ / "elsewhere.so").string(), exe.string()), (dir_ / "elsewhere.so").string());
  EXPECT_EQ(FindCudaShim((dir_ / "missing.so").string(), exe.string()).status().code(), Code::kNotFound);
}

TEST_F(JobEnvTest, AddGpuMemoryLimitSetsEverythingOrNothing) {
  Touch(dir_ / "shim.so");
  setenv("DROVER_CUDA_SHIM", (dir_ / "shim.so").c_str(), 1);
  std::map<std::string, std::string> env = {{"LD_PRELOAD", "/opt/mine.so"}};
  ASSERT_TRUE(AddGpuMemoryLimit(int64_t{1} << 30, (dir_ / "report").string(), &env).ok());
  EXPECT_EQ(env["LD_PRELOAD"], (dir_ / "shim.so").string() + ":/opt/mine.so");
  EXPECT_TRUE(fs::is_directory(dir_ / "report"));

  // A bad limit: an error, and the environment as it was.
  std::map<std::string, std::string> bad = {{"LD_PRELOAD", "/opt/mine.so"}};
  Status s = AddGpuMemoryLimit(1000, (dir_ / "report2").string(), &bad);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(bad, (std::map<std::string, std::string>{{"LD_PRELOAD", "/opt/mine.so"}}));

  // No limit: nothing changes and no shim is needed.
  unsetenv("DROVER_CUDA_SHIM");
  std::map<std::string, std::string> plain = {{"PATH", "/bin"}};
  EXPECT_TRUE(AddGpuMemoryLimit(0, (dir_ / "report3").string(), &plain).ok());
  EXPECT_EQ(plain.size(), 1u);
  EXPECT_FALSE(fs::exists(dir_ / "report3"));

  // A limit but no shim anywhere: the job must not start.
  setenv("DROVER_CUDA_SHIM", (dir_ / "gone.so").c_str(), 1);
  EXPECT_EQ(AddGpuMemoryLimit(int64_t{1} << 30, (dir_ / "report4").string(), &plain).code(), Code::kNotFound);
}

TEST_F(JobEnvTest, ReportsOfLiveProcessesAreSummed) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  fs::path r = dir_ / "gpu-memory";
  Touch(r / std::to_string(getpid()), "1048576\n");
  Touch(r / std::to_string(getppid()), "2048\n");
  Touch(r / std::to_string(dead), "999999\n");  // died without removing it: not counted
  Touch(r / ".123.tmp", "5\n");                 // a report being written
  Touch(r / "notes", "7\n");
  EXPECT_EQ(ReadGpuMemoryReports(r.string()), 1048576 + 2048);
  EXPECT_EQ(ReadGpuMemoryReports((dir_ / "none").string()), 0);
}

// A sandboxed job's shim names its report by the pid of the job's own PID
// namespace (2 here, under the namespace's first process): the agent reads
// it as the node's pid, and the same name outside the job is no report.
TEST_F(JobEnvTest, ReportsFromAJobsOwnPidNamespaceAreReadAsTheNodesPids) {
  if (::geteuid() != 0) GTEST_SKIP() << "a PID namespace needs root";
  const fs::path r = dir_ / "gpu-memory";
  fs::create_directories(r);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  // The first process of a new PID namespace (clone as fork, with the flag).
  const pid_t leader =
      static_cast<pid_t>(::syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  ASSERT_GE(leader, 0) << std::strerror(errno);
  if (leader == 0) {
    if (::fork() == 0) {  // pid 2 in the namespace: writes its report as the shim does, then waits
      std::string path = r.string() + "/" + std::to_string(::getpid());
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      (void)!::write(fd, "4096\n", 5);
      ::close(fd);
      (void)!::write(ready[1], "x", 1);
      ::pause();
    }
    ::pause();  // the namespace ends with its first process
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_TRUE(fs::exists(r / "2"));
  std::ifstream children("/proc/" + std::to_string(leader) + "/task/" + std::to_string(leader) + "/children");
  int64_t worker = 0;
  ASSERT_TRUE(children >> worker);
  EXPECT_EQ(ReadGpuMemoryReportsByPid(r.string(), leader), (std::map<int64_t, int64_t>{{worker, 4096}}));
  auto pids = NamespacePids(leader);
  ASSERT_TRUE(pids.has_value());
  EXPECT_EQ(*pids, (std::map<int64_t, int64_t>{{1, leader}, {2, worker}}));
  EXPECT_FALSE(NamespacePids(::getpid()).has_value()) << "this process's own namespace needs no translation";
  ::kill(leader, SIGKILL);
  ASSERT_EQ(::waitpid(leader, nullptr, 0), leader);
  EXPECT_TRUE(ReadGpuMemoryReportsByPid(r.string(), leader).empty()) << "the job is gone, and so is its report";
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(JobEnvTest, ReportsBecomeTheGpusProcessesWhereTheVendorNamesNone) {
  Touch(dir_ / "a" / std::to_string(getpid()), "4194304\n");
  Touch(dir_ / "b" / std::to_string(getppid()), "1024\n");
  std::vector<ShimReport> jobs = {
      {"j-000001", (dir_ / "a").string()}, {"j-000002", (dir_ / "b").string()}, {"j-000003", (dir_ / "none").string()}};
  v1::GpuTelemetry t;
  AddGpuMemoryReports(jobs, &t);
  EXPECT_TRUE(t.processes_known());
  ASSERT_EQ(t.processes_size(), 2);
  EXPECT_EQ(t.processes(0).job_id(), "j-000001");
  EXPECT_EQ(t.processes(0).pid(), getpid());
  EXPECT_EQ(t.processes(0).memory_bytes(), 4194304);
  EXPECT_EQ(t.processes(1).job_id(), "j-000002");

  // A vendor's own list stands (it counts the context too).
  v1::GpuTelemetry vendor;
  vendor.set_processes_known(true);
  vendor.add_processes()->set_memory_bytes(7);
  AddGpuMemoryReports(jobs, &vendor);
  EXPECT_EQ(vendor.processes_size(), 1);

  // No reports: still unknown.
  v1::GpuTelemetry empty;
  AddGpuMemoryReports({{"j-000003", (dir_ / "none").string()}}, &empty);
  EXPECT_FALSE(empty.processes_known());
  EXPECT_EQ(empty.processes_size(), 0);
}

// ---- the launch contract (docs/distributed.md) ----

v1::LaunchContract TwoReplicas(int rank) {
  v1::LaunchContract c;
  c.set_node_rank(rank);
  c.set_nnodes(2);
  c.set_master_addr("10.0.0.1");
  c.set_master_port(29400);
  for (const char* h : {"10.0.0.1", "10.0.0.2"}) c.add_hosts(h);
  for (const char* n : {"node-a", "node-b"}) c.add_nodes(n);
  return c;
}

TEST(LaunchEnvTest, EveryReplicaGetsDroversAndTheFrameworksNames) {
  auto env = LaunchEnv(TwoReplicas(1), "/jobs/j-000007.1/hostfile", "veth1", {});
  const std::map<std::string, std::string> want = {
      {"DROVER_NODE_RANK", "1"},
      {"DROVER_NNODES", "2"},
      {"DROVER_MASTER_ADDR", "10.0.0.1"},
      {"DROVER_MASTER_PORT", "29400"},
      {"DROVER_HOSTS", "10.0.0.1,10.0.0.2"},
      {"DROVER_HOSTFILE", "/jobs/j-000007.1/hostfile"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29400"},
      {"WORLD_SIZE", "2"},
      {"NODE_RANK", "1"},
      {"RANK", "1"},
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"PET_NNODES", "2"},
      {"PET_NODE_RANK", "1"},
      {"PET_MASTER_ADDR", "10.0.0.1"},
      {"PET_MASTER_PORT", "29400"},
      {"PET_NPROC_PER_NODE", "1"},
      {"NCCL_SOCKET_IFNAME", "veth1"},
      {"GLOO_SOCKET_IFNAME", "veth1"},
  };
  EXPECT_EQ(env, want);
}

TEST(LaunchEnvTest, TheJobsOwnFrameworkSettingsWinButDroversNamesDoNot) {
  auto env = LaunchEnv(TwoReplicas(0), "", "", {{"NCCL_SOCKET_IFNAME", "ib0"}, {"MASTER_PORT", "1234"}});
  EXPECT_FALSE(env.contains("NCCL_SOCKET_IFNAME"));
  EXPECT_FALSE(env.contains("GLOO_SOCKET_IFNAME"));  // no interface known: none set
  EXPECT_FALSE(env.contains("MASTER_PORT"));
  EXPECT_FALSE(env.contains("DROVER_HOSTFILE"));
  EXPECT_EQ(env.at("DROVER_MASTER_PORT"), "29400");
  EXPECT_EQ(env.at("PET_MASTER_PORT"), "29400");
}

TEST(LaunchEnvTest, AWorkloadWithoutAContractIsAJobOfItsOwn) {
  v1::Workload w;
  v1::LaunchContract c = LaunchContractOf(w, "node-a", "10.0.0.1");
  EXPECT_EQ(c.nnodes(), 1);
  EXPECT_EQ(c.master_addr(), "10.0.0.1");
  auto env = LaunchEnv(c, "", "", {});
  EXPECT_EQ(env.at("WORLD_SIZE"), "1");
  EXPECT_EQ(env.at("DROVER_HOSTS"), "10.0.0.1");
  EXPECT_FALSE(env.contains("MASTER_PORT"));  // the server reserved none
  // One the server sent is taken as it is.
  *w.mutable_launch() = TwoReplicas(1);
  EXPECT_EQ(LaunchContractOf(w, "node-b", "10.0.0.2").node_rank(), 1);
}

TEST(LaunchEnvTest, TheHostsFileNamesNodesAndReplicasAndTheHostfileReplicas) {
  v1::LaunchContract c = TwoReplicas(0);
  c.set_hosts(1, "10.0.0.1");  // both replicas on one machine
  c.set_nodes(1, "node-a");
  EXPECT_EQ(LaunchHostsFile(c, "j-000007", "10.0.0.1", "box"),
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            "10.0.0.1\tj-000007-r0\tnode-a\n10.0.0.1\tj-000007-r1\n10.0.0.1\tbox\n");
  EXPECT_EQ(LaunchHostfile(c, "j-000007"), "j-000007-r0 slots=1\nj-000007-r1 slots=1\n");
  // A machine named as a node is not named twice.
  EXPECT_EQ(LaunchHostsFile(TwoReplicas(0), "j-1", "10.0.0.1", "node-a"),
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            "10.0.0.1\tj-1-r0\tnode-a\n10.0.0.2\tj-1-r1\tnode-b\n");
}

TEST(LaunchEnvTest, TheInterfaceOfAnAddressIsFound) {
  EXPECT_EQ(InterfaceWithAddress("127.0.0.1"), "lo");
  EXPECT_EQ(InterfaceWithAddress("not-an-address"), "");
  EXPECT_EQ(InterfaceWithAddress("192.0.2.123"), "");  // TEST-NET-1: on no interface here
}

}  // namespace
}  // namespace drover::agent
