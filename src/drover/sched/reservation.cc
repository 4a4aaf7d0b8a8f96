// EASY backfill's reservation: where and when the first job of a pass that
// cannot start could start, so that later jobs run only where they do not
// delay it. Each node's answer is kept for the next pass while the node and
// its jobs' expected ends stand (ReserveMemo), and shared by every job of the
// same shape that has no GPUs promised to it (ReserveKey): a stream of
// like jobs that cannot start (an array behind a full pool) computes it once.
#include <fmt/format.h>
#include <algorithm>
#include <bit>
#include <functional>
#include <string>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {
namespace {

// splitmix64's finalizer over the running value and the next word: the
// reservation's signature (a collision would only let a failed preemption
// search wait for the next change before it runs again).
uint64_t HashMix(uint64_t h, uint64_t v) {
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Shapes a pass remembers as failing to reserve (beyond: walked again).
constexpr size_t kMaxFailedShapes = 64;

// What ReserveOnNode reads of a job, hashed (odd), or for a job with GPUs
// promised to it, which only it may use, its own key (even).
uint64_t ReserveKey(const JobState& j) {
  if (!j.nomination.empty()) return j.seq << 1;
  const JobRequest& r = j.req;
  const std::hash<std::string> text;
  uint64_t h = HashMix(0x7265736572766521ULL, static_cast<uint64_t>(r.gpus));
  h = HashMix(h, static_cast<uint64_t>(WithinNode(r.topology)));
  h = HashMix(h, static_cast<uint64_t>(r.gpu_memory_bytes));
  h = HashMix(h, text(r.gpu_vendor));
  h = HashMix(h, text(r.gpu_model));
  h = HashMix(h, r.gpu_models.size());
  for (const std::string& m : r.gpu_models) h = HashMix(h, text(m));
  h = HashMix(h, r.node_selector.size());
  for (const auto& [k, v] : r.node_selector) h = HashMix(HashMix(h, text(k)), text(v));
  return h | 1;
}

}  // namespace

ReserveMemo State::ReserveOnNode(int job, int ni, int64_t now, std::vector<std::pair<int64_t, int>>* ends) const {
  const JobRequest& req = jobs[job].req;
  const NodeState& n = nodes[ni];
  ReserveMemo out;
  out.valid_until = kNever;
  if (!NodeMatches(req, n)) return out;
  const NodeTopology& topo = topos[n.topo];
  for (const ClassSlot& slot : n.classes) {
    if (!ClassMatches(req, slot.cls) || std::popcount(slot.mask & n.healthy) < req.gpus) continue;
    Topology within = WithinNode(req.topology);
    if (topo.Choose(slot.mask & n.healthy, req.gpus, within, nullptr) == 0) continue;
    // Free the node's jobs in the order they are expected to end until the
    // job fits.
    uint64_t others = n.nominated;
    for (const auto& [nd, mine] : jobs[job].nomination) {
      if (nd == ni) others &= ~mine;
    }
    uint64_t usable = n.whole_free & n.healthy & slot.mask & ~others;
    int64_t at = now;
    uint64_t mask = topo.Choose(usable, req.gpus, within, nullptr);
    ends->clear();
    if (mask == 0) {
      for (int o : n.jobs) {
        const JobState& oj = jobs[o];
        int64_t end = oj.preempting                    ? now
                      : oj.req.runtime_estimate_ms > 0 ? std::max(now, oj.bound_ms + oj.req.runtime_estimate_ms)
                                                       : kNever;
        if (end > now && end < out.valid_until) out.valid_until = end;
        ends->emplace_back(end, o);
      }
      std::sort(ends->begin(), ends->end());
    }
    std::array<int, kMaxGpusPerNode> milli{};
    if (!ends->empty()) {
      for (int g = 0; g < kMaxGpusPerNode; ++g) milli[g] = n.free_milli[g];
    }
    for (size_t k = 0; mask == 0 && k < ends->size(); ++k) {
      for (const Held& h : jobs[(*ends)[k].second].held) {
        if (h.node != ni) continue;
        for (uint64_t m = h.mask; m != 0; m &= m - 1) {
          int g = std::countr_zero(m);
          milli[g] += h.milli;
          if (milli[g] >= kWholeGpu) usable |= (uint64_t{1} << g) & n.healthy & slot.mask & ~others;
        }
      }
      at = (*ends)[k].first;
      mask = topo.Choose(usable, req.gpus, within, nullptr);
    }
    if (mask == 0) continue;
    out.found = true;
    out.at_now = at == now;
    out.at = at;
    out.missing = at == kNever ? req.gpus - std::popcount(n.whole_free & mask) : 0;
    out.mask = mask;
    return out;
  }
  return out;
}

bool State::Reserve(int job, int64_t now) {
  const JobRequest& req = jobs[job].req;
  if (req.fractional() || req.gpus == 0) return false;
  struct Candidate {
    int64_t at;
    int missing;  // GPUs still held by jobs without an estimate
    int node;
    uint64_t mask;
  };
  std::vector<Candidate> found;
  std::vector<std::pair<int64_t, int>> ends;  // one node's jobs by expected end; reused
  int now_and_whole = 0;                      // candidates that cannot be beaten: free now, nothing missing
  const uint64_t key = ReserveKey(jobs[job]);
  const uint64_t shape = HashMix(key, static_cast<uint64_t>(req.replicas));
  if (reserve_failed_pass != pass) {
    reserve_failed_pass = pass;
    reserve_failed.clear();
  }
  const bool failed_before = std::find(reserve_failed.begin(), reserve_failed.end(), shape) != reserve_failed.end();
  if (failed_before && !config.verify_memos) return false;  // verify_memos: walk, and check that it fails again
  // A rare selector's nodes, in index order, are the only nodes that can
  // hold a candidate (the others do not match): walk just them.
  const std::vector<int>* selected = SelectedNodes(req);
  const size_t walk = selected != nullptr ? selected->size() : nodes.size();
  for (size_t k = 0; k < walk && now_and_whole < req.replicas; ++k) {
    const size_t ni = selected != nullptr ? static_cast<size_t>((*selected)[k]) : k;
    NodeState& n = nodes[ni];
    ReserveMemo& memo = n.reserve_memo;
    if (memo.key != key || memo.version != n.version || now >= memo.valid_until || now < memo.computed_at) {
      memo = ReserveOnNode(job, static_cast<int>(ni), now, &ends);
      memo.key = key;
      memo.version = n.version;
      memo.computed_at = now;
    } else if (config.verify_memos && memo_mismatch.empty()) {
      ReserveMemo fresh = ReserveOnNode(job, static_cast<int>(ni), now, &ends);
      if (fresh.found != memo.found ||
          (fresh.found && ((fresh.at_now ? now : fresh.at) != (memo.at_now ? now : memo.at) ||
                           fresh.missing != memo.missing || fresh.mask != memo.mask))) {
        memo_mismatch = fmt::format("node '{}': the reservation candidate kept for '{}' differs from a fresh one",
                                    n.info.name, req.id);
      }
    }
    if (!memo.found) continue;
    int64_t at = memo.at_now ? now : memo.at;
    found.push_back(Candidate{at, memo.missing, static_cast<int>(ni), memo.mask});
    // Nodes are walked in index order, the tie-break below: once enough
    // candidates are free now, no later node can come before them.
    if (at == now && memo.missing == 0) ++now_and_whole;
  }
  if (static_cast<int>(found.size()) < req.replicas) {
    if (!failed_before && reserve_failed.size() < kMaxFailedShapes) reserve_failed.push_back(shape);
    return false;
  }
  if (failed_before && memo_mismatch.empty()) {
    memo_mismatch = fmt::format("'{}': a reservation found for a shape that failed earlier in the pass", req.id);
  }
  std::partial_sort(found.begin(), found.begin() + req.replicas, found.end(),
                    [](const Candidate& a, const Candidate& b) {
                      if (a.at != b.at) return a.at < b.at;
                      if (a.missing != b.missing) return a.missing < b.missing;
                      return a.node < b.node;
                    });
  reservation_job = job;
  reservation_ms = now;
  uint64_t sig = jobs[job].seq;
  for (int r = 0; r < req.replicas; ++r) {
    const Candidate& c = found[r];
    nodes[c.node].reserved |= c.mask;
    reserved_nodes.push_back(c.node);
    reservation_ms = std::max(reservation_ms, c.at);
    sig = HashMix(HashMix(sig, static_cast<uint64_t>(c.node)), c.mask);
  }
  // A reservation that starts now is signed as "now", not by the time: no
  // job but its holder may use it whatever the clock reads (MayUseReserved),
  // so a preemption search that failed under it need not run again in the
  // next pass merely because the clock moved.
  constexpr uint64_t kStartsNow = 0x6e6f77ULL << 40;
  reservation_sig = HashMix(sig, reservation_ms == now ? kStartsNow : static_cast<uint64_t>(reservation_ms)) | 1;
  JobState& j = jobs[job];
  j.why = Why{WhyCode::kReserved, -1, 0, reservation_ms, found[0].node, now};
  return true;
}

void State::ClearReservation() {
  for (int n : reserved_nodes) nodes[n].reserved = 0;
  reserved_nodes.clear();
  reservation_job = -1;
  reservation_ms = kNever;
  reservation_sig = 0;
}

}  // namespace drover::sched
