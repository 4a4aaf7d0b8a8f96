#include "drover/auth/token.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace drover::auth {
namespace {

constexpr char kB64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

bool IsHexLower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool IsB64Url(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

Status FillRandom(unsigned char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Internal(fmt::format("getrandom failed: {}", std::strerror(errno)));
    }
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

std::string Base64Url(const unsigned char* data, size_t n) {
  std::string out;
  out.reserve((n * 4 + 2) / 3);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8) | data[i + 2];
    out += kB64Url[(v >> 18) & 63];
    out += kB64Url[(v >> 12) & 63];
    out += kB64Url[(v >> 6) & 63];
    out += kB64Url[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = uint32_t{data[i]} << 16;
    out += kB64Url[(v >> 18) & 63];
    out += kB64Url[(v >> 12) & 63];
  } else if (n - i == 2) {
    uint32_t v = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8);
    out += kB64Url[(v >> 18) & 63];
    out += kB64Url[(v >> 12) & 63];
    out += kB64Url[(v >> 6) & 63];
  }
  return out;
}

}  // namespace

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kUser: return "user";
    case Role::kTenantAdmin: return "tenant-admin";
    case Role::kAdmin: return "admin";
    case Role::kNode: return "node";
    case Role::kGateway: return "gateway";
  }
  return "unknown";
}

Result<Role> ParseRole(std::string_view text) {
  for (Role r : {Role::kViewer, Role::kUser, Role::kTenantAdmin, Role::kAdmin, Role::kNode, Role::kGateway}) {
    if (RoleName(r) == text) return r;
  }
  return InvalidArgument(
      fmt::format("role '{}' is unknown (use admin, tenant-admin, user, viewer or gateway)", text.substr(0, 32)));
}

bool AtLeast(Role role, Role needed) {
  const auto outside = [](Role r) { return r == Role::kNode || r == Role::kGateway; };
  if (outside(role) || outside(needed)) return role == needed;
  return static_cast<int>(role) >= static_cast<int>(needed);
}

Result<ParsedToken> ParseToken(std::string_view text) {
  constexpr size_t kLen = kTokenPrefix.size() + kTokenIdChars + 1 + kTokenSecretChars;
  if (text.size() != kLen || !text.starts_with(kTokenPrefix) || text[kTokenPrefix.size() + kTokenIdChars] != '_') {
    return Unauthenticated("malformed token: expected drv_<16 hex digits>_<43 characters>");
  }
  std::string_view id = text.substr(kTokenPrefix.size(), kTokenIdChars);
  std::string_view secret = text.substr(kTokenPrefix.size() + kTokenIdChars + 1);
  for (char c : id) {
    if (!IsHexLower(c)) return Unauthenticated("malformed token: its id is not 16 lower-case hex digits");
  }
  for (char c : secret) {
    if (!IsB64Url(c)) return Unauthenticated("malformed token: its secret is not base64url");
  }
  return ParsedToken{std::string(id), std::string(secret)};
}

namespace {
std::string HexOf(const unsigned char* md, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}
}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return HexOf(md, SHA256_DIGEST_LENGTH);
}

Sha256Stream::Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}
Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256Stream::Update(std::string_view data) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size());
}
std::string Sha256Stream::Hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n);
  return HexOf(md, n);
}

Result<std::string> Sha256FileHex(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? NotFound(fmt::format("'{}' does not exist", path))
                           : Unavailable(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  }
  Sha256Stream sum;
  std::string buf(1 << 20, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Unavailable(fmt::format("cannot read '{}': {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    sum.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
  ::close(fd);
  return sum.Hex();
}

Result<std::string> RandomBase64Url(size_t n) {
  std::string raw(n, '\0');
  DROVER_RETURN_IF_ERROR(FillRandom(reinterpret_cast<unsigned char*>(raw.data()), n));
  return Base64Url(reinterpret_cast<const unsigned char*>(raw.data()), n);
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<NewToken> GenerateToken() {
  unsigned char id_bytes[8];
  DROVER_RETURN_IF_ERROR(FillRandom(id_bytes, sizeof(id_bytes)));
  DROVER_ASSIGN_OR_RETURN(std::string secret, RandomBase64Url(32));
  NewToken t;
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : id_bytes) {
    t.id += kHex[b >> 4];
    t.id += kHex[b & 15];
  }
  t.text = std::string(kTokenPrefix) + t.id + "_" + secret;
  t.secret_hash = Sha256Hex(secret);
  return t;
}

}  // namespace drover::auth
