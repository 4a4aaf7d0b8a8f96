#include "drover/sim/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace drover::sim {

// ---------------------------------------------------------------- statistics --

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size()));
  size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(i, values.size() - 1)];
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = Percentile(values, 50);
  d.p95 = Percentile(values, 95);
  d.p99 = Percentile(values, 99);
  d.max = values.back();
  return d;
}

double JainIndex(const std::vector<double>& x) {
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  if (x.empty() || sq == 0) return 1;
  return sum * sum / (static_cast<double>(x.size()) * sq);
}

void TimeWeighted::Set(int64_t t_ms, double value) {
  if (!started_) {
    started_ = true;
    start_ = last_t_ = t_ms;
  }
  if (t_ms > last_t_) {
    area_ += last_v_ * static_cast<double>(t_ms - last_t_);
    last_t_ = t_ms;
  }
  last_v_ = value;
}

double TimeWeighted::Mean(int64_t end_ms) const {
  if (!started_) return 0;
  if (end_ms <= start_) return last_v_;
  double area = area_ + last_v_ * static_cast<double>(std::max<int64_t>(end_ms - last_t_, 0));
  return area / static_cast<double>(end_ms - start_);
}

// ------------------------------------------------------------- fragmentation --

std::vector<TaskClass> TargetWorkload(const std::vector<SimJob>& jobs) {
  using Key = std::tuple<int, int, int64_t, int64_t, int64_t, std::vector<std::string>, std::string>;
  std::map<Key, int64_t> counts;
  for (const SimJob& j : jobs) {
    const sched::JobRequest& r = j.req;
    std::vector<std::string> models = r.gpu_models;
    if (!r.gpu_model.empty()) models.push_back(r.gpu_model);
    std::sort(models.begin(), models.end());
    models.erase(std::unique(models.begin(), models.end()), models.end());
    int milli = r.gpus == 0 ? 0 : r.gpu_milli;
    counts[Key{r.gpus, milli, r.gpu_memory_bytes, r.cpu_milli, r.memory_bytes, std::move(models), r.gpu_vendor}] +=
        r.replicas;
  }
  std::vector<TaskClass> out;
  out.reserve(counts.size());
  for (auto& [k, n] : counts) {
    TaskClass c;
    std::tie(c.gpus, c.gpu_milli, c.gpu_memory_bytes, c.cpu_milli, c.memory_bytes, c.models, c.vendor) = k;
    c.count = n;
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

bool Usable(const sched::GpuInfo& g, const TaskClass& t) {
  if (!g.healthy) return false;
  if (!t.vendor.empty() && g.vendor != t.vendor) return false;
  return t.models.empty() || std::binary_search(t.models.begin(), t.models.end(), g.model);
}

}  // namespace

int64_t NodeFragment(const sched::NodeInfo& node, const NodeFree& free, const TaskClass& task) {
  int64_t all = 0;
  for (int m : free.gpu_milli) all += m;
  if (all == 0) return 0;
  bool host_fits = (node.cpu_milli == 0 || free.cpu_milli >= task.cpu_milli) &&
                   (node.memory_bytes == 0 || free.memory_bytes >= task.memory_bytes);
  if (!host_fits) return all;
  if (task.gpus == 0) return 0;
  // The share of one GPU this task needs before it can use that GPU at all.
  const bool share = task.gpu_milli < sched::kWholeGpu;
  int need = share ? task.gpu_milli : sched::kWholeGpu;
  int usable_gpus = 0;
  int64_t stranded = 0;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const sched::GpuInfo& g = node.gpus[i];
    int f = free.gpu_milli[i];
    bool memory_ok = share ? free.gpu_memory[i] >= task.gpu_memory_bytes : g.memory_bytes >= task.gpu_memory_bytes;
    if (Usable(g, task) && memory_ok && f >= need) {
      ++usable_gpus;
    } else {
      stranded += f;
    }
  }
  bool fits = share ? usable_gpus >= 1 : usable_gpus >= task.gpus;
  return fits ? stranded : all;
}

ClusterUsage::ClusterUsage(const Cluster& cluster, std::vector<TaskClass> target)
    : infos_(cluster.nodes), target_(std::move(target)) {
  for (const TaskClass& c : target_) target_count_ += c.count;
  free_.resize(infos_.size());
  frag_.assign(infos_.size(), 0);
  for (size_t i = 0; i < infos_.size(); ++i) {
    const sched::NodeInfo& n = infos_[i];
    index_[n.name] = i;
    NodeFree& f = free_[i];
    for (const sched::GpuInfo& g : n.gpus) {
      f.gpu_milli.push_back(g.healthy ? sched::kWholeGpu : 0);
      f.gpu_memory.push_back(g.healthy ? g.memory_bytes : 0);
      total_milli_ += sched::kWholeGpu;
    }
    f.cpu_milli = n.cpu_milli;
    f.memory_bytes = n.memory_bytes;
    Refresh(i);
  }
}

void ClusterUsage::Refresh(size_t node) {
  int64_t v = 0;
  for (const TaskClass& c : target_) v += c.count * NodeFragment(infos_[node], free_[node], c);
  frag_sum_ += v - frag_[node];
  frag_[node] = v;
}

void ClusterUsage::Apply(const sched::JobRequest& req, const sched::Binding& binding, int sign) {
  for (const sched::Placement& p : binding.replicas) {
    auto it = index_.find(p.node);
    if (it == index_.end()) continue;  // the engine's --check reports it
    size_t n = it->second;
    NodeFree& f = free_[n];
    for (int g : p.gpu_indices) {
      if (g < 0 || static_cast<size_t>(g) >= f.gpu_milli.size()) continue;
      bool whole = p.gpu_milli >= sched::kWholeGpu;
      int64_t mem = whole ? infos_[n].gpus[static_cast<size_t>(g)].memory_bytes : p.gpu_memory_bytes;
      f.gpu_milli[static_cast<size_t>(g)] -= sign * p.gpu_milli;
      f.gpu_memory[static_cast<size_t>(g)] -= sign * mem;
      allocated_milli_ += sign * p.gpu_milli;
    }
    f.cpu_milli -= sign * req.cpu_milli;
    f.memory_bytes -= sign * req.memory_bytes;
    Refresh(n);
  }
}

double ClusterUsage::fragmentation_pct() const {
  if (target_count_ == 0 || total_milli_ == 0) return 0;
  return 100.0 * static_cast<double>(frag_sum_) / static_cast<double>(target_count_) /
         static_cast<double>(total_milli_);
}

uint64_t ClusterUsage::HeldMask(const std::string& node) const {
  auto it = index_.find(node);
  if (it == index_.end()) return 0;
  uint64_t mask = 0;
  const NodeFree& f = free_[it->second];
  const sched::NodeInfo& info = infos_[it->second];
  for (size_t g = 0; g < f.gpu_milli.size(); ++g) {
    int capacity = info.gpus[g].healthy ? sched::kWholeGpu : 0;
    if (f.gpu_milli[g] < capacity) mask |= uint64_t{1} << g;
  }
  return mask;
}

// ------------------------------------------------------------------ recording --

namespace {

int64_t Milli(const sched::Binding& b) {
  int64_t milli = 0;
  for (const sched::Placement& p : b.replicas) milli += static_cast<int64_t>(p.gpu_indices.size()) * p.gpu_milli;
  return milli;
}

}  // namespace

Recorder::Recorder(const Cluster& cluster, const std::vector<SimJob>& jobs, Mode mode)
    : jobs_(jobs), mode_(mode), usage_(cluster, TargetWorkload(jobs)), records_(jobs.size()) {
  for (const sched::TenantInfo& t : cluster.tenants) tenant_info_[t.name] = t;
  // Packing has no time: every job arrives (and binds or fails) at 0.
  for (size_t i = 0; i < jobs.size(); ++i) records_[i].submit_ms = mode == Mode::kPacking ? 0 : jobs[i].submit_ms;
}

void Recorder::Arrived(size_t job) {
  records_[job].arrived = true;
  arrived_milli_ += jobs_[job].req.gpus == 0 ? 0 : jobs_[job].req.milli();
  ++events_;
}

void Recorder::Rejected(size_t job, int64_t now_ms) {
  records_[job].end = mode_ == Mode::kPacking ? JobEnd::kFailed : JobEnd::kRejected;
  records_[job].end_ms = now_ms;
}

void Recorder::Started(size_t job, const sched::Binding& binding, int64_t now_ms) {
  JobRecord& r = records_[job];
  if (r.first_start_ms < 0) r.first_start_ms = now_ms;
  usage_.Apply(jobs_[job].req, binding, +1);
  tenant_milli_[jobs_[job].req.tenant] += Milli(binding);
  live_[job] = binding;
}

void Recorder::Stopped(size_t job, int64_t now_ms, JobEnd end) {
  JobRecord& r = records_[job];
  if (auto it = live_.find(job); it != live_.end()) {
    usage_.Apply(jobs_[job].req, it->second, -1);
    tenant_milli_[jobs_[job].req.tenant] -= Milli(it->second);
    live_.erase(it);
  }
  r.end = end;
  if (end != JobEnd::kNone) r.end_ms = now_ms;
}

void Recorder::Preempted(size_t job) { ++records_[job].preemptions; }

void Recorder::Sample(int64_t now_ms, int64_t t, int64_t pending, int64_t running) {
  sim::Sample s;
  s.t = t;
  double total = static_cast<double>(usage_.total_milli());
  s.arrived_pct = total > 0 ? 100.0 * static_cast<double>(arrived_milli_) / total : 0;
  s.allocation_pct = total > 0 ? 100.0 * static_cast<double>(usage_.allocated_milli()) / total : 0;
  s.fragmentation_pct = usage_.fragmentation_pct();
  s.pending = pending;
  s.running = running;
  samples_.push_back(s);
  allocation_.Set(now_ms, s.allocation_pct);
  fragmentation_.Set(now_ms, s.fragmentation_pct);
  peak_allocation_ = std::max(peak_allocation_, s.allocation_pct);
  for (auto& [tenant, milli] : tenant_milli_) {
    tenant_share_[tenant].Set(now_ms, total > 0 ? 100.0 * static_cast<double>(milli) / total : 0);
  }
}

Summary Recorder::Finish(int64_t end_ms, double wall_s) const {
  Summary s;
  s.mode = mode_;
  s.end_ms = end_ms;
  s.jobs = static_cast<int64_t>(jobs_.size());
  double total = static_cast<double>(usage_.total_milli());
  std::vector<double> jct, delay;
  int64_t failed_milli = 0;
  int64_t first_submit = INT64_MAX, last_end = INT64_MIN;
  struct TenantCount {
    int64_t jobs = 0, completed = 0;
  };
  std::map<std::string, TenantCount> per_tenant;
  for (size_t i = 0; i < jobs_.size(); ++i) {
    const JobRecord& r = records_[i];
    if (!r.arrived) continue;
    ++s.arrived;
    TenantCount& tc = per_tenant[jobs_[i].req.tenant];
    ++tc.jobs;
    first_submit = std::min(first_submit, r.submit_ms);
    s.preemptions += r.preemptions;
    if (r.preemptions > 0) ++s.preempted_jobs;
    if (r.first_start_ms >= 0 && mode_ == Mode::kTime)
      delay.push_back(static_cast<double>(r.first_start_ms - r.submit_ms) / 1000.0);
    switch (r.end) {
      case JobEnd::kCompleted:
        ++s.completed;
        ++tc.completed;
        jct.push_back(static_cast<double>(r.end_ms - r.submit_ms) / 1000.0);
        last_end = std::max(last_end, r.end_ms);
        break;
      case JobEnd::kRejected: ++s.rejected; break;
      case JobEnd::kFailed:
        ++s.failed;
        failed_milli += jobs_[i].req.gpus == 0 ? 0 : jobs_[i].req.milli();
        break;
      case JobEnd::kNone: break;
    }
  }
  if (!samples_.empty()) {
    s.pending_at_end = samples_.back().pending;
    s.running_at_end = samples_.back().running;
    s.arrived_demand_pct = samples_.back().arrived_pct;
    s.allocation_final_pct = samples_.back().allocation_pct;
    s.fragmentation_final_pct = samples_.back().fragmentation_pct;
  }
  s.failed_demand_pct = total > 0 ? 100.0 * static_cast<double>(failed_milli) / total : 0;
  s.jct_s = Summarize(std::move(jct));
  s.queue_delay_s = Summarize(std::move(delay));
  if (last_end != INT64_MIN && first_submit != INT64_MAX)
    s.makespan_s = static_cast<double>(last_end - first_submit) / 1000.0;
  s.allocation_peak_pct = peak_allocation_;
  if (mode_ == Mode::kTime) {
    s.allocation_mean_pct = allocation_.Mean(end_ms);
    s.fragmentation_mean_pct = fragmentation_.Mean(end_ms);
  } else {
    // No time: the mean over arrivals (each arrival one step).
    double a = 0, f = 0;
    for (const sim::Sample& x : samples_) {
      a += x.allocation_pct;
      f += x.fragmentation_pct;
    }
    double n = samples_.empty() ? 1 : static_cast<double>(samples_.size());
    s.allocation_mean_pct = a / n;
    s.fragmentation_mean_pct = f / n;
    // Arrived demand first reaching p% -> allocation then. The state before
    // the first arrival is 0% demand, 0% allocated.
    s.allocation_by_demand[0] = 0;
    int next = 1;
    for (const sim::Sample& x : samples_) {
      while (next <= 130 && x.arrived_pct + 1e-9 >= next) s.allocation_by_demand[next++] = x.allocation_pct;
    }
  }
  // Tenants: every configured one and every one with jobs.
  double weight_sum = 0;
  std::map<std::string, TenantSummary> tenants;
  for (const auto& [name, info] : tenant_info_) tenants[name].weight = info.weight;
  for (const auto& [name, tc] : per_tenant) {
    TenantSummary& t = tenants[name];
    t.jobs = tc.jobs;
    t.completed = tc.completed;
  }
  for (auto& [name, t] : tenants) {
    t.name = name;
    if (auto it = tenant_info_.find(name); it != tenant_info_.end()) {
      for (const auto& [model, n] : it->second.guaranteed_gpus) t.guaranteed_gpus += n;
    }
    if (t.jobs > 0) weight_sum += t.weight;
    if (auto it = tenant_share_.find(name); it != tenant_share_.end()) {
      t.share_pct = it->second.Mean(end_ms);  // packing: end_ms is 0, so the final share
    }
  }
  std::vector<double> normalized;
  for (auto& [name, t] : tenants) {
    if (t.jobs > 0 && weight_sum > 0) {
      t.entitlement_pct = 100.0 * t.weight / weight_sum;
      normalized.push_back(t.share_pct / t.entitlement_pct);
    }
    s.tenants.push_back(t);
  }
  s.jain_index = JainIndex(normalized);
  std::vector<double> us;
  us.reserve(latency_ns_.size());
  for (int64_t ns : latency_ns_) us.push_back(static_cast<double>(ns) / 1000.0);
  s.decision_us = Summarize(std::move(us));
  s.passes = static_cast<int64_t>(latency_ns_.size());
  s.events = events_;
  s.wall_s = wall_s;
  s.events_per_s = wall_s > 0 ? static_cast<double>(events_) / wall_s : 0;
  return s;
}

}  // namespace drover::sim
