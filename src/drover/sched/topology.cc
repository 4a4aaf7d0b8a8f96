#include "drover/sched/topology.h"

#include <algorithm>
#include <bit>
#include <map>

namespace drover::sched {
namespace {

uint64_t LowestBits(uint64_t mask, int n) {
  uint64_t out = 0;
  for (int i = 0; i < n && mask != 0; ++i) {
    uint64_t bit = mask & (~mask + 1);
    out |= bit;
    mask &= mask - 1;
  }
  return out;
}

}  // namespace

NodeTopology NodeTopology::Build(int n, const std::vector<Link>& links, const std::vector<int>& numa) {
  NodeTopology t;
  t.n = n;
  t.links.assign(static_cast<size_t>(n) * n, Link::kCrossSocket);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      Link l = Link::kCrossSocket;
      if (!links.empty()) {
        l = links[static_cast<size_t>(i) * n + j];
      } else if (numa[i] == numa[j]) {
        l = Link::kSameNuma;
      }
      t.links[static_cast<size_t>(i) * n + j] = i == j ? Link::kFabric : l;
    }
  }
  // Islands: connected components over kFabric links (both directions).
  t.island_of.assign(n, 0);
  for (int i = 0; i < n; ++i) {
    if (t.island_of[i] != 0) continue;
    uint64_t comp = uint64_t{1} << i;
    uint64_t frontier = comp;
    while (frontier != 0) {
      int a = std::countr_zero(frontier);
      frontier &= frontier - 1;
      for (int b = 0; b < n; ++b) {
        bool linked = t.At(a, b) == Link::kFabric || t.At(b, a) == Link::kFabric;
        if (linked && (comp & (uint64_t{1} << b)) == 0) {
          comp |= uint64_t{1} << b;
          frontier |= uint64_t{1} << b;
        }
      }
    }
    for (uint64_t m = comp; m != 0; m &= m - 1) t.island_of[std::countr_zero(m)] = comp;
    t.islands.push_back(comp);
  }
  std::map<int, uint64_t> by_numa;
  for (int i = 0; i < n; ++i) by_numa[numa[i]] |= uint64_t{1} << i;
  t.numa_of.assign(n, 0);
  for (const auto& [node, mask] : by_numa) {
    for (uint64_t m = mask; m != 0; m &= m - 1) t.numa_of[std::countr_zero(m)] = mask;
  }
  for (int i = 0; i < n; ++i) {
    if (std::find(t.numas.begin(), t.numas.end(), t.numa_of[i]) == t.numas.end()) t.numas.push_back(t.numa_of[i]);
  }
  if (n <= kSubsetTableMax) {
    t.by_size.assign(n + 1, {});
    t.by_size_worst.assign(n + 1, {});
    struct Entry {
      uint64_t mask;
      Link worst;
      int sum;
    };
    std::vector<std::vector<Entry>> entries(n + 1);
    for (uint64_t m = 1; m < (uint64_t{1} << n); ++m) {
      int sum = 0;
      for (uint64_t a = m; a != 0; a &= a - 1) {
        int i = std::countr_zero(a);
        for (uint64_t b = a & (a - 1); b != 0; b &= b - 1) sum += static_cast<int>(t.At(i, std::countr_zero(b)));
      }
      entries[std::popcount(m)].push_back(Entry{m, t.Worst(m), sum});
    }
    for (int g = 1; g <= n; ++g) {
      auto& e = entries[g];
      std::sort(e.begin(), e.end(), [](const Entry& x, const Entry& y) {
        if (x.worst != y.worst) return x.worst > y.worst;
        if (x.sum != y.sum) return x.sum > y.sum;
        return x.mask < y.mask;
      });
      for (const Entry& x : e) {
        t.by_size[g].push_back(x.mask);
        t.by_size_worst[g].push_back(x.worst);
      }
    }
  }
  t.ideal.assign(n + 1, Link::kCrossSocket);
  for (int g = 1; g <= n; ++g) {
    if (!t.by_size.empty()) {
      t.ideal[g] = t.by_size_worst[g][0];
    } else {
      uint64_t all = n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
      Link q = Link::kCrossSocket;
      t.ideal[g] = t.Choose(all, g, Topology::kBestEffort, &q) != 0 ? q : Link::kCrossSocket;
    }
  }
  return t;
}

Link NodeTopology::Worst(uint64_t mask) const {
  Link worst = Link::kFabric;
  for (uint64_t a = mask; a != 0; a &= a - 1) {
    int i = std::countr_zero(a);
    for (uint64_t b = a & (a - 1); b != 0; b &= b - 1) {
      int j = std::countr_zero(b);
      worst = std::min({worst, At(i, j), At(j, i)});
    }
  }
  return worst;
}

int NodeTopology::LargestIn(const std::vector<uint64_t>& groups, uint64_t usable, uint64_t* group) const {
  int best = 0;
  for (uint64_t g : groups) {
    int c = std::popcount(usable & g);
    if (c > best) {
      best = c;
      if (group != nullptr) *group = g;
    }
  }
  return best;
}

uint64_t NodeTopology::Choose(uint64_t usable, int g, Topology req, Link* quality) const {
  if (g <= 0 || std::popcount(usable) < g) return 0;
  auto touched = [&](uint64_t s) {
    uint64_t t = 0;
    for (uint64_t m = s; m != 0; m &= m - 1) t |= island_of[std::countr_zero(m)];
    return t;
  };
  auto meets = [&](uint64_t s) {
    int low = std::countr_zero(s);
    if (req == Topology::kIsland) return (s & ~island_of[low]) == 0;
    if (req == Topology::kNuma) return (s & ~numa_of[low]) == 0;
    return true;
  };
  if (n <= kSubsetTableMax && g <= n) {
    const auto& subsets = by_size[g];
    const auto& worst = by_size_worst[g];
    uint64_t best = 0;
    int best_left = 0;
    Link level = Link::kCrossSocket;
    for (size_t k = 0; k < subsets.size(); ++k) {
      uint64_t s = subsets[k];
      if (best != 0 && worst[k] < level) break;
      if ((s & ~usable) != 0 || !meets(s)) continue;
      int left = std::popcount(usable & touched(s)) - g;
      if (best == 0) {
        best = s;
        best_left = left;
        level = worst[k];
        if (left == 0) break;
      } else if (left < best_left) {
        best = s;
        best_left = left;
        if (left == 0) break;
      }
    }
    if (best != 0 && quality != nullptr) *quality = level;
    return best;
  }
  // Large nodes: best fit over islands, then NUMA groups, then a greedy fill
  // from the fullest islands.
  auto best_fit = [&](const std::vector<uint64_t>& groups) -> uint64_t {
    uint64_t pick = 0;
    int pick_count = 0;
    for (uint64_t grp : groups) {
      int c = std::popcount(usable & grp);
      if (c >= g && (pick == 0 || c < pick_count)) {
        pick = grp;
        pick_count = c;
      }
    }
    return pick == 0 ? 0 : LowestBits(usable & pick, g);
  };
  uint64_t out = best_fit(islands);
  if (out == 0 && req != Topology::kIsland) out = best_fit(numas);
  if (out == 0 && req != Topology::kIsland && req != Topology::kNuma) {
    std::vector<uint64_t> order = islands;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint64_t a, uint64_t b) { return std::popcount(usable & a) > std::popcount(usable & b); });
    int need = g;
    for (uint64_t grp : order) {
      uint64_t take = LowestBits(usable & grp, need);
      out |= take;
      need -= std::popcount(take);
      if (need == 0) break;
    }
  }
  if (out != 0 && quality != nullptr) *quality = Worst(out);
  return out;
}

}  // namespace drover::sched
