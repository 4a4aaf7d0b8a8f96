#pragma once
// Test support: a self-signed certificate for 127.0.0.1 and localhost, for
// the TLS tests of the HTTP server and the gateway. Header-only; the tests
// link OpenSSL already.

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>

namespace drover::http::testing {

// A self-signed certificate for 127.0.0.1 and localhost, valid from an hour
// ago (made here, so that no checked-in certificate expires or starts in
// the future of a machine's clock).
struct SelfSigned {
  std::string cert_pem;
  std::string key_pem;
};

inline SelfSigned MakeSelfSigned() {
  SelfSigned out;
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600);
  X509_set_pubkey(cert, key);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert, name);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  X509_add_ext(cert, san, -1);
  X509_EXTENSION_free(san);
  X509_sign(cert, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  out.cert_pem.assign(data, static_cast<size_t>(n));
  BIO_free(bio);
  bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  n = BIO_get_mem_data(bio, &data);
  out.key_pem.assign(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

// One per test process.
inline const SelfSigned& Cert() {
  static const SelfSigned cert = MakeSelfSigned();
  return cert;
}

}  // namespace drover::http::testing
