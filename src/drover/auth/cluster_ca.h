#pragma once
// The cluster CA on disk and what a server needs of it.
//
// `drover certs init` writes <data-dir>/tls/:
//   ca.key      (0600) the CA's private key: whoever holds it can mint nodes
//   ca.crt      the CA certificate; agents and the CLI verify the server with it
//   server.key  (0600) the server's key
//   server.crt  the server's certificate: 127.0.0.1, ::1, localhost, the host
//               name and every --san
// A server that finds server.crt there (or is given --tls-cert, --tls-key,
// --tls-ca) serves TLS on both listeners; with ca.key it also issues node
// certificates at join.
//
// Thread-safety: the functions are thread-safe; a ServerTls is immutable.

#include <cstdint>
#include <string>
#include <vector>

#include "drover/auth/certs.h"
#include "drover/common/status.h"

namespace drover::auth {

constexpr int64_t kCaValiditySeconds = int64_t{3653} * 24 * 3600;  // ~10 years
constexpr int64_t kServerValiditySeconds = int64_t{365} * 24 * 3600;
constexpr int64_t kNodeValiditySeconds = int64_t{365} * 24 * 3600;
// `certs init` reissues a server certificate that expires sooner than this.
constexpr int64_t kRenewBeforeSeconds = int64_t{30} * 24 * 3600;

struct TlsPaths {
  std::string ca_cert;
  std::string ca_key;
  std::string server_cert;
  std::string server_key;
};
// The files under `dir` (<data-dir>/tls).
TlsPaths TlsPathsIn(const std::string& dir);

struct InitReport {
  bool created_ca = false;
  bool issued_server = false;
  TlsPaths paths;
  CertInfo ca;
  CertInfo server;
};

// Creates the CA unless one exists (it is never overwritten), then issues a
// server certificate unless a valid one (same CA, key matching, covering
// every name in `sans` and the defaults, not expiring within
// kRenewBeforeSeconds) is there. `sans` are DNS names or IP addresses.
Result<InitReport> InitClusterTls(const std::string& dir, const std::vector<std::string>& sans, int64_t now_unix);

// The names a server certificate covers by default: 127.0.0.1, ::1,
// localhost and `hostname` (when it is a valid DNS name).
std::vector<std::string> DefaultServerNames(const std::string& hostname);

// What a server serves TLS with, loaded and checked (key matches, the
// certificate chains to the CA).
struct ServerTls {
  std::string ca_pem;
  std::string ca_key_pem;  // empty: this server cannot issue node certificates
  std::string cert_pem;
  std::string key_pem;
  std::string ca_fingerprint;
  bool can_issue() const { return !ca_key_pem.empty(); }
};
// Every file must exist but `ca_key`, which may be "" (no issuing).
Result<ServerTls> LoadServerTls(const std::string& cert, const std::string& key, const std::string& ca,
                                const std::string& ca_key, int64_t now_unix);

// A node certificate for `node`, bound to its node token `token_id`, for the
// key of `csr_pem`.
Result<std::string> IssueNodeCertificate(const ServerTls& tls, std::string_view csr_pem, const std::string& node,
                                         const std::string& token_id, int64_t now_unix);

}  // namespace drover::auth
