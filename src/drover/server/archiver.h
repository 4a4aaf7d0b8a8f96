#pragma once
// Archiver: bounded state. Finished jobs leave the store and the loop's
// memory for the archive (store::Archive, its own SQLite file) once they
// have been finished for `after`; the store's history is compacted and the
// archive's old jobs are dropped after `retention`. It owns which finished
// jobs wait for the archive, the batch under way, and the thread that does
// the slow writes (the archive's, the store's compaction, the audit log's
// trim), so that none of them runs on the loop.
//
// The move: the loop picks the due jobs and hands copies to the archiver
// thread, which writes them to the archive (durably); then, back on the
// loop, the jobs leave the store in an ordinary batch (JobLifecycle's
// Archive edge) and, once that commits, the replica. A crash between the
// two writes leaves a job in both places: after the restart it is finished
// and due again, and writing it to the archive a second time replaces the
// first copy. Readers look at the replica first and the archive second
// (Get, Tasks, Query, from any thread), so a job moving in between is found
// in the archive (and one found in both is listed once).
//
// Sequence numbers: the store keeps the next one under kNextJobKey, written
// with each archiving batch, so ids are never reused when every job that
// had the highest ones is gone from the store.
//
// The loop's methods (Replace, Ended, Tick, DueNow) run on its thread; the
// reads on any thread.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/runtime/event_loop.h"
#include "drover/server/batch.h"
#include "drover/server/job_lifecycle.h"
#include "drover/server/job_replica.h"
#include "drover/store/sqlite/archive.h"
#include "drover/store/store.h"

namespace drover::server {

class Archiver {
 public:
  struct Options {
    // Null: finished jobs stay in the store (and every read finds nothing here).
    store::Archive* archive = nullptr;
    std::chrono::milliseconds after{std::chrono::minutes(5)};
    std::chrono::milliseconds retention{0};  // 0: archived jobs are kept for good
    int64_t keep_revisions = 0;              // the store's history kept; 0: all
  };
  // What the archiver asks of the loop.
  struct Hooks {
    // Runs `task` on the loop as a command of its own, whatever its state
    // (its writes commit with that batch); `refused` when the loop is stopped.
    std::function<void(std::function<void()> task, std::function<void(const Status&)> refused)> on_loop;
    // Ok when the loop's state is readable (it rebuilt it from the store).
    std::function<Status()> readable;
  };
  using Done = std::function<void(Result<int64_t>)>;

  Archiver(Options options, store::Store* store, Clock* clock, JobLifecycle* lifecycle, Batch* batch, Hooks hooks)
      : options_(options),
        store_(store),
        clock_(clock),
        lifecycle_(lifecycle),
        batch_(batch),
        hooks_(std::move(hooks)) {}
  ~Archiver() { Stop(); }

  void Start() { thread_.Start(); }
  void Stop() { thread_.Stop(); }

  // After a recovery: the finished jobs (end ns, seq), in any order.
  void Replace(std::vector<std::pair<int64_t, uint64_t>> ended);
  // A finished job's record committed now: due `after` from now.
  void Ended(uint64_t seq);
  // Once a second: the due jobs to the archive, and the compaction and
  // retention sweeps when theirs are due.
  void Tick();
  // The due jobs to the archive now, once no batch is under way; `done`
  // gets how many left the store, once that commits.
  void DueNow(Done done);
  // Slow store work off the loop (the audit log's trim).
  void Background(std::function<void()> work) { thread_.Post(std::move(work)); }

  // ---- reads, from any thread ----
  bool enabled() const { return options_.archive != nullptr; }
  // The highest sequence number archived (0: none, or no archive).
  Result<uint64_t> MaxJobSeq() const;
  // The archive's copy of a job; null when it has none.
  Result<JobReplica::JobPtr> Get(uint64_t seq) const;
  // The archived tasks of an array (sequence numbers from `first`), in
  // submission order.
  Result<std::vector<JobReplica::JobPtr>> Tasks(const std::string& array_id, uint64_t first) const;
  // One page of archived jobs, as the archive answers `q` (newest first).
  Result<std::vector<JobReplica::JobPtr>> Query(const store::ArchiveQuery& q) const;

 private:
  int64_t NowNs() const { return ToUnixNanos(clock_->Now()); }
  // `done` (may be null) gets how many jobs left the store, once committed.
  void Due(Done done);
  // Back on the loop with the archive's answer: Remove, then the waiters.
  void Written(std::vector<uint64_t> seqs, const Status& written, Done done);
  // The written jobs out of the store (the lifecycle's Archive edge).
  void Remove(std::vector<uint64_t> seqs, const Status& written, Done done);

  const Options options_;
  store::Store* store_;
  Clock* clock_;
  JobLifecycle* lifecycle_;
  Batch* batch_;
  Hooks hooks_;
  // Finished jobs (end ns, seq), in the order their end was committed:
  // what Due looks at.
  std::deque<std::pair<int64_t, uint64_t>> ended_;
  bool archiving_ = false;     // a batch is with thread_
  std::vector<Done> waiting_;  // DueNow calls made while it was
  int ticks_ = 0;
  runtime::EventLoop thread_{"archiver"};
};

}  // namespace drover::server
