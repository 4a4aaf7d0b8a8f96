// Placement: the free-capacity indexes, holding and releasing GPUs, and the
// search for where a job goes.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <tuple>

#include "drover/sched/scheduler_state.h"

namespace drover::sched {
namespace {

// Candidates examined past the first fit when the first is not topologically
// ideal: bounds a best-effort search on a large cluster.
constexpr int kMaxExamined = 16;
// Shared GPUs weighed for one share (in best-fit order) when the best fit
// strands GPUs.
constexpr int kMaxFractionCandidates = 16;
// Gang domains tried per level (switch, rack) before moving to the next level.
constexpr int kMaxDomains = 16;
// A node selector whose rarest label is on at most 1 / kSelectedShare of the
// nodes is placed by walking those nodes (SelectedNodes), not the buckets.
constexpr size_t kSelectedShare = 8;

bool Better(const Pick& a, const Pick& b, bool spread) {
  if (a.quality != b.quality) return a.quality > b.quality;
  if (a.stranded != b.stranded) return a.stranded < b.stranded;
  return spread ? a.fill > b.fill : a.fill < b.fill;
}

}  // namespace

Topology WithinNode(Topology t) { return (t == Topology::kIsland || t == Topology::kNuma) ? t : Topology::kBestEffort; }

// ---- indexes ----

void HostTree::Set(size_t pos, int64_t cpu, int64_t mem) {
  if (pos >= size_) {
    if (cpu == kNone && mem == kNone) return;  // beyond the leaves: already none
    size_t size = std::max<size_t>(16, size_);
    while (size <= pos) size *= 2;
    std::vector<Max> tree(2 * size);
    for (size_t i = 0; i < size_; ++i) tree[size + i] = tree_[size_ + i];
    for (size_t i = size; i-- > 1;) {
      tree[i] = Max{std::max(tree[2 * i].cpu, tree[2 * i + 1].cpu), std::max(tree[2 * i].mem, tree[2 * i + 1].mem)};
    }
    tree_ = std::move(tree);
    size_ = size;
  }
  size_t i = size_ + pos;
  tree_[i] = Max{cpu, mem};
  for (i /= 2; i >= 1; i /= 2) {
    const Max m{std::max(tree_[2 * i].cpu, tree_[2 * i + 1].cpu), std::max(tree_[2 * i].mem, tree_[2 * i + 1].mem)};
    if (m.cpu == tree_[i].cpu && m.mem == tree_[i].mem) break;  // nothing above changes
    tree_[i] = m;
  }
}

int64_t HostTree::Find(size_t node, size_t lo, size_t hi, int64_t pos, bool forward, int64_t cpu, int64_t mem,
                       Max* skipped) const {
  if (forward ? static_cast<int64_t>(hi) <= pos : static_cast<int64_t>(lo) > pos) return -1;
  const Max& m = tree_[node];
  if (m.cpu < cpu || m.mem < mem) {
    // Nothing here fits: passed over whole (only the part on the walk's
    // side of pos is the walk's, but the maxima of the whole bound it).
    if (m.cpu != kNone || m.mem != kNone) {
      skipped->cpu = std::max(skipped->cpu, m.cpu);
      skipped->mem = std::max(skipped->mem, m.mem);
    }
    return -1;
  }
  if (hi - lo == 1) return static_cast<int64_t>(lo);
  const size_t mid = (lo + hi) / 2;
  const int64_t first = forward ? Find(2 * node, lo, mid, pos, forward, cpu, mem, skipped)
                                : Find(2 * node + 1, mid, hi, pos, forward, cpu, mem, skipped);
  if (first >= 0) return first;
  return forward ? Find(2 * node + 1, mid, hi, pos, forward, cpu, mem, skipped)
                 : Find(2 * node, lo, mid, pos, forward, cpu, mem, skipped);
}

int64_t HostTree::Prev(int64_t pos, int64_t cpu, int64_t mem, Max* skipped) const {
  if (size_ == 0 || pos < 0) return -1;
  pos = std::min<int64_t>(pos, static_cast<int64_t>(size_) - 1);
  const Max& leaf = tree_[size_ + static_cast<size_t>(pos)];
  if (leaf.cpu >= cpu && leaf.mem >= mem) return pos;  // the usual case: no descent
  return Find(1, 0, size_, pos, false, cpu, mem, skipped);
}

int64_t HostTree::Next(int64_t pos, int64_t cpu, int64_t mem, Max* skipped) const {
  if (size_ == 0 || pos >= static_cast<int64_t>(size_)) return -1;
  pos = std::max<int64_t>(pos, 0);
  const Max& leaf = tree_[size_ + static_cast<size_t>(pos)];
  if (leaf.cpu >= cpu && leaf.mem >= mem) return pos;
  return Find(1, 0, size_, pos, true, cpu, mem, skipped);
}

bool HostTree::Consistent() const {
  for (size_t i = 1; i < size_; ++i) {
    if (tree_[i].cpu != std::max(tree_[2 * i].cpu, tree_[2 * i + 1].cpu) ||
        tree_[i].mem != std::max(tree_[2 * i].mem, tree_[2 * i + 1].mem)) {
      return false;
    }
  }
  return true;
}

HostTree::Max State::HostLeft(const NodeState& n) const {
  return HostTree::Max{n.info.cpu_milli > 0 ? n.free_cpu : kUnbounded,
                       n.info.memory_bytes > 0 ? n.free_host_mem : kUnbounded};
}

void State::RefreshHostLeft(int node) {
  const NodeState& n = nodes[node];
  const HostTree::Max left = HostLeft(n);
  for (const ClassSlot& slot : n.classes) {
    GpuClass& c = classes[slot.cls];
    if (slot.count > 0) c.host[slot.count].Set(static_cast<size_t>(slot.pos), left.cpu, left.mem);
    if (static_cast<size_t>(node) < c.shared_on.size() && c.shared_on[node] > 0) {
      c.shared_host.Set(static_cast<size_t>(node), left.cpu, left.mem);
    }
  }
}

int State::ClassFor(const GpuInfo& g) {
  for (size_t i = 0; i < classes.size(); ++i) {
    const GpuClass& c = classes[i];
    if (c.vendor == g.vendor && c.model == g.model && c.memory_bytes == g.memory_bytes) return static_cast<int>(i);
  }
  GpuClass c;
  c.vendor = g.vendor;
  c.model = g.model;
  c.memory_bytes = g.memory_bytes;
  classes.push_back(std::move(c));
  for (Domain& d : domains) d.free_by_class.resize(classes.size(), 0);
  for (size_t d = 0; d < domains.size(); ++d) MarkRankDirty(static_cast<int>(d));  // a key for the new class
  return static_cast<int>(classes.size()) - 1;
}

int State::TopoFor(const NodeInfo& info) {
  std::string key = std::to_string(info.gpus.size()) + ":";
  for (const GpuInfo& g : info.gpus) key += std::to_string(g.numa_node) + ",";
  key += ":";
  for (Link l : info.links) key += static_cast<char>('0' + static_cast<int>(l));
  auto [it, inserted] = topo_ids.emplace(key, static_cast<int>(topos.size()));
  if (inserted) {
    std::vector<int> numa;
    for (const GpuInfo& g : info.gpus) numa.push_back(g.numa_node);
    topos.push_back(NodeTopology::Build(static_cast<int>(info.gpus.size()), info.links, numa));
  }
  return it->second;
}

int State::DomainFor(const std::string& label, const std::string& value) {
  auto [it, inserted] = domain_ids.emplace(std::make_pair(label, value), static_cast<int>(domains.size()));
  if (inserted) {
    Domain d;
    d.value = value;
    d.free_by_class.assign(classes.size(), 0);
    d.level = label == "switch" ? 0 : 1;
    domains.push_back(std::move(d));
    level_domains[label == "switch" ? 0 : 1].push_back(it->second);
    MarkRankDirty(it->second);
  }
  return it->second;
}

int State::TenantFor(const std::string& name) {
  auto [it, inserted] = tenant_ids.emplace(name, static_cast<int>(tenants.size()));
  if (inserted) {
    TenantState t;
    t.info.name = name;
    tenants.push_back(std::move(t));
  }
  return it->second;
}

bool State::ClassMatches(const JobRequest& job, int cls) const {
  const GpuClass& c = classes[cls];
  if (!job.gpu_vendor.empty() && c.vendor != job.gpu_vendor) return false;
  if (!job.gpu_model.empty() && c.model != job.gpu_model) return false;
  if (!job.gpu_models.empty() &&
      std::find(job.gpu_models.begin(), job.gpu_models.end(), c.model) == job.gpu_models.end()) {
    return false;
  }
  return c.memory_bytes >= job.gpu_memory_bytes;
}

bool State::NodeMatches(const JobRequest& job, const NodeState& node) const {
  if (!node.info.schedulable) return false;
  for (const auto& [k, v] : job.node_selector) {
    auto it = node.info.labels.find(k);
    if (it == node.info.labels.end() || it->second != v) return false;
  }
  return true;
}

bool State::HostFits(const JobRequest& job, const NodeState& node) const {
  const bool cpu = node.info.cpu_milli <= 0 || node.free_cpu >= job.cpu_milli;
  const bool mem = node.info.memory_bytes <= 0 || node.free_host_mem >= job.memory_bytes;
  if (cpu && mem) return true;
  // The most CPU and memory left on a node that refused (RecordNoFit).
  host_miss_cpu = std::max(host_miss_cpu, node.info.cpu_milli > 0 ? node.free_cpu : kUnbounded);
  host_miss_mem = std::max(host_miss_mem, node.info.memory_bytes > 0 ? node.free_host_mem : kUnbounded);
  return false;
}

int64_t State::Stranded(const NodeState& n, int64_t gpu_milli, int64_t cpu) const {
  // GPU milli the CPU left can still serve: what it would serve for one
  // arrival drawn from the workload, in expectation (ShapeStats::StrandCpuPerMilli).
  const double per_milli = shapes.StrandCpuPerMilli();
  if (n.info.cpu_milli <= 0 || per_milli <= 0) return 0;  // before the GPU walk: no arrival asks for CPU
  int64_t free_gpu = -gpu_milli;
  for (uint64_t m = n.present & n.healthy; m != 0; m &= m - 1) free_gpu += n.free_milli[std::countr_zero(m)];
  if (free_gpu <= 0) return 0;
  int64_t cpu_left = std::max<int64_t>(0, n.free_cpu - cpu);
  double servable = static_cast<double>(cpu_left) / per_milli;
  return std::max<int64_t>(0, free_gpu - static_cast<int64_t>(servable));
}

bool State::PickHostOnly(int job, const std::vector<int>* within, Pick* out) const {
  // CPU-only work goes where it strands the fewest GPUs: nodes with the
  // fewest free GPUs first (none is best), then the least free CPU
  // (binpack) or the most (spread). A scan over the nodes: CPU-only jobs
  // are rare next to GPU jobs on a GPU cluster.
  const JobRequest& req = jobs[job].req;
  bool spread = config.placement == PlacementPolicy::kSpread;
  bool found = false;
  std::tuple<int64_t, int64_t, int64_t> best{};
  auto consider = [&](int ni) {
    const NodeState& n = nodes[ni];
    if (!NodeMatches(req, n) || !HostFits(req, n)) return;
    int64_t free_gpu = 0;
    for (uint64_t m = n.present & n.healthy; m != 0; m &= m - 1) free_gpu += n.free_milli[std::countr_zero(m)];
    int64_t cpu = n.info.cpu_milli > 0 ? n.free_cpu : INT64_MAX / 4;
    // Binpack: strand the fewest GPUs (their CPU taken), then take from
    // the node with the most CPU to spare beyond what its free GPUs need.
    int64_t stranded = Stranded(n, 0, req.cpu_milli) - Stranded(n, 0, 0);
    std::tuple<int64_t, int64_t, int64_t> key =
        spread ? std::make_tuple(int64_t{0}, -free_gpu, -cpu) : std::make_tuple(stranded, free_gpu, cpu);
    if (!found || key < best) {
      best = key;
      *out = Pick{ni, -1, 0, kWholeGpu, 0, Link::kFabric, 0};
      found = true;
    }
  };
  ForEachNode(within, consider);
  return found;
}

void State::SetBucket(int node, ClassSlot& slot, int slot_index, int count) {
  if (slot.count == count) return;
  GpuClass& c = classes[slot.cls];
  NodeState& n = nodes[node];
  if (slot.count > 0) {
    auto& b = c.buckets[slot.count];
    auto moved = b.back();
    b[slot.pos] = moved;
    nodes[moved.first].classes[moved.second].pos = slot.pos;
    HostTree& host = c.host[slot.count];
    host.Set(static_cast<size_t>(slot.pos), host.At(b.size() - 1).cpu, host.At(b.size() - 1).mem);
    b.pop_back();
    host.Clear(b.size());
    if (b.empty()) c.nonempty &= ~(uint64_t{1} << (slot.count - 1));
  }
  int delta = count - slot.count;
  for (int d : {n.switch_domain, n.rack_domain}) {
    if (d < 0) continue;
    domains[d].free_by_class[slot.cls] += delta;
    MarkRankDirty(d);
  }
  slot.count = count;
  slot.pos = -1;
  if (count > 0) {
    auto& b = c.buckets[count];
    slot.pos = static_cast<int>(b.size());
    b.emplace_back(node, slot_index);
    c.nonempty |= uint64_t{1} << (count - 1);
    const HostTree::Max left = HostLeft(n);
    c.host[count].Set(static_cast<size_t>(slot.pos), left.cpu, left.mem);
  }
}

void State::MarkRankDirty(int domain) {
  Domain& d = domains[domain];
  if (d.rank_dirty) return;
  d.rank_dirty = true;
  rank_dirty.push_back(domain);
}

void State::RankDomains() {
  for (DomainRank& r : domain_rank) r.by_class.resize(classes.size());
  for (int d : rank_dirty) {
    Domain& dm = domains[d];
    dm.rank_dirty = false;
    DomainRank& r = domain_rank[dm.level];
    const auto rekey = [d](std::set<std::pair<int64_t, int>>& set, int64_t& ranked, int64_t free) {
      if (free == ranked) return;
      if (ranked >= 0) set.erase({ranked, d});
      set.emplace(free, d);
      ranked = free;
    };
    int64_t total = 0;
    for (int64_t f : dm.free_by_class) total += f;
    rekey(r.total, dm.ranked_total, total);
    dm.ranked_by_class.resize(classes.size(), -1);
    for (size_t c = 0; c < classes.size(); ++c) rekey(r.by_class[c], dm.ranked_by_class[c], dm.free_by_class[c]);
  }
  rank_dirty.clear();
}

bool State::RankedDomains(int level, const std::vector<int>& matching, bool all, int64_t need, bool spread, size_t max,
                          std::vector<int>* out) {
  out->clear();
  if (!all && matching.size() != 1) return false;
  RankDomains();
  const DomainRank& r = domain_rank[level];
  const auto& set = all ? r.total : r.by_class[matching[0]];
  constexpr int kLowest = std::numeric_limits<int>::min();
  if (!spread) {
    for (auto it = set.lower_bound({need, kLowest}); it != set.end() && out->size() < max; ++it)
      out->push_back(it->second);
    return true;
  }
  // Most free first; among equal counts the lowest index first, as the scan
  // ranks them: each run of one count is read forwards.
  auto hi = set.end();
  while (hi != set.begin() && out->size() < max) {
    const int64_t free = std::prev(hi)->first;
    if (free < need) break;
    auto lo = set.lower_bound({free, kLowest});
    for (auto it = lo; it != hi && out->size() < max; ++it) out->push_back(it->second);
    hi = lo;
  }
  return true;
}

void State::UpdateShared(int node, int gpu) {
  NodeState& n = nodes[node];
  uint64_t bit = uint64_t{1} << gpu;
  int want = -1;
  if (n.info.schedulable && (n.present & n.healthy & bit) != 0 && (n.whole_free & bit) == 0 && n.free_milli[gpu] > 0) {
    want = n.free_milli[gpu];
  }
  if (want == n.shared_key[gpu]) return;
  if ((n.present & bit) == 0) return;
  GpuClass& c = classes[n.gpu_class[gpu]];
  auto& shared = c.shared;
  if (c.shared_on.size() <= static_cast<size_t>(node)) c.shared_on.resize(static_cast<size_t>(node) + 1, 0);
  uint16_t& on = c.shared_on[static_cast<size_t>(node)];
  if (n.shared_key[gpu] >= 0) {
    shared.erase({n.shared_key[gpu], node * kMaxGpusPerNode + gpu});
    if (--on == 0) c.shared_host.Clear(static_cast<size_t>(node));
  }
  if (want >= 0) {
    shared.insert({want, node * kMaxGpusPerNode + gpu});
    if (on++ == 0) {
      const HostTree::Max left = HostLeft(n);
      c.shared_host.Set(static_cast<size_t>(node), left.cpu, left.mem);
    }
  }
  n.shared_key[gpu] = static_cast<int16_t>(want);
}

void State::Recount(int node) {
  NodeState& n = nodes[node];
  for (size_t i = 0; i < n.classes.size(); ++i) {
    ClassSlot& slot = n.classes[i];
    int count = n.info.schedulable ? std::popcount(n.whole_free & n.healthy & slot.mask) : 0;
    SetBucket(node, slot, static_cast<int>(i), count);
  }
  for (uint64_t m = n.present; m != 0; m &= m - 1) UpdateShared(node, std::countr_zero(m));
}

// ---- holding GPUs ----

int64_t State::Beyond(const TenantState& t) const {
  int64_t beyond = 0;
  for (const auto& [model, milli] : t.by_model) {
    auto q = t.info.guaranteed_gpus.find(model);
    int64_t guaranteed = q == t.info.guaranteed_gpus.end() ? 0 : int64_t{q->second} * kWholeGpu;
    beyond += std::max<int64_t>(0, milli - guaranteed);
  }
  return beyond;
}

bool State::CanCharge(int tenant, const std::string& model, int64_t milli, int64_t mem) const {
  const TenantState& t = tenants[tenant];
  auto u = t.by_model.find(model);
  int64_t cur = u == t.by_model.end() ? 0 : u->second;
  if (!t.info.max_gpus.empty()) {
    if (auto cap = t.info.max_gpus.find(model);
        cap != t.info.max_gpus.end() && cur + milli > int64_t{cap->second} * kWholeGpu) {
      return false;
    }
    if (auto all = t.info.max_gpus.find("*");
        all != t.info.max_gpus.end() && t.milli + milli > int64_t{all->second} * kWholeGpu) {
      return false;
    }
  }
  if (t.info.max_gpu_memory_bytes >= 0 && t.mem + mem > t.info.max_gpu_memory_bytes) return false;
  if (t.info.borrow_limit < 0) return true;
  auto q = t.info.guaranteed_gpus.find(model);
  int64_t guaranteed = q == t.info.guaranteed_gpus.end() ? 0 : int64_t{q->second} * kWholeGpu;
  int64_t delta = std::max<int64_t>(0, cur + milli - guaranteed) - std::max<int64_t>(0, cur - guaranteed);
  return Beyond(t) + delta <= int64_t{t.info.borrow_limit} * kWholeGpu;
}

void State::Charge(int job, const Held& h, int sign) {
  TenantState& t = tenants[jobs[job].tenant];
  const NodeState& n = nodes[h.node];
  int64_t milli = int64_t{std::popcount(h.mask)} * h.milli;
  int64_t mem = 0;
  for (uint64_t m = h.mask; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    mem += h.milli == kWholeGpu ? (g < static_cast<int>(n.info.gpus.size()) ? n.info.gpus[g].memory_bytes : 0) : h.mem;
  }
  t.cpu += sign * jobs[job].req.cpu_milli;
  if (h.cls < 0) return;  // a CPU-only replica holds no GPU
  t.milli += sign * milli;
  t.mem += sign * mem;
  auto add = [&](std::map<std::string, int64_t>& to) {
    int64_t& by = to[classes[h.cls].model];
    by += sign * milli;
    if (by == 0) to.erase(classes[h.cls].model);
  };
  add(t.by_model);
  if (jobs[job].preempting) add(t.stopping);
}

void State::CountVictim(const Held& h, int sign) {
  NodeState& n = nodes[h.node];
  for (uint64_t m = h.mask; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    n.victim_jobs[g] = static_cast<uint16_t>(n.victim_jobs[g] + sign);
    const uint64_t bit = uint64_t{1} << g;
    n.victim_gpus = n.victim_jobs[g] > 0 ? n.victim_gpus | bit : n.victim_gpus & ~bit;
  }
}

void State::Hold(int job, const Held& h) {
  NodeState& n = nodes[h.node];
  ++n.version;
  for (uint64_t m = h.mask; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    n.free_milli[g] = static_cast<int16_t>(n.free_milli[g] - h.milli);
    int64_t cap = g < static_cast<int>(n.info.gpus.size()) ? n.info.gpus[g].memory_bytes : 0;
    n.free_mem[g] -= h.milli == kWholeGpu ? cap : h.mem;
  }
  n.whole_free &= ~h.mask;
  n.free_cpu -= jobs[job].req.cpu_milli;
  n.free_host_mem -= jobs[job].req.memory_bytes;
  if (std::find(n.jobs.begin(), n.jobs.end(), job) == n.jobs.end()) n.jobs.push_back(job);
  for (size_t i = 0; i < n.classes.size(); ++i) {
    ClassSlot& slot = n.classes[i];
    if ((slot.mask & h.mask) == 0) continue;
    SetBucket(h.node, slot, static_cast<int>(i),
              n.info.schedulable ? std::popcount(n.whole_free & n.healthy & slot.mask) : 0);
  }
  for (uint64_t m = h.mask & n.present; m != 0; m &= m - 1) UpdateShared(h.node, std::countr_zero(m));
  RefreshHostLeft(h.node);
  if (jobs[job].preemptible && !jobs[job].preempting) CountVictim(h, +1);
  Charge(job, h, +1);
}

void State::Release(int job, const Held& h) {
  NodeState& n = nodes[h.node];
  ++n.version;
  for (uint64_t m = h.mask; m != 0; m &= m - 1) {
    int g = std::countr_zero(m);
    n.free_milli[g] = static_cast<int16_t>(n.free_milli[g] + h.milli);
    int64_t cap = g < static_cast<int>(n.info.gpus.size()) ? n.info.gpus[g].memory_bytes : 0;
    n.free_mem[g] += h.milli == kWholeGpu ? cap : h.mem;
    if (n.free_milli[g] == kWholeGpu && (n.present & (uint64_t{1} << g)) != 0) n.whole_free |= uint64_t{1} << g;
  }
  n.free_cpu += jobs[job].req.cpu_milli;
  n.free_host_mem += jobs[job].req.memory_bytes;
  bool other_replica_here = false;
  for (const Held& o : jobs[job].held) {
    if (&o != &h && o.node == h.node && !(o.mask == h.mask && o.milli == h.milli)) other_replica_here = true;
  }
  if (!other_replica_here) std::erase(n.jobs, job);
  for (size_t i = 0; i < n.classes.size(); ++i) {
    ClassSlot& slot = n.classes[i];
    if ((slot.mask & h.mask) == 0) continue;
    SetBucket(h.node, slot, static_cast<int>(i),
              n.info.schedulable ? std::popcount(n.whole_free & n.healthy & slot.mask) : 0);
  }
  for (uint64_t m = h.mask & n.present; m != 0; m &= m - 1) UpdateShared(h.node, std::countr_zero(m));
  RefreshHostLeft(h.node);
  if (jobs[job].preemptible && !jobs[job].preempting) CountVictim(h, -1);  // else MarkStopping did
  Charge(job, h, -1);
}

// ---- choosing ----

bool State::MayUseReserved(int job, int64_t now) const {
  if (reservation_job == job) return true;
  int64_t est = jobs[job].req.runtime_estimate_ms;
  return est > 0 && reservation_ms != kNever && now + est <= reservation_ms;
}

bool State::OnlyMine(int job, int node, uint64_t mask) const {
  const NodeState& n = nodes[node];
  uint64_t others = n.nominated;
  if (others == 0) return true;
  for (const auto& [nd, m] : jobs[job].nomination) {
    if (nd == node) others &= ~m;
  }
  return (mask & others) == 0;
}

uint64_t State::UsableWhole(int job, const NodeState& node, uint64_t class_mask, int64_t now) const {
  uint64_t m = node.whole_free & node.healthy & class_mask;
  if (node.nominated != 0) {
    uint64_t others = node.nominated;
    int idx = static_cast<int>(&node - nodes.data());
    for (const auto& [nd, mine] : jobs[job].nomination) {
      if (nd == idx) others &= ~mine;
    }
    m &= ~others;
  }
  if ((m & node.reserved) != 0 && !MayUseReserved(job, now)) {
    reserved_hit = true;
    m &= ~node.reserved;
  }
  return m;
}

bool State::PickOnNode(int job, const JobRequest& req, int node, int64_t now, Pick* out) const {
  const NodeState& n = nodes[node];
  if (!HostFits(req, n)) return false;
  const NodeTopology& topo = topos[n.topo];
  bool spread = config.placement == PlacementPolicy::kSpread;
  bool found = false;
  for (const ClassSlot& slot : n.classes) {
    if (!PickMayUse(req, slot.cls)) continue;
    uint64_t usable = UsableWhole(job, n, slot.mask, now);
    if (std::popcount(usable) < req.gpus) continue;
    if (!CanCharge(jobs[job].tenant, classes[slot.cls].model, int64_t{req.gpus} * req.gpu_milli,
                   int64_t{req.gpus} * classes[slot.cls].memory_bytes)) {
      quota_hit = true;
      continue;
    }
    Pick p;
    p.mask = topo.Choose(usable, req.gpus, WithinNode(req.topology), &p.quality);
    if (p.mask == 0) continue;
    p.node = node;
    p.cls = slot.cls;
    p.fill = std::popcount(usable);
    p.stranded = Stranded(n, int64_t{req.gpus} * req.gpu_milli, req.cpu_milli);
    if (!found || Better(p, *out, spread)) {
      *out = p;
      found = true;
    }
  }
  return found;
}

bool State::PickWhole(int job, const JobRequest& req, int64_t now, const std::vector<int>* within, Pick* out) const {
  bool spread = config.placement == PlacementPolicy::kSpread;
  bool found = false;
  if (within != nullptr) {
    for (int node : *within) {
      Pick p;
      if (!NodeMatches(req, nodes[node]) || !PickOnNode(job, req, node, now, &p)) continue;
      if (!found || Better(p, *out, spread)) *out = p;
      found = true;
      // An exact, topologically ideal fit cannot be beaten under binpack.
      const NodeTopology& topo = topos[nodes[node].topo];
      if (!spread && p.fill == req.gpus && p.quality >= topo.ideal[std::min(req.gpus, topo.n)] && p.stranded == 0)
        break;
    }
    return found;
  }
  // Walk the free-count buckets of every matching class, fullest-that-fits
  // first (binpack) or emptiest first (spread). Stop at the first
  // topologically ideal candidate, or kMaxExamined candidates after the first.
  // A job with a node selector of a rare label walks only that label's nodes,
  // in the very order the buckets hold them (free count, then position, as
  // below), so that nodes the selector rejects cost nothing.
  const std::vector<int>* selected = SelectedNodes(req);
  found = WalkBuckets(job, req, now, selected, out);
  if (found && !req.image.empty()) PreferImage(job, req, now, out);
  // Config::verify_memos: the same walk node by node (no selector index, no
  // HostTree) must find the same.
  const bool host = req.cpu_milli > 0 || req.memory_bytes > 0;
  if ((selected != nullptr || host) && config.verify_memos && !plain_walk && memo_mismatch.empty()) {
    const bool quota = quota_hit, reserved = reserved_hit;
    const int64_t miss_cpu = host_miss_cpu, miss_mem = host_miss_mem;
    Pick walked;
    plain_walk = true;
    const bool walked_found = WalkBuckets(job, req, now, nullptr, &walked);
    plain_walk = false;
    if (walked_found != found || (found && (walked.node != out->node || walked.mask != out->mask))) {
      memo_mismatch =
          fmt::format("'{}': the walk of {} and of every node in the buckets disagree", jobs[job].req.id,
                      selected != nullptr ? "its selector's nodes" : "the nodes with room for its host request");
    }
    quota_hit = quota;
    reserved_hit = reserved;
    host_miss_cpu = miss_cpu;
    host_miss_mem = miss_mem;
  }
  return found;
}

// Among places as good as `out`, one on a node that holds the job's image
// (it starts without a pull): the first kMaxExamined such nodes are weighed.
void State::PreferImage(int job, const JobRequest& req, int64_t now, Pick* out) const {
  auto it = image_nodes.find(req.image);
  if (it == image_nodes.end() || std::binary_search(it->second.begin(), it->second.end(), out->node)) return;
  const bool spread = config.placement == PlacementPolicy::kSpread;
  int examined = 0;
  for (int node : it->second) {
    if (++examined > kMaxExamined) break;
    Pick p;
    if (!NodeMatches(req, nodes[node]) || !PickOnNode(job, req, node, now, &p)) continue;
    if (!Better(*out, p, spread)) {
      *out = p;
      return;
    }
  }
}

bool State::WalkBuckets(int job, const JobRequest& req, int64_t now, const std::vector<int>* selected,
                        Pick* out) const {
  const bool spread = config.placement == PlacementPolicy::kSpread;
  bool found = false;
  std::vector<std::tuple<int, int, int>> order;  // (free count, position, node) of `selected`
  for (size_t c = 0; c < classes.size(); ++c) {
    if (!PickMayUse(req, static_cast<int>(c))) continue;
    const GpuClass& cls = classes[c];
    int examined = 0;
    // Whether the walk stops after `node`.
    const auto visit = [&](int node) {
      Pick p;
      if (!NodeMatches(req, nodes[node]) || !PickOnNode(job, req, node, now, &p)) return false;
      if (!found || Better(p, *out, spread)) *out = p;
      found = true;
      const NodeTopology& topo = topos[nodes[node].topo];
      return (p.quality >= topo.ideal[std::min(req.gpus, topo.n)] && p.stranded == 0) || ++examined >= kMaxExamined;
    };
    if (selected != nullptr) {
      order.clear();
      for (int node : *selected) {
        for (const ClassSlot& slot : nodes[node].classes) {
          if (slot.cls == static_cast<int>(c) && slot.count > 0 && slot.count >= req.gpus) {
            order.emplace_back(spread ? -slot.count : slot.count, -slot.pos, node);
          }
        }
      }
      std::sort(order.begin(), order.end());
      for (const auto& [count, pos, node] : order) {
        if (visit(node)) break;
      }
      continue;
    }
    uint64_t bits = req.gpus > kMaxGpusPerNode ? 0 : cls.nonempty & ~((uint64_t{1} << (req.gpus - 1)) - 1);
    bool done = false;
    // A host request: the nodes that would refuse it for their CPU or
    // memory are skipped by the bucket's HostTree, not visited one by one
    // (what they had left still counts toward host_miss_*, as HostFits'
    // refusals do: RecordNoFit reads it).
    const bool host = (req.cpu_milli > 0 || req.memory_bytes > 0) && !plain_walk;
    while (bits != 0 && !done) {
      int k = spread ? 64 - std::countl_zero(bits) : std::countr_zero(bits) + 1;
      bits &= ~(uint64_t{1} << (k - 1));
      const auto& bucket = cls.buckets[k];
      for (int64_t i = static_cast<int64_t>(bucket.size()) - 1; i >= 0; --i) {
        if (host) {
          HostTree::Max skipped;
          i = cls.host[k].Prev(i, req.cpu_milli, req.memory_bytes, &skipped);
          host_miss_cpu = std::max(host_miss_cpu, skipped.cpu);
          host_miss_mem = std::max(host_miss_mem, skipped.mem);
          if (i < 0) break;
        }
        if (visit(bucket[static_cast<size_t>(i)].first)) {
          done = true;
          break;
        }
      }
    }
  }
  return found;
}

const std::vector<int>* State::SelectedNodes(const JobRequest& req) const {
  const std::vector<int>* rarest = nullptr;
  for (const auto& [key, value] : req.node_selector) {
    auto it = label_nodes.find({key, value});
    if (it == label_nodes.end()) {
      static const std::vector<int> kNone;
      return &kNone;  // no node has the label: none matches
    }
    if (rarest == nullptr || it->second.size() < rarest->size()) rarest = &it->second;
  }
  // Sorting a few nodes beats walking the buckets; a common label does not
  // (Config::verify_memos takes the selector's nodes always, and checks them
  // against the buckets).
  if (rarest != nullptr && !config.verify_memos && rarest->size() * kSelectedShare > nodes.size()) return nullptr;
  return rarest;
}

bool State::PickFraction(int job, int64_t now, const std::vector<int>* within, Pick* out) const {
  const JobRequest& req = jobs[job].req;
  const bool host = req.cpu_milli > 0 || req.memory_bytes > 0;
  if ((!host && req.node_selector.empty()) || !config.verify_memos || plain_walk || !memo_mismatch.empty()) {
    return PickFractionWalk(job, now, within, out);
  }
  // Config::verify_memos: the walk that skips nodes by shared_host or by
  // the selector's label and the one that visits every shared GPU must find
  // the same.
  const bool found = PickFractionWalk(job, now, within, out);
  const bool quota = quota_hit, reserved = reserved_hit;
  const int64_t miss_cpu = host_miss_cpu, miss_mem = host_miss_mem;
  plain_walk = true;
  Pick plain;
  const bool plain_found = PickFractionWalk(job, now, within, &plain);
  plain_walk = false;
  if (plain_found != found || (found && (plain.node != out->node || plain.mask != out->mask))) {
    memo_mismatch = fmt::format(
        "'{}': the shares' walk by shared_host or its selector's nodes and of every shared GPU disagree", req.id);
  }
  quota_hit = quota;
  reserved_hit = reserved;
  host_miss_cpu = miss_cpu;
  host_miss_mem = miss_mem;
  return found;
}

bool State::PickFractionWalk(int job, int64_t now, const std::vector<int>* within, Pick* out) const {
  const JobRequest& req = jobs[job].req;
  bool spread = config.placement == PlacementPolicy::kSpread;
  bool may_reserved = MayUseReserved(job, now);
  bool found = false;
  int best_free = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    if (!PickMayUse(req, static_cast<int>(c))) continue;
    if (!CanCharge(jobs[job].tenant, classes[c].model, req.gpu_milli, req.gpu_memory_bytes)) {
      quota_hit = true;
      continue;
    }
    const auto& shared = classes[c].shared;
    auto ok = [&](int key) {
      int node = key / kMaxGpusPerNode;
      int gpu = key % kMaxGpusPerNode;
      const NodeState& n = nodes[node];
      uint64_t bit = uint64_t{1} << gpu;
      if (n.free_mem[gpu] < req.gpu_memory_bytes || !NodeMatches(req, n) || !HostFits(req, n) ||
          !OnlyMine(job, node, bit)) {
        return false;
      }
      if ((n.reserved & bit) != 0 && !may_reserved) {
        reserved_hit = true;
        return false;
      }
      return within == nullptr || std::find(within->begin(), within->end(), node) != within->end();
    };
    auto take = [&](int free, int key, int64_t stranded) {
      if (found &&
          (spread ? free <= best_free : std::make_pair(stranded, free) >= std::make_pair(out->stranded, best_free))) {
        return;
      }
      out->node = key / kMaxGpusPerNode;
      out->cls = static_cast<int>(c);
      out->mask = uint64_t{1} << (key % kMaxGpusPerNode);
      out->milli = req.gpu_milli;
      out->mem = req.gpu_memory_bytes;
      out->quality = Link::kFabric;
      out->stranded = stranded;
      best_free = free;
      found = true;
    };
    if (!spread) {
      // Best fit: the shared GPU with the least free share that still fits,
      // unless that strands GPUs of its node for lack of CPU; then the next
      // candidates in best-fit order are weighed too.
      // A host request skips, by the class's shared_host tree, the nodes
      // whose CPU or memory is too little for it (in the same order: a
      // node's GPUs are consecutive keys), as the whole-GPU walk does.
      const bool host = (req.cpu_milli > 0 || req.memory_bytes > 0) && !plain_walk;
      int examined = 0;
      // A rare node selector: only its nodes' shared GPUs, in the walk's
      // order (free share, then key), as PickWhole walks its nodes.
      if (const std::vector<int>* selected = plain_walk ? nullptr : SelectedNodes(req); selected != nullptr) {
        std::vector<std::pair<int, int>> order;  // (free milli, key)
        for (int node : *selected) {
          const NodeState& n = nodes[node];
          for (uint64_t m = n.present; m != 0; m &= m - 1) {
            const int g = std::countr_zero(m);
            if (n.gpu_class[g] == static_cast<int>(c) && n.shared_key[g] >= req.gpu_milli) {
              order.emplace_back(n.shared_key[g], node * kMaxGpusPerNode + g);
            }
          }
        }
        std::sort(order.begin(), order.end());
        for (const auto& [free, key] : order) {
          if (!ok(key)) continue;
          int64_t stranded = Stranded(nodes[key / kMaxGpusPerNode], req.gpu_milli, req.cpu_milli);
          take(free, key, stranded);
          if (stranded == 0 || ++examined >= kMaxFractionCandidates) break;
        }
        continue;
      }
      for (auto it = shared.lower_bound({req.gpu_milli, -1}); it != shared.end(); ++it) {
        if (host && !HostFits(req, nodes[it->second / kMaxGpusPerNode])) {
          HostTree::Max skipped;
          const int64_t next =
              classes[c].shared_host.Next(it->second / kMaxGpusPerNode + 1, req.cpu_milli, req.memory_bytes, &skipped);
          host_miss_cpu = std::max(host_miss_cpu, skipped.cpu);
          host_miss_mem = std::max(host_miss_mem, skipped.mem);
          // The first entry of a fitting node at this free share, else of
          // the next share; one before it, for the loop's ++it.
          it = next >= 0 ? shared.lower_bound({it->first, static_cast<int>(next) * kMaxGpusPerNode})
                         : shared.lower_bound({it->first + 1, -1});
          if (it == shared.end()) break;
          --it;
          continue;
        }
        if (!ok(it->second)) continue;
        int64_t stranded = Stranded(nodes[it->second / kMaxGpusPerNode], req.gpu_milli, req.cpu_milli);
        take(it->first, it->second, stranded);
        if (stranded == 0 || ++examined >= kMaxFractionCandidates) break;
      }
    } else {
      for (auto it = shared.rbegin(); it != shared.rend() && it->first >= req.gpu_milli; ++it) {
        if (ok(it->second)) {
          take(it->first, it->second, 0);
          break;
        }
      }
    }
  }
  if (found && !spread && out->stranded == 0) return true;
  // No shared GPU fits (binpack), or spread wants an idle GPU: start sharing a
  // whole one, chosen like a 1-GPU job.
  Pick whole;
  bool have_whole = PickWhole(job, req, now, within, &whole);
  if (have_whole && (!found || spread || whole.stranded < out->stranded)) {
    *out = whole;
    out->milli = req.gpu_milli;
    out->mem = req.gpu_memory_bytes;
    return true;
  }
  return found;
}

bool State::PlaceReplicas(int job, int64_t now, const std::vector<int>* within, std::vector<Held>* out) {
  const JobRequest& req = jobs[job].req;
  out->clear();
  for (int r = 0; r < req.replicas; ++r) {
    Pick p;
    bool baseline = config.placement == PlacementPolicy::kBestFit || config.placement == PlacementPolicy::kRandom;
    bool frag = config.placement == PlacementPolicy::kFrag;
    bool ok = baseline           ? PickBaseline(job, now, within, &p)
              : frag             ? PickFrag(job, now, within, &p)
              : req.gpus == 0    ? PickHostOnly(job, within, &p)
              : req.fractional() ? PickFraction(job, now, within, &p)
                                 : PickWhole(job, req, now, within, &p);
    if (!ok) {
      for (auto it = out->rbegin(); it != out->rend(); ++it) Release(job, *it);
      out->clear();
      return false;
    }
    Held h{p.node, p.cls, p.mask, p.milli, p.milli == kWholeGpu ? 0 : p.mem};
    Hold(job, h);
    out->push_back(h);
  }
  return true;
}

bool State::PlaceJob(int job, int64_t now, std::vector<Held>* out) {
  const JobRequest& req = jobs[job].req;
  if (req.replicas == 1) return PlaceReplicas(job, now, nullptr, out);
  bool spread = config.placement == PlacementPolicy::kSpread;
  // Gangs: the tightest domain level first. Domains are ranked by their free
  // GPUs of the classes the job accepts (binpack: fewest that suffice), from
  // the index of domains by free count where one serves the job's classes.
  std::array<int, 3> levels{0, 1, -1};
  size_t level_count = 3;
  if (req.topology == Topology::kSwitch || req.topology == Topology::kRack) {
    levels[0] = req.topology == Topology::kSwitch ? 0 : 1;
    level_count = 1;
  }
  int64_t need = int64_t{req.replicas} * req.gpus;
  std::vector<int> matching;
  for (size_t c = 0; c < classes.size(); ++c) {
    if (ClassMatches(req, static_cast<int>(c))) matching.push_back(static_cast<int>(c));
  }
  const bool all = matching.size() == classes.size();
  std::vector<int> ranked;
  for (size_t l = 0; l < level_count; ++l) {
    const int level = levels[l];
    if (level < 0) return PlaceReplicas(job, now, nullptr, out);
    if (!RankedDomains(level, matching, all, need, spread, static_cast<size_t>(kMaxDomains), &ranked)) {
      std::vector<std::pair<int64_t, int>> scan;
      for (int d : level_domains[level]) {
        int64_t free = 0;
        for (int c : matching) free += domains[d].free_by_class[c];
        if (free >= need) scan.emplace_back(spread ? -free : free, d);
      }
      // Only the first kMaxDomains are tried: order just those.
      size_t head = std::min(scan.size(), static_cast<size_t>(kMaxDomains));
      std::partial_sort(scan.begin(), scan.begin() + static_cast<std::ptrdiff_t>(head), scan.end());
      for (size_t i = 0; i < head; ++i) ranked.push_back(scan[i].second);
    }
    for (int d : ranked) {
      if (PlaceReplicas(job, now, &domains[d].nodes, out)) return true;
    }
  }
  return false;
}

void State::Bind(int job, std::vector<Held> held, int64_t now, Decisions* d) {
  JobState& j = jobs[job];
  DropPending(job);
  ClearNomination(job);
  j.held = std::move(held);
  j.by_model.clear();
  for (const Held& h : j.held) {
    if (h.cls >= 0) j.by_model[classes[h.cls].model] += int64_t{std::popcount(h.mask)} * h.milli;
  }
  j.bound_ms = now;
  j.bound_pass = pass;
  j.why = Why{};
  ++preempt_epoch;
  ++bound_count;
  if (j.req.preemptible) preemptible_priorities.insert(j.req.priority);
  Binding b;
  b.job_id = j.req.id;
  for (const Held& h : j.held) {
    Placement p;
    p.node = nodes[h.node].info.name;
    for (uint64_t m = h.mask; m != 0; m &= m - 1) p.gpu_indices.push_back(std::countr_zero(m));
    p.gpu_milli = h.milli;
    p.gpu_memory_bytes = h.milli == kWholeGpu ? 0 : h.mem;
    b.replicas.push_back(std::move(p));
  }
  if (d != nullptr) d->bindings.push_back(std::move(b));
}

void State::Unbind(int job, int64_t now) {
  JobState& j = jobs[job];
  j.attained = AttainedNow(job, now);
  for (auto it = j.held.rbegin(); it != j.held.rend(); ++it) Release(job, *it);
  if (j.req.preemptible && !j.preempting) preemptible_priorities.erase(preemptible_priorities.find(j.req.priority));
  j.held.clear();
  j.by_model.clear();
  j.preempting = false;
  --bound_count;
  ++preempt_epoch;
}

}  // namespace drover::sched
