// Preemption: for a job that cannot be placed, the cheapest set of running
// jobs whose GPUs would let it run.
//
// Who may be preempted (MayPreempt): only preemptible jobs not already
// stopping and not bound in this very pass; of the same tenant, only lower
// priority; of another tenant, only a job whose removal leaves that tenant
// at or above its guarantee of each GPU model the job holds (it runs on
// borrowed GPUs), and then either for a higher priority or because the
// job's tenant is below its own guarantee of that model (quota reclaim).
// Under the LAS queue policy a job may also preempt one at a higher LAS
// level (more attained GPU service, Config::las_thresholds) and of no
// higher priority, within the same limits (Tiresias' preemptive 2D-LAS).
//
// Which set: the cheapest by a key of two parts. First the highest victim
// priority: a job of higher priority is never stopped to spare lower ones
// their work. Then the work lost: each victim's milli-GPUs times the time
// since its last checkpoint (Scheduler::SetCheckpoint), or since it started
// when none is known; then the milli-GPUs stopped.
//
// How: PreemptionSearch (preemption_search.h) finds the set: per node an
// exact search over subsets of its victims, cheapest first, under the
// lowest priority threshold at which the job may fit, then a knapsack over
// the nodes for a gang; for a gang under one switch or rack, the freest few
// domains. Exact but for those limits and for victims on several nodes
// (preemption_search.h says why). preemption_property_test checks
// minimality against an exhaustive search (single-node victims, a few
// switches).
//
// Worked example: node a runs p=10 x4 GPUs and p=20 x2 GPUs, node b runs
// p=10 x8 GPUs, all preemptible and started an hour ago. A p=100 job
// needs 6 GPUs. At threshold 10 it fits on a (2 free + the p=10 job's 4)
// and on b (8), so no set with the p=20 job is looked at. a's set loses 4
// GPU-hours, b's 8: a's p=10 job is stopped. Had it started three hours
// ago (12 GPU-hours), or b's job checkpointed a minute ago (8 GPU-minutes),
// b's job would lose less and be the one stopped.
#include <fmt/format.h>
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "drover/sched/preemption_search.h"
#include "drover/sched/scheduler_state.h"

namespace drover::sched {

int64_t State::AttainedNow(int job, int64_t now) const {
  const JobState& j = jobs[job];
  if (j.held.empty()) return j.attained;
  return j.attained + j.req.milli() * std::max<int64_t>(0, now - j.bound_ms) / kWholeGpu;
}

void State::MarkStopping(int job) {
  JobState& j = jobs[job];
  j.preempting = true;
  ++preempt_epoch;
  for (const Held& h : j.held) {
    ++nodes[h.node].version;  // its end reads as now
    CountVictim(h, -1);       // no longer a candidate victim
  }
  preemptible_priorities.erase(preemptible_priorities.find(j.req.priority));
  for (const auto& [model, milli] : MilliByModel(job)) tenants[j.tenant].stopping[model] += milli;
}

bool State::LasAhead(int job, int victim, int64_t now) const {
  if (config.queue != QueuePolicy::kLas || jobs[victim].req.priority > jobs[job].req.priority) return false;
  return LasLevel(config, AttainedNow(victim, now)) > LasLevel(config, jobs[job].attained);
}

bool State::MayPreempt(int job, int victim, const std::map<std::pair<int, std::string>, int64_t>& released,
                       int64_t now) const {
  const JobState& j = jobs[job];
  const JobState& v = jobs[victim];
  if (victim == job || !v.preemptible || v.preempting || v.held.empty() || v.bound_pass == pass) return false;
  if (v.tenant == j.tenant) return v.priority < j.priority || LasAhead(job, victim, now);
  // Another tenant's job: only while that tenant stays at or above its
  // guarantee of every model the job holds once this job (and the victims
  // chosen before it) are gone, i.e. the job runs on borrowed GPUs.
  const TenantState& jt = tenants[j.tenant];
  const bool ahead = v.priority < j.priority || LasAhead(job, victim, now);
  if (!ahead && jt.info.guaranteed_gpus.empty()) return false;  // neither ahead nor owed GPUs
  const TenantState& vt = tenants[v.tenant];
  bool reclaim = false;
  for (const auto& [model, milli] : MilliByModel(victim)) {
    auto u = vt.by_model.find(model);
    int64_t used = u == vt.by_model.end() ? 0 : u->second;
    auto st = vt.stopping.find(model);
    if (st != vt.stopping.end()) used -= st->second;  // preempted in an earlier decision, still stopping
    auto r = released.find({v.tenant, model});
    if (r != released.end()) used -= r->second;
    auto q = vt.info.guaranteed_gpus.find(model);
    int64_t guaranteed = q == vt.info.guaranteed_gpus.end() ? 0 : int64_t{q->second} * kWholeGpu;
    if (used - milli < guaranteed) return false;
    // Quota reclaim: the job's tenant is owed GPUs of this model.
    auto jq = jt.info.guaranteed_gpus.find(model);
    if (jq != jt.info.guaranteed_gpus.end() && (j.req.gpu_model.empty() || j.req.gpu_model == model)) {
      auto ju = jt.by_model.find(model);
      int64_t jused = ju == jt.by_model.end() ? 0 : ju->second;
      if (jused + j.req.milli() <= int64_t{jq->second} * kWholeGpu) reclaim = true;
    }
  }
  return reclaim || ahead;
}

bool State::HasCandidates(int job) const {
  if (preemptible_priorities.empty()) return false;
  const JobState& j = jobs[job];
  if (j.req.gpus == 0) return false;  // CPU-only work does not preempt
  if (*preemptible_priorities.begin() < j.req.priority) return true;
  // LAS: a preemptible job at or below its priority may have reached a
  // higher level (Preempt checks each; levels change only with time).
  if (config.queue == QueuePolicy::kLas &&
      LasLevel(config, j.attained) < static_cast<int>(config.las_thresholds.size()) &&
      *preemptible_priorities.begin() <= j.req.priority) {
    return true;
  }
  // Quota reclaim needs the job's tenant below a guarantee it fits in, and
  // another tenant above its own guarantee of that model.
  const TenantState& t = tenants[j.tenant];
  for (const auto& [model, gpus] : t.info.guaranteed_gpus) {
    if (!j.req.gpu_model.empty() && j.req.gpu_model != model) continue;
    auto u = t.by_model.find(model);
    int64_t used = u == t.by_model.end() ? 0 : u->second;
    if (used + j.req.milli() > int64_t{gpus} * kWholeGpu) continue;
    for (const TenantState& o : tenants) {
      if (&o == &t) continue;
      auto ou = o.by_model.find(model);
      auto oq = o.info.guaranteed_gpus.find(model);
      int64_t oused = ou == o.by_model.end() ? 0 : ou->second;
      int64_t oguaranteed = oq == o.info.guaranteed_gpus.end() ? 0 : int64_t{oq->second} * kWholeGpu;
      if (oused > oguaranteed) return true;
    }
  }
  return false;
}

void State::ClearNomination(int job) {
  JobState& j = jobs[job];
  if (!j.nomination.empty() || !j.victims.empty()) ++preempt_epoch;
  for (const auto& [node, mask] : j.nomination) {
    nodes[node].nominated &= ~mask;
    ++nodes[node].version;
  }
  j.nomination.clear();
  j.nominee = false;
  j.victims.clear();
}

void State::Nominate(int job, int victim) {
  JobState& j = jobs[job];
  ++preempt_epoch;
  j.victims.push_back(jobs[victim].req.id);
  for (const Held& h : jobs[victim].held) {
    if (h.milli != kWholeGpu) continue;
    nodes[h.node].nominated |= h.mask;
    ++nodes[h.node].version;
    j.nomination.emplace_back(h.node, h.mask);
    j.nominee = true;
  }
  j.why = Why{WhyCode::kAwaitingPreemption, -1, 0, 0, jobs[victim].held.front().node, 0};
}

bool State::KnownWithoutVictims(int job) const {
  const JobState& j = jobs[job];
  return config.queue != QueuePolicy::kLas && j.no_victims_epoch == preempt_epoch &&
         j.no_victims_reservation == reservation_sig;
}

bool State::Preempt(int job, int64_t now, Decisions* d) {
  JobState& j = jobs[job];
  ++d->preemption_searches;
  // Kept only if the search fails: a success raises the epoch.
  j.no_victims_epoch = preempt_epoch;
  j.no_victims_reservation = reservation_sig;
  const JobRequest& req = j.req;
  if (req.gpus == 0) return false;  // CPU-only work does not preempt
  PreemptionSearch search(*this, job, now);
  std::optional<PreemptionSearch::Plan> best = search.Run();
  if (!best) return false;
  if (best->victims.empty()) {
    // It fits without victims: on GPUs its placement left out (a
    // nomination, the reservation, or a switch or rack beyond those its
    // placement tries). A failure to keep unless time alone may change it:
    // only the reservation reads the clock here (MayUseReserved), and not
    // when there is none, the job holds it, the job has no estimate, or the
    // reservation starts now (signed as such: Reserve). Kept, a gang the
    // search would send where its placement does not go is not searched
    // for again every pass while nothing changes.
    const bool timeless =
        reservation_job < 0 || reservation_job == job || req.runtime_estimate_ms <= 0 || reservation_ms == now;
    if (!timeless) j.no_victims_epoch = 0;
    return false;
  }
  std::vector<Pick> picks;
  if (!search.PlaceReplicas(*best, &picks)) return false;  // cannot happen: the search fitted them so
  const std::vector<int>& chosen = best->victims;

  ClearNomination(job);
  for (int o : chosen) {
    JobState& v = jobs[o];
    MarkStopping(o);
    std::string reason;
    if (v.req.priority < j.req.priority) {
      reason = fmt::format("priority {} > {}", j.req.priority, v.req.priority);
    } else if (LasAhead(job, o, now)) {
      // Before the victim's attained service is settled by its release.
      reason = fmt::format("least attained service: level {} < {} ({:.2f} < {:.2f} GPU-hours)",
                           LasLevel(config, j.attained), LasLevel(config, AttainedNow(o, now)),
                           static_cast<double>(j.attained) / 3.6e6, static_cast<double>(AttainedNow(o, now)) / 3.6e6);
    } else {
      reason = fmt::format("tenant '{}' reclaims its guaranteed GPUs from borrowing tenant '{}'",
                           tenants[j.tenant].info.name, tenants[v.tenant].info.name);
    }
    d->preemptions.push_back(Preemption{v.req.id, req.id, std::move(reason), config.preemption_grace_ms});
    j.victims.push_back(v.req.id);
  }
  for (const Pick& p : picks) {
    nodes[p.node].nominated |= p.mask;
    ++nodes[p.node].version;
    j.nomination.emplace_back(p.node, p.mask);
    j.nominee = true;
  }
  ++preempt_epoch;
  j.why = Why{WhyCode::kAwaitingPreemption, -1, 0, now, picks.front().node, now};
  return true;
}

Status Scheduler::SetCheckpoint(const std::string& job_id, int64_t at_ms) {
  State& s = *s_;
  const int idx = s.FindJob(job_id);
  if (idx < 0 || s.jobs[idx].held.empty()) return NotFound(fmt::format("job '{}' is not bound", job_id));
  ++s.generation;  // a pass may now pick other victims
  s.jobs[idx].checkpoint_ms = at_ms;
  return Status::Ok();
}

}  // namespace drover::sched
