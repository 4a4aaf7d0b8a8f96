#pragma once
// The etcd of the etcd store's test binary (etcd_store_test.cc): one real
// etcd shared by every test, each test in a namespace of its own.

#include <memory>
#include <string>

#include "drover/common/status.h"
#include "drover/store/etcd/etcd_store.h"
#include "support/etcd_cluster.h"

namespace drover::store {

testing::EtcdCluster* SharedEtcd();
std::string FreshPrefix();  // "test-<pid>-<n>/", new on each call
Result<std::unique_ptr<Store>> OpenShared(const std::string& prefix, EtcdOptions options = {});

}  // namespace drover::store
