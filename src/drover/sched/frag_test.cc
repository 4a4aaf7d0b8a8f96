#include "drover/sched/frag.h"

#include <gtest/gtest.h>

#include <string>

#include "drover/sched/scheduler.h"

namespace drover::sched {
namespace {

FragShape Shape(int gpus, int milli, int64_t cpu, double p, std::vector<uint8_t> accepts = {1}) {
  FragShape s;
  s.gpus = gpus;
  s.milli = milli;
  s.cpu_milli = cpu;
  s.p = p;
  s.accepts = std::move(accepts);
  return s;
}

FragNode Node(std::vector<int16_t> free, int64_t cpu_left, std::vector<uint16_t> cls = {}) {
  FragNode n;
  n.cpu_left = cpu_left;
  n.n = static_cast<int>(free.size());
  for (size_t i = 0; i < free.size(); ++i) {
    n.free[i] = free[i];
    n.cls[i] = i < cls.size() ? cls[i] : 0;
  }
  return n;
}

TEST(Fragmentation, TheWorkedExampleOfTheHeader) {
  // GPU 0 has 300 milli free, GPUs 1-7 are whole; 20 cores left.
  FragNode n = Node({300, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, 20'000);
  std::vector<FragShape> shapes = {Shape(1, 1000, 16'000, 0.5), Shape(1, 500, 24'000, 0.5)};
  // The whole-GPU shape fits and loses GPU 0's 300; the share lacks CPU and
  // loses all 7,300.
  EXPECT_DOUBLE_EQ(Fragmentation(n, shapes), 0.5 * 300 + 0.5 * 7300);
}

TEST(Fragmentation, AShapeLosesWhatItCannotUse) {
  std::vector<FragShape> half = {Shape(1, 500, 0, 1.0)};
  // Remnants below the share are lost; GPUs with at least the share are not.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({400, 600, 1000}, FragNode::kUntracked), half), 400);
  // A 4-GPU shape on a node with 3 whole GPUs cannot run: all is lost.
  std::vector<FragShape> four = {Shape(4, 1000, 0, 1.0)};
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000, 1000}, FragNode::kUntracked), four), 3000);
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000, 1000, 1000, 200}, FragNode::kUntracked), four), 200);
  // Nothing free, nothing lost.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({}, 0), four), 0);
}

TEST(Fragmentation, GpusOfAModelTheShapeRefusesAreLost) {
  // Class 0 accepted, class 1 not: the two class-1 GPUs are lost to it.
  std::vector<FragShape> only0 = {Shape(1, 1000, 0, 1.0, {1, 0})};
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000, 1000, 1000}, FragNode::kUntracked, {0, 1, 1}), only0), 2000);
  // A node of class 1 only: everything is lost to it.
  EXPECT_DOUBLE_EQ(Fragmentation(Node({1000}, FragNode::kUntracked, {1}), only0), 1000);
}

JobRequest Req(int gpus, int milli, int64_t cpu, const std::string& model = "") {
  JobRequest r;
  r.gpus = gpus;
  r.gpu_milli = milli;
  r.cpu_milli = cpu;
  if (!model.empty()) r.gpu_models = {model};
  return r;
}

TEST(ShapeStats, TheTypicalSetCoversTheShareInStepsOfTen) {
  ShapeStats stats;
  // 12 shapes: shape i arrives 12 - i times (78 arrivals); CPU-only jobs are
  // not counted.
  for (int i = 0; i < 12; ++i) {
    for (int k = 0; k < 12 - i; ++k) stats.Observe(Req(1, 100 + i, 1000));
  }
  stats.Observe(Req(0, kWholeGpu, 4000));
  EXPECT_EQ(stats.arrivals(), 78);
  EXPECT_EQ(stats.distinct(), 12u);
  auto all = [](const JobRequest&, int) { return true; };
  // 60 %: the first ten shapes cover 75 of 78; no second step is needed.
  const std::vector<FragShape>& t = stats.Build(0.6, 1, all);
  ASSERT_EQ(t.size(), 10u);
  EXPECT_EQ(t[0].milli, 100);  // most frequent first
  double sum = 0;
  for (const FragShape& s : t) sum += s.p;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_NEAR(t[0].p, 12.0 / 75.0, 1e-12);
  // 99 %: a second step of ten takes the remaining two.
  EXPECT_EQ(stats.Build(0.99, 1, all).size(), 12u);
}

TEST(ShapeStats, ConstraintsAndMeanMemoryAreKeptPerShape) {
  ShapeStats stats;
  JobRequest a = Req(1, kWholeGpu, 1000, "T4");
  a.memory_bytes = 100;
  stats.Observe(a);
  a.memory_bytes = 300;
  stats.Observe(a);
  stats.Observe(Req(1, kWholeGpu, 1000));  // same numbers, no constraint: another shape
  EXPECT_EQ(stats.distinct(), 2u);
  // Class 0 is a T4, class 1 is not.
  auto t4 = [](const JobRequest& r, int cls) { return r.gpu_models.empty() || cls == 0; };
  const std::vector<FragShape>& t = stats.Build(1.0, 2, t4);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].memory_bytes, 200);
  EXPECT_EQ(t[0].accepts, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(t[1].accepts, (std::vector<uint8_t>{1, 1}));
}

TEST(ShapeStats, RebuildsWhenArrivalsGrowBySixteenth) {
  ShapeStats stats;
  EXPECT_FALSE(stats.Stale());  // nothing seen
  stats.Observe(Req(1, kWholeGpu, 0));
  EXPECT_TRUE(stats.Stale());
  stats.Build(0.6, 1, [](const JobRequest&, int) { return true; });
  EXPECT_FALSE(stats.Stale());
  for (int i = 0; i < 15; ++i) stats.Observe(Req(1, kWholeGpu, 0));
  EXPECT_FALSE(stats.Stale());  // at least 16 arrivals between builds
  stats.Observe(Req(1, kWholeGpu, 0));
  EXPECT_TRUE(stats.Stale());
}

TEST(ShapeStats, StrandingCpuIsTheHarmonicMeanOfCpuPerGpu) {
  ShapeStats stats;
  EXPECT_EQ(stats.StrandCpuPerMilli(), 0);  // nothing seen: nothing is stranded
  stats.Observe(Req(1, kWholeGpu, 0));      // asks for no CPU: left out
  EXPECT_EQ(stats.StrandCpuPerMilli(), 0);
  // Three arrivals: 4 cores per GPU (a 0.5 GPU share with 2 cores), then 16
  // cores per GPU twice (a gang of two 1-GPU replicas). E[GPU / CPU] =
  // (1/4 + 1/16 + 1/16) / 3 GPU per core, so 1 / that = 8 cores per GPU
  // (milli-cores per milli-GPU alike), below the mean CPU per GPU (34 cores
  // / 2.5 GPUs = 13.6).
  stats.Observe(Req(1, 500, 2'000));
  JobRequest gang = Req(1, kWholeGpu, 16'000);
  gang.replicas = 2;
  stats.Observe(gang);
  EXPECT_NEAR(stats.StrandCpuPerMilli(), 8.0, 1e-9);
}

TEST(ShapeStats, HostShareIsTheShareOfArrivalsAnEmptyNodeWouldServe) {
  ShapeStats stats;
  // 6 arrivals of 1 GPU and 8 cores, 2 of 8 GPUs and 120 cores with 512
  // bytes of memory (mean of 256 and 768), 2 T4-only arrivals of 2 GPUs.
  for (int i = 0; i < 6; ++i) stats.Observe(Req(1, kWholeGpu, 8'000));
  JobRequest big = Req(8, kWholeGpu, 120'000);
  big.memory_bytes = 256;
  stats.Observe(big);
  big.memory_bytes = 768;
  stats.Observe(big);
  for (int i = 0; i < 2; ++i) stats.Observe(Req(2, 500, 4'000, "T4"));
  EXPECT_EQ(stats.HostShare(0, 8, 0, 0), 0);  // before the first build: nothing known
  // Class 0 is a T4, class 1 is not.
  stats.Build(0.6, 2, [](const JobRequest& r, int cls) { return r.gpu_models.empty() || cls == 0; });
  EXPECT_NEAR(stats.HostShare(0, 8, 0, 0), 1.0, 1e-12);          // untracked CPU and memory: everything fits
  EXPECT_NEAR(stats.HostShare(1, 8, 0, 0), 0.8, 1e-12);          // not the T4-only ones
  EXPECT_NEAR(stats.HostShare(0, 8, 96'000, 0), 0.8, 1e-12);     // not the 120-core ones
  EXPECT_NEAR(stats.HostShare(0, 8, 128'000, 511), 0.8, 1e-12);  // their mean memory is 512
  EXPECT_NEAR(stats.HostShare(0, 8, 128'000, 512), 1.0, 1e-12);
  EXPECT_NEAR(stats.HostShare(0, 2, 128'000, 512), 0.8, 1e-12);  // 2 GPUs: not the 8-GPU ones
  EXPECT_NEAR(stats.HostShare(1, 1, 4'000, 0), 0.0, 1e-12);
  EXPECT_NEAR(stats.HostShare(0, 8, 96'000, 0), 0.8, 1e-12);  // asked again: the same answer
}

// ---- the policy, through the scheduler ----

NodeInfo GpuNode(const std::string& name, int gpus, const std::string& model, int64_t cpu) {
  NodeInfo n;
  n.name = name;
  n.schedulable = true;
  n.cpu_milli = cpu;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back(GpuInfo{i, "nvidia", model, 16LL << 30, true, 0});
  return n;
}

class FragPlacementTest : public ::testing::Test {
 protected:
  FragPlacementTest() : s(FragConfig()) {}
  static Config FragConfig() {
    Config c;
    c.placement = PlacementPolicy::kFrag;
    return c;
  }
  void Add(const NodeInfo& n) { ASSERT_TRUE(s.UpsertNode(n).ok()); }
  // Shows the scheduler `n` arrivals of `req` that come and go (they
  // teach it the workload and leave the cluster empty).
  void Teach(JobRequest req, int n) {
    for (int i = 0; i < n; ++i) {
      req.id = "teach-" + std::to_string(taught_++);
      ASSERT_TRUE(s.Enqueue(req, 0).ok());
      s.Remove(req.id, 0);
    }
  }
  std::string Node(const std::string& id, JobRequest req) {
    req.id = id;
    EXPECT_TRUE(s.Enqueue(req, 0).ok());
    Decisions d = s.Schedule(0);
    Status st = s.CheckInvariants();
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (const Binding& b : d.bindings) {
      if (b.job_id != id) continue;
      const Placement& p = b.replicas.at(0);
      return p.node + "/" + (p.gpu_indices.empty() ? std::string("-") : std::to_string(p.gpu_indices[0]));
    }
    return "";
  }
  Scheduler s;
  int taught_ = 0;
};

TEST_F(FragPlacementTest, UnconstrainedWorkAvoidsTheModelOthersNeed) {
  // Most arrivals can use only T4s; the unconstrained one leaves the T4 free.
  Add(GpuNode("t4", 4, "T4", 0));
  Add(GpuNode("g2", 4, "G2", 0));
  Teach(Req(1, kWholeGpu, 0, "T4"), 8);
  Teach(Req(1, kWholeGpu, 0), 2);
  EXPECT_EQ(Node("any", Req(1, kWholeGpu, 0)).substr(0, 3), "g2/");
  EXPECT_EQ(Node("needs-t4", Req(1, kWholeGpu, 0, "T4")).substr(0, 3), "t4/");
}

TEST_F(FragPlacementTest, CpuOnlyWorkDoesNotStrandGpus) {
  // GPU jobs of the workload take 8 cores each. A CPU-only job of 8 cores on
  // "lean" would leave its two GPUs without CPU; "fat" has cores to spare.
  Add(GpuNode("lean", 2, "G2", 12'000));
  Add(GpuNode("fat", 2, "G2", 64'000));
  Teach(Req(1, kWholeGpu, 8'000), 10);
  EXPECT_EQ(Node("cpu", Req(0, kWholeGpu, 8'000)).substr(0, 4), "fat/");
}

TEST_F(FragPlacementTest, RecoveredJobsTeachTheShapesToo) {
  // A restarted server recovers three T4-only jobs on the T4 node. Without
  // them the next job would see one shape (its own) and take the T4 node's
  // last GPU, as bin-pack does; with them the G2 is the model fewer arrivals
  // can use.
  Add(GpuNode("t4", 4, "T4", 0));
  Add(GpuNode("g2", 4, "G2", 0));
  for (int i = 0; i < 3; ++i) {
    JobRequest r = Req(1, kWholeGpu, 0, "T4");
    r.id = "recovered-" + std::to_string(i);
    Binding b;
    b.job_id = r.id;
    b.replicas.push_back(Placement{"t4", {i}, kWholeGpu, 0});
    ASSERT_TRUE(s.Restore(r, b, 0).ok());
  }
  EXPECT_EQ(Node("any", Req(1, kWholeGpu, 0)).substr(0, 3), "g2/");
}

TEST_F(FragPlacementTest, TheLargeNodeStaysForTheShapesOnlyItFits) {
  // "g3" comes first (its class is the first), has more CPU and is the
  // only node a 120-core job fits; every job accepts both models, so the
  // class shares tie, and so does the fill of the two empty nodes.
  Add(GpuNode("g3", 8, "G3", 128'000));
  Add(GpuNode("g2", 8, "G2", 96'000));
  // Before any large request the node with less CPU is taken first.
  EXPECT_EQ(Node("first", Req(1, kWholeGpu, 8'000)).substr(0, 3), "g2/");
  Teach(Req(1, kWholeGpu, 8'000), 30);
  Teach(Req(8, kWholeGpu, 120'000), 2);
  // The g2 is now fuller (bin-pack's fill) and takes the next 1-GPU jobs;
  // the g3 stays whole for the job only it fits.
  for (int i = 0; i < 7; ++i)
    EXPECT_EQ(Node("small-" + std::to_string(i), Req(1, kWholeGpu, 8'000)).substr(0, 3), "g2/");
  EXPECT_EQ(Node("large", Req(8, kWholeGpu, 120'000)).substr(0, 3), "g3/");
}

TEST_F(FragPlacementTest, TheNodeFewerArrivalsCouldUseGoesFirst) {
  // Two empty 2-GPU nodes of two models that every job accepts, so class
  // shares and fill tie. Half the arrivals ask for 2 GPUs and 100 GiB of
  // memory, which only "roomy" has; "cramped" has more CPU but would serve
  // only the other half, so it takes the 1-GPU job (the CPU tie-break alone
  // would pick "roomy").
  NodeInfo roomy = GpuNode("roomy", 2, "A", 32'000);
  roomy.memory_bytes = 1LL << 40;
  NodeInfo cramped = GpuNode("cramped", 2, "B", 64'000);
  cramped.memory_bytes = 16LL << 30;
  Add(roomy);
  Add(cramped);
  Teach(Req(1, kWholeGpu, 8'000), 10);
  JobRequest two = Req(2, kWholeGpu, 16'000);
  two.memory_bytes = 100LL << 30;
  Teach(two, 10);
  EXPECT_EQ(Node("one", Req(1, kWholeGpu, 8'000)).substr(0, 8), "cramped/");
  two.id.clear();
  EXPECT_EQ(Node("two", two).substr(0, 6), "roomy/");
}

TEST(FragPlacement, OnOneGpuModelItPlacesAsBinpack) {
  // Shares and whole GPUs on nodes of one model (large and small ones): with
  // one class there is nothing to choose between classes, and within the
  // class the candidate is bin-pack's.
  Config bin;
  Config frag;
  frag.placement = PlacementPolicy::kFrag;
  Scheduler a(bin), b(frag);
  for (Scheduler* s : {&a, &b}) {
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(s->UpsertNode(GpuNode("g2-" + std::to_string(i), 8, "G2", 64'000)).ok());
      ASSERT_TRUE(s->UpsertNode(GpuNode("small-" + std::to_string(i), 2, "G2", 16'000)).ok());
    }
  }
  const int gpus[] = {1, 1, 2, 1, 4, 1, 8, 1};
  const int milli[] = {500, 1000, 1000, 250, 1000, 810, 1000, 1000};
  for (int i = 0; i < 40; ++i) {
    JobRequest r = Req(gpus[i % 8], milli[i % 8], 2'000 + 1'000 * (i % 5));
    r.id = "j" + std::to_string(i);
    ASSERT_TRUE(a.Enqueue(r, 0).ok());
    ASSERT_TRUE(b.Enqueue(r, 0).ok());
    Decisions da = a.Schedule(0);
    Decisions db = b.Schedule(0);
    ASSERT_EQ(da.bindings.size(), db.bindings.size()) << r.id;
    for (size_t k = 0; k < da.bindings.size(); ++k) {
      EXPECT_EQ(da.bindings[k].replicas.at(0).node, db.bindings[k].replicas.at(0).node) << r.id;
      EXPECT_EQ(da.bindings[k].replicas.at(0).gpu_indices, db.bindings[k].replicas.at(0).gpu_indices) << r.id;
    }
    ASSERT_TRUE(b.CheckInvariants().ok());
  }
}

TEST_F(FragPlacementTest, ConstrainedJobsStillGoWhereTheyMust) {
  Add(GpuNode("t4", 2, "T4", 0));
  Add(GpuNode("g2", 2, "G2", 0));
  Teach(Req(1, kWholeGpu, 0, "T4"), 2);
  Teach(Req(1, kWholeGpu, 0), 8);
  // The G2 is accepted by fewer arrivals: unconstrained work goes there
  // first, and a T4-only job still gets the T4 however the shares fall.
  EXPECT_EQ(Node("any-1", Req(1, kWholeGpu, 0)).substr(0, 3), "g2/");
  EXPECT_EQ(Node("any-2", Req(1, kWholeGpu, 0)).substr(0, 3), "g2/");
  EXPECT_EQ(Node("any-3", Req(1, kWholeGpu, 0)).substr(0, 3),
            "t4/");  // the G2s are full
  EXPECT_EQ(Node("needs-t4", Req(1, kWholeGpu, 0, "T4")).substr(0, 3), "t4/");
  EXPECT_EQ(Node("needs-t4-again", Req(1, kWholeGpu, 0, "T4")),
            "");  // nothing left
}

}  // namespace
}  // namespace drover::sched
