#pragma once
// EtcdStore: the Store over an etcd v3 cluster, through etcd's gRPC API
// (KV Range, Txn, Compact; Watch; Lease grant, keep-alive, revoke).
//
// Keys live under a namespace (EtcdOptions::key_prefix), so that several
// Drover clusters, or tests, share one etcd; every key, range, watch and
// compare is confined to it, and keys come back without it. Revisions and
// lease ids are etcd's, shared by every namespace of that etcd.
//
// Differences from SqliteStore that callers see:
// - Leases are timed by the etcd cluster's clock, in whole seconds (a TTL is
//   rounded up; etcd may raise a TTL below its minimum, 1.5 x its election
//   timeout).
// - etcd refuses a transaction that writes one key twice. Writes to the same
//   key in one branch are merged here, the last one kept (a Get of that key
//   between them is refused: it could not see the first write). A delete
//   followed by a put of one key becomes the put: the key keeps its version
//   count instead of starting a new life.
// - Limits: a transaction of more than max_txn_ops operations, or whose
//   request exceeds max_request_bytes, is refused here with kInvalidArgument
//   before it reaches etcd. Set both to the etcd cluster's own
//   --max-txn-ops and --max-request-bytes (defaults 128 and 1.5 MiB).
// - A watch whose stream breaks reconnects (to the next endpoint) and
//   resumes after the last revision it delivered. If that history was
//   compacted meanwhile the watch ends, and its callback receives one empty
//   batch: the caller must re-read and watch again.
//
// Endpoints: requests go to one endpoint at a time; a request that fails as
// unavailable or past its deadline moves the store to the next endpoint.
// Reads are retried once there; writes are not (the first may have
// applied), they return kUnavailable and the caller decides.
//
// Thread-safety: thread-safe. Watch callbacks run on one thread per watch.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::store {

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "host:port", at least one
  std::string key_prefix;              // the namespace, e.g. "drover/"; "" uses the whole keyspace
  // TLS: all three PEM files, or none (plaintext).
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::chrono::milliseconds request_timeout{5000};
  int64_t max_txn_ops = 128;
  int64_t max_request_bytes = 1536 * 1024;
};

// "etcd://host:port[,host:port...][/namespace]" -> endpoints and key_prefix
// (the namespace gets a trailing '/' when it has none; without a path it is
// "drover/", and "etcd://host:port/" is the whole keyspace). kInvalidArgument
// when malformed.
Result<EtcdOptions> ParseEtcdUrl(const std::string& url);

// Connects and checks that an etcd answers (kUnavailable when none of the
// endpoints does within the request timeout).
Result<std::unique_ptr<Store>> OpenEtcdStore(const EtcdOptions& options);

// When the first endpoint of an etcd store (a server's own machine's member)
// is etcd's leader, hands etcd's leadership to the next endpoint that
// answers (etcd's MoveLeader) and returns true; false when it was not the
// leader (or `store` is not an etcd store). A Drover leader calls it: with
// etcd's leader on another machine, a cut that isolates the Drover
// leader's machine does not also cost an etcd election, after which etcd
// extends every lease (docs/ha.md, "Keeping etcd's leader elsewhere").
Result<bool> MoveEtcdLeaderAway(Store* store);

}  // namespace drover::store
