// The engine on small hand-made clusters: arrivals and completions,
// preemption and requeue, packing failures, --inflate; policies by name;
// and the check that the simulator and a server-style driver make the same
// scheduler calls and get the same decisions (see SameDecisionsAsServer).
// Golden summaries of real traces are at the end (GoldenSummary).

#include "drover/sim/engine.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "drover/common/rng.h"
#include "drover/sched/scheduler.h"
#include "drover/sim/loaders.h"
#include "drover/sim/report.h"
#include "drover/sim/test_traces.h"

namespace drover::sim {
namespace {

Cluster MakeCluster(int nodes, int gpus, const std::string& model = "A100") {
  Cluster c;
  c.name = "test";
  for (int n = 0; n < nodes; ++n) {
    sched::NodeInfo node;
    node.name = "n" + std::to_string(n);
    node.schedulable = true;
    for (int i = 0; i < gpus; ++i) {
      sched::GpuInfo g;
      g.index = i;
      g.vendor = "nvidia";
      g.model = model;
      g.memory_bytes = int64_t{80} << 30;
      node.gpus.push_back(g);
    }
    c.nodes.push_back(node);
  }
  return c;
}

struct JobOpts {
  int priority = 0;
  bool preemptible = false;
  std::string tenant = "default";
  int milli = sched::kWholeGpu;
  int replicas = 1;
};

SimJob J(const std::string& id, int gpus, int64_t submit_ms, int64_t duration_ms, JobOpts o = {}) {
  SimJob j;
  j.req.id = id;
  j.req.gpus = gpus;
  j.req.gpu_milli = o.milli;
  j.req.replicas = o.replicas;
  j.req.priority = o.priority;
  j.req.preemptible = o.preemptible;
  j.req.tenant = o.tenant;
  j.submit_ms = submit_ms;
  j.duration_ms = duration_ms;
  return j;
}

const JobRecord& Rec(const RunResult& r, const std::string& id) {
  for (size_t i = 0; i < r.jobs.size(); ++i) {
    if (r.jobs[i].req.id == id) return r.records[i];
  }
  ADD_FAILURE() << "no job " << id;
  static JobRecord none;
  return none;
}

RunResult Sim(const Cluster& c, std::vector<SimJob> jobs, EngineOptions o = {}) {
  o.check = true;  // every test step checks the scheduler's invariants
  auto r = Simulate(c, Workload{"w", std::move(jobs), std::nullopt}, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : RunResult{};
}

TEST(Engine, ArrivalsAndCompletions) {
  // b waits for a's GPUs: a runs [0, 10s), b [10s, 15s).
  RunResult r = Sim(MakeCluster(1, 2), {J("a", 2, 0, 10'000), J("b", 1, 1'000, 5'000)});
  EXPECT_EQ(Rec(r, "a").first_start_ms, 0);
  EXPECT_EQ(Rec(r, "a").end_ms, 10'000);
  EXPECT_EQ(Rec(r, "b").first_start_ms, 10'000);
  EXPECT_EQ(Rec(r, "b").end_ms, 15'000);
  const Summary& s = r.summary;
  EXPECT_EQ(s.completed, 2);
  EXPECT_DOUBLE_EQ(s.jct_s.mean, 12);  // (10 + 14) / 2
  EXPECT_DOUBLE_EQ(s.queue_delay_s.max, 9);
  EXPECT_DOUBLE_EQ(s.makespan_s, 15);
  EXPECT_NEAR(s.allocation_mean_pct, (10 * 100.0 + 5 * 50.0) / 15, 1e-9);
  EXPECT_DOUBLE_EQ(s.allocation_peak_pct, 100);
  EXPECT_DOUBLE_EQ(s.allocation_final_pct, 0);
  EXPECT_EQ(s.passes, 4);  // at 0, 1s, 10s and 15s
}

TEST(Engine, ZeroDurationNeverEnds) {
  RunResult r = Sim(MakeCluster(1, 2), {J("forever", 1, 0, 0), J("short", 1, 0, 1'000)});
  EXPECT_EQ(Rec(r, "forever").end, JobEnd::kNone);
  EXPECT_EQ(r.summary.completed, 1);
  EXPECT_EQ(r.summary.running_at_end, 1);
}

TEST(Engine, NeverFitsIsRejectedOnArrival) {
  RunResult r = Sim(MakeCluster(1, 2), {J("huge", 4, 0, 1'000), J("ok", 1, 0, 1'000)});
  EXPECT_EQ(Rec(r, "huge").end, JobEnd::kRejected);
  EXPECT_EQ(r.summary.rejected, 1);
  EXPECT_EQ(r.summary.completed, 1);
}

// low runs [0, 4s), is preempted for high at 4s, stops 1s later, waits for
// high [5s, 7s) and restarts from scratch: [7s, 17s).
TEST(Engine, PreemptedJobIsRequeuedAndRestartsFromScratch) {
  EngineOptions o;
  o.stop_delay_ms = 1'000;
  RunResult r = Sim(MakeCluster(1, 1),
                    {J("low", 1, 0, 10'000, {.preemptible = true}), J("high", 1, 4'000, 2'000, {.priority = 10})}, o);
  const JobRecord& low = Rec(r, "low");
  EXPECT_EQ(low.preemptions, 1);
  EXPECT_EQ(low.first_start_ms, 0);
  EXPECT_EQ(low.end_ms, 17'000);
  EXPECT_EQ(Rec(r, "high").first_start_ms, 5'000);
  EXPECT_EQ(Rec(r, "high").end_ms, 7'000);
  EXPECT_EQ(r.summary.preemptions, 1);
  EXPECT_EQ(r.summary.preempted_jobs, 1);
}

// With --resume a preempted job keeps the work done until it stopped.
TEST(Engine, ResumeKeepsTheWorkDoneBeforeTheStop) {
  EngineOptions o;
  o.stop_delay_ms = 1'000;
  o.resume = true;
  RunResult r = Sim(MakeCluster(1, 1),
                    {J("low", 1, 0, 10'000, {.preemptible = true}), J("high", 1, 4'000, 2'000, {.priority = 10})}, o);
  // low ran 0-5 s (stopped 1 s after the decision), high 5-7 s, low the other 5 s: 7-12 s.
  EXPECT_EQ(Rec(r, "low").preemptions, 1);
  EXPECT_EQ(Rec(r, "low").end_ms, 12'000);
  EXPECT_EQ(Rec(r, "high").end_ms, 7'000);
}

TEST(Engine, AllPreemptibleMakesTraceJobsPreemptible) {
  EngineOptions o;
  o.all_preemptible = true;
  RunResult r = Sim(MakeCluster(1, 1), {J("low", 1, 0, 10'000), J("high", 1, 4'000, 2'000, {.priority = 10})}, o);
  EXPECT_EQ(Rec(r, "low").preemptions, 1);
  EXPECT_EQ(Rec(r, "high").first_start_ms, 4'000);
  o.all_preemptible = false;
  r = Sim(MakeCluster(1, 1), {J("low", 1, 0, 10'000), J("high", 1, 4'000, 2'000, {.priority = 10})}, o);
  EXPECT_EQ(Rec(r, "low").preemptions, 0);
  EXPECT_EQ(Rec(r, "high").first_start_ms, 10'000);
}

TEST(Engine, DefaultStopDelayIsImmediate) {
  RunResult r = Sim(MakeCluster(1, 1),
                    {J("low", 1, 0, 10'000, {.preemptible = true}), J("high", 1, 4'000, 2'000, {.priority = 10})});
  EXPECT_EQ(Rec(r, "high").first_start_ms, 4'000);
  EXPECT_EQ(Rec(r, "low").end_ms, 16'000);
}

// A preempted job that ends before it stops has completed (like the server:
// exit 0 while PREEMPTING is SUCCEEDED), and is not requeued.
TEST(Engine, CompletionBeforeTheStopCompletes) {
  EngineOptions o;
  o.stop_delay_ms = 1'000;
  RunResult r = Sim(MakeCluster(1, 1),
                    {J("low", 1, 0, 4'500, {.preemptible = true}), J("high", 1, 4'000, 2'000, {.priority = 10})}, o);
  EXPECT_EQ(Rec(r, "low").end, JobEnd::kCompleted);
  EXPECT_EQ(Rec(r, "low").end_ms, 4'500);
  EXPECT_EQ(Rec(r, "high").first_start_ms, 4'500);
}

TEST(Engine, PackingFailsWhatDoesNotBind) {
  EngineOptions o;
  o.mode = Mode::kPacking;
  RunResult r = Sim(MakeCluster(1, 2), {J("a", 1, 0, 0), J("b", 1, 0, 0), J("c", 1, 0, 0), J("d", 4, 0, 0)}, o);
  EXPECT_EQ(Rec(r, "c").end, JobEnd::kFailed);
  EXPECT_EQ(Rec(r, "d").end, JobEnd::kFailed);  // never fits: failed too
  const Summary& s = r.summary;
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.running_at_end, 2);
  EXPECT_EQ(s.pending_at_end, 0);
  EXPECT_DOUBLE_EQ(s.allocation_final_pct, 100);
  EXPECT_DOUBLE_EQ(s.arrived_demand_pct, 350);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(50), 50);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(100), 100);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(130), 100);
  EXPECT_EQ(r.samples.size(), 5u);  // before the first arrival, then one per arrival
}

// In packing mode a preemption takes effect at once: the victim is requeued,
// the preemptor binds, and the victim fails when nothing else fits.
TEST(Engine, PackingPreemptionEvictsTheVictim) {
  EngineOptions o;
  o.mode = Mode::kPacking;
  RunResult r =
      Sim(MakeCluster(1, 1), {J("low", 1, 0, 0, {.preemptible = true}), J("high", 1, 0, 0, {.priority = 5})}, o);
  EXPECT_EQ(Rec(r, "high").end, JobEnd::kNone);
  EXPECT_EQ(Rec(r, "high").first_start_ms, 0);
  EXPECT_EQ(Rec(r, "low").end, JobEnd::kFailed);
  EXPECT_EQ(Rec(r, "low").preemptions, 1);
}

TEST(Inflate, DeterministicAndLargeEnough) {
  std::vector<SimJob> jobs = {J("a", 1, 0, 0), J("b", 2, 0, 0), J("c", 0, 0, 0), J("d", 1, 0, 0, {.milli = 500})};
  auto x = Inflate(jobs, 10'000, 1.3, 42, false);
  auto y = Inflate(jobs, 10'000, 1.3, 42, false);
  auto z = Inflate(jobs, 10'000, 1.3, 7, false);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  std::vector<std::string> xs, ys, zs;
  int64_t milli = 0;
  for (const SimJob& j : *x) {
    xs.push_back(j.req.id);
    milli += j.req.gpus == 0 ? 0 : j.req.milli();
  }
  for (const SimJob& j : *y) ys.push_back(j.req.id);
  for (const SimJob& j : *z) zs.push_back(j.req.id);
  EXPECT_EQ(xs, ys);
  EXPECT_NE(xs, zs);
  EXPECT_GE(milli, 13'000);
  EXPECT_LT(milli, 13'000 + 2'000);  // stops at the first copy that reaches it
  std::set<std::string> ids(xs.begin(), xs.end());
  EXPECT_EQ(ids.size(), xs.size());
  for (const char* id : {"a", "b", "c", "d"}) EXPECT_TRUE(ids.contains(id)) << id;
  EXPECT_FALSE(Inflate({J("cpu", 0, 0, 0)}, 1000, 1.3, 1, false).ok());
}

TEST(Inflate, TimeModeKeepsTheSpanAndOrder) {
  std::vector<SimJob> jobs = {J("a", 1, 1'000, 5), J("b", 1, 9'000, 5)};
  auto x = Inflate(jobs, 8'000, 2, 3, true);
  ASSERT_TRUE(x.ok());
  EXPECT_GE(x->size(), 16u);
  for (size_t i = 0; i < x->size(); ++i) {
    EXPECT_GE((*x)[i].submit_ms, 1'000);
    EXPECT_LE((*x)[i].submit_ms, 9'000);
    if (i > 0) {
      EXPECT_LE((*x)[i - 1].submit_ms, (*x)[i].submit_ms);
    }
  }
}

TEST(Policy, ParsesWordsAndKeys) {
  auto a = ParsePolicy("fair-share,spread");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->queue, sched::QueuePolicy::kFairShare);
  EXPECT_EQ(a->placement, sched::PlacementPolicy::kSpread);
  EXPECT_TRUE(a->backfill);
  auto b = ParsePolicy("queue=las, backfill=off, no-preemption, aging=5m, preemption-grace=10s");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->queue, sched::QueuePolicy::kLas);
  EXPECT_FALSE(b->backfill);
  EXPECT_FALSE(b->preemption);
  EXPECT_EQ(b->aging_ms, 300'000);
  EXPECT_EQ(b->preemption_grace_ms, 10'000);
  EXPECT_EQ(PolicyString(*b),
            "queue=las,placement=frag,backfill=off,preemption=off,aging=5m,preemption-grace=10s,"
            "las-thresholds=1h:10h,las-starvation=4,frag-coverage=0.6");
  auto l = ParsePolicy("las,las-thresholds=30m:2h:1d,las-starvation=2.5");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->las_thresholds, (std::vector<int64_t>{1'800'000, 7'200'000, 86'400'000}));
  EXPECT_EQ(l->las_starvation_factor, 2.5);
  EXPECT_EQ(ParsePolicy("las,las-starvation=0")->las_starvation_factor, 0.0);
  EXPECT_FALSE(ParsePolicy("las,las-starvation=-1").ok());
  EXPECT_FALSE(ParsePolicy("las,las-starvation=nan").ok());
  EXPECT_FALSE(ParsePolicy("las,las-starvation=4x").ok());
  EXPECT_EQ(ParsePolicy("las,las-thresholds=none")->las_thresholds, std::vector<int64_t>{});
  EXPECT_FALSE(ParsePolicy("las,las-thresholds=2h:1h").ok());  // not ascending
  EXPECT_FALSE(ParsePolicy("las,las-thresholds=soon").ok());
  auto d = ParsePolicy("");  // the server's defaults
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(PolicyString(*d), PolicyString(sched::Config{}));
  EXPECT_EQ(PolicyString(*ParsePolicy(PolicyString(*b))), PolicyString(*b));
  EXPECT_FALSE(ParsePolicy("round-robin").ok());
  EXPECT_FALSE(ParsePolicy("queue=fast").ok());
  EXPECT_FALSE(ParsePolicy("colour=red").ok());
}

// ------------------------------------------------- same decisions as the server --

std::string Describe(const sched::Decisions& d) {
  std::string out;
  for (const sched::Binding& b : d.bindings) {
    out += "bind " + b.job_id;
    for (const sched::Placement& p : b.replicas) {
      out += " " + p.node + ":";
      for (int g : p.gpu_indices) out += std::to_string(g) + ",";
      out += "@" + std::to_string(p.gpu_milli) + "/" + std::to_string(p.gpu_memory_bytes);
    }
    out += "; ";
  }
  for (const sched::Preemption& p : d.preemptions) {
    out +=
        "preempt " + p.job_id + " for " + p.for_job + " (" + p.reason + ") grace " + std::to_string(p.grace_ms) + "; ";
  }
  return out;
}

// A second driver of sched::Scheduler, written the way the server's control
// loop drives it (server/control_loop.cc, control_loop_jobs.cc): commands
// come in batches and each batch ends with one Schedule(NowMs()); Submit
// rejects what NeverFits, then Enqueue(req, submit ms); a binding makes the
// job BOUND; a preemption makes it PREEMPTING, and it keeps its GPUs until its
// agent reports the process gone, then Requeue; an exit while BOUND or
// PREEMPTING ends it (Remove). The agents are a fake: a job exits duration_ms
// after it was bound; a preempted one is gone stop_delay_ms after the
// decision, and then never reports the exit of that run.
class ServerStyleDriver {
 public:
  struct Pass {
    int64_t now;
    std::string decisions;
  };

  std::vector<Pass> Run(const Cluster& c, const std::vector<SimJob>& jobs, const sched::Config& config,
                        int64_t stop_delay_ms) {
    sched::Scheduler s(config);
    for (const sched::NodeInfo& n : c.nodes) EXPECT_TRUE(s.UpsertNode(n).ok());
    for (const sched::TenantInfo& t : c.tenants) EXPECT_TRUE(s.SetTenant(t).ok());
    std::map<std::string, size_t> by_id;
    for (size_t i = 0; i < jobs.size(); ++i) {
      by_id[jobs[i].req.id] = i;
      inbox_[jobs[i].submit_ms].push_back({kSubmit, i, 0});
    }
    state_.assign(jobs.size(), kUnknown);
    run_.assign(jobs.size(), 0);
    std::vector<Pass> passes;
    while (!inbox_.empty()) {
      auto [now, batch] = *inbox_.begin();
      inbox_.erase(inbox_.begin());
      bool any = false;
      for (const Command& cmd : batch) {
        const SimJob& job = jobs[cmd.job];
        if (cmd.kind == kSubmit) {
          any = true;
          if (s.NeverFits(job.req)) {
            state_[cmd.job] = kRejected;
          } else {
            EXPECT_TRUE(s.Enqueue(job.req, now).ok());
            state_[cmd.job] = kPending;
          }
        } else if (cmd.run == run_[cmd.job] && cmd.kind == kExited &&
                   (state_[cmd.job] == kBound || state_[cmd.job] == kPreempting)) {
          any = true;
          s.Remove(job.req.id, now);
          state_[cmd.job] = kSucceeded;
        } else if (cmd.run == run_[cmd.job] && cmd.kind == kGone && state_[cmd.job] == kPreempting) {
          any = true;
          EXPECT_TRUE(s.Requeue(job.req.id, now).ok());
          state_[cmd.job] = kPending;
          ++run_[cmd.job];
        }
      }
      if (!any) continue;
      sched::Decisions d = s.Schedule(now);
      for (const sched::Preemption& p : d.preemptions) {
        size_t j = by_id.at(p.job_id);
        if (state_[j] != kBound) continue;
        state_[j] = kPreempting;
        inbox_[now + stop_delay_ms].push_back({kGone, j, run_[j]});
      }
      for (const sched::Binding& b : d.bindings) {
        size_t j = by_id.at(b.job_id);
        state_[j] = kBound;
        ++run_[j];
        if (jobs[j].duration_ms > 0) inbox_[now + jobs[j].duration_ms].push_back({kExited, j, run_[j]});
      }
      passes.push_back({now, Describe(d)});
    }
    return passes;
  }

 private:
  enum Kind { kSubmit, kExited, kGone };
  enum JobState { kUnknown, kPending, kBound, kPreempting, kSucceeded, kRejected };
  struct Command {
    Kind kind;
    size_t job;
    int run;
  };
  std::map<int64_t, std::vector<Command>> inbox_;
  std::vector<JobState> state_;
  std::vector<int> run_;
};

// A mixed random workload: shares, whole GPUs, gangs, three tenants,
// priorities and preemptible jobs, on 3 x 8 GPUs with a guarantee.
std::pair<Cluster, std::vector<SimJob>> RandomCase(uint64_t seed) {
  Cluster c = MakeCluster(3, 8);
  c.tenants = {{"a", 2.0, {{"A100", 8}}, -1}, {"b", 1.0, {}, 8}};
  Rng rng(seed);
  std::vector<SimJob> jobs;
  int64_t t = 0;
  for (int i = 0; i < 80; ++i) {
    t += rng.Uniform(0, 20) * 1000;
    JobOpts o;
    o.priority = static_cast<int>(rng.Uniform(0, 3)) * 10;
    o.preemptible = rng.Bernoulli(0.5);
    o.tenant = std::string(1, static_cast<char>('a' + rng.Uniform(0, 2)));
    int gpus = std::vector<int>{1, 1, 2, 4, 8}[static_cast<size_t>(rng.Uniform(0, 4))];
    if (rng.Bernoulli(0.2)) {
      gpus = 1;
      o.milli = static_cast<int>(rng.Uniform(1, 9)) * 100;
    } else if (rng.Bernoulli(0.1)) {
      gpus = 4;
      o.replicas = 2;
    }
    jobs.push_back(J("j" + std::to_string(i), gpus, t, rng.Uniform(5, 120) * 1000, o));
  }
  return {c, jobs};
}

// The simulator and a server-style driver make the same decisions for the
// same event sequence, under every policy and with or without a stop delay.
// Limits: the server's ControlLoop itself is not run here (sim may not link
// server: layers); the driver above restates its rules. Not covered: commit
// failures, heartbeats (the server also schedules after batches of agent
// reports), lost nodes, how threads group commands into batches, and the
// server's own job ids (j-000001...; the scheduler orders by arrival, not id).
TEST(SameDecisionsAsServer, RandomWorkloads) {
  const char* policies[] = {"", "fair-share,spread", "fifo,no-backfill", "las", "sjf,no-preemption"};
  for (uint64_t seed : {1, 2, 3}) {
    for (const char* policy : policies) {
      for (int64_t stop_delay : {0, 3'000}) {
        auto [cluster, jobs] = RandomCase(seed);
        EngineOptions o;
        o.config = *ParsePolicy(policy);
        o.stop_delay_ms = stop_delay;
        o.record_calls = true;
        RunResult r = Sim(cluster, jobs, o);
        std::vector<ServerStyleDriver::Pass> server = ServerStyleDriver().Run(cluster, jobs, o.config, stop_delay);
        // The engine's passes, from its call log.
        std::vector<ServerStyleDriver::Pass> sim;
        size_t k = 0;
        for (const SchedCall& call : r.calls) {
          if (call.kind == SchedCall::Kind::kSchedule) sim.push_back({call.now_ms, Describe(r.decisions.at(k++))});
        }
        SCOPED_TRACE(::testing::Message()
                     << "seed " << seed << ", policy '" << policy << "', stop delay " << stop_delay);
        ASSERT_EQ(sim.size(), server.size());
        for (size_t i = 0; i < sim.size(); ++i) {
          EXPECT_EQ(sim[i].now, server[i].now) << "pass " << i;
          EXPECT_EQ(sim[i].decisions, server[i].decisions) << "pass " << i << " at " << sim[i].now;
        }
        // Replaying the engine's own calls on a fresh scheduler decides the same.
        sched::Scheduler replay(o.config);
        for (const sched::NodeInfo& n : cluster.nodes) ASSERT_TRUE(replay.UpsertNode(n).ok());
        for (const sched::TenantInfo& t : cluster.tenants) ASSERT_TRUE(replay.SetTenant(t).ok());
        k = 0;
        for (const SchedCall& call : r.calls) {
          switch (call.kind) {
            case SchedCall::Kind::kEnqueue: ASSERT_TRUE(replay.Enqueue(call.job, call.now_ms).ok()); break;
            case SchedCall::Kind::kRequeue: ASSERT_TRUE(replay.Requeue(call.job.id, call.now_ms).ok()); break;
            case SchedCall::Kind::kRemove: replay.Remove(call.job.id, call.now_ms); break;
            case SchedCall::Kind::kSchedule:
              EXPECT_EQ(Describe(replay.Schedule(call.now_ms)), Describe(r.decisions.at(k++)));
              break;
          }
        }
        EXPECT_GT(r.summary.completed, 0);
      }
    }
  }
}

// --seed reaches the scheduler: the random placement differs between seeds
// and repeats for one seed.
TEST(Engine, SeedReachesTheSchedulersRandomChoices) {
  auto run = [](uint64_t seed) {
    EngineOptions o;
    o.config = *ParsePolicy("placement=random");
    o.seed = seed;
    o.record_calls = true;
    std::vector<SimJob> jobs;
    for (int i = 0; i < 40; ++i) jobs.push_back(J("j" + std::to_string(i), 1, i * 1'000, 0));
    RunResult r = Sim(MakeCluster(16, 4), jobs, o);
    std::string placed;
    for (const sched::Decisions& d : r.decisions) placed += Describe(d);
    return placed;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

TEST(SameDecisionsAsServer, WorkloadExercisesPreemption) {
  auto [cluster, jobs] = RandomCase(1);
  RunResult r = Sim(cluster, jobs);
  EXPECT_GT(r.summary.preemptions, 0) << "the random case should preempt under the default policy";
}

// ---------------------------------------------------------- golden summaries --
//
// Small runs over the public traces ($DROVER_TRACES, default ../shared/traces;
// test_traces.h) and a YAML case,
// each compared with tests/testdata/sim/golden/NAME.golden: the summary's
// machine-independent fields (report.h StableSummary), not the wall clock.
// To accept new behaviour (a scheduler change moves these numbers):
//
//   DROVER_REWRITE=1 build/src/drover/sim/sim_test --gtest_filter='GoldenSummary*'
//
// and read the diff before checking it in.

struct GoldenCase {
  std::string name = {};
  std::string cluster = {};  // spec; {traces} and {golden} are replaced
  std::string workload = {};
  Mode mode = Mode::kTime;
  std::string policy = {};
  double inflate = 0;
  uint64_t seed = 1;
  int64_t stop_delay_ms = 0;
  size_t max_jobs = 0;  // > 0: only the first max_jobs jobs (a truncated slice)
};

std::string Expand(std::string spec) {
  namespace fs = std::filesystem;
  for (auto [key, dir] : {std::pair<std::string, std::string>{"{traces}", TracesDir()},
                          {"{golden}", std::string(DROVER_SIM_TESTDATA_DIR) + "/golden"}}) {
    if (size_t at = spec.find(key); at != std::string::npos) spec.replace(at, key.size(), dir);
  }
  return spec;
}

void CheckGolden(const GoldenCase& g) {
  namespace fs = std::filesystem;
  if (!fs::exists(TracesDir())) GTEST_SKIP() << NoTracesMessage();
  auto cluster = LoadCluster(Expand(g.cluster));
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto workload = LoadWorkload(Expand(g.workload));
  ASSERT_TRUE(workload.ok()) << workload.status().ToString();
  if (g.max_jobs > 0 && workload->jobs.size() > g.max_jobs) workload->jobs.resize(g.max_jobs);
  EngineOptions o;
  o.mode = g.mode;
  o.config = *ParsePolicy(g.policy);
  o.inflate = g.inflate;
  o.seed = g.seed;
  o.stop_delay_ms = g.stop_delay_ms;
  auto run = Simulate(*cluster, *workload, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  std::string text = "# cluster " + g.cluster + "\n# workload " + g.workload +
                     (g.max_jobs > 0 ? " (first " + std::to_string(g.max_jobs) + " jobs)" : "") + "\n# mode " +
                     std::string(ModeName(g.mode)) + ", policy " + PolicyString(o.config) + ", inflate " +
                     fmt::format("{:g}", g.inflate) + ", seed " + std::to_string(g.seed) + ", stop delay " +
                     std::to_string(g.stop_delay_ms) + "ms\n" + StableSummary(run->summary);
  fs::path path = fs::path(DROVER_SIM_TESTDATA_DIR) / "golden" / (g.name + ".golden");
  if (std::getenv("DROVER_REWRITE") != nullptr) {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " is missing; run with DROVER_REWRITE=1 to create it";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "the summary of " << g.name << " changed; see the comment above CheckGolden";
}

// The FGD paper's experiment (Fig. 9a): the whole default pod list on the
// 1,213 GPU nodes, extended to 1.3 x capacity, shuffled with seed 42.
TEST(GoldenSummary, Pai2023PackingInflate13Seed42) {
  CheckGolden({.name = "pai2023_packing_seed42",
               .cluster = "pai2023:{traces}/alibaba-pai-2023/openb_node_list_gpu_node.csv",
               .workload = "pai2023:{traces}/alibaba-pai-2023/openb_pod_list_default.csv",
               .mode = Mode::kPacking,
               .inflate = 1.3,
               .seed = 42});
}

TEST(GoldenSummary, Pai2023TimeSliceFairShare) {
  CheckGolden({.name = "pai2023_time_first1500_fairshare",
               .cluster = "pai2023:{traces}/alibaba-pai-2023/openb_node_list_gpu_node.csv",
               .workload = "pai2023:{traces}/alibaba-pai-2023/openb_pod_list_default.csv",
               .policy = "fair-share",
               .max_jobs = 1500});
}

TEST(GoldenSummary, ItpCluster10Time) {
  CheckGolden({.name = "itp_cluster10_time",
               .cluster = "itp:{traces}/microsoft-itp-elasticflow/raw/cluster10.csv",
               .workload = "itp:{traces}/microsoft-itp-elasticflow/raw/cluster10.csv"});
}

TEST(GoldenSummary, ItpCluster03SliceFifoSpread) {
  CheckGolden({.name = "itp_cluster03_first1200_fifo_spread",
               .cluster = "itp:{traces}/microsoft-itp-elasticflow/raw/cluster03.csv",
               .workload = "itp:{traces}/microsoft-itp-elasticflow/raw/cluster03.csv",
               .policy = "fifo,spread,no-backfill",
               .max_jobs = 1200});
}

// Tenants with guarantees, priorities and preemptible jobs (YAML inputs).
TEST(GoldenSummary, MixedFairSharePreemption) {
  CheckGolden({.name = "mixed_fairshare_stop30s",
               .cluster = "{golden}/mixed_cluster.yaml",
               .workload = "{golden}/mixed_workload.yaml",
               .policy = "fair-share",
               .stop_delay_ms = 30'000});
}

}  // namespace
}  // namespace drover::sim
