// NeverFits remembers its answer per request shape; these tests change the
// node set under it and check that the answer follows.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "drover/sched/scheduler.h"

namespace drover::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// `gpus` GPUs of `model`, NVLink islands of `island`, two NUMA halves.
NodeInfo Node(const std::string& name, int gpus, int island = 8, const std::string& model = "H100 80GB") {
  NodeInfo n;
  n.name = name;
  n.schedulable = true;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back(GpuInfo{i, "nvidia", model, 80 * kGiB, true, i < gpus / 2 ? 0 : 1});
  n.links.assign(static_cast<size_t>(gpus) * gpus, Link::kCrossSocket);
  for (int i = 0; i < gpus; ++i) {
    for (int j = 0; j < gpus; ++j) {
      if (i / island == j / island) n.links[static_cast<size_t>(i) * gpus + j] = Link::kFabric;
    }
  }
  return n;
}

JobRequest Job(int gpus, int replicas = 1, Topology topology = Topology::kBestEffort) {
  JobRequest j;
  j.id = "j";
  j.gpus = gpus;
  j.replicas = replicas;
  j.topology = topology;
  return j;
}

TEST(NeverFitsTest, ANodeAddedOrShrunkChangesTheAnswer) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(Node("a", 8)).ok());
  const std::string never = "no node has 16 GPUs (the most any node has is 8)";
  EXPECT_EQ(s.NeverFits(Job(16)).value_or(""), never);
  EXPECT_EQ(s.NeverFits(Job(16)).value_or(""), never);  // the remembered answer
  ASSERT_TRUE(s.UpsertNode(Node("b", 16)).ok());
  EXPECT_FALSE(s.NeverFits(Job(16)).has_value());
  EXPECT_FALSE(s.NeverFits(Job(16)).has_value());
  ASSERT_TRUE(s.UpsertNode(Node("b", 8)).ok());  // b shrinks again
  EXPECT_EQ(s.NeverFits(Job(16)).value_or(""), never);
}

TEST(NeverFitsTest, LabelsModelsAndHostCapacityChangeTheAnswer) {
  Scheduler s;
  NodeInfo a = Node("a", 8);
  NodeInfo b = Node("b", 8);
  a.labels["switch"] = "s0";
  b.labels["switch"] = "s1";
  ASSERT_TRUE(s.UpsertNode(a).ok());
  ASSERT_TRUE(s.UpsertNode(b).ok());

  // A switch gang: two nodes, but under two switches.
  JobRequest gang = Job(8, 2, Topology::kSwitch);
  EXPECT_EQ(s.NeverFits(gang).value_or(""), "no switch holds 2 replicas x 8 GPUs (the most is 1)");
  b.labels["switch"] = "s0";
  ASSERT_TRUE(s.UpsertNode(b).ok());
  EXPECT_FALSE(s.NeverFits(gang).has_value());

  // A node selector.
  JobRequest train = Job(1);
  train.node_selector["pool"] = "train";
  EXPECT_EQ(s.NeverFits(train).value_or(""),
            "no node has 1 GPU on nodes labelled pool=train (the most any node has is 0)");
  a.labels["pool"] = "train";
  ASSERT_TRUE(s.UpsertNode(a).ok());
  EXPECT_FALSE(s.NeverFits(train).has_value());
  a.labels.erase("pool");
  ASSERT_TRUE(s.UpsertNode(a).ok());
  EXPECT_TRUE(s.NeverFits(train).has_value());

  // A GPU model, alone or among alternatives.
  JobRequest b200 = Job(4);
  b200.gpu_model = "B200";
  JobRequest either = Job(4);
  either.gpu_models = {"A100 40GB", "B200"};
  EXPECT_EQ(s.NeverFits(b200).value_or(""), "no node has 4 GPUs of model 'B200' (the most any node has is 0)");
  EXPECT_TRUE(s.NeverFits(either).has_value());
  b = Node("b", 8, 8, "B200");
  ASSERT_TRUE(s.UpsertNode(b).ok());
  EXPECT_FALSE(s.NeverFits(b200).has_value());
  EXPECT_FALSE(s.NeverFits(either).has_value());

  // Host capacity: untracked fits anything; tracked and too small never does.
  JobRequest cpu = Job(1);
  cpu.cpu_milli = 64'000;
  EXPECT_FALSE(s.NeverFits(cpu).has_value());
  a.cpu_milli = 32'000;
  b.cpu_milli = 32'000;
  ASSERT_TRUE(s.UpsertNode(a).ok());
  ASSERT_TRUE(s.UpsertNode(b).ok());
  EXPECT_EQ(s.NeverFits(cpu).value_or(""), "no node has 1 GPU, 64000 milli-CPU (the most any node has is 0)");
}

TEST(NeverFitsTest, TenantLimitsAreJudgedOnEveryCall) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(Node("a", 8)).ok());
  JobRequest j = Job(4);
  j.tenant = "t";
  EXPECT_FALSE(s.NeverFits(j).has_value());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"t", 1.0, {{"H100 80GB", 2}}, 1}).ok());
  EXPECT_EQ(
      s.NeverFits(j).value_or(""),
      "tenant 't' may use at most 3000 milli-GPU (guarantees plus a borrowing limit of 1 GPU), and the job needs 4000");
  ASSERT_TRUE(s.SetTenant(TenantInfo{"t", 1.0, {}, -1}).ok());
  EXPECT_FALSE(s.NeverFits(j).has_value());
}

// Shapes that differ in one field each, so that an answer remembered for
// the wrong shape shows.
std::vector<JobRequest> Shapes() {
  std::vector<JobRequest> out = {Job(1),
                                 Job(8),
                                 Job(16),
                                 Job(8, 1, Topology::kIsland),
                                 Job(4, 1, Topology::kNuma),
                                 Job(8, 1, Topology::kNuma),
                                 Job(8, 3, Topology::kSwitch),
                                 Job(8, 3, Topology::kRack),
                                 Job(8, 3),
                                 Job(8, 5),
                                 Job(4, 2, Topology::kIsland),
                                 Job(8, 2, Topology::kIsland)};
  JobRequest j = Job(1);
  j.gpu_milli = 250;
  j.gpu_memory_bytes = 10 * kGiB;
  out.push_back(j);
  j.gpu_memory_bytes = 100 * kGiB;
  out.push_back(j);
  j.gpu_milli = 500;  // never fits either: the reason differs
  out.push_back(j);
  j = Job(2);
  j.gpu_model = "A100 40GB";
  out.push_back(j);
  j.gpu_model = "H100 80GB";
  out.push_back(j);
  j = Job(2);
  j.gpu_models = {"A100 40GB"};
  out.push_back(j);
  j.gpu_models = {"A100 40GB", "H100 80GB"};
  out.push_back(j);
  j = Job(2);
  j.gpu_vendor = "amd";
  out.push_back(j);
  j.gpu_vendor = "nvidia";
  out.push_back(j);
  j = Job(2);
  j.gpu_memory_bytes = 40 * kGiB;
  out.push_back(j);
  j.gpu_memory_bytes = 100 * kGiB;
  out.push_back(j);
  j = Job(2);
  j.node_selector["pool"] = "train";
  out.push_back(j);
  j.node_selector["pool"] = "infer";
  out.push_back(j);
  j = Job(1);
  j.cpu_milli = 16'000;
  out.push_back(j);
  j.cpu_milli = 64'000;
  out.push_back(j);
  j = Job(1);
  j.memory_bytes = 64 * kGiB;
  out.push_back(j);
  j.memory_bytes = 1024 * kGiB;
  out.push_back(j);
  j.gpus = 32;  // never fits: the reason names the memory
  out.push_back(j);
  j.memory_bytes = 64 * kGiB;
  out.push_back(j);
  j = Job(8, 4);
  j.memory_bytes = 64 * kGiB;
  out.push_back(j);
  j = Job(0);
  j.cpu_milli = 8'000;
  out.push_back(j);
  j.cpu_milli = 48'000;
  out.push_back(j);
  for (JobRequest& shape : out) shape.id = "shape-" + std::to_string(&shape - out.data());
  return out;
}

TEST(NeverFitsTest, RememberedAnswersMatchAFreshScheduler) {
  std::vector<NodeInfo> nodes = {Node("a", 8, 4), Node("b", 8)};
  nodes[0].labels = {{"switch", "s0"}, {"rack", "r0"}, {"pool", "train"}};
  nodes[0].cpu_milli = 32'000;
  nodes[0].memory_bytes = 256 * kGiB;
  nodes[1].labels = {{"switch", "s1"}, {"rack", "r0"}};
  Scheduler s;
  for (const NodeInfo& n : nodes) ASSERT_TRUE(s.UpsertNode(n).ok());
  const std::vector<JobRequest> shapes = Shapes();
  // A scheduler that has seen nothing but `nodes`, asked once per shape so
  // that it cannot answer from memory.
  auto fresh = [&](const JobRequest& shape) {
    Scheduler f;
    for (const NodeInfo& n : nodes) EXPECT_TRUE(f.UpsertNode(n).ok());
    return f.NeverFits(shape);
  };
  auto check = [&](const std::string& step) {
    std::vector<std::optional<std::string>> want;
    for (const JobRequest& shape : shapes) want.push_back(fresh(shape));
    for (int round = 0; round < 2; ++round) {  // the second round answers from memory
      for (size_t i = 0; i < shapes.size(); ++i) {
        EXPECT_EQ(s.NeverFits(shapes[i]), want[i]) << step << ", " << shapes[i].id << ", round " << round;
      }
    }
  };
  auto upsert = [&](size_t i) { ASSERT_TRUE(s.UpsertNode(nodes[i]).ok()); };
  check("start");
  nodes.push_back(Node("c", 16));
  nodes[2].labels = {{"switch", "s1"}, {"rack", "r1"}, {"pool", "infer"}};
  upsert(2);
  check("c added");
  nodes[0].labels["switch"] = "s1";
  upsert(0);
  check("a moved to switch s1");
  for (GpuInfo& g : nodes[0].gpus) g.model = "A100 40GB";
  upsert(0);
  check("a has A100s");
  nodes[1].cpu_milli = 8'000;
  upsert(1);
  check("b tracks CPU");
  nodes[1].memory_bytes = 32 * kGiB;
  upsert(1);
  check("b tracks host memory");
  nodes[1].gpus[0].healthy = false;
  upsert(1);
  check("a GPU of b is unhealthy");
  nodes[2].schedulable = false;
  s.SetSchedulable("c", false);
  check("c drained");
  nodes[2] = Node("c", 4);
  nodes[2].schedulable = false;
  upsert(2);
  check("c shrank to 4 GPUs");
  NodeInfo joined = Node("a", 8, 8, "A100 40GB");
  nodes[0].links = joined.links;
  upsert(0);
  check("a's NVLink islands joined");
  for (GpuInfo& g : nodes[1].gpus) g.numa_node = 0;
  upsert(1);
  check("b has one NUMA node");
  for (GpuInfo& g : nodes[1].gpus) g.memory_bytes = 141 * kGiB;
  upsert(1);
  check("b has 141 GiB GPUs");
  for (GpuInfo& g : nodes[1].gpus) g.vendor = "amd";
  upsert(1);
  check("b is AMD");
}

TEST(NeverFitsTest, ManyShapesStayRight) {
  Scheduler s;
  NodeInfo a = Node("a", 8);
  a.cpu_milli = 2'000;
  ASSERT_TRUE(s.UpsertNode(a).ok());
  // More shapes than are remembered at once.
  for (int round = 0; round < 2; ++round) {
    for (int cpu = 1; cpu <= 3'000; ++cpu) {
      JobRequest j = Job(1);
      j.cpu_milli = cpu;
      ASSERT_EQ(s.NeverFits(j).has_value(), cpu > 2'000) << cpu;
    }
  }
}

}  // namespace
}  // namespace drover::sched
