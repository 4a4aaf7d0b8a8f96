// Reference placement baselines from the FGD paper (Weng et al., "Beware of
// Fragmentation", USENIX ATC '23), implemented from its description so the
// simulator can compare Drover's placement with them on the same scheduler:
//  - best-fit: the feasible node whose remaining resources after the
//    placement are least, as the sum of the remaining shares of CPU, host
//    memory and GPU (each normalised by the node's capacity); on that node,
//    the GPU with the least free share that fits;
//  - random: a uniformly random feasible node (reservoir sampling, seeded by
//    Config::seed), and a random fitting GPU on it for a share.
// Both scan every node: they are yardsticks, not production policies.
#include <bit>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {

bool State::PickBaseline(int job, int64_t now, const std::vector<int>* within, Pick* out) const {
  const JobRequest& req = jobs[job].req;
  bool random = config.placement == PlacementPolicy::kRandom;
  bool found = false;
  int64_t seen = 0;
  double best = 0;
  auto consider = [&](int ni) {
    const NodeState& n = nodes[ni];
    if (!NodeMatches(req, n) || !HostFits(req, n)) return;
    Pick p{ni, -1, 0, kWholeGpu, 0, Link::kFabric, 0};
    int64_t used_milli = 0;
    if (req.gpus > 0 && req.fractional()) {
      // A GPU of the node for the share: best fit, or a random one.
      int64_t gpu_seen = 0;
      int chosen = -1;
      for (const ClassSlot& slot : n.classes) {
        if (!ClassMatches(req, slot.cls) || !CanCharge(jobs[job].tenant, classes[slot.cls].model, req.gpu_milli))
          continue;
        for (uint64_t m = slot.mask & n.healthy; m != 0; m &= m - 1) {
          int g = std::countr_zero(m);
          uint64_t bit = uint64_t{1} << g;
          if (n.free_milli[g] < req.gpu_milli || n.free_mem[g] < req.gpu_memory_bytes || !OnlyMine(job, ni, bit))
            continue;
          if ((n.reserved & bit) != 0 && !MayUseReserved(job, now)) {
            reserved_hit = true;
            continue;
          }
          bool take = random ? rng.Uniform(0, gpu_seen) == 0 : (chosen < 0 || n.free_milli[g] < n.free_milli[chosen]);
          ++gpu_seen;
          if (take) {
            chosen = g;
            p.cls = slot.cls;
          }
        }
      }
      if (chosen < 0) return;
      p.mask = uint64_t{1} << chosen;
      p.milli = req.gpu_milli;
      p.mem = req.gpu_memory_bytes;
      used_milli = req.gpu_milli;
    } else if (req.gpus > 0) {
      if (!PickOnNode(job, req, ni, now, &p)) return;
      used_milli = int64_t{req.gpus} * kWholeGpu;
    }
    if (random) {
      ++seen;
      if (rng.Uniform(1, seen) == 1) *out = p;
      found = true;
      return;
    }
    double left = 0;
    if (n.info.cpu_milli > 0)
      left += static_cast<double>(n.free_cpu - req.cpu_milli) / static_cast<double>(n.info.cpu_milli);
    if (n.info.memory_bytes > 0) {
      left += static_cast<double>(n.free_host_mem - req.memory_bytes) / static_cast<double>(n.info.memory_bytes);
    }
    int gpus = std::popcount(n.present & n.healthy);
    if (gpus > 0) {
      int64_t free = 0;
      for (uint64_t m = n.present & n.healthy; m != 0; m &= m - 1) free += n.free_milli[std::countr_zero(m)];
      left += static_cast<double>(free - used_milli) / (static_cast<double>(gpus) * kWholeGpu);
    }
    if (!found || left < best) {
      best = left;
      *out = p;
      found = true;
    }
  };
  ForEachNode(within, consider);
  return found;
}

}  // namespace drover::sched
