#include "drover/auth/certs.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>

#include "drover/auth/authority.h"
#include "drover/auth/cluster_ca.h"
#include "drover/auth/test_store.h"

namespace drover::auth {
namespace {

constexpr int64_t kNow = 1'700'000'000;
constexpr int64_t kDay = 24 * 3600;

struct Ca {
  std::string key;
  std::string cert;
};

Ca MakeCa(const std::string& name = "test-ca") {
  Ca ca;
  auto key = GenerateKeyPem();
  EXPECT_TRUE(key.ok()) << key.status().ToString();
  ca.key = *key;
  IssueOptions o;
  o.common_name = name;
  o.now_unix = kNow;
  o.validity_seconds = 3650 * kDay;
  auto cert = MakeCaCertPem(ca.key, o);
  EXPECT_TRUE(cert.ok()) << cert.status().ToString();
  ca.cert = *cert;
  return ca;
}

ServerTls Issuer(const Ca& ca) {
  ServerTls tls;
  tls.ca_pem = ca.cert;
  tls.ca_key_pem = ca.key;
  return tls;
}

std::string Csr(std::string* key_out = nullptr, const std::string& cn = "gpu-07") {
  auto key = GenerateKeyPem();
  EXPECT_TRUE(key.ok());
  auto csr = MakeCsrPem(*key, cn);
  EXPECT_TRUE(csr.ok()) << csr.status().ToString();
  if (key_out != nullptr) *key_out = *key;
  return *csr;
}

TEST(CertsTest, CaCertificateIsACa) {
  Ca ca = MakeCa();
  auto info = ParseCertPem(ca.cert);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->is_ca);
  EXPECT_EQ(info->common_name, "test-ca");
  EXPECT_EQ(info->issuer_common_name, "test-ca");
  EXPECT_LE(info->not_before_unix, kNow);
  EXPECT_EQ(info->not_after_unix, kNow + 3650 * kDay);
  EXPECT_TRUE(info->fingerprint.starts_with("sha256:"));
  EXPECT_EQ(info->fingerprint.size(), 7u + 64u);
  EXPECT_TRUE(CheckKeyMatchesCert(ca.key, ca.cert).ok());
}

TEST(CertsTest, SignedNodeCertificateVerifiesAndNamesItsNode) {
  Ca ca = MakeCa();
  std::string key;
  std::string csr = Csr(&key, "whatever-the-agent-asked");
  auto cert = IssueNodeCertificate(Issuer(ca), csr, "gpu-07", "0123456789abcdef", kNow);
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  EXPECT_TRUE(VerifyCertPem(*cert, ca.cert, kNow, Purpose::kClient).ok());
  EXPECT_TRUE(CheckKeyMatchesCert(key, *cert).ok());
  // A client certificate cannot serve.
  EXPECT_EQ(VerifyCertPem(*cert, ca.cert, kNow, Purpose::kServer).code(), Code::kUnauthenticated);
  auto info = ParseCertPem(*cert);
  ASSERT_TRUE(info.ok());
  // The CA chose the name, not the requester.
  EXPECT_EQ(info->common_name, "gpu-07");
  EXPECT_EQ(info->issuer_common_name, "test-ca");
  EXPECT_FALSE(info->is_ca);
  auto id = NodeIdentityOf(*info);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->node, "gpu-07");
  EXPECT_EQ(id->token_id, "0123456789abcdef");
}

TEST(CertsTest, CertificateFromAnotherCaDoesNotVerify) {
  Ca ours = MakeCa("ours");
  Ca theirs = MakeCa("theirs");
  auto cert = IssueNodeCertificate(Issuer(theirs), Csr(), "gpu-07", "0123456789abcdef", kNow);
  ASSERT_TRUE(cert.ok());
  Status s = VerifyCertPem(*cert, ours.cert, kNow);
  EXPECT_EQ(s.code(), Code::kUnauthenticated);
  EXPECT_NE(s.message().find("does not verify"), std::string::npos) << s.message();
  // A CA certificate is not a peer certificate, even its own.
  EXPECT_EQ(VerifyCertPem(ours.cert, ours.cert, kNow).code(), Code::kUnauthenticated);
}

TEST(CertsTest, ExpiredAndNotYetValidCertificatesDoNotVerify) {
  Ca ca = MakeCa();
  auto cert = IssueNodeCertificate(Issuer(ca), Csr(), "gpu-07", "0123456789abcdef", kNow);
  ASSERT_TRUE(cert.ok());
  Status expired = VerifyCertPem(*cert, ca.cert, kNow + kNodeValiditySeconds + 1);
  EXPECT_EQ(expired.code(), Code::kUnauthenticated);
  EXPECT_NE(expired.message().find("expired"), std::string::npos) << expired.message();
  Status early = VerifyCertPem(*cert, ca.cert, kNow - kDay);
  EXPECT_EQ(early.code(), Code::kUnauthenticated);
  EXPECT_NE(early.message().find("not yet valid"), std::string::npos) << early.message();
}

TEST(CertsTest, ServerCertificateCarriesItsNames) {
  Ca ca = MakeCa();
  IssueOptions o;
  o.common_name = "drover-server";
  o.server_auth = true;
  o.dns_names = {"localhost", "head.example.com"};
  o.ip_addresses = {"127.0.0.1", "::1", "10.0.0.5"};
  o.now_unix = kNow;
  o.validity_seconds = 365 * kDay;
  auto cert = SignCsrPem(ca.cert, ca.key, Csr(), o);
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  auto info = ParseCertPem(*cert);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->dns_names, (std::vector<std::string>{"localhost", "head.example.com"}));
  EXPECT_EQ(info->ip_addresses, (std::vector<std::string>{"127.0.0.1", "::1", "10.0.0.5"}));
  EXPECT_TRUE(VerifyCertPem(*cert, ca.cert, kNow, Purpose::kServer).ok());
  // Not a node certificate.
  EXPECT_EQ(NodeIdentityOf(*info).status().code(), Code::kPermissionDenied);
}

TEST(CertsTest, GarbageIsRefusedWithAReason) {
  for (std::string_view junk :
       {std::string_view(""), std::string_view("hello"),
        std::string_view("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
        std::string_view("-----BEGIN CERTIFICATE REQUEST-----\n!!!\n-----END CERTIFICATE REQUEST-----\n")}) {
    auto cert = ParseCertPem(junk);
    EXPECT_EQ(cert.status().code(), Code::kInvalidArgument) << junk;
    auto csr = ParseCsrPem(junk);
    EXPECT_EQ(csr.status().code(), Code::kInvalidArgument) << junk;
    EXPECT_FALSE(VerifyCertPem(junk, MakeCa().cert, kNow).ok());
  }
  std::string huge(kMaxPemBytes + 1, 'A');
  EXPECT_NE(ParseCertPem(huge).status().message().find("larger than"), std::string::npos);
  // A certificate is not a CSR and a CSR is not a certificate.
  Ca ca = MakeCa();
  EXPECT_EQ(ParseCsrPem(ca.cert).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseCertPem(Csr()).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(IssueNodeCertificate(Issuer(ca), ca.cert, "gpu-07", "0123456789abcdef", kNow).status().code(),
            Code::kInvalidArgument);
}

TEST(CertsTest, TamperedCsrIsRefused) {
  std::string csr = Csr();
  auto info = ParseCsrPem(csr);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key_type, "EC P-256");
  EXPECT_EQ(info->common_name, "gpu-07");
  // Flip one character of the base64 body: either the DER breaks or the
  // signature does; both are refused.
  size_t body = csr.find('\n') + 40;
  csr[body] = csr[body] == 'A' ? 'B' : 'A';
  EXPECT_EQ(ParseCsrPem(csr).status().code(), Code::kInvalidArgument);
}

TEST(CertsTest, NodeIdentityNeedsANodeNameAndOneTokenId) {
  CertInfo info;
  info.common_name = "gpu-07";
  EXPECT_FALSE(NodeIdentityOf(info).ok());
  info.uris = {"urn:drover:node-token:0123456789abcdef"};
  EXPECT_TRUE(NodeIdentityOf(info).ok());
  info.common_name = "Not A Node";
  EXPECT_FALSE(NodeIdentityOf(info).ok());
  info.common_name = "gpu-07";
  info.uris.push_back("urn:drover:node-token:fedcba9876543210");
  EXPECT_FALSE(NodeIdentityOf(info).ok());
}

TEST(CertsTest, NamesAreChecked) {
  EXPECT_TRUE(IsIpAddress("10.1.2.3"));
  EXPECT_TRUE(IsIpAddress("::1"));
  EXPECT_FALSE(IsIpAddress("head"));
  EXPECT_TRUE(ValidateDnsName("head.example.com").ok());
  EXPECT_TRUE(ValidateDnsName("*.example.com").ok());
  EXPECT_FALSE(ValidateDnsName("").ok());
  EXPECT_FALSE(ValidateDnsName("a,IP:1.2.3.4").ok());
  EXPECT_FALSE(ValidateDnsName("a..b").ok());
  EXPECT_FALSE(ValidateDnsName(std::string(64, 'a')).ok());
}

class ClusterTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "certs-XXXXXX";
    dir_ = ::mkdtemp(tmpl.data());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ClusterTlsTest, InitIsIdempotentAndKeepsTheCa) {
  std::string tls = dir_ + "/tls";
  auto first = InitClusterTls(tls, {"head.example.com", "10.0.0.5"}, kNow);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->created_ca);
  EXPECT_TRUE(first->issued_server);
  struct stat st {};
  ASSERT_EQ(::stat(first->paths.ca_key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(first->paths.server_key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const char* ip : {"127.0.0.1", "::1", "10.0.0.5"}) {
    EXPECT_NE(std::find(first->server.ip_addresses.begin(), first->server.ip_addresses.end(), ip),
              first->server.ip_addresses.end())
        << ip;
  }
  auto loaded =
      LoadServerTls(first->paths.server_cert, first->paths.server_key, first->paths.ca_cert, first->paths.ca_key, kNow);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->can_issue());
  EXPECT_EQ(loaded->ca_fingerprint, first->ca.fingerprint);

  auto again = InitClusterTls(tls, {"head.example.com"}, kNow + kDay);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->created_ca);
  EXPECT_FALSE(again->issued_server);
  EXPECT_EQ(again->ca.fingerprint, first->ca.fingerprint);
  EXPECT_EQ(again->server.fingerprint, first->server.fingerprint);

  // A new name, or a certificate close to its end: a new server
  // certificate from the same CA, keeping the old names.
  auto more = InitClusterTls(tls, {"other.example.com"}, kNow + kDay);
  ASSERT_TRUE(more.ok());
  EXPECT_TRUE(more->issued_server);
  EXPECT_EQ(more->ca.fingerprint, first->ca.fingerprint);
  EXPECT_NE(std::find(more->server.dns_names.begin(), more->server.dns_names.end(), "head.example.com"),
            more->server.dns_names.end());
  auto late = InitClusterTls(tls, {}, kNow + kServerValiditySeconds - kDay);
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->issued_server);
  EXPECT_EQ(late->ca.fingerprint, first->ca.fingerprint);
}

TEST_F(ClusterTlsTest, HalfACaIsRefused) {
  auto first = InitClusterTls(dir_, {}, kNow);
  ASSERT_TRUE(first.ok());
  std::filesystem::remove(first->paths.ca_key);
  auto again = InitClusterTls(dir_, {}, kNow);
  EXPECT_EQ(again.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("ca.key"), std::string::npos) << again.status().message();
}

TEST_F(ClusterTlsTest, BadSanIsRefused) {
  EXPECT_EQ(InitClusterTls(dir_, {"bad name"}, kNow).status().code(), Code::kInvalidArgument);
}

TEST(NodeCertificateTest, RevokingTheNodeTokenRevokesTheCertificate) {
  ManualClock clock;
  testing::TempStore store(&clock);
  Authority authority(store.get(), &clock);
  Principal admin{"", "root", "default", Role::kAdmin, "", ""};
  auto join = authority.CreateJoinToken(admin, "gpu-07", std::chrono::hours(1));
  ASSERT_TRUE(join.ok());
  auto node_token = authority.Join(*join, "gpu-07");
  ASSERT_TRUE(node_token.ok());
  auto parsed = ParseToken(*node_token);
  ASSERT_TRUE(parsed.ok());
  auto p = authority.AuthenticateNode(parsed->id, "gpu-07");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->node, "gpu-07");
  EXPECT_EQ(p->role, Role::kNode);
  EXPECT_EQ(authority.AuthenticateNode(parsed->id, "gpu-08").status().code(), Code::kUnauthenticated);
  EXPECT_EQ(authority.AuthenticateNode("0000000000000000", "gpu-07").status().code(), Code::kUnauthenticated);
  ASSERT_TRUE(authority.RevokeToken(admin, parsed->id).ok());
  EXPECT_EQ(authority.AuthenticateNode(parsed->id, "gpu-07").status().code(), Code::kUnauthenticated);
}

}  // namespace
}  // namespace drover::auth
