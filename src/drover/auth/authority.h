#pragma once
// Authority: the tokens, one-time codes and dashboard sessions of a cluster.
//
// Records live in the store (so that every server of a cluster sees the same
// tokens and a restart keeps them); only hashes of secrets are stored:
//   /auth/tokens/<id>            API and node tokens (JSON, hash of the secret)
//   /auth/join/<sha256(code)>    one-time join tokens for agents
//   /auth/login/<sha256(code)>   one-time dashboard login codes
// Dashboard sessions (cookie + CSRF token) are kept in memory: a restarted
// server asks the browser to log in again.
//
// Thread-safety: thread-safe (the store is; sessions are under a mutex).
// Authenticate reads the token record on every call, so a revocation made by
// any server takes effect at the next request.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "drover/auth/token.h"
#include "drover/common/clock.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/store/store.h"

namespace drover::auth {

struct TokenInfo {
  std::string id;
  std::string name;
  std::string tenant;
  Role role = Role::kViewer;
  std::string node;  // Role::kNode only
  std::string created_by;
  int64_t created_ns = 0;
  int64_t expires_ns = 0;  // 0: never
  bool revoked = false;
  int64_t revoked_ns = 0;
  // The gateway's limits for this key (docs/gateway.md); 0: none.
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
};

struct CreateTokenRequest {
  std::string name;
  std::string tenant;
  Role role = Role::kUser;
  std::string node;
  Duration ttl = Duration(0);  // 0: never expires
  // 0..kMaxPerMinute; 0: no limit.
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
};

// The largest per-minute limit a token or tenant may carry.
inline constexpr int64_t kMaxPerMinute = int64_t{1'000'000'000'000};

struct DashboardSession {
  std::string cookie;      // the cookie's value, shown once
  std::string csrf_token;  // echoed by the dashboard in X-CSRF-Token
  Principal principal;
  int64_t expires_ns = 0;
};

class Authority {
 public:
  static constexpr Duration kSessionLifetime = std::chrono::hours(12);
  static constexpr Duration kLoginCodeLifetime = std::chrono::hours(24);
  static constexpr size_t kMaxSessions = 10000;
  // Per token (a dashboard user opens a few: browsers, machines): the
  // next one closes that token's oldest, never another token's.
  static constexpr size_t kMaxSessionsPerToken = 16;
  // Unused login codes per token: the next one deletes that token's oldest.
  static constexpr size_t kMaxLoginCodesPerToken = 16;

  Authority(store::Store* store, const Clock* clock) : store_(store), clock_(clock) {}

  // Creates a token; `by` must be allowed to (see CheckCanCreate). Returns
  // the info and the token text (shown once).
  Result<std::pair<TokenInfo, std::string>> CreateToken(const Principal& by, const CreateTokenRequest& req);
  Status CheckCanCreate(const Principal& by, const CreateTokenRequest& req) const;
  // Tokens `by` may see: all for admins, its tenant's for tenant-admins, its own otherwise.
  Result<std::vector<TokenInfo>> ListTokens(const Principal& by);
  // Revokes a token `by` may manage (its own, its tenant's for
  // tenant-admins, any for admins). Unknown and not-visible ids are the same
  // kNotFound.
  Result<TokenInfo> RevokeToken(const Principal& by, const std::string& id);

  // Who presents `token_text`. kUnauthenticated with a one-line reason for a
  // malformed, unknown, wrong, expired or revoked token.
  Result<Principal> Authenticate(std::string_view token_text) const;
  // The same checks, answering the whole record (its limits too): for the
  // gateway, which keys its limits by token.
  Result<TokenInfo> AuthenticateToken(std::string_view token_text) const;

  // The principal of a node certificate: the node token `token_id` it was
  // issued with must exist, be a node token for `node`, and be neither
  // revoked nor expired (so revoking the token revokes the certificate).
  // kUnauthenticated otherwise.
  Result<Principal> AuthenticateNode(const std::string& token_id, const std::string& node) const;

  // On first start: an admin token written to `path` (mode 0600). When the
  // file holds a token that still authenticates, nothing changes. Returns
  // true when it created one.
  Result<bool> EnsureBootstrapAdmin(const std::string& path);

  // A token for an in-process agent or a test, created without a caller.
  Result<std::string> MintInternal(const CreateTokenRequest& req);

  // One-time codes. A login code logs a browser in as `as` (once, within
  // kLoginCodeLifetime); a token holds at most kMaxLoginCodesPerToken
  // unused ones. A join token lets one agent join (as `node` when set, else
  // as the name it gives) once, within `ttl`.
  Result<std::string> CreateLoginCode(const Principal& as);
  Result<std::string> CreateJoinToken(const Principal& by, const std::string& node, Duration ttl);
  // Consumes a join token: kUnauthenticated when unknown, used or expired;
  // kPermissionDenied when bound to another node name. On success, a node
  // token for `node_name` (text), valid until revoked.
  Result<std::string> Join(std::string_view join_token, const std::string& node_name);

  // Dashboard sessions.
  Result<DashboardSession> OpenSession(const Principal& p);
  Result<DashboardSession> OpenSessionWithCode(std::string_view code);
  // The session of a cookie value, or kUnauthenticated.
  Result<DashboardSession> FindSession(std::string_view cookie) const;
  void CloseSession(std::string_view cookie);

  // Deletes what expired: unused login codes and join tokens from the
  // store, sessions from memory. The server runs it every minute
  // (ApiService); a code is refused once expired whether or not it was
  // swept yet.
  struct Swept {
    int64_t login_codes = 0;
    int64_t join_tokens = 0;
    int64_t sessions = 0;
  };
  Result<Swept> SweepExpired();

 private:
  // A token's stored record, from the cache or the store (and then cached).
  // Every token record is written through this Authority (one leading
  // server writes; a server that leads starts with an empty cache), which
  // forgets a record as it writes it: a revocation takes effect at once.
  // Saves a store read per request (with etcd, a round trip to its leader).
  Result<std::optional<std::string>> TokenRecord(const std::string& id) const;
  void ForgetToken(const std::string& id) const;
  Result<std::optional<TokenInfo>> ReadToken(const std::string& id) const;
  Result<std::pair<TokenInfo, std::string>> Create(const std::string& created_by, const CreateTokenRequest& req);

  store::Store* store_;
  const Clock* clock_;
  mutable Mutex mu_;
  // The key that bounds a principal's sessions and codes: its token.
  static std::string OwnerKey(const Principal& p);
  void EraseSessionLocked(const std::string& key) DROVER_REQUIRES(mu_);

  // Keyed by SHA-256 of the cookie value.
  std::map<std::string, DashboardSession> sessions_ DROVER_GUARDED_BY(mu_);
  // Invariants: every key of sessions_ is in exactly one list here, under
  // its principal's OwnerKey, oldest first; no list is empty or longer
  // than kMaxSessionsPerToken.
  std::map<std::string, std::vector<std::string>> sessions_by_owner_ DROVER_GUARDED_BY(mu_);
  static constexpr size_t kMaxCachedTokens = 100'000;
  mutable std::unordered_map<std::string, std::string> token_records_ DROVER_GUARDED_BY(mu_);  // by token id
  mutable uint64_t token_generation_ DROVER_GUARDED_BY(mu_) = 0;                               // +1 per ForgetToken
};

// Token records as JSON (exposed for tests).
std::string TokenRecordJson(const TokenInfo& info, const std::string& secret_hash);

}  // namespace drover::auth
