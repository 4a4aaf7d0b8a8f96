// Bounded state: finished jobs leave the store and the loop's memory for
// the archive (store::Archive, its own SQLite file) once they have been
// finished for options_.archive_after (reads of both: control_loop_reads.cc),
// and the store's history is compacted.
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

#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

constexpr size_t kArchiveBatch = 1000;  // jobs per archive write and store delete
constexpr int kCompactEveryTicks = 10;  // archiving ticks (1 s) per store compaction
constexpr int kRetainEveryTicks = 3600;  // archiving ticks per retention sweep

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
  // ArchiveWhenIdle answers `done` itself once the state is readable; only a
  // stopped loop answers here.
  CallThen<Done>([this, done]() -> Result<Done> {
    ArchiveWhenIdle(done);
    return Done{};
  }, [done](Result<Done> r) {
    if (!r.ok()) done(r.status());
  }, Needs::kAnyState);
  return future;
}

void ControlLoop::ArchiveWhenIdle(std::function<void(Result<int64_t>)> done) {
  if (Status s = EnsureRecovered(); !s.ok()) return done(s);
  if (archiving_) {  // after the batch under way
    loop_.PostAfter(std::chrono::milliseconds(10), [this, done = std::move(done)] { ArchiveWhenIdle(done); });
    return;
  }
  ArchiveDue(std::move(done));
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
    CallThen<Done>([this, seqs = std::move(seqs), written, done]() mutable -> Result<Done> {
      ArchiveWritten(std::move(seqs), written, done);
      return Done{};
    }, [done](Result<Done> r) {
      if (!r.ok() && done) done(r.status());
    }, Needs::kAnyState);
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
    // A job that changed meanwhile is still finished (nothing reopens one);
    // its archived copy is the one it had when it was picked.
    if (lifecycle_.Archive(seq).ok()) ++removed;
  }
  if (removed > 0) {
    batch_.Put(std::string(kNextJobKey), std::to_string(jobs_.next_seq()));
    archived_total_ += removed;
  }
  // Committed with the batch this task belongs to (AfterBatch); answered after.
  if (done) {
    batch_.OnCommit([done, removed](const Status& committed) {
      done(committed.ok() ? Result<int64_t>(static_cast<int64_t>(removed)) : Result<int64_t>(committed));
    });
  }
}

}  // namespace drover::server
