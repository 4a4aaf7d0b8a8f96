#pragma once
// GateStore: a Store decorator for tests that drive the server's ControlLoop
// batch by batch. It hands the test every job record the loop commits and,
// while armed, holds the loop thread inside each commit (after the inner
// store committed) until the test releases it.
//
// Why: the loop applies a batch of commands, runs one scheduling pass and
// commits once per batch (control_loop.cc AfterBatch); a batch is whatever
// its queue holds when it wakes. While the loop is held here the test sets
// the clock and queues every command of its next batch, so the loop's next
// dequeue takes them all at once: one batch of the test is one batch, and
// one pass, of the server. A batch that writes nothing never reaches Txn, so
// it cannot be held; AwaitHeld then times out.
//
// Thread-safe: Txn runs on the loop thread, the rest on the test's.

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "drover/store/store.h"
#include "drover/v1/common.pb.h"
#include "support/forwarding_store.h"

namespace drover::server::testing {

class GateStore final : public store::ForwardingStore {
 public:
  // `deadline`: how long AwaitHeld waits; reached only when broken.
  GateStore(store::Store* inner, std::chrono::seconds deadline) : ForwardingStore(inner), deadline_(deadline) {}

  Result<store::TxnResult> Txn(const std::vector<store::Compare>& c, const std::vector<store::Op>& s,
                               const std::vector<store::Op>& f) override {
    Result<store::TxnResult> r = ForwardingStore::Txn(c, s, f);
    std::unique_lock lock(mu_);
    if (r.ok() && r->succeeded) {
      for (const store::Op& op : s) {
        if (op.kind != store::Op::Kind::kPut || !op.key.starts_with("/jobs/")) continue;
        v1::Job job;
        EXPECT_TRUE(job.ParseFromString(op.value)) << op.key;
        written_.push_back(std::move(job));
      }
    }
    if (armed_) {
      held_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !held_; });
    }
    return r;
  }

  // From now on every commit holds the loop.
  void Arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
    written_.clear();
  }
  // Waits until the loop is held in a commit; returns the job records written
  // since the previous call, in commit order. Nothing when no commit came.
  std::optional<std::vector<v1::Job>> AwaitHeld() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, deadline_, [&] { return held_; })) return std::nullopt;
    return std::exchange(written_, {});
  }
  // Lets the held loop go on to its next batch.
  void Release() {
    std::lock_guard lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  // Releases the loop and holds it no more (before stopping the loop).
  void Disarm() {
    std::lock_guard lock(mu_);
    armed_ = false;
    held_ = false;
    cv_.notify_all();
  }

 private:
  const std::chrono::seconds deadline_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;            // GUARDED_BY(mu_)
  bool held_ = false;             // GUARDED_BY(mu_)
  std::vector<v1::Job> written_;  // GUARDED_BY(mu_)
};

}  // namespace drover::server::testing
