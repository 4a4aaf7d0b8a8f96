#pragma once
// NodeTopology: the GPU topology of one node, shared by every node with the
// same link matrix and NUMA layout (a cluster of HGX boxes has one).
// Private to the sched library.
//
// Built once per distinct topology; then choosing GPUs is a walk over a
// precomputed table instead of a search. Example (8 GPUs, two NVLink islands
// 0-3 and 4-7, free = {0,1,4,5,6,7}, a 2-GPU job): the table lists
// 2-subsets best link first; {0,1} and {4,5} are both NVLink pairs, and
// {0,1} is chosen because it leaves no free GPU stranded in island 0-3 while
// keeping island 4-7 whole for a later 4-GPU job.
//
// Invariants: island_of[i] & (1 << i) and numa_of[i] & (1 << i) for every
// GPU i; islands and numas partition the n GPUs; by_size[g] holds every
// g-subset exactly once, sorted by (worst link desc, link sum desc, mask asc).

#include <cstdint>
#include <vector>

#include "drover/sched/model.h"

namespace drover::sched {

// Nodes up to this many GPUs get the full subset table (2^12 masks).
inline constexpr int kSubsetTableMax = 12;

struct NodeTopology {
  int n = 0;
  std::vector<Link> links;                       // n x n, row-major
  std::vector<uint64_t> island_of;               // per GPU: its NVLink island
  std::vector<uint64_t> numa_of;                 // per GPU: the GPUs of its NUMA node
  std::vector<uint64_t> islands;                 // distinct islands, by lowest GPU
  std::vector<uint64_t> numas;                   // distinct NUMA groups, by lowest GPU
  std::vector<std::vector<uint64_t>> by_size;    // [g]: g-subsets, best first (n <= kSubsetTableMax)
  std::vector<std::vector<Link>> by_size_worst;  // parallel to by_size
  std::vector<Link> ideal;                       // [g]: the weakest link of the best g GPUs when all are free

  // `links` may be empty (then derived from `numa`).
  static NodeTopology Build(int n, const std::vector<Link>& links, const std::vector<int>& numa);

  Link At(int i, int j) const { return links[static_cast<size_t>(i) * n + j]; }
  // The weakest link between two GPUs of `mask`; kFabric for one GPU.
  Link Worst(uint64_t mask) const;
  // Largest count of `usable` GPUs inside one island (resp. NUMA group), and
  // which group holds it.
  int LargestIn(const std::vector<uint64_t>& groups, uint64_t usable, uint64_t* group) const;

  // The best `g` GPUs of `usable` meeting `req` (kIsland: one island, kNuma:
  // one NUMA group; other values: no requirement), or 0 when none. Among
  // the subsets with the best weakest link, takes the one that leaves the
  // fewest usable GPUs in the islands it touches (fill partial islands,
  // keep whole ones free). `quality` receives the weakest link.
  // O(C(n, g)) with the table, O(n + islands) without.
  uint64_t Choose(uint64_t usable, int g, Topology req, Link* quality) const;
};

}  // namespace drover::sched
