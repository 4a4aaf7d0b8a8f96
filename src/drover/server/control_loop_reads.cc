// Job reads, on the caller's thread: the live jobs from the replica the
// loop publishes after each commit (JobReplica), the finished ones that
// left for the archive from store::Archive. Only pending jobs among an
// answer cost the loop a call, for why they wait. A job moving from one to
// the other is found: the replica is read first, and a job is written to the
// archive before it leaves the replica. Node reads, likewise, from the
// snapshots the loop captures (NodeReplica) and publishes at commit.

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

// Page tokens are the last listed job's sequence number, in decimal.
Result<uint64_t> ParsePageToken(const std::string& token) {
  if (token.empty()) return std::numeric_limits<uint64_t>::max();
  uint64_t seq = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), seq);
  if (ec != std::errc() || end != token.data() + token.size() || seq == 0) {
    return InvalidArgument(fmt::format("page_token '{}' is not one this server gave out", token.substr(0, 32)));
  }
  return seq;
}

}  // namespace

bool JobMatches(const v1::ListJobsRequest& f, const v1::Job& job) {
  const v1::JobStatus& st = job.status();
  if (f.state() != v1::JOB_STATE_UNSPECIFIED && st.state() != f.state()) return false;
  if (!f.tenant().empty() && job.spec().tenant() != f.tenant()) return false;
  if (!f.array_id().empty() && job.array().array_id() != f.array_id()) return false;
  if (!f.node().empty() && rpc::LastNode(job) != f.node()) return false;
  if (f.ended_after_unix_nanos() != 0 || f.ended_before_unix_nanos() != 0) {
    if (!rpc::IsTerminal(st.state())) return false;
    if (f.ended_after_unix_nanos() != 0 && st.end_time_unix_nanos() < f.ended_after_unix_nanos()) return false;
    if (f.ended_before_unix_nanos() != 0 && st.end_time_unix_nanos() >= f.ended_before_unix_nanos()) return false;
  }
  return true;
}

std::future<Result<v1::Job>> ControlLoop::GetJob(std::string id) {
  auto promise = std::make_shared<std::promise<Result<v1::Job>>>();
  auto future = promise->get_future();
  auto seq = ParseJobId(id);
  if (!seq.ok()) {
    promise->set_value(seq.status());
    return future;
  }
  auto job = replica_.Get(*seq);
  if (job.ok() && *job == nullptr) job = archiver_.Get(*seq);  // not live (any more): finished long ago?
  if (!job.ok() || *job == nullptr) {
    promise->set_value(!job.ok() ? job.status() : NotFound(fmt::format("job '{}' not found", id)));
    return future;
  }
  AnswerWithReasons({std::move(*job)}, [promise](Result<std::vector<v1::Job>> r) {
    promise->set_value(r.ok() ? Result<v1::Job>(std::move(r->front())) : Result<v1::Job>(r.status()));
  });
  return future;
}

std::future<Result<std::vector<v1::Job>>> ControlLoop::ListJobs(v1::ListJobsRequest filter) {
  auto promise = std::make_shared<std::promise<Result<std::vector<v1::Job>>>>();
  auto future = promise->get_future();
  // An array's tasks have consecutive sequence numbers from its own.
  uint64_t from = 0;
  if (!filter.array_id().empty()) {
    auto first = ParseArrayId(filter.array_id());
    if (!first.ok()) {
      promise->set_value(first.status());
      return future;
    }
    from = *first;
  }
  auto jobs = replica_.Scan(
      from,
      [&](const v1::Job& job) { return filter.array_id().empty() || job.array().array_id() == filter.array_id(); },
      [&](const v1::Job& job) { return JobMatches(filter, job); });
  if (jobs.ok() && !filter.array_id().empty() && archiver_.enabled()) {
    // The tasks that went to the archive, in their place (live copies win).
    auto archived = archiver_.Tasks(filter.array_id(), from);
    if (!archived.ok()) {
      jobs = archived.status();
    } else if (!archived->empty()) {
      std::map<uint64_t, JobReplica::JobPtr> all;
      for (JobReplica::JobPtr& j : *archived) {
        if (JobMatches(filter, *j)) all.emplace(*ParseJobId(j->id()), std::move(j));
      }
      for (JobReplica::JobPtr& j : *jobs) all.insert_or_assign(*ParseJobId(j->id()), std::move(j));
      jobs->clear();
      for (auto& [seq, j] : all) jobs->push_back(std::move(j));
    }
  }
  if (!jobs.ok()) {
    promise->set_value(jobs.status());
    return future;
  }
  AnswerWithReasons(std::move(*jobs), [promise](Result<std::vector<v1::Job>> r) { promise->set_value(std::move(r)); });
  return future;
}

void ControlLoop::AnswerWithReasons(std::vector<JobReplica::JobPtr> jobs,
                                    std::function<void(Result<std::vector<v1::Job>>)> done) {
  std::vector<v1::Job> out;
  out.reserve(jobs.size());
  std::vector<size_t> pending;  // whose reason the board does not have
  for (const JobReplica::JobPtr& job : jobs) {
    v1::Job& copy = out.emplace_back(*job);
    rpc::BlankSecrets(&copy);  // a reader's copy: the replica's secret is not for it
    if (job->status().state() != v1::JOB_STATE_PENDING) continue;
    // Rendered since the scheduler last changed: what the loop would say.
    std::optional<std::string> reason = board_.Reason(*ParseJobId(job->id()));
    if (!reason) {
      pending.push_back(out.size() - 1);
      continue;
    }
    // The board keeps the wait class first, then the reason:
    // "CLASS\x1fREASON" (neither holds the unit separator).
    const size_t cut = reason->find('\x1f');
    if (cut != std::string::npos) {
      copy.mutable_status()->set_wait_class(reason->substr(0, cut));
      reason->erase(0, cut + 1);
    }
    copy.mutable_status()->set_message(WithOwnMessage(std::move(*reason), *job));
  }
  if (pending.empty()) {
    done(std::move(out));
    return;
  }
  // The others are the scheduler's to render, on the loop: one call for
  // them all, kept on the board for the next reader. The loop's copy may be
  // newer than the replica's; the reason is for the job as the loop has
  // it, and a job no longer pending gets none.
  auto shared = std::make_shared<std::vector<v1::Job>>(std::move(out));
  CallThen<Done>(
      [this, shared, pending = std::move(pending)]() -> Result<Done> {
        std::vector<std::pair<uint64_t, std::string>> rendered;
        rendered.reserve(pending.size());
        for (size_t i : pending) {
          v1::Job& job = (*shared)[i];
          const v1::Job* live = jobs_.Find(job.id());
          if (live == nullptr || live->status().state() != v1::JOB_STATE_PENDING) continue;
          std::string reason = WaitReason(*live);
          const std::string_view cls = WaitClass(*live);
          rendered.emplace_back(*ParseJobId(job.id()), std::string(cls) + '\x1f' + reason);
          job.mutable_status()->set_wait_class(std::string(cls));
          job.mutable_status()->set_message(WithOwnMessage(std::move(reason), *live));
        }
        board_.PutReasons(reason_epoch_, std::move(rendered));
        return Done{};
      },
      [shared, done = std::move(done)](Result<Done> r) {
        if (!r.ok()) {
          done(r.status());
        } else {
          done(std::move(*shared));
        }
      });
}

void ControlLoop::ReplaceReplica() {
  std::map<uint64_t, JobReplica::JobPtr> all;
  for (const auto& [seq, job] : jobs_) all.emplace_hint(all.end(), seq, std::make_shared<const v1::Job>(job));
  replica_.Replace(std::move(all));
  node_replica_.Replace(nodes_.CaptureAll());
  batch_.ClearTouched();
  // A state rebuilt from the store: every reason and tenant anew, and a
  // new reason epoch with the rebuilt scheduler's next change.
  board_.ClearReasons();
  reason_generation_ = sched_.generation();
  reason_gates_ = jobs_.gates_version();
  tenants_changed_ = true;
  PublishBoard({});
}

std::future<Result<v1::ListJobsResponse>> ControlLoop::ListJobsPage(v1::ListJobsRequest req) {
  auto promise = std::make_shared<std::promise<Result<v1::ListJobsResponse>>>();
  auto future = promise->get_future();
  auto page = [&]() -> Result<std::vector<JobReplica::JobPtr>> {
    DROVER_ASSIGN_OR_RETURN(uint64_t before, ParsePageToken(req.page_token()));
    uint64_t min = 0;
    if (!req.array_id().empty()) {
      DROVER_ASSIGN_OR_RETURN(min, ParseArrayId(req.array_id()));
    }
    // One more than the page, from each side: the newest page_size + 1 of
    // the union are among them, and the extra one says whether there is more.
    const size_t want = static_cast<size_t>(req.page_size()) + 1;
    // Live first, then the archive: a job archived in between is found there.
    DROVER_ASSIGN_OR_RETURN(std::vector<JobReplica::JobPtr> live,
                            replica_.ScanBack(before, min, want, [&](const v1::Job& j) { return JobMatches(req, j); }));
    std::map<uint64_t, JobReplica::JobPtr, std::greater<>> merged;
    for (JobReplica::JobPtr& j : live) {
      auto seq = ParseJobId(j->id());
      if (seq.ok()) merged.emplace(*seq, std::move(j));
    }
    bool archived_can_match = req.state() == v1::JOB_STATE_UNSPECIFIED || rpc::IsTerminal(req.state());
    if (archiver_.enabled() && archived_can_match) {
      store::ArchiveQuery q;
      q.before_seq = before;
      q.min_seq = min;
      if (req.state() != v1::JOB_STATE_UNSPECIFIED) q.state = req.state();
      q.tenant = req.tenant();
      q.node = req.node();
      q.group = req.array_id();
      q.ended_after_ns = req.ended_after_unix_nanos();
      q.ended_before_ns = req.ended_before_unix_nanos();
      q.limit = static_cast<int>(want);
      DROVER_ASSIGN_OR_RETURN(std::vector<JobReplica::JobPtr> archived, archiver_.Query(q));
      for (JobReplica::JobPtr& j : archived) {
        auto seq = ParseJobId(j->id());
        if (seq.ok()) merged.emplace(*seq, std::move(j));  // live wins: listed once
      }
    }
    std::vector<JobReplica::JobPtr> out;
    for (auto& [seq, job] : merged) {
      if (out.size() == want) break;
      out.push_back(std::move(job));
    }
    return out;
  }();
  if (!page.ok()) {
    promise->set_value(page.status());
    return future;
  }
  const size_t size = static_cast<size_t>(req.page_size());
  std::string next;
  if (page->size() > size) {
    page->resize(size);
    auto seq = ParseJobId(page->back()->id());
    if (seq.ok()) next = std::to_string(*seq);
  }
  AnswerWithReasons(std::move(*page), [promise, next](Result<std::vector<v1::Job>> r) {
    if (!r.ok()) {
      promise->set_value(r.status());
      return;
    }
    v1::ListJobsResponse resp;
    for (v1::Job& j : *r) *resp.add_jobs() = std::move(j);
    resp.set_next_page_token(next);
    promise->set_value(std::move(resp));
  });
  return future;
}

// ---- nodes ----

std::future<Result<v1::Node>> ControlLoop::GetNode(std::string name) {
  std::promise<Result<v1::Node>> promise;
  Result<NodeReplica::SnapshotPtr> node = node_replica_.Get(name);
  if (!node.ok()) {
    promise.set_value(node.status());
  } else if (*node == nullptr) {
    promise.set_value(NotFound(fmt::format("node '{}' not found", name)));
  } else {
    promise.set_value(RenderNode(**node));
  }
  return promise.get_future();
}

std::future<Result<std::vector<v1::Node>>> ControlLoop::ListNodes() {
  std::promise<Result<std::vector<v1::Node>>> promise;
  Result<std::vector<NodeReplica::SnapshotPtr>> nodes = node_replica_.List();
  if (!nodes.ok()) {
    promise.set_value(nodes.status());
  } else {
    std::vector<v1::Node> out;
    out.reserve(nodes->size());
    for (const NodeReplica::SnapshotPtr& n : *nodes) out.push_back(RenderNode(*n));
    promise.set_value(std::move(out));
  }
  return promise.get_future();
}

}  // namespace drover::server
