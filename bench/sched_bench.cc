// Scheduling decision latency and throughput on one core.
//
//   ./build/bench/sched_bench
//   ./build/bench/sched_bench --benchmark_format=json      (every figure below)
//   ./build/bench/sched_bench --benchmark_filter='BM_Place/gang64/.*'
//   ./build/bench/sched_bench --benchmark_filter='BM_NeverFits/.*'
//
// BM_Place/<shape>/<gpus>/<percent full>: one decision is Enqueue(job) +
// Schedule() on a cluster of `gpus` H100s (8 per node, one NVLink island per
// node) that running jobs already fill to `percent`; the job must bind. The
// job is removed again outside the timed region, so every decision sees the
// same cluster. Shapes:
//   single    1 whole GPU
//   fraction  250 milli-GPU and 10 GiB of one shared GPU
//   island8   8 GPUs on one NVLink island (Topology::kIsland)
//   gang64    8 replicas x 8 GPUs on 8 nodes, best effort (prefers one switch)
// BM_Place/<shape>/512/<percent>/cold: the same, but every decision starts
// with cold caches: before each one, outside the timed region, the loop
// writes a 64 MiB buffer (one byte per 64-byte line), more than this
// machine's caches hold, as a server's control loop does other work
// (RPCs, the store, the agents' reports) between two passes and other
// processes use the shared caches. The warm case keeps the scheduler's
// state in cache from one decision to the next. Each cold case runs for
// 3 s (the sweep takes milliseconds) to have a few hundred decisions.
// BM_FullPass/10000: one Schedule() over 10,000 pending jobs of mixed shapes
// on 16,384 GPUs 95 % full; most of them cannot be placed. The jobs a pass
// binds are removed and replaced by new pending ones outside the timed
// region, so every pass sees 10,000 pending jobs on the same cluster.
//
// BM_NeverFits/<shape>/<cache>: one Scheduler::NeverFits, the admission
// check the simulator makes on every arrival and the server on every Submit,
// on 16,384 nodes x 8 H100s (131,072 GPUs, as docs/eval/cluster-131072.yaml).
// NeverFits judges the cluster as if idle, so the cluster is idle. Shapes:
//   single    1 whole GPU (fits)
//   island8   8 GPUs on one NVLink island (fits)
//   never16   16 GPUs per replica (no node has them: never fits)
//   gang17sw  17 replicas x 8 GPUs under one switch of 16 nodes (never fits)
// warm asks the same request every iteration (repeated arrivals of one
// shape); cold asks a shape not seen before every iteration (its cpu_milli
// differs; the nodes track no CPU, so the verdict does not), so every call
// is a miss: the scan of the nodes plus remembering its answer. Time is
// Google Benchmark's own, per call.
//
// BM_Worst/<case>/<gpus>: the adversarial cases of issue 17 (item 3) on the
// 95 % cluster of BM_Place single, placed again in a scheduler of the case's
// configuration (see BM_Worst): quota10k (a tenant at its quota with 10,000
// pending 1-GPU jobs ahead of the measured 1-GPU job), selector1pct (the
// 1-GPU job selects a label on 1 % of the nodes; selector1pct_full: once
// every GPU of those nodes is taken, so it cannot start), blocked_head/backfill and
// blocked_head/strict (a 16 x 8 GPU gang under one switch that cannot start
// ahead of it, EASY backfill on and off), gang_preempt_switch (an 8 x 8 GPU
// gang under one switch, priority 10, on a cluster of preemptible jobs: it
// preempts the jobs of 8 nodes under one switch, the least work lost there),
// hostfit10k (nodes with 64 cores, 8 per GPU held: 10,000 pending 1-GPU jobs
// asking 63-64 cores, which no node with a free GPU has left, ahead of the
// measured 1-GPU job that asks none), hostfit_walk (the same cluster; the
// measured 1-GPU job asks 40 cores, which only nodes with 5 or more free
// GPUs have: the fuller nodes placement walks first all refuse it),
// hostfit_share (the same for a 250 milli-GPU share: every partly shared
// GPU's node refuses it, then a whole GPU of a node with the cores).
//
// Counters (per decision, or per pass for BM_FullPass): p50_ns, p99_ns,
// p999_ns, max_ns (nearest rank over every iteration) and items_per_second
// (decisions, or for BM_FullPass jobs passed over, per second of measured
// time). Each decision is timed with steady_clock around Enqueue + Schedule
// only; Google Benchmark's own Time column also counts the untimed Remove and
// bookkeeping, so read the counters. fill_pct is how full the cluster really
// is, idle_nodes how many of its nodes hold nothing. Iteration counts are
// Google Benchmark's own (about 0.5 s of loop per case;
// --benchmark_min_time=0.1 for a quicker run): a fixed ->Iterations() or
// ->UseManualTime() would append "/iterations:N" and "/manual_time" to the
// names.
//
// The fill: running jobs of a realistic mix (1, 2, 4 and 8 whole GPUs and
// 250/500 milli-GPU shares, no gangs) placed by the scheduler itself up to
// 10 points above the target (at most the whole cluster), three rounds of
// churn (a third of the jobs end, new ones take their place), then random
// jobs end until the target is reached. Ending on departures leaves the free
// GPUs scattered over partly used nodes as on a live cluster, not only on
// idle nodes (binpack would refill every hole first). A seeded Rng per
// cluster makes every run place the same jobs.
//
// Room for the measured job: the fill keeps `reserved` whole nodes of one
// switch unschedulable and opens them afterwards: 1 node for single,
// fraction and island8 (a 95 % fill with churn may leave no free island, and
// one free node changes nothing for the small shapes, which binpack onto
// partly used GPUs first), 8 nodes for gang64. The fill percentage still
// applies to the whole cluster, except where the reservation does not leave
// that much room: gang64 on 1,024 GPUs at 95 % needs 64 free GPUs but 95 %
// leaves only 51, so that case runs with the other 960 GPUs as full as the
// fill gets them (fill_pct ~93.7) rather than being skipped.
//
// Clusters are built lazily and cached per (gpus, percent, reserved nodes);
// the cache keeps only the current (gpus, percent), since the cases run in
// that order and the 131,072-GPU clusters are large.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "drover/common/rng.h"
#include "drover/sched/scheduler.h"
#include "drover/sim/live.h"

namespace drover::sched {
namespace {

constexpr int kGpusPerNode = 8;
constexpr int kNodesPerSwitch = 16;
constexpr int kNodesPerRack = 64;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kStartMs = 1'700'000'000'000;  // any epoch; only differences matter
constexpr size_t kFillBatch = 1024;              // jobs per fill pass
constexpr int kChurnRounds = 3;
constexpr int kOverfillPercent = 10;  // of the cluster, before the last departures

// One node of 8 H100 80GB, one NVLink island (every pair of GPUs joined by
// the fabric), two NUMA halves, under the given switch and rack labels.
NodeInfo H100Node(std::string name, std::string switch_label, std::string rack_label) {
  NodeInfo node;
  node.name = std::move(name);
  for (int g = 0; g < kGpusPerNode; ++g) {
    node.gpus.push_back(GpuInfo{g, "nvidia", "H100 80GB", 80 * kGiB, true, g < kGpusPerNode / 2 ? 0 : 1});
  }
  node.links.assign(kGpusPerNode * kGpusPerNode, Link::kFabric);
  node.labels["switch"] = std::move(switch_label);
  node.labels["rack"] = std::move(rack_label);
  node.schedulable = true;
  return node;
}

// Label "pool" takes 100 values, each on 1 % of the nodes (BM_Worst/selector1pct).
constexpr int kPools = 100;

NodeInfo MakeNode(int n) {
  NodeInfo node = H100Node("node-" + std::to_string(n), "s-" + std::to_string(n / kNodesPerSwitch),
                           "r-" + std::to_string(n / kNodesPerRack));
  node.labels["pool"] = "pool-" + std::to_string(n % kPools);
  return node;
}

// Milli-GPUs a binding holds.
int64_t BoundMilli(const Binding& b) {
  int64_t milli = 0;
  for (const Placement& p : b.replicas) milli += static_cast<int64_t>(p.gpu_indices.size()) * p.gpu_milli;
  return milli;
}

// A cluster filled with running jobs, and the time it has reached.
struct Cluster {
  Scheduler sched;
  int64_t now_ms = kStartMs;
  int64_t total_milli = 0;
  int64_t used_milli = 0;
  struct Running {
    std::string id;
    int64_t milli;
  };
  // Every running job's request and binding (BM_Worst rebuilds the cluster
  // in a scheduler of another configuration from them).
  std::unordered_map<std::string, std::pair<JobRequest, Binding>> bound;
  std::vector<Running> running;
  int64_t next_serial = 0;
  int idle_nodes = 0;  // nodes with no GPU held: how fragmented the fill is
  std::string error;   // non-empty when the fill itself failed

  double fill_pct() const { return 100.0 * static_cast<double>(used_milli) / static_cast<double>(total_milli); }
};

// One running job of the fill mix, shrunk to at most `max_milli`; gpus == 0
// when not even the smallest share fits. `small_only` restricts the mix to
// 1 GPU and shares, to squeeze into the last free GPUs.
JobRequest FillJob(Rng& rng, int64_t max_milli, bool small_only, int64_t serial) {
  JobRequest j;
  j.id = "fill-" + std::to_string(serial);
  j.tenant = "t-" + std::to_string(rng.Uniform(0, 7));
  j.runtime_estimate_ms = rng.Uniform(10, 24 * 60) * 60'000;
  const double r = rng.UniformReal();
  j.gpus = small_only ? 1 : r < 0.50 ? 1 : r < 0.65 ? 2 : r < 0.80 ? 4 : 8;
  if (r < 0.15 || (small_only && r < 0.5)) {
    j.gpu_milli = rng.Bernoulli(0.5) ? 250 : 500;
  }
  while (j.gpus > 1 && j.milli() > max_milli) j.gpus /= 2;
  if (j.milli() > max_milli) j.gpu_milli = 250;
  if (j.milli() > max_milli) j.gpus = 0;
  if (j.fractional()) j.gpu_memory_bytes = j.gpu_milli / 25 * kGiB;  // 250 -> 10 GiB, 500 -> 20 GiB
  return j;
}

// Places fill jobs through the scheduler until `target_milli` is held or
// nothing more fits; jobs left pending by a pass are withdrawn.
void GrowTo(Cluster& c, Rng& rng, int64_t target_milli) {
  int stalls = 0;
  while (c.error.empty() && stalls < 3 && target_milli - c.used_milli >= 250) {
    const int64_t room = target_milli - c.used_milli;
    std::vector<std::string> batch;
    std::unordered_map<std::string, JobRequest> requests;
    int64_t batch_milli = 0;
    while (batch.size() < kFillBatch && room - batch_milli >= 250) {
      JobRequest j = FillJob(rng, room - batch_milli, stalls > 0, c.next_serial++);
      if (j.gpus == 0) break;
      if (Status st = c.sched.Enqueue(j, c.now_ms); !st.ok()) {
        c.error = "fill enqueue: " + st.ToString();
        return;
      }
      batch_milli += j.milli();
      batch.push_back(j.id);
      requests.emplace(j.id, j);
    }
    const Decisions d = c.sched.Schedule(c.now_ms);
    for (const Binding& b : d.bindings) {
      c.running.push_back({b.job_id, BoundMilli(b)});
      c.used_milli += c.running.back().milli;
      c.bound.emplace(b.job_id, std::make_pair(requests[b.job_id], b));
    }
    if (!d.preemptions.empty()) c.error = "fill preempted a job; fill jobs are not preemptible";
    for (const std::string& id : batch) {
      if (c.sched.IsPending(id)) c.sched.Remove(id, c.now_ms);
    }
    stalls = d.bindings.empty() ? stalls + 1 : 0;
    c.now_ms += 1000;
  }
}

// Ends running job `i` (it finished).
void EndJob(Cluster& c, size_t i) {
  c.sched.Remove(c.running[i].id, c.now_ms);
  c.bound.erase(c.running[i].id);
  c.used_milli -= c.running[i].milli;
  c.running[i] = std::move(c.running.back());
  c.running.pop_back();
}

std::unique_ptr<Cluster> BuildCluster(int gpus, int percent, int reserved_nodes) {
  auto c = std::make_unique<Cluster>();
  const int nodes = gpus / kGpusPerNode;
  Rng rng(static_cast<uint64_t>(gpus) * 1'000'003 + static_cast<uint64_t>(percent) * 101 +
          static_cast<uint64_t>(reserved_nodes));
  for (int n = 0; n < nodes; ++n) {
    if (Status st = c->sched.UpsertNode(MakeNode(n)); !st.ok()) {
      c->error = "upsert node: " + st.ToString();
      return c;
    }
  }
  // The last nodes share the last switch (reserved_nodes <= kNodesPerSwitch).
  for (int n = nodes - reserved_nodes; n < nodes; ++n) c->sched.SetSchedulable(MakeNode(n).name, false);

  c->total_milli = int64_t{gpus} * kWholeGpu;
  const int64_t open_milli = int64_t{nodes - reserved_nodes} * kGpusPerNode * kWholeGpu;
  const int64_t target = std::min(c->total_milli * percent / 100, open_milli);
  const int64_t high = std::min(target + c->total_milli * kOverfillPercent / 100, open_milli);
  const auto random_job = [&] {
    return static_cast<size_t>(rng.Uniform(0, static_cast<int64_t>(c->running.size()) - 1));
  };
  GrowTo(*c, rng, high);
  for (int round = 0; round < kChurnRounds && c->error.empty(); ++round) {
    const size_t ending = c->running.size() / 3;
    for (size_t k = 0; k < ending; ++k) EndJob(*c, random_job());
    c->now_ms += 60'000;
    GrowTo(*c, rng, high);
  }
  // Departures last: binpack refills holes first, so a fill that ended on
  // arrivals would leave all its free GPUs on idle nodes. Jobs too big for
  // what is left above the target are passed over (64 times at most).
  for (int skips = 0; c->error.empty() && c->used_milli > target && !c->running.empty();) {
    const size_t i = random_job();
    if (c->used_milli - c->running[i].milli < target && skips++ < 64) continue;
    EndJob(*c, i);
    skips = 0;
  }
  for (int n = nodes - reserved_nodes; n < nodes; ++n) c->sched.SetSchedulable(MakeNode(n).name, true);
  for (int n = 0; n < nodes; ++n) c->idle_nodes += c->sched.HeldMask(MakeNode(n).name) == 0 ? 1 : 0;
  if (c->error.empty() && c->sched.pending() != 0) c->error = "fill left jobs pending";
  return c;
}

// Clusters of the current (gpus, percent), by reserved nodes.
Cluster& GetCluster(int gpus, int percent, int reserved_nodes) {
  static std::map<std::tuple<int, int, int>, std::unique_ptr<Cluster>> cache;
  for (auto it = cache.begin(); it != cache.end();) {
    const auto& [g, p, r] = it->first;
    it = (g != gpus || p != percent) ? cache.erase(it) : std::next(it);
  }
  auto& slot = cache[{gpus, percent, reserved_nodes}];
  if (!slot) slot = BuildCluster(gpus, percent, reserved_nodes);
  return *slot;
}

// The nearest-rank `q` quantile of non-empty, sorted samples.
double Rank(const std::vector<int64_t>& sorted, double q) {
  const auto n = static_cast<double>(sorted.size());
  const auto i = static_cast<size_t>(std::max(1.0, std::ceil(q * n))) - 1;
  return static_cast<double>(sorted[std::min(i, sorted.size() - 1)]);
}

// Sets p50_ns, p99_ns, p999_ns, max_ns and items_per_second from samples
// of `items_per_sample` items each; sorts them (callers may read more
// quantiles with Rank after it).
void Report(benchmark::State& state, std::vector<int64_t>& samples_ns, double items_per_sample) {
  if (samples_ns.empty()) return;
  std::sort(samples_ns.begin(), samples_ns.end());
  const auto rank = [&](double q) { return Rank(samples_ns, q); };
  double total_ns = 0;
  for (int64_t s : samples_ns) total_ns += static_cast<double>(s);
  state.counters["p50_ns"] = rank(0.50);
  state.counters["p99_ns"] = rank(0.99);
  state.counters["p999_ns"] = rank(0.999);
  state.counters["max_ns"] = static_cast<double>(samples_ns.back());
  state.counters["items_per_second"] =
      benchmark::Counter(items_per_sample * static_cast<double>(samples_ns.size()) / (total_ns * 1e-9));
}

int64_t ElapsedNs(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
}

struct Shape {
  const char* name;
  int reserved_nodes;
  JobRequest job;  // id set per iteration
};

std::vector<Shape> Shapes() {
  JobRequest single;
  single.gpus = 1;
  JobRequest fraction;
  fraction.gpu_milli = 250;
  fraction.gpu_memory_bytes = 10 * kGiB;
  JobRequest island8;
  island8.gpus = 8;
  island8.topology = Topology::kIsland;
  JobRequest gang64;
  gang64.replicas = 8;
  gang64.gpus = 8;
  return {{"single", 1, single}, {"fraction", 1, fraction}, {"island8", 1, island8}, {"gang64", 8, gang64}};
}

// Written between decisions by the cold variants: larger than L2 and L3.
constexpr size_t kEvictBytes = 64 << 20;

void BM_Place(benchmark::State& state, const Shape& shape, int gpus, int percent, bool cold) {
  Cluster& c = GetCluster(gpus, percent, shape.reserved_nodes);
  if (!c.error.empty()) {
    state.SkipWithError(c.error.c_str());
    return;
  }
  const auto n = static_cast<size_t>(state.max_iterations);
  std::vector<std::string> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) ids.push_back("m-" + std::to_string(i));  // short: no heap in the copy
  std::vector<int64_t> samples;
  samples.reserve(n);
  JobRequest job = shape.job;
  std::string error;
  std::vector<char> evict(cold ? kEvictBytes : 0);
  size_t i = 0;
  for (auto _ : state) {
    job.id = ids[i++];
    for (size_t b = 0; b < evict.size(); b += 64) evict[b] = static_cast<char>(b + i);
    benchmark::ClobberMemory();
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = c.sched.Enqueue(job, c.now_ms);
    const Decisions d = c.sched.Schedule(c.now_ms);
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(ElapsedNs(t0, t1));
    if (!st.ok()) {
      error = "enqueue: " + st.ToString();
    } else if (d.bindings.size() != 1 || d.bindings[0].job_id != job.id || !d.preemptions.empty()) {
      error = "job '" + job.id + "' did not bind: " + c.sched.PendingReason(job.id);
    }
    c.sched.Remove(job.id, c.now_ms);
    ++c.now_ms;
    if (!error.empty()) {
      state.SkipWithError(error.c_str());
      break;
    }
  }
  Report(state, samples, 1.0);
  state.counters["fill_pct"] = c.fill_pct();
  state.counters["idle_nodes"] = c.idle_nodes;
}

// The pending mix of the full pass: mostly shapes that a 95 % full cluster
// cannot take (whole nodes, gangs), some that it can.
JobRequest PendingJob(Rng& rng, int64_t serial) {
  JobRequest j;
  j.id = "p-" + std::to_string(serial);
  j.tenant = "t-" + std::to_string(rng.Uniform(0, 7));
  j.priority = static_cast<int>(rng.Uniform(0, 3));
  j.runtime_estimate_ms = rng.Uniform(10, 24 * 60) * 60'000;
  const double r = rng.UniformReal();
  if (r < 0.10) {
    j.gpu_milli = 250;
    j.gpu_memory_bytes = 10 * kGiB;
  } else if (r < 0.30) {
    j.gpus = 1;
  } else if (r < 0.40) {
    j.gpus = 2;
  } else if (r < 0.55) {
    j.gpus = 4;
  } else if (r < 0.80) {
    j.gpus = 8;
    j.topology = rng.Bernoulli(0.5) ? Topology::kIsland : Topology::kBestEffort;
  } else {
    j.gpus = 8;
    j.replicas = static_cast<int>(rng.Uniform(2, 8));
  }
  return j;
}

void BM_FullPass(benchmark::State& state, int gpus, int percent, int pending) {
  Cluster& c = GetCluster(gpus, percent, 0);
  if (!c.error.empty()) {
    state.SkipWithError(c.error.c_str());
    return;
  }
  Rng rng(20'000 + static_cast<uint64_t>(pending));
  std::unordered_map<std::string, JobRequest> queued;
  int64_t serial = 0;
  std::string error;
  const auto enqueue_one = [&](JobRequest j) {
    if (Status st = c.sched.Enqueue(j, c.now_ms); !st.ok()) error = "enqueue: " + st.ToString();
    queued.emplace(j.id, std::move(j));
  };
  for (int k = 0; k < pending; ++k) enqueue_one(PendingJob(rng, serial++));

  std::vector<int64_t> samples;
  samples.reserve(static_cast<size_t>(state.max_iterations));
  double bound = 0;
  for (auto _ : state) {
    if (!error.empty()) break;
    const auto t0 = std::chrono::steady_clock::now();
    const Decisions d = c.sched.Schedule(c.now_ms);
    const auto t1 = std::chrono::steady_clock::now();
    samples.push_back(ElapsedNs(t0, t1));
    if (!d.preemptions.empty()) error = "a pass preempted a job; fill jobs are not preemptible";
    bound += static_cast<double>(d.bindings.size());
    // Undo the pass: the bound jobs end, new pending jobs of their shapes come.
    for (const Binding& b : d.bindings) {
      c.sched.Remove(b.job_id, c.now_ms);
      auto node = queued.extract(b.job_id);
      if (node.empty()) {
        error = "pass bound unknown job '" + b.job_id + "'";
        break;
      }
      node.mapped().id = "p-" + std::to_string(serial++);
      enqueue_one(std::move(node.mapped()));
    }
    c.now_ms += 1000;
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
  for (const auto& [id, job] : queued) c.sched.Remove(id, c.now_ms);
  Report(state, samples, static_cast<double>(pending));
  state.counters["bound_per_pass"] = samples.empty() ? 0.0 : bound / static_cast<double>(samples.size());
  state.counters["fill_pct"] = c.fill_pct();
  state.counters["idle_nodes"] = c.idle_nodes;
}

// ---- BM_Worst: adversarial cases (issue 17, item 3) ----

// The BM_Place cluster of (gpus, 95 %, 1 reserved node) placed again, job
// for job, in a scheduler of another configuration: Restore of every running
// job on the GPUs it holds there (started now), `preemptible` as asked.
struct WorstCluster {
  std::unique_ptr<Scheduler> sched;
  const Cluster* base = nullptr;
  bool preemptible = false;
  int64_t now_ms = kStartMs;
  std::string error;
};

// With `cpu`, every node has kWorstNodeCores cores and every running job
// takes kWorstCoresPerGpu per GPU it holds (shares: in proportion), so a
// node's free cores are kWorstCoresPerGpu x its free GPUs.
constexpr int64_t kWorstCoresPerGpu = 8;
constexpr int64_t kWorstNodeCores = kWorstCoresPerGpu * kGpusPerNode;

WorstCluster& GetWorst(int gpus, bool backfill, bool preemptible, bool cpu = false) {
  static std::map<std::tuple<int, bool, bool, bool>, std::unique_ptr<WorstCluster>> cache;
  for (auto it = cache.begin(); it != cache.end();) {
    it = std::get<0>(it->first) != gpus ? cache.erase(it) : std::next(it);
  }
  auto& slot = cache[{gpus, backfill, preemptible, cpu}];
  if (slot) return *slot;
  slot = std::make_unique<WorstCluster>();
  WorstCluster& w = *slot;
  const Cluster& c = GetCluster(gpus, 95, 1);
  w.base = &c;
  w.preemptible = preemptible;
  w.now_ms = c.now_ms;
  w.error = c.error;
  Config config;
  config.backfill = backfill;
  w.sched = std::make_unique<Scheduler>(config);
  for (int n = 0; n < gpus / kGpusPerNode && w.error.empty(); ++n) {
    NodeInfo node = MakeNode(n);
    if (cpu) node.cpu_milli = kWorstNodeCores * 1000;
    if (Status st = w.sched->UpsertNode(node); !st.ok()) w.error = "upsert node: " + st.ToString();
  }
  for (const Cluster::Running& r : c.running) {
    if (!w.error.empty()) break;
    auto [req, binding] = c.bound.at(r.id);
    req.preemptible = preemptible;
    if (cpu) req.cpu_milli = int64_t{req.gpus} * req.gpu_milli * kWorstCoresPerGpu;  // per replica
    if (Status st = w.sched->Restore(req, binding, w.now_ms); !st.ok()) w.error = "restore: " + st.ToString();
  }
  return w;
}

enum class Worst : uint8_t {
  kQuota10k,      // 10,000 pending 1-GPU jobs of a tenant at its quota, ahead of the measured job
  kSelector1pct,  // the measured job selects pool=pool-37: 1 % of the nodes
  kSelectorFull,  // the same, once other jobs have taken every GPU of those nodes
  kBlockedHead,   // a 16 x 8 GPU gang under one switch (priority 10) cannot start, ahead of it
  kGangPreempt,   // an 8 x 8 GPU gang under one switch (priority 10) that must preempt
  kHostFit10k,    // 10,000 pending 1-GPU jobs that no node has the cores for, ahead of the measured job
  kHostFitWalk,   // the measured job asks 40 cores: only nodes with 5 or more free GPUs have them
  kHostFitShare,  // the same for a share of a GPU (250 milli-GPU, 10 GiB): the shared GPUs' walk
};

struct WorstCase {
  const char* name;
  Worst kind;
  bool backfill = true;
};

// One decision is Enqueue(measured job) + Schedule(), timed together, over
// the pass's `considered` (the decisions it made: BM_Live's way), so a pass
// that also considers the 10,000 capped jobs, or the blocked head, counts
// them as decisions too; pass_p50_us is the whole pass. Outside the timed
// region the measured job is removed again and, for kGangPreempt, every
// victim is removed and restored where it ran, so each pass sees the same
// cluster. `bound` is the share of passes that bound the measured job
// (kBlockedHead with backfill off: none, it waits behind the head),
// `preempted` the share that preempted for it, `victims` the jobs preempted
// per pass (kGangPreempt: all under one switch, or the case is void),
// `searches` the preemption searches per pass.
void BM_Worst(benchmark::State& state, const WorstCase& wc, int gpus) {
  const bool cpu = wc.kind == Worst::kHostFit10k || wc.kind == Worst::kHostFitWalk || wc.kind == Worst::kHostFitShare;
  WorstCluster& w = GetWorst(gpus, wc.backfill, wc.kind == Worst::kGangPreempt, cpu);
  if (!w.error.empty()) {
    state.SkipWithError(w.error.c_str());
    return;
  }
  Scheduler& sched = *w.sched;
  std::vector<std::string> background;
  std::string error;
  const auto enqueue = [&](const JobRequest& j) {
    if (Status st = sched.Enqueue(j, w.now_ms); !st.ok()) error = "enqueue: " + st.ToString();
  };
  JobRequest job;  // the measured job: one GPU, 10 minutes
  job.tenant = "t-0";
  job.runtime_estimate_ms = 600'000;
  if (wc.kind == Worst::kQuota10k) {
    TenantInfo capped;
    capped.name = "capped";
    capped.max_gpus["*"] = 0;  // at its quota: holds 0 of 0
    if (Status st = sched.SetTenant(capped); !st.ok()) error = "tenant: " + st.ToString();
    for (int k = 0; k < 10'000; ++k) {
      JobRequest q;
      q.id = "q-" + std::to_string(k);
      q.tenant = "capped";
      q.runtime_estimate_ms = 600'000;
      enqueue(q);
      background.push_back(q.id);
    }
  } else if (wc.kind == Worst::kSelector1pct) {
    job.node_selector["pool"] = "pool-37";
  } else if (wc.kind == Worst::kSelectorFull) {
    job.node_selector["pool"] = "pool-37";
    // Fill the pool's free GPUs with 1-GPU jobs of no estimate (they never
    // end in the scheduler's eyes); they are removed after the case.
    for (int round = 0; error.empty(); ++round) {
      for (int k = 0; k < 256; ++k) {
        JobRequest f = job;
        f.id = "pf-" + std::to_string(round) + "-" + std::to_string(k);
        f.runtime_estimate_ms = 0;
        enqueue(f);
        background.push_back(f.id);
      }
      if (sched.Schedule(w.now_ms).bindings.empty()) break;
      ++w.now_ms;
    }
    std::erase_if(background, [&](const std::string& id) {  // the fillers left over
      if (!sched.IsPending(id)) return false;
      sched.Remove(id, w.now_ms);
      return true;
    });
  } else if (cpu) {
    // Idle nodes are taken by whole-node jobs of no estimate (removed after
    // the case), so a node with a free GPU has at most 7 whole GPUs free
    // and one at most 750 milli-GPU free (shares are 250 or 500): 62 cores.
    // kHostFit10k: then 10,000 jobs of one GPU and 63.001-64 cores (each
    // asking less than the one before, in runs of 1,000) that every node
    // with a free GPU refuses for its cores. kHostFitWalk: the measured job
    // asks 40 cores, which only nodes with 5 or more free GPUs have; binpack
    // and frag walk the fullest nodes first, which all refuse it.
    if (wc.kind == Worst::kHostFitWalk || wc.kind == Worst::kHostFitShare) job.cpu_milli = 40'000;
    if (wc.kind == Worst::kHostFitShare) {
      job.gpu_milli = 250;
      job.gpu_memory_bytes = 10 * kGiB;
    }
    for (int round = 0; error.empty(); ++round) {
      for (int k = 0; k < 64; ++k) {
        JobRequest f;
        f.id = "hf-" + std::to_string(round) + "-" + std::to_string(k);
        f.tenant = "t-2";
        f.gpus = kGpusPerNode;
        f.cpu_milli = kWorstNodeCores * 1000;
        enqueue(f);
        background.push_back(f.id);
      }
      if (sched.Schedule(w.now_ms).bindings.empty()) break;
      ++w.now_ms;
    }
    std::erase_if(background, [&](const std::string& id) {
      if (!sched.IsPending(id)) return false;
      sched.Remove(id, w.now_ms);
      return true;
    });
    for (int k = 0; k < (wc.kind == Worst::kHostFit10k ? 10'000 : 0); ++k) {
      JobRequest q;
      q.id = "h-" + std::to_string(k);
      q.tenant = "hungry";
      q.runtime_estimate_ms = 600'000;
      q.cpu_milli = kWorstNodeCores * 1000 - k % 1'000;
      enqueue(q);
      background.push_back(q.id);
    }
  } else if (wc.kind == Worst::kBlockedHead) {
    JobRequest head;
    head.id = "head";
    head.tenant = "t-1";
    head.priority = 10;
    head.replicas = kNodesPerSwitch;
    head.gpus = kGpusPerNode;
    head.topology = Topology::kSwitch;
    head.runtime_estimate_ms = 3'600'000;
    enqueue(head);
    background.push_back(head.id);
  } else {
    job.priority = 10;
    job.replicas = 8;
    job.gpus = kGpusPerNode;
    job.topology = Topology::kSwitch;
  }
  // One pass before the measurement: the background jobs get their reasons.
  if (error.empty()) {
    const Decisions d = sched.Schedule(w.now_ms);
    if (!d.bindings.empty() || !d.preemptions.empty()) error = "a background job started; the case is void";
    ++w.now_ms;
  }
  const auto n = static_cast<size_t>(state.max_iterations);
  std::vector<std::string> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) ids.push_back("w-" + std::to_string(i));
  std::vector<int64_t> samples, passes;
  samples.reserve(n);
  passes.reserve(n);
  double bound = 0, preempted = 0, considered = 0, searches = 0, victims = 0;
  size_t i = 0;
  for (auto _ : state) {
    if (!error.empty()) break;
    job.id = ids[i++];
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = sched.Enqueue(job, w.now_ms);
    const Decisions d = sched.Schedule(w.now_ms);
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) error = "enqueue: " + st.ToString();
    const int64_t ns = ElapsedNs(t0, t1);
    passes.push_back(ns);
    samples.push_back(ns / std::max(1, d.considered));
    considered += d.considered;
    for (const Binding& b : d.bindings) {
      if (b.job_id == job.id) {
        ++bound;
      } else {
        error = "pass bound '" + b.job_id + "', not the measured job";
      }
    }
    preempted += d.preemptions.empty() ? 0 : 1;
    victims += static_cast<double>(d.preemptions.size());
    searches += d.preemption_searches;
    if (wc.kind == Worst::kGangPreempt) {
      // Victims under one switch: the gang's (node-N is under switch N / kNodesPerSwitch).
      std::set<int> switches;
      for (const Preemption& p : d.preemptions) {
        for (const Placement& pl : w.base->bound.at(p.job_id).second.replicas) {
          switches.insert(std::stoi(pl.node.substr(pl.node.find('-') + 1)) / kNodesPerSwitch);
        }
      }
      if (switches.size() > 1) error = "victims under " + std::to_string(switches.size()) + " switches";
    }
    sched.Remove(job.id, w.now_ms);
    for (const Preemption& p : d.preemptions) {
      sched.Remove(p.job_id, w.now_ms);
      auto [req, binding] = w.base->bound.at(p.job_id);
      req.preemptible = w.preemptible;
      if (Status rs = sched.Restore(req, binding, w.now_ms); !rs.ok()) error = "restore victim: " + rs.ToString();
    }
    ++w.now_ms;
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
  for (const std::string& id : background) sched.Remove(id, w.now_ms);
  Report(state, samples, 1.0);
  if (!passes.empty()) {
    std::sort(passes.begin(), passes.end());
    state.counters["pass_p50_us"] = Rank(passes, 0.5) / 1000.0;
    const auto iters = static_cast<double>(passes.size());
    state.counters["considered"] = considered / iters;
    state.counters["bound"] = bound / iters;
    state.counters["preempted"] = preempted / iters;
    state.counters["victims"] = victims / iters;
    state.counters["searches"] = searches / iters;
  }
  state.counters["fill_pct"] = w.base->fill_pct();
}

// ---- BM_Live: the live workload of `drover up --simulate 64 --workload mixed` ----

constexpr int kLiveNodes = 64;
constexpr int64_t kLiveDurationMs = 150'000;  // as the live histogram runs in docs/performance.md
constexpr int64_t kLiveIdlePassMs = 1000;     // ControlLoop's kIdlePassEveryMs
constexpr int64_t kLiveNextBatchMs = 4;       // 64 nodes x 4 heartbeats a second: a batch every ~4 ms
constexpr int64_t kLiveStopMs = 20;           // SIGTERM to `sleep` until its exit is reported

// Simulated node i (1-based) as `drover up --simulate` registers it: 8 H100
// 80GB on one NVSwitch fabric, two nodes per switch, four per rack.
NodeInfo LiveNode(int i) {
  return H100Node("sim-" + std::to_string(i), "switch-" + std::to_string((i - 1) / 2 + 1),
                  "rack-" + std::to_string((i - 1) / 4 + 1));
}

// Replays 150 s of the live workload through one Scheduler as the server's
// control loop drives it, in virtual time, and times every pass as the loop
// does (docs/performance.md: a pass's time over the jobs it decided about,
// once per such job). Arrivals come from sim::LivePlan with its default
// options, held back while more than 2 x nodes jobs are pending (as the live
// submitter does); a bound job ends after its run time; a preempted one
// stops kLiveStopMs later and is requeued. A pass runs after each batch of
// events that changed the scheduler, again ~4 ms after a pass that decided
// something (the next heartbeat batch), and once a second while jobs wait.
// `cold`: every pass starts after the 64 MiB sweep of the cold BM_Place.
// Counters: the decision percentiles over every replay, the rest per replay.
void BM_Live(benchmark::State& state, bool cold) {
  const sim::LiveCluster cluster{kLiveNodes, kGpusPerNode, 80 * kGiB};
  const sim::LiveSchedulerSettings settings = sim::LiveScheduler(cluster, "H100 80GB");
  std::vector<int64_t> samples;
  std::vector<char> evict(cold ? kEvictBytes : 0);
  double passes = 0, bindings = 0, preemptions = 0;
  std::string error;
  for (auto _ : state) {
    Scheduler sched(settings.config);
    for (int i = 1; i <= kLiveNodes && error.empty(); ++i) {
      if (Status st = sched.UpsertNode(LiveNode(i)); !st.ok()) error = "upsert node: " + st.ToString();
    }
    for (const TenantInfo& t : settings.tenants) {
      if (Status st = sched.SetTenant(t); !st.ok()) error = "tenant: " + st.ToString();
    }
    auto plan = sim::LivePlan::Make(cluster, {});
    if (!plan.ok()) error = "live plan: " + plan.status().ToString();
    if (!error.empty()) break;
    // Events after the start: (at, kind, job, run), kind 0 = end, 1 = stopped.
    using Event = std::tuple<int64_t, int, std::string, uint64_t>;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
    std::unordered_map<std::string, std::pair<JobRequest, int64_t>> jobs;  // id -> (request, run ms)
    std::unordered_map<std::string, uint64_t> runs;                        // id -> current run
    std::optional<sim::LiveJob> next;
    int64_t serial = 0, now = 0, last_pass = -kLiveIdlePassMs, again_at = -1;
    uint64_t settled = 0;
    const auto pull = [&] {
      if (next) return;
      auto j = plan->Next();
      if (!j.ok()) {
        error = "live plan: " + j.status().ToString();
      } else {
        next = std::move(*j);
      }
    };
    pull();
    while (error.empty()) {
      const bool held_back = sched.pending() > static_cast<size_t>(2 * kLiveNodes);
      int64_t t = INT64_MAX;
      if (next && !held_back) t = std::max(now, next->at_ms);
      if (!events.empty()) t = std::min(t, std::get<0>(events.top()));
      if (again_at >= 0) t = std::min(t, again_at);
      if (sched.pending() > 0) t = std::min(t, last_pass + kLiveIdlePassMs);
      if (t == INT64_MAX || t >= kLiveDurationMs) break;
      now = std::max(now, t);
      const int64_t at = kStartMs + now;
      // One batch: every event due now.
      while (next && !held_back && next->at_ms <= now) {
        JobRequest req = next->req;
        req.id = "live-" + std::to_string(++serial);
        req.gpu_model = "H100 80GB";
        req.runtime_estimate_ms = (next->estimate_ms + 500) / 1000 * 1000;
        if (Status st = sched.Enqueue(req, at); !st.ok()) error = "enqueue: " + st.ToString();
        jobs[req.id] = {req, std::max<int64_t>(1000, next->run_ms)};
        next.reset();
        pull();
      }
      while (!events.empty() && std::get<0>(events.top()) <= now) {
        auto [when, kind, id, run] = events.top();
        events.pop();
        if (runs[id] != run) continue;  // preempted before it ended
        if (kind == 0) {
          sched.Remove(id, at);
          jobs.erase(id);
          runs.erase(id);
        } else if (Status st = sched.Requeue(id, at); !st.ok()) {
          error = "requeue: " + st.ToString();
        }
      }
      const bool due = again_at >= 0 && again_at <= now;
      if (sched.generation() == settled && !due && (sched.pending() == 0 || now - last_pass < kLiveIdlePassMs)) {
        continue;
      }
      again_at = -1;
      for (size_t b = 0; b < evict.size(); b += 64) evict[b] = static_cast<char>(b + static_cast<size_t>(now));
      benchmark::ClobberMemory();
      const auto t0 = std::chrono::steady_clock::now();
      const Decisions d = sched.Schedule(at);
      const auto t1 = std::chrono::steady_clock::now();
      last_pass = now;
      ++passes;
      for (int k = 0; k < d.considered; ++k) samples.push_back(ElapsedNs(t0, t1) / d.considered);
      const bool decided = !d.bindings.empty() || !d.preemptions.empty();
      settled = decided ? 0 : sched.generation();
      if (decided) again_at = now + kLiveNextBatchMs;
      for (const Preemption& p : d.preemptions) {
        ++preemptions;
        events.emplace(now + kLiveStopMs, 1, p.job_id, ++runs[p.job_id]);
      }
      for (const Binding& b : d.bindings) {
        ++bindings;
        events.emplace(now + jobs[b.job_id].second, 0, b.job_id, ++runs[b.job_id]);
      }
    }
  }
  if (!error.empty()) state.SkipWithError(error.c_str());
  Report(state, samples, 1.0);
  if (!samples.empty()) state.counters["p90_ns"] = Rank(samples, 0.90);
  // Per replay (every replay makes the same decisions).
  const auto replays = static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.counters["decisions"] = static_cast<double>(samples.size()) / replays;
  state.counters["passes"] = passes / replays;
  state.counters["bindings"] = bindings / replays;
  state.counters["preemptions"] = preemptions / replays;
}

constexpr int kNeverFitsNodes = 16'384;

// The idle cluster of BM_NeverFits, built once.
Scheduler& NeverFitsCluster(std::string* error) {
  static std::string build_error;
  static const std::unique_ptr<Scheduler> sched = [] {
    auto s = std::make_unique<Scheduler>();
    for (int n = 0; n < kNeverFitsNodes && build_error.empty(); ++n) {
      if (Status st = s->UpsertNode(MakeNode(n)); !st.ok()) build_error = "upsert node: " + st.ToString();
    }
    return s;
  }();
  *error = build_error;
  return *sched;
}

struct NeverFitsShape {
  const char* name;
  JobRequest job;
  bool fits;  // the answer every call must give
};

std::vector<NeverFitsShape> NeverFitsShapes() {
  JobRequest single;
  single.id = "nf";
  JobRequest island8 = single;
  island8.gpus = 8;
  island8.topology = Topology::kIsland;
  JobRequest never16 = single;
  never16.gpus = 16;
  JobRequest gang17sw = single;
  gang17sw.gpus = 8;
  gang17sw.replicas = kNodesPerSwitch + 1;
  gang17sw.topology = Topology::kSwitch;
  return {
      {"single", single, true}, {"island8", island8, true}, {"never16", never16, false}, {"gang17sw", gang17sw, false}};
}

void BM_NeverFits(benchmark::State& state, const NeverFitsShape& shape, bool cold) {
  std::string error;
  Scheduler& sched = NeverFitsCluster(&error);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  JobRequest job = shape.job;
  static int64_t serial = 0;  // across runs and repetitions: every cold shape is new
  for (auto _ : state) {
    if (cold) job.cpu_milli = ++serial;
    std::optional<std::string> why = sched.NeverFits(job);
    if (why.has_value() == shape.fits) {
      error = "NeverFits(" + std::string(shape.name) + ") said " + why.value_or("it fits");
      state.SkipWithError(error.c_str());
      break;
    }
    benchmark::DoNotOptimize(why);
  }
  state.counters["nodes"] = kNeverFitsNodes;
}

void RegisterAll() {
  static const std::vector<Shape> shapes = Shapes();
  for (int gpus : {512, 1'024, 16'384, 131'072}) {
    for (int percent : {70, 95}) {
      for (const Shape& shape : shapes) {
        const std::string name =
            std::string("BM_Place/") + shape.name + "/" + std::to_string(gpus) + "/" + std::to_string(percent);
        benchmark::RegisterBenchmark(name.c_str(), BM_Place, shape, gpus, percent, false)
            ->Unit(benchmark::kMicrosecond);
        if (gpus == 512) {
          benchmark::RegisterBenchmark((name + "/cold").c_str(), BM_Place, shape, gpus, percent, true)
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(3.0);
        }
      }
    }
  }
  benchmark::RegisterBenchmark("BM_FullPass/10000", BM_FullPass, 16'384, 95, 10'000)->Unit(benchmark::kMillisecond);
  static const std::vector<WorstCase> worst = {{"quota10k", Worst::kQuota10k},
                                               {"selector1pct", Worst::kSelector1pct},
                                               {"selector1pct_full", Worst::kSelectorFull},
                                               {"blocked_head/backfill", Worst::kBlockedHead, true},
                                               {"blocked_head/strict", Worst::kBlockedHead, false},
                                               {"gang_preempt_switch", Worst::kGangPreempt},
                                               {"hostfit10k", Worst::kHostFit10k},
                                               {"hostfit_walk", Worst::kHostFitWalk},
                                               {"hostfit_share", Worst::kHostFitShare}};
  for (int gpus : {16'384, 131'072}) {
    for (const WorstCase& wc : worst) {
      const std::string name = std::string("BM_Worst/") + wc.name + "/" + std::to_string(gpus);
      benchmark::RegisterBenchmark(name.c_str(), BM_Worst, wc, gpus)->Unit(benchmark::kMicrosecond);
    }
  }
  for (bool cold : {false, true}) {
    // Warm: ten replays (a replay takes tens of milliseconds: one would be
    // at the mercy of one interruption); cold: one (its sweeps take ~7 s).
    benchmark::RegisterBenchmark(cold ? "BM_Live/512/cold" : "BM_Live/512/warm", BM_Live, cold)
        ->Unit(benchmark::kMillisecond)
        ->Iterations(cold ? 1 : 10);
  }
  static const std::vector<NeverFitsShape> never_fits = NeverFitsShapes();
  for (const NeverFitsShape& shape : never_fits) {
    for (bool cold : {false, true}) {
      const std::string name = std::string("BM_NeverFits/") + shape.name + (cold ? "/cold" : "/warm");
      benchmark::RegisterBenchmark(name.c_str(), BM_NeverFits, shape, cold);
    }
  }
}

}  // namespace
}  // namespace drover::sched

int main(int argc, char** argv) {
  drover::sched::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
