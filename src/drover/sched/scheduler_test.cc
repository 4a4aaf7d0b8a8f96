#include "drover/sched/scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace drover::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMinute = 60'000;

// An HGX-like node: `gpus` GPUs, NVLink islands of `island` GPUs, two NUMA halves.
NodeInfo MakeNode(const std::string& name, int gpus, int island = 8, const std::string& model = "H100 80GB",
                  int64_t memory = 80 * kGiB, const std::string& vendor = "nvidia") {
  NodeInfo n;
  n.name = name;
  n.schedulable = true;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back(GpuInfo{i, vendor, model, memory, true, i < gpus / 2 ? 0 : 1});
  n.links.assign(static_cast<size_t>(gpus) * gpus, Link::kCrossSocket);
  for (int i = 0; i < gpus; ++i) {
    for (int j = 0; j < gpus; ++j) {
      if (i / island == j / island) n.links[static_cast<size_t>(i) * gpus + j] = Link::kFabric;
    }
  }
  return n;
}

JobRequest Job(const std::string& id, int gpus, int priority = 0, bool preemptible = false) {
  JobRequest j;
  j.id = id;
  j.gpus = gpus;
  j.priority = priority;
  j.preemptible = preemptible;
  return j;
}

class SchedulerTest : public ::testing::Test {
 protected:
  Decisions Pass(int64_t now = 0) {
    Decisions d = s.Schedule(now);
    Status st = s.CheckInvariants();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return d;
  }
  void Add(const NodeInfo& n) { ASSERT_TRUE(s.UpsertNode(n).ok()); }
  void Submit(const JobRequest& j, int64_t now = 0) { ASSERT_TRUE(s.Enqueue(j, now).ok()); }
  static std::string Where(const Decisions& d, const std::string& id) {
    for (const Binding& b : d.bindings) {
      if (b.job_id != id) continue;
      std::string out;
      for (const Placement& p : b.replicas) {
        out += (out.empty() ? "" : " ") + p.node + "[";
        for (size_t i = 0; i < p.gpu_indices.size(); ++i) out += (i ? "," : "") + std::to_string(p.gpu_indices[i]);
        out += "]";
      }
      return out;
    }
    return "";
  }

  Scheduler s;
};

TEST_F(SchedulerTest, BinpackFillsTheFullestNodeThatFits) {
  Add(MakeNode("a", 8));
  Add(MakeNode("b", 8));
  Submit(Job("six", 6));
  Decisions d = Pass();
  std::string first = Where(d, "six");
  ASSERT_FALSE(first.empty());
  Submit(Job("two", 2));
  d = Pass();
  // The two GPUs go next to the six, keeping the other node whole.
  EXPECT_EQ(Where(d, "two").substr(0, 1), first.substr(0, 1));
}

// A node that holds the job's image wins a tie, never a better fit.
TEST_F(SchedulerTest, AmongFitsAsGoodANodeHoldingTheImageIsTaken) {
  for (const char* n : {"a", "b", "c", "d"}) Add(MakeNode(n, 8));
  s.SetNodeImages("c", {"reg/app:v1", "sha256:1111"});
  JobRequest j = Job("img", 8);
  j.image = "reg/app:v1";
  Submit(j);
  EXPECT_EQ(Where(Pass(), "img"), "c[0,1,2,3,4,5,6,7]");
  // By digest too; and a node that no longer holds it is not preferred.
  s.SetNodeImages("c", {});
  s.SetNodeImages("b", {"sha256:1111"});
  JobRequest k = Job("dig", 8);
  k.image = "sha256:1111";
  Submit(k);
  EXPECT_EQ(Where(Pass(), "dig"), "b[0,1,2,3,4,5,6,7]");
  // A better fit (binpack: the fuller node) beats the image.
  Submit(Job("six", 6));
  std::string six = Where(Pass(), "six");
  ASSERT_FALSE(six.empty());
  const std::string fuller = six.substr(0, 1);
  s.SetNodeImages(fuller == "a" ? "d" : "a", {"reg/app:v2"});
  JobRequest two = Job("two", 2);
  two.image = "reg/app:v2";
  Submit(two);
  EXPECT_EQ(Where(Pass(), "two").substr(0, 1), fuller);
}

TEST_F(SchedulerTest, HostCpuAndMemoryMustFitToo) {
  NodeInfo small = MakeNode("small", 8);
  small.cpu_milli = 8000;
  small.memory_bytes = 64 * kGiB;
  Add(small);
  JobRequest j = Job("cpu-hungry", 1);
  j.cpu_milli = 6000;
  Submit(j);
  EXPECT_EQ(Where(Pass(), "cpu-hungry"), "small[0]");
  JobRequest k = Job("second", 1);
  k.cpu_milli = 4000;  // 2000 milli-CPU left: the free GPUs cannot be used
  Submit(k);
  EXPECT_TRUE(Pass().bindings.empty());
  JobRequest never = Job("never", 1);
  never.memory_bytes = 128 * kGiB;
  EXPECT_TRUE(s.NeverFits(never).has_value());
  s.Remove("cpu-hungry", 1);
  EXPECT_EQ(Pass(1).bindings.size(), 1u);
}

TEST_F(SchedulerTest, CpuOnlyJobsAvoidNodesWithFreeGpus) {
  NodeInfo a = MakeNode("a", 2);
  a.cpu_milli = 16000;
  NodeInfo b = MakeNode("b", 2);
  b.cpu_milli = 16000;
  Add(a);
  Add(b);
  Submit(Job("two", 2));
  std::string full = Where(Pass(), "two").substr(0, 1);
  JobRequest cpu = Job("cpu", 0);
  cpu.cpu_milli = 8000;
  Submit(cpu);
  // The CPU-only job goes where no GPU is left to strand.
  EXPECT_EQ(Where(Pass(), "cpu"), full + "[]");
  JobRequest models = Job("either", 1);
  models.gpu_models = {"A100 40GB", "H100 80GB"};
  Submit(models);
  EXPECT_EQ(Pass().bindings.size(), 1u);
  JobRequest none = Job("none", 1);
  none.gpu_models = {"A100 40GB"};
  EXPECT_TRUE(s.NeverFits(none).has_value());
}

TEST(SchedulerSpreadTest, SpreadTakesTheEmptiestNode) {
  Scheduler s(Config{.placement = PlacementPolicy::kSpread});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("b", 8)).ok());
  ASSERT_TRUE(s.Enqueue(Job("one", 1), 0).ok());
  ASSERT_TRUE(s.Enqueue(Job("two", 1), 0).ok());
  Decisions d = s.Schedule(0);
  ASSERT_EQ(d.bindings.size(), 2u);
  EXPECT_NE(d.bindings[0].replicas[0].node, d.bindings[1].replicas[0].node);
}

TEST_F(SchedulerTest, ConstraintsOnModelVendorMemoryAndHealth) {
  Add(MakeNode("a100", 2, 2, "A100 40GB", 40 * kGiB));
  NodeInfo h = MakeNode("h100", 2, 2);
  h.gpus[0].healthy = false;
  Add(h);
  JobRequest j = Job("j", 1);
  j.gpu_memory_bytes = 64 * kGiB;
  Submit(j);
  EXPECT_EQ(Where(Pass(), "j"), "h100[1]");  // GPU 0 is unhealthy, the A100s too small

  JobRequest amd = Job("amd", 1);
  amd.gpu_vendor = "amd";
  EXPECT_EQ(s.NeverFits(amd).value_or(""), "no node has 1 GPU of vendor 'amd' (the most any node has is 0)");
  JobRequest model = Job("m", 2);
  model.gpu_model = "A100 40GB";
  EXPECT_FALSE(s.NeverFits(model).has_value());
}

TEST_F(SchedulerTest, UnschedulableNodesTakeNoWorkButCountForFeasibility) {
  Add(MakeNode("a", 8));
  s.SetSchedulable("a", false);
  Submit(Job("j", 8));
  EXPECT_FALSE(s.NeverFits(Job("j", 8)).has_value());
  EXPECT_TRUE(Pass().bindings.empty());
  EXPECT_EQ(s.PendingReason("j"), "waiting: no ready node has 8 GPUs");
  s.SetSchedulable("a", true);
  EXPECT_EQ(Pass().bindings.size(), 1u);
}

TEST_F(SchedulerTest, NeverFitsExplainsWhy) {
  EXPECT_EQ(s.NeverFits(Job("j", 1)).value_or(""), "the cluster has no nodes");
  Add(MakeNode("a", 8, 4));
  EXPECT_EQ(s.NeverFits(Job("j", 9)).value_or(""), "no node has 9 GPUs (the most any node has is 8)");
  JobRequest island = Job("i", 8);
  island.topology = Topology::kIsland;
  EXPECT_EQ(s.NeverFits(island).value_or(""), "no node has 8 GPUs on one NVLink island");
  JobRequest gang = Job("g", 4);
  gang.replicas = 3;
  EXPECT_EQ(s.NeverFits(gang).value_or(""), "the cluster holds at most 2 replicas of 4 GPUs, and the job needs 3");
}

TEST_F(SchedulerTest, RestoreRejectsDoubleBooking) {
  Add(MakeNode("a", 4));
  ASSERT_TRUE(s.Restore(Job("j1", 2), Binding{"j1", {Placement{"a", {0, 1}}}}, 0).ok());
  EXPECT_EQ(s.Restore(Job("j2", 2), Binding{"j2", {Placement{"a", {1, 2}}}}, 0).code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.Restore(Job("j3", 1), Binding{"j3", {Placement{"zz", {0}}}}, 0).code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.HeldMask("a"), 0b11u);
  EXPECT_FALSE(s.IsBound("j2"));
  Submit(Job("j4", 2));
  EXPECT_EQ(Where(Pass(), "j4"), "a[2,3]");
}

TEST_F(SchedulerTest, MalformedInputIsRejected) {
  EXPECT_EQ(s.Enqueue(Job("", 1), 0).code(), Code::kInvalidArgument);
  JobRequest frac = Job("f", 2);
  frac.gpu_milli = 500;
  EXPECT_EQ(s.Enqueue(frac, 0).code(), Code::kInvalidArgument);
  Submit(Job("j", 1));
  EXPECT_EQ(s.Enqueue(Job("j", 1), 0).code(), Code::kAlreadyExists);
  NodeInfo bad = MakeNode("x", 4);
  bad.links.pop_back();
  EXPECT_EQ(s.UpsertNode(bad).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.SetTenant(TenantInfo{"t", 0.0, {}, -1}).code(), Code::kInvalidArgument);
}

TEST_F(SchedulerTest, FractionsShareOneGpuBeforeBreakingAnother) {
  Add(MakeNode("a", 2));
  JobRequest f = Job("f1", 1);
  f.gpu_milli = 500;
  f.gpu_memory_bytes = 30 * kGiB;
  Submit(f);
  f.id = "f2";
  Submit(f);
  f.id = "f3";
  f.gpu_milli = 250;
  f.gpu_memory_bytes = 30 * kGiB;  // share left on GPU 0 (0 milli) is gone
  Submit(f);
  Decisions d = Pass();
  ASSERT_EQ(d.bindings.size(), 3u);
  EXPECT_EQ(Where(d, "f1"), Where(d, "f2"));  // one GPU, two halves
  EXPECT_NE(Where(d, "f3"), Where(d, "f1"));
  EXPECT_EQ(d.bindings[0].replicas[0].gpu_milli, 500);
  EXPECT_EQ(d.bindings[0].replicas[0].gpu_memory_bytes, 30 * kGiB);
  // The GPU with f3 has 750 milli free but only 50 GiB: a 60 GiB share does not fit.
  JobRequest big = Job("big", 1);
  big.gpu_milli = 100;
  big.gpu_memory_bytes = 60 * kGiB;
  Submit(big);
  EXPECT_TRUE(Pass().bindings.empty());
  EXPECT_NE(s.PendingReason("big").find("the largest free share on a ready node is 0 milli-GPU"), std::string::npos)
      << s.PendingReason("big");
}

TEST_F(SchedulerTest, IslandRequirementAndItsExplanation) {
  Add(MakeNode("gpu-07", 8, 4));
  Submit(Job("two", 2));
  Pass();
  JobRequest j = Job("isl", 4);
  j.topology = Topology::kIsland;
  Submit(j);
  Decisions d = Pass();
  EXPECT_EQ(Where(d, "isl"), "gpu-07[4,5,6,7]");  // the pair took half of island 0-3
  JobRequest k = Job("isl2", 4);
  k.topology = Topology::kIsland;
  Submit(k);
  EXPECT_TRUE(Pass().bindings.empty());
  EXPECT_EQ(
      s.PendingReason("isl2").rfind(
          "waiting: needs 4 GPUs on one NVLink island; the largest free island has 2 (node gpu-07); next in line", 0),
      0u)
      << s.PendingReason("isl2");
}

TEST_F(SchedulerTest, GangIsAllOrNothingAndPrefersOneSwitch) {
  for (int i = 0; i < 4; ++i) {
    NodeInfo n = MakeNode("n" + std::to_string(i), 8);
    n.labels["switch"] = i < 2 ? "s0" : "s1";
    Add(n);
  }
  Submit(Job("one", 1));
  Pass();  // one GPU of some node is now taken
  JobRequest g = Job("g", 8);
  g.replicas = 2;
  Submit(g);
  Decisions d = Pass();
  ASSERT_EQ(d.bindings.size(), 1u);
  const auto& r = d.bindings[0].replicas;
  ASSERT_EQ(r.size(), 2u);
  // Both replicas under the switch that has two whole nodes.
  auto sw = [](const std::string& node) { return node == "n0" || node == "n1" ? 0 : 1; };
  EXPECT_EQ(sw(r[0].node), sw(r[1].node));
  JobRequest g2 = Job("g2", 8);
  g2.replicas = 2;
  Submit(g2);
  EXPECT_TRUE(Pass().bindings.empty());  // one whole node is left: nothing is placed
  EXPECT_EQ(s.HeldMask(r[0].node), 0xFFu);
  EXPECT_NE(s.PendingReason("g2").find("1 replica fit"), std::string::npos) << s.PendingReason("g2");
}

TEST_F(SchedulerTest, PriorityPreemptionTakesTheSmallestVictimSet) {
  Add(MakeNode("a", 8));
  Add(MakeNode("b", 8));
  Submit(Job("a-low4", 4, 10, true));
  Submit(Job("a-mid2", 2, 10, true));
  Submit(Job("b-low8", 8, 10, true));
  Submit(Job("guard", 2, 0, false));
  Decisions d = Pass();
  ASSERT_EQ(d.bindings.size(), 4u);
  // The node with a-low4 + a-mid2 + guard, and the node with b-low8.
  Submit(Job("urgent", 6, 100));
  d = Pass(kMinute);
  // All of one priority, started together: freeing 6 GPUs (a-low4 + a-mid2)
  // loses less work than freeing 8 (b-low8).
  ASSERT_EQ(d.preemptions.size(), 2u);
  std::set<std::string> victims;
  for (const Preemption& p : d.preemptions) {
    victims.insert(p.job_id);
    EXPECT_EQ(p.for_job, "urgent");
    EXPECT_EQ(p.grace_ms, s.config().preemption_grace_ms);
    EXPECT_TRUE(s.IsPreempting(p.job_id));
  }
  EXPECT_EQ(victims, (std::set<std::string>{"a-low4", "a-mid2"}));
  EXPECT_EQ(s.PendingReason("urgent").rfind("waiting for 2 preempted jobs to stop (", 0), 0u)
      << s.PendingReason("urgent");
  // Nothing more is preempted while the victims stop.
  EXPECT_TRUE(Pass(kMinute).preemptions.empty());
  ASSERT_TRUE(s.Requeue("a-low4", 2 * kMinute).ok());
  EXPECT_TRUE(Pass(2 * kMinute).bindings.empty());  // a-mid2 still stops
  ASSERT_TRUE(s.Requeue("a-mid2", 2 * kMinute).ok());
  d = Pass(2 * kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "urgent");
  EXPECT_TRUE(s.IsPending("a-low4"));
  s.Remove("urgent", 3 * kMinute);
  d = Pass(3 * kMinute);
  EXPECT_EQ(d.bindings.size(), 2u);  // the preempted jobs run again
}

TEST_F(SchedulerTest, NonPreemptibleWorkIsNeverPreempted) {
  Add(MakeNode("a", 8));
  Submit(Job("solid", 8, 0, false));
  Pass();
  Submit(Job("urgent", 8, 1000));
  Decisions d = Pass();
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(s.IsPending("urgent"));
}

TEST_F(SchedulerTest, AFailedPreemptionSearchWaitsForAChange) {
  Add(MakeNode("a", 8));
  Submit(Job("solid", 4, 0, false));
  Submit(Job("low", 4, 10, true));
  ASSERT_EQ(Pass().bindings.size(), 2u);
  // Preempting "low" frees 4 GPUs; "urgent" needs 8: the search fails.
  Submit(Job("urgent", 8, 100));
  Decisions d = Pass(kMinute);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.preemption_searches, 1);
  // Nothing it reads changed: passes (a new job of its own too) do not search again.
  EXPECT_EQ(Pass(2 * kMinute).preemption_searches, 0);
  Submit(Job("other", 8, 100), 2 * kMinute);
  d = Pass(3 * kMinute);
  EXPECT_EQ(d.preemption_searches, 1);  // "other" searched once, "urgent" not again
  EXPECT_EQ(Pass(3 * kMinute).preemption_searches, 0);
  // The non-preemptible job ends: the search runs again and succeeds.
  s.Remove("solid", 4 * kMinute);
  d = Pass(4 * kMinute);
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].job_id, "low");
  EXPECT_EQ(d.preemptions[0].for_job, "urgent");
}

TEST(SchedulerPreemptionTest, ASearchThatFailedInThePassThatBoundTheVictimRunsAgain) {
  Config c;
  c.queue = QueuePolicy::kFifo;
  Scheduler s(c);
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  // In submission order, one pass binds "low" (not preemptible in that
  // same pass) and fails the search for "urgent"; the next may take "low".
  ASSERT_TRUE(s.Enqueue(Job("low", 8, 10, true), 0).ok());
  ASSERT_TRUE(s.Enqueue(Job("urgent", 8, 100), 0).ok());
  Decisions d = s.Schedule(0);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.preemption_searches, 1);
  d = s.Schedule(kMinute);
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].job_id, "low");
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(SchedulerPreemptionTest, AJobThatMayNotPreemptWaitsForFreeGpus) {
  Config c;
  c.queue = QueuePolicy::kFifo;
  Scheduler s(c);
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  ASSERT_TRUE(s.Enqueue(Job("low", 8, 10, true), 0).ok());
  ASSERT_EQ(s.Schedule(0).bindings.size(), 1u);
  // Higher priority, but it declines to preempt (a service with
  // --services-preempt=false): no search, no victim; it binds once "low" ends.
  JobRequest polite = Job("polite", 8, 100);
  polite.may_preempt = false;
  ASSERT_TRUE(s.Enqueue(polite, kMinute).ok());
  Decisions d = s.Schedule(kMinute);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.preemption_searches, 0);
  s.Remove("low", 2 * kMinute);
  d = s.Schedule(2 * kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "polite");
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST_F(SchedulerTest, QuotaReclaimTakesBorrowedGpusFirst) {
  Add(MakeNode("a", 8));
  Add(MakeNode("b", 8));
  ASSERT_TRUE(s.SetTenant(TenantInfo{"ta", 1.0, {{"H100 80GB", 8}}, -1}).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"tb", 1.0, {{"H100 80GB", 8}}, -1}).ok());
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    JobRequest j = Job("ta-" + std::to_string(i), 4, 0, true);
    j.tenant = "ta";
    Submit(j, i);
    ids.push_back(j.id);
  }
  Decisions d = Pass(10);
  ASSERT_EQ(d.bindings.size(), 4u);
  EXPECT_EQ(s.Usage("ta").borrowed_milli, 8000);
  JobRequest b = Job("tb-0", 4, 0, false);
  b.tenant = "tb";
  Submit(b, 20);
  d = Pass(20);
  ASSERT_EQ(d.preemptions.size(), 1u);
  // Jobs 0 and 1 ran within ta's guarantee; 2 and 3 borrowed.
  EXPECT_TRUE(d.preemptions[0].job_id == "ta-2" || d.preemptions[0].job_id == "ta-3") << d.preemptions[0].job_id;
  EXPECT_NE(d.preemptions[0].reason.find("reclaims"), std::string::npos);
}

TEST_F(SchedulerTest, BorrowLimitHoldsATenantBack) {
  Add(MakeNode("a", 8));
  ASSERT_TRUE(s.SetTenant(TenantInfo{"t", 1.0, {{"H100 80GB", 2}}, 1}).ok());
  JobRequest j = Job("j1", 3);
  j.tenant = "t";
  Submit(j);
  j.id = "j2";
  j.gpus = 1;
  Submit(j);
  Decisions d = Pass();
  EXPECT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(s.PendingReason("j2").rfind("waiting: tenant 't' would exceed its borrowing limit of 1 GPU", 0), 0u)
      << s.PendingReason("j2");
  JobRequest huge = Job("h", 4);
  huge.tenant = "t";
  EXPECT_TRUE(s.NeverFits(huge).has_value());
}

TEST_F(SchedulerTest, EasyBackfillNeverDelaysTheReservation) {
  Add(MakeNode("a", 8));
  JobRequest run = Job("running", 4);
  run.runtime_estimate_ms = 60 * kMinute;
  Submit(run);
  Pass();
  Submit(Job("big", 8), 1);  // waits for "running": reservation on a
  JobRequest short_job = Job("short", 2);
  short_job.runtime_estimate_ms = 30 * kMinute;  // ends before the reservation
  Submit(short_job, 2);
  JobRequest long_job = Job("long", 2);
  long_job.runtime_estimate_ms = 120 * kMinute;  // would delay "big"
  Submit(long_job, 3);
  Decisions d = Pass(4);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "short");
  EXPECT_NE(s.PendingReason("big").find("next in line: GPUs on node a are reserved for it, expected free in about 59m"),
            std::string::npos)
      << s.PendingReason("big");
  EXPECT_NE(s.PendingReason("long").find("reserved for big"), std::string::npos) << s.PendingReason("long");
}

TEST(SchedulerFifoTest, WithoutBackfillTheHeadBlocksEveryone) {
  Scheduler s(Config{.queue = QueuePolicy::kFifo, .backfill = false});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 4)).ok());
  ASSERT_TRUE(s.Enqueue(Job("big", 3), 0).ok());
  ASSERT_EQ(s.Schedule(0).bindings.size(), 1u);
  ASSERT_TRUE(s.Enqueue(Job("big2", 4), 1).ok());
  ASSERT_TRUE(s.Enqueue(Job("small", 1), 2).ok());
  EXPECT_TRUE(s.Schedule(3).bindings.empty());
  EXPECT_EQ(s.PendingReason("small").rfind("waiting: queued behind big2", 0), 0u) << s.PendingReason("small");
  s.Remove("big", 4);
  Decisions d = s.Schedule(4);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "big2");
}

TEST(SchedulerPriorityTest, AgingLetsAnOldJobOvertake) {
  Scheduler s(Config{.queue = QueuePolicy::kPriority, .preemption = false, .aging_ms = kMinute});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 1)).ok());
  ASSERT_TRUE(s.Enqueue(Job("block", 1), 0).ok());
  (void)s.Schedule(0);
  ASSERT_TRUE(s.Enqueue(Job("old-low", 1, 0), 0).ok());
  ASSERT_TRUE(s.Enqueue(Job("new-high", 1, 5), 10 * kMinute).ok());
  s.Remove("block", 10 * kMinute);
  Decisions d = s.Schedule(10 * kMinute);  // old-low has aged 10 levels: 10 > 5
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "old-low");
}

TEST(SchedulerFairShareTest, WeightedTenantsShareByDominantResource) {
  Scheduler s(Config{.queue = QueuePolicy::kFairShare, .backfill = true, .preemption = false});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"heavy", 3.0, {}, -1}).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"light", 1.0, {}, -1}).ok());
  for (int i = 0; i < 8; ++i) {
    for (const char* t : {"heavy", "light"}) {
      JobRequest j = Job(std::string(t) + std::to_string(i), 1);
      j.tenant = t;
      ASSERT_TRUE(s.Enqueue(j, 0).ok());
    }
  }
  Decisions d = s.Schedule(0);
  ASSERT_EQ(d.bindings.size(), 8u);
  EXPECT_EQ(s.Usage("heavy").milli_gpus, 6000);  // 3:1
  EXPECT_EQ(s.Usage("light").milli_gpus, 2000);
  EXPECT_TRUE(s.CheckInvariants().ok());
}

// CPU-only work counts in its tenant's dominant share by its CPU, and a
// CPU quota holds any of the tenant's jobs back (a "quota" wait).
TEST(SchedulerFairShareTest, CpuCountsInTheDominantShareAndACpuQuotaHoldsJobsBack) {
  Scheduler s(Config{.queue = QueuePolicy::kFairShare, .backfill = true, .preemption = false});
  NodeInfo n = MakeNode("a", 1);
  n.cpu_milli = 16000;
  ASSERT_TRUE(s.UpsertNode(n).ok());
  TenantInfo crunch{"crunch", 1.0, {}, -1};
  crunch.max_cpu_milli = 14000;
  ASSERT_TRUE(s.SetTenant(crunch).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"other", 1.0, {}, -1}).ok());
  JobRequest cpu = Job("crunch-cpu", 0);
  cpu.tenant = "crunch";
  cpu.cpu_milli = 12000;
  ASSERT_TRUE(s.Enqueue(cpu, 0).ok());
  ASSERT_EQ(s.Schedule(0).bindings.size(), 1u);
  // One GPU, two tenants without GPUs: the one holding 12 of 16 CPUs waits.
  for (const char* t : {"crunch", "other"}) {
    JobRequest j = Job(std::string(t) + "-gpu", 1);
    j.tenant = t;
    ASSERT_TRUE(s.Enqueue(j, 1).ok());
  }
  Decisions d = s.Schedule(1);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "other-gpu");
  // 12 + 3 CPUs would pass crunch's quota of 14; the node has them free.
  JobRequest more = Job("crunch-more", 0);
  more.tenant = "crunch";
  more.cpu_milli = 3000;
  ASSERT_TRUE(s.Enqueue(more, 2).ok());
  (void)s.Schedule(2);
  EXPECT_EQ(s.PendingClass("crunch-more"), "quota");
  EXPECT_NE(s.PendingReason("crunch-more").find("14 CPUs (holds 12)"), std::string::npos)
      << s.PendingReason("crunch-more");
  s.Remove("crunch-cpu", 3);
  EXPECT_EQ(s.Schedule(3).bindings.size(), 1u);
  EXPECT_TRUE(s.CheckInvariants().ok());
  crunch.max_cpu_milli = -2;
  EXPECT_FALSE(s.SetTenant(crunch).ok());
}

// GPUs of jobs already preempted and still stopping are not counted when a
// later decision judges whether their tenant keeps its guarantee: reclaim
// takes exactly what is borrowed, in one pass or over several.
TEST(SchedulerPreemptionTest, StoppingJobsDoNotProtectAGuaranteeTwice) {
  Scheduler s(Config{.queue = QueuePolicy::kFifo, .preemption = true});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"owner", 1.0, {{"H100 80GB", 4}}, -1}).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"borrower", 1.0, {{"H100 80GB", 4}}, -1}).ok());
  for (int i = 0; i < 6; ++i) {
    JobRequest j = Job("b" + std::to_string(i), 1, 0, true);
    j.tenant = "borrower";
    ASSERT_TRUE(s.Enqueue(j, 0).ok());
  }
  ASSERT_EQ(s.Schedule(0).bindings.size(), 6u);  // 2 beyond the guarantee of 4
  auto submit = [&](const std::string& id, int64_t now) {
    JobRequest j = Job(id, 2);
    j.tenant = "owner";
    ASSERT_TRUE(s.Enqueue(j, now).ok());
  };
  submit("o1", 1'000);  // 2 free GPUs: runs without preempting
  ASSERT_EQ(s.Schedule(1'000).bindings.size(), 1u);
  submit("o2", 2'000);  // reclaims the 2 borrowed GPUs
  Decisions d = s.Schedule(2'000);
  EXPECT_EQ(d.preemptions.size(), 2u);
  // Before those two stop, another pass: the borrower is at its guarantee
  // once they are gone, so nothing more is taken.
  submit("o3", 3'000);
  d = s.Schedule(3'000);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_TRUE(s.CheckInvariants().ok());
}

TEST(SchedulerLasTest, LeastAttainedServiceGoesFirst) {
  Scheduler s(Config{.queue = QueuePolicy::kLas, .preemption = false});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 1)).ok());
  ASSERT_TRUE(s.Enqueue(Job("veteran", 1), 0).ok());
  (void)s.Schedule(0);
  ASSERT_TRUE(s.Requeue("veteran", 60 * kMinute).ok());  // 1 GPU-hour attained: level 1
  ASSERT_TRUE(s.Enqueue(Job("fresh", 1), 61 * kMinute).ok());
  Decisions d = s.Schedule(61 * kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "fresh");
}

// Levels are discrete (Tiresias): within one, submission order, whatever
// the service attained.
TEST(SchedulerLasTest, WithinALevelSubmissionOrder) {
  Scheduler s(Config{.queue = QueuePolicy::kLas, .preemption = false});
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 1)).ok());
  ASSERT_TRUE(s.Enqueue(Job("first", 1), 0).ok());
  (void)s.Schedule(0);
  ASSERT_TRUE(s.Requeue("first", 59 * kMinute).ok());  // 59 GPU-minutes: still level 0
  ASSERT_TRUE(s.Enqueue(Job("second", 1), 59 * kMinute).ok());
  Decisions d = s.Schedule(59 * kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "first");
}

// With preemption a fresh job preempts a preemptible job that has passed
// a level; not one below the threshold, not one of higher priority.
TEST(SchedulerLasTest, PreemptsAJobOfAHigherLevel) {
  Config c{.queue = QueuePolicy::kLas, .preemption = true};
  c.las_thresholds = {60 * kMinute};
  {
    Scheduler s(c);
    ASSERT_TRUE(s.UpsertNode(MakeNode("a", 2)).ok());
    ASSERT_TRUE(s.Enqueue(Job("long", 2, 0, /*preemptible=*/true), 0).ok());
    ASSERT_EQ(s.Schedule(0).bindings.size(), 1u);
    ASSERT_TRUE(s.Enqueue(Job("short", 1), 20 * kMinute).ok());
    // 2 GPUs x 20 min = 40 GPU-minutes: level 0, like short's.
    EXPECT_TRUE(s.Schedule(20 * kMinute).preemptions.empty());
    Decisions d = s.Schedule(31 * kMinute);  // 62 GPU-minutes: level 1
    ASSERT_EQ(d.preemptions.size(), 1u);
    EXPECT_EQ(d.preemptions[0].job_id, "long");
    EXPECT_EQ(d.preemptions[0].for_job, "short");
    EXPECT_NE(d.preemptions[0].reason.find("least attained service: level 0 < 1"), std::string::npos)
        << d.preemptions[0].reason;
    ASSERT_TRUE(s.Requeue("long", 31 * kMinute).ok());
    d = s.Schedule(31 * kMinute);
    ASSERT_EQ(d.bindings.size(), 1u);
    EXPECT_EQ(d.bindings[0].job_id, "short");
    EXPECT_TRUE(s.CheckInvariants().ok());
  }
  {
    Scheduler s(c);  // the long job has a higher priority: kept
    ASSERT_TRUE(s.UpsertNode(MakeNode("a", 2)).ok());
    ASSERT_TRUE(s.Enqueue(Job("long", 2, 5, /*preemptible=*/true), 0).ok());
    (void)s.Schedule(0);
    ASSERT_TRUE(s.Enqueue(Job("short", 1), 40 * kMinute).ok());
    EXPECT_TRUE(s.Schedule(40 * kMinute).preemptions.empty());
  }
  {
    Scheduler s(c);  // not preemptible: kept
    ASSERT_TRUE(s.UpsertNode(MakeNode("a", 2)).ok());
    ASSERT_TRUE(s.Enqueue(Job("long", 2), 0).ok());
    (void)s.Schedule(0);
    ASSERT_TRUE(s.Enqueue(Job("short", 1), 40 * kMinute).ok());
    EXPECT_TRUE(s.Schedule(40 * kMinute).preemptions.empty());
  }
  {
    Config fifo = c;  // the rule is LAS's only
    fifo.queue = QueuePolicy::kFifo;
    Scheduler s(fifo);
    ASSERT_TRUE(s.UpsertNode(MakeNode("a", 2)).ok());
    ASSERT_TRUE(s.Enqueue(Job("long", 2, 0, true), 0).ok());
    (void)s.Schedule(0);
    ASSERT_TRUE(s.Enqueue(Job("short", 1), 40 * kMinute).ok());
    EXPECT_TRUE(s.Schedule(40 * kMinute).preemptions.empty());
  }
}

// The starvation guard: a job that ran for T and has waited 4T since it was
// queued again goes back to level 0, ahead of the fresh jobs behind it in
// submission order; with the factor at 0 it never does.
TEST(SchedulerLasTest, TheStarvationGuardPromotesAJobThatWaitedTooLong) {
  for (double factor : {4.0, 0.0}) {
    Config c{.queue = QueuePolicy::kLas, .preemption = false};
    c.las_thresholds = {60 * kMinute};
    c.las_starvation_factor = factor;
    Scheduler s(c);
    ASSERT_TRUE(s.UpsertNode(MakeNode("a", 2)).ok());
    ASSERT_TRUE(s.Enqueue(Job("veteran", 2), 0).ok());
    ASSERT_EQ(s.Schedule(0).bindings.size(), 1u);
    ASSERT_TRUE(s.Requeue("veteran", 60 * kMinute).ok());  // 2 GPU-hours in 1 hour: level 1
    EXPECT_EQ(s.Attained("veteran", 60 * kMinute), 120 * kMinute);
    // Fresh 2-GPU jobs, one after another, each running 10 minutes: the
    // veteran (submitted first) waits behind each while it is level 1.
    int64_t now = 60 * kMinute;
    int fresh = 0;
    std::string first_not_fresh;
    while (now <= 60 * kMinute + 5 * 60 * kMinute) {
      ASSERT_TRUE(s.Enqueue(Job(fmt::format("fresh-{}", fresh++), 2), now).ok());
      Decisions d = s.Schedule(now);
      ASSERT_EQ(d.bindings.size(), 1u);
      if (d.bindings[0].job_id == "veteran") {
        EXPECT_EQ(d.promotions, 1);
        first_not_fresh = fmt::format("{}", now);
        break;
      }
      EXPECT_EQ(d.promotions, 0);
      now += 10 * kMinute;
      s.Remove(d.bindings[0].job_id, now);  // it finished
    }
    if (factor > 0) {
      // Waited 4 x 1 hour: promoted at the first pass at or after 5 hours.
      EXPECT_EQ(first_not_fresh, fmt::format("{}", 60 * kMinute + 4 * 60 * kMinute));
      EXPECT_EQ(s.Attained("veteran", 300 * kMinute), 0);  // forgiven
    } else {
      EXPECT_EQ(first_not_fresh, "") << "never promoted";
    }
    EXPECT_TRUE(s.CheckInvariants().ok());
  }
}

// What a restarted server queues again: the attained service and the time
// the job was last queued come with the request, so the job keeps its level
// and its claim to promotion.
TEST(SchedulerLasTest, AttainedServiceAndQueuedTimeComeBackWithTheRequest) {
  Config c{.queue = QueuePolicy::kLas, .preemption = false};
  c.las_thresholds = {60 * kMinute};
  Scheduler s(c);
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 1)).ok());
  JobRequest veteran = Job("veteran", 1);
  veteran.attained_gpu_ms = 90 * kMinute;  // level 1, ran 90 minutes
  veteran.queued_ms = 100 * kMinute;
  ASSERT_TRUE(s.Enqueue(veteran, /*now (its submission)=*/0).ok());
  ASSERT_TRUE(s.Enqueue(Job("fresh", 1), 200 * kMinute).ok());
  EXPECT_EQ(s.Attained("veteran", 200 * kMinute), 90 * kMinute);
  Decisions d = s.Schedule(200 * kMinute);  // waited 100 minutes < 4 x 90
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "fresh");
  s.Remove("fresh", 460 * kMinute);
  ASSERT_TRUE(s.Enqueue(Job("fresh-2", 1), 460 * kMinute).ok());
  d = s.Schedule(460 * kMinute);  // waited 360 minutes = 4 x 90
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "veteran");
  EXPECT_EQ(d.promotions, 1);

  // A restored (bound) job counts its earlier service too.
  Scheduler r(c);
  ASSERT_TRUE(r.UpsertNode(MakeNode("a", 1)).ok());
  JobRequest running = Job("running", 1);
  running.attained_gpu_ms = 30 * kMinute;
  Binding b{"running", {Placement{"a", {0}}}};
  ASSERT_TRUE(r.Restore(running, b, 10 * kMinute).ok());
  EXPECT_EQ(r.Attained("running", 40 * kMinute), 60 * kMinute);
  ASSERT_TRUE(r.Requeue("running", 40 * kMinute).ok());
  EXPECT_EQ(r.Attained("running", 50 * kMinute), 60 * kMinute);
}

}  // namespace
}  // namespace drover::sched
