#include "drover/auth/certs.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "drover/auth/token.h"
#include "drover/common/ids.h"

namespace drover::auth {
namespace {

template <auto Fn>
struct Deleter {
  template <typename T>
  void operator()(T* p) const {
    Fn(p);
  }
};
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using ReqPtr = std::unique_ptr<X509_REQ, Deleter<X509_REQ_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Deleter<X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX_free>>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;

// The newest OpenSSL error of this thread, and an empty queue afterwards
// (the queue is per thread: a stale entry would confuse the next caller).
std::string SslError() {
  unsigned long code = ERR_peek_last_error();
  std::string out;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof(buf));
    const char* reason = ERR_reason_error_string(code);
    out = reason != nullptr ? reason : buf;
  }
  ERR_clear_error();
  return out.empty() ? "unknown error" : out;
}

Status Failed(std::string_view what) { return Internal(fmt::format("{}: {}", what, SslError())); }

// A read-only BIO over `pem`, refused when it is empty or too large.
Result<BioPtr> ReadBio(std::string_view pem, std::string_view what) {
  if (pem.empty()) return InvalidArgument(fmt::format("{} is empty", what));
  if (pem.size() > kMaxPemBytes) {
    return InvalidArgument(fmt::format("{} is larger than {} bytes", what, kMaxPemBytes));
  }
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return Failed("cannot allocate a buffer");
  return bio;
}

Result<std::string> BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  if (n <= 0 || data == nullptr) return Failed("cannot write PEM");
  return std::string(data, static_cast<size_t>(n));
}

Result<PkeyPtr> ReadKey(std::string_view pem) {
  DROVER_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem, "private key"));
  // A null password callback with no default: an encrypted key fails instead of prompting.
  PkeyPtr key(PEM_read_bio_PrivateKey(
      bio.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr));
  if (!key) return InvalidArgument(fmt::format("private key is not a PEM private key: {}", SslError()));
  return key;
}

Result<X509Ptr> ReadCert(std::string_view pem, std::string_view what = "certificate") {
  DROVER_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem, what));
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return InvalidArgument(fmt::format("{} is not a PEM certificate: {}", what, SslError()));
  return cert;
}

// "EC P-256", "RSA 2048"...; kInvalidArgument for keys we do not accept.
Result<std::string> CheckKey(EVP_PKEY* key) {
  int bits = EVP_PKEY_get_bits(key);
  if (EVP_PKEY_is_a(key, "EC")) {
    char group[64] = {};
    size_t len = 0;
    if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), &len) != 1) {
      ERR_clear_error();
      return InvalidArgument("the EC key has no named curve");
    }
    std::string_view name(group, len);
    if (name == "prime256v1" || name == "P-256") return std::string("EC P-256");
    if (name == "secp384r1" || name == "P-384") return std::string("EC P-384");
    return InvalidArgument(fmt::format("EC curve '{}' is not accepted (use P-256 or P-384)", name.substr(0, 32)));
  }
  if (EVP_PKEY_is_a(key, "RSA")) {
    if (bits < 2048 || bits > 8192)
      return InvalidArgument(fmt::format("an RSA key of {} bits is not accepted (2048..8192)", bits));
    return fmt::format("RSA {}", bits);
  }
  return InvalidArgument("the key type is not accepted (use EC P-256, P-384 or RSA 2048+)");
}

Status SetCommonName(X509_NAME* name, std::string_view cn) {
  if (cn.empty() || cn.size() > 64) return InvalidArgument("a common name must be 1..64 characters");
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.data()),
                                 static_cast<int>(cn.size()), -1, 0) != 1) {
    return Failed("cannot set the common name");
  }
  return Status::Ok();
}

std::string CommonNameOf(const X509_NAME* name) {
  if (name == nullptr) return "";
  int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (i < 0) return "";
  const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) {
    ERR_clear_error();
    return "";
  }
  std::string out(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  return out;
}

// A name with a NUL or a control character in it is not believed.
bool Printable(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return Failed(fmt::format("cannot add extension {}", OBJ_nid2sn(nid)));
  return Status::Ok();
}

Status AddString(GENERAL_NAMES* names, int type, std::string_view value) {
  GENERAL_NAME* gn = GENERAL_NAME_new();
  ASN1_IA5STRING* s = ASN1_IA5STRING_new();
  if (gn == nullptr || s == nullptr || ASN1_STRING_set(s, value.data(), static_cast<int>(value.size())) != 1) {
    GENERAL_NAME_free(gn);
    ASN1_IA5STRING_free(s);
    return Failed("cannot build a subject alternative name");
  }
  GENERAL_NAME_set0_value(gn, type, s);
  sk_GENERAL_NAME_push(names, gn);
  return Status::Ok();
}

Status AddIp(GENERAL_NAMES* names, std::string_view ip) {
  unsigned char bytes[16];
  std::string text(ip);
  int len = 0;
  if (::inet_pton(AF_INET, text.c_str(), bytes) == 1) {
    len = 4;
  } else if (::inet_pton(AF_INET6, text.c_str(), bytes) == 1) {
    len = 16;
  } else {
    return InvalidArgument(fmt::format("'{}' is not an IP address", ip.substr(0, 64)));
  }
  GENERAL_NAME* gn = GENERAL_NAME_new();
  ASN1_OCTET_STRING* s = ASN1_OCTET_STRING_new();
  if (gn == nullptr || s == nullptr || ASN1_OCTET_STRING_set(s, bytes, len) != 1) {
    GENERAL_NAME_free(gn);
    ASN1_OCTET_STRING_free(s);
    return Failed("cannot build a subject alternative name");
  }
  GENERAL_NAME_set0_value(gn, GEN_IPADD, s);
  sk_GENERAL_NAME_push(names, gn);
  return Status::Ok();
}

Status CheckIssueOptions(const IssueOptions& o) {
  if (o.validity_seconds <= 0) return InvalidArgument("a certificate needs a positive validity");
  if (o.now_unix <= 0) return InvalidArgument("a certificate needs the current time");
  if (o.common_name.empty() || o.common_name.size() > 64 || !Printable(o.common_name)) {
    return InvalidArgument("a common name must be 1..64 printable characters");
  }
  for (const std::string& d : o.dns_names) DROVER_RETURN_IF_ERROR(ValidateDnsName(d));
  for (const std::string& u : o.uris) {
    if (u.empty() || u.size() > 256 || !Printable(u) || u.find(':') == std::string::npos) {
      return InvalidArgument(fmt::format("'{}' is not a URI", u.substr(0, 64)));
    }
  }
  return Status::Ok();
}

Status SetSerialAndValidity(X509* cert, const IssueOptions& o) {
  // 128 random bits, positive: unique without a counter to keep.
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return Failed("no randomness for a serial number");
  bytes[0] &= 0x7f;
  bytes[0] |= 0x40;
  BnPtr bn(BN_bin2bn(bytes, sizeof(bytes), nullptr));
  if (!bn || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr)
    return Failed("cannot set the serial");
  // Valid from a few minutes ago: a peer whose clock runs a little behind
  // must not see a certificate from the future.
  constexpr int64_t kBackdate = 300;
  if (ASN1_TIME_set(X509_getm_notBefore(cert), static_cast<time_t>(o.now_unix - kBackdate)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert), static_cast<time_t>(o.now_unix + o.validity_seconds)) == nullptr) {
    return Failed("cannot set the validity");
  }
  return Status::Ok();
}

// Fills, extends and signs `cert` (its public key already set).
Status Finish(X509* cert, X509* issuer, EVP_PKEY* issuer_key, const IssueOptions& o, bool ca) {
  if (X509_set_version(cert, 2) != 1) return Failed("cannot set the version");
  DROVER_RETURN_IF_ERROR(SetSerialAndValidity(cert, o));
  X509_NAME* subject = X509_get_subject_name(cert);
  DROVER_RETURN_IF_ERROR(SetCommonName(subject, o.common_name));
  if (X509_set_issuer_name(cert, X509_get_subject_name(issuer != nullptr ? issuer : cert)) != 1) {
    return Failed("cannot set the issuer");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : cert, cert, nullptr, nullptr, 0);
  if (ca) {
    DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_basic_constraints, "critical,CA:FALSE"));
    DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_key_usage, "critical,digitalSignature,keyEncipherment"));
    std::string eku = o.server_auth && o.client_auth ? "serverAuth,clientAuth"
                      : o.server_auth                ? "serverAuth"
                                                     : "clientAuth";
    DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_ext_key_usage, eku.c_str()));
  }
  DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_subject_key_identifier, "hash"));
  if (issuer != nullptr) DROVER_RETURN_IF_ERROR(AddExtension(cert, &ctx, NID_authority_key_identifier, "keyid:always"));
  if (!o.dns_names.empty() || !o.ip_addresses.empty() || !o.uris.empty()) {
    NamesPtr names(sk_GENERAL_NAME_new_null());
    if (!names) return Failed("cannot allocate names");
    for (const std::string& d : o.dns_names) DROVER_RETURN_IF_ERROR(AddString(names.get(), GEN_DNS, d));
    for (const std::string& ip : o.ip_addresses) DROVER_RETURN_IF_ERROR(AddIp(names.get(), ip));
    for (const std::string& u : o.uris) DROVER_RETURN_IF_ERROR(AddString(names.get(), GEN_URI, u));
    if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
      return Failed("cannot add the subject alternative names");
    }
  }
  if (X509_sign(cert, issuer_key, EVP_sha256()) <= 0) return Failed("cannot sign the certificate");
  return Status::Ok();
}

Result<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return Failed("cannot write the certificate");
  return BioText(bio.get());
}

Result<ReqPtr> ReadCsr(std::string_view pem, CsrInfo* info) {
  DROVER_ASSIGN_OR_RETURN(BioPtr bio, ReadBio(pem, "certificate signing request"));
  ReqPtr req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) {
    return InvalidArgument(fmt::format("certificate signing request is not a PEM CSR: {}", SslError()));
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(req.get());
  if (key == nullptr)
    return InvalidArgument(fmt::format("certificate signing request has no public key: {}", SslError()));
  auto type = CheckKey(key);
  if (!type.ok()) return InvalidArgument("certificate signing request: " + type.status().message());
  if (X509_REQ_verify(req.get(), key) != 1) {
    ERR_clear_error();
    return InvalidArgument("certificate signing request is not signed by its own key");
  }
  info->key_type = *type;
  info->common_name = CommonNameOf(X509_REQ_get_subject_name(req.get()));
  if (!Printable(info->common_name)) info->common_name.clear();
  return req;
}

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

int64_t UnixOf(const ASN1_TIME* t) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    ERR_clear_error();
    return 0;
  }
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

Result<std::string> GenerateKeyPem() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return Failed("cannot generate an EC P-256 key");
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Failed("cannot write the private key");
  }
  return BioText(bio.get());
}

Result<std::string> MakeCsrPem(std::string_view key_pem, std::string_view common_name) {
  DROVER_ASSIGN_OR_RETURN(PkeyPtr key, ReadKey(key_pem));
  ReqPtr req(X509_REQ_new());
  if (!req || X509_REQ_set_version(req.get(), 0) != 1) return Failed("cannot make a CSR");
  DROVER_RETURN_IF_ERROR(SetCommonName(X509_REQ_get_subject_name(req.get()), common_name));
  if (X509_REQ_set_pubkey(req.get(), key.get()) != 1 || X509_REQ_sign(req.get(), key.get(), EVP_sha256()) <= 0) {
    return Failed("cannot sign the CSR");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req.get()) != 1) return Failed("cannot write the CSR");
  return BioText(bio.get());
}

Result<CsrInfo> ParseCsrPem(std::string_view pem) {
  CsrInfo info;
  DROVER_ASSIGN_OR_RETURN(ReqPtr req, ReadCsr(pem, &info));
  return info;
}

Result<CertInfo> ParseCertPem(std::string_view pem) {
  DROVER_ASSIGN_OR_RETURN(X509Ptr cert, ReadCert(pem));
  CertInfo info;
  info.common_name = CommonNameOf(X509_get_subject_name(cert.get()));
  info.issuer_common_name = CommonNameOf(X509_get_issuer_name(cert.get()));
  if (!Printable(info.common_name)) info.common_name.clear();
  if (!Printable(info.issuer_common_name)) info.issuer_common_name.clear();
  info.not_before_unix = UnixOf(X509_get0_notBefore(cert.get()));
  info.not_after_unix = UnixOf(X509_get0_notAfter(cert.get()));
  info.is_ca = X509_check_ca(cert.get()) != 0;
  if (const ASN1_INTEGER* serial = X509_get0_serialNumber(cert.get()); serial != nullptr) {
    info.serial_hex = Hex(serial->data, static_cast<size_t>(std::max(serial->length, 0)));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert.get(), EVP_sha256(), digest, &len) == 1) info.fingerprint = "sha256:" + Hex(digest, len);
  int crit = 0;
  NamesPtr names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, &crit, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
    int type = 0;
    const ASN1_STRING* value = static_cast<const ASN1_STRING*>(GENERAL_NAME_get0_value(gn, &type));
    if (value == nullptr) continue;
    std::string text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                     static_cast<size_t>(ASN1_STRING_length(value)));
    if (type == GEN_DNS && Printable(text)) {
      info.dns_names.push_back(std::move(text));
    } else if (type == GEN_URI && Printable(text)) {
      info.uris.push_back(std::move(text));
    } else if (type == GEN_IPADD && (text.size() == 4 || text.size() == 16)) {
      char buf[INET6_ADDRSTRLEN] = {};
      if (::inet_ntop(text.size() == 4 ? AF_INET : AF_INET6, text.data(), buf, sizeof(buf)) != nullptr) {
        info.ip_addresses.emplace_back(buf);
      }
    }
  }
  ERR_clear_error();
  return info;
}

Result<std::string> MakeCaCertPem(std::string_view ca_key_pem, const IssueOptions& o) {
  DROVER_RETURN_IF_ERROR(CheckIssueOptions(o));
  DROVER_ASSIGN_OR_RETURN(PkeyPtr key, ReadKey(ca_key_pem));
  DROVER_RETURN_IF_ERROR(CheckKey(key.get()).status());
  X509Ptr cert(X509_new());
  if (!cert || X509_set_pubkey(cert.get(), key.get()) != 1) return Failed("cannot make a certificate");
  DROVER_RETURN_IF_ERROR(Finish(cert.get(), nullptr, key.get(), o, /*ca=*/true));
  return CertPem(cert.get());
}

Result<std::string> SignCsrPem(std::string_view ca_cert_pem, std::string_view ca_key_pem, std::string_view csr_pem,
                               const IssueOptions& o) {
  DROVER_RETURN_IF_ERROR(CheckIssueOptions(o));
  CsrInfo info;
  DROVER_ASSIGN_OR_RETURN(ReqPtr req, ReadCsr(csr_pem, &info));
  DROVER_ASSIGN_OR_RETURN(X509Ptr ca, ReadCert(ca_cert_pem, "CA certificate"));
  DROVER_ASSIGN_OR_RETURN(PkeyPtr ca_key, ReadKey(ca_key_pem));
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("the CA key does not belong to the CA certificate");
  }
  X509Ptr cert(X509_new());
  if (!cert || X509_set_pubkey(cert.get(), X509_REQ_get0_pubkey(req.get())) != 1)
    return Failed("cannot make a certificate");
  DROVER_RETURN_IF_ERROR(Finish(cert.get(), ca.get(), ca_key.get(), o, /*ca=*/false));
  return CertPem(cert.get());
}

Status VerifyCertPem(std::string_view cert_pem, std::string_view ca_pem, int64_t now_unix, Purpose purpose) {
  auto cert = ReadCert(cert_pem);
  if (!cert.ok()) return Unauthenticated(cert.status().message());
  DROVER_ASSIGN_OR_RETURN(X509Ptr ca, ReadCert(ca_pem, "CA certificate"));
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr) != 1) {
    return Failed("cannot set up certificate verification");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(now_unix));
  if (purpose != Purpose::kAny &&
      X509_STORE_CTX_set_purpose(
          ctx.get(), purpose == Purpose::kServer ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT) != 1) {
    return Failed("cannot set the certificate purpose");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    int err = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return Unauthenticated(fmt::format("certificate '{}' does not verify: {}",
                                       CommonNameOf(X509_get_subject_name(cert->get())).substr(0, 64),
                                       X509_verify_cert_error_string(err)));
  }
  if (X509_check_ca(cert->get()) != 0) {
    ERR_clear_error();
    return Unauthenticated("a CA certificate cannot be used as a peer certificate");
  }
  ERR_clear_error();
  return Status::Ok();
}

Status CheckKeyMatchesCert(std::string_view key_pem, std::string_view cert_pem) {
  DROVER_ASSIGN_OR_RETURN(PkeyPtr key, ReadKey(key_pem));
  DROVER_ASSIGN_OR_RETURN(X509Ptr cert, ReadCert(cert_pem));
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("the private key does not belong to the certificate");
  }
  return Status::Ok();
}

bool IsIpAddress(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return false;
  std::string s(text);
  unsigned char buf[16];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

Status ValidateDnsName(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("'{}' is not a DNS name for a certificate: {}", name.substr(0, 64), why));
  };
  if (name.empty() || name.size() > 253) return bad("1..253 characters");
  std::string_view rest = name.starts_with("*.") ? name.substr(2) : name;
  size_t label = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '.') {
      if (label == 0 || label > 63) return bad("labels are 1..63 characters");
      label = 0;
      continue;
    }
    char c = rest[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (c >= 'A' && c <= 'Z');
    if (!ok) return bad("only letters, digits, '-' and '.'");
    ++label;
  }
  return Status::Ok();
}

Result<NodeIdentity> NodeIdentityOf(const CertInfo& info) {
  NodeIdentity id;
  for (const std::string& uri : info.uris) {
    if (!uri.starts_with(kNodeTokenUriPrefix)) continue;
    if (!id.token_id.empty()) return PermissionDenied("certificate names more than one node token");
    id.token_id = uri.substr(kNodeTokenUriPrefix.size());
  }
  if (id.token_id.size() != kTokenIdChars) {
    return PermissionDenied(fmt::format("certificate '{}' is not a node certificate", info.common_name.substr(0, 64)));
  }
  if (Status s = ValidateNodeName(info.common_name); !s.ok()) {
    return PermissionDenied(fmt::format("certificate names no valid node: {}", s.message()));
  }
  id.node = info.common_name;
  return id;
}

}  // namespace drover::auth
