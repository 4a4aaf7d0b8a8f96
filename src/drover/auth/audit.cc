#include "drover/auth/audit.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace drover::auth {
namespace {

using nlohmann::json;

constexpr std::string_view kPrefix = "/audit/";
constexpr std::string_view kHeadKey = "/audit-head";
const std::string kGenesis(64, '0');
constexpr int kAppendAttempts = 5;

json Body(const AuditEntry& e) {
  return json{{"seq", e.seq},       {"time_ns", e.time_ns}, {"who", e.who},       {"token_id", e.token_id},
              {"tenant", e.tenant}, {"role", e.role},       {"action", e.action}, {"target", e.target},
              {"result", e.result}, {"source", e.source},   {"prev", e.prev}};
}

}  // namespace

std::string AuditLog::Key(int64_t seq) { return fmt::format("{}{:020}", kPrefix, seq); }

std::string AuditLog::HashOf(const AuditEntry& e) {
  // nlohmann's object keeps keys sorted: the dump is canonical.
  return Sha256Hex(e.prev + "\n" + Body(e).dump());
}

std::string AuditLog::ToJson(const AuditEntry& e) {
  json j = Body(e);
  j["hash"] = e.hash;
  return j.dump();
}

Result<AuditEntry> AuditLog::FromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("audit entry is not a JSON object");
  try {
    AuditEntry e;
    e.seq = j.at("seq").get<int64_t>();
    e.time_ns = j.at("time_ns").get<int64_t>();
    e.who = j.at("who").get<std::string>();
    e.token_id = j.at("token_id").get<std::string>();
    e.tenant = j.at("tenant").get<std::string>();
    e.role = j.at("role").get<std::string>();
    e.action = j.at("action").get<std::string>();
    e.target = j.at("target").get<std::string>();
    e.result = j.at("result").get<std::string>();
    e.source = j.at("source").get<std::string>();
    e.prev = j.at("prev").get<std::string>();
    e.hash = j.at("hash").get<std::string>();
    return e;
  } catch (const std::exception& ex) {
    return InvalidArgument(fmt::format("audit entry is malformed: {}", ex.what()));
  }
}

AuditEntry AuditLog::EntryFor(const Principal& who, std::string action, std::string target, const Status& result) {
  AuditEntry e;
  e.who = who.name.empty() ? "anonymous" : who.name;
  e.token_id = who.token_id;
  e.tenant = who.tenant;
  e.role = who.name.empty() && who.token_id.empty() ? "" : std::string(RoleName(who.role));
  e.action = std::move(action);
  e.target = std::move(target);
  e.result = result.ok() ? "ok" : result.ToString();
  e.source = who.source;
  return e;
}

Status AuditLog::Append(const Principal& who, std::string action, std::string target, const Status& result) {
  std::vector<AuditEntry> one{EntryFor(who, std::move(action), std::move(target), result)};
  for (int attempt = 0; attempt < kAppendAttempts; ++attempt) {
    int64_t seq = 0;
    DROVER_ASSIGN_OR_RETURN(store::TxnResult r,
                            CommitWith(
                                one,
                                [this](std::vector<store::Compare> compares, std::vector<store::Op> ops) {
                                  return store_->Txn(compares, ops, {});
                                },
                                &seq));
    if (!r.succeeded) continue;
    // The entry is in: a failed trim is retried at the next batch.
    if (TrimDue(seq, 1)) {
      if (Status s = Trim(); !s.ok()) spdlog::warn("audit log trim failed: {}", s.ToString());
    }
    return Status::Ok();
  }
  return Aborted("audit log head kept moving; entry not appended");
}

bool AuditLog::TrimDue(int64_t last_seq, int64_t count) const {
  return archive_ != nullptr && count > 0 && last_seq / kTrimBatch != (last_seq - count) / kTrimBatch;
}

Result<store::TxnResult> AuditLog::CommitWith(std::vector<AuditEntry> entries, const Txn& txn, int64_t* last_seq) {
  MutexLock lock(&mu_);
  for (int attempt = 0;; ++attempt) {
    const bool cached = head_.has_value();
    if (!cached) {
      DROVER_ASSIGN_OR_RETURN(auto head, store_->Get(std::string(kHeadKey)));
      Head h{0, std::string(kGenesis), 0};
      if (head.has_value()) {
        json j = json::parse(head->value, nullptr, false);
        if (j.is_discarded() || !j.contains("seq") || !j.contains("hash")) return Internal("audit head is corrupt");
        h = {j["seq"].get<int64_t>(), j["hash"].get<std::string>(), head->mod_revision};
      }
      head_ = h;
    }
    int64_t last = head_->seq;
    std::string prev = head_->hash;
    std::vector<store::Compare> compares{head_->mod_revision != 0
                                             ? store::Compare::ModRevisionIs(std::string(kHeadKey), head_->mod_revision)
                                             : store::Compare::Missing(std::string(kHeadKey))};
    std::vector<store::Op> ops;
    const int64_t now = ToUnixNanos(clock_->Now());
    for (AuditEntry& e : entries) {
      e.seq = ++last;
      e.time_ns = now;
      e.prev = prev;
      e.hash = HashOf(e);
      prev = e.hash;
      compares.push_back(store::Compare::Missing(Key(e.seq)));
      ops.push_back(store::Op::Put(Key(e.seq), ToJson(e)));
    }
    if (!entries.empty())
      ops.push_back(store::Op::Put(std::string(kHeadKey), json{{"seq", last}, {"hash", prev}}.dump()));
    if (last_seq != nullptr) *last_seq = last;
    Result<store::TxnResult> r = txn(std::move(compares), std::move(ops));
    if (r.ok() && r->succeeded) {
      if (!entries.empty()) head_ = Head{last, prev, r->revision};  // all writes of a txn share its revision
      return r;
    }
    head_.reset();  // read it again next time
    // A head kept in memory that someone else moved: once more, read afresh.
    if (!r.ok() || !cached || attempt > 0) return r;
  }
}

Status AuditLog::Trim() {
  if (archive_ == nullptr) return Status::Ok();
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(auto head, store_->Get(std::string(kHeadKey)));
  if (!head.has_value()) return Status::Ok();
  json h = json::parse(head->value, nullptr, false);
  if (h.is_discarded() || !h.contains("seq")) return Internal("audit head is corrupt");
  return TrimLocked(h["seq"].get<int64_t>());
}

// Archive first, then delete: a crash in between leaves entries in both,
// which Verify reads once.
Status AuditLog::TrimLocked(int64_t head_seq) {
  const int64_t last_moved = head_seq - keep_;
  while (true) {
    DROVER_ASSIGN_OR_RETURN(store::RangeResult page, store_->Range(std::string(kPrefix), kTrimBatch));
    std::vector<store::ArchivedAudit> moving;
    std::vector<store::Op> deletes;
    for (const store::KeyValue& kv : page.kvs) {
      auto e = FromJson(kv.value);
      if (!e.ok()) return Internal(fmt::format("audit entry at {} is unreadable; not trimming", kv.key));
      if (e->seq > last_moved) break;
      moving.push_back({e->seq, kv.value});
      deletes.push_back(store::Op::Delete(kv.key));
    }
    if (moving.empty()) return Status::Ok();
    DROVER_RETURN_IF_ERROR(archive_->PutAudit(moving));
    DROVER_RETURN_IF_ERROR(store_->WriteInChunks(deletes));
    if (moving.size() < static_cast<size_t>(kTrimBatch)) return Status::Ok();
  }
}

Result<std::vector<AuditEntry>> AuditLog::List(int64_t since_ns, int64_t limit) {
  DROVER_ASSIGN_OR_RETURN(store::RangeResult range, store_->Range(std::string(kPrefix)));
  std::vector<AuditEntry> out;
  for (const store::KeyValue& kv : range.kvs) {
    auto e = FromJson(kv.value);
    if (!e.ok() || e->time_ns < since_ns) continue;
    out.push_back(std::move(*e));
  }
  if (limit > 0 && static_cast<int64_t>(out.size()) > limit) {
    out.erase(out.begin(), out.end() - limit);  // the newest `limit`
  }
  return out;
}

Result<AuditVerdict> AuditLog::Verify() {
  AuditVerdict v;
  std::string prev = kGenesis;
  int64_t expect = 1;
  auto fail = [&](int64_t seq, std::string why) {
    v.ok = false;
    v.bad_seq = seq;
    v.reason = std::move(why);
    return v;
  };
  // The archived part of the chain, then the store's.
  std::vector<store::KeyValue> entries;
  int64_t archived_last = 0;
  if (archive_ != nullptr) {
    int64_t from = 1;
    while (true) {
      DROVER_ASSIGN_OR_RETURN(std::vector<store::ArchivedAudit> page, archive_->ReadAudit(from, 10'000));
      for (store::ArchivedAudit& a : page) {
        archived_last = a.seq;
        entries.push_back({Key(a.seq), std::move(a.entry)});
      }
      if (page.size() < 10'000) break;
      from = page.back().seq + 1;
    }
  }
  DROVER_ASSIGN_OR_RETURN(store::RangeResult range, store_->Range(std::string(kPrefix)));
  for (store::KeyValue& kv : range.kvs) {
    // Archived, but a crash came before its delete: it was read above.
    if (archived_last > 0 && kv.key <= Key(archived_last)) continue;
    entries.push_back(std::move(kv));
  }
  for (const store::KeyValue& kv : entries) {
    auto e = FromJson(kv.value);
    if (!e.ok()) return fail(expect, fmt::format("entry at key {} is unreadable: {}", kv.key, e.status().message()));
    if (e->seq != expect || kv.key != Key(e->seq)) {
      return fail(expect, fmt::format("expected entry {} but found entry {} at {} (dropped or reordered)", expect,
                                      e->seq, kv.key));
    }
    if (e->prev != prev)
      return fail(e->seq, fmt::format("entry {} does not follow entry {} (prev hash differs)", e->seq, e->seq - 1));
    if (HashOf(*e) != e->hash)
      return fail(e->seq, fmt::format("entry {} was edited (its hash does not match)", e->seq));
    prev = e->hash;
    ++expect;
    ++v.entries;
  }
  DROVER_ASSIGN_OR_RETURN(auto head, store_->Get(std::string(kHeadKey)));
  if (head.has_value()) {
    json h = json::parse(head->value, nullptr, false);
    if (h.is_discarded() || !h.contains("seq") || !h.contains("hash")) return fail(expect, "audit head is unreadable");
    int64_t hseq = h["seq"].get<int64_t>();
    if (hseq != v.entries || h["hash"].get<std::string>() != prev) {
      return fail(v.entries + 1, fmt::format("the head names entry {} but the chain ends at entry {} (entries dropped)",
                                             hseq, v.entries));
    }
  } else if (v.entries > 0) {
    return fail(v.entries, "entries exist but the audit head is missing");
  }
  v.head = prev == kGenesis ? "" : prev;
  return v;
}

}  // namespace drover::auth
