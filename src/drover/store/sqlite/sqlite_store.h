#pragma once
// SqliteStore: the Store of a single server, kept in one SQLite file.
//
// Durability: the file is in WAL mode with synchronous=FULL, so a Txn that
// returned OK has been fsync'd and survives a crash of the process or the
// machine. Revisions, history and lease ids continue across reopen.
//
// One Store object owns the file: the revision is re-read inside every
// transaction, but watches only see writes made through this object, so do
// not write the same file from two processes.
//
// Every revision's events stay in a history table until Compact, so the
// owner should compact regularly. A watch from an old revision loads the
// history it replays into memory at once.
//
// Watch callbacks run on one dispatcher thread per store (started by the
// first Watch; see watch_hub.h for ordering). A callback may read and write
// the store; it must not destroy its own WatchHandle, nor the store.

#include <memory>
#include <string>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::store {

// Opens (creating when missing) the store in the SQLite file at `path`.
// `clock` times leases and must outlive the store. Errors: kUnavailable when
// the file cannot be opened or is locked, kInternal when it is not a store.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path, Clock* clock);

// Reads `PRAGMA <name>` on the store's own connection, for diagnostics and
// tests (synchronous and busy_timeout are per connection, so another
// connection cannot see them). kInvalidArgument when `store` is not a
// SqliteStore or `name` is not a plain identifier.
Result<std::string> SqliteStorePragma(Store& store, const std::string& name);

}  // namespace drover::store
