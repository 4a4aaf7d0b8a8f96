#include "drover/store/sqlite/archive.h"

#include <algorithm>

#include <fmt/format.h>

#include "drover/store/sqlite/statement.h"

namespace drover::store {
namespace {

constexpr int kMaxQueryLimit = 10'000;

// Strings are BLOBs (any bytes, memcmp order); the (column, seq) indexes
// let a filtered page walk one index backwards from the page token.
constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS archive_meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO archive_meta(name, value) VALUES ('schema_version', 1);
CREATE TABLE IF NOT EXISTS jobs(
  seq INTEGER PRIMARY KEY, state INTEGER NOT NULL, tenant BLOB NOT NULL, node BLOB NOT NULL,
  grp BLOB NOT NULL, submit_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, value BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs(tenant, seq);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, seq);
CREATE INDEX IF NOT EXISTS jobs_by_node ON jobs(node, seq);
CREATE INDEX IF NOT EXISTS jobs_by_group ON jobs(grp, seq) WHERE grp != x'';
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs(end_ns);
CREATE TABLE IF NOT EXISTS audit(seq INTEGER PRIMARY KEY, entry BLOB NOT NULL);
)sql";

constexpr const char* kJobColumns = "seq, state, tenant, node, grp, submit_ns, end_ns, value";

int64_t ToSqlSeq(uint64_t seq) {
  return static_cast<int64_t>(std::min<uint64_t>(seq, static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
}

ArchivedJob ReadJob(const Stmt& stmt) {
  ArchivedJob j;
  j.seq = static_cast<uint64_t>(stmt.Int(0));
  j.state = static_cast<int32_t>(stmt.Int(1));
  j.tenant = stmt.Blob(2);
  j.node = stmt.Blob(3);
  j.group = stmt.Blob(4);
  j.submit_ns = stmt.Int(5);
  j.end_ns = stmt.Int(6);
  j.value = stmt.Blob(7);
  return j;
}

}  // namespace

Result<std::unique_ptr<Archive>> Archive::Open(const std::string& path) {
  auto conn = Connection::Open(path);
  if (!conn.ok())
    return Status(conn.status().code(), fmt::format("open archive '{}': {}", path, conn.status().message()));
  std::unique_ptr<Archive> archive(new Archive(std::move(*conn)));
  if (Status s = archive->Init(); !s.ok()) {
    return Status(s.code(), fmt::format("open archive '{}': {}", path, s.message()));
  }
  return archive;
}

Status Archive::Init() {
  MutexLock lock(&mu_);
  return conn_->InTransaction([&]() -> Status {
    mu_.AssertHeld();  // InTransaction runs it here, under the lock
    DROVER_RETURN_IF_ERROR(conn_->Exec(kSchema));
    DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare("SELECT value FROM archive_meta WHERE name = 'schema_version'"));
    DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return Internal("archive schema version is missing");
    if (stmt.Int(0) != 1) {
      return FailedPrecondition(fmt::format("archive schema version {} is not the supported 1", stmt.Int(0)));
    }
    return Status::Ok();
  });
}

Status Archive::PutJobs(const std::vector<ArchivedJob>& jobs) {
  if (jobs.empty()) return Status::Ok();
  const std::string sql =
      fmt::format("INSERT OR REPLACE INTO jobs({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", kJobColumns);
  MutexLock lock(&mu_);
  return conn_->InTransaction([&]() -> Status {
    mu_.AssertHeld();  // InTransaction runs it here, under the lock
    for (const ArchivedJob& j : jobs) {
      DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare(sql));
      DROVER_RETURN_IF_ERROR(stmt.Bind(1, ToSqlSeq(j.seq))
                                 .Bind(2, j.state)
                                 .BindBlob(3, j.tenant)
                                 .BindBlob(4, j.node)
                                 .BindBlob(5, j.group)
                                 .Bind(6, j.submit_ns)
                                 .Bind(7, j.end_ns)
                                 .BindBlob(8, j.value)
                                 .Run());
    }
    return Status::Ok();
  });
}

Result<std::optional<ArchivedJob>> Archive::GetJob(uint64_t seq) {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare(fmt::format("SELECT {} FROM jobs WHERE seq = ?1", kJobColumns)));
  DROVER_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, ToSqlSeq(seq)).Step());
  if (!row) return std::optional<ArchivedJob>();
  return std::optional<ArchivedJob>(ReadJob(stmt));
}

Result<std::vector<ArchivedJob>> Archive::QueryJobs(const ArchiveQuery& q) {
  if (q.limit < 1 || q.limit > kMaxQueryLimit) {
    return InvalidArgument(fmt::format("archive page of {} is outside 1..{}", q.limit, kMaxQueryLimit));
  }
  // One statement per combination of filters (at most 2^6 cached), each
  // parameter at a fixed number.
  std::string where = "seq < ?1 AND seq >= ?2";
  if (q.state) where += " AND state = ?3";
  if (!q.tenant.empty()) where += " AND tenant = ?4";
  if (!q.node.empty()) where += " AND node = ?5";
  if (!q.group.empty()) where += " AND grp = ?6";
  if (q.ended_after_ns != 0) where += " AND end_ns >= ?7";
  if (q.ended_before_ns != 0) where += " AND end_ns < ?8";
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(
      Stmt stmt,
      conn_->Prepare(fmt::format("SELECT {} FROM jobs WHERE {} ORDER BY seq DESC LIMIT ?9", kJobColumns, where)));
  stmt.Bind(1, ToSqlSeq(q.before_seq)).Bind(2, ToSqlSeq(q.min_seq)).Bind(9, q.limit);
  if (q.state) stmt.Bind(3, *q.state);
  if (!q.tenant.empty()) stmt.BindBlob(4, q.tenant);
  if (!q.node.empty()) stmt.BindBlob(5, q.node);
  if (!q.group.empty()) stmt.BindBlob(6, q.group);
  if (q.ended_after_ns != 0) stmt.Bind(7, q.ended_after_ns);
  if (q.ended_before_ns != 0) stmt.Bind(8, q.ended_before_ns);
  std::vector<ArchivedJob> out;
  while (true) {
    DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(ReadJob(stmt));
  }
  return out;
}

Result<uint64_t> Archive::MaxJobSeq() {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare("SELECT COALESCE(MAX(seq), 0) FROM jobs"));
  DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? static_cast<uint64_t>(stmt.Int(0)) : 0;
}

Result<int64_t> Archive::CountJobs() {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare("SELECT COUNT(*) FROM jobs"));
  DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.Int(0) : 0;
}

Result<int64_t> Archive::DropJobsEndedBefore(int64_t ns) {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare("DELETE FROM jobs WHERE end_ns < ?1"));
  DROVER_RETURN_IF_ERROR(stmt.Bind(1, ns).Run());
  return static_cast<int64_t>(conn_->Changes());
}

Status Archive::PutAudit(const std::vector<ArchivedAudit>& entries) {
  if (entries.empty()) return Status::Ok();
  MutexLock lock(&mu_);
  return conn_->InTransaction([&]() -> Status {
    mu_.AssertHeld();  // InTransaction runs it here, under the lock
    for (const ArchivedAudit& e : entries) {
      DROVER_ASSIGN_OR_RETURN(Stmt stmt, conn_->Prepare("INSERT OR REPLACE INTO audit(seq, entry) VALUES (?1, ?2)"));
      DROVER_RETURN_IF_ERROR(stmt.Bind(1, e.seq).BindBlob(2, e.entry).Run());
    }
    return Status::Ok();
  });
}

Result<std::vector<ArchivedAudit>> Archive::ReadAudit(int64_t from, int limit) {
  if (limit < 1 || limit > kMaxQueryLimit) {
    return InvalidArgument(fmt::format("audit page of {} is outside 1..{}", limit, kMaxQueryLimit));
  }
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(Stmt stmt,
                          conn_->Prepare("SELECT seq, entry FROM audit WHERE seq >= ?1 ORDER BY seq LIMIT ?2"));
  stmt.Bind(1, from).Bind(2, limit);
  std::vector<ArchivedAudit> out;
  while (true) {
    DROVER_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back({stmt.Int(0), stmt.Blob(1)});
  }
  return out;
}

}  // namespace drover::store
