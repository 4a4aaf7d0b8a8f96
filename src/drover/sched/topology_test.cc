#include "drover/sched/topology.h"

#include <gtest/gtest.h>

#include <bit>

namespace drover::sched {
namespace {

// 8 GPUs: NVLink islands 0-3 and 4-7, NUMA 0 = 0-3, NUMA 1 = 4-7.
NodeTopology TwoIslands() {
  std::vector<Link> links(64, Link::kCrossSocket);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) links[i * 8 + j] = (i / 4 == j / 4) ? Link::kFabric : Link::kCrossSocket;
  }
  return NodeTopology::Build(8, links, {0, 0, 0, 0, 1, 1, 1, 1});
}

TEST(TopologyTest, IslandsAndNumaGroupsFromLinks) {
  NodeTopology t = TwoIslands();
  ASSERT_EQ(t.islands.size(), 2u);
  EXPECT_EQ(t.islands[0], 0x0Fu);
  EXPECT_EQ(t.islands[1], 0xF0u);
  EXPECT_EQ(t.numa_of[5], 0xF0u);
  EXPECT_EQ(t.Worst(0x03), Link::kFabric);
  EXPECT_EQ(t.Worst(0x11), Link::kCrossSocket);
  EXPECT_EQ(t.ideal[4], Link::kFabric);
  EXPECT_EQ(t.ideal[5], Link::kCrossSocket);
}

TEST(TopologyTest, FillsPartialIslandsFirst) {
  NodeTopology t = TwoIslands();
  Link q;
  // Free: 0,1 of island A and all of island B: a pair takes 0,1 and keeps B whole.
  EXPECT_EQ(t.Choose(0xF3, 2, Topology::kBestEffort, &q), 0x03u);
  EXPECT_EQ(q, Link::kFabric);
  // Four GPUs: only island B holds four.
  EXPECT_EQ(t.Choose(0xF3, 4, Topology::kIsland, &q), 0xF0u);
  // Three free in A, two in B: an island requirement of 4 cannot be met...
  EXPECT_EQ(t.Choose(0x37, 4, Topology::kIsland, &q), 0u);
  // ...but best effort spans the islands.
  uint64_t m = t.Choose(0x37, 4, Topology::kBestEffort, &q);
  EXPECT_EQ(std::popcount(m), 4);
  EXPECT_EQ(q, Link::kCrossSocket);
}

TEST(TopologyTest, DerivesLinksFromNumaWhenNoMatrix) {
  NodeTopology t = NodeTopology::Build(4, {}, {0, 0, 1, 1});
  EXPECT_EQ(t.islands.size(), 4u);  // no fabric: every GPU is its own island
  Link q;
  EXPECT_EQ(t.Choose(0x0F, 2, Topology::kNuma, &q), 0x03u);
  EXPECT_EQ(q, Link::kSameNuma);
  EXPECT_EQ(t.Choose(0x05, 2, Topology::kNuma, &q), 0u);
}

TEST(TopologyTest, LargeNodesUseGreedyBestFit) {
  std::vector<Link> links(16 * 16, Link::kCrossSocket);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) links[i * 16 + j] = (i / 8 == j / 8) ? Link::kFabric : Link::kCrossSocket;
  }
  std::vector<int> numa(16);
  for (int i = 0; i < 16; ++i) numa[i] = i / 8;
  NodeTopology t = NodeTopology::Build(16, links, numa);
  EXPECT_TRUE(t.by_size.empty());
  Link q;
  // Island 0 has 3 free, island 1 has 8: two GPUs go to the fuller island 0.
  uint64_t free = 0x0007 | 0xFF00;
  EXPECT_EQ(t.Choose(free, 2, Topology::kBestEffort, &q), 0x0003u);
  EXPECT_EQ(t.Choose(free, 8, Topology::kIsland, &q), 0xFF00u);
  EXPECT_EQ(t.Choose(free, 9, Topology::kIsland, &q), 0u);
}

}  // namespace
}  // namespace drover::sched
