#include "drover/sched/scheduler.h"

#include <gtest/gtest.h>

#include <bit>
#include <set>

#include "drover/common/rng.h"

namespace drover::sched {
namespace {

NodeInfo MakeNode(const std::string& name, int gpus, const std::string& model = "H100 80GB",
                  int64_t memory = int64_t{80} << 30, const std::string& vendor = "nvidia") {
  NodeInfo n{name, {}, true};
  for (int i = 0; i < gpus; ++i) n.gpus.push_back(GpuInfo{i, vendor, model, memory, true});
  return n;
}

JobRequest Job(const std::string& id, int gpus) {
  JobRequest j;
  j.id = id;
  j.gpus = gpus;
  return j;
}

TEST(SchedulerTest, FirstFitTakesLowestFreeIndicesOnFirstNode) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 4)).ok());
  ASSERT_TRUE(s.UpsertNode(MakeNode("b", 4)).ok());
  ASSERT_TRUE(s.Enqueue(Job("j1", 2)).ok());
  ASSERT_TRUE(s.Enqueue(Job("j2", 2)).ok());
  ASSERT_TRUE(s.Enqueue(Job("j3", 3)).ok());
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].node, "a");
  EXPECT_EQ(b[0].gpu_indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(b[1].node, "a");
  EXPECT_EQ(b[1].gpu_indices, (std::vector<int>{2, 3}));
  EXPECT_EQ(b[2].node, "b");
  EXPECT_EQ(b[2].gpu_indices, (std::vector<int>{0, 1, 2}));
}

TEST(SchedulerTest, StrictFifoHeadBlocksLaterJobs) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 4)).ok());
  ASSERT_TRUE(s.Enqueue(Job("big", 3)).ok());
  ASSERT_EQ(s.Schedule().size(), 1u);
  ASSERT_TRUE(s.Enqueue(Job("big2", 4)).ok());
  ASSERT_TRUE(s.Enqueue(Job("small", 1)).ok());
  EXPECT_TRUE(s.Schedule().empty());  // small would fit, but waits behind big2
  EXPECT_EQ(s.PendingReason("small"), "queued behind 1 earlier job");
  EXPECT_NE(s.PendingReason("big2").find("waiting for 4 GPUs"), std::string::npos);
  s.Remove("big");
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].job_id, "big2");
}

TEST(SchedulerTest, ConstraintsOnModelVendorMemoryAndHealth) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a100", 2, "A100 40GB", int64_t{40} << 30)).ok());
  NodeInfo h = MakeNode("h100", 2);
  h.gpus[0].healthy = false;
  ASSERT_TRUE(s.UpsertNode(h).ok());
  JobRequest j = Job("j", 1);
  j.gpu_memory_bytes = int64_t{64} << 30;
  ASSERT_TRUE(s.Enqueue(j).ok());
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].node, "h100");
  EXPECT_EQ(b[0].gpu_indices, (std::vector<int>{1}));  // GPU 0 is unhealthy

  JobRequest amd = Job("amd", 1);
  amd.gpu_vendor = "amd";
  EXPECT_TRUE(s.NeverFits(amd).has_value());
  JobRequest model = Job("m", 2);
  model.gpu_model = "A100 40GB";
  EXPECT_FALSE(s.NeverFits(model).has_value());
}

TEST(SchedulerTest, UnschedulableNodesTakeNoWorkButCountForFeasibility) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  s.SetSchedulable("a", false);
  ASSERT_TRUE(s.Enqueue(Job("j", 8)).ok());
  EXPECT_FALSE(s.NeverFits(Job("j", 8)).has_value());
  EXPECT_TRUE(s.Schedule().empty());
  s.SetSchedulable("a", true);
  EXPECT_EQ(s.Schedule().size(), 1u);
}

TEST(SchedulerTest, NeverFitsExplainsWhy) {
  Scheduler s;
  EXPECT_EQ(s.NeverFits(Job("j", 1)).value_or(""), "the cluster has no nodes");
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 8)).ok());
  auto why = s.NeverFits(Job("j", 9));
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "no node has 9 GPUs (the most any node has is 8)");
}

TEST(SchedulerTest, RestoreRejectsDoubleBooking) {
  Scheduler s;
  ASSERT_TRUE(s.UpsertNode(MakeNode("a", 4)).ok());
  ASSERT_TRUE(s.Restore(Job("j1", 2), Binding{"j1", "a", {0, 1}}).ok());
  EXPECT_EQ(s.Restore(Job("j2", 2), Binding{"j2", "a", {1, 2}}).code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.Restore(Job("j3", 1), Binding{"j3", "zz", {0}}).code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.HeldMask("a"), 0b11u);
  ASSERT_TRUE(s.Enqueue(Job("j4", 2)).ok());
  auto b = s.Schedule();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].gpu_indices, (std::vector<int>{2, 3}));
}

TEST(SchedulerTest, DuplicateEnqueueIsRejected) {
  Scheduler s;
  ASSERT_TRUE(s.Enqueue(Job("j", 1)).ok());
  EXPECT_EQ(s.Enqueue(Job("j", 1)).code(), Code::kAlreadyExists);
}

// Property: under random arrivals, departures and node changes, no GPU is
// ever held twice, held masks equal the union of bindings, FIFO order holds,
// and only healthy matching GPUs of schedulable nodes are handed out.
TEST(SchedulerPropertyTest, RandomWorkloadKeepsInvariants) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    Scheduler s;
    std::vector<std::string> names;
    for (int n = 0; n < 6; ++n) {
      names.push_back("n" + std::to_string(n));
      NodeInfo node = MakeNode(names.back(), static_cast<int>(rng.Uniform(1, 8)));
      for (auto& g : node.gpus) g.healthy = rng.Bernoulli(0.9);
      ASSERT_TRUE(s.UpsertNode(node).ok());
    }
    std::map<std::string, Binding> running;
    std::vector<std::string> arrival;  // submission order
    int next = 0;
    for (int step = 0; step < 400; ++step) {
      int action = static_cast<int>(rng.Uniform(0, 9));
      if (action < 5) {
        std::string id = "j" + std::to_string(next++);
        ASSERT_TRUE(s.Enqueue(Job(id, static_cast<int>(rng.Uniform(1, 4)))).ok());
        arrival.push_back(id);
      } else if (action < 8 && !running.empty()) {
        auto it = running.begin();
        std::advance(it, rng.Uniform(0, static_cast<int64_t>(running.size()) - 1));
        s.Remove(it->first);
        running.erase(it);
      } else {
        s.SetSchedulable(names[static_cast<size_t>(rng.Uniform(0, 5))], rng.Bernoulli(0.7));
      }
      size_t before = s.queued();
      auto placed = s.Schedule();
      ASSERT_EQ(s.queued() + placed.size(), before);
      for (const Binding& b : placed) {
        // FIFO: the placed job is the oldest one neither placed nor removed.
        auto first_waiting = std::find_if(arrival.begin(), arrival.end(), [&](const std::string& id) {
          return !running.contains(id);
        });
        ASSERT_NE(first_waiting, arrival.end());
        EXPECT_EQ(*first_waiting, b.job_id) << "seed " << seed;
        running[b.job_id] = b;
        arrival.erase(first_waiting);
      }
      // Invariant check.
      std::map<std::string, uint64_t> held;
      for (const auto& [id, b] : running) {
        for (int i : b.gpu_indices) {
          uint64_t bit = uint64_t{1} << i;
          ASSERT_EQ(held[b.node] & bit, 0u) << "GPU " << b.node << "/" << i << " held twice, seed " << seed;
          held[b.node] |= bit;
        }
      }
      for (const std::string& n : names) EXPECT_EQ(s.HeldMask(n), held[n]) << "seed " << seed;
      EXPECT_EQ(s.bound(), running.size());
    }
  }
}

}  // namespace
}  // namespace drover::sched
