#include "drover/store/sqlite/sqlite_store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "store_contract.h"
#include "store_contract_watch.h"

namespace drover::store {
namespace {

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/drover-store-test-XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  bool ok() const { return !path_.empty(); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class SqliteFactory final : public contract::StoreFactory {
 public:
  Result<std::unique_ptr<Store>> Open(Clock* clock) override {
    if (!dir_.ok()) return Internal("mkdtemp failed");
    return OpenSqliteStore(dir_.File("store.db"), clock);
  }

 private:
  TempDir dir_;
};

std::unique_ptr<contract::StoreFactory> MakeSqliteFactory() { return std::make_unique<SqliteFactory>(); }

}  // namespace

namespace contract {
INSTANTIATE_TEST_SUITE_P(Sqlite, StoreContractTest, ::testing::Values(StoreContractParam{"Sqlite", &MakeSqliteFactory}),
                         StoreContractParamName);
}  // namespace contract

namespace {

std::unique_ptr<Store> MustOpen(const std::string& path, Clock* clock) {
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path, clock);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// One value from `sql` on a connection of its own, as an outside reader sees the file.
std::string QueryOnOwnConnection(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      out = text != nullptr ? reinterpret_cast<const char*>(text) : "<null>";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

TEST(SqliteStoreTest, UsesWalWithFullSync) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  ManualClock clock;
  std::unique_ptr<Store> store = MustOpen(dir.File("store.db"), &clock);
  ASSERT_NE(store, nullptr);
  // journal_mode=WAL is recorded in the file; synchronous and busy_timeout
  // belong to the store's own connection.
  EXPECT_EQ(QueryOnOwnConnection(dir.File("store.db"), "PRAGMA journal_mode"), "wal");
  Result<std::string> synchronous = SqliteStorePragma(*store, "synchronous");
  ASSERT_TRUE(synchronous.ok()) << synchronous.status().ToString();
  EXPECT_EQ(*synchronous, "2");  // FULL
  Result<std::string> busy_timeout = SqliteStorePragma(*store, "busy_timeout");
  ASSERT_TRUE(busy_timeout.ok());
  EXPECT_GT(std::stoi(*busy_timeout), 0);
  EXPECT_EQ(SqliteStorePragma(*store, "synchronous; DROP TABLE kv").status().code(), Code::kInvalidArgument);
}

int ModeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

// The database and the files SQLite keeps beside it hold every tenant's
// jobs: their owner's only whatever the umask, and one an older version
// left open is closed when it is opened (docs/security.md, "Files").
TEST(SqliteStoreTest, FilesAreTheirOwnersOnly) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const mode_t saved = ::umask(022);
  const std::string db = dir.File("store.db");
  ManualClock clock;
  for (int open = 0; open < 2; ++open) {
    std::unique_ptr<Store> store = MustOpen(db, &clock);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Put("a", std::to_string(open)).ok());
    for (const char* suffix : {"", "-wal", "-shm"}) EXPECT_EQ(ModeOf(db + suffix), 0600) << suffix << " " << open;
    store.reset();
    ASSERT_EQ(::chmod(db.c_str(), 0644), 0);  // as an older version made it
  }
  ::umask(saved);
}

TEST(SqliteStoreTest, RevisionIsKeptInTheFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  ManualClock clock;
  std::unique_ptr<Store> store = MustOpen(dir.File("store.db"), &clock);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Put("a", "1").ok());
  Result<int64_t> revision = store->Put("b", "2");
  ASSERT_TRUE(revision.ok());
  EXPECT_EQ(QueryOnOwnConnection(dir.File("store.db"), "SELECT value FROM meta WHERE name = 'revision'"),
            std::to_string(*revision));
  EXPECT_EQ(QueryOnOwnConnection(dir.File("store.db"), "SELECT count(*) FROM history"), "2");
}

TEST(SqliteStoreTest, PrefixRangeUsesTheKeyIndex) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  ManualClock clock;
  std::unique_ptr<Store> store = MustOpen(dir.File("store.db"), &clock);
  ASSERT_NE(store, nullptr);
  // The shape of the store's range query, planned on the file's schema: a
  // search on both bounds of the key index, not a scan.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(dir.File("store.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(
      sqlite3_prepare_v2(db, "EXPLAIN QUERY PLAN SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key",
                         -1, &stmt, nullptr),
      SQLITE_OK);
  std::string details;
  while (sqlite3_step(stmt) == SQLITE_ROW) details += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 3));
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  EXPECT_NE(details.find("USING INDEX"), std::string::npos) << details;
  EXPECT_NE(details.find("key>? AND key<?"), std::string::npos) << details;
}

TEST(SqliteStoreTest, MissingDirectoryIsAClearError) {
  ManualClock clock;
  const std::string path = "/tmp/drover-no-such-dir-9f3a/nested/store.db";
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path, &clock);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kUnavailable);
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().ToString();
}

TEST(SqliteStoreTest, FileThatIsNotAStoreIsAClearError) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  {
    std::ofstream garbage(dir.File("store.db"), std::ios::binary);
    garbage << std::string(8192, '\x5a');
  }
  ManualClock clock;
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(dir.File("store.db"), &clock);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kInternal);
  EXPECT_NE(store.status().message().find("not a database"), std::string::npos) << store.status().ToString();
}

TEST(SqliteStoreTest, WatchHandleMayOutliveTheStore) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  ManualClock clock;
  std::unique_ptr<Store> store = MustOpen(dir.File("store.db"), &clock);
  ASSERT_NE(store, nullptr);
  contract::WatchRecorder recorder;
  Result<std::unique_ptr<WatchHandle>> handle = store->Watch("", 0, recorder.Callback());
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(store->Put("a", "1").ok());
  ASSERT_EQ(recorder.WaitFor(1).size(), 1u);
  store.reset();
  handle->reset();  // must neither hang nor touch the destroyed store
}

// --- crash durability ---------------------------------------------------------

constexpr int kAcksBeforeKill = 20;

std::string CrashKey(int32_t i) { return "crash/" + std::to_string(i); }

// The child: puts keys 0, 1, 2, ... and after each acknowledged put writes
// the count of acknowledged puts to `fd`, until it is killed.
[[noreturn]] void PutUntilKilled(const std::string& path, int fd) {
  ManualClock clock;
  Result<std::unique_ptr<Store>> store = OpenSqliteStore(path, &clock);
  if (!store.ok()) _exit(2);
  for (int32_t i = 0; i < 1'000'000; ++i) {
    if (!(*store)->Put(CrashKey(i), "value-" + std::to_string(i)).ok()) _exit(3);
    int32_t acked = i + 1;
    if (write(fd, &acked, sizeof acked) != sizeof acked) _exit(4);
  }
  _exit(0);
}

// Reads one ack; false at end of stream or after 30 s without one.
bool ReadAck(int fd, int32_t* ack) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 30'000) <= 0) return false;
  // Writes of 4 bytes to a pipe are atomic, so an ack is never split.
  return read(fd, ack, sizeof *ack) == sizeof *ack;
}

TEST(SqliteStoreCrashTest, AcknowledgedPutsSurviveSigkill) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("store.db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // Forked before this test starts any thread; earlier tests joined theirs.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    PutUntilKilled(path, fds[1]);
  }
  close(fds[1]);
  int32_t acked = 0;
  bool killed = false;
  for (int32_t ack = 0; ReadAck(fds[0], &ack);) {
    acked = ack;
    if (!killed && acked >= kAcksBeforeKill) {
      ASSERT_EQ(kill(child, SIGKILL), 0);
      killed = true;
    }
  }
  close(fds[0]);
  if (!killed) kill(child, SIGKILL);  // the stream stalled: do not leave it running
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL)
      << "child ended otherwise, status " << wait_status << " after " << acked << " acks";
  ASSERT_GE(acked, kAcksBeforeKill);

  ManualClock clock;
  std::unique_ptr<Store> store = MustOpen(path, &clock);
  ASSERT_NE(store, nullptr);
  for (int32_t i = 0; i < acked; ++i) {
    Result<std::optional<KeyValue>> kv = store->Get(CrashKey(i));
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    ASSERT_TRUE(kv->has_value()) << "acknowledged put " << i << " of " << acked << " was lost";
    EXPECT_EQ((*kv)->value, "value-" + std::to_string(i));
  }
  Result<int64_t> revision = store->CurrentRevision();
  ASSERT_TRUE(revision.ok());
  EXPECT_GE(*revision, acked);
  EXPECT_TRUE(store->Put("after", "crash").ok());  // the file is writable again
}

}  // namespace
}  // namespace drover::store
