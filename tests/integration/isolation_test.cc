// Workload isolation end to end (docs/security.md, "Workload isolation"):
// `drover up` started with secrets in its own environment runs jobs that
// cannot see them; jobs run on the CPUs of their GPUs' NUMA node; where the
// machine allows, each job has its own cgroup v2 group with its limits, and
// where it does not, `drover nodes` says so.
//
// The expected CPU sets come from this machine (the test's own affinity,
// which `drover up` inherits, and sysfs), never from constants: the
// simulated node splits the machine's CPUs between its two NUMA nodes, and
// this machine's node is pinned to its real NUMA node.

#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

using nlohmann::json;

constexpr const char* kSecret = "DROVER_TEST_SECRET=do-not-leak-7f3a";
constexpr const char* kCloudSecret = "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI-not-for-jobs";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "0-3,8" -> {0,1,2,3,8}; the test's own reading, apart from Drover's.
std::set<int> Cpus(const std::string& list) {
  std::set<int> out;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    if (part.empty()) continue;
    size_t dash = part.find('-');
    int first = std::stoi(part.substr(0, dash));
    int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int c = first; c <= last; ++c) out.insert(c);
  }
  return out;
}

std::set<int> OwnCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.insert(c);
  }
  return out;
}

std::set<int> Intersect(const std::set<int>& a, const std::set<int>& b) {
  std::set<int> out;
  for (int c : a) {
    if (b.contains(c)) out.insert(c);
  }
  return out;
}

// "NAME=VALUE" lines -> map.
std::map<std::string, std::string> EnvLines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos && eq > 0) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

// The value after "key" on its line ("Cpus_allowed_list:\t0-1" -> "0-1").
std::string After(const std::string& text, const std::string& key) {
  size_t at = text.find(key);
  if (at == std::string::npos) return "<none>";
  size_t end = text.find('\n', at);
  std::string value =
      text.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
  while (!value.empty() && (value.front() == '\t' || value.front() == ' ')) value.erase(0, 1);
  return value;
}

class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = std::make_unique<DroverUp>(dir_.path() + "/data",
                                     std::vector<std::string>{"--simulate", "1", "--simulate-gpus", "2"});
    // The agent's (and server's) own environment holds secrets.
    up_->SetEnv({kSecret, kCloudSecret});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));  // this machine + sim-1
  }
  void TearDown() override {
    if (up_ && up_->jobs() != nullptr) CancelAllJobs(up_->jobs());
  }
  CommandResult Cli(std::vector<std::string> args) { return RunCli(up_->grpc_address(), std::move(args)); }

  // Submits and returns the job id (first line of the output).
  std::string Submit(std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    CommandResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  std::string Logs(const std::string& id) { return Cli({"logs", id}).out; }

  json Node(const std::string& name) {
    CommandResult r = Cli({"nodes", "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json all = json::parse(r.out);
    for (const json& n : all["nodes"]) {
      if (n["name"] == name) return n;
    }
    ADD_FAILURE() << "no node '" << name << "' in " << r.out;
    return json::object();
  }
  // Proto JSON leaves out zeros: a GPU on NUMA node 0 has no numaNode.
  static int NumaOf(const json& node, int gpu) { return node["gpus"][gpu].value("numaNode", 0); }
  static std::set<int> NumaCpus(const json& node, int numa) {
    return Cpus(node["topology"]["numaCpus"].value(std::to_string(numa), ""));
  }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(IsolationTest, JobSeesOnlyItsSpecDroversAndAllowListedVariables) {
  std::string id = Submit({"--gpu-model", "H100 80GB", "--cpus", "0.5", "--memory", "64Mi", "-e", "MY_VAR=mine", "-e",
                           "DROVER_SIM_LOAD=0.5", "--wait", "--", "env"});
  EXPECT_NE(Cli({"job", id}).out.find("500m CPU, 64MiB of memory per replica"), std::string::npos)
      << Cli({"job", id}).out;
  std::string log = Logs(id);
  std::map<std::string, std::string> env = EnvLines(log);
  // What the agent had and the spec did not give: absent.
  EXPECT_EQ(log.find("do-not-leak"), std::string::npos) << log;
  EXPECT_EQ(log.find("not-for-jobs"), std::string::npos) << log;
  EXPECT_FALSE(env.contains("DROVER_TEST_SECRET"));
  EXPECT_FALSE(env.contains("AWS_SECRET_ACCESS_KEY"));
  // The job's own, Drover's, and the basics.
  EXPECT_EQ(env["MY_VAR"], "mine");
  EXPECT_EQ(env["DROVER_SIM_LOAD"], "0.5");
  EXPECT_EQ(env["DROVER_JOB_ID"], id);
  EXPECT_EQ(env["DROVER_NODE"], "sim-1");
  EXPECT_FALSE(env["CUDA_VISIBLE_DEVICES"].empty()) << log;
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], env["DROVER_GPU_IDS"]);
  EXPECT_FALSE(env["PATH"].empty()) << log;
  // Allow-listed variables of the agent arrive unchanged (drover up has this test's).
  for (const char* name : {"PATH", "HOME", "USER", "LANG", "TZ"}) {
    if (const char* v = std::getenv(name)) {
      EXPECT_EQ(env[name], v) << name;
    }
  }
  // And nothing else.
  const std::set<std::string> allowed = {"MY_VAR", "DROVER_SIM_LOAD", "CUDA_VISIBLE_DEVICES", "PATH", "HOME", "USER",
                                         "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                                         // the launch contract (docs/distributed.md)
                                         "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"};
  // A job of one node: its own.
  EXPECT_EQ(env["WORLD_SIZE"], "1");
  EXPECT_EQ(env["DROVER_NNODES"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], env["DROVER_HOSTS"]);
  for (const auto& [name, value] : env) {
    bool ok =
        allowed.contains(name) || name.starts_with("DROVER_") || name.starts_with("LC_") || name.starts_with("PET_");
    EXPECT_TRUE(ok) << "the job got '" << name << "=" << value << "'";
  }
}

TEST_F(IsolationTest, JobsArePinnedToTheirGpusNumaNode) {
  const std::set<int> own = OwnCpus();
  ASSERT_FALSE(own.empty());
  json sim = Node("sim-1");
  ASSERT_EQ(sim["gpus"].size(), 2u);
  ASSERT_NE(NumaOf(sim, 0), NumaOf(sim, 1)) << "the simulated GPUs sit on two NUMA nodes";
  // The simulated node's NUMA nodes share this machine's CPUs between them.
  std::set<int> n0 = NumaCpus(sim, 0);
  std::set<int> n1 = NumaCpus(sim, 1);
  std::set<int> both = n0;
  both.insert(n1.begin(), n1.end());
  EXPECT_EQ(both, own) << sim["topology"].dump();
  EXPECT_FALSE(n0.empty());
  EXPECT_FALSE(n1.empty());
  if (own.size() >= 2) {
    EXPECT_TRUE(Intersect(n0, n1).empty()) << sim["topology"].dump();
  }

  // One job per GPU, running at once: one on each NUMA node.
  const std::string script =
      "echo gpus=$DROVER_GPU_IDS; echo cpus=$DROVER_CPUS; grep Cpus_allowed_list /proc/self/status; sleep 300";
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) ids.push_back(Submit({"--gpu-model", "H100 80GB", "--", "sh", "-c", script}));
  std::set<int> gpus_seen;
  for (const std::string& id : ids) {
    ASSERT_TRUE(WaitUntil([&] { return Logs(id).find("Cpus_allowed_list") != std::string::npos; })) << Logs(id);
    std::string log = Logs(id);
    int gpu = std::stoi(After(log, "gpus="));
    gpus_seen.insert(gpu);
    std::set<int> expected = Intersect(NumaCpus(sim, NumaOf(sim, gpu)), own);
    EXPECT_EQ(Cpus(After(log, "Cpus_allowed_list:")), expected) << "job " << id << " on GPU " << gpu << ":\n" << log;
    EXPECT_EQ(Cpus(After(log, "cpus=")), expected) << "DROVER_CPUS tells the job its CPUs:\n" << log;
  }
  EXPECT_EQ(gpus_seen, (std::set<int>{0, 1}));
  for (const std::string& id : ids) ASSERT_EQ(Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] {
    return GetJob(up_->jobs(), ids[0]).status().state() == v1::JOB_STATE_CANCELLED &&
           GetJob(up_->jobs(), ids[1]).status().state() == v1::JOB_STATE_CANCELLED;
  }));

  // Both GPUs: both NUMA nodes' CPUs, which is all of them.
  std::string id = Submit(
      {"--gpus", "2", "--gpu-model", "H100 80GB", "--wait", "--", "grep", "Cpus_allowed_list", "/proc/self/status"});
  EXPECT_EQ(Cpus(After(Logs(id), "Cpus_allowed_list:")), own) << Logs(id);
}

TEST_F(IsolationTest, JobOnThisMachinesGpuIsPinnedToItsRealNumaNode) {
  CommandResult r = Cli({"nodes", "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json local;
  json all = json::parse(r.out);
  for (const json& n : all["nodes"]) {
    if (n["name"] != "sim-1") local = n;
  }
  ASSERT_TRUE(local.is_object());
  if (!local.contains("gpus") || local["gpus"].empty()) {
    GTEST_SKIP() << "this machine has no GPU (no OpenCL device) to run a job on";
  }
  const std::set<int> own = OwnCpus();
  int numa = NumaOf(local, 0);
  std::set<int> node_cpus = NumaCpus(local, numa);
  ASSERT_FALSE(node_cpus.empty()) << local["topology"].dump();
  // The agent's NUMA CPU list is the machine's (sysfs), where sysfs has one.
  std::string sysfs = Slurp("/sys/devices/system/node/node" + std::to_string(numa) + "/cpulist");
  if (!sysfs.empty()) {
    EXPECT_EQ(Intersect(node_cpus, own), Intersect(Cpus(sysfs), own)) << sysfs;
  }
  std::string id = Submit({"--gpu-vendor", local["gpus"][0]["vendor"].get<std::string>(), "--wait", "--", "grep",
                           "Cpus_allowed_list", "/proc/self/status"});
  EXPECT_EQ(Cpus(After(Logs(id), "Cpus_allowed_list:")), Intersect(node_cpus, own)) << Logs(id);
}

// The cgroup v2 mount point as this process sees it ("" when none, or when
// it mounts a sub-tree: then the job's /proc/self/cgroup is not a path under it).
std::string Cgroup2Mount() {
  std::stringstream in(Slurp("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    size_t dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::stringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    fields >> id >> parent >> dev >> root >> mount;
    return root == "/" ? mount : "";
  }
  return "";
}

TEST_F(IsolationTest, JobCgroupWhereTheMachineAllowsAndTheReasonWhereNot) {
  json sim = Node("sim-1");
  const json& iso = sim["isolation"];
  ASSERT_TRUE(iso.is_object()) << sim.dump();
  json condition;
  for (const json& c : sim["conditions"]) {
    if (c["type"] == "WorkloadIsolation") condition = c;
  }
  ASSERT_TRUE(condition.is_object()) << sim["conditions"].dump();
  const std::string message = iso.value("message", "");
  EXPECT_EQ(condition.value("message", ""), message);
  EXPECT_NE(message.find("clean environment on"), std::string::npos) << message;
  EXPECT_NE(message.find("CPU pinning on"), std::string::npos) << message;
  EXPECT_TRUE(iso.value("cleanEnvironment", false));
  EXPECT_TRUE(iso.value("cpuPinning", false));
  const bool limits = iso.value("cpuLimits", false) && iso.value("memoryLimits", false);
  if (!condition.value("status", false)) {
    // Said in `drover nodes` too, with the reason.
    CommandResult nodes = Cli({"nodes"});
    EXPECT_NE(nodes.out.find("WorkloadIsolation=False ("), std::string::npos) << nodes.out;
  }
  if (!limits) {
    EXPECT_FALSE(condition.value("status", true));
    EXPECT_NE(message.find("limits off: "), std::string::npos) << "the reason is given: " << message;
  }

  // Where jobs get a group (even without controllers): the job is in it.
  const std::string parent = iso.value("cgroupParent", "");
  if (!parent.empty()) {
    std::string id = Submit({"--gpu-model", "H100 80GB", "--wait", "--", "cat", "/proc/self/cgroup"});
    // The group is named for the workload: the job's first attempt.
    EXPECT_NE(Logs(id).find("0::" + parent + "/" + id + "@1\n"), std::string::npos)
        << "the job runs in its own group under " << parent << ":\n"
        << Logs(id);
  }
  if (!limits) {
    GTEST_SKIP() << "cgroup v2 cpu and memory limits are off on this machine (the node says why: " << message
                 << "); their checks run where the controllers are delegated";
  }
  const std::string mount = Cgroup2Mount();
  ASSERT_FALSE(mount.empty()) << "limits on, but no cgroup2 mount of the whole hierarchy";
  std::string id = Submit({"--gpu-model", "H100 80GB", "--cpus", "0.5", "--memory", "64Mi", "-e", "CG=" + mount,
                           "--wait", "--", "sh", "-c",
                           "p=$(sed -n 's/^0:://p' /proc/self/cgroup); echo \"group=$p\"; "
                           "echo \"cpu.max=$(cat $CG$p/cpu.max)\"; echo \"memory.max=$(cat $CG$p/memory.max)\""});
  std::string log = Logs(id);
  EXPECT_EQ(After(log, "group="), parent + "/" + id) << log;
  EXPECT_EQ(After(log, "cpu.max="), "50000 100000") << log;
  EXPECT_EQ(After(log, "memory.max="), std::to_string(64 << 20)) << log;

  // The memory limit holds: a job that needs more is killed, and told why.
  CommandResult oom = Cli({"submit", "--gpu-model", "H100 80GB", "--memory", "32Mi", "--wait", "--", "sh", "-c",
                           "x=$(head -c 200000000 /dev/zero | tr '\\000' a); echo survived"});
  EXPECT_NE(oom.exit_code, 0);
  std::string oom_id = oom.out.substr(0, oom.out.find('\n'));
  v1::Job job = GetJob(up_->jobs(), oom_id);
  EXPECT_EQ(job.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.status().message().find("out of memory"), std::string::npos) << job.status().message();
  EXPECT_EQ(Logs(oom_id).find("survived"), std::string::npos);
}

}  // namespace
}  // namespace drover::testing
