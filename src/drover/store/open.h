#pragma once
// Picks the Store by configuration (`--store`):
//   ""                      SQLite at `default_sqlite_path`
//   "sqlite:PATH"           SQLite at PATH
//   "etcd://h:p,.../NS"     etcd (etcd_store.h), keys under NS; `etcd` gives
//                           TLS files, timeout and limits (its endpoints and
//                           key prefix come from the URL)

#include <memory>
#include <string>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/store/etcd/etcd_store.h"
#include "drover/store/store.h"

namespace drover::store {

// Whether `spec` names an etcd store (servers then elect a leader).
bool IsEtcdSpec(const std::string& spec);

// kInvalidArgument for a spec of no known kind.
Result<std::unique_ptr<Store>> OpenStore(const std::string& spec, const std::string& default_sqlite_path,
                                         const EtcdOptions& etcd, Clock* clock);

}  // namespace drover::store
