// Preemption takes the least (issue 17, item 4): the victims chosen for a
// job are checked against an exhaustive search over every subset of the
// jobs it may preempt, on small random clusters.
//
// The documented key (preemption.cc): a set of victims costs first its
// highest victim priority, then the work it loses, GPUs (milli) x ms since
// each victim's last checkpoint, else since it started. For each case the
// scheduler's set must (a) let the job start once the victims are gone (the
// victims are removed and the next pass must bind the job, a switch gang
// under one switch), (b) cost exactly the exhaustive minimum, and (c) be
// empty when no subset lets the job start.
//
// The model of the oracle is deliberately simple and independent of the
// scheduler's: one GPU class, no host resources, no tenant guarantees (so a
// job may preempt exactly the preemptible jobs of lower priority), whole
// GPUs fit anywhere on a node (best-effort topology within the node). The
// least is exact where every running job runs on one node; where some run
// on two (VictimsOnSeveralNodes...), the set must still let the job start
// and exist whenever one does, but may cost more than the least (about 1
// case in 40 here; preemption_search.h says why).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "drover/common/rng.h"
#include "drover/sched/scheduler.h"

namespace drover::sched {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kGpuMem = 80 * kGiB;
constexpr int64_t kNow = 10'000'000;
constexpr int kMaxAllowed = 12;  // victims the exhaustive search enumerates (2^12 subsets)

NodeInfo MakeNode(const std::string& name, int gpus, const std::string& switch_label) {
  NodeInfo n;
  n.name = name;
  n.schedulable = true;
  for (int g = 0; g < gpus; ++g) n.gpus.push_back(GpuInfo{g, "nvidia", "H100 80GB", kGpuMem, true, 0});
  n.links.assign(static_cast<size_t>(gpus) * gpus, Link::kFabric);
  n.labels["switch"] = switch_label;
  return n;
}

struct Running {
  JobRequest req;
  std::vector<std::pair<int, std::vector<int>>> parts;  // (node, GPUs): one per replica
  int64_t start = 0;
  int64_t checkpoint = 0;  // 0: unknown
};

struct World {
  std::vector<NodeInfo> nodes;
  std::vector<int> switch_of;  // per node
  int switches = 0;
  std::vector<Running> running;
  JobRequest job;
  std::vector<int> allowed;  // indices into running: preemptible and of lower priority
};

// Cost under the documented key: (highest victim priority, work lost).
using Key = std::pair<int, int64_t>;

Key CostOf(const World& w, const std::vector<int>& victims) {
  Key k{INT_MIN, 0};
  for (int v : victims) {
    const Running& r = w.running[v];
    k.first = std::max(k.first, r.req.priority);
    k.second += r.req.milli() * (kNow - std::max(r.start, r.checkpoint));
  }
  return k;
}

// Whether the job fits once `removed` (indices into running) are gone.
bool Fits(const World& w, const std::vector<bool>& removed) {
  std::vector<std::vector<int>> milli(w.nodes.size());
  std::vector<std::vector<int64_t>> mem(w.nodes.size());
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    milli[n].assign(w.nodes[n].gpus.size(), kWholeGpu);
    mem[n].assign(w.nodes[n].gpus.size(), kGpuMem);
  }
  for (size_t i = 0; i < w.running.size(); ++i) {
    if (removed[i]) continue;
    const Running& r = w.running[i];
    for (const auto& [node, gpus] : r.parts) {
      for (int g : gpus) {
        milli[node][g] -= r.req.gpu_milli;
        mem[node][g] -= r.req.fractional() ? r.req.gpu_memory_bytes : kGpuMem;
      }
    }
  }
  const JobRequest& j = w.job;
  if (j.fractional()) {
    for (size_t n = 0; n < w.nodes.size(); ++n) {
      for (size_t g = 0; g < milli[n].size(); ++g) {
        if (milli[n][g] >= j.gpu_milli && mem[n][g] >= j.gpu_memory_bytes) return true;
      }
    }
    return false;
  }
  std::vector<int> per_switch(static_cast<size_t>(w.switches), 0);
  int anywhere = 0;
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    const int whole = static_cast<int>(std::count(milli[n].begin(), milli[n].end(), kWholeGpu));
    per_switch[w.switch_of[n]] += whole / j.gpus;
    anywhere += whole / j.gpus;
  }
  if (j.topology == Topology::kSwitch) {
    return *std::max_element(per_switch.begin(), per_switch.end()) >= j.replicas;
  }
  return anywhere >= j.replicas;
}

// The cheapest subset of the allowed victims that lets the job fit, by the
// documented key; nothing when none does.
std::optional<Key> Exhaustive(const World& w) {
  std::optional<Key> best;
  const size_t m = w.allowed.size();
  std::vector<bool> removed(w.running.size(), false);
  std::vector<int> set;
  for (uint32_t mask = 0; mask < (uint32_t{1} << m); ++mask) {
    set.clear();
    std::fill(removed.begin(), removed.end(), false);
    for (size_t b = 0; b < m; ++b) {
      if ((mask >> b) & 1) {
        removed[w.allowed[b]] = true;
        set.push_back(w.allowed[b]);
      }
    }
    const Key k = CostOf(w, set);
    if (best && !(k < *best)) continue;
    if (Fits(w, removed)) best = k;
  }
  return best;
}

// `spanning`: some whole-GPU running jobs of the same size on two nodes are
// one job of two replicas.
World Generate(Rng& rng, bool spanning) {
  World w;
  w.switches = static_cast<int>(rng.Uniform(2, 4));
  for (int s = 0; s < w.switches; ++s) {
    const int count = static_cast<int>(rng.Uniform(1, 3));
    for (int k = 0; k < count; ++k) {
      const int gpus = static_cast<int>(rng.Uniform(1, 8));
      w.nodes.push_back(MakeNode("n" + std::to_string(s) + "-" + std::to_string(k), gpus, "s" + std::to_string(s)));
      w.switch_of.push_back(s);
    }
  }
  const char* tenants[] = {"a", "b", "c"};
  auto running = [&](int node, std::vector<int> gpus, int milli) {
    Running r;
    r.req.id = "r" + std::to_string(w.running.size());
    r.req.tenant = tenants[rng.Uniform(0, 2)];
    r.req.priority = static_cast<int>(rng.Uniform(0, 4));
    r.req.preemptible = rng.Bernoulli(0.75);
    r.req.gpus = static_cast<int>(gpus.size());
    r.req.gpu_milli = milli;
    if (milli < kWholeGpu) r.req.gpu_memory_bytes = milli / 25 * kGiB;
    r.req.runtime_estimate_ms = rng.Bernoulli(0.5) ? rng.Uniform(1, 100) * 60'000 : 0;
    r.parts.emplace_back(node, std::move(gpus));
    r.start = rng.Uniform(0, kNow - 1);
    r.checkpoint = rng.Bernoulli(0.5) ? rng.Uniform(r.start, kNow) : 0;
    w.running.push_back(std::move(r));
  };
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    const int gpus = static_cast<int>(w.nodes[n].gpus.size());
    for (int g = 0; g < gpus;) {
      const double r = rng.UniformReal();
      if (r < 0.2) {
        ++g;  // free
      } else if (r < 0.45) {
        int left = kWholeGpu;  // one to three shares of this GPU
        for (int k = rng.Uniform(1, 3); k > 0; --k) {
          const int milli = rng.Bernoulli(0.5) ? 250 : 500;
          if (milli > left) break;
          left -= milli;
          running(static_cast<int>(n), {g}, milli);
        }
        ++g;
      } else {
        const int size = static_cast<int>(rng.Uniform(1, std::min(4, gpus - g)));
        std::vector<int> held;
        for (int k = 0; k < size; ++k) held.push_back(g + k);
        running(static_cast<int>(n), std::move(held), kWholeGpu);
        g += size;
      }
    }
  }
  if (spanning) {
    for (size_t a = 0; a < w.running.size(); ++a) {
      Running& r = w.running[a];
      if (r.req.fractional() || r.parts.size() != 1 || !rng.Bernoulli(0.4)) continue;
      for (size_t b = a + 1; b < w.running.size(); ++b) {
        const Running& o = w.running[b];
        if (o.req.fractional() || o.parts.size() != 1 || o.req.gpus != r.req.gpus ||
            o.parts[0].first == r.parts[0].first) {
          continue;
        }
        r.parts.push_back(o.parts[0]);
        r.req.replicas = 2;
        w.running.erase(w.running.begin() + static_cast<std::ptrdiff_t>(b));
        break;
      }
    }
    for (size_t a = 0; a < w.running.size(); ++a) w.running[a].req.id = "r" + std::to_string(a);
  }
  JobRequest& j = w.job;
  j.id = "p";
  j.tenant = tenants[rng.Uniform(0, 2)];
  j.priority = static_cast<int>(rng.Uniform(1, 5));
  j.runtime_estimate_ms = 30 * 60'000;
  const double shape = rng.UniformReal();
  if (shape < 0.35) {
    j.gpus = static_cast<int>(rng.Uniform(1, 8));
  } else if (shape < 0.5) {
    j.gpu_milli = static_cast<int>(rng.Uniform(1, 3)) * 250;
    j.gpu_memory_bytes = j.gpu_milli / 25 * kGiB;
  } else {
    j.replicas = static_cast<int>(rng.Uniform(2, 3));
    j.gpus = static_cast<int>(rng.Uniform(1, 4));
    j.topology = shape < 0.85 ? Topology::kSwitch : Topology::kBestEffort;
  }
  for (size_t i = 0; i < w.running.size(); ++i) {
    const JobRequest& r = w.running[i].req;
    if (r.preemptible && r.priority < j.priority) w.allowed.push_back(static_cast<int>(i));
  }
  return w;
}

Status Load(Scheduler& s, const World& w) {
  for (const NodeInfo& n : w.nodes) DROVER_RETURN_IF_ERROR(s.UpsertNode(n));
  for (const Running& r : w.running) {
    Binding b{r.req.id, {}};
    for (const auto& [node, gpus] : r.parts) {
      b.replicas.push_back(
          Placement{w.nodes[node].name, gpus, r.req.gpu_milli, r.req.fractional() ? r.req.gpu_memory_bytes : 0});
    }
    DROVER_RETURN_IF_ERROR(s.Restore(r.req, b, r.start));
    if (r.checkpoint > 0) DROVER_RETURN_IF_ERROR(s.SetCheckpoint(r.req.id, r.checkpoint));
  }
  return Status::Ok();
}

std::string Describe(const World& w) {
  std::string out = "job: " + std::to_string(w.job.replicas) + " x " + std::to_string(w.job.gpus) + " GPUs @" +
                    std::to_string(w.job.gpu_milli) + " topology " + std::string(TopologyName(w.job.topology)) +
                    " priority " + std::to_string(w.job.priority) + "\n";
  for (size_t n = 0; n < w.nodes.size(); ++n) {
    out += "  " + w.nodes[n].name + " (" + std::to_string(w.nodes[n].gpus.size()) + " GPUs)\n";
  }
  for (const Running& r : w.running) {
    out += "  " + r.req.id;
    for (const auto& [node, gpus] : r.parts) {
      out += " on " + w.nodes[node].name + " gpus";
      for (int g : gpus) out += " " + std::to_string(g);
    }
    out += " @" + std::to_string(r.req.gpu_milli) + " p" + std::to_string(r.req.priority) +
           (r.req.preemptible ? " preemptible" : "") + " start " + std::to_string(r.start) + " ckpt " +
           std::to_string(r.checkpoint) + "\n";
  }
  return out;
}

struct Outcomes {
  int preempted = 0, gangs = 0, without = 0, hopeless = 0, least = 0;
};

// `count` random cases from `seed`. With `spanning` victims the set must
// still let the job start, and cost no less than the least (it may cost
// more: preemption_search.h); without, exactly the least.
void CheckCases(uint64_t seed, int count, bool spanning, Outcomes* out) {
  Rng rng(seed);
  int cases = 0;
  int& preempted = out->preempted;
  int& gangs = out->gangs;
  int& without = out->without;
  int& hopeless = out->hopeless;
  while (cases < count) {
    World w = Generate(rng, spanning);
    if (w.allowed.size() > static_cast<size_t>(kMaxAllowed)) continue;
    ++cases;
    SCOPED_TRACE("case " + std::to_string(cases) + "\n" + Describe(w));
    Config c;
    c.verify_memos = true;
    Scheduler s(c);
    ASSERT_TRUE(Load(s, w).ok());
    ASSERT_TRUE(s.Enqueue(w.job, kNow).ok());
    const Decisions d = s.Schedule(kNow);
    ASSERT_TRUE(s.CheckInvariants().ok()) << s.CheckInvariants().ToString();
    const std::optional<Key> best = Exhaustive(w);
    const bool fits_now = Fits(w, std::vector<bool>(w.running.size(), false));
    if (fits_now) {
      ++without;
      EXPECT_TRUE(d.preemptions.empty());
      EXPECT_TRUE(s.IsBound("p"));
      continue;
    }
    if (!best) {
      ++hopeless;
      EXPECT_TRUE(d.preemptions.empty());  // (c)
      EXPECT_TRUE(s.IsPending("p"));
      continue;
    }
    ++preempted;
    gangs += w.job.replicas > 1 ? 1 : 0;
    ASSERT_FALSE(d.preemptions.empty()) << "exhaustive search found victims costing (" << best->first << ", "
                                        << best->second << ")";
    std::vector<int> victims;
    std::vector<bool> removed(w.running.size(), false);
    for (const Preemption& p : d.preemptions) {
      EXPECT_EQ(p.for_job, "p");
      const int idx = std::stoi(p.job_id.substr(1));
      EXPECT_NE(std::find(w.allowed.begin(), w.allowed.end(), idx), w.allowed.end())
          << p.job_id << " may not be preempted";
      victims.push_back(idx);
      removed[idx] = true;
    }
    EXPECT_TRUE(Fits(w, removed));  // (a), in the oracle's model
    const Key got = CostOf(w, victims);
    if (spanning) {
      EXPECT_GE(got, *best);
    } else {
      EXPECT_EQ(got, *best) << "(b): chose (" << got.first << ", " << got.second << "), the least is (" << best->first
                            << ", " << best->second << ")";
    }
    out->least += got == *best ? 1 : 0;
    // (a) in the scheduler: once the victims are gone the job starts.
    for (int v : victims) s.Remove(w.running[v].req.id, kNow + 1);
    const Decisions after = s.Schedule(kNow + 1);
    ASSERT_EQ(after.bindings.size(), 1u);
    EXPECT_EQ(after.bindings[0].job_id, "p");
    EXPECT_TRUE(after.preemptions.empty());
    if (w.job.topology == Topology::kSwitch) {
      std::set<std::string> switches;
      for (const Placement& p : after.bindings[0].replicas) {
        for (size_t n = 0; n < w.nodes.size(); ++n) {
          if (w.nodes[n].name == p.node) switches.insert(w.nodes[n].labels.at("switch"));
        }
      }
      EXPECT_EQ(switches.size(), 1u);
    }
    ASSERT_TRUE(s.CheckInvariants().ok()) << s.CheckInvariants().ToString();
    if (::testing::Test::HasFailure()) break;  // one case's trace is enough
  }
}

TEST(PreemptionPropertyTest, VictimsAreTheCheapestSetThatLetsTheJobStart) {
  Outcomes o;
  CheckCases(20261127, 3000, false, &o);
  // The generator exercises every outcome.
  EXPECT_GT(o.preempted, 500);
  EXPECT_GT(o.gangs, 100);
  EXPECT_GT(o.without, 100);
  EXPECT_GT(o.hopeless, 100);
}

// Victims with replicas on two nodes: the chosen set still lets the job
// start, and is found whenever some set exists.
TEST(PreemptionPropertyTest, VictimsOnSeveralNodesStillLetTheJobStart) {
  Outcomes o;
  CheckCases(7, 1500, true, &o);
  EXPECT_GT(o.preempted, 300);
  EXPECT_GT(o.least, o.preempted / 2);  // mostly the least all the same
}

// ---- the key, case by case ----

JobRequest Job(const std::string& id, int gpus, int priority, bool preemptible) {
  JobRequest j;
  j.id = id;
  j.gpus = gpus;
  j.priority = priority;
  j.preemptible = preemptible;
  return j;
}

Status Start(Scheduler& s, const JobRequest& j, const std::string& node, int64_t start) {
  Placement p;
  p.node = node;
  for (int g = 0; g < j.gpus; ++g) p.gpu_indices.push_back(g);
  return s.Restore(j, Binding{j.id, {p}}, start);
}

std::vector<std::string> Victims(const Decisions& d) {
  std::vector<std::string> out;
  for (const Preemption& p : d.preemptions) out.push_back(p.job_id);
  std::sort(out.begin(), out.end());
  return out;
}

// A lower priority goes first however much more work it loses.
TEST(PreemptionKeyTest, PriorityComesBeforeTheWorkLost) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8, "s0")).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("b", 8, "s0")).ok());
  ASSERT_TRUE(Start(s, Job("old-low", 8, 1, true), "a", 0).ok());            // 8 GPUs x 10,000 s
  ASSERT_TRUE(Start(s, Job("new-mid", 8, 2, true), "b", kNow - 1000).ok());  // 8 GPUs x 1 s
  ASSERT_TRUE(s.Enqueue(Job("urgent", 8, 10, false), kNow).ok());
  EXPECT_EQ(Victims(s.Schedule(kNow)), std::vector<std::string>{"old-low"});
}

// Of one priority, the job that loses the least since its last checkpoint
// (or its start) goes; a checkpoint changes which.
TEST(PreemptionKeyTest, TheWorkSinceTheLastCheckpointIsWhatIsLost) {
  for (bool checkpoint : {false, true}) {
    Scheduler s;
    ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8, "s0")).ok());
    ASSERT_TRUE(s.UpsertNode(MakeNode("b", 8, "s0")).ok());
    ASSERT_TRUE(Start(s, Job("early", 8, 1, true), "a", 0).ok());
    ASSERT_TRUE(Start(s, Job("late", 8, 1, true), "b", kNow / 2).ok());
    if (checkpoint) {
      ASSERT_TRUE(s.SetCheckpoint("early", kNow - 60'000).ok());
    }
    ASSERT_TRUE(s.Enqueue(Job("urgent", 8, 10, false), kNow).ok());
    EXPECT_EQ(Victims(s.Schedule(kNow)), std::vector<std::string>{checkpoint ? "early" : "late"}) << checkpoint;
  }
}

// Two 2-GPU jobs that lose less together than one 4-GPU job are taken
// together: they checkpointed recently. (The greedy order, lowest priority
// then most recently started first, stopped at the 4-GPU job.)
TEST(PreemptionKeyTest, SeveralSmallVictimsCanCostLessThanOne) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8, "s0")).ok());
  ASSERT_TRUE(Start(s, Job("big", 4, 1, true), "a", kNow - 1000).ok());  // 4 GPUs x 1 s
  ASSERT_TRUE(s.Restore(Job("x", 2, 1, true), Binding{"x", {Placement{"a", {4, 5}}}}, 0).ok());
  ASSERT_TRUE(s.Restore(Job("y", 2, 1, true), Binding{"y", {Placement{"a", {6, 7}}}}, 0).ok());
  ASSERT_TRUE(s.SetCheckpoint("x", kNow - 500).ok());  // 2 GPUs x 0.5 s each
  ASSERT_TRUE(s.SetCheckpoint("y", kNow - 500).ok());
  ASSERT_TRUE(s.Enqueue(Job("urgent", 4, 10, false), kNow).ok());
  EXPECT_EQ(Victims(s.Schedule(kNow)), (std::vector<std::string>{"x", "y"}));
}

// A switch gang takes its victims under one switch, the cheapest one.
TEST(PreemptionKeyTest, ASwitchGangPreemptsUnderOneSwitch) {
  Scheduler s;
  // s0: two nodes, each with a costly job; s1: two nodes with cheaper
  // ones; s2: one node with the cheapest job of all (the gang needs two).
  ASSERT_TRUE(s.UpsertNode(MakeNode("a0", 8, "s0")).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("a1", 8, "s0")).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("b0", 8, "s1")).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("b1", 8, "s1")).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("c0", 8, "s2")).ok());
  ASSERT_TRUE(Start(s, Job("a0-job", 8, 1, true), "a0", 0).ok());
  ASSERT_TRUE(Start(s, Job("a1-job", 8, 1, true), "a1", 0).ok());
  ASSERT_TRUE(Start(s, Job("b0-job", 8, 1, true), "b0", kNow - 5000).ok());
  ASSERT_TRUE(Start(s, Job("b1-job", 8, 1, true), "b1", kNow - 5000).ok());
  ASSERT_TRUE(Start(s, Job("c0-job", 8, 1, true), "c0", kNow - 10).ok());
  JobRequest gang = Job("gang", 8, 10, false);
  gang.replicas = 2;
  gang.topology = Topology::kSwitch;
  ASSERT_TRUE(s.Enqueue(gang, kNow).ok());
  EXPECT_EQ(Victims(s.Schedule(kNow)), (std::vector<std::string>{"b0-job", "b1-job"}));
}

TEST(PreemptionKeyTest, ACheckpointIsRecordedOnlyForABoundJob) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8, "s0")).ok());
  EXPECT_EQ(s.SetCheckpoint("nobody", 1).code(), Code::kNotFound);
  ASSERT_TRUE(s.Enqueue(Job("queued", 16, 1, true), 0).ok());
  EXPECT_EQ(s.SetCheckpoint("queued", 1).code(), Code::kNotFound);
  ASSERT_TRUE(Start(s, Job("running", 8, 1, true), "a", 0).ok());
  const uint64_t before = s.generation();
  EXPECT_TRUE(s.SetCheckpoint("running", 1).ok());
  EXPECT_GT(s.generation(), before);
}

}  // namespace
}  // namespace drover::sched
