#pragma once
// ForwardingStore: a store::Store that passes every call to another store.
// Test decorators derive from it and override only the calls they change
// (FlakyStore injects failures, GateStore holds the control loop's commits).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drover/store/store.h"

namespace drover::store {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(Store* inner) : inner_(inner) {}

  Result<store::TxnResult> Txn(const std::vector<store::Compare>& c, const std::vector<store::Op>& s,
                               const std::vector<store::Op>& f) override {
    return inner_->Txn(c, s, f);
  }
  Result<store::RangeResult> Range(const std::string& prefix, int64_t limit, const std::string& start) override {
    return inner_->Range(prefix, limit, start);
  }
  Result<std::unique_ptr<store::WatchHandle>> Watch(const std::string& prefix, int64_t rev,
                                                    store::WatchCallback cb) override {
    return inner_->Watch(prefix, rev, std::move(cb));
  }
  Status Compact(int64_t revision) override { return inner_->Compact(revision); }
  Result<store::LeaseId> GrantLease(Duration ttl) override { return inner_->GrantLease(ttl); }
  Status KeepAlive(store::LeaseId lease) override { return inner_->KeepAlive(lease); }
  Status RevokeLease(store::LeaseId lease) override { return inner_->RevokeLease(lease); }
  Result<int64_t> CurrentRevision() override { return inner_->CurrentRevision(); }

 protected:
  Store* inner() const { return inner_; }

 private:
  Store* inner_;
};

}  // namespace drover::store
