// PlacementPolicy::kFrag: placement weighed by the fragmentation it causes
// under the request shapes learned from arrivals (frag.h).
//
//  - A job that asks for GPUs gets one candidate per GPU class it accepts:
//    bin-pack's choice within that class (bounded by bin-pack's limits, so
//    microseconds). The classes then compete on, in order: topology
//    quality; GPUs the candidate strands for lack of CPU (bin-pack's rule);
//    the share of the arrivals that may use the class, lowest first; then
//    bin-pack's fill. The third key is FGD's fragmentation restricted to its
//    "no access" part: a placement on class c takes free GPUs away from the
//    fragment of every shape that cannot use c, so its rise is -(GPUs taken)
//    x (1 - share that accepts c), lowest where the fewest arrivals could
//    have used the class. Over every shape seen, not only the typical ones:
//    the shapes bound to one GPU model are rare and are the point. On a
//    workload where every job accepts every model all shares are 1 and the
//    choice is bin-pack's, up to two last keys for the candidates that tie
//    on all of these (bin-pack keeps the first class on a tie):
//  - the share of the arrivals that the candidate's node could serve if it
//    were empty (ShapeStats::HostShare: its GPUs of the class, CPU and
//    memory), lowest first: the same "no access" argument for the node's
//    host capacity and GPU count, so that a node only the large shapes fit
//    stays free for them; then its CPU, then its memory, smallest first: a
//    node that has less of both serves a subset of what the larger one
//    serves, so the larger is kept for requests not seen yet (before the
//    first large request arrives, the shares tie).
//  - A CPU-only job goes where its CPU and memory raise the node's expected
//    fragmentation least (free GPUs that the typical shapes can no longer
//    use for lack of CPU), then where the fewest GPUs are free, then the
//    least CPU left: a scan, like bin-pack's CPU-only placement. A node's
//    current fragmentation is cached (keyed by the node's version and the
//    typical set's), so a node costs one evaluation: O(typical shapes x GPUs).
//
// Worked example of the last keys (cpu300 of the FGD experiment): a 1-GPU
// job fits an empty G2 node (8 GPUs, 96 cores, 384 GiB) and an empty G3 node
// (8 GPUs, 128 cores, 768 GiB) alike. Every arrival so far that asks for 8
// GPUs and 120 cores fits only the G3, so the G3's host share is higher and
// the job goes to the G2. Before any such arrival, the shares tie and the
// G2 has the less CPU. (G3 is the second class in the node list's order:
// before these keys the G3s were filled first, and the 8-GPU, 120-core pods
// failed from a third of the way in.)
//
// Worked example (gpuspec lists of the FGD experiment): 10 % of the arrivals
// accept only T4s, everything else accepts any model. An unconstrained 1-GPU
// job that fits a T4 node and a G2 node alike without stranding goes to the
// G2 (accepted by 90 % of the arrivals, the T4 by 100 %), and the T4s stay
// for the jobs that can use nothing else.
#include <bit>
#include <tuple>

#include "drover/sched/frag.h"
#include "drover/sched/scheduler_state.h"

namespace drover::sched {

void State::FragRefresh() {
  if (!shapes.Stale() && frag_classes == static_cast<int>(classes.size())) return;
  frag_classes = static_cast<int>(classes.size());
  shapes.Build(config.frag_coverage, frag_classes,
               [this](const JobRequest& req, int cls) { return ClassMatches(req, cls); });
}

void State::FragNodeOf(const NodeState& n, FragNode* out) const {
  out->cpu_left = n.info.cpu_milli > 0 ? n.free_cpu : FragNode::kUntracked;
  out->mem_left = n.info.memory_bytes > 0 ? n.free_host_mem : FragNode::kUntracked;
  out->n = 0;
  if (!n.info.schedulable) return;
  for (uint64_t m = n.present & n.healthy; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    if (n.free_milli[g] <= 0) continue;
    out->free[out->n] = n.free_milli[g];
    out->cls[out->n] = static_cast<uint16_t>(n.gpu_class[g]);
    ++out->n;
  }
}

double State::FragOf(int node) const {
  const NodeState& n = nodes[node];
  if (frag_memo.size() < nodes.size()) frag_memo.resize(nodes.size());
  FragMemo& m = frag_memo[node];
  if (m.valid && m.node_version == n.version && m.shapes_version == shapes.version()) return m.f;
  FragNode fn;
  FragNodeOf(n, &fn);
  m.f = Fragmentation(fn, shapes.typical());
  m.node_version = n.version;
  m.shapes_version = shapes.version();
  m.valid = true;
  return m.f;
}

void State::FragAfter(const JobRequest& req, const Pick& p, FragNode* out) const {
  const NodeState& n = nodes[p.node];
  FragNodeOf(n, out);
  if (out->cpu_left != FragNode::kUntracked) out->cpu_left -= req.cpu_milli;
  if (out->mem_left != FragNode::kUntracked) out->mem_left -= req.memory_bytes;
  if (req.gpus == 0 || !n.info.schedulable) return;
  // The listed GPUs in index order; the picked ones lose their share (and
  // leave the list when nothing is left). kept <= listed: in place.
  int listed = 0;
  int kept = 0;
  for (uint64_t m = n.present & n.healthy; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    if (n.free_milli[g] <= 0) continue;
    int left = out->free[listed];
    if ((p.mask & (uint64_t{1} << g)) != 0) left -= p.milli;
    if (left > 0) {
      out->free[kept] = static_cast<int16_t>(left);
      out->cls[kept] = out->cls[listed];
      ++kept;
    }
    ++listed;
  }
  out->n = kept;
}

double State::FragRise(const JobRequest& req, const Pick& p) const {
  FragNode after;
  FragAfter(req, p, &after);
  return Fragmentation(after, shapes.typical()) - FragOf(p.node);
}

bool State::PickFrag(int job, int64_t now, const std::vector<int>* within, Pick* out) {
  FragRefresh();
  const JobRequest& req = jobs[job].req;
  if (req.gpus == 0) return PickFragHostOnly(job, within, out);
  bool found = false;
  auto key = [this](const Pick& p) {
    const NodeState& n = nodes[p.node];
    int gpus = 0;
    for (const ClassSlot& slot : n.classes) {
      if (slot.cls == p.cls) gpus = std::popcount(slot.mask);
    }
    // Untracked CPU or memory serves any request: largest.
    const int64_t cpu = n.info.cpu_milli > 0 ? n.info.cpu_milli : INT64_MAX;
    const int64_t mem = n.info.memory_bytes > 0 ? n.info.memory_bytes : INT64_MAX;
    return std::make_tuple(-static_cast<int>(p.quality), p.stranded, shapes.accept_share(p.cls), p.fill,
                           shapes.HostShare(p.cls, gpus, n.info.cpu_milli, n.info.memory_bytes), cpu, mem);
  };
  for (size_t c = 0; c < classes.size(); ++c) {
    if (!ClassMatches(req, static_cast<int>(c))) continue;
    pick_class = static_cast<int>(c);
    Pick p;
    bool ok = req.fractional() ? PickFraction(job, now, within, &p) : PickWhole(job, req, now, within, &p);
    pick_class = -1;
    if (ok && (!found || key(p) < key(*out))) {  // the first class on a tie
      *out = p;
      found = true;
    }
  }
  return found;
}

bool State::PickFragHostOnly(int job, const std::vector<int>* within, Pick* out) {
  const JobRequest& req = jobs[job].req;
  bool found = false;
  std::tuple<double, int64_t, int64_t> best{};
  auto consider = [&](int ni) {
    const NodeState& n = nodes[ni];
    if (!NodeMatches(req, n) || !HostFits(req, n)) return;
    Pick p{ni, -1, 0, kWholeGpu, 0, Link::kFabric, 0};
    int64_t free_gpu = 0;
    for (uint64_t m = n.present & n.healthy; m != 0; m &= m - 1) free_gpu += n.free_milli[std::countr_zero(m)];
    int64_t cpu = n.info.cpu_milli > 0 ? n.free_cpu : INT64_MAX / 4;
    std::tuple<double, int64_t, int64_t> key{free_gpu == 0 ? 0.0 : FragRise(req, p), free_gpu, cpu};
    if (!found || key < best) {
      best = key;
      *out = p;
      found = true;
    }
  };
  ForEachNode(within, consider);
  return found;
}

}  // namespace drover::sched
