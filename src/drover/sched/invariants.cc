// CheckInvariants: recomputes every index from the bound jobs and compares.
// O(nodes x GPUs + jobs); for tests and the simulator's paranoid mode.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {

Status Scheduler::CheckInvariants() const {
  const State& s = *s_;
  if (!s.memo_mismatch.empty()) return Internal("memo: " + s.memo_mismatch);
  // Per-GPU usage implied by the bound jobs.
  std::vector<std::array<int, kMaxGpusPerNode>> milli(s.nodes.size());
  std::vector<std::array<int64_t, kMaxGpusPerNode>> mem(s.nodes.size());
  std::vector<std::array<int, kMaxGpusPerNode>> whole_holders(s.nodes.size());
  for (auto& a : milli) a.fill(0);
  for (auto& a : mem) a.fill(0);
  for (auto& a : whole_holders) a.fill(0);
  std::vector<std::array<int, kMaxGpusPerNode>> victims(s.nodes.size());  // preemptible, not stopping
  for (auto& a : victims) a.fill(0);
  std::vector<int64_t> tenant_milli(s.tenants.size(), 0);
  std::vector<int64_t> host_cpu(s.nodes.size(), 0);
  std::vector<int64_t> host_mem(s.nodes.size(), 0);
  std::vector<std::map<std::string, int64_t>> tenant_model(s.tenants.size());
  std::vector<std::map<std::string, int64_t>> tenant_stopping(s.tenants.size());
  size_t bound = 0;
  size_t pending = 0;
  std::multiset<int> priorities;
  for (size_t ji = 0; ji < s.jobs.size(); ++ji) {
    const JobState& j = s.jobs[ji];
    if (j.seq == 0) continue;
    const std::string& id = j.req.id;
    if (j.priority != j.req.priority || j.preemptible != j.req.preemptible || j.nominee == j.nomination.empty()) {
      return Internal(fmt::format(
          "job '{}': its copies of the request's priority and preemptible, or its nominee flag, are stale", id));
    }
    if (j.pending) {
      ++pending;
      if (!j.held.empty()) return Internal(fmt::format("job '{}' is both pending and bound", id));
      if (s.pending[j.pending_pos] != static_cast<int>(ji))
        return Internal(fmt::format("job '{}' is lost from the queue", id));
      continue;
    }
    if (j.held.empty()) return Internal(fmt::format("job '{}' is neither pending nor bound", id));
    ++bound;
    if (j.held.size() != static_cast<size_t>(j.req.replicas)) {
      return Internal(fmt::format("gang '{}' holds {} of its {} replicas", id, j.held.size(), j.req.replicas));
    }
    if (j.preempting && !j.req.preemptible)
      return Internal(fmt::format("job '{}' is not preemptible but is being preempted", id));
    if (j.req.preemptible && !j.preempting) priorities.insert(j.req.priority);
    std::map<std::string, int64_t> by_model;
    for (const Held& h : j.held) {
      if (h.cls >= 0) by_model[s.classes[h.cls].model] += int64_t{std::popcount(h.mask)} * h.milli;
    }
    if (by_model != j.by_model) return Internal(fmt::format("job '{}': its GPUs by model are stale", id));
    for (const Held& h : j.held) {
      if (std::popcount(h.mask) != j.req.gpus)
        return Internal(
            fmt::format("job '{}' holds {} GPUs per replica, asked {}", id, std::popcount(h.mask), j.req.gpus));
      for (uint64_t m = h.mask; m != 0; m &= m - 1) {
        int g = std::countr_zero(m);
        milli[h.node][g] += h.milli;
        mem[h.node][g] += h.milli == kWholeGpu ? 0 : h.mem;
        if (h.milli == kWholeGpu) ++whole_holders[h.node][g];
        if (j.req.preemptible && !j.preempting) ++victims[h.node][g];
      }
      host_cpu[h.node] += j.req.cpu_milli;
      host_mem[h.node] += j.req.memory_bytes;
      if (h.cls < 0) continue;  // CPU-only
      tenant_milli[j.tenant] += int64_t{std::popcount(h.mask)} * h.milli;
      tenant_model[j.tenant][s.classes[h.cls].model] += int64_t{std::popcount(h.mask)} * h.milli;
      if (j.preempting) tenant_stopping[j.tenant][s.classes[h.cls].model] += int64_t{std::popcount(h.mask)} * h.milli;
    }
  }
  if (bound != s.bound_count)
    return Internal(fmt::format("{} jobs are bound but the count says {}", bound, s.bound_count));
  if (pending != s.pending.size())
    return Internal(fmt::format("{} jobs are pending but the queue holds {}", pending, s.pending.size()));
  if (priorities != s.preemptible_priorities) return Internal("the index of preemptible priorities is stale");
  for (size_t ni = 0; ni < s.nodes.size(); ++ni) {
    const NodeState& n = s.nodes[ni];
    if (n.free_cpu != n.info.cpu_milli - host_cpu[ni] || n.free_host_mem != n.info.memory_bytes - host_mem[ni]) {
      return Internal(fmt::format("node '{}' free CPU or host memory is stale", n.info.name));
    }
    if ((n.info.cpu_milli > 0 && n.free_cpu < 0) || (n.info.memory_bytes > 0 && n.free_host_mem < 0)) {
      return Internal(fmt::format("node '{}' has more CPU or host memory taken than it has", n.info.name));
    }
    for (uint64_t m = n.present; m != 0; m &= m - 1) {
      int g = std::countr_zero(m);
      const std::string where = fmt::format("node '{}' GPU {}", n.info.name, g);
      if (milli[ni][g] > kWholeGpu)
        return Internal(fmt::format("{} is over-committed: {} milli-GPU", where, milli[ni][g]));
      if (whole_holders[ni][g] > 1 || (whole_holders[ni][g] == 1 && milli[ni][g] != kWholeGpu)) {
        return Internal(fmt::format("{} is held whole by one job and shared with another", where));
      }
      if (mem[ni][g] > n.info.gpus[g].memory_bytes)
        return Internal(fmt::format("{} has more memory reserved than it has", where));
      if (n.free_milli[g] != kWholeGpu - milli[ni][g]) return Internal(fmt::format("{} free share is stale", where));
      if (n.victim_jobs[g] != victims[ni][g] || ((n.victim_gpus >> g) & 1) != (victims[ni][g] > 0 ? 1U : 0U)) {
        return Internal(fmt::format("{}: the count of preemptible jobs on it is stale", where));
      }
      bool whole = milli[ni][g] == 0;
      if (whole != ((n.whole_free >> g) & 1)) return Internal(fmt::format("{} free mask is stale", where));
      int64_t expect_mem = whole_holders[ni][g] ? 0 : n.info.gpus[g].memory_bytes - mem[ni][g];
      if (n.free_mem[g] != expect_mem) return Internal(fmt::format("{} free memory is stale", where));
      bool shared = n.info.schedulable && ((n.healthy >> g) & 1) && !whole && n.free_milli[g] > 0;
      if (shared != (n.shared_key[g] >= 0) ||
          (shared &&
           !s.classes[n.gpu_class[g]].shared.contains({n.free_milli[g], static_cast<int>(ni) * kMaxGpusPerNode + g}))) {
        return Internal(fmt::format("{} is missing from the shared-GPU index", where));
      }
    }
    for (size_t si = 0; si < n.classes.size(); ++si) {
      const ClassSlot& slot = n.classes[si];
      int count = n.info.schedulable ? std::popcount(n.whole_free & n.healthy & slot.mask) : 0;
      if (slot.count != count)
        return Internal(fmt::format("node '{}' sits in bucket {} but has {} free", n.info.name, slot.count, count));
      if (count > 0) {
        const auto& b = s.classes[slot.cls].buckets[count];
        if (slot.pos < 0 || slot.pos >= static_cast<int>(b.size()) ||
            b[slot.pos] != std::make_pair(static_cast<int>(ni), static_cast<int>(si))) {
          return Internal(fmt::format("node '{}' is misplaced in its bucket", n.info.name));
        }
      }
    }
  }
  for (const GpuClass& c : s.classes) {
    for (int k = 1; k <= kMaxGpusPerNode; ++k) {
      const auto& b = c.buckets[k];
      for (size_t p = 0; p < b.size() + 4; ++p) {  // every node's host resources, and none beyond
        const HostTree::Max want = p < b.size() ? s.HostLeft(s.nodes[b[p].first]) : HostTree::Max{};
        const HostTree::Max got = c.host[k].At(p);
        if (want.cpu != got.cpu || want.mem != got.mem) {
          return Internal(fmt::format("class '{}' bucket {}: the host tree is stale at {}", c.model, k, p));
        }
      }
      if (!c.host[k].Consistent())
        return Internal(fmt::format("class '{}' bucket {}: the host tree's maxima are stale", c.model, k));
    }
    {
      std::vector<int> on(s.nodes.size(), 0);
      for (const auto& [free, key] : c.shared) ++on[static_cast<size_t>(key / kMaxGpusPerNode)];
      for (size_t ni = 0; ni < s.nodes.size(); ++ni) {
        const int have = ni < c.shared_on.size() ? c.shared_on[ni] : 0;
        const HostTree::Max want = on[ni] > 0 ? s.HostLeft(s.nodes[ni]) : HostTree::Max{};
        const HostTree::Max got = c.shared_host.At(ni);
        if (have != on[ni] || want.cpu != got.cpu || want.mem != got.mem) {
          return Internal(fmt::format("class '{}': the shared GPUs' host tree is stale at node {}", c.model, ni));
        }
      }
      if (!c.shared_host.Consistent())
        return Internal(fmt::format("class '{}': the shared host tree's maxima are stale", c.model));
    }
    for (int k = 1; k <= kMaxGpusPerNode; ++k) {
      if (c.buckets[k].empty() == (((c.nonempty >> (k - 1)) & 1) != 0))
        return Internal(fmt::format("class '{}' bucket bitmap is stale at {}", c.model, k));
    }
  }
  for (const Domain& d : s.domains) {
    std::vector<int64_t> free(s.classes.size(), 0);
    for (int ni : d.nodes) {
      for (const ClassSlot& slot : s.nodes[ni].classes) free[slot.cls] += slot.count;
    }
    if (free != d.free_by_class) return Internal(fmt::format("domain '{}' free counts are stale", d.value));
  }
  for (size_t di = 0; di < s.domains.size(); ++di) {
    const Domain& d = s.domains[di];
    if (d.rank_dirty) {
      if (std::find(s.rank_dirty.begin(), s.rank_dirty.end(), static_cast<int>(di)) == s.rank_dirty.end()) {
        return Internal(fmt::format("domain '{}' is marked for ranking but not listed", d.value));
      }
      continue;
    }
    const DomainRank& r = s.domain_rank[d.level];
    int64_t total = 0;
    for (int64_t f : d.free_by_class) total += f;
    const auto has = [&](const std::set<std::pair<int64_t, int>>& set, int64_t key) {
      return set.count({key, static_cast<int>(di)}) == 1;
    };
    bool ok = d.ranked_total == total && has(r.total, total) && d.ranked_by_class.size() == d.free_by_class.size();
    for (size_t c = 0; ok && c < d.free_by_class.size(); ++c) {
      ok =
          d.ranked_by_class[c] == d.free_by_class[c] && c < r.by_class.size() && has(r.by_class[c], d.free_by_class[c]);
    }
    if (!ok) return Internal(fmt::format("domain '{}' is ranked by stale free counts", d.value));
  }
  for (const DomainRank& r : s.domain_rank) {
    size_t ranked = r.total.size();
    for (const auto& set : r.by_class) {
      if (set.size() != ranked) return Internal("the domain ranking's class and total sets differ in size");
    }
  }
  for (size_t t = 0; t < s.tenants.size(); ++t) {
    const TenantState& ts = s.tenants[t];
    if (ts.milli != tenant_milli[t] || ts.by_model != tenant_model[t]) {
      return Internal(fmt::format("tenant '{}' usage is stale", ts.info.name));
    }
    if (ts.stopping != tenant_stopping[t]) {
      return Internal(fmt::format("tenant '{}' count of GPUs held by stopping jobs is stale", ts.info.name));
    }
    if (ts.info.borrow_limit >= 0 && s.Beyond(ts) > int64_t{ts.info.borrow_limit} * kWholeGpu) {
      return Internal(fmt::format("tenant '{}' borrows {} milli-GPU, over its limit of {} GPUs", ts.info.name,
                                  s.Beyond(ts), ts.info.borrow_limit));
    }
  }
  // The label index holds each node under each of its labels, once.
  std::map<std::pair<std::string, std::string>, std::vector<int>> labels;
  for (size_t n = 0; n < s.nodes.size(); ++n) {
    for (const auto& label : s.nodes[n].info.labels) labels[label].push_back(static_cast<int>(n));
  }
  for (const auto& [label, nodes] : s.label_nodes) {
    auto it = labels.find(label);
    if (nodes != (it == labels.end() ? std::vector<int>{} : it->second)) {  // in index order
      return Internal(fmt::format("the index of label {}={} is stale", label.first, label.second));
    }
    if (it != labels.end()) labels.erase(it);
  }
  if (!labels.empty()) {
    return Internal(fmt::format("label {}={} is missing from the index", labels.begin()->first.first,
                                labels.begin()->first.second));
  }
  return Status::Ok();
}

}  // namespace drover::sched
