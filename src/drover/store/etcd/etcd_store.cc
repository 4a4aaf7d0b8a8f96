#include "drover/store/etcd/etcd_store.h"
#include "drover/common/mutex.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "drover/common/files.h"
#include "drover/store/validate.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"

namespace drover::store {
namespace {

namespace pb = etcdserverpb;

// gRPC's codes are ours (status.h keeps the numbering); the few we do not
// have become kInternal.
Status FromGrpc(const grpc::Status& s, const char* what) {
  if (s.ok()) return Status::Ok();
  Code code = Code::kInternal;
  switch (s.error_code()) {
    case grpc::StatusCode::CANCELLED: code = Code::kCancelled; break;
    case grpc::StatusCode::INVALID_ARGUMENT: code = Code::kInvalidArgument; break;
    case grpc::StatusCode::DEADLINE_EXCEEDED: code = Code::kDeadlineExceeded; break;
    case grpc::StatusCode::NOT_FOUND: code = Code::kNotFound; break;
    case grpc::StatusCode::ALREADY_EXISTS: code = Code::kAlreadyExists; break;
    case grpc::StatusCode::PERMISSION_DENIED: code = Code::kPermissionDenied; break;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: code = Code::kResourceExhausted; break;
    case grpc::StatusCode::FAILED_PRECONDITION: code = Code::kFailedPrecondition; break;
    case grpc::StatusCode::ABORTED: code = Code::kAborted; break;
    case grpc::StatusCode::OUT_OF_RANGE: code = Code::kOutOfRange; break;
    case grpc::StatusCode::UNIMPLEMENTED: code = Code::kUnimplemented; break;
    case grpc::StatusCode::UNAVAILABLE: code = Code::kUnavailable; break;
    case grpc::StatusCode::UNAUTHENTICATED: code = Code::kUnauthenticated; break;
    default: break;
  }
  return Status(code, fmt::format("etcd {}: {}", what, s.error_message()));
}

// A request that may not have reached a working member: try another one.
bool MoveOn(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

bool IsCompacted(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::OUT_OF_RANGE && s.error_message().find("compacted") != std::string::npos;
}

struct Member {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
};

// The members and which one requests go to. Shared by the store and its
// watches (which may outlive the store).
class Members {
 public:
  Members(std::vector<std::unique_ptr<Member>> members, std::chrono::milliseconds timeout)
      : members_(std::move(members)),
        timeout_(timeout),
        failed_ns_(std::make_unique<std::atomic<int64_t>[]>(members_.size())) {}

  size_t size() const { return members_.size(); }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The member to use now. The endpoints are in order of preference (a
  // server lists its own machine's member first): the first that has not
  // failed a request for kPreferAgainAfter and whose channel does not
  // already know it cannot connect. So a store that moved away while its
  // own member had no leader comes back to it, rather than stay on a remote
  // member that the next partition cuts off. Otherwise the current one,
  // unless its channel knows it cannot connect and another's does not.
  size_t Pick() {
    const int64_t now = SteadyNs();
    for (size_t i = 0; i < members_.size(); ++i) {
      const int64_t failed = failed_ns_[i].load();
      if ((failed == 0 || now - failed >= kPreferAgainAfter.count()) &&
          members_[i]->channel->GetState(true) != GRPC_CHANNEL_TRANSIENT_FAILURE) {
        size_t current = current_.load();
        if (i != current && current_.compare_exchange_strong(current, i) && failed != 0) {
          spdlog::info("etcd endpoint {} is used again", members_[i]->endpoint);
        }
        return i;
      }
    }
    size_t first = current_.load();
    for (size_t i = 0; i < members_.size(); ++i) {
      size_t index = (first + i) % members_.size();
      if (members_[index]->channel->GetState(true) != GRPC_CHANNEL_TRANSIENT_FAILURE) {
        if (index != first) current_.compare_exchange_strong(first, index);
        return index;
      }
    }
    return first;
  }
  Member& at(size_t index) { return *members_[index]; }

  // `index` failed a request: later requests go to the next member.
  void Failed(size_t index) {
    failed_ns_[index] = SteadyNs();
    size_t next = (index + 1) % members_.size();
    if (current_.compare_exchange_strong(index, next) && members_.size() > 1) {
      spdlog::warn("etcd endpoint {} failed a request; using {}", members_[index]->endpoint, members_[next]->endpoint);
    }
  }

  // Runs `call(member, context)` with the request deadline; a read that
  // fails as unavailable is tried once more on the next member. Every
  // request asks for a member with a leader ("hasleader", as watches do): a
  // member cut off from the majority then refuses at once ("no leader",
  // unavailable) instead of holding the request for the whole deadline,
  // and the store moves on to the next member.
  template <typename Call>
  grpc::Status Run(bool read, Call&& call) {
    const auto deadline = std::chrono::system_clock::now() + timeout_;
    size_t moves = 0;
    grpc::Status status;
    while (true) {
      size_t index = Pick();
      grpc::ClientContext context;
      context.set_deadline(deadline);
      context.AddMetadata("hasleader", "true");
      status = call(*members_[index], context);
      // Refused before anything was applied: a proposal etcd dropped while
      // its leadership moved (MoveLeader, an election under way), or a
      // member without a leader. Sent again after a pause (to the next
      // member when this one has no leader), within the deadline.
      const bool no_leader = status.error_message().find("no leader") != std::string::npos;
      if (no_leader || status.error_message().find("raft proposal dropped") != std::string::npos) {
        if (std::chrono::system_clock::now() + kRefusedPause >= deadline) return status;
        if (no_leader) Failed(index);
        std::this_thread::sleep_for(kRefusedPause);
        continue;
      }
      if (!MoveOn(status)) return status;
      Failed(index);
      // Any other failure of a write may have applied: not sent again. A
      // read is tried once more, on the next member.
      if (!read || ++moves >= std::min<size_t>(2, members_.size())) return status;
    }
  }

 private:
  static constexpr std::chrono::nanoseconds kPreferAgainAfter = std::chrono::seconds(1);
  static constexpr std::chrono::milliseconds kRefusedPause{20};
  static int64_t SteadyNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  const std::vector<std::unique_ptr<Member>> members_;
  const std::chrono::milliseconds timeout_;
  std::atomic<size_t> current_{0};
  const std::unique_ptr<std::atomic<int64_t>[]> failed_ns_;  // steady ns of each member's last failure; 0: none
};

KeyValue FromPb(const mvccpb::KeyValue& kv, size_t prefix_bytes) {
  KeyValue out;
  out.key = kv.key().substr(std::min(prefix_bytes, kv.key().size()));
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

// One branch of a transaction with the writes to a key merged (etcd refuses
// a transaction that writes a key twice): the last write of each key stays
// where it is, earlier ones go. A Get between two writes of its key would
// have seen the first, which no longer exists: refused.
Result<std::vector<const Op*>> MergeWrites(const std::vector<Op>& ops) {
  std::vector<const Op*> kept;
  std::vector<bool> dropped;
  std::unordered_map<std::string_view, size_t> last_write, last_get;
  for (const Op& op : ops) {
    if (op.kind == Op::Kind::kGet) {
      last_get[op.key] = kept.size();
    } else if (op.kind == Op::Kind::kPut || op.kind == Op::Kind::kDelete) {
      if (auto it = last_write.find(op.key); it != last_write.end()) {
        if (auto get = last_get.find(op.key); get != last_get.end() && get->second > it->second) {
          return InvalidArgument(
              fmt::format("a transaction for etcd cannot read key '{}' between two writes of it", op.key));
        }
        dropped[it->second] = true;
      }
      last_write[op.key] = kept.size();
    }
    kept.push_back(&op);
    dropped.push_back(false);
  }
  std::vector<const Op*> out;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!dropped[i]) out.push_back(kept[i]);
  }
  return out;
}

class EtcdStore final : public Store {
 public:
  EtcdStore(std::shared_ptr<Members> members, EtcdOptions options)
      : members_(std::move(members)), options_(std::move(options)), prefix_(options_.key_prefix) {}

  Result<TxnResult> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                        const std::vector<Op>& failure) override;
  Result<RangeResult> Range(const std::string& prefix, int64_t limit, const std::string& start) override;
  Result<std::unique_ptr<WatchHandle>> Watch(const std::string& prefix, int64_t start_revision,
                                             WatchCallback callback) override;
  Status Compact(int64_t revision) override;
  Result<bool> MoveLeaderAway();
  Result<LeaseId> GrantLease(Duration ttl) override;
  Status KeepAlive(LeaseId lease) override;
  Status RevokeLease(LeaseId lease) override;
  Result<int64_t> CurrentRevision() override;
  // etcd's limits, less room for the request's own framing and compares.
  Limits limits() const override {
    return {static_cast<size_t>(options_.max_txn_ops),
            static_cast<size_t>(std::max<int64_t>(options_.max_request_bytes - 4096, 1024))};
  }

  // The etcd range [key, range_end) of the keys under `prefix`.
  std::pair<std::string, std::string> PrefixRange(const std::string& prefix) const {
    std::string key = prefix_ + prefix;
    std::optional<std::string> end = PrefixEnd(key);
    if (key.empty()) key.assign(1, '\0');  // with range_end "\0": every key
    return {key, end.value_or(std::string(1, '\0'))};
  }

 private:
  Status AddOps(const std::vector<Op>& ops, google::protobuf::RepeatedPtrField<pb::RequestOp>* out) const;

  const std::shared_ptr<Members> members_;
  const EtcdOptions options_;
  const std::string prefix_;
};

Status EtcdStore::AddOps(const std::vector<Op>& ops, google::protobuf::RepeatedPtrField<pb::RequestOp>* out) const {
  DROVER_ASSIGN_OR_RETURN(std::vector<const Op*> merged, MergeWrites(ops));
  if (static_cast<int64_t>(merged.size()) > options_.max_txn_ops) {
    return InvalidArgument(
        fmt::format("a transaction branch of {} operations exceeds etcd's limit of {} (--max-txn-ops)", merged.size(),
                    options_.max_txn_ops));
  }
  for (const Op* op : merged) {
    pb::RequestOp* request = out->Add();
    switch (op->kind) {
      case Op::Kind::kPut: {
        pb::PutRequest* put = request->mutable_request_put();
        put->set_key(prefix_ + op->key);
        put->set_value(op->value);
        put->set_lease(op->lease);
        break;
      }
      case Op::Kind::kDelete: request->mutable_request_delete_range()->set_key(prefix_ + op->key); break;
      case Op::Kind::kDeletePrefix: {
        auto [key, end] = PrefixRange(op->key);
        pb::DeleteRangeRequest* del = request->mutable_request_delete_range();
        del->set_key(key);
        del->set_range_end(end);
        break;
      }
      case Op::Kind::kGet: request->mutable_request_range()->set_key(prefix_ + op->key); break;
    }
  }
  return Status::Ok();
}

Result<TxnResult> EtcdStore::Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                                 const std::vector<Op>& failure) {
  DROVER_RETURN_IF_ERROR(ValidateTxn(compares, success, failure));
  if (static_cast<int64_t>(compares.size()) > options_.max_txn_ops) {
    return InvalidArgument(fmt::format("a transaction of {} compares exceeds etcd's limit of {} (--max-txn-ops)",
                                       compares.size(), options_.max_txn_ops));
  }
  pb::TxnRequest request;
  for (const Compare& c : compares) {
    pb::Compare* out = request.add_compare();
    out->set_key(prefix_ + c.key);
    switch (c.op) {
      case Compare::Op::kEqual: out->set_result(pb::Compare::EQUAL); break;
      case Compare::Op::kNotEqual: out->set_result(pb::Compare::NOT_EQUAL); break;
      case Compare::Op::kLess: out->set_result(pb::Compare::LESS); break;
      case Compare::Op::kGreater: out->set_result(pb::Compare::GREATER); break;
    }
    switch (c.target) {
      case Compare::Target::kVersion:
        out->set_target(pb::Compare::VERSION);
        out->set_version(c.number);
        break;
      case Compare::Target::kCreateRevision:
        out->set_target(pb::Compare::CREATE);
        out->set_create_revision(c.number);
        break;
      case Compare::Target::kModRevision:
        out->set_target(pb::Compare::MOD);
        out->set_mod_revision(c.number);
        break;
      case Compare::Target::kValue:
        out->set_target(pb::Compare::VALUE);
        out->set_value(c.value);
        break;
    }
  }
  DROVER_RETURN_IF_ERROR(AddOps(success, request.mutable_success()));
  DROVER_RETURN_IF_ERROR(AddOps(failure, request.mutable_failure()));
  if (static_cast<int64_t>(request.ByteSizeLong()) > options_.max_request_bytes) {
    return InvalidArgument(
        fmt::format("a transaction of {} bytes exceeds etcd's request limit of {} (--max-request-bytes)",
                    request.ByteSizeLong(), options_.max_request_bytes));
  }
  const bool read_only =
      std::all_of(success.begin(), success.end(), [](const Op& op) { return op.kind == Op::Kind::kGet; }) &&
      std::all_of(failure.begin(), failure.end(), [](const Op& op) { return op.kind == Op::Kind::kGet; });
  pb::TxnResponse response;
  grpc::Status s = members_->Run(
      read_only, [&](Member& m, grpc::ClientContext& context) { return m.kv->Txn(&context, request, &response); });
  DROVER_RETURN_IF_ERROR(FromGrpc(s, "txn"));
  TxnResult result;
  result.succeeded = response.succeeded();
  result.revision = response.header().revision();
  for (const pb::ResponseOp& op : response.responses()) {
    if (!op.has_response_range()) continue;
    const pb::RangeResponse& range = op.response_range();
    if (range.kvs().empty()) {
      result.gets.emplace_back(std::nullopt);
    } else {
      result.gets.emplace_back(FromPb(range.kvs(0), prefix_.size()));
    }
  }
  return result;
}

Result<RangeResult> EtcdStore::Range(const std::string& prefix, int64_t limit, const std::string& start) {
  DROVER_RETURN_IF_ERROR(ValidatePrefix(prefix));
  DROVER_RETURN_IF_ERROR(ValidatePrefix(start));
  auto [key, end] = PrefixRange(prefix);
  pb::RangeRequest request;
  request.set_key(start > prefix ? prefix_ + start : key);
  request.set_range_end(end);
  request.set_limit(std::max<int64_t>(limit, 0));
  pb::RangeResponse response;
  grpc::Status s = members_->Run(
      true, [&](Member& m, grpc::ClientContext& context) { return m.kv->Range(&context, request, &response); });
  DROVER_RETURN_IF_ERROR(FromGrpc(s, "range"));
  RangeResult result;
  result.revision = response.header().revision();
  result.more = response.more();
  result.kvs.reserve(static_cast<size_t>(response.kvs_size()));
  for (const mvccpb::KeyValue& kv : response.kvs()) result.kvs.push_back(FromPb(kv, prefix_.size()));
  return result;
}

Result<int64_t> EtcdStore::CurrentRevision() {
  pb::RangeRequest request;
  request.set_key(prefix_.empty() ? std::string(1, '\0') : prefix_);
  request.set_count_only(true);
  pb::RangeResponse response;
  grpc::Status s = members_->Run(
      true, [&](Member& m, grpc::ClientContext& context) { return m.kv->Range(&context, request, &response); });
  DROVER_RETURN_IF_ERROR(FromGrpc(s, "range"));
  return response.header().revision();
}

Result<bool> EtcdStore::MoveLeaderAway() {
  if (members_->size() < 2) return false;
  auto status_of = [this](Member& m, pb::StatusResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + members_->timeout());
    return m.maintenance->Status(&context, pb::StatusRequest(), out);
  };
  Member& own = members_->at(0);
  pb::StatusResponse own_status;
  DROVER_RETURN_IF_ERROR(FromGrpc(status_of(own, &own_status), "status"));
  if (own_status.leader() == 0 || own_status.leader() != own_status.header().member_id()) return false;
  for (size_t i = 1; i < members_->size(); ++i) {
    Member& other = members_->at(i);
    pb::StatusResponse status;
    if (!status_of(other, &status).ok() || status.islearner() || status.leader() != own_status.leader()) continue;
    pb::MoveLeaderRequest request;
    request.set_targetid(status.header().member_id());
    pb::MoveLeaderResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + members_->timeout());
    DROVER_RETURN_IF_ERROR(FromGrpc(own.maintenance->MoveLeader(&context, request, &response), "move leader"));
    spdlog::info("moved etcd's leadership from {} (this server's member) to {}", own.endpoint, other.endpoint);
    return true;
  }
  return Unavailable("no other etcd member that follows this one answers");
}

Status EtcdStore::Compact(int64_t revision) {
  pb::CompactionRequest request;
  request.set_revision(revision);
  pb::CompactionResponse response;
  grpc::Status s = members_->Run(
      false, [&](Member& m, grpc::ClientContext& context) { return m.kv->Compact(&context, request, &response); });
  if (IsCompacted(s)) return Status::Ok();  // compacted there already (by us, or by etcd's own auto-compaction)
  return FromGrpc(s, "compact");
}

Result<LeaseId> EtcdStore::GrantLease(Duration ttl) {
  if (ttl <= Duration(0)) return InvalidArgument("a lease needs a positive TTL");
  pb::LeaseGrantRequest request;
  request.set_ttl(std::chrono::ceil<std::chrono::seconds>(ttl).count());
  pb::LeaseGrantResponse response;
  grpc::Status s = members_->Run(false, [&](Member& m, grpc::ClientContext& context) {
    return m.lease->LeaseGrant(&context, request, &response);
  });
  DROVER_RETURN_IF_ERROR(FromGrpc(s, "lease grant"));
  if (!response.error().empty()) return Internal("etcd lease grant: " + response.error());
  return response.id();
}

Status EtcdStore::KeepAlive(LeaseId lease) {
  pb::LeaseKeepAliveResponse response;
  bool answered = false;
  grpc::Status s = members_->Run(true, [&](Member& m, grpc::ClientContext& context) {
    auto stream = m.lease->LeaseKeepAlive(&context);
    pb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    answered = stream->Write(request) && stream->Read(&response);
    stream->WritesDone();
    grpc::Status finished = stream->Finish();
    return answered || !finished.ok() ? finished : grpc::Status(grpc::StatusCode::UNAVAILABLE, "no keep-alive answer");
  });
  if (!answered) return FromGrpc(s, "lease keep-alive");
  if (response.ttl() <= 0) return NotFound(fmt::format("lease {} has ended", lease));
  return Status::Ok();
}

Status EtcdStore::RevokeLease(LeaseId lease) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease);
  pb::LeaseRevokeResponse response;
  grpc::Status s = members_->Run(false, [&](Member& m, grpc::ClientContext& context) {
    return m.lease->LeaseRevoke(&context, request, &response);
  });
  return FromGrpc(s, "lease revoke");
}

// One watch: a thread that keeps a Watch stream open (reconnecting after a
// break, from the revision after the last one delivered) and calls the
// callback with the events of each revision.
class EtcdWatch final : public WatchHandle {
 public:
  EtcdWatch(std::shared_ptr<Members> members, std::string key, std::string range_end, size_t prefix_bytes,
            int64_t next_revision, WatchCallback callback)
      : members_(std::move(members)),
        key_(std::move(key)),
        range_end_(std::move(range_end)),
        prefix_bytes_(prefix_bytes),
        next_revision_(next_revision),
        callback_(std::move(callback)) {
    thread_ = std::thread([this] { Run(); });
  }

  ~EtcdWatch() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    wake_.SignalAll();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // destroyed by its own callback (the contract forbids it): do not deadlock
    } else {
      thread_.join();
    }
  }

 private:
  void Run() {
    std::chrono::milliseconds backoff(50);
    while (true) {
      auto context = std::make_shared<grpc::ClientContext>();
      // A member cut off from the etcd leader cancels this watch rather than
      // leave it silent: then we move on to another member.
      context->AddMetadata("hasleader", "true");
      size_t index = members_->Pick();
      {
        MutexLock lock(&mu_);
        if (stopping_) return;
        context_ = context;
      }
      bool delivered = false;
      Outcome outcome = Stream(members_->at(index), *context, &delivered);
      if (outcome == Outcome::kEnded) return;
      if (delivered) backoff = std::chrono::milliseconds(50);
      members_->Failed(index);
      MutexLock lock(&mu_);
      if (wake_.WaitFor(&mu_, backoff, [this]() DROVER_REQUIRES(mu_) { return stopping_; })) return;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }

  enum class Outcome { kBroken, kEnded };

  Outcome Stream(Member& member, grpc::ClientContext& context, bool* delivered) {
    auto stream = member.watch->Watch(&context);
    pb::WatchRequest request;
    pb::WatchCreateRequest* create = request.mutable_create_request();
    create->set_key(key_);
    create->set_range_end(range_end_);
    create->set_start_revision(next_revision_);
    if (!stream->Write(request)) {
      (void)stream->Finish();
      return Stopping() ? Outcome::kEnded : Outcome::kBroken;
    }
    pb::WatchResponse response;
    while (stream->Read(&response)) {
      if (response.compact_revision() > 0) {
        spdlog::error(
            "etcd watch of '{}' lost its history: revision {} was compacted (compacted to {}); the watch ends", key_,
            next_revision_, response.compact_revision());
        context.TryCancel();
        (void)stream->Finish();
        if (!Stopping()) callback_({});
        return Outcome::kEnded;
      }
      if (response.canceled()) break;
      Deliver(response);
      *delivered = *delivered || response.events_size() > 0;
    }
    grpc::Status status = stream->Finish();
    if (Stopping()) return Outcome::kEnded;
    spdlog::warn("etcd watch of '{}' on {} broke ({}); resuming at revision {}", key_, member.endpoint,
                 status.ok() ? std::string("cancelled by etcd") : status.error_message(), next_revision_);
    return Outcome::kBroken;
  }

  void Deliver(const pb::WatchResponse& response) {
    std::vector<Event> batch;
    int64_t revision = 0;
    auto flush = [&] {
      if (batch.empty()) return;
      callback_(batch);
      next_revision_ = revision + 1;
      batch.clear();
    };
    for (const mvccpb::Event& e : response.events()) {
      if (e.kv().mod_revision() < next_revision_) continue;  // seen before a reconnect
      if (e.kv().mod_revision() != revision) {
        flush();
        revision = e.kv().mod_revision();
      }
      Event event;
      event.type = e.type() == mvccpb::Event::DELETE ? Event::Type::kDelete : Event::Type::kPut;
      event.kv = FromPb(e.kv(), prefix_bytes_);
      batch.push_back(std::move(event));
    }
    flush();
  }

  bool Stopping() {
    MutexLock lock(&mu_);
    return stopping_;
  }

  const std::shared_ptr<Members> members_;
  const std::string key_;
  const std::string range_end_;
  const size_t prefix_bytes_;
  int64_t next_revision_;  // owned by thread_
  const WatchCallback callback_;
  Mutex mu_;
  CondVar wake_;
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> context_ DROVER_GUARDED_BY(mu_);
  std::thread thread_;
};

Result<std::unique_ptr<WatchHandle>> EtcdStore::Watch(const std::string& prefix, int64_t start_revision,
                                                      WatchCallback callback) {
  DROVER_RETURN_IF_ERROR(ValidatePrefix(prefix));
  if (start_revision < 0) return InvalidArgument("a watch cannot start at a negative revision");
  DROVER_ASSIGN_OR_RETURN(int64_t current, CurrentRevision());
  auto [key, end] = PrefixRange(prefix);
  if (start_revision == 0) {
    start_revision = current + 1;
  } else if (start_revision <= current) {
    // A read at the start revision fails exactly when that history is
    // compacted: say so now, not later from the watch's thread.
    pb::RangeRequest request;
    request.set_key(key);
    request.set_range_end(end);
    request.set_revision(start_revision);
    request.set_count_only(true);
    pb::RangeResponse response;
    grpc::Status s = members_->Run(
        true, [&](Member& m, grpc::ClientContext& context) { return m.kv->Range(&context, request, &response); });
    if (IsCompacted(s)) return OutOfRange(fmt::format("the history before revision {} was compacted", start_revision));
    DROVER_RETURN_IF_ERROR(FromGrpc(s, "range"));
  }
  return std::unique_ptr<WatchHandle>(
      std::make_unique<EtcdWatch>(members_, key, end, prefix_.size(), start_revision, std::move(callback)));
}

}  // namespace

Result<EtcdOptions> ParseEtcdUrl(const std::string& url) {
  constexpr std::string_view kScheme = "etcd://";
  if (url.rfind(kScheme, 0) != 0)
    return InvalidArgument(fmt::format("'{}' is not an etcd://host:port,... address", url));
  std::string rest = url.substr(kScheme.size());
  EtcdOptions options;
  options.key_prefix = "drover/";
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    options.key_prefix = rest.substr(slash + 1);
    rest.resize(slash);
    if (!options.key_prefix.empty() && options.key_prefix.back() != '/') options.key_prefix += '/';
  }
  size_t begin = 0;
  while (begin <= rest.size()) {
    size_t comma = rest.find(',', begin);
    std::string endpoint = rest.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    size_t colon = endpoint.rfind(':');
    if (endpoint.empty() || colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size() ||
        endpoint.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      return InvalidArgument(fmt::format("etcd endpoint '{}' in '{}' is not host:port", endpoint, url));
    }
    options.endpoints.push_back(endpoint);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return options;
}

Result<bool> MoveEtcdLeaderAway(Store* store) {
  auto* etcd = dynamic_cast<EtcdStore*>(store);
  return etcd != nullptr ? etcd->MoveLeaderAway() : Result<bool>(false);
}

Result<std::unique_ptr<Store>> OpenEtcdStore(const EtcdOptions& options) {
  if (options.endpoints.empty()) return InvalidArgument("no etcd endpoints");
  if (options.max_txn_ops < 1 || options.max_request_bytes < 1) return InvalidArgument("etcd limits must be positive");
  const bool tls = !options.ca_file.empty() || !options.cert_file.empty() || !options.key_file.empty();
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (tls) {
    if (options.ca_file.empty() || options.cert_file.empty() || options.key_file.empty()) {
      return InvalidArgument("etcd TLS needs all of the CA, certificate and key files");
    }
    grpc::SslCredentialsOptions ssl;
    DROVER_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadTextFile(options.ca_file));
    DROVER_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadTextFile(options.cert_file));
    DROVER_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadTextFile(options.key_file));
    credentials = grpc::SslCredentials(ssl);
  }
  std::vector<std::unique_ptr<Member>> members;
  for (const std::string& endpoint : options.endpoints) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);  // ranges are paged by the caller, but a page may be large
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3'000);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
    auto member = std::make_unique<Member>();
    member->endpoint = endpoint;
    member->channel = grpc::CreateCustomChannel(endpoint, credentials, args);
    member->kv = pb::KV::NewStub(member->channel);
    member->watch = pb::Watch::NewStub(member->channel);
    member->lease = pb::Lease::NewStub(member->channel);
    member->maintenance = pb::Maintenance::NewStub(member->channel);
    members.push_back(std::move(member));
  }
  auto shared = std::make_shared<Members>(std::move(members), options.request_timeout);
  auto store = std::make_unique<EtcdStore>(shared, options);
  // Some member must answer; try each in turn.
  Status last;
  for (size_t i = 0; i < shared->size(); ++i) {
    Result<int64_t> revision = store->CurrentRevision();
    if (revision.ok()) return std::unique_ptr<Store>(std::move(store));
    last = revision.status();
  }
  return Unavailable(
      fmt::format("no etcd endpoint of {} answers: {}", fmt::join(options.endpoints, ","), last.message()));
}

}  // namespace drover::store
