#include "drover/store/leader.h"
#include "drover/common/mutex.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace drover::store {
namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ReadOnly(const std::vector<Op>& ops) {
  return std::all_of(ops.begin(), ops.end(), [](const Op& op) { return op.kind == Op::Kind::kGet; });
}

}  // namespace

// Every writing transaction carries the leadership's compare; see leader.h.
class FencedStore final : public Store {
 public:
  explicit FencedStore(Leadership* leadership)
      : l_(leadership), inner_(leadership->options_.data != nullptr ? leadership->options_.data : leadership->store_) {}

  Result<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                        const std::vector<Op>& failure) override {
    if (ReadOnly(success) && ReadOnly(failure)) return inner_->Txn(compares, success, failure);
    if (!ReadOnly(failure)) return InvalidArgument("a fenced transaction may only read in its failure branch");
    if (!l_->leading_.load()) return FailedPrecondition("this server is no longer the leader");
    std::vector<Compare> fenced = compares;
    fenced.push_back({l_->options_.key, Compare::Target::kCreateRevision, Compare::Op::kEqual, l_->epoch_, {}});
    std::vector<Op> otherwise = failure;
    otherwise.push_back(Op::Get(l_->options_.key));
    std::vector<Op> stamped = success;
    if (!l_->options_.writer_key.empty())
      stamped.push_back(Op::Put(l_->options_.writer_key, std::to_string(l_->epoch_)));
    DROVER_ASSIGN_OR_RETURN(TxnResult result, inner_->Txn(fenced, stamped, otherwise));
    if (result.succeeded) return result;
    std::optional<KeyValue> leader = std::move(result.gets.back());
    result.gets.pop_back();
    if (!leader || leader->create_revision != l_->epoch_) {
      Status deposed = FailedPrecondition(
          leader ? fmt::format("deposed: the leader key belongs to '{}' since revision {} (ours was {})", leader->value,
                               leader->create_revision, l_->epoch_)
                 : fmt::format("deposed: the leader key of revision {} is gone", l_->epoch_));
      l_->Lose(deposed);
      return FailedPrecondition("this server is no longer the leader: " + deposed.message());
    }
    return result;
  }
  Limits limits() const override {
    Limits l = inner_->limits();
    if (l.max_ops != SIZE_MAX) --l.max_ops;  // the fence's compare, read and stamp: one more in each list
    if (l.max_bytes != SIZE_MAX) l.max_bytes -= std::min<size_t>(l.max_bytes / 2, 256);
    return l;
  }
  Result<RangeResult> Range(const std::string& prefix, int64_t limit, const std::string& start) override {
    return inner_->Range(prefix, limit, start);
  }
  Result<std::unique_ptr<WatchHandle>> Watch(const std::string& prefix, int64_t start_revision,
                                             WatchCallback callback) override {
    return inner_->Watch(prefix, start_revision, std::move(callback));
  }
  Status Compact(int64_t revision) override { return inner_->Compact(revision); }
  Result<LeaseId> GrantLease(Duration ttl) override { return inner_->GrantLease(ttl); }
  Status KeepAlive(LeaseId lease) override { return inner_->KeepAlive(lease); }
  Status RevokeLease(LeaseId lease) override { return inner_->RevokeLease(lease); }
  Result<int64_t> CurrentRevision() override { return inner_->CurrentRevision(); }

 private:
  Leadership* const l_;
  Store* const inner_;
};

Leadership::Leadership(Store* store, LeaderOptions options, LeaseId lease, int64_t epoch)
    : store_(store), options_(std::move(options)), lease_(lease), epoch_(epoch) {
  fenced_ = std::make_unique<FencedStore>(this);
}

Result<std::unique_ptr<Leadership>> Leadership::Campaign(Store* store, LeaderOptions options,
                                                         const std::atomic<bool>* stop,
                                                         const std::function<void(const std::string&)>& standby) {
  if (options.ttl <= std::chrono::milliseconds(0)) return InvalidArgument("a leader lease needs a positive TTL");
  const auto ttl = options.ttl;
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  int64_t failing_since = 0;
  std::string last_leader;
  while (!stopped()) {
    // A lease per attempt: a standby may wait for hours, and a lease kept
    // for the whole wait would need keep-alives of its own.
    const int64_t started = SteadyNs();
    Result<LeaseId> lease = store->GrantLease(ttl);
    Result<TxnResult> r = lease.status();
    if (lease.ok()) {
      r = store->Txn({Compare::Missing(options.key)}, {Op::Put(options.key, options.identity, *lease)},
                     {Op::Get(options.key)});
    }
    spdlog::debug("campaign: lease {} and transaction {} in {} ms", lease.ok() ? "granted" : lease.status().ToString(),
                  r.ok() ? (r->succeeded ? "won" : "lost") : r.status().ToString(), (SteadyNs() - started) / 1'000'000);
    if (!r.ok()) {
      if (lease.ok()) store->RevokeLease(*lease).IgnoreError("best effort: the lease ends with its TTL anyway");
      if (stopped()) break;
      if (r.status().code() != Code::kUnavailable && r.status().code() != Code::kDeadlineExceeded) return r.status();
      // No quorum (or no etcd): a standby waits for it, however long,
      // saying so every ten seconds.
      if (failing_since == 0 || SteadyNs() - failing_since > 10'000'000'000) {
        spdlog::warn("cannot campaign for leadership yet: {}", r.status().ToString());
        failing_since = SteadyNs();
      }
      std::this_thread::sleep_for(std::min(ttl / 4, std::chrono::milliseconds(250)));
      continue;
    }
    if (r->succeeded) {
      std::unique_ptr<Leadership> l(new Leadership(store, std::move(options), *lease, r->revision));
      l->valid_until_ns_ = started + std::chrono::nanoseconds(ttl).count() * 9 / 10;
      l->keepalive_ = std::thread([raw = l.get()] { raw->KeepAlives(); });
      l->watchdog_ = std::thread([raw = l.get()] { raw->Watchdog(); });
      spdlog::info("elected leader (epoch {})", l->epoch_);
      return l;
    }
    store->RevokeLease(*lease).IgnoreError("best effort: the lease ends with its TTL anyway");
    // Someone leads: wait until its key goes (watched from the revision
    // read), then campaign again. Every TTL the key is read again anyway, in
    // case the watch missed the end.
    const std::optional<KeyValue>& current = r->gets.front();
    if (current && current->value != last_leader) {
      last_leader = current->value;
      if (standby) standby(current->value);
    }
    Mutex mu;
    CondVar cv;
    bool gone = !current.has_value();
    auto watch = store->Watch(options.key, r->revision + 1, [&](const std::vector<Event>& batch) {
      for (const Event& e : batch) {
        if (e.kv.key == options.key && e.type == Event::Type::kDelete) {
          MutexLock lock(&mu);
          gone = true;
          cv.SignalAll();
        }
      }
    });
    MutexLock lock(&mu);
    const auto until = std::chrono::steady_clock::now() + ttl;
    while (!gone && !stopped() && std::chrono::steady_clock::now() < until) {
      cv.WaitFor(&mu, std::min<std::chrono::milliseconds>(ttl, std::chrono::milliseconds(100)));
    }
    spdlog::debug("campaign: the leader key {} after {} ms", gone ? "went" : "stays",
                  (SteadyNs() - started) / 1'000'000);
    lock.Unlock();
    if (watch.ok()) watch->reset();  // ends the watch (waits for a running callback)
  }
  return Status(Code::kCancelled, "campaign stopped");
}

Leadership::~Leadership() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  if (keepalive_.joinable()) keepalive_.join();
  if (watchdog_.joinable()) watchdog_.join();
  StepDown();
}

bool Leadership::Leading() const { return leading_.load() && SteadyNs() < valid_until_ns_.load(); }

void Leadership::Lose(const Status& why) {
  leading_ = false;
  std::call_once(lost_once_, [&] {
    spdlog::error("leadership (epoch {}) lost: {}", epoch_, why.ToString());
    if (options_.on_lost) options_.on_lost(why);
  });
}

void Leadership::StepDown() {
  std::call_once(lost_once_, [] {});  // a step-down is not a loss
  if (leading_.exchange(false)) {
    if (Status s = store_->RevokeLease(lease_); !s.ok()) spdlog::warn("giving up leadership: {}", s.ToString());
  }
}

void Leadership::KeepAlives() {
  const auto period = std::max(options_.ttl / 3, std::chrono::milliseconds(1));
  MutexLock lock(&mu_);
  while (!stopping_) {
    if (wake_.WaitFor(&mu_, period, [this]() DROVER_REQUIRES(mu_) { return stopping_; })) return;
    lock.Unlock();
    const int64_t sent = SteadyNs();
    Status s = store_->KeepAlive(lease_);
    if (s.ok()) {
      // etcd's lease runs from when it received this, later than `sent`;
      // a tenth off covers clock-rate drift between the two machines.
      valid_until_ns_ = sent + std::chrono::nanoseconds(options_.ttl).count() * 9 / 10;
    } else if (s.code() == Code::kNotFound) {
      Lose(FailedPrecondition("the leader lease ended: " + s.message()));
    } else {
      spdlog::warn("leader keep-alive failed: {}", s.ToString());
    }
    lock.Lock();
    if (!leading_.load()) return;
  }
}

// A keep-alive can hang for the store's whole request timeout (etcd without
// a quorum on this side of a partition): the TTL is watched here, apart.
void Leadership::Watchdog() {
  MutexLock lock(&mu_);
  while (!stopping_ && leading_.load()) {
    const int64_t left_ns = valid_until_ns_.load() - SteadyNs();
    if (left_ns <= 0) {
      lock.Unlock();
      Lose(Status(Code::kDeadlineExceeded, "no successful keep-alive for a whole TTL"));
      return;
    }
    wake_.WaitFor(&mu_, std::chrono::nanoseconds(left_ns));
  }
}

Result<std::string> Leadership::CurrentLeader(Store* store, const std::string& key) {
  DROVER_ASSIGN_OR_RETURN(std::optional<KeyValue> kv, store->Get(key));
  return kv ? kv->value : std::string();
}

}  // namespace drover::store
