#include "drover/auth/cluster_ca.h"

#include "drover/common/files.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "drover/auth/token.h"
#include "drover/common/ids.h"

namespace drover::auth {
namespace {

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// "0:0::1" -> "::1": as a certificate prints it.
std::string CanonicalIp(const std::string& ip) {
  unsigned char bytes[16];
  char buf[INET6_ADDRSTRLEN] = {};
  if (::inet_pton(AF_INET, ip.c_str(), bytes) == 1) return ::inet_ntop(AF_INET, bytes, buf, sizeof(buf)) ? buf : ip;
  if (::inet_pton(AF_INET6, ip.c_str(), bytes) == 1) return ::inet_ntop(AF_INET6, bytes, buf, sizeof(buf)) ? buf : ip;
  return ip;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

IssueOptions ServerOptionsFor(const std::vector<std::string>& names, int64_t now) {
  IssueOptions o;
  o.common_name = "drover-server";
  o.server_auth = true;
  o.now_unix = now;
  o.validity_seconds = kServerValiditySeconds;
  for (const std::string& name : names) {
    bool ip = IsIpAddress(name);
    std::string n = ip ? CanonicalIp(name) : Lower(name);
    auto& list = ip ? o.ip_addresses : o.dns_names;
    if (std::find(list.begin(), list.end(), n) == list.end()) list.push_back(n);
  }
  return o;
}

// Whether the certificate at `paths` can stay: same CA, matching key,
// covers `o`'s names, valid for a while yet.
bool ServerCertStillGood(const TlsPaths& paths, const std::string& ca_pem, const IssueOptions& o) {
  auto cert = ReadTextFile(paths.server_cert);
  auto key = ReadTextFile(paths.server_key);
  if (!cert.ok() || !key.ok()) return false;
  if (!VerifyCertPem(*cert, ca_pem, o.now_unix + kRenewBeforeSeconds, Purpose::kServer).ok()) return false;
  if (!CheckKeyMatchesCert(*key, *cert).ok()) return false;
  auto info = ParseCertPem(*cert);
  if (!info.ok()) return false;
  auto covers = [](const std::vector<std::string>& have, const std::vector<std::string>& want) {
    return std::all_of(want.begin(), want.end(),
                       [&](const std::string& n) { return std::find(have.begin(), have.end(), n) != have.end(); });
  };
  return covers(info->dns_names, o.dns_names) && covers(info->ip_addresses, o.ip_addresses);
}

}  // namespace

TlsPaths TlsPathsIn(const std::string& dir) {
  return {dir + "/ca.crt", dir + "/ca.key", dir + "/server.crt", dir + "/server.key"};
}

std::vector<std::string> DefaultServerNames(const std::string& hostname) {
  std::vector<std::string> names = {"127.0.0.1", "::1", "localhost"};
  std::string host;
  for (char c : hostname) host += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!host.empty() && host != "localhost" && ValidateDnsName(host).ok()) names.push_back(host);
  return names;
}

Result<InitReport> InitClusterTls(const std::string& dir, const std::vector<std::string>& sans, int64_t now_unix) {
  InitReport report;
  report.paths = TlsPathsIn(dir);
  const TlsPaths& p = report.paths;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::vector<std::string> names = DefaultServerNames(host);
  for (const std::string& s : sans) {
    if (!IsIpAddress(s)) DROVER_RETURN_IF_ERROR(ValidateDnsName(s));
    names.push_back(s);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable(fmt::format("cannot create '{}': {}", dir, ec.message()));
  ::chmod(dir.c_str(), 0700);

  // The CA: made once, never replaced (every node certificate hangs off it).
  bool have_cert = Exists(p.ca_cert), have_key = Exists(p.ca_key);
  if (have_cert != have_key) {
    return FailedPrecondition(
        fmt::format("'{}' exists without '{}': restore the missing file or remove both to "
                    "start a new CA (every node must then join again)",
                    have_cert ? p.ca_cert : p.ca_key, have_cert ? p.ca_key : p.ca_cert));
  }
  std::string ca_pem, ca_key_pem;
  if (!have_cert) {
    DROVER_ASSIGN_OR_RETURN(ca_key_pem, GenerateKeyPem());
    IssueOptions ca;
    ca.common_name = "drover-cluster-ca";
    ca.now_unix = now_unix;
    ca.validity_seconds = kCaValiditySeconds;
    DROVER_ASSIGN_OR_RETURN(ca_pem, MakeCaCertPem(ca_key_pem, ca));
    // Key first: a CA certificate on disk always has its key.
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(p.ca_key, ca_key_pem, 0600));
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(p.ca_cert, ca_pem, 0644));
    report.created_ca = true;
  } else {
    DROVER_ASSIGN_OR_RETURN(ca_pem, ReadTextFile(p.ca_cert));
    DROVER_ASSIGN_OR_RETURN(ca_key_pem, ReadTextFile(p.ca_key));
    if (Status s = CheckKeyMatchesCert(ca_key_pem, ca_pem); !s.ok()) {
      return FailedPrecondition(
          fmt::format("'{}' and '{}' do not belong together: {}", p.ca_key, p.ca_cert, s.message()));
    }
  }
  DROVER_ASSIGN_OR_RETURN(report.ca, ParseCertPem(ca_pem));
  if (!report.ca.is_ca) return FailedPrecondition(fmt::format("'{}' is not a CA certificate", p.ca_cert));

  IssueOptions server = ServerOptionsFor(names, now_unix);
  if (!ServerCertStillGood(p, ca_pem, server)) {
    // Keep the names of a certificate being renewed.
    if (auto old = ReadTextFile(p.server_cert); old.ok()) {
      if (auto info = ParseCertPem(*old); info.ok()) {
        std::vector<std::string> all = names;
        all.insert(all.end(), info->dns_names.begin(), info->dns_names.end());
        all.insert(all.end(), info->ip_addresses.begin(), info->ip_addresses.end());
        server = ServerOptionsFor(all, now_unix);
      }
    }
    DROVER_ASSIGN_OR_RETURN(std::string key, GenerateKeyPem());
    DROVER_ASSIGN_OR_RETURN(std::string csr, MakeCsrPem(key, server.common_name));
    DROVER_ASSIGN_OR_RETURN(std::string cert, SignCsrPem(ca_pem, ca_key_pem, csr, server));
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(p.server_key, key, 0600));
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(p.server_cert, cert, 0644));
    report.issued_server = true;
  }
  DROVER_ASSIGN_OR_RETURN(std::string server_pem, ReadTextFile(p.server_cert));
  DROVER_ASSIGN_OR_RETURN(report.server, ParseCertPem(server_pem));
  return report;
}

Result<ServerTls> LoadServerTls(const std::string& cert, const std::string& key, const std::string& ca,
                                const std::string& ca_key, int64_t now_unix) {
  ServerTls tls;
  DROVER_ASSIGN_OR_RETURN(tls.cert_pem, ReadTextFile(cert));
  DROVER_ASSIGN_OR_RETURN(tls.key_pem, ReadTextFile(key));
  DROVER_ASSIGN_OR_RETURN(tls.ca_pem, ReadTextFile(ca));
  if (Status s = CheckKeyMatchesCert(tls.key_pem, tls.cert_pem); !s.ok()) {
    return InvalidArgument(fmt::format("'{}' and '{}': {}", key, cert, s.message()));
  }
  if (Status s = VerifyCertPem(tls.cert_pem, tls.ca_pem, now_unix, Purpose::kServer); !s.ok()) {
    return InvalidArgument(fmt::format("'{}' against the CA '{}': {}", cert, ca, s.message()));
  }
  DROVER_ASSIGN_OR_RETURN(CertInfo ca_info, ParseCertPem(tls.ca_pem));
  tls.ca_fingerprint = ca_info.fingerprint;
  if (!ca_key.empty()) {
    DROVER_ASSIGN_OR_RETURN(tls.ca_key_pem, ReadTextFile(ca_key));
    if (Status s = CheckKeyMatchesCert(tls.ca_key_pem, tls.ca_pem); !s.ok()) {
      return InvalidArgument(fmt::format("'{}' and '{}': {}", ca_key, ca, s.message()));
    }
  }
  return tls;
}

Result<std::string> IssueNodeCertificate(const ServerTls& tls, std::string_view csr_pem, const std::string& node,
                                         const std::string& token_id, int64_t now_unix) {
  if (!tls.can_issue()) return FailedPrecondition("this server has no CA key and cannot issue node certificates");
  DROVER_RETURN_IF_ERROR(ValidateNodeName(node));
  if (token_id.size() != kTokenIdChars) return InvalidArgument("a node certificate needs its node token's id");
  IssueOptions o;
  o.common_name = node;
  o.client_auth = true;
  o.uris = {std::string(kNodeTokenUriPrefix) + token_id};
  o.now_unix = now_unix;
  o.validity_seconds = kNodeValiditySeconds;
  return SignCsrPem(tls.ca_pem, tls.ca_key_pem, csr_pem, o);
}

}  // namespace drover::auth
