// Job dependencies (JobSpec.after): a job waits, PENDING and outside the
// scheduler, until each job it names has ended as its condition asks ("ok":
// SUCCEEDED; "any": any end), then it is queued like any other. One whose
// "ok" dependency ends otherwise ends FAILED ("dependency j-000003 failed")
// without running. Which dependencies are met is kept in the job's record
// (Job.after_met), written in the same batch as the end that met them, so a
// restarted server rebuilds the same waits. A job may wait only for jobs
// submitted before it, so no cycle can form.
//
// Example: j-000002 --after j-000001 waits ("waiting for j-000001 to end");
// j-000001 succeeds: its Finish records j-000001 in j-000002's after_met and
// queues j-000002 in the scheduler, in one commit.
//
// Runs on the loop thread only (JobLifecycle).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/job_lifecycle.h"

namespace drover::server {
namespace {

bool Met(const v1::Job& job, const std::string& dep) {
  return std::find(job.after_met().begin(), job.after_met().end(), dep) != job.after_met().end();
}

// Whether a job that ended in `state` meets `condition`.
bool Satisfies(v1::JobState state, const std::string& condition) {
  return condition == "any" || state == v1::JOB_STATE_SUCCEEDED;
}

std::string EndedWord(v1::JobState state) { return state == v1::JOB_STATE_CANCELLED ? "was cancelled" : "failed"; }

}  // namespace

bool JobLifecycle::Waits(const v1::Job& job) {
  return std::any_of(job.spec().after().begin(), job.spec().after().end(),
                     [&](const v1::JobDependency& d) { return !Met(job, d.job_id()); });
}

bool JobLifecycle::HoldForDependencies(const v1::Job& job, uint64_t seq, JobTable* table) {
  if (!Waits(job)) return false;
  table->waiting_.insert(seq);
  for (const v1::JobDependency& d : job.spec().after()) {
    if (!Met(job, d.job_id())) table->waiters_[*ParseJobId(d.job_id())].insert(seq);
  }
  ++table->gates_version_;
  return true;
}

bool JobLifecycle::ForgetWaits(uint64_t seq) {
  if (table_.waiting_.erase(seq) == 0) return false;
  const v1::Job& job = table_.jobs_.at(seq);
  for (const v1::JobDependency& d : job.spec().after()) {
    auto it = table_.waiters_.find(*ParseJobId(d.job_id()));
    if (it == table_.waiters_.end()) continue;
    it->second.erase(seq);
    if (it->second.empty()) table_.waiters_.erase(it);
  }
  ++table_.gates_version_;
  return true;
}

Result<std::vector<std::string>> JobLifecycle::CheckAfter(const v1::JobSpec& spec, size_t count,
                                                          const ArchivedJob& archived) const {
  std::vector<std::string> met;
  const uint64_t first = table_.next_seq_;
  for (const v1::JobDependency& d : spec.after()) {
    const uint64_t seq = *ParseJobId(d.job_id());  // NormalizeJobSpec checked it
    if (seq >= first && seq < first + count) {
      return InvalidArgument(
          count == 1 ? fmt::format("after {}: a job cannot wait for itself", d.job_id())
                     : fmt::format("after {}: names a job of this same submit; a job waits only for jobs submitted "
                                   "before it, so that no cycle can form",
                                   d.job_id()));
    }
    std::shared_ptr<const v1::Job> dep;
    if (auto it = table_.jobs_.find(seq); it != table_.jobs_.end()) {
      dep = std::shared_ptr<const v1::Job>(std::shared_ptr<const v1::Job>(), &it->second);  // not owned
    } else if (seq < first && archived) {
      DROVER_ASSIGN_OR_RETURN(dep, archived(seq));
    }
    // Another tenant's job is not found, as for any read of it.
    if (dep == nullptr || dep->spec().tenant() != spec.tenant()) {
      return NotFound(fmt::format("after {}: job '{}' not found", d.job_id(), d.job_id()));
    }
    const v1::JobState state = dep->status().state();
    if (!rpc::IsTerminal(state)) continue;
    if (!Satisfies(state, d.condition())) {
      return FailedPrecondition(fmt::format("after {}: dependency {} already {} (wait for it with {}:any)", d.job_id(),
                                            d.job_id(), EndedWord(state), d.job_id()));
    }
    met.push_back(d.job_id());
  }
  return met;
}

void JobLifecycle::DependencyEnded(const v1::Job& job) {
  auto it = table_.waiters_.find(*ParseJobId(job.id()));
  if (it == table_.waiters_.end()) return;
  const std::set<uint64_t> waiters = std::move(it->second);
  table_.waiters_.erase(it);
  ++table_.gates_version_;
  const v1::JobState state = job.status().state();
  for (uint64_t seq : waiters) {
    auto w = table_.jobs_.find(seq);
    if (w == table_.jobs_.end() || !table_.waiting_.contains(seq)) continue;
    v1::Job& waiter = w->second;
    auto d = std::find_if(waiter.spec().after().begin(), waiter.spec().after().end(),
                          [&](const v1::JobDependency& x) { return x.job_id() == job.id(); });
    if (d == waiter.spec().after().end()) continue;
    if (!Satisfies(state, d->condition())) {
      ForgetWaits(seq);
      // It never runs; and the jobs that wait for it hear of its end in turn.
      if (Status s = Reject(&waiter, fmt::format("dependency {} {}", job.id(), EndedWord(state))); !s.ok()) {
        spdlog::error("{}", s.message());
      }
      continue;
    }
    waiter.add_after_met(job.id());
    Persist(waiter);
    if (Waits(waiter)) continue;  // for another one still
    ForgetWaits(seq);
    if (Status s = Queue(waiter, seq, NowMs(), sched_, &table_); !s.ok()) {
      if (Status r = Reject(&waiter, "could not be queued: " + s.message()); !r.ok()) spdlog::error("{}", r.message());
    }
  }
}

}  // namespace drover::server
