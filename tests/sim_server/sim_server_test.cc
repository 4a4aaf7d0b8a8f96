// The simulator against the real server: one workload replayed by
// sim::Simulate and by the server's ControlLoop (a real SQLite store, a
// ManualClock and fake agents, as in control_loop_test_fixture.h) must get
// the same scheduling decisions, pass by pass.
//
// Why here: sim may not link server (cmake/CheckLayers.cmake), so
// src/drover/sim/engine_test.cc (SameDecisionsAsServer) checks the engine
// against a restatement of the control loop's rules. tests/ may link both,
// so this runs the two real codes.
//
// Driving the server. GateStore (gate_store.h) holds the loop thread in each
// commit while the test sets the ManualClock and queues the next batch, so
// the server's batches, and so its passes, are the simulator's. The fake
// agents do what the simulator assumes agents do: a bound job exits with
// code 0 `duration` after its binding pass; a preempted one is gone (exit by
// SIGTERM) `stop delay` after the decision unless it exits first. They act
// only on what the server decided, read from the job records it commits,
// never on what the simulator decided. Events at one time go in the
// simulator's order: arrivals first (workload order), then exits and stops
// in the order they were caused (a pass's bindings, then its preemptions).
// Setup (registrations, sessions) runs before the first arrival.
//
// Compared, for every pass in order: its time; the events before it, in
// order (the simulator's Enqueue, Remove and Requeue calls; the server's
// Submit, clean exit and SIGTERM exit, which the loop turns into those
// calls); every binding in the scheduler's order (job, then per replica the
// node, the GPU indices and, for a share, its milli-GPU and reserved memory);
// every preemption in order (victim, the job it yields to, the reason and the
// grace in seconds). At the end: which jobs completed and which still wait.
// Jobs are named by submission order (#01 is the first): the server numbers
// them j-000001..., the simulator keeps the workload's ids ("nlp-7"), which
// sort differently on purpose.
//
// Not compared or not covered:
//  - the grace: the server sends min(job's termination grace, ceil(policy
//    grace)); every job here has 60 s, above the policies' 30 s, so both
//    sides read ceil(policy grace). The clamp itself is not exercised.
//  - whole-GPU placements carry no memory: the server stores it for shares
//    only (rpc::SetAllocation), so it is compared for shares only.
//  - passes the server runs that the simulator has no event for: RUNNING
//    reports, heartbeats, API reads (GetJob, ListJobs) and registrations
//    each make a batch and a pass on the server. The fake agents send no
//    RUNNING reports and the test reads the store, not the API, while jobs
//    run; see docs/simulator.md (--tick) for what such passes may change.
//  - how the server's threads group concurrent commands: here the grouping is
//    the simulator's, enforced by GateStore.
//  - commit failures, recovery, node loss, cancels, NeverFits rejections (the
//    workload fits; a rejected job would shift the server's ids), topology
//    requirements, selectors and several GPU models.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop_test_fixture.h"
#include "drover/sim/engine.h"
#include "sim_server/gate_store.h"

namespace drover::server::testing {
namespace {

constexpr int64_t kT0Ms = 1'700'000'000'000;  // the run's start, Unix ms, on both sides
constexpr int kNodes = 3;
constexpr int kGpusPerNode = 8;
constexpr const char* kModel = "H100 80GB";  // the fixture's Inventory()
constexpr int kGraceSeconds = 60;            // every job's termination grace
constexpr int64_t kShareMemory = int64_t{16} << 30;

// ------------------------------------------------------------- the workload --

struct JobDesc {
  std::string tenant;
  int priority = 0;
  int gpus = 1;
  int milli = sched::kWholeGpu;  // < kWholeGpu: a share of one GPU
  int replicas = 1;
  bool preemptible = false;
  int64_t estimate_s = 0;
  int64_t cpu_milli = 0;     // host resources per replica, against 64 cores
  int64_t memory_bytes = 0;  // and 512 GiB per node
  int64_t submit_ms = 0;     // after kT0Ms
  int64_t duration_ms = 0;
};

std::string NodeName(int n) { return fmt::format("gpu-{:02}", n + 1); }

std::vector<sched::TenantInfo> Tenants() {
  return {{"vision", 2.0, {{kModel, 8}}, -1}, {"nlp", 1.0, {{kModel, 4}}, 12}};
}

// 48 jobs arriving over about 100 s on 24 GPUs: shares, 1-8 whole GPUs, two
// 2 x 4 gangs, priorities 0 and 100, preemptible low-priority jobs, two
// tenants with guarantees (quota reclaim) and runtime estimates on half.
// Each asks for 2-12 cores and 16-128 GiB per replica (their own draws, so
// the GPU workload is the one this seed was chosen for): eight 1-GPU jobs
// ask 56 cores and 576 GiB on average, so host resources decide some
// placements (checked below).
// The first job arrives alone: GateStore can only hold the loop once it has
// committed something, so the first batch must be a single command.
std::vector<JobDesc> Workload() {
  // Our own bounded draws (not the standard distributions, which differ
  // between libraries): the same workload everywhere.
  std::mt19937_64 rng(3);  // a seed whose run shows every kind of decision (checked below)
  auto draw = [&rng](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto chance = [&draw](int percent) { return draw(0, 99) < percent; };
  std::mt19937_64 host_rng(17);
  std::vector<JobDesc> jobs;
  int64_t t = 1000;
  for (int i = 0; i < 48; ++i) {
    JobDesc d;
    if (i == 1) t += 2000;
    if (i > 1) t += draw(0, 4) * 1000;  // some arrive together
    d.submit_ms = t;
    d.tenant = chance(50) ? "vision" : "nlp";
    d.priority = chance(30) ? 100 : 0;
    d.preemptible = d.priority == 0 && chance(70);
    int64_t shape = draw(0, 8);
    if (shape <= 2) {
      d.milli = static_cast<int>(draw(1, 3)) * 250;
    } else {
      d.gpus = std::vector<int>{1, 1, 1, 2, 4, 8}[static_cast<size_t>(shape - 3)];
    }
    if (i == 12 || i == 31) {  // gangs
      d.gpus = 4;
      d.milli = sched::kWholeGpu;
      d.replicas = 2;
    }
    d.duration_ms = draw(15, 90) * 1000;
    if (chance(50)) d.estimate_s = d.duration_ms / 1000 + draw(0, 20);
    d.cpu_milli = static_cast<int64_t>(host_rng() % 6 + 1) * 2000;
    d.memory_bytes = static_cast<int64_t>(host_rng() % 8 + 1) * (int64_t{16} << 30);
    jobs.push_back(d);
  }
  return jobs;
}

v1::JobSpec ToSpec(const JobDesc& d) {
  v1::JobSpec spec;
  spec.set_tenant(d.tenant);
  spec.set_priority(d.priority);
  spec.set_gpus(d.gpus);
  spec.set_replicas(d.replicas);
  if (d.milli < sched::kWholeGpu) {
    spec.set_gpu_milli(d.milli);
    spec.set_gpu_memory_bytes(kShareMemory);
  }
  spec.set_preemptible(d.preemptible);
  spec.set_runtime_estimate_seconds(d.estimate_s);
  spec.set_cpu_millis(d.cpu_milli);
  spec.set_memory_bytes(d.memory_bytes);
  spec.set_termination_grace_seconds(kGraceSeconds);
  spec.add_command("train");
  Status s = rpc::NormalizeJobSpec(&spec);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return spec;
}

// The simulator's job, built as a loader would build it (not through rpc).
sim::SimJob ToSimJob(const JobDesc& d, size_t i) {
  sim::SimJob j;
  j.req.id = fmt::format("{}-{}", d.tenant, i);
  j.req.tenant = d.tenant;
  j.req.priority = d.priority;
  j.req.gpus = d.gpus;
  j.req.gpu_milli = d.milli;
  j.req.gpu_memory_bytes = d.milli < sched::kWholeGpu ? kShareMemory : 0;
  j.req.replicas = d.replicas;
  j.req.preemptible = d.preemptible;
  j.req.runtime_estimate_ms = d.estimate_s * 1000;
  j.req.cpu_milli = d.cpu_milli;
  j.req.memory_bytes = d.memory_bytes;
  j.submit_ms = kT0Ms + d.submit_ms;
  j.duration_ms = d.duration_ms;
  return j;
}

// Every field the scheduler reads, for the precondition checks.
std::string RequestFields(const sched::JobRequest& r) {
  return fmt::format("{} p{} {}x{}@{}/{} model '{}' {} vendor '{}' sel {} cpu {} mem {} topo {} est {} pre {}",
                     r.tenant, r.priority, r.replicas, r.gpus, r.gpu_milli, r.gpu_memory_bytes, r.gpu_model,
                     fmt::join(r.gpu_models, ","), r.gpu_vendor, r.node_selector.size(), r.cpu_milli, r.memory_bytes,
                     sched::TopologyName(r.topology), r.runtime_estimate_ms, r.preemptible);
}

std::string NodeFields(const sched::NodeInfo& n) {
  std::string out = fmt::format("{} cpu {} mem {} labels {} links {}:", n.name, n.cpu_milli, n.memory_bytes,
                                n.labels.size(), n.links.size());
  for (const sched::GpuInfo& g : n.gpus) {
    out += fmt::format(" [{} {} {} {} {} numa {}]", g.index, g.vendor, g.model, g.memory_bytes, g.healthy, g.numa_node);
  }
  return out;
}

// A node as the simulator's cluster holds it (the server's comes from
// SimServerTest::NodeInventory).
sched::NodeInfo SimNode(int n) {
  sched::NodeInfo node;
  node.name = NodeName(n);
  node.schedulable = true;
  node.cpu_milli = 64000;  // the fixture's Inventory(): the server places by host capacity too
  node.memory_bytes = int64_t{512} << 30;
  for (int i = 0; i < kGpusPerNode; ++i) node.gpus.push_back({i, "nvidia", kModel, int64_t{80} << 30, true, i / 4});
  return node;
}

// ------------------------------------------------------------ the passes --

// One scheduling pass as both sides are compared: jobs by label (#01...).
struct Pass {
  int64_t at_ms = 0;  // after kT0Ms
  std::vector<std::string> events;
  std::vector<std::string> bindings;
  std::vector<std::string> preemptions;
};

std::string Label(size_t index) { return fmt::format("#{:02}", index + 1); }

std::string Show(const Pass& p) {
  return fmt::format("t=+{}ms events [{}] bind [{}] preempt [{}]", p.at_ms, fmt::join(p.events, ", "),
                     fmt::join(p.bindings, ", "), fmt::join(p.preemptions, ", "));
}

std::string ShowBinding(const std::string& label, const sched::Binding& b) {
  std::vector<std::string> replicas;
  for (const sched::Placement& p : b.replicas) {
    std::string r = fmt::format("{}:{}", p.node, fmt::join(p.gpu_indices, "."));
    if (p.gpu_milli < sched::kWholeGpu) r += fmt::format("@{}m/{}B", p.gpu_milli, p.gpu_memory_bytes);
    replicas.push_back(r);
  }
  return fmt::format("{} {}", label, fmt::join(replicas, "+"));
}

std::string ShowPreemption(const std::string& victim, const std::string& for_job, const std::string& reason,
                           int64_t grace_s) {
  return fmt::format("{} for {} ({}) grace {}s", victim, for_job, reason, grace_s);
}

// The simulator's passes, from its call log.
std::vector<Pass> SimPasses(const sim::RunResult& r) {
  std::map<std::string, std::string> label;
  for (size_t i = 0; i < r.jobs.size(); ++i) label[r.jobs[i].req.id] = Label(i);
  std::vector<Pass> out;
  Pass next;
  size_t k = 0;
  for (const sim::SchedCall& c : r.calls) {
    switch (c.kind) {
      case sim::SchedCall::Kind::kEnqueue: next.events.push_back("submit " + label.at(c.job.id)); break;
      case sim::SchedCall::Kind::kRemove: next.events.push_back("exit " + label.at(c.job.id)); break;
      case sim::SchedCall::Kind::kRequeue: next.events.push_back("gone " + label.at(c.job.id)); break;
      case sim::SchedCall::Kind::kSchedule: {
        const sched::Decisions& d = r.decisions.at(k++);
        next.at_ms = c.now_ms - kT0Ms;
        for (const sched::Binding& b : d.bindings) next.bindings.push_back(ShowBinding(label.at(b.job_id), b));
        for (const sched::Preemption& p : d.preemptions) {
          next.preemptions.push_back(
              ShowPreemption(label.at(p.job_id), label.at(p.for_job), p.reason, (p.grace_ms + 999) / 1000));
        }
        out.push_back(std::move(next));
        next = Pass();
        break;
      }
    }
  }
  return out;
}

// The first pass where the two differ, with the passes before it; empty when
// they agree.
std::string FirstDifference(const std::vector<Pass>& sim, const std::vector<Pass>& server) {
  for (size_t i = 0; i < std::max(sim.size(), server.size()); ++i) {
    std::string a = i < sim.size() ? Show(sim[i]) : "(no pass)";
    std::string b = i < server.size() ? Show(server[i]) : "(no pass)";
    if (a == b) continue;
    std::string out;
    for (size_t j = i >= 3 ? i - 3 : 0; j < i; ++j) out += fmt::format("same, pass {}: {}\n", j, Show(sim[j]));
    out += fmt::format("pass {} of {} (simulator) / {} (server) differs:\n  simulator: {}\n  server:    {}\n", i,
                       sim.size(), server.size(), a, b);
    return out;
  }
  return "";
}

// What one commit of the server decided: the records that move a job to
// BOUND (a binding) or from holding GPUs to PREEMPTING (a preemption), in
// commit order. The loop writes a batch's command records first, then the
// pass's preemptions, then its bindings (control_loop.cc AfterBatch); a
// record is judged against the job's previous one (`stored`), so a gang
// replica's exit, which rewrites a PREEMPTING job, is no new preemption.
struct Committed {
  struct Preempted {
    size_t job;
    std::string for_job;  // label
    std::string reason;
    int64_t grace_s;
  };
  std::vector<std::pair<size_t, sched::Binding>> bindings;
  std::vector<Preempted> preemptions;
};

Committed ReadDecisions(const std::vector<v1::Job>& written, size_t jobs, std::map<std::string, v1::JobState>* stored) {
  Committed out;
  for (const v1::Job& job : written) {
    auto it = stored->find(job.id());
    v1::JobState before = it == stored->end() ? v1::JOB_STATE_UNSPECIFIED : it->second;
    v1::JobState after = job.status().state();
    (*stored)[job.id()] = after;
    auto seq = ParseJobId(job.id());
    if (!seq.ok() || *seq < 1 || *seq > jobs) {
      ADD_FAILURE() << "unexpected job record " << job.id();
      continue;
    }
    size_t j = *seq - 1;
    if (after == v1::JOB_STATE_BOUND && before != v1::JOB_STATE_BOUND) {
      out.bindings.emplace_back(j, rpc::ToBinding(job));
    } else if (after == v1::JOB_STATE_PREEMPTING && before != v1::JOB_STATE_PREEMPTING) {
      const v1::JobStatus& st = job.status();
      auto for_seq = ParseJobId(st.preempted_for());
      std::string prefix = "preempted for " + st.preempted_for() + ": ";  // ApplyPreemption's message
      std::string reason = st.message();
      if (reason.starts_with(prefix)) reason.erase(0, prefix.size());
      out.preemptions.push_back(
          {j, for_seq.ok() ? Label(*for_seq - 1) : "?" + st.preempted_for(), reason, st.stop_grace_seconds()});
    }
  }
  return out;
}

// ---------------------------------------------------------------- the test --

struct Case {
  std::string policy;  // sim::ParsePolicy
  int64_t stop_delay_ms = 0;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << "policy '" << c.policy << "', stop delay " << c.stop_delay_ms << "ms";
}

class SimServerTest : public ControlLoopTest {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    ControlLoopTest::SetUp();
  }
  void TearDown() override {
    if (gate_) gate_->Disarm();  // a loop held in a commit could not stop
    ControlLoopTest::TearDown();
    gate_.reset();
    spdlog::set_level(spdlog::level::info);
  }

  // What an agent registers: 8 GPUs, two NUMA nodes of 4.
  static v1::RegisterRequest NodeInventory(int n) {
    v1::RegisterRequest req = Inventory(NodeName(n), kGpusPerNode);
    for (v1::Gpu& g : *req.mutable_gpus()) g.set_numa_node(g.index() / 4);
    return req;
  }

  static sim::RunResult Simulate(const std::vector<JobDesc>& jobs, const sched::Config& config, int64_t stop_delay_ms) {
    sim::Cluster cluster;
    cluster.name = "sim-server";
    for (int n = 0; n < kNodes; ++n) cluster.nodes.push_back(SimNode(n));
    cluster.tenants = Tenants();
    sim::Workload workload;
    for (size_t i = 0; i < jobs.size(); ++i) workload.jobs.push_back(ToSimJob(jobs[i], i));
    sim::EngineOptions o;
    o.config = config;
    o.stop_delay_ms = stop_delay_ms;
    o.record_calls = true;
    o.check = true;
    auto r = sim::Simulate(cluster, workload, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : sim::RunResult();
  }

  // Runs `jobs` through a fresh ControlLoop with `config` (seeded as the
  // simulator seeds it) and returns its passes; `ends` gets the final state
  // of each job as stored.
  std::vector<Pass> Serve(const std::vector<JobDesc>& jobs, sched::Config config, int64_t stop_delay_ms,
                          std::vector<v1::JobState>* ends) {
    config.seed = sim::EngineOptions().seed;
    loop_->Stop();
    loop_.reset();
    options_.scheduler = config;
    options_.tenants = Tenants();
    gate_ = std::make_unique<GateStore>(store_.get(), kDeadline);
    clock_.Set(FromUnixNanos(kT0Ms * 1'000'000));
    StartLoop(gate_.get());
    for (int n = 0; n < kNodes; ++n) {
      Must(loop_->RegisterNode(NodeInventory(n)));
      sinks_.push_back(std::make_shared<FakeSink>());
      Open(NodeName(n), sinks_.back());
    }
    gate_->Arm();

    enum Kind { kArrive, kExit, kGone };
    struct Event {
      int64_t at_ms;
      uint64_t seq;
      Kind kind;
      size_t job;
      int run;
      bool operator>(const Event& e) const { return std::tie(at_ms, seq) > std::tie(e.at_ms, e.seq); }
    };
    enum State { kFuture, kPending, kRunning, kStopping, kDone };
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
    uint64_t seq = 0;
    for (size_t j = 0; j < jobs.size(); ++j) events.push({jobs[j].submit_ms, seq++, kArrive, j, 0});
    std::vector<State> state(jobs.size(), kFuture);
    std::vector<int> run(jobs.size(), 0);
    std::vector<sched::Binding> where(jobs.size());
    std::map<std::string, v1::JobState> stored;  // the last record of each job
    std::vector<std::future<Result<v1::Job>>> submitted;
    std::vector<Pass> passes;
    bool held = false;

    // One workload status per replica, as the node's agent would send it.
    auto report = [&](size_t j, int exit_code, int signal) {
      const sched::Binding& b = where[j];
      for (size_t r = 0; r < b.replicas.size(); ++r) {
        v1::StatusReport rep;
        v1::WorkloadStatus* ws = rep.add_workloads();
        ws->set_job_id(b.job_id);
        // The attempt is the job's run count: the server numbers each binding.
        ws->set_workload_id(
            rpc::WorkloadId(b.job_id, static_cast<int>(r), static_cast<int>(b.replicas.size()), run[j]));
        ws->set_state(v1::WORKLOAD_STATE_EXITED);
        ws->set_exit_code(exit_code);
        ws->set_signal(signal);
        ws->set_start_time_unix_nanos(ToUnixNanos(clock_.Now()) - 1);
        ws->set_end_time_unix_nanos(ToUnixNanos(clock_.Now()));
        loop_->HandleStatus(b.replicas[r].node, rep);
      }
    };

    while (!events.empty()) {
      int64_t now = events.top().at_ms;
      clock_.Set(FromUnixNanos((kT0Ms + now) * 1'000'000));
      Pass pass;
      pass.at_ms = now;
      while (!events.empty() && events.top().at_ms == now) {
        Event e = events.top();
        events.pop();
        if (e.kind == kArrive) {
          submitted.push_back(loop_->Submit(ToSpec(jobs[e.job])));
          state[e.job] = kPending;
          pass.events.push_back("submit " + Label(e.job));
        } else if (e.run != run[e.job]) {
          continue;  // the exit or stop of an earlier run
        } else if (e.kind == kExit && (state[e.job] == kRunning || state[e.job] == kStopping)) {
          report(e.job, 0, 0);
          state[e.job] = kDone;
          pass.events.push_back("exit " + Label(e.job));
        } else if (e.kind == kGone && state[e.job] == kStopping) {
          report(e.job, 0, 15);  // SIGTERM
          state[e.job] = kPending;
          pass.events.push_back("gone " + Label(e.job));
        }
      }
      if (pass.events.empty()) continue;  // only stale events: no batch
      if (!held && pass.events.size() != 1) {
        // Until the first commit the loop is not held: a batch of several
        // commands could be split. (Setup wrote its last record before Arm,
        // and SessionOpened writes none, so no setup commit is held.)
        ADD_FAILURE() << "the first batch must be one command (GateStore holds the loop only after a commit)";
        break;
      }
      if (held) gate_->Release();
      std::optional<std::vector<v1::Job>> written = gate_->AwaitHeld();
      if (!written) {
        ADD_FAILURE() << "the server committed nothing for the batch at t=+" << now << "ms: " << Show(pass);
        break;
      }
      held = true;
      Committed c = ReadDecisions(*written, jobs.size(), &stored);
      for (const auto& [j, b] : c.bindings) {
        where[j] = b;
        pass.bindings.push_back(ShowBinding(Label(j), b));
        state[j] = kRunning;
        ++run[j];
        events.push({now + jobs[j].duration_ms, seq++, kExit, j, run[j]});
      }
      // After the pass's exits, as the simulator queues its stops.
      std::vector<std::pair<size_t, int>> stops;
      for (const Committed::Preempted& p : c.preemptions) {
        pass.preemptions.push_back(ShowPreemption(Label(p.job), p.for_job, p.reason, p.grace_s));
        if (state[p.job] != kRunning) continue;
        state[p.job] = kStopping;
        stops.push_back({p.job, run[p.job]});
      }
      for (auto [j, r] : stops) events.push({now + stop_delay_ms, seq++, kGone, j, r});
      passes.push_back(std::move(pass));
    }
    gate_->Disarm();
    for (size_t i = 0; i < submitted.size(); ++i) {
      v1::Job job = Must(std::move(submitted[i]));
      EXPECT_EQ(job.id(), FormatJobId(i + 1)) << "ids are assumed to follow submission order";
    }
    ends->assign(jobs.size(), v1::JOB_STATE_UNSPECIFIED);
    for (const v1::Job& job : StoredJobs()) {
      auto seqno = ParseJobId(job.id());
      if (seqno.ok() && *seqno >= 1 && *seqno <= jobs.size()) (*ends)[*seqno - 1] = job.status().state();
    }
    // The precondition that both sides saw the same cluster.
    auto nodes = store_->Range("/nodes/");
    EXPECT_TRUE(nodes.ok());
    for (size_t n = 0; nodes.ok() && n < nodes->kvs.size(); ++n) {
      v1::Node node;
      EXPECT_TRUE(node.ParseFromString(nodes->kvs[n].value));
      EXPECT_EQ(NodeFields(rpc::ToNodeInfo(node, true)), NodeFields(SimNode(static_cast<int>(n))));
    }
    return passes;
  }

  // Runs both sides; returns the first difference (empty: none).
  std::string Compare(const std::vector<JobDesc>& jobs, const sched::Config& sim_config,
                      const sched::Config& server_config, int64_t stop_delay_ms, sim::RunResult* sim_out = nullptr) {
    sim::RunResult r = Simulate(jobs, sim_config, stop_delay_ms);
    std::vector<v1::JobState> ends;
    std::vector<Pass> server = Serve(jobs, server_config, stop_delay_ms, &ends);
    std::string diff = FirstDifference(SimPasses(r), server);
    if (diff.empty() && r.records.size() == jobs.size()) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        bool sim_done = r.records[j].end == sim::JobEnd::kCompleted;
        bool server_done = ends[j] == v1::JOB_STATE_SUCCEEDED;
        if (sim_done != server_done) {
          diff += fmt::format("{} completed: simulator {}, server {}\n", Label(j), sim_done, server_done);
        }
      }
    }
    if (sim_out != nullptr) *sim_out = std::move(r);
    return diff;
  }

  std::unique_ptr<GateStore> gate_;
  std::vector<std::shared_ptr<FakeSink>> sinks_;
};

class SimServerPolicyTest : public SimServerTest, public ::testing::WithParamInterface<Case> {};

TEST_P(SimServerPolicyTest, SameDecisions) {
  std::vector<JobDesc> jobs = Workload();
  // Preconditions: both sides get the same requests.
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(RequestFields(rpc::ToJobRequest("", ToSpec(jobs[i]))), RequestFields(ToSimJob(jobs[i], i).req)) << i;
  }
  auto config = sim::ParsePolicy(GetParam().policy);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  sim::RunResult r;
  std::string diff = Compare(jobs, *config, *config, GetParam().stop_delay_ms, &r);
  EXPECT_TRUE(diff.empty()) << diff;
  EXPECT_EQ(r.summary.rejected, 0);
  EXPECT_GT(r.summary.completed, 0);
  if (GetParam().policy.empty()) {
    // The default policy must exercise what this test is about.
    int reclaims = 0, raises = 0, gangs = 0, shares = 0;
    for (const sched::Decisions& d : r.decisions) {
      for (const sched::Preemption& p : d.preemptions) {
        ++(p.reason.find("reclaims") != std::string::npos ? reclaims : raises);
      }
      for (const sched::Binding& b : d.bindings) {
        gangs += b.replicas.size() > 1;
        shares += b.replicas.front().gpu_milli < sched::kWholeGpu;
      }
    }
    EXPECT_GT(reclaims, 0) << "no quota reclaim";
    EXPECT_GT(raises, 0) << "no preemption for priority";
    EXPECT_GT(gangs, 0) << "no gang bound";
    EXPECT_GT(shares, 0) << "no share bound";
    // Host resources decide something: without them the simulator decides
    // differently.
    std::vector<JobDesc> gpu_only = jobs;
    for (JobDesc& d : gpu_only) d.cpu_milli = d.memory_bytes = 0;
    EXPECT_NE(FirstDifference(SimPasses(r), SimPasses(Simulate(gpu_only, *config, GetParam().stop_delay_ms))), "")
        << "CPU and memory requests changed no decision";
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, SimServerPolicyTest,
                         ::testing::Values(Case{"", 0}, Case{"", 3'000}, Case{"fair-share,spread", 3'000},
                                           Case{"fifo,no-backfill", 0}, Case{"las", 3'000},
                                           Case{"sjf,no-preemption", 0}, Case{"fair-share,random", 0},
                                           // aging matters in this workload only when this short
                                           Case{"priority,no-backfill,aging=200ms", 3'000}),
                         [](const ::testing::TestParamInfo<Case>& test) {
                           std::string name = test.param.policy.empty() ? "defaults" : test.param.policy;
                           std::replace_if(
                               name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return fmt::format("{}_stop{}ms", name, test.param.stop_delay_ms);
                         });

// The comparison can fail: a server placing by spread while the simulator
// packs must be caught.
TEST_F(SimServerTest, CatchesADifferentPlacementOnTheServer) {
  sched::Config sim_config;
  sched::Config server_config;
  server_config.placement = sched::PlacementPolicy::kSpread;
  std::string diff = Compare(Workload(), sim_config, server_config, 0);
  EXPECT_NE(diff, "");
}

}  // namespace
}  // namespace drover::server::testing
