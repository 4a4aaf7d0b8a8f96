// The X.509 parsers of the cluster CA (auth/certs.cc), which read what
// joining agents and peers send: certificate signing requests
// (ParseCsrPem, SignCsrPem), certificates (ParseCertPem, VerifyCertPem,
// NodeIdentityOf), private keys (CheckKeyMatchesCert), and the names put
// into certificates (ValidateDnsName, IsIpAddress).
//
// The first byte picks what the rest is: % 4 = 0 a CSR, 1 a certificate,
// 2 a private key, 3 a name; with bit 2 set the rest is DER, which the
// target wraps in PEM (base64 under the right label) so that mutations reach
// the ASN.1 rather than the base64; without it the rest is the PEM text.
//
// Properties: failures are kInvalidArgument (kUnauthenticated from
// VerifyCertPem) and leave OpenSSL's error queue empty, as certs.h promises;
// a CSR that parses can be signed, and the certificate issued for it parses
// with the subject the CA chose (not the CSR's), speaks for the node and
// verifies; a valid DNS name or IP address survives issuing.

#include <openssl/err.h>

#include "drover/auth/certs.h"
#include "fuzz_util.h"

namespace {

using drover::Code;
using drover::fuzz::AsText;
namespace auth = drover::auth;

constexpr int64_t kNow = 1'800'000'000;  // 2027-01-15
constexpr std::string_view kTokenUri = "urn:drover:node-token:0123456789abcdef";

struct Ca {
  std::string key;
  std::string cert;
  std::string csr;  // a valid CSR of another key, for issuing names
};

const Ca& TheCa() {
  static const Ca ca = [] {
    Ca c;
    auto key = auth::GenerateKeyPem();
    FUZZ_CHECK(key.ok());
    c.key = *key;
    auth::IssueOptions o;
    o.common_name = "drover-fuzz-ca";
    o.now_unix = kNow;
    o.validity_seconds = int64_t{10} * 365 * 86400;
    auto cert = auth::MakeCaCertPem(c.key, o);
    FUZZ_CHECK(cert.ok());
    c.cert = *cert;
    auto other = auth::GenerateKeyPem();
    FUZZ_CHECK(other.ok());
    auto csr = auth::MakeCsrPem(*other, "node-1");
    FUZZ_CHECK(csr.ok());
    c.csr = *csr;
    return c;
  }();
  return ca;
}

void QueueEmpty() { FUZZ_CHECK(ERR_peek_error() == 0); }

std::string Pem(std::string_view label, std::string_view der) {
  static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  size_t i = 0;
  for (; i + 3 <= der.size(); i += 3) {
    uint32_t v = (uint32_t{static_cast<uint8_t>(der[i])} << 16) | (uint32_t{static_cast<uint8_t>(der[i + 1])} << 8) |
                 static_cast<uint8_t>(der[i + 2]);
    for (int s = 18; s >= 0; s -= 6) b64 += kB64[(v >> s) & 63];
  }
  if (size_t rest = der.size() - i; rest > 0) {
    uint32_t v = uint32_t{static_cast<uint8_t>(der[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<uint8_t>(der[i + 1])} << 8;
    b64 += kB64[(v >> 18) & 63];
    b64 += kB64[(v >> 12) & 63];
    b64 += rest == 2 ? kB64[(v >> 6) & 63] : '=';
    b64 += '=';
  }
  std::string out = "-----BEGIN " + std::string(label) + "-----\n";
  for (size_t at = 0; at < b64.size(); at += 64) out += b64.substr(at, 64) + "\n";
  return out + "-----END " + std::string(label) + "-----\n";
}

auth::IssueOptions NodeOptions() {
  auth::IssueOptions o;
  o.common_name = "node-1";
  o.uris = {std::string(kTokenUri)};
  o.client_auth = true;
  o.now_unix = kNow;
  o.validity_seconds = 86400;
  return o;
}

void Csr(const std::string& pem) {
  const Ca& ca = TheCa();
  auto info = auth::ParseCsrPem(pem);
  QueueEmpty();
  if (!info.ok()) {
    FUZZ_CHECK(info.status().code() == Code::kInvalidArgument);
    return;
  }
  auto issued = auth::SignCsrPem(ca.cert, ca.key, pem, NodeOptions());
  QueueEmpty();
  FUZZ_CHECK(issued.ok());
  auto cert = auth::ParseCertPem(*issued);
  FUZZ_CHECK(cert.ok());
  FUZZ_CHECK(cert->common_name == "node-1" && cert->issuer_common_name == "drover-fuzz-ca");
  FUZZ_CHECK(cert->dns_names.empty() && cert->ip_addresses.empty() && !cert->is_ca);
  auto node = auth::NodeIdentityOf(*cert);
  FUZZ_CHECK(node.ok() && node->node == "node-1" && node->token_id == "0123456789abcdef");
  FUZZ_CHECK(auth::VerifyCertPem(*issued, ca.cert, kNow, auth::Purpose::kClient).ok());
  QueueEmpty();
}

void Cert(const std::string& pem) {
  const Ca& ca = TheCa();
  auto info = auth::ParseCertPem(pem);
  QueueEmpty();
  if (info.ok()) {
    FUZZ_CHECK(info->fingerprint.size() == 7 + 64 && info->fingerprint.starts_with("sha256:"));
    (void)auth::NodeIdentityOf(*info);
  } else {
    FUZZ_CHECK(info.status().code() == Code::kInvalidArgument);
  }
  for (auth::Purpose p : {auth::Purpose::kAny, auth::Purpose::kServer, auth::Purpose::kClient}) {
    drover::Status s = auth::VerifyCertPem(pem, ca.cert, kNow, p);
    QueueEmpty();
    // Only the CA could have signed it, and the fuzzer does not hold its key.
    FUZZ_CHECK(s.code() == Code::kUnauthenticated);
  }
}

void Key(const std::string& pem) {
  drover::Status s = auth::CheckKeyMatchesCert(pem, TheCa().cert);
  QueueEmpty();
  FUZZ_CHECK(s.code() == Code::kInvalidArgument);
}

void Name(std::string_view name) {
  const Ca& ca = TheCa();
  auth::IssueOptions o = NodeOptions();
  if (auth::ValidateDnsName(name).ok()) {
    FUZZ_CHECK(!name.empty() && name.size() <= 253);
    o.dns_names = {std::string(name)};
  } else if (auth::IsIpAddress(name)) {
    o.ip_addresses = {std::string(name)};
  } else {
    return;
  }
  auto issued = auth::SignCsrPem(ca.cert, ca.key, ca.csr, o);
  QueueEmpty();
  FUZZ_CHECK(issued.ok());
  auto cert = auth::ParseCertPem(*issued);
  FUZZ_CHECK(cert.ok());
  if (!o.dns_names.empty()) {
    FUZZ_CHECK(cert->dns_names == o.dns_names);
  } else {
    FUZZ_CHECK(cert->ip_addresses.size() == 1 && auth::IsIpAddress(cert->ip_addresses[0]));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)TheCa();  // key generation and signing once, outside the runs
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = AsText(data + 1, size - 1);
  const bool der = (data[0] & 4) != 0;
  switch (data[0] % 4) {
    case 0: Csr(der ? Pem("CERTIFICATE REQUEST", rest) : std::string(rest)); break;
    case 1: Cert(der ? Pem("CERTIFICATE", rest) : std::string(rest)); break;
    case 2: Key(der ? Pem("PRIVATE KEY", rest) : std::string(rest)); break;
    default: Name(rest); break;
  }
  return 0;
}
