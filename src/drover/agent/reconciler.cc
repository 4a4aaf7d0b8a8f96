#include "drover/agent/reconciler.h"

#include <signal.h>

#include <algorithm>

namespace drover::agent {
namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;

// The stop step of one running workload that is not desired, if any.
std::optional<Action> StopStep(const ObservedWorkload& w, const DesiredView& desired, int64_t now_ns) {
  auto stop = desired.stops.find(w.key);
  const StopOrder* order = stop != desired.stops.end() ? &stop->second : nullptr;
  // A preemption sets its own grace (the server resends it with every
  // desired set while the job stops); otherwise the job's own applies.
  const int grace = order != nullptr ? std::max(order->grace_seconds, 0) : w.grace_seconds;
  // A preemption or a drain first asks the job to checkpoint.
  if (order != nullptr && order->checkpoint_signal > 0 && !w.sigterm_ns) {
    if (!w.checkpoint_ns) {
      return MakeAction(ActionKind::kCheckpoint, w.key, order->checkpoint_signal, order->checkpoint_grace_seconds);
    }
    if (now_ns - *w.checkpoint_ns < int64_t{order->checkpoint_grace_seconds} * kNanosPerSecond) return std::nullopt;
  }
  if (!w.sigterm_ns) {
    return MakeAction(ActionKind::kTerminate, w.key, SIGTERM, grace, order != nullptr ? order->reason : "");
  }
  if (now_ns - *w.sigterm_ns > int64_t{grace} * kNanosPerSecond) return MakeAction(ActionKind::kKill, w.key, SIGKILL);
  return std::nullopt;
}

}  // namespace

const char* ActionKindName(ActionKind k) {
  switch (k) {
    case ActionKind::kStart: return "start";
    case ActionKind::kCheckpoint: return "checkpoint";
    case ActionKind::kTerminate: return "terminate";
    case ActionKind::kKill: return "kill";
    case ActionKind::kAbandonRestart: return "abandon-restart";
    case ActionKind::kAbandonPull: return "abandon-pull";
    case ActionKind::kForget: return "forget";
  }
  return "unknown";
}

std::vector<Action> Reconcile(const DesiredView& desired, const std::vector<ObservedWorkload>& observed,
                              int64_t now_ns) {
  std::vector<Action> out;
  std::set<std::string> known;
  for (const ObservedWorkload& w : observed) known.insert(w.key);
  if (desired.fresh) {
    for (const std::string& key : desired.keys) {
      if (!known.contains(key)) out.push_back(MakeAction(ActionKind::kStart, key));
    }
  }
  std::vector<Action> forget;
  for (const ObservedWorkload& w : observed) {
    if (desired.keys.contains(w.key)) continue;
    if (w.restart_pending) {
      out.push_back(MakeAction(ActionKind::kAbandonRestart, w.key));
      continue;
    }
    if (w.pulling && !w.exited) {
      out.push_back(MakeAction(ActionKind::kAbandonPull, w.key));
      continue;
    }
    if (w.exited) {
      // The server no longer wants it and has heard how it ended.
      if (w.reported_ended) forget.push_back(MakeAction(ActionKind::kForget, w.key));
      continue;
    }
    if (!w.started) continue;  // the supervisor has not started it yet: next time
    if (auto step = StopStep(w, desired, now_ns)) out.push_back(std::move(*step));
  }
  out.insert(out.end(), forget.begin(), forget.end());
  return out;
}

}  // namespace drover::agent
