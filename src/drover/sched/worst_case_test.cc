// The bounded worst cases of issue 17 (item 3), as behaviour: a tenant at
// its quota is refused once per GPU class and holds up no one else; a
// preemption search that cannot help is not run again until something it
// reads changes. Their cost is measured by bench/sched_bench (BM_Worst).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "drover/sched/scheduler.h"

namespace drover::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMinute = 60'000;

NodeInfo Node(const std::string& name, int gpus, const std::string& model = "H100 80GB",
              const std::string& switch_label = "") {
  NodeInfo n;
  n.name = name;
  n.schedulable = true;
  for (int i = 0; i < gpus; ++i) n.gpus.push_back(GpuInfo{i, "nvidia", model, 80 * kGiB, true, 0});
  n.links.assign(static_cast<size_t>(gpus) * gpus, Link::kFabric);
  if (!switch_label.empty()) n.labels["switch"] = switch_label;
  return n;
}

JobRequest Job(const std::string& id, int gpus, const std::string& tenant = "default", int priority = 0,
               bool preemptible = false) {
  JobRequest j;
  j.id = id;
  j.gpus = gpus;
  j.tenant = tenant;
  j.priority = priority;
  j.preemptible = preemptible;
  return j;
}

// Binds `job` on `node`'s first GPUs, as a recovered server would.
Status Bind(Scheduler& s, const JobRequest& job, const std::string& node) {
  Placement p;
  p.node = node;
  for (int g = 0; g < job.gpus; ++g) p.gpu_indices.push_back(g);
  return s.Restore(job, Binding{job.id, {p}}, 0);
}

void ExpectInvariants(const Scheduler& s) {
  Status st = s.CheckInvariants();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Strict order (no backfill): a hundred jobs of a tenant at its quota come
// first, yet another tenant's job behind them starts in the same pass; each
// of them waits for its quota, and the first starts once the quota grows.
TEST(WorstCaseTest, JobsAtTheirQuotaDoNotHoldUpAnotherTenant) {
  Config c;
  c.queue = QueuePolicy::kFifo;
  c.backfill = false;
  c.verify_memos = true;
  Scheduler s(c);
  ASSERT_TRUE(s.UpsertNode(Node("a", 8)).ok());
  ASSERT_TRUE(s.UpsertNode(Node("b", 8)).ok());
  TenantInfo capped{"capped", 1.0, {}, -1, {{"*", 2}}};
  ASSERT_TRUE(s.SetTenant(capped).ok());
  ASSERT_TRUE(s.Enqueue(Job("held", 2, "capped"), 0).ok());
  ASSERT_EQ(s.Schedule(0).bindings.size(), 1u);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(s.Enqueue(Job("q-" + std::to_string(i), 1, "capped"), 1).ok());
  ASSERT_TRUE(s.Enqueue(Job("other", 1, "free"), 2).ok());
  Decisions d = s.Schedule(kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "other");
  EXPECT_EQ(d.considered, 101);  // each capped job is decided about (refused), not passed over
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(s.HeldByTenantLimit("q-" + std::to_string(i))) << i;
  EXPECT_NE(s.PendingReason("q-0").find("quota"), std::string::npos) << s.PendingReason("q-0");
  ExpectInvariants(s);
  // One more GPU of quota: the first capped job in order starts, the rest wait.
  capped.max_gpus["*"] = 3;
  ASSERT_TRUE(s.SetTenant(capped).ok());
  d = s.Schedule(2 * kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "q-0");
  EXPECT_TRUE(s.HeldByTenantLimit("q-1"));
  ExpectInvariants(s);
}

// A quota on one GPU model refuses that class only: a job that accepts
// another model still starts there, and one bound to the capped model waits
// for the quota, not for room.
TEST(WorstCaseTest, AQuotaOnOneModelLeavesTheOtherClasses) {
  Config c;
  c.verify_memos = true;
  Scheduler s(c);
  ASSERT_TRUE(s.UpsertNode(Node("h", 8, "H100 80GB")).ok());
  ASSERT_TRUE(s.UpsertNode(Node("a", 8, "A100 80GB")).ok());
  ASSERT_TRUE(s.SetTenant(TenantInfo{"t", 1.0, {}, -1, {{"H100 80GB", 0}}}).ok());
  JobRequest any = Job("any", 2, "t");
  ASSERT_TRUE(s.Enqueue(any, 0).ok());
  JobRequest h100 = Job("h100", 1, "t");
  h100.gpu_model = "H100 80GB";
  ASSERT_TRUE(s.Enqueue(h100, 1).ok());
  JobRequest share = Job("share", 1, "t");
  share.gpu_milli = 250;
  share.gpu_memory_bytes = 10 * kGiB;
  ASSERT_TRUE(s.Enqueue(share, 2).ok());
  Decisions d = s.Schedule(kMinute);
  ASSERT_EQ(d.bindings.size(), 2u);
  for (const Binding& b : d.bindings) {
    ASSERT_EQ(b.replicas.size(), 1u);
    EXPECT_EQ(b.replicas[0].node, "a") << b.job_id;
  }
  EXPECT_TRUE(s.IsPending("h100"));
  EXPECT_TRUE(s.HeldByTenantLimit("h100"));
  ExpectInvariants(s);
}

// A switch gang that no switch can take, while free GPUs elsewhere would
// hold it: the preemption search finds room without victims (it does not
// keep a gang in one switch) and fails. It is not run again while nothing
// it reads changes, the clock moving included; a node freeing GPUs drops
// the memo and the search runs once more.
TEST(WorstCaseTest, AUselessGangSearchWaitsForANodeToFreeGpus) {
  Config c;
  c.verify_memos = true;
  Scheduler s(c);
  ASSERT_TRUE(s.UpsertNode(Node("a", 8, "H100 80GB", "s1")).ok());
  ASSERT_TRUE(s.UpsertNode(Node("b", 8, "H100 80GB", "s1")).ok());
  ASSERT_TRUE(s.UpsertNode(Node("c", 8, "H100 80GB", "s2")).ok());
  ASSERT_TRUE(s.UpsertNode(Node("d", 8, "H100 80GB", "s2")).ok());
  ASSERT_TRUE(s.UpsertNode(Node("e", 4, "H100 80GB", "s3")).ok());
  // b and c are held by work that cannot be preempted; a low-priority
  // preemptible job on the small node e makes a search worth trying.
  ASSERT_TRUE(Bind(s, Job("solid-b", 7), "b").ok());
  JobRequest tiny = Job("tiny-b", 1);
  Placement last{"b", {7}};
  ASSERT_TRUE(s.Restore(tiny, Binding{tiny.id, {last}}, 0).ok());
  ASSERT_TRUE(Bind(s, Job("solid-c", 8), "c").ok());
  ASSERT_TRUE(Bind(s, Job("low-e", 4, "default", 0, true), "e").ok());
  ASSERT_EQ(s.HeldMask("b"), 0xffu);
  JobRequest gang = Job("gang", 8, "default", 100);
  gang.replicas = 2;
  gang.topology = Topology::kSwitch;
  gang.runtime_estimate_ms = 60 * kMinute;
  ASSERT_TRUE(s.Enqueue(gang, kMinute).ok());
  Decisions d = s.Schedule(kMinute);
  EXPECT_TRUE(d.bindings.empty());
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.preemption_searches, 1);
  ExpectInvariants(s);
  for (int k = 2; k <= 4; ++k) {
    d = s.Schedule(k * kMinute);
    EXPECT_TRUE(d.preemptions.empty());
    EXPECT_EQ(d.preemption_searches, 0) << "pass at minute " << k;
    ExpectInvariants(s);
  }
  // A GPU of b frees: not enough for the gang, but the search reads it.
  s.Remove("tiny-b", 5 * kMinute);
  d = s.Schedule(5 * kMinute);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.preemption_searches, 1);
  EXPECT_EQ(s.Schedule(6 * kMinute).preemption_searches, 0);
  ExpectInvariants(s);
  // c frees: switch s2 takes the gang.
  s.Remove("solid-c", 7 * kMinute);
  d = s.Schedule(7 * kMinute);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].job_id, "gang");
  ExpectInvariants(s);
}

// A selector of a rare label is placed from the label's nodes alone (the
// index follows relabelled nodes), and binpacks among them as the buckets
// would: the fullest of them that fits.
TEST(WorstCaseTest, ARareSelectorTakesItsNodesInBinpackOrder) {
  Scheduler s;
  for (int i = 0; i < 32; ++i) {
    NodeInfo n = Node("n" + std::to_string(i), 8);
    if (i == 5 || i == 9) n.labels["pool"] = "rare";
    ASSERT_TRUE(s.UpsertNode(n).ok());
  }
  ASSERT_TRUE(Bind(s, Job("on-9", 6), "n9").ok());
  JobRequest j = Job("sel", 2);
  j.node_selector["pool"] = "rare";
  ASSERT_TRUE(s.Enqueue(j, 0).ok());
  Decisions d = s.Schedule(0);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].replicas[0].node, "n9");  // 2 free there: the fullest that fits
  ExpectInvariants(s);
  // n9 is full now; the next goes to n5. Then n5 loses the label and n20
  // gains it: a third job goes to n20 only.
  j.id = "sel2";
  ASSERT_TRUE(s.Enqueue(j, 1).ok());
  d = s.Schedule(1);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].replicas[0].node, "n5");
  ASSERT_TRUE(s.UpsertNode(Node("n5", 8)).ok());
  NodeInfo n20 = Node("n20", 8);
  n20.labels["pool"] = "rare";
  ASSERT_TRUE(s.UpsertNode(n20).ok());
  ExpectInvariants(s);
  j.id = "sel3";
  j.gpus = 8;
  ASSERT_TRUE(s.Enqueue(j, 2).ok());
  d = s.Schedule(2);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(d.bindings[0].replicas[0].node, "n20");
  // No node carries pool=none: such a job waits.
  JobRequest none = Job("none", 1);
  none.node_selector["pool"] = "none";
  ASSERT_TRUE(s.Enqueue(none, 3).ok());
  EXPECT_TRUE(s.Schedule(3).bindings.empty());
  ExpectInvariants(s);
}

// Jobs of one shape that cannot start share each node's reservation answer
// (computed for the first, reused by the next); a job of another shape (here
// another selector) gets its own. Without verify_memos every job walks all
// four nodes (a label on half of them is not rare), so a job of pool y meets
// the answers kept for pool x's shape; with it, every reused answer is
// recomputed and compared.
TEST(WorstCaseTest, LikeJobsShareTheReservationAndOtherShapesDoNot) {
  for (bool verify : {false, true}) {
    Config c;
    c.verify_memos = verify;
    Scheduler s(c);
    // pool x: nodes a (free at 50 min) and b (30); pool y: c (20) and d (40).
    const std::pair<const char*, int64_t> ends[] = {{"a", 50}, {"b", 30}, {"c", 20}, {"d", 40}};
    for (const auto& [name, end] : ends) {
      NodeInfo n = Node(name, 2);
      n.labels["pool"] = std::string(name) < "c" ? "x" : "y";
      ASSERT_TRUE(s.UpsertNode(n).ok());
      JobRequest holder = Job(std::string("holder-") + name, 2);
      holder.runtime_estimate_ms = end * kMinute;
      ASSERT_TRUE(Bind(s, holder, name).ok());
    }
    auto blocked = [&](const std::string& id, const std::string& pool) {
      JobRequest j = Job(id, 2);
      j.node_selector["pool"] = pool;
      EXPECT_TRUE(s.Enqueue(j, kMinute).ok());
      EXPECT_TRUE(s.Schedule(kMinute).bindings.empty());
      std::string why = s.PendingReason(id);
      s.Remove(id, kMinute);
      ExpectInvariants(s);
      return why;
    };
    for (const std::string id : {"x-1", "x-2", "x-3"}) {
      EXPECT_NE(blocked(id, "x").find("node b"), std::string::npos) << id << " verify " << verify;
    }
    EXPECT_NE(blocked("y-1", "y").find("node c"), std::string::npos) << "verify " << verify;
    EXPECT_NE(blocked("x-4", "x").find("node b"), std::string::npos) << "verify " << verify;
  }
}

// Gangs that cannot get a reservation (one of their two nodes is drained):
// the first of a shape walks the nodes, the next ones of that shape in the
// same pass do not (verify_memos walks anyway and checks they fail again);
// once the node is back, the next pass reserves.
TEST(WorstCaseTest, AShapeThatFailedToReserveIsNotWalkedAgainInThePass) {
  Config c;
  c.verify_memos = true;
  Scheduler s(c);
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(s.UpsertNode(Node(name, 2)).ok());
    JobRequest holder = Job(std::string("holder-") + name, 2);
    holder.runtime_estimate_ms = 30 * kMinute;
    ASSERT_TRUE(Bind(s, holder, name).ok());
  }
  s.SetSchedulable("b", false);
  for (int i = 0; i < 5; ++i) {
    JobRequest gang = Job("gang-" + std::to_string(i), 2);
    gang.replicas = 2;
    ASSERT_TRUE(s.Enqueue(gang, kMinute).ok());
  }
  EXPECT_TRUE(s.Schedule(kMinute).bindings.empty());
  ExpectInvariants(s);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(s.PendingReason("gang-" + std::to_string(i)).find("reserved"), std::string::npos) << i;
  }
  s.SetSchedulable("b", true);
  EXPECT_TRUE(s.Schedule(2 * kMinute).bindings.empty());
  ExpectInvariants(s);
  EXPECT_NE(s.PendingReason("gang-0").find("reserved"), std::string::npos) << s.PendingReason("gang-0");
}

// Jobs that no node can host for lack of CPU (every node with a free GPU
// has too few cores left): within a pass the first of a shape walks the
// nodes, and jobs of the shape asking as much CPU or more, or more than any
// refusing node had left, are known to fail (verify_memos walks anyway and
// checks that they do); a job asking less is
// placed, in the same pass, behind them (backfill). The next pass after a
// node frees its cores places the next of them.
TEST(WorstCaseTest, JobsNoNodeCanHostCostOneWalkPerShapeAndStillStartWhenCoresFree) {
  for (bool verify : {false, true}) {
    Config c;
    c.queue = QueuePolicy::kFifo;
    c.verify_memos = verify;
    Scheduler s(c);
    for (const char* name : {"a", "b", "c"}) {
      NodeInfo n = Node(name, 4);
      n.cpu_milli = 32'000;
      ASSERT_TRUE(s.UpsertNode(n).ok());
      JobRequest holder = Job(std::string("holder-") + name, 2);
      holder.cpu_milli = 24'000;  // 8 cores left beside 2 free GPUs
      ASSERT_TRUE(Bind(s, holder, name).ok());
    }
    for (int i = 0; i < 40; ++i) {
      JobRequest big = Job("big-" + std::to_string(i), 1);
      big.cpu_milli = (i % 2 == 0 ? 12'000 : 16'000);  // the odd ones ask more: known from the even ones
      ASSERT_TRUE(s.Enqueue(big, 0).ok());
    }
    for (int cores = 30; cores > 12; --cores) {  // each asks less: known from the most any refusing node had left
      JobRequest down = Job("down-" + std::to_string(cores), 1);
      down.cpu_milli = cores * 1000;
      ASSERT_TRUE(s.Enqueue(down, 0).ok());
    }
    JobRequest gang = Job("gang", 1);
    gang.replicas = 2;
    gang.cpu_milli = 12'000;
    ASSERT_TRUE(s.Enqueue(gang, 0).ok());
    JobRequest small = Job("small", 1);
    small.cpu_milli = 8'000;
    ASSERT_TRUE(s.Enqueue(small, 0).ok());
    Decisions d = s.Schedule(1);
    ASSERT_EQ(d.bindings.size(), 1u) << "verify " << verify;
    EXPECT_EQ(d.bindings[0].job_id, "small");
    EXPECT_EQ(d.considered, 60);
    ExpectInvariants(s);
    for (const std::string id : {"big-0", "big-1", "gang"}) EXPECT_TRUE(s.IsPending(id)) << id;
    // Node b's holder ends: its 32 cores and 4 GPUs are free; big-0 (the
    // first in the queue) takes one GPU and 12 cores, big-1 another with 16.
    s.Remove("holder-b", 2);
    d = s.Schedule(2);
    ASSERT_EQ(d.bindings.size(), 2u) << "verify " << verify;
    EXPECT_EQ(d.bindings[0].job_id, "big-0");
    EXPECT_EQ(d.bindings[1].job_id, "big-1");
    ExpectInvariants(s);
  }
}

// Shares with a host request: the walk of the shared GPUs in best-fit order
// skips the nodes whose CPU is too little (by the class's shared_host tree);
// with a node selector it walks only its label's nodes.
// Under verify_memos every placement is also made by visiting every shared
// GPU, and a difference fails CheckInvariants; without it the placements
// are the same, and each lands on a node with the cores.
TEST(WorstCaseTest, ASharesWalkSkipsNodesWithoutTheCoresAndLandsWhereTheFullWalkDoes) {
  std::vector<std::string> placed[2];
  for (bool verify : {false, true}) {
    Config c;
    c.verify_memos = verify;
    Scheduler s(c);
    // n<i>: one GPU, half of it held by a share that leaves 1 core (i even)
    // or 10 + i (i odd); m<i>: a quarter held, 16 cores left (a less full
    // share).
    std::map<std::string, int64_t> cores_left;
    auto add = [&](const std::string& name, int64_t held_milli, int64_t left) {
      NodeInfo n = Node(name, 1);
      n.cpu_milli = 32'000;
      n.labels["pool"] = cores_left.size() % 3 == 0 ? "x" : "y";  // a selector walks its label's nodes
      ASSERT_TRUE(s.UpsertNode(n).ok());
      JobRequest holder = Job("holder-" + name, 1);
      holder.gpu_milli = static_cast<int>(held_milli);
      holder.gpu_memory_bytes = 10 * kGiB;
      holder.cpu_milli = 32'000 - left * 1000;
      Placement p;
      p.node = name;
      p.gpu_indices = {0};
      p.gpu_milli = static_cast<int>(held_milli);
      p.gpu_memory_bytes = 10 * kGiB;
      ASSERT_TRUE(s.Restore(holder, Binding{holder.id, {p}}, 0).ok());
      cores_left[name] = left;
    };
    for (int i = 0; i < 20; ++i) add("n" + std::to_string(i), 500, i % 2 == 0 ? 1 : 10 + i);
    for (int i = 0; i < 3; ++i) add("m" + std::to_string(i), 250, 16);
    int k = 0;
    for (int64_t cores : {5, 7, 12, 3, 18, 16, 9, 2, 4, 40}) {
      JobRequest share = Job("s-" + std::to_string(k++), 1);
      share.gpu_milli = 250;
      share.gpu_memory_bytes = 10 * kGiB;
      share.cpu_milli = cores * 1000;
      if (k % 2 == 0) share.node_selector["pool"] = "x";
      ASSERT_TRUE(s.Enqueue(share, kMinute).ok());
      Decisions d = s.Schedule(kMinute);
      ExpectInvariants(s);
      const std::string node = d.bindings.size() == 1 ? d.bindings[0].replicas[0].node : "none";
      placed[verify].push_back(node);
      if (node != "none") {
        EXPECT_GE(cores_left[node], cores) << share.id << " on " << node;
        cores_left[node] -= cores;
      }
    }
    EXPECT_EQ(placed[verify].back(), "none");  // 40 cores: no node has them
  }
  EXPECT_EQ(placed[0], placed[1]);
}

}  // namespace
}  // namespace drover::sched
