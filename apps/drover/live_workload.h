#pragma once
// `drover up --simulate N --workload mixed`: keeps submitting the synthetic
// mixed workload of sim/live.h to the server, through the public JobService
// like any client, so that a new user sees a living cluster within a minute:
// GPUs warming under load, queues forming, preemptions.
//
// Each job is `sleep SECONDS` (its run time at time_scale), asks for the
// simulated GPU model, carries DROVER_SIM_LOAD (0.30..1.00: how busy the
// simulated GPUs look) and termination_grace_seconds 2. It never submits a
// shape that cannot fit the simulated nodes, waits until they have
// registered, and holds arrivals back (drops them) while more than
// max_pending jobs are pending, so it never floods the queue. One log line a
// minute says what it did.
//
// Owned by RunUp (up.cc): Start after the server and agents, Stop before them.
// Start, Stop and the destructor are for one thread; the submitting thread
// is private. Stop returns promptly (a condition variable, and an RPC in
// flight is cancelled).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "drover/common/config.h"
#include "drover/common/status.h"

namespace drover::app {

struct LiveWorkloadOptions {
  std::string kind = "mixed";           // "mixed" or "none" (Start then does nothing)
  std::string grpc_address;             // the server's, e.g. server->grpc_address()
  std::string token;                    // an admin token: it submits for several tenants
  std::string ca_pem;                   // the cluster CA when the server serves TLS ("" for plaintext)
  int nodes = 0;                        // --simulate
  int gpus_per_node = 8;                // --simulate-gpus
  std::string gpu_model = "H100 80GB";  // --simulate-model (any case)
  double time_scale = 60;               // simulated seconds per wall second: a 30-minute job sleeps 30 s
  uint64_t seed = 1;
  double target_load = 1.3;  // offered GPU demand / capacity, so queues form
  int max_pending = 0;       // hold arrivals back above this many pending jobs; 0 = 2 x nodes
};

// "mixed" or "none"; else kInvalidArgument "workload 'x' is unknown (use
// mixed or none)".
Status ValidateWorkloadKind(std::string_view kind);

// Everything Start would refuse, without starting anything (for a usage
// error before the server starts): the kind; for "mixed", at least one
// simulated node with GPUs, a GPU model the simulator knows, a time scale
// in 1..86400 and a target load in 0.05..10.
Status ValidateLiveWorkload(const LiveWorkloadOptions& options);

// The scheduler settings the mix is made for (sim::LiveScheduler), filled
// into `flags` only where the operator set nothing (empty strings): queue
// fair-share, preemption true, and the tenants prod (weight 3), research
// (weight 2), each guaranteed 30% of the simulated GPUs, and batch (weight
// 1). Call before MakeControlLoopOptions; does nothing for kind "none".
void ApplyLiveSchedulerDefaults(const LiveWorkloadOptions& options, SchedulerFlags* flags);

class LiveWorkload {
 public:
  // Validates (as ValidateLiveWorkload) and starts the submitting thread.
  static Result<std::unique_ptr<LiveWorkload>> Start(LiveWorkloadOptions options);
  ~LiveWorkload();  // Stop()
  LiveWorkload(const LiveWorkload&) = delete;
  LiveWorkload& operator=(const LiveWorkload&) = delete;

  // Ends the thread and waits for it; idempotent.
  void Stop();

  // What it did so far (for a harness or a test).
  struct Totals {
    int64_t submitted = 0;
    int64_t held_back = 0;  // arrivals dropped while the queue was long
    int64_t failed = 0;     // refused by the server or not answered
  };
  Totals totals() const;

  struct State;  // live_workload.cc

 private:
  explicit LiveWorkload(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace drover::app
