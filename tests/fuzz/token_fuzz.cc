// API tokens as callers present them (auth/token.cc): ParseToken, the
// first step of Authority::Authenticate for every gRPC call and HTTP
// request; ParseRole (token creation); and the helpers that compare and
// hash the secret.
//
// Properties: a parsed token is exactly drv_<16 lower-case hex>_<43
// base64url> and re-assembles to the input; every other input is
// kUnauthenticated with a message that does not depend on the secret; a
// role that parses prints as the same word.

#include "drover/auth/token.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;
namespace auth = drover::auth;

bool IsHexLower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool IsB64Url(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = AsText(data, size);
  auto token = auth::ParseToken(text);
  if (token.ok()) {
    FUZZ_CHECK(token->id.size() == auth::kTokenIdChars && token->secret.size() == auth::kTokenSecretChars);
    for (char c : token->id) FUZZ_CHECK(IsHexLower(c));
    for (char c : token->secret) FUZZ_CHECK(IsB64Url(c));
    FUZZ_CHECK(std::string(auth::kTokenPrefix) + token->id + "_" + token->secret == text);
  } else {
    FUZZ_CHECK(token.status().code() == drover::Code::kUnauthenticated);
    // The reason is logged and returned to the caller: it must not depend on
    // the (possibly real) secret, only on which characters are allowed.
    constexpr size_t kSecretAt = auth::kTokenPrefix.size() + auth::kTokenIdChars + 1;
    if (text.size() > kSecretAt) {
      std::string masked(text);
      for (size_t i = kSecretAt; i < masked.size(); ++i) masked[i] = IsB64Url(masked[i]) ? 'A' : '!';
      FUZZ_CHECK(auth::ParseToken(masked).status().message() == token.status().message());
    }
  }

  if (auto role = auth::ParseRole(text); role.ok()) FUZZ_CHECK(auth::RoleName(*role) == text);

  const std::string hash = auth::Sha256Hex(text);
  FUZZ_CHECK(hash.size() == 64);
  FUZZ_CHECK(auth::ConstantTimeEqual(hash, auth::Sha256Hex(text)));
  // Split the input in two: equal halves compare equal, and only then.
  const std::string_view a = text.substr(0, size / 2), b = text.substr(size / 2);
  FUZZ_CHECK(auth::ConstantTimeEqual(a, b) == (a == b));
  return 0;
}
