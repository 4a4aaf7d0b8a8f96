#pragma once
// The agent's reconciler: the desired set the server sent against the
// workloads the node knows, as a list of actions. Pure: no clock (the time
// comes in), no process, no file, no log; the workload runner
// (workload_runner.h) gathers what it observed, calls Reconcile and carries
// the actions out, in their order.
//
// Workloads are matched by their key (v1::Workload.workload_id, else the
// job id), which names the attempt ("j-000007.1@3"): a new attempt of a job
// is a new workload, and the old attempt's is stopped like any other.
//
// Worked example: desired {a, b}, observed {b running, c running, d ended
// and reported}, a fresh set: [start a, terminate c (its grace), forget d].
// The same input `grace` seconds after c's SIGTERM: [kill c, forget d].

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace drover::agent {

// How to stop a workload the server no longer wants when not with its own
// grace (v1::Stop: a preemption, a drain).
struct StopOrder {
  int grace_seconds = 0;  // SIGTERM to SIGKILL
  std::string reason;
  int checkpoint_signal = 0;         // sent first (0: none) ...
  int checkpoint_grace_seconds = 0;  // ... this long before SIGTERM
};

struct DesiredView {
  std::set<std::string> keys;              // what should run
  std::map<std::string, StopOrder> stops;  // how to stop some of what should not
  // A desired set just arrived: what it lists and the node lacks is started.
  // Otherwise (a tick, a job's end) only stops are reconciled: a workload
  // that could not be taken in (a malformed id) waits for the next set.
  bool fresh = false;
};

// What the runner knows of one workload on the node.
struct ObservedWorkload {
  std::string key;
  bool started = false;                  // its process runs or ran (started.json)
  bool exited = false;                   // its end is on record
  bool reported_ended = false;           // ... and the server was told of it
  bool restart_pending = false;          // a service waiting out its restart back-off
  bool pulling = false;                  // a container waiting for its image's pull
  std::optional<int64_t> sigterm_ns;     // when it was sent SIGTERM
  std::optional<int64_t> checkpoint_ns;  // when it was asked to checkpoint
  int grace_seconds = 10;                // its own termination grace
};

enum class ActionKind {
  kStart,           // launch the desired workload `key`
  kCheckpoint,      // send `signal` to its process group, note the time
  kTerminate,       // SIGTERM now; SIGKILL after `grace_seconds`
  kKill,            // its grace is over: SIGKILL
  kAbandonRestart,  // a service's restart no longer wanted: it ends with its last exit
  kAbandonPull,     // a container no longer wanted while its image is pulled: it ends unstarted
  kForget,          // ended, reported and not desired: its records go
};

struct Action {
  ActionKind kind = ActionKind::kStart;
  std::string key;
  int signal = 0;         // kCheckpoint
  int grace_seconds = 0;  // kTerminate, kCheckpoint (the checkpoint's grace)
  std::string reason;     // kTerminate: the stop's reason, empty for none
  bool operator==(const Action&) const = default;
};

inline Action MakeAction(ActionKind kind, std::string key, int signal = 0, int grace_seconds = 0,
                         std::string reason = "") {
  Action a;
  a.kind = kind;
  a.key = std::move(key);
  a.signal = signal;
  a.grace_seconds = grace_seconds;
  a.reason = std::move(reason);
  return a;
}

const char* ActionKindName(ActionKind k);

// Actions for `observed` (in key order) against `desired` at `now_ns`
// (wall clock, the clock of sigterm_ns and checkpoint_ns): starts first
// (in key order), then each observed workload's stop step, forgets last.
// A workload is never started while the node knows one of its key, and at
// most one action is given per workload.
std::vector<Action> Reconcile(const DesiredView& desired, const std::vector<ObservedWorkload>& observed,
                              int64_t now_ns);

}  // namespace drover::agent
