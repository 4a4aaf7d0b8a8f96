#pragma once
// X.509 for the cluster CA (docs/security.md, "Across machines"): keys,
// certificate signing requests, certificates, chain verification. A thin
// layer over OpenSSL 3 (EVP, X509) that speaks PEM text and Status, so that
// nothing above it touches OpenSSL types.
//
// What is issued:
//   CA      EC P-256, self-signed, CA:TRUE pathlen:0, keyCertSign, ~10 years
//   server  serverAuth, SANs (DNS names and IP addresses) the clients dial
//   node    clientAuth, CN = the node name, and the URI SAN
//           "urn:drover:node-token:<token id>" binding it to the node token
//           it was issued with (revoking that token revokes the certificate)
//
// Every parser here takes untrusted input (a CSR from an agent that joins,
// a peer's certificate, files): sizes are bounded, anything but one well-
// formed PEM object of the expected kind is kInvalidArgument with a one-line
// reason, and OpenSSL's thread-local error queue is left empty.
//
// Pure functions of their inputs (time is an argument); thread-safe.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover::auth {

// Longest PEM text a parser accepts (a certificate is ~1 KiB).
constexpr size_t kMaxPemBytes = 64 << 10;
// The URI SAN prefix of node certificates.
constexpr std::string_view kNodeTokenUriPrefix = "urn:drover:node-token:";

// A fresh EC P-256 private key, PEM (PKCS#8, "BEGIN PRIVATE KEY").
Result<std::string> GenerateKeyPem();

// A certificate signing request for `key_pem`'s public key with subject
// CN=`common_name`, signed by that key (proof of possession).
Result<std::string> MakeCsrPem(std::string_view key_pem, std::string_view common_name);

struct CsrInfo {
  std::string common_name;  // as the requester wrote it: advisory only
  std::string key_type;     // "EC P-256", "RSA 3072", ...
};
// Parses a CSR and checks its self-signature and key: EC P-256 or P-384,
// or RSA of 2048 to 8192 bits.
Result<CsrInfo> ParseCsrPem(std::string_view pem);

struct CertInfo {
  std::string common_name;
  std::string issuer_common_name;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;  // "127.0.0.1", "::1"
  std::vector<std::string> uris;
  int64_t not_before_unix = 0;  // seconds
  int64_t not_after_unix = 0;
  bool is_ca = false;
  std::string serial_hex;
  std::string fingerprint;  // "sha256:<hex of the DER>"
};
// Parses the first certificate of a PEM text (a chain's leaf).
Result<CertInfo> ParseCertPem(std::string_view pem);

struct IssueOptions {
  std::string common_name;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
  std::vector<std::string> uris;
  bool server_auth = false;  // extendedKeyUsage serverAuth
  bool client_auth = false;  // extendedKeyUsage clientAuth
  int64_t now_unix = 0;
  int64_t validity_seconds = 0;
};

// A self-signed CA certificate for `ca_key_pem` (common_name, now_unix and
// validity_seconds of `o` are used).
Result<std::string> MakeCaCertPem(std::string_view ca_key_pem, const IssueOptions& o);

// Signs the public key of `csr_pem` (checked as ParseCsrPem does) with the
// CA. Subject and extensions come from `o`, never from the CSR: the
// requester chooses its key, the CA chooses the name.
Result<std::string> SignCsrPem(std::string_view ca_cert_pem, std::string_view ca_key_pem, std::string_view csr_pem,
                               const IssueOptions& o);

enum class Purpose { kAny, kServer, kClient };
// OK when the leaf of `cert_pem` is signed by the CA of `ca_pem`, is valid
// at `now_unix`, is not itself a CA, and may serve `purpose`; else
// kUnauthenticated naming why ("certificate has expired", "unable to get
// local issuer certificate", ...).
Status VerifyCertPem(std::string_view cert_pem, std::string_view ca_pem, int64_t now_unix,
                     Purpose purpose = Purpose::kAny);

// OK when `key_pem` is the private key of `cert_pem`'s public key.
Status CheckKeyMatchesCert(std::string_view key_pem, std::string_view cert_pem);

// Whether `text` is an IPv4 or IPv6 address literal (no brackets).
bool IsIpAddress(std::string_view text);
// Checks a DNS name for a certificate: 1..253 characters of [a-z0-9.-] (a
// leading "*." allowed), labels of 1..63.
Status ValidateDnsName(std::string_view name);

// The node a node certificate speaks for: its CN and the node token id of
// its URI SAN. kPermissionDenied when `info` is not a node certificate.
struct NodeIdentity {
  std::string node;
  std::string token_id;
};
Result<NodeIdentity> NodeIdentityOf(const CertInfo& info);

}  // namespace drover::auth
