#include "drover/http/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <memory>

namespace drover::http {
namespace {

std::string SslErrorText() {
  unsigned long code = ERR_peek_last_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  std::string out = reason != nullptr ? reason : "unknown error";
  ERR_clear_error();
  return out;
}

}  // namespace

Status ConfigureServerContext(SSL_CTX* ctx, const std::string& cert_pem, const std::string& key_pem) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  std::unique_ptr<BIO, decltype(&BIO_free)> certs(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())),
                                                  &BIO_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> key(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())),
                                                &BIO_free);
  if (!certs || !key) return Internal("tls: out of memory");
  X509* leaf = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf) != 1) {
    X509_free(leaf);
    return InvalidArgument("tls: the certificate is not usable: " + SslErrorText());
  }
  X509_free(leaf);
  while (X509* extra = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) {
      X509_free(extra);
      return InvalidArgument("tls: an intermediate certificate is not usable: " + SslErrorText());
    }
  }
  ERR_clear_error();  // the loop ends on "no start line"
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(key.get(), nullptr, nullptr, nullptr);
  if (pkey == nullptr || SSL_CTX_use_PrivateKey(ctx, pkey) != 1) {
    EVP_PKEY_free(pkey);
    return InvalidArgument("tls: the private key is not usable: " + SslErrorText());
  }
  EVP_PKEY_free(pkey);
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return InvalidArgument("tls: the private key does not belong to the certificate: " + SslErrorText());
  }
  return Status::Ok();
}

}  // namespace drover::http
