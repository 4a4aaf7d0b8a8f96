#include "drover/auth/authority.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "drover/common/files.h"
#include "drover/common/ids.h"

namespace drover::auth {
namespace {

using nlohmann::json;

constexpr std::string_view kTokensPrefix = "/auth/tokens/";
constexpr std::string_view kJoinPrefix = "/auth/join/";
constexpr std::string_view kLoginPrefix = "/auth/login/";
// One-time codes: 32 random bytes, base64url.
constexpr size_t kCodeBytes = 32;
constexpr size_t kMaxCodeChars = 64;

int64_t Nanos(const Clock* c) { return ToUnixNanos(c->Now()); }

Result<TokenInfo> ParseRecord(const std::string& text, std::string* hash) {
  try {
    json j = json::parse(text);
    TokenInfo t;
    t.id = j.at("id").get<std::string>();
    t.name = j.at("name").get<std::string>();
    t.tenant = j.at("tenant").get<std::string>();
    DROVER_ASSIGN_OR_RETURN(t.role, ParseRole(j.at("role").get<std::string>()));
    t.node = j.value("node", "");
    t.created_by = j.value("created_by", "");
    t.created_ns = j.value("created_ns", int64_t{0});
    t.expires_ns = j.value("expires_ns", int64_t{0});
    t.revoked = j.value("revoked", false);
    t.revoked_ns = j.value("revoked_ns", int64_t{0});
    t.requests_per_minute = j.value("requests_per_minute", int64_t{0});
    t.tokens_per_minute = j.value("tokens_per_minute", int64_t{0});
    if (hash != nullptr) *hash = j.at("hash").get<std::string>();
    return t;
  } catch (const std::exception& e) {
    return Internal(fmt::format("token record is corrupt: {}", e.what()));
  }
}

Principal ToPrincipal(const TokenInfo& t) {
  Principal p;
  p.token_id = t.id;
  p.name = t.name;
  p.tenant = t.tenant;
  p.role = t.role;
  p.node = t.node;
  return p;
}

json PrincipalJson(const Principal& p) {
  return json{{"token_id", p.token_id},
              {"name", p.name},
              {"tenant", p.tenant},
              {"role", std::string(RoleName(p.role))},
              {"node", p.node}};
}

Result<Principal> PrincipalFromJson(const json& j) {
  Principal p;
  p.token_id = j.at("token_id").get<std::string>();
  p.name = j.at("name").get<std::string>();
  p.tenant = j.at("tenant").get<std::string>();
  DROVER_ASSIGN_OR_RETURN(p.role, ParseRole(j.at("role").get<std::string>()));
  p.node = j.value("node", "");
  return p;
}

// A one-time code is base64url; anything else is not worth a store read.
Status CheckCode(std::string_view code, std::string_view what) {
  if (code.empty() || code.size() > kMaxCodeChars) return Unauthenticated(fmt::format("malformed {}", what));
  for (char c : code) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return Unauthenticated(fmt::format("malformed {}", what));
  }
  return Status::Ok();
}

// Reads `key` and deletes it in one transaction guarded by its mod revision:
// of two concurrent consumers exactly one gets the value.
Result<std::optional<std::string>> Consume(store::Store* store, const std::string& key) {
  DROVER_ASSIGN_OR_RETURN(auto kv, store->Get(key));
  if (!kv.has_value()) return std::optional<std::string>();
  DROVER_ASSIGN_OR_RETURN(store::TxnResult r, store->Txn({store::Compare::ModRevisionIs(key, kv->mod_revision)},
                                                         {store::Op::Delete(key)}, {}));
  if (!r.succeeded) return std::optional<std::string>();
  return std::optional<std::string>(kv->value);
}

// Deletes `kv` unless it changed since it was read; whether it did.
Result<bool> DeleteIfUnchanged(store::Store* store, const store::KeyValue& kv) {
  DROVER_ASSIGN_OR_RETURN(store::TxnResult r, store->Txn({store::Compare::ModRevisionIs(kv.key, kv.mod_revision)},
                                                         {store::Op::Delete(kv.key)}, {}));
  return r.succeeded;
}

int64_t ExpiresNs(const std::string& record) {
  json j = json::parse(record, nullptr, false);
  // A corrupt record can never be used: it counts as expired.
  return j.is_object() ? j.value("expires_ns", int64_t{0}) : 0;
}

// Deletes the records under `prefix` that expired by `now`, a page at a time.
Result<int64_t> SweepPrefix(store::Store* store, std::string_view prefix, int64_t now) {
  constexpr int64_t kPage = 1000;
  int64_t deleted = 0;
  std::string start;
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(store::RangeResult page, store->Range(std::string(prefix), kPage, start));
    for (const store::KeyValue& kv : page.kvs) {
      if (now < ExpiresNs(kv.value)) continue;
      DROVER_ASSIGN_OR_RETURN(bool gone, DeleteIfUnchanged(store, kv));
      deleted += gone ? 1 : 0;
    }
    if (!page.more || page.kvs.empty()) return deleted;
    start = page.kvs.back().key + '\0';
  }
}

// The characters of an owner key (OwnerKey) at the head of a login code.
constexpr size_t kOwnerChars = 16;
// A code of the older form: the random part alone (base64url of kCodeBytes).
constexpr size_t kBareCodeChars = 43;

// Where a login code's record lives: under its owner's key, which the code
// begins with; a code of the older form (no owner) right under the prefix.
std::string LoginCodeKey(std::string_view code) {
  if (code.size() <= kBareCodeChars) return std::string(kLoginPrefix) + Sha256Hex(code);
  return fmt::format("{}{}/{}", kLoginPrefix, code.substr(0, kOwnerChars), Sha256Hex(code));
}

}  // namespace

std::string TokenRecordJson(const TokenInfo& t, const std::string& secret_hash) {
  json j{{"id", t.id},
         {"name", t.name},
         {"tenant", t.tenant},
         {"role", std::string(RoleName(t.role))},
         {"node", t.node},
         {"created_by", t.created_by},
         {"created_ns", t.created_ns},
         {"expires_ns", t.expires_ns},
         {"revoked", t.revoked},
         {"revoked_ns", t.revoked_ns},
         {"hash", secret_hash}};
  if (t.requests_per_minute > 0) j["requests_per_minute"] = t.requests_per_minute;
  if (t.tokens_per_minute > 0) j["tokens_per_minute"] = t.tokens_per_minute;
  return j.dump();
}

Status Authority::CheckCanCreate(const Principal& by, const CreateTokenRequest& req) const {
  DROVER_RETURN_IF_ERROR(ValidateName("token name", req.name));
  DROVER_RETURN_IF_ERROR(ValidateName("tenant", req.tenant));
  if (req.ttl.count() < 0) return InvalidArgument("token ttl is negative");
  if (req.requests_per_minute < 0 || req.requests_per_minute > kMaxPerMinute || req.tokens_per_minute < 0 ||
      req.tokens_per_minute > kMaxPerMinute) {
    return InvalidArgument(
        fmt::format("requests_per_minute and tokens_per_minute must be 0..{} (0: no limit)", kMaxPerMinute));
  }
  if ((req.role == Role::kNode || req.role == Role::kGateway) &&
      (req.requests_per_minute > 0 || req.tokens_per_minute > 0)) {
    return InvalidArgument(
        fmt::format("{} tokens carry no gateway limits (they are not API keys)", RoleName(req.role)));
  }
  if (req.role == Role::kGateway) {
    if (!req.node.empty()) return InvalidArgument("only node tokens name a node");
    if (!by.IsAdmin()) return PermissionDenied("only an admin may create gateway tokens");
    return Status::Ok();
  }
  if (req.role == Role::kNode) {
    DROVER_RETURN_IF_ERROR(ValidateNodeName(req.node));
    if (!by.IsAdmin()) return PermissionDenied("only an admin may create node tokens");
    return Status::Ok();
  }
  if (!req.node.empty()) return InvalidArgument("only node tokens name a node");
  if (by.IsAdmin()) return Status::Ok();
  if (by.role != Role::kTenantAdmin) {
    return PermissionDenied(fmt::format("role {} may not create tokens", RoleName(by.role)));
  }
  if (req.tenant != by.tenant) {
    return PermissionDenied(fmt::format("a tenant-admin of '{}' may create tokens only for its own tenant", by.tenant));
  }
  if (req.role == Role::kAdmin) return PermissionDenied("a tenant-admin may not create admin tokens");
  return Status::Ok();
}

Result<std::pair<TokenInfo, std::string>> Authority::Create(const std::string& created_by,
                                                            const CreateTokenRequest& req) {
  DROVER_ASSIGN_OR_RETURN(NewToken nt, GenerateToken());
  TokenInfo t;
  t.id = nt.id;
  t.name = req.name;
  t.tenant = req.tenant;
  t.role = req.role;
  t.node = req.node;
  t.created_by = created_by;
  t.created_ns = Nanos(clock_);
  t.expires_ns = req.ttl.count() > 0 ? t.created_ns + req.ttl.count() : 0;
  t.requests_per_minute = req.requests_per_minute;
  t.tokens_per_minute = req.tokens_per_minute;
  std::string key = std::string(kTokensPrefix) + t.id;
  DROVER_ASSIGN_OR_RETURN(
      store::TxnResult r,
      store_->Txn({store::Compare::Missing(key)}, {store::Op::Put(key, TokenRecordJson(t, nt.secret_hash))}, {}));
  if (!r.succeeded) return Internal("token id collision; try again");
  return std::make_pair(std::move(t), std::move(nt.text));
}

Result<std::pair<TokenInfo, std::string>> Authority::CreateToken(const Principal& by, const CreateTokenRequest& req) {
  DROVER_RETURN_IF_ERROR(CheckCanCreate(by, req));
  return Create(by.name.empty() ? "drover" : by.name, req);
}

Result<std::string> Authority::MintInternal(const CreateTokenRequest& req) {
  Principal system;
  system.role = Role::kAdmin;
  system.name = "drover";
  DROVER_RETURN_IF_ERROR(CheckCanCreate(system, req));
  DROVER_ASSIGN_OR_RETURN(auto created, Create("drover", req));
  return std::move(created.second);
}

Result<std::optional<std::string>> Authority::TokenRecord(const std::string& id) const {
  uint64_t generation = 0;
  {
    MutexLock lock(&mu_);
    if (auto it = token_records_.find(id); it != token_records_.end()) return std::optional<std::string>(it->second);
    generation = token_generation_;
  }
  DROVER_ASSIGN_OR_RETURN(auto kv, store_->Get(std::string(kTokensPrefix) + id));
  if (!kv.has_value())
    return std::optional<std::string>();  // unknown ids are not cached: the cache stays bounded by real tokens
  MutexLock lock(&mu_);
  // A record written while this one was read may be older than the store's
  // now: not cached.
  if (generation == token_generation_) {
    if (token_records_.size() >= kMaxCachedTokens) token_records_.clear();
    token_records_[id] = kv->value;
  }
  return std::optional<std::string>(kv->value);
}

void Authority::ForgetToken(const std::string& id) const {
  MutexLock lock(&mu_);
  token_records_.erase(id);
  ++token_generation_;
}

Result<std::optional<TokenInfo>> Authority::ReadToken(const std::string& id) const {
  DROVER_ASSIGN_OR_RETURN(std::optional<std::string> record, TokenRecord(id));
  if (!record.has_value()) return std::optional<TokenInfo>();
  DROVER_ASSIGN_OR_RETURN(TokenInfo t, ParseRecord(*record, nullptr));
  return std::optional<TokenInfo>(std::move(t));
}

Result<std::vector<TokenInfo>> Authority::ListTokens(const Principal& by) {
  DROVER_ASSIGN_OR_RETURN(store::RangeResult range, store_->Range(std::string(kTokensPrefix)));
  std::vector<TokenInfo> out;
  for (const store::KeyValue& kv : range.kvs) {
    auto t = ParseRecord(kv.value, nullptr);
    if (!t.ok()) continue;
    bool visible = by.IsAdmin() || (by.role == Role::kTenantAdmin && t->tenant == by.tenant) || t->id == by.token_id;
    if (visible) out.push_back(std::move(*t));
  }
  return out;
}

Result<TokenInfo> Authority::RevokeToken(const Principal& by, const std::string& id) {
  auto not_found = NotFound(fmt::format("token '{}' not found", id.substr(0, 32)));
  if (id.size() != kTokenIdChars) return not_found;
  std::string key = std::string(kTokensPrefix) + id;
  DROVER_ASSIGN_OR_RETURN(auto kv, store_->Get(key));
  if (!kv.has_value()) return not_found;
  std::string hash;
  DROVER_ASSIGN_OR_RETURN(TokenInfo t, ParseRecord(kv->value, &hash));
  bool may = by.IsAdmin() || t.id == by.token_id ||
             (by.role == Role::kTenantAdmin && t.tenant == by.tenant && t.role != Role::kAdmin &&
              t.role != Role::kNode && t.role != Role::kGateway);
  if (!may) return not_found;
  if (t.revoked) return t;
  t.revoked = true;
  t.revoked_ns = Nanos(clock_);
  auto written = store_->Txn({store::Compare::ModRevisionIs(key, kv->mod_revision)},
                             {store::Op::Put(key, TokenRecordJson(t, hash))}, {});
  // Whether or not it applied (a failed write may have): read afresh, and a
  // read that began before the write does not cache what it read.
  ForgetToken(id);
  DROVER_ASSIGN_OR_RETURN(store::TxnResult r, std::move(written));
  if (!r.succeeded) return Aborted(fmt::format("token '{}' changed while it was revoked; try again", id));
  return t;
}

Result<Principal> Authority::Authenticate(std::string_view token_text) const {
  DROVER_ASSIGN_OR_RETURN(TokenInfo t, AuthenticateToken(token_text));
  return ToPrincipal(t);
}

Result<TokenInfo> Authority::AuthenticateToken(std::string_view token_text) const {
  DROVER_ASSIGN_OR_RETURN(ParsedToken pt, ParseToken(token_text));
  DROVER_ASSIGN_OR_RETURN(std::optional<std::string> record, TokenRecord(pt.id));
  if (!record.has_value()) return Unauthenticated("unknown token");
  std::string hash;
  DROVER_ASSIGN_OR_RETURN(TokenInfo t, ParseRecord(*record, &hash));
  if (!ConstantTimeEqual(Sha256Hex(pt.secret), hash)) return Unauthenticated("unknown token");
  if (t.revoked) return Unauthenticated(fmt::format("token '{}' ({}) was revoked", t.name, t.id));
  if (t.expires_ns != 0 && Nanos(clock_) >= t.expires_ns) {
    return Unauthenticated(fmt::format("token '{}' ({}) has expired", t.name, t.id));
  }
  return t;
}

Result<Principal> Authority::AuthenticateNode(const std::string& token_id, const std::string& node) const {
  if (token_id.size() != kTokenIdChars) return Unauthenticated("certificate names no node token");
  DROVER_ASSIGN_OR_RETURN(auto t, ReadToken(token_id));
  if (!t.has_value())
    return Unauthenticated(fmt::format("the node token '{}' of this certificate is unknown", token_id));
  if (t->role != Role::kNode || t->node != node) {
    return Unauthenticated(fmt::format("the node token '{}' of this certificate is not node '{}''s", token_id, node));
  }
  if (t->revoked) return Unauthenticated(fmt::format("node '{}''s credential ({}) was revoked", node, token_id));
  if (t->expires_ns != 0 && Nanos(clock_) >= t->expires_ns) {
    return Unauthenticated(fmt::format("node '{}''s credential ({}) has expired", node, token_id));
  }
  return ToPrincipal(*t);
}

Result<bool> Authority::EnsureBootstrapAdmin(const std::string& path) {
  {
    std::ifstream in(path);
    std::string text;
    if (in && std::getline(in, text)) {
      if (auto p = Authenticate(text); p.ok()) return false;
    }
  }
  DROVER_ASSIGN_OR_RETURN(std::string text, MintInternal({"admin", "default", Role::kAdmin, "", Duration(0)}));
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(path, text + "\n", 0600));
  return true;
}

std::string Authority::OwnerKey(const Principal& p) {
  return Sha256Hex(p.token_id.empty() ? "internal:" + p.name : "token:" + p.token_id).substr(0, kOwnerChars);
}

Result<std::string> Authority::CreateLoginCode(const Principal& as) {
  const std::string owner = OwnerKey(as);
  const int64_t now = Nanos(clock_);
  // This token's unused codes: the expired ones go, and the oldest while
  // there are kMaxLoginCodesPerToken (a loop of `drover ui` keeps working;
  // a flood of codes keeps 16).
  const std::string prefix = fmt::format("{}{}/", kLoginPrefix, owner);
  DROVER_ASSIGN_OR_RETURN(store::RangeResult held, store_->Range(prefix));
  std::vector<std::pair<int64_t, const store::KeyValue*>> live;  // (create revision, record)
  for (const store::KeyValue& kv : held.kvs) {
    if (now >= ExpiresNs(kv.value)) {
      DROVER_RETURN_IF_ERROR(DeleteIfUnchanged(store_, kv).status());
    } else {
      live.emplace_back(kv.create_revision, &kv);
    }
  }
  std::sort(live.begin(), live.end());
  for (size_t i = 0; i + kMaxLoginCodesPerToken <= live.size(); ++i) {
    DROVER_RETURN_IF_ERROR(DeleteIfUnchanged(store_, *live[i].second).status());
  }
  DROVER_ASSIGN_OR_RETURN(std::string random, RandomBase64Url(kCodeBytes));
  std::string code = owner + random;
  json j{{"principal", PrincipalJson(as)}, {"expires_ns", now + kLoginCodeLifetime.count()}};
  DROVER_RETURN_IF_ERROR(store_->Put(LoginCodeKey(code), j.dump()).status());
  return code;
}

Result<Authority::Swept> Authority::SweepExpired() {
  const int64_t now = Nanos(clock_);
  Swept swept;
  DROVER_ASSIGN_OR_RETURN(swept.login_codes, SweepPrefix(store_, kLoginPrefix, now));
  DROVER_ASSIGN_OR_RETURN(swept.join_tokens, SweepPrefix(store_, kJoinPrefix, now));
  MutexLock lock(&mu_);
  std::vector<std::string> expired;
  for (const auto& [key, session] : sessions_) {
    if (session.expires_ns <= now) expired.push_back(key);
  }
  for (const std::string& key : expired) EraseSessionLocked(key);
  swept.sessions = static_cast<int64_t>(expired.size());
  return swept;
}

Result<std::string> Authority::CreateJoinToken(const Principal& by, const std::string& node, Duration ttl) {
  if (!by.IsAdmin()) return PermissionDenied("only an admin may create join tokens");
  if (!node.empty()) DROVER_RETURN_IF_ERROR(ValidateNodeName(node));
  if (ttl.count() <= 0) return InvalidArgument("a join token needs a positive ttl");
  DROVER_ASSIGN_OR_RETURN(std::string code, RandomBase64Url(kCodeBytes));
  json j{{"node", node}, {"created_by", by.name}, {"expires_ns", Nanos(clock_) + ttl.count()}};
  DROVER_RETURN_IF_ERROR(store_->Put(std::string(kJoinPrefix) + Sha256Hex(code), j.dump()).status());
  return code;
}

Result<std::string> Authority::Join(std::string_view join_token, const std::string& node_name) {
  DROVER_RETURN_IF_ERROR(CheckCode(join_token, "join token"));
  DROVER_RETURN_IF_ERROR(ValidateNodeName(node_name));
  DROVER_ASSIGN_OR_RETURN(auto value, Consume(store_, std::string(kJoinPrefix) + Sha256Hex(join_token)));
  if (!value.has_value()) return Unauthenticated("join token is unknown or was already used");
  json j = json::parse(*value, nullptr, false);
  if (j.is_discarded()) return Internal("join token record is corrupt");
  if (Nanos(clock_) >= j.value("expires_ns", int64_t{0})) return Unauthenticated("join token has expired");
  std::string bound = j.value("node", "");
  if (!bound.empty() && bound != node_name) {
    return PermissionDenied(fmt::format("join token is for node '{}', not '{}'", bound, node_name));
  }
  return MintInternal({node_name, "default", Role::kNode, node_name, Duration(0)});
}

Result<DashboardSession> Authority::OpenSession(const Principal& p) {
  if (p.IsService()) return PermissionDenied(fmt::format("{} tokens cannot open dashboard sessions", RoleName(p.role)));
  DashboardSession s;
  DROVER_ASSIGN_OR_RETURN(s.cookie, RandomBase64Url(32));
  DROVER_ASSIGN_OR_RETURN(s.csrf_token, RandomBase64Url(32));
  s.principal = p;
  int64_t now = Nanos(clock_);
  s.expires_ns = now + kSessionLifetime.count();
  const std::string owner = OwnerKey(p);
  MutexLock lock(&mu_);
  // This token's own: its expired sessions go, then its oldest while it
  // holds kMaxSessionsPerToken. Nothing here touches another token's.
  if (auto it = sessions_by_owner_.find(owner); it != sessions_by_owner_.end()) {
    std::vector<std::string> own = it->second;  // EraseSessionLocked edits the list
    size_t live = own.size();
    for (const std::string& key : own) {
      auto found = sessions_.find(key);
      if (found == sessions_.end() || found->second.expires_ns > now) continue;
      EraseSessionLocked(key);
      --live;
    }
    for (size_t i = 0; live >= kMaxSessionsPerToken && i < own.size(); ++i) {
      if (sessions_.count(own[i]) == 0) continue;  // expired above
      EraseSessionLocked(own[i]);
      --live;
    }
  }
  if (sessions_.size() >= kMaxSessions) {
    std::vector<std::string> expired;
    for (const auto& [key, session] : sessions_) {
      if (session.expires_ns <= now) expired.push_back(key);
    }
    for (const std::string& key : expired) EraseSessionLocked(key);
    // Full of live sessions of other tokens (kMaxSessions / 16 tokens'
    // worth): refused rather than ending someone else's.
    if (sessions_.size() >= kMaxSessions) {
      return ResourceExhausted(
          fmt::format("the server holds {} dashboard sessions; log out elsewhere or use a token", kMaxSessions));
    }
  }
  std::string key = Sha256Hex(s.cookie);
  sessions_[key] = s;
  sessions_by_owner_[owner].push_back(std::move(key));
  return s;
}

void Authority::EraseSessionLocked(const std::string& key) {
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  auto owner = sessions_by_owner_.find(OwnerKey(it->second.principal));
  sessions_.erase(it);
  if (owner == sessions_by_owner_.end()) return;
  std::vector<std::string>& list = owner->second;
  list.erase(std::remove(list.begin(), list.end(), key), list.end());
  if (list.empty()) sessions_by_owner_.erase(owner);
}

Result<DashboardSession> Authority::OpenSessionWithCode(std::string_view code) {
  DROVER_RETURN_IF_ERROR(CheckCode(code, "login code"));
  DROVER_ASSIGN_OR_RETURN(auto value, Consume(store_, LoginCodeKey(code)));
  if (!value.has_value())
    return Unauthenticated("login code is unknown or was already used; run `drover ui` for a new one");
  json j = json::parse(*value, nullptr, false);
  if (j.is_discarded() || !j.contains("principal")) return Internal("login code record is corrupt");
  if (Nanos(clock_) >= j.value("expires_ns", int64_t{0})) return Unauthenticated("login code has expired");
  Result<Principal> p = Internal("login code record is corrupt");
  try {
    p = PrincipalFromJson(j.at("principal"));
  } catch (const std::exception&) {
  }
  if (!p.ok()) return p.status();
  // The token it was made with must still be valid.
  if (!p->token_id.empty()) {
    DROVER_ASSIGN_OR_RETURN(auto t, ReadToken(p->token_id));
    if (!t.has_value() || t->revoked || (t->expires_ns != 0 && Nanos(clock_) >= t->expires_ns)) {
      return Unauthenticated("the token this login code was made with is no longer valid");
    }
  }
  return OpenSession(*p);
}

Result<DashboardSession> Authority::FindSession(std::string_view cookie) const {
  if (cookie.empty() || cookie.size() > kMaxCodeChars) return Unauthenticated("no valid session");
  std::string key = Sha256Hex(cookie);
  DashboardSession s;
  {
    MutexLock lock(&mu_);
    auto it = sessions_.find(key);
    if (it == sessions_.end()) return Unauthenticated("no valid session; log in again");
    s = it->second;
  }
  if (Nanos(clock_) >= s.expires_ns) return Unauthenticated("session expired; log in again");
  if (!s.principal.token_id.empty()) {
    DROVER_ASSIGN_OR_RETURN(auto t, ReadToken(s.principal.token_id));
    if (!t.has_value() || t->revoked || (t->expires_ns != 0 && Nanos(clock_) >= t->expires_ns)) {
      return Unauthenticated("the token behind this session is no longer valid; log in again");
    }
  }
  return s;
}

void Authority::CloseSession(std::string_view cookie) {
  MutexLock lock(&mu_);
  EraseSessionLocked(Sha256Hex(cookie));
}

}  // namespace drover::auth
