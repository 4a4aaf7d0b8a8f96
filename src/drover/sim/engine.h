#pragma once
// The simulator's engine: a discrete-event loop over a virtual clock that
// drives sched::Scheduler the way the server's control loop does (same
// policies, same configuration keys, time in milliseconds), with no RPC,
// store or threads in the loop.
//
// Time mode. Events are job arrivals (Enqueue at submit_ms), completions
// (Remove, duration_ms after the job's latest start) and the stops of
// preempted jobs (Requeue, stop_delay_ms after the decision). All events at
// one timestamp form a batch, and after every batch comes one Schedule(now),
// as after every batch of commands in the server. A binding starts the job
// at once. A preempted job restarts from scratch when bound again (like a
// job without checkpoints); if its completion comes before its stop, it
// completes. A job with duration 0 never ends. Like the server, a job that
// can never fit the cluster (Scheduler::NeverFits) is rejected on arrival.
//
// Packing mode (the FGD paper's experiment): jobs arrive one by one and never
// finish. Each is enqueued and one Schedule runs; a job that did not bind is
// removed and counted failed. If the pass preempted jobs, the victims are
// requeued at once and the pass repeats (at most 8 times); victims that then
// find no place fail too. Virtual time stays 0.
//
// Every decision, sample and the wall-clock latency of each Schedule() go to
// a Recorder (metrics.h). The engine is the only place that reads a clock
// (steady_clock around Schedule); the scheduler stays pure.
//
// Not thread-safe; one Simulate() call owns everything it touches.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sim/metrics.h"
#include "drover/sim/workload.h"

namespace drover::sim {

std::string_view ModeName(Mode m);
Result<Mode> ParseMode(std::string_view s);  // time | packing

// The scheduler's settings from a readable list, with the keys of the
// server's scheduler: section (docs/configuration.md). Items are separated
// by commas; each is key=value or a bare word:
//   fifo|priority|fair-share|las|sjf       the queue policy
//   frag|binpack|spread|best-fit|random    the placement policy (default frag)
//   backfill, no-backfill                  backfill=on / off
//   preemption, no-preemption              preemption=on / off
//   queue=Q  placement=P  backfill=B  preemption=B  aging=D  preemption-grace=D
// Unnamed settings keep the server's defaults (sched::Config). Examples:
// "fair-share", "fair-share,spread", "queue=las,backfill=off,aging=5m".
Result<sched::Config> ParsePolicy(std::string_view spec);
// The canonical form of a Config, every key named:
// "queue=priority,placement=frag,backfill=on,preemption=on,aging=60s,preemption-grace=30s,frag-coverage=0.6".
std::string PolicyString(const sched::Config& c);

struct EngineOptions {
  Mode mode = Mode::kTime;
  sched::Config config;
  uint64_t seed = 1;
  // > 0: extend the job list to `inflate` x the cluster's GPU capacity (see
  // Inflate) before the run.
  double inflate = 0;
  // A preempted job stops this long after the decision (0: at once, in the
  // same virtual millisecond).
  int64_t stop_delay_ms = 0;
  // A preempted job keeps the work it did until it stopped (it checkpoints
  // when told to stop) and runs only the rest when it starts again. false:
  // it starts again from scratch, as a job that does not checkpoint.
  bool resume = false;
  // Every job may be preempted (traces do not say; their jobs are not
  // preemptible otherwise).
  bool all_preemptible = false;
  // > 0: an extra Schedule pass every tick_ms while jobs wait and other
  // events remain (the server also runs a pass after heartbeats; this lets
  // aging take effect between arrivals). 0: passes only after events.
  int64_t tick_ms = 0;
  // Scheduler::CheckInvariants and a cross-check of held GPUs after every
  // pass; O(cluster) per pass, for debugging.
  bool check = false;
  // Keep every call made to the scheduler and every decision (tests).
  bool record_calls = false;
};

// One call the engine made to the scheduler, for replay by another driver.
struct SchedCall {
  enum class Kind : uint8_t { kEnqueue, kRequeue, kRemove, kSchedule };
  Kind kind = Kind::kSchedule;
  int64_t now_ms = 0;
  sched::JobRequest job;  // kEnqueue: the request; otherwise only job.id
};

struct RunResult {
  std::vector<SimJob> jobs;  // what ran: after Inflate, in arrival order
  Summary summary;
  std::vector<Sample> samples;
  std::vector<JobRecord> records;           // parallel to jobs
  std::vector<SchedCall> calls;             // with record_calls
  std::vector<sched::Decisions> decisions;  // with record_calls: one per kSchedule
};

// Runs `workload` on `cluster`. kInvalidArgument when a node or tenant is
// refused by the scheduler or a job id repeats; kInternal when --check finds
// a broken invariant.
Result<RunResult> Simulate(const Cluster& cluster, const Workload& workload, const EngineOptions& options);

// The FGD experiment's workload extension: while the jobs' total GPU request
// is below `factor` x `cluster_milli`, append a copy of a job drawn at random
// from the original list (ids get a suffix "~N"); then shuffle the whole
// list. Seeded, and the same on every platform (mt19937_64 with our own
// bounded draws, not the library's distributions).
// In time mode (`keep_time`) each copy gets a submit time drawn uniformly
// within the original span, and the list is then sorted by submit time
// (stably, so the shuffle only orders jobs that arrive together); the
// arrival rate grows by the factor, the span stays.
// kInvalidArgument when no job asks for a GPU (the list could never grow).
Result<std::vector<SimJob>> Inflate(const std::vector<SimJob>& jobs, int64_t cluster_milli, double factor,
                                    uint64_t seed, bool keep_time);

}  // namespace drover::sim
