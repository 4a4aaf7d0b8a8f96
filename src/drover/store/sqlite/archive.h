#pragma once
// Archive: where finished records go once they leave the hot state, kept in
// its own SQLite file and searchable with paging. The live-state Store holds
// what the control plane needs to run (and what a replicated store such as
// etcd can afford to hold); the archive holds history, the way Slurm keeps
// finished jobs in its accounting database rather than in slurmctld's state.
//
// Two kinds of record, each keyed by an increasing sequence number:
//   jobs   a finished job (its serialized record), with the columns a search
//          filters on: state, tenant, node, group (a job array), submit and
//          end time. Indexed so that a filtered page is an index walk.
//   audit  one audit-log entry (its canonical JSON), in chain order.
//
// Writes are upserts in one transaction, durable (WAL, synchronous=FULL)
// when they return OK: the owner writes a record here before deleting it
// from the store, so a crash in between leaves it in both places, never in
// neither, and writing it again is harmless.
//
// Thread-safety: thread-safe. One connection, serialized by a mutex; a page
// of a query is read under it, so keep pages small (the callers cap them).

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/store/sqlite/statement.h"

namespace drover::store {

struct ArchivedJob {
  uint64_t seq = 0;   // the job's sequence number, unique
  int32_t state = 0;  // the owner's state number
  std::string tenant;
  std::string node;   // where it ran last ("" if it never ran)
  std::string group;  // a job array's id ("" for a lone job)
  int64_t submit_ns = 0;
  int64_t end_ns = 0;
  std::string value;  // the serialized record
};

// Every field narrows the search; the defaults match everything. Results
// come newest first (descending seq), at most `limit` (1..10,000).
struct ArchiveQuery {
  uint64_t before_seq = std::numeric_limits<uint64_t>::max();  // exclusive: the page token
  uint64_t min_seq = 0;                                        // inclusive
  std::optional<int32_t> state;
  std::string tenant;
  std::string node;
  std::string group;
  int64_t ended_after_ns = 0;   // inclusive; 0: unbounded
  int64_t ended_before_ns = 0;  // exclusive; 0: unbounded
  int limit = 100;
};

struct ArchivedAudit {
  int64_t seq = 0;
  std::string entry;
};

class Archive {
 public:
  // Opens (creating when missing) the archive at `path`. kUnavailable when
  // the file cannot be opened or is locked, kInternal when it is not one.
  static Result<std::unique_ptr<Archive>> Open(const std::string& path);

  Status PutJobs(const std::vector<ArchivedJob>& jobs);
  Result<std::optional<ArchivedJob>> GetJob(uint64_t seq);
  Result<std::vector<ArchivedJob>> QueryJobs(const ArchiveQuery& query);
  // The highest job sequence number ever archived (0 when none).
  Result<uint64_t> MaxJobSeq();
  Result<int64_t> CountJobs();
  // Forgets jobs that ended before `ns` (retention); how many went.
  Result<int64_t> DropJobsEndedBefore(int64_t ns);

  Status PutAudit(const std::vector<ArchivedAudit>& entries);
  // Entries with seq >= from, in order, at most `limit`.
  Result<std::vector<ArchivedAudit>> ReadAudit(int64_t from, int limit);

 private:
  explicit Archive(std::unique_ptr<Connection> conn) : conn_(std::move(conn)) {}
  Status Init();

  Mutex mu_;
  std::unique_ptr<Connection> conn_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::store
