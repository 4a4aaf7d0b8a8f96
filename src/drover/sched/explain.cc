// Explanations: why a job waits, and why a job can never run, in words an
// operator can act on. Computed on demand (drover job ID), not in the pass:
// the pass only records a reason code.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <set>

#include "drover/common/quantity.h"
#include "drover/sched/scheduler_state.h"

namespace drover::sched {
namespace {

std::string Duration(int64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  int64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{}", s / 60, s % 60 ? fmt::format("{}s", s % 60) : "");
  return fmt::format("{}h{}", s / 3600, (s % 3600) / 60 ? fmt::format("{}m", (s % 3600) / 60) : "");
}

std::string Bytes(int64_t b) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (b % kGiB == 0) return fmt::format("{}GiB", b / kGiB);
  if (b % kMiB == 0) return fmt::format("{}MiB", b / kMiB);
  return fmt::format("{} bytes", b);
}

std::string Gpus(int n) { return fmt::format("{} GPU{}", n, n == 1 ? "" : "s"); }

// 2000 -> "2 GPUs", 2500 -> "2.5 GPUs".
std::string MilliGpus(int64_t milli) {
  if (milli % kWholeGpu == 0) return Gpus(static_cast<int>(milli / kWholeGpu));
  std::string s = fmt::format("{:.3f}", static_cast<double>(milli) / kWholeGpu);
  while (s.back() == '0') s.pop_back();
  return s + " GPUs";
}

// "8 GPUs of model 'H100 80GB'", "250 milli-GPU and 10GiB of one GPU".
std::string Describe(const JobRequest& job) {
  std::string what;
  if (job.gpus == 0) {
    what = "no GPU";
  } else if (job.fractional()) {
    what = fmt::format("{} milli-GPU and {} of one GPU", job.gpu_milli, Bytes(job.gpu_memory_bytes));
  } else {
    what = Gpus(job.gpus);
  }
  if (!job.gpu_vendor.empty()) what += fmt::format(" of vendor '{}'", job.gpu_vendor);
  if (!job.gpu_model.empty()) what += fmt::format(" of model '{}'", job.gpu_model);
  if (!job.fractional() && job.gpu_memory_bytes > 0)
    what += fmt::format(" with at least {} each", Bytes(job.gpu_memory_bytes));
  if (job.cpu_milli > 0) what += fmt::format(", {} milli-CPU", job.cpu_milli);
  if (job.memory_bytes > 0) what += fmt::format(", {} of host memory", Bytes(job.memory_bytes));
  if (!job.node_selector.empty()) {
    std::string sel;
    for (const auto& [k, v] : job.node_selector) sel += fmt::format("{}{}={}", sel.empty() ? "" : ",", k, v);
    what += fmt::format(" on nodes labelled {}", sel);
  }
  return what;
}

// How many replicas of `job` the host resources `cpu` / `mem` of a node
// hold (capacity 0 = untracked = unlimited).
int64_t HostReplicas(const JobRequest& job, int64_t cpu_cap, int64_t cpu, int64_t mem_cap, int64_t mem) {
  int64_t n = INT64_MAX;
  if (cpu_cap > 0 && job.cpu_milli > 0) n = std::min(n, std::max<int64_t>(0, cpu) / job.cpu_milli);
  if (mem_cap > 0 && job.memory_bytes > 0) n = std::min(n, std::max<int64_t>(0, mem) / job.memory_bytes);
  return n;
}

// NeverFits remembers answers for this many request shapes at most.
constexpr size_t kNeverFitsCacheMax = 1024;

// Whether NodeTopology::Choose finds `g` GPUs of a mask meeting `within`,
// asked once per distinct (topology, mask) in one NeverFits scan: nodes of
// one kind share both, so a cluster of 16,384 HGX boxes asks once, not
// 16,384 times. Remembers the last kSize pairs; the answer is Choose's.
class ChooseMemo {
 public:
  bool Fits(const std::vector<NodeTopology>& topos, int topo, uint64_t mask, int g, Topology within) {
    for (int i = 0; i < size_; ++i) {
      if (entries_[i].topo == topo && entries_[i].mask == mask) return entries_[i].fits;
    }
    bool fits = topos[topo].Choose(mask, g, within, nullptr) != 0;
    entries_[next_] = Entry{topo, mask, fits};
    next_ = (next_ + 1) % kSize;
    size_ = std::min(size_ + 1, kSize);
    return fits;
  }

 private:
  static constexpr int kSize = 16;
  struct Entry {
    int topo = -1;
    uint64_t mask = 0;
    bool fits = false;
  };
  std::array<Entry, kSize> entries_{};
  int size_ = 0;
  int next_ = 0;
};

std::string Within(Topology t) {
  switch (t) {
    case Topology::kIsland: return " on one NVLink island";
    case Topology::kNuma: return " on one NUMA node";
    case Topology::kSwitch: return ", all replicas under one switch";
    case Topology::kRack: return ", all replicas in one rack";
    case Topology::kBestEffort: break;
  }
  return "";
}

}  // namespace

// The fields of `req` that ShapeHash and ShapeEq read, and nothing else: the
// key NeverFits stores.
JobRequest ShapeOf(const JobRequest& req) {
  JobRequest shape;
  shape.replicas = req.replicas;
  shape.gpus = req.gpus;
  shape.gpu_milli = req.gpu_milli;
  shape.gpu_memory_bytes = req.gpu_memory_bytes;
  shape.gpu_model = req.gpu_model;
  shape.gpu_models = req.gpu_models;
  shape.gpu_vendor = req.gpu_vendor;
  shape.node_selector = req.node_selector;
  shape.cpu_milli = req.cpu_milli;
  shape.memory_bytes = req.memory_bytes;
  shape.topology = req.topology;
  return shape;
}

std::string State::Reason(int job) const {
  const JobState& j = jobs[job];
  const JobRequest& req = j.req;
  const Why& why = j.why;
  auto other_id = [&]() -> std::string {
    if (why.other >= 0 && why.other < static_cast<int>(jobs.size()) && jobs[why.other].seq == why.other_seq) {
      return jobs[why.other].req.id;
    }
    return "an earlier job";
  };
  auto node_name = [&](int n) { return n >= 0 ? nodes[n].info.name : std::string("?"); };
  switch (why.code) {
    case WhyCode::kNew: return "waiting for the next scheduling pass";
    case WhyCode::kBehind:
      return fmt::format(
          "waiting: queued behind {}, which cannot start yet (backfill is off, so the queue keeps its order)",
          other_id());
    case WhyCode::kReserved: break;  // the shortfall first, then the reservation
    case WhyCode::kBehindReservation:
      if (why.at_ms == kNever || req.runtime_estimate_ms == 0) {
        return fmt::format(
            "waiting: it fits only on GPUs reserved for {}; a runtime estimate short enough to end "
            "before that job starts would let it backfill",
            other_id());
      }
      return fmt::format(
          "waiting: it fits only on GPUs reserved for {}, which starts in about {}; its estimate of {} "
          "would delay it",
          other_id(), Duration(std::max<int64_t>(0, why.at_ms - why.pass_ms)), Duration(req.runtime_estimate_ms));
    case WhyCode::kAwaitingPreemption: {
      std::string ids;
      std::set<std::string> where;
      for (const std::string& v : j.victims) {
        ids += (ids.empty() ? "" : ", ") + v;
        int vi = FindJob(v);
        if (vi < 0) continue;
        for (const Held& h : jobs[vi].held) where.insert(nodes[h.node].info.name);
      }
      std::string on;
      for (const std::string& n : where) on += (on.empty() ? "" : ", ") + n;
      return fmt::format("waiting for {} preempted job{} to stop ({}) on node{} {}", j.victims.size(),
                         j.victims.size() == 1 ? "" : "s", ids, where.size() == 1 ? "" : "s", on);
    }
    case WhyCode::kQuota: {
      const TenantState& t = tenants[j.tenant];
      if (!t.info.max_gpus.empty() || t.info.max_gpu_memory_bytes >= 0 || t.info.max_cpu_milli >= 0) {
        std::string caps;
        for (const auto& [model, n] : t.info.max_gpus) {
          auto u = t.by_model.find(model);
          int64_t used = model == "*" ? t.milli : (u == t.by_model.end() ? 0 : u->second);
          caps += fmt::format("{}{} GPUs of {} (holds {})", caps.empty() ? "" : ", ", n,
                              model == "*" ? "any model" : "'" + model + "'", MilliGpus(used));
        }
        if (t.info.max_gpu_memory_bytes >= 0) {
          caps += fmt::format("{}{} bytes of GPU memory (holds {})", caps.empty() ? "" : ", ",
                              t.info.max_gpu_memory_bytes, t.mem);
        }
        if (t.info.max_cpu_milli >= 0) {
          caps += fmt::format("{}{} CPUs (holds {})", caps.empty() ? "" : ", ", FormatMilliGpu(t.info.max_cpu_milli),
                              FormatMilliGpu(t.cpu));
        }
        if (t.info.borrow_limit >= 0)
          caps += fmt::format(", borrowing {} beyond guarantees", Gpus(t.info.borrow_limit));
        return fmt::format("waiting: tenant '{}' is at its quota: {}", t.info.name, caps);
      }
      return fmt::format(
          "waiting: tenant '{}' would exceed its borrowing limit of {} beyond its guarantees "
          "(it already uses {} beyond them)",
          t.info.name, Gpus(t.info.borrow_limit), MilliGpus(Beyond(t)));
    }
    case WhyCode::kNoFit: break;
  }
  std::string shortfall = Shortfall(job);
  if (why.code != WhyCode::kReserved) return shortfall;
  if (why.at_ms == kNever) {
    return fmt::format(
        "{}; next in line: GPUs on node {} are reserved for it until running jobs without a runtime "
        "estimate end",
        shortfall, node_name(why.node));
  }
  if (why.at_ms <= why.pass_ms) {
    return fmt::format("{}; next in line: GPUs on node {} are reserved for it, free once the jobs stopping there end",
                       shortfall, node_name(why.node));
  }
  return fmt::format("{}; next in line: GPUs on node {} are reserved for it, expected free in about {}", shortfall,
                     node_name(why.node), Duration(why.at_ms - why.pass_ms));
}

std::string State::Shortfall(int job) const {
  const JobState& j = jobs[job];
  const JobRequest& req = j.req;
  const Why& why = j.why;
  auto node_name = [&](int n) { return n >= 0 ? nodes[n].info.name : std::string("?"); };
  if (req.gpus == 0) {
    if (auto never = NeverFits(req)) return "waiting: can never run on the cluster as it is now: " + *never;
    return fmt::format("waiting: needs {}; no ready node has that much CPU and host memory free", Describe(req));
  }
  // No place now: say what the best ready node offers.
  int best = 0;
  int best_node = -1;
  bool any_node = false;
  int promised = 0;               // free, but promised to jobs that preempted for them
  std::map<int, int> per_domain;  // replicas that fit now per switch or rack
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    const NodeState& n = nodes[ni];
    if (!NodeMatches(req, n)) continue;
    const NodeTopology& topo = topos[n.topo];
    for (const ClassSlot& slot : n.classes) {
      if (!ClassMatches(req, slot.cls)) continue;
      any_node = true;
      uint64_t usable = UsableWhole(job, n, slot.mask, why.pass_ms);
      promised += std::popcount(n.whole_free & n.healthy & slot.mask & n.nominated & ~usable);
      int have = 0;
      if (req.fractional()) {
        for (uint64_t m = slot.mask & n.healthy; m != 0; m &= m - 1) {
          int g = std::countr_zero(m);
          if (n.free_mem[g] >= req.gpu_memory_bytes) have = std::max<int>(have, n.free_milli[g]);
        }
      } else if (req.topology == Topology::kIsland) {
        have = topo.LargestIn(topo.islands, usable, nullptr);
      } else if (req.topology == Topology::kNuma) {
        have = topo.LargestIn(topo.numas, usable, nullptr);
      } else {
        have = std::popcount(usable);
      }
      if (req.replicas > 1) {
        int fit = static_cast<int>(std::min<int64_t>(
            have / req.gpus, HostReplicas(req, n.info.cpu_milli, n.free_cpu, n.info.memory_bytes, n.free_host_mem)));
        best += fit;  // replicas that fit now, over every node
        best_node = -1;
        int dom = req.topology == Topology::kSwitch ? n.switch_domain
                  : req.topology == Topology::kRack ? n.rack_domain
                                                    : -1;
        if (dom >= 0) per_domain[dom] += fit;
      } else if (have > best) {
        best = have;
        best_node = static_cast<int>(ni);
      }
    }
  }
  if (auto never = NeverFits(req)) return "waiting: can never run on the cluster as it is now: " + *never;
  if (!any_node) return fmt::format("waiting: no ready node has {}", Describe(req));
  std::string at = best_node >= 0 ? fmt::format(" (node {})", node_name(best_node)) : "";
  if (promised > 0) at += fmt::format("; {} more free are promised to jobs that preempted for them", Gpus(promised));
  if (req.fractional()) {
    return fmt::format("waiting: needs {}; the largest free share on a ready node is {} milli-GPU{}", Describe(req),
                       best, at);
  }
  if (req.replicas > 1 && (req.topology == Topology::kSwitch || req.topology == Topology::kRack)) {
    int most = 0;
    int where = -1;
    for (const auto& [d, count] : per_domain) {
      if (count > most) {
        most = count;
        where = d;
      }
    }
    return fmt::format("waiting: needs {} replicas x {}{}; the most that fit {} one {} now is {}{}", req.replicas,
                       Describe(req), Within(req.topology), req.topology == Topology::kSwitch ? "under" : "in",
                       TopologyName(req.topology), most,
                       where >= 0 ? fmt::format(" ({} {})", TopologyName(req.topology), domains[where].value) : "");
  }
  if (req.replicas > 1) {
    return fmt::format("waiting: needs {} replicas x {}{}; {} replica{} fit on the ready nodes now", req.replicas,
                       Describe(req), Within(req.topology), best, best == 1 ? "" : "s");
  }
  if (req.topology == Topology::kIsland) {
    return fmt::format("waiting: needs {} on one NVLink island; the largest free island has {}{}", Describe(req), best,
                       at);
  }
  if (req.topology == Topology::kNuma) {
    return fmt::format("waiting: needs {} on one NUMA node; the most free on one NUMA node is {}{}", Describe(req),
                       best, at);
  }
  return fmt::format("waiting: needs {} on one node; the most free on a ready node is {}{}", Describe(req), best, at);
}

std::optional<std::string> Scheduler::NeverFits(const JobRequest& req) const { return s_->NeverFits(req); }

namespace {

size_t HashShape(const JobRequest& r, bool host) {
  size_t h = 0;
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  std::hash<int64_t> num;
  std::hash<std::string> str;
  mix(num(r.replicas));
  mix(num(r.gpus));
  mix(num(r.gpu_milli));
  mix(num(r.gpu_memory_bytes));
  if (host) {
    mix(num(r.cpu_milli));
    mix(num(r.memory_bytes));
  }
  mix(num(static_cast<int64_t>(r.topology)));
  mix(str(r.gpu_vendor));
  mix(str(r.gpu_model));
  mix(num(static_cast<int64_t>(r.gpu_models.size())));
  for (const std::string& m : r.gpu_models) mix(str(m));
  mix(num(static_cast<int64_t>(r.node_selector.size())));
  for (const auto& [k, v] : r.node_selector) {
    mix(str(k));
    mix(str(v));
  }
  return h;
}

bool SameGpuShape(const JobRequest& a, const JobRequest& b) {
  return a.replicas == b.replicas && a.gpus == b.gpus && a.gpu_milli == b.gpu_milli &&
         a.gpu_memory_bytes == b.gpu_memory_bytes && a.topology == b.topology && a.gpu_vendor == b.gpu_vendor &&
         a.gpu_model == b.gpu_model && a.gpu_models == b.gpu_models && a.node_selector == b.node_selector;
}

}  // namespace

size_t ShapeHash::operator()(const JobRequest& r) const { return HashShape(r, true); }

bool ShapeEq::operator()(const JobRequest& a, const JobRequest& b) const {
  return SameGpuShape(a, b) && a.cpu_milli == b.cpu_milli && a.memory_bytes == b.memory_bytes;
}

size_t GpuShapeHash::operator()(const JobRequest& r) const { return HashShape(r, false); }

bool GpuShapeEq::operator()(const JobRequest& a, const JobRequest& b) const { return SameGpuShape(a, b); }

std::optional<std::string> State::NeverFits(const JobRequest& req) const {
  const State& s = *this;
  if (s.nodes.empty()) return std::string("the cluster has no nodes");
  // Tenant limits: cheap, and they change with SetTenant, so never cached.
  auto t = s.tenant_ids.find(req.tenant.empty() ? "default" : req.tenant);
  if (t != s.tenant_ids.end()) {
    const TenantInfo& info = s.tenants[t->second].info;
    if (info.borrow_limit >= 0) {
      int64_t most = int64_t{info.borrow_limit} * kWholeGpu;
      for (const auto& [model, gpus] : info.guaranteed_gpus) most += int64_t{gpus} * kWholeGpu;
      if (req.milli() > most) {
        return fmt::format(
            "tenant '{}' may use at most {} milli-GPU (guarantees plus a borrowing limit of {}), "
            "and the job needs {}",
            info.name, most, Gpus(info.borrow_limit), req.milli());
      }
    }
  }
  if (auto hit = never_fits.find(req); hit != never_fits.end()) return hit->second;
  std::optional<std::string> why = NeverFitsOnNodes(req);
  if (never_fits.size() >= kNeverFitsCacheMax) never_fits.clear();
  never_fits.emplace(ShapeOf(req), why);
  return why;
}

std::optional<std::string> State::NeverFitsOnNodes(const JobRequest& req) const {
  const State& s = *this;
  // Capacity of every node as if idle, drained and disconnected ones included.
  // Gangs bound to one switch or rack count replicas per domain; the scan
  // stops once the job fits (a reason needs the whole count, a fit does not).
  const bool per_domain_gang =
      req.replicas > 1 && (req.topology == Topology::kSwitch || req.topology == Topology::kRack);
  if (!per_domain_gang && req.replicas <= 0) return std::nullopt;  // nothing to place (not validated here)
  const Topology within =
      (req.topology == Topology::kIsland || req.topology == Topology::kNuma) ? req.topology : Topology::kBestEffort;
  std::vector<char> class_matches(s.classes.size());
  for (size_t c = 0; c < s.classes.size(); ++c) class_matches[c] = s.ClassMatches(req, static_cast<int>(c)) ? 1 : 0;
  ChooseMemo choose;
  int replicas = 0;
  int best = 0;
  std::vector<int> per_domain(per_domain_gang ? s.domains.size() : 0, 0);
  for (const NodeState& n : s.nodes) {
    bool selected = std::all_of(req.node_selector.begin(), req.node_selector.end(), [&](const auto& kv) {
      auto it = n.info.labels.find(kv.first);
      return it != n.info.labels.end() && it->second == kv.second;
    });
    if (!selected) continue;
    if ((n.info.cpu_milli > 0 && n.info.cpu_milli < req.cpu_milli) ||
        (n.info.memory_bytes > 0 && n.info.memory_bytes < req.memory_bytes)) {
      continue;
    }
    int here = 0;
    if (req.gpus == 0) here = kMaxGpusPerNode;  // host resources only
    for (const ClassSlot& slot : n.classes) {
      if (!class_matches[slot.cls]) continue;
      int count = std::popcount(slot.mask);
      best = std::max(best, count);
      if (req.fractional()) {
        here = std::max(here, kMaxGpusPerNode);  // a share fits any matching GPU
      } else if (choose.Fits(s.topos, n.topo, slot.mask, req.gpus, within)) {
        here = std::max(
            here, req.topology == Topology::kBestEffort || req.topology >= Topology::kSwitch ? count / req.gpus : 1);
      }
    }
    here = static_cast<int>(std::min<int64_t>(
        here, HostReplicas(req, n.info.cpu_milli, n.info.cpu_milli, n.info.memory_bytes, n.info.memory_bytes)));
    replicas += here;
    if (per_domain_gang) {
      int dom = req.topology == Topology::kSwitch ? n.switch_domain : n.rack_domain;
      if (dom < 0) continue;
      per_domain[dom] += here;
      if (per_domain[dom] >= req.replicas) return std::nullopt;
    } else if (replicas >= req.replicas) {
      return std::nullopt;
    }
  }
  if (per_domain_gang) {
    int most = 0;
    for (int count : per_domain) most = std::max(most, count);
    return fmt::format("no {} holds {} replicas x {} (the most is {})", TopologyName(req.topology), req.replicas,
                       Describe(req), most);
  }
  if (req.gpus == 0)
    return fmt::format("no node has {} milli-CPU and {} of host memory", req.cpu_milli, Bytes(req.memory_bytes));
  if (req.replicas > 1) {
    return fmt::format("the cluster holds at most {} replicas of {}, and the job needs {}", replicas, Describe(req),
                       req.replicas);
  }
  if (req.topology == Topology::kIsland || req.topology == Topology::kNuma) {
    return fmt::format("no node has {}{}", Describe(req), Within(req.topology));
  }
  return fmt::format("no node has {} (the most any node has is {})", Describe(req), best);
}

}  // namespace drover::sched
