// Bounded state: finished jobs leave the store and the loop's memory for
// the archive (store::Archive, its own SQLite file) once they have been
// finished for options_.archive_after, and clients page through live and
// archived jobs together.
//
// The move: the loop picks the due jobs and hands copies to archiver_,
// which writes them to the archive (durably); then the loop deletes them
// from the store in an ordinary batch and, once that commits, from the
// replica. A crash between the two writes leaves a job in both places:
// after the restart it is finished and due again, and writing it to the
// archive a second time replaces the first copy. Readers look at the
// replica first and the archive second, so a job moving in between is
// found in the archive (and one found in both is listed once).
//
// Sequence numbers: the store keeps the next one under kNextJobKey, written
// with each archiving batch, so ids are never reused when every job that
// had the highest ones is gone from the store.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

constexpr size_t kArchiveBatch = 1000;  // jobs per archive write and store delete
constexpr int kCompactEveryTicks = 10;  // archiving ticks (1 s) per store compaction
constexpr int kRetainEveryTicks = 3600;  // archiving ticks per retention sweep
constexpr int kArchivePage = 10'000;    // the archive's largest page

// Where the job ran last: its current allocation, else its last attempt's.
const std::string& LastNode(const v1::Job& job) {
  if (!job.status().allocation().node().empty()) return job.status().allocation().node();
  const auto& attempts = job.status().attempts();
  if (!attempts.empty() && !attempts.rbegin()->nodes().empty()) return attempts.rbegin()->nodes(0);
  static const std::string kNone;
  return kNone;
}

bool Matches(const v1::ListJobsRequest& f, const v1::Job& job) {
  const v1::JobStatus& st = job.status();
  if (f.state() != v1::JOB_STATE_UNSPECIFIED && st.state() != f.state()) return false;
  if (!f.tenant().empty() && job.spec().tenant() != f.tenant()) return false;
  if (!f.array_id().empty() && job.array().array_id() != f.array_id()) return false;
  if (!f.node().empty() && LastNode(job) != f.node()) return false;
  if (f.ended_after_unix_nanos() != 0 || f.ended_before_unix_nanos() != 0) {
    if (!rpc::IsTerminal(st.state())) return false;
    if (f.ended_after_unix_nanos() != 0 && st.end_time_unix_nanos() < f.ended_after_unix_nanos()) return false;
    if (f.ended_before_unix_nanos() != 0 && st.end_time_unix_nanos() >= f.ended_before_unix_nanos()) return false;
  }
  return true;
}

store::ArchivedJob ToArchived(uint64_t seq, const v1::Job& job) {
  store::ArchivedJob a;
  a.seq = seq;
  a.state = job.status().state();
  a.tenant = job.spec().tenant();
  a.node = LastNode(job);
  a.group = job.array().array_id();
  a.submit_ns = job.status().submit_time_unix_nanos();
  a.end_ns = job.status().end_time_unix_nanos();
  a.value = job.SerializeAsString();
  return a;
}

Result<JobReplica::JobPtr> FromArchived(const store::ArchivedJob& a) {
  auto job = std::make_shared<v1::Job>();
  if (!job->ParseFromString(a.value)) return Internal(fmt::format("archived job {} is unreadable", a.seq));
  return JobReplica::JobPtr(std::move(job));
}

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

void ControlLoop::ScheduleArchiving() {
  loop_.PostAfter(std::chrono::seconds(1), [this] {
    if (EnsureRecovered().ok()) ArchiveDue(nullptr);
    ++archive_ticks_;
    if (options_.keep_revisions > 0 && archive_ticks_ % kCompactEveryTicks == 0) {
      archiver_.Post([this] {
        auto rev = store_->CurrentRevision();
        if (rev.ok() && *rev > options_.keep_revisions) {
          if (Status s = store_->Compact(*rev - options_.keep_revisions); !s.ok()) {
            spdlog::warn("store compaction failed: {}", s.ToString());
          }
        }
      });
    }
    if (options_.archive != nullptr && options_.archive_retention.count() > 0 &&
        archive_ticks_ % kRetainEveryTicks == 1) {
      const int64_t before = NowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.archive_retention).count();
      archiver_.Post([this, before] {
        auto dropped = options_.archive->DropJobsEndedBefore(before);
        if (!dropped.ok()) {
          spdlog::warn("archive retention sweep failed: {}", dropped.status().ToString());
        } else if (*dropped > 0) {
          spdlog::info("archive retention: deleted {} jobs that ended over {} s ago", *dropped,
                       std::chrono::duration_cast<std::chrono::seconds>(options_.archive_retention).count());
        }
      });
    }
    ScheduleArchiving();
  });
}

std::future<Result<int64_t>> ControlLoop::ArchiveDueNow() {
  auto promise = std::make_shared<std::promise<Result<int64_t>>>();
  auto future = promise->get_future();
  auto done = [promise](Result<int64_t> r) { promise->set_value(std::move(r)); };
  auto start = std::make_shared<std::function<void()>>();
  *start = [this, start, done] {
    if (!EnsureRecovered().ok()) return done(Unavailable("the store is unavailable"));
    if (archiving_) return loop_.PostAfter(std::chrono::milliseconds(10), *start);  // after the batch under way
    ArchiveDue(done);
  };
  if (!loop_.Post(*start)) done(Unavailable("the control loop is stopped"));
  return future;
}

void ControlLoop::ArchiveDue(std::function<void(Result<int64_t>)> done) {
  if (options_.archive == nullptr || archiving_) {
    if (done) done(int64_t{0});
    return;
  }
  const int64_t due_ns = NowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.archive_after).count();
  std::vector<uint64_t> seqs;
  std::vector<store::ArchivedJob> records;
  while (!ended_.empty() && ended_.front().first <= due_ns && records.size() < kArchiveBatch) {
    uint64_t seq = ended_.front().second;
    ended_.pop_front();
    auto it = jobs_.find(seq);
    if (it == jobs_.end() || !rpc::IsTerminal(it->second.status().state())) continue;
    seqs.push_back(seq);
    records.push_back(ToArchived(seq, it->second));
  }
  if (records.empty()) {
    if (done) done(int64_t{0});
    return;
  }
  archiving_ = true;
  bool posted = archiver_.Post([this, seqs = std::move(seqs), records = std::move(records), done]() mutable {
    Status written = options_.archive->PutJobs(records);
    bool back = loop_.Post([this, seqs = std::move(seqs), written, done] { ArchiveWritten(std::move(seqs), written, done); });
    if (!back && done) done(Unavailable("the control loop is stopped"));
  });
  if (!posted) {
    archiving_ = false;
    if (done) done(Unavailable("the control loop is stopped"));
  }
}

void ControlLoop::ArchiveWritten(std::vector<uint64_t> seqs, const Status& written,
                                 std::function<void(Result<int64_t>)> done) {
  archiving_ = false;
  if (!written.ok()) {
    // Tried again next second, from where they were.
    spdlog::error("could not archive {} finished jobs: {}", seqs.size(), written.ToString());
    for (auto it = seqs.rbegin(); it != seqs.rend(); ++it) ended_.emplace_front(0, *it);
    if (done) done(written);
    return;
  }
  if (Status s = EnsureRecovered(); !s.ok()) {  // still in the store: archived again once it is back
    if (done) done(s);
    return;
  }
  size_t removed = 0;
  for (uint64_t seq : seqs) {
    auto it = jobs_.find(seq);
    // A job that changed meanwhile is still finished (nothing reopens one);
    // its archived copy is the one it had when it was picked.
    if (it == jobs_.end() || !rpc::IsTerminal(it->second.status().state())) continue;
    ops_.push_back(store::Op::Delete(std::string(kJobsPrefix) + it->second.id()));
    jobs_.erase(it);
    persisted_.erase(seq);
    unlisted_.push_back(seq);
    ++removed;
  }
  if (removed > 0) {
    ops_.push_back(store::Op::Put(std::string(kNextJobKey), std::to_string(next_seq_)));
    archived_total_ += removed;
  }
  // Committed with the batch this task belongs to (AfterBatch); answered after.
  if (done) {
    acks_.push_back([done, removed](const Status& committed) {
      done(committed.ok() ? Result<int64_t>(static_cast<int64_t>(removed)) : Result<int64_t>(committed));
    });
  }
}

Result<JobReplica::JobPtr> ControlLoop::ArchivedJob(uint64_t seq) const {
  if (options_.archive == nullptr) return JobReplica::JobPtr();
  DROVER_ASSIGN_OR_RETURN(std::optional<store::ArchivedJob> a, options_.archive->GetJob(seq));
  if (!a) return JobReplica::JobPtr();
  return FromArchived(*a);
}

Result<std::vector<JobReplica::JobPtr>> ControlLoop::ArchivedTasks(const std::string& array_id, uint64_t first) const {
  std::vector<JobReplica::JobPtr> out;
  if (options_.archive == nullptr) return out;
  store::ArchiveQuery q;
  q.group = array_id;
  q.min_seq = first;
  q.limit = kArchivePage;
  while (true) {
    DROVER_ASSIGN_OR_RETURN(std::vector<store::ArchivedJob> page, options_.archive->QueryJobs(q));
    for (const store::ArchivedJob& a : page) {
      DROVER_ASSIGN_OR_RETURN(JobReplica::JobPtr job, FromArchived(a));
      out.push_back(std::move(job));
    }
    if (page.size() < static_cast<size_t>(q.limit)) break;
    q.before_seq = page.back().seq;
  }
  std::reverse(out.begin(), out.end());  // submission order
  return out;
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
                            replica_.ScanBack(before, min, want, [&](const v1::Job& j) { return Matches(req, j); }));
    std::map<uint64_t, JobReplica::JobPtr, std::greater<>> merged;
    for (JobReplica::JobPtr& j : live) {
      auto seq = ParseJobId(j->id());
      if (seq.ok()) merged.emplace(*seq, std::move(j));
    }
    bool archived_can_match = req.state() == v1::JOB_STATE_UNSPECIFIED || rpc::IsTerminal(req.state());
    if (options_.archive != nullptr && archived_can_match) {
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
      DROVER_ASSIGN_OR_RETURN(std::vector<store::ArchivedJob> archived, options_.archive->QueryJobs(q));
      for (const store::ArchivedJob& a : archived) {
        if (merged.count(a.seq) != 0) continue;  // live wins: listed once
        DROVER_ASSIGN_OR_RETURN(JobReplica::JobPtr job, FromArchived(a));
        merged.emplace(a.seq, std::move(job));
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

}  // namespace drover::server
