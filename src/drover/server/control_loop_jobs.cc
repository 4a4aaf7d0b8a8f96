// The job API of the control loop: submits (one job, a job array or a
// batch, one record each, stored in one commit with the call's audit entry
// when it carries an AuditNote) and cancels. The checks that belong to the
// loop's other owners (quotas, the fit on this cluster, the record's size)
// are made here; the jobs' state is the lifecycle's (job_lifecycle.h). An
// array's tasks take consecutive sequence numbers, so the array id ("a-"
// and its first task's number) finds them as a range; an array with
// max_running lets at most that many tasks into the scheduler at once.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {

Result<std::vector<uint64_t>> ControlLoop::AddJobs(const std::vector<v1::JobSpec>& specs, const v1::ArraySpec* array) {
  // What each job is: the spec it has (an array repeats its one spec).
  int64_t step = array != nullptr ? std::max<int64_t>(array->step(), 1) : 1;
  int64_t count = array != nullptr ? (array->last() - array->first()) / step + 1 : static_cast<int64_t>(specs.size());
  if (count <= 0 || count > kMaxArrayTasks || specs.empty()) {
    return InvalidArgument(fmt::format("a submit holds 1 to {} jobs, not {}", kMaxArrayTasks, count));
  }
  auto spec_of = [&](int64_t i) -> const v1::JobSpec& {
    return array != nullptr ? specs.front() : specs[static_cast<size_t>(i)];
  };
  // Checked once per distinct tenant: a batch is admitted whole or not at all.
  std::map<std::string, std::pair<const v1::JobSpec*, int64_t>> per_tenant;
  // The dependencies already met, by spec (job_dependencies.cc).
  std::vector<std::vector<std::string>> met(array != nullptr ? 1 : static_cast<size_t>(count));
  // A dependency that left for the archive (a read of it on the loop, for
  // these rare submits only).
  const JobLifecycle::ArchivedJob archived = [this](uint64_t seq) { return archiver_.Get(seq); };
  for (int64_t i = 0; i < (array != nullptr ? 1 : count); ++i) {
    const v1::JobSpec& spec = spec_of(i);
    // Refused here, alone, rather than failing the commit of a whole batch.
    if (size_t bytes = spec.ByteSizeLong(); bytes > kMaxJobSpecBytes) {
      return InvalidArgument(fmt::format(
          "job {} is {} bytes, over the {}-byte limit on one job's record: shorten its command, environment or "
          "labels (pass large inputs as files)",
          i, bytes, kMaxJobSpecBytes));
    }
    if (spec.has_container()) {
      if (Status s = tenants_.CheckMounts(spec.tenant(), spec.container()); !s.ok()) {
        return Status(s.code(),
                      count > 1 && array == nullptr ? fmt::format("job {}: {}", i, s.message()) : s.message());
      }
    }
    if (auto why = sched_.NeverFits(rpc::ToJobRequest("", spec))) {
      return FailedPrecondition(fmt::format("job {} can never fit on this cluster: {}", i, *why));
    }
    if (!spec.after().empty()) {
      auto m = lifecycle_.CheckAfter(spec, static_cast<size_t>(count), archived);
      if (!m.ok()) {
        return Status(m.status().code(), count > 1 && array == nullptr
                                             ? fmt::format("job {}: {}", i, m.status().message())
                                             : m.status().message());
      }
      met[static_cast<size_t>(i)] = std::move(*m);
    }
    auto& t = per_tenant[spec.tenant()];
    if (t.first == nullptr) t.first = &spec;
    t.second += array != nullptr ? count : 1;
  }
  for (const auto& [tenant, t] : per_tenant) DROVER_RETURN_IF_ERROR(tenants_.Admit(*t.first, t.second));

  const uint64_t first = jobs_.next_seq();
  std::string array_id = array != nullptr ? FormatArrayId(first) : "";
  std::vector<v1::Job> jobs(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    v1::Job& job = jobs[static_cast<size_t>(i)];
    *job.mutable_spec() = spec_of(i);
    for (const std::string& id : met[array != nullptr ? 0 : static_cast<size_t>(i)]) job.add_after_met(id);
    if (array != nullptr) {
      v1::ArrayTask* task = job.mutable_array();
      task->set_array_id(array_id);
      task->set_index(array->first() + i * step);
      task->set_max_running(array->max_running());
      task->set_tasks(count);
    }
  }
  return lifecycle_.Submit(std::move(jobs));
}

std::future<Result<v1::Job>> ControlLoop::Submit(v1::JobSpec spec, std::optional<AuditNote> audit) {
  return Call<v1::Job>([this, spec = std::move(spec), audit = std::move(audit)]() -> Result<v1::Job> {
    Result<std::vector<uint64_t>> seqs = AddJobs({spec}, nullptr);
    NoteAudit(audit, seqs.ok() ? FormatJobId(seqs->front()) : "", seqs.status());
    if (!seqs.ok()) return seqs.status();
    v1::Job out = jobs_.at(seqs->front());
    rpc::BlankSecrets(&out);
    return out;
  });
}

void ControlLoop::NoteAudit(const std::optional<AuditNote>& note, std::string target, const Status& result) {
  if (!note || options_.audit == nullptr) return;
  batch_.Audit(auth::AuditLog::EntryFor(note->who, note->action, std::move(target), result), note->recorded);
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
        NoteAudit(audit, seqs.ok() ? FormatJobId(seqs->front()) + ".." + FormatJobId(seqs->back()) : "", seqs.status());
        if (!seqs.ok()) return seqs.status();
        std::vector<v1::Job> out;
        out.reserve(seqs->size());
        for (uint64_t seq : *seqs) rpc::BlankSecrets(&out.emplace_back(jobs_.at(seq)));
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
    std::vector<const v1::Job*> tasks;
    for (; it != jobs_.end() && it->second.array().array_id() == array_id; ++it) {
      if (!rpc::IsTerminal(it->second.status().state())) tasks.push_back(&it->second);
    }
    std::stable_partition(tasks.begin(), tasks.end(), [this](const v1::Job* j) {
      auto seq = ParseJobId(j->id());
      return seq.ok() && jobs_.held().contains(*seq);
    });
    for (const v1::Job* job : tasks) CancelOne(*job);
    return static_cast<int64_t>(tasks.size());
  });
}

std::future<Result<v1::Job>> ControlLoop::Cancel(std::string id) {
  return Call<v1::Job>([this, id = std::move(id)]() -> Result<v1::Job> {
    const v1::Job* job = jobs_.Find(id);
    if (job == nullptr) {
      // Archived: it ended long ago (a read of the archive on the loop, for
      // this rare answer only).
      auto seq = ParseJobId(id);
      auto archived = seq.ok() ? archiver_.Get(*seq) : Result<JobReplica::JobPtr>(JobReplica::JobPtr());
      if (archived.ok() && *archived != nullptr) {
        return FailedPrecondition(
            fmt::format("job '{}' already ended ({})", id, rpc::JobStateDisplay((*archived)->status().state())));
      }
      return NotFound(fmt::format("job '{}' not found", id));
    }
    v1::JobState state = job->status().state();
    if (rpc::IsTerminal(state)) {
      return FailedPrecondition(fmt::format("job '{}' already ended ({})", id, rpc::JobStateDisplay(state)));
    }
    CancelOne(*job);
    return View(*job);
  });
}

void ControlLoop::CancelOne(const v1::Job& job) {
  v1::Job* live = lifecycle_.Find(job.id());
  Status s = live != nullptr ? lifecycle_.Cancel(live) : NotFound(fmt::format("job '{}' not found", job.id()));
  if (!s.ok()) spdlog::warn("{}", s.message());
}

}  // namespace drover::server
