// Submits: one job, a job array or a batch, one record each, stored in one
// commit (with the call's audit entry, when it carries an AuditNote). An
// array's tasks take consecutive sequence numbers, so the array id ("a-"
// and its first task's number) finds them as a range.
// An array with max_running lets at most that many tasks into the scheduler
// at once; the others wait in its ArrayGate until one ends.

#include <fmt/format.h>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {

Status ControlLoop::Queue(const v1::Job& job, uint64_t seq, int64_t now_ms, sched::Scheduler* sched,
                          std::map<std::string, ArrayGate>* gates, std::set<uint64_t>* held) {
  const v1::ArrayTask& task = job.array();
  ArrayGate* gate = task.max_running() > 0 ? &(*gates)[task.array_id()] : nullptr;
  if (gate != nullptr && gate->active >= task.max_running()) {
    gate->held.push_back(seq);
    held->insert(seq);
    return Status::Ok();
  }
  DROVER_RETURN_IF_ERROR(sched->Enqueue(rpc::ToJobRequest(job), now_ms));
  if (gate != nullptr) ++gate->active;
  return Status::Ok();
}

void ControlLoop::TaskEnded(const v1::Job& job) {
  if (job.array().max_running() <= 0) return;
  auto it = gates_.find(job.array().array_id());
  if (it == gates_.end()) return;
  ArrayGate& gate = it->second;
  auto seq = ParseJobId(job.id());
  if (seq.ok() && held_.erase(*seq) > 0) {
    // Cancelled while held: it never counted. Its place in `held` is
    // skipped below.
  } else if (gate.active > 0) {
    --gate.active;
  }
  int64_t now_ms = NowMs();
  while (gate.active < job.array().max_running() && !gate.held.empty()) {
    uint64_t next = gate.held.front();
    gate.held.pop_front();
    if (held_.erase(next) == 0) continue;
    auto j = jobs_.find(next);
    if (j == jobs_.end() || j->second.status().state() != v1::JOB_STATE_PENDING) continue;
    if (Status s = sched_.Enqueue(rpc::ToJobRequest(j->second), now_ms); !s.ok()) {
      // Validated when it was submitted; one the scheduler refuses now ends
      // rather than waiting forever. It never ran: nothing else to undo (and
      // not Finish, which would come back here).
      v1::JobStatus* st = j->second.mutable_status();
      st->set_state(v1::JOB_STATE_FAILED);
      st->set_end_time_unix_nanos(NowNs());
      st->set_message("could not be queued: " + s.message());
      Persist(j->second);
      continue;
    }
    ++gate.active;
  }
  if (gate.active == 0 && gate.held.empty()) gates_.erase(it);
}

Result<std::vector<uint64_t>> ControlLoop::AddJobs(const std::vector<v1::JobSpec>& specs, const v1::ArraySpec* array) {
  // What each job is: the spec it has (an array repeats its one spec).
  int64_t step = array != nullptr ? std::max<int64_t>(array->step(), 1) : 1;
  int64_t count = array != nullptr ? (array->last() - array->first()) / step + 1 : static_cast<int64_t>(specs.size());
  if (count <= 0 || count > kMaxArrayTasks || specs.empty()) {
    return InvalidArgument(fmt::format("a submit holds 1 to {} jobs, not {}", kMaxArrayTasks, count));
  }
  auto spec_of = [&](int64_t i) -> const v1::JobSpec& { return array != nullptr ? specs.front() : specs[static_cast<size_t>(i)]; };
  // Checked once per distinct tenant: a batch is admitted whole or not at all.
  std::map<std::string, std::pair<const v1::JobSpec*, int64_t>> per_tenant;
  for (int64_t i = 0; i < (array != nullptr ? 1 : count); ++i) {
    const v1::JobSpec& spec = spec_of(i);
    // Refused here, alone, rather than failing the commit of a whole batch.
    if (size_t bytes = spec.ByteSizeLong(); bytes > kMaxJobSpecBytes) {
      return InvalidArgument(fmt::format(
          "job {} is {} bytes, over the {}-byte limit on one job's record: shorten its command, environment or "
          "labels (pass large inputs as files)",
          i, bytes, kMaxJobSpecBytes));
    }
    if (auto why = sched_.NeverFits(rpc::ToJobRequest("", spec))) {
      return FailedPrecondition(fmt::format("job {} can never fit on this cluster: {}", i, *why));
    }
    auto& t = per_tenant[spec.tenant()];
    if (t.first == nullptr) t.first = &spec;
    t.second += array != nullptr ? count : 1;
  }
  for (const auto& [tenant, t] : per_tenant) DROVER_RETURN_IF_ERROR(Admit(*t.first, t.second));

  uint64_t first = next_seq_;
  int64_t now = NowNs();
  std::string array_id = array != nullptr ? FormatArrayId(first) : "";
  std::vector<uint64_t> seqs;
  seqs.reserve(static_cast<size_t>(count));
  // Queue first: a job the scheduler refuses is neither stored nor given an
  // id, and the ones before it are taken back.
  auto undo = [&] {
    for (uint64_t seq : seqs) {
      sched_.Remove(FormatJobId(seq), now / 1'000'000);
      held_.erase(seq);
      jobs_.erase(seq);
    }
    if (!array_id.empty()) gates_.erase(array_id);
  };
  for (int64_t i = 0; i < count; ++i) {
    uint64_t seq = first + static_cast<uint64_t>(i);
    v1::Job& job = jobs_[seq];
    job.set_id(FormatJobId(seq));
    *job.mutable_spec() = spec_of(i);
    if (array != nullptr) {
      v1::ArrayTask* task = job.mutable_array();
      task->set_array_id(array_id);
      task->set_index(array->first() + i * step);
      task->set_max_running(array->max_running());
      task->set_tasks(count);
    }
    job.mutable_status()->set_state(v1::JOB_STATE_PENDING);
    job.mutable_status()->set_submit_time_unix_nanos(now);
    seqs.push_back(seq);
    if (Status s = Queue(job, seq, now / 1'000'000, &sched_, &gates_, &held_); !s.ok()) {
      undo();
      return count == 1 ? s : Status(s.code(), fmt::format("job {}: {}", i, s.message()));
    }
  }
  next_seq_ = first + static_cast<uint64_t>(count);
  for (uint64_t seq : seqs) Persist(jobs_.at(seq));
  return seqs;
}

std::future<Result<v1::Job>> ControlLoop::Submit(v1::JobSpec spec, std::optional<AuditNote> audit) {
  return Call<v1::Job>([this, spec = std::move(spec), audit = std::move(audit)]() -> Result<v1::Job> {
    Result<std::vector<uint64_t>> seqs = AddJobs({spec}, nullptr);
    NoteAudit(audit, seqs.ok() ? FormatJobId(seqs->front()) : "", seqs.status());
    if (!seqs.ok()) return seqs.status();
    return jobs_.at(seqs->front());
  });
}

void ControlLoop::NoteAudit(const std::optional<AuditNote>& note, std::string target, const Status& result) {
  if (!note || options_.audit == nullptr) return;
  audit_entries_.push_back(auth::AuditLog::EntryFor(note->who, note->action, std::move(target), result));
  audit_recorded_.push_back(note->recorded);
}

std::future<Result<v1::SubmitJobResponse>> ControlLoop::SubmitArray(v1::JobSpec spec, v1::ArraySpec array,
                                                                    std::optional<AuditNote> audit) {
  return Call<v1::SubmitJobResponse>([this, spec = std::move(spec), array = std::move(array),
                                      audit = std::move(audit)]() -> Result<v1::SubmitJobResponse> {
    Result<std::vector<uint64_t>> seqs = AddJobs({spec}, &array);
    if (!seqs.ok()) {
      NoteAudit(audit, "", seqs.status());
      return seqs.status();
    }
    v1::SubmitJobResponse resp;
    *resp.mutable_job() = View(jobs_.at(seqs->front()));
    resp.set_array_id(resp.job().array().array_id());
    resp.set_tasks(static_cast<int64_t>(seqs->size()));
    NoteAudit(audit, resp.array_id(), Status::Ok());
    return resp;
  });
}

std::future<Result<std::vector<v1::Job>>> ControlLoop::SubmitBatch(std::vector<v1::JobSpec> specs,
                                                                   std::optional<AuditNote> audit) {
  return Call<std::vector<v1::Job>>(
      [this, specs = std::move(specs), audit = std::move(audit)]() -> Result<std::vector<v1::Job>> {
        Result<std::vector<uint64_t>> seqs = AddJobs(specs, nullptr);
        NoteAudit(audit, seqs.ok() ? FormatJobId(seqs->front()) + ".." + FormatJobId(seqs->back()) : "",
                  seqs.status());
        if (!seqs.ok()) return seqs.status();
        std::vector<v1::Job> out;
        out.reserve(seqs->size());
        for (uint64_t seq : *seqs) out.push_back(jobs_.at(seq));
        return out;
      });
}

std::future<Result<int64_t>> ControlLoop::CancelArray(std::string array_id) {
  return Call<int64_t>([this, array_id = std::move(array_id)]() -> Result<int64_t> {
    DROVER_ASSIGN_OR_RETURN(uint64_t first, ParseArrayId(array_id));
    auto it = jobs_.lower_bound(first);
    if (it == jobs_.end() || it->second.array().array_id() != array_id) {
      return NotFound(fmt::format("array '{}' not found", array_id));
    }
    // Held tasks first, so that cancelling a running one does not let a
    // held one into the scheduler only to be cancelled a moment later.
    std::vector<v1::Job*> tasks;
    for (; it != jobs_.end() && it->second.array().array_id() == array_id; ++it) {
      if (!rpc::IsTerminal(it->second.status().state())) tasks.push_back(&it->second);
    }
    std::stable_partition(tasks.begin(), tasks.end(), [this](v1::Job* j) {
      auto seq = ParseJobId(j->id());
      return seq.ok() && held_.contains(*seq);
    });
    for (v1::Job* job : tasks) CancelOne(job);
    return static_cast<int64_t>(tasks.size());
  });
}

}  // namespace drover::server
