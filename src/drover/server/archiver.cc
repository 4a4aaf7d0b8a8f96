// Archiver (archiver.h): the move of finished jobs to the archive, and the
// store's compaction and the archive's retention beside it.

#include "drover/server/archiver.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

constexpr size_t kArchiveBatch = 1000;   // jobs per archive write and store delete
constexpr int kCompactEveryTicks = 10;   // ticks (1 s) per store compaction
constexpr int kRetainEveryTicks = 3600;  // ticks per retention sweep
constexpr int kArchivePage = 10'000;     // the archive's largest page

store::ArchivedJob ToArchived(uint64_t seq, const v1::Job& job) {
  store::ArchivedJob a;
  a.seq = seq;
  a.state = job.status().state();
  a.tenant = job.spec().tenant();
  a.node = rpc::LastNode(job);
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

}  // namespace

void Archiver::Replace(std::vector<std::pair<int64_t, uint64_t>> ended) {
  if (!enabled()) ended.clear();
  std::sort(ended.begin(), ended.end());
  ended_.assign(ended.begin(), ended.end());
}

void Archiver::Ended(uint64_t seq) {
  if (enabled()) ended_.emplace_back(NowNs(), seq);
}

void Archiver::Tick() {
  if (hooks_.readable().ok()) Due(nullptr);
  ++ticks_;
  if (options_.keep_revisions > 0 && ticks_ % kCompactEveryTicks == 0) {
    thread_.Post([this] {
      auto rev = store_->CurrentRevision();
      if (rev.ok() && *rev > options_.keep_revisions) {
        if (Status s = store_->Compact(*rev - options_.keep_revisions); !s.ok()) {
          spdlog::warn("store compaction failed: {}", s.ToString());
        }
      }
    });
  }
  if (enabled() && options_.retention.count() > 0 && ticks_ % kRetainEveryTicks == 1) {
    const int64_t before = NowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.retention).count();
    thread_.Post([this, before] {
      auto dropped = options_.archive->DropJobsEndedBefore(before);
      if (!dropped.ok()) {
        spdlog::warn("archive retention sweep failed: {}", dropped.status().ToString());
      } else if (*dropped > 0) {
        spdlog::info("archive retention: deleted {} jobs that ended over {} s ago", *dropped,
                     std::chrono::duration_cast<std::chrono::seconds>(options_.retention).count());
      }
    });
  }
}

void Archiver::DueNow(Done done) {
  if (Status s = hooks_.readable(); !s.ok()) return done(s);
  if (archiving_) {  // after the batch under way (Written)
    waiting_.push_back(std::move(done));
    return;
  }
  Due(std::move(done));
}

void Archiver::Due(Done done) {
  if (!enabled() || archiving_) {
    if (done) done(int64_t{0});
    return;
  }
  const int64_t due_ns = NowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.after).count();
  const JobTable& jobs = lifecycle_->table();
  std::vector<uint64_t> seqs;
  std::vector<store::ArchivedJob> records;
  while (!ended_.empty() && ended_.front().first <= due_ns && records.size() < kArchiveBatch) {
    uint64_t seq = ended_.front().second;
    ended_.pop_front();
    auto it = jobs.find(seq);
    if (it == jobs.end() || !rpc::IsTerminal(it->second.status().state())) continue;
    seqs.push_back(seq);
    records.push_back(ToArchived(seq, it->second));
  }
  if (records.empty()) {
    if (done) done(int64_t{0});
    return;
  }
  archiving_ = true;
  bool posted = thread_.Post([this, seqs = std::move(seqs), records = std::move(records), done]() mutable {
    Status written = options_.archive->PutJobs(records);
    hooks_.on_loop([this, seqs = std::move(seqs), written, done]() mutable { Written(std::move(seqs), written, done); },
                   [done](const Status& refused) {
                     if (done) done(refused);
                   });
  });
  if (!posted) {
    archiving_ = false;
    if (done) done(Unavailable("the control loop is stopped"));
  }
}

void Archiver::Written(std::vector<uint64_t> seqs, const Status& written, Done done) {
  archiving_ = false;
  Remove(std::move(seqs), written, std::move(done));
  // The DueNow calls that waited for this batch go next, once its removal
  // committed, whatever it did.
  if (!waiting_.empty()) {
    batch_->OnCommit([this, waiting = std::exchange(waiting_, {})](const Status&) mutable {
      for (Done& d : waiting) DueNow(std::move(d));
    });
  }
}

void Archiver::Remove(std::vector<uint64_t> seqs, const Status& written, Done done) {
  if (!written.ok()) {
    // Tried again next second, from where they were.
    spdlog::error("could not archive {} finished jobs: {}", seqs.size(), written.ToString());
    for (auto it = seqs.rbegin(); it != seqs.rend(); ++it) ended_.emplace_front(0, *it);
    if (done) done(written);
    return;
  }
  if (Status s = hooks_.readable(); !s.ok()) {  // still in the store: archived again once it is back
    if (done) done(s);
    return;
  }
  size_t removed = 0;
  for (uint64_t seq : seqs) {
    // A job that changed meanwhile is still finished (nothing reopens one);
    // its archived copy is the one it had when it was picked.
    if (lifecycle_->Archive(seq).ok()) ++removed;
  }
  if (removed > 0) batch_->Put(std::string(kNextJobKey), std::to_string(lifecycle_->table().next_seq()));
  // Committed with the batch this task belongs to; answered after.
  if (done) {
    batch_->OnCommit([done, removed](const Status& committed) {
      done(committed.ok() ? Result<int64_t>(static_cast<int64_t>(removed)) : Result<int64_t>(committed));
    });
  }
}

Result<uint64_t> Archiver::MaxJobSeq() const {
  if (!enabled()) return uint64_t{0};
  return options_.archive->MaxJobSeq();
}

Result<JobReplica::JobPtr> Archiver::Get(uint64_t seq) const {
  if (!enabled()) return JobReplica::JobPtr();
  DROVER_ASSIGN_OR_RETURN(std::optional<store::ArchivedJob> a, options_.archive->GetJob(seq));
  if (!a) return JobReplica::JobPtr();
  return FromArchived(*a);
}

Result<std::vector<JobReplica::JobPtr>> Archiver::Tasks(const std::string& array_id, uint64_t first) const {
  std::vector<JobReplica::JobPtr> out;
  if (!enabled()) return out;
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

Result<std::vector<JobReplica::JobPtr>> Archiver::Query(const store::ArchiveQuery& q) const {
  std::vector<JobReplica::JobPtr> out;
  if (!enabled()) return out;
  DROVER_ASSIGN_OR_RETURN(std::vector<store::ArchivedJob> page, options_.archive->QueryJobs(q));
  out.reserve(page.size());
  for (const store::ArchivedJob& a : page) {
    DROVER_ASSIGN_OR_RETURN(JobReplica::JobPtr job, FromArchived(a));
    out.push_back(std::move(job));
  }
  return out;
}

}  // namespace drover::server
