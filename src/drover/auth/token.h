#pragma once
// API tokens, roles and principals: who a caller is, resolved once at the
// edge (gRPC call, HTTP request) and passed to every ApiService call.
//
// A token is "drv_<id>_<secret>": <id> is 16 hex digits (64 random bits,
// public: listed, revoked and audited by it), <secret> is 43 base64url
// characters (256 random bits). The store keeps only SHA-256(secret); the
// token text is shown once, when it is created.
//
// Pure functions; thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover::auth {

// What a principal may do (docs/security.md has the table):
//   viewer       read its tenant's jobs and logs, the fleet
//   user         viewer + submit and cancel its tenant's jobs
//   tenant-admin user + tokens of its own tenant (roles up to tenant-admin)
//   admin        everything, every tenant: nodes, tenants, tokens, audit
//   node         an agent: only the agent protocol, as the node it is bound to
//   gateway      an OpenAI gateway apart from the servers: reads every
//                tenant's serving endpoints, resolves API keys, reports load;
//                nothing else (no jobs, deployments, tokens or dashboard)
enum class Role { kViewer = 0, kUser = 1, kTenantAdmin = 2, kAdmin = 3, kNode = 4, kGateway = 5 };

std::string_view RoleName(Role role);
Result<Role> ParseRole(std::string_view text);

struct Principal {
  std::string token_id;  // "" for an internal caller
  std::string name;      // the token's name (a person or a program)
  std::string tenant;    // the tenant it acts for
  Role role = Role::kViewer;
  std::string node;    // for Role::kNode: the node it is
  std::string source;  // the peer address, for the audit log

  bool IsAdmin() const { return role == Role::kAdmin; }
  // May act (read) on `tenant`'s objects: admins on all, others on their own.
  bool CanSee(std::string_view tenant_of_object) const {
    return role == Role::kAdmin || (role != Role::kNode && role != Role::kGateway && tenant_of_object == tenant);
  }
  // Outside the ladder of viewer..admin: a node or a gateway.
  bool IsService() const { return role == Role::kNode || role == Role::kGateway; }
  // May change: CanSee and at least a user.
  bool CanChange(std::string_view tenant_of_object) const { return CanSee(tenant_of_object) && role != Role::kViewer; }
};

// True when `role` has at least `needed`'s rights (node and gateway are
// outside the ladder: each satisfies only itself).
bool AtLeast(Role role, Role needed);

struct ParsedToken {
  std::string id;      // 16 hex digits
  std::string secret;  // 43 base64url characters
};

constexpr std::string_view kTokenPrefix = "drv_";
constexpr size_t kTokenIdChars = 16;
constexpr size_t kTokenSecretChars = 43;

// Parses "drv_<id>_<secret>"; anything else is kUnauthenticated with a
// one-line reason that never echoes the secret.
Result<ParsedToken> ParseToken(std::string_view text);

struct NewToken {
  std::string id;
  std::string text;         // the whole token, shown once
  std::string secret_hash;  // hex SHA-256 of the secret, what is stored
};
// 64 random bits of id and 256 of secret from the kernel (getrandom).
Result<NewToken> GenerateToken();

// Lower-case hex SHA-256.
std::string Sha256Hex(std::string_view data);
// The same over bytes that come in pieces (an upload, a file read in
// chunks): Update with each, then Hex once.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Update(std::string_view data);
  std::string Hex();

 private:
  void* ctx_;  // an EVP_MD_CTX
};
// The SHA-256 of the file at `path`, read in chunks; kNotFound / kUnavailable
// when it cannot be read.
Result<std::string> Sha256FileHex(const std::string& path);
// `n` random bytes from the kernel, base64url without padding.
Result<std::string> RandomBase64Url(size_t n);
// Comparison whose time does not depend on where the inputs differ.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

}  // namespace drover::auth
