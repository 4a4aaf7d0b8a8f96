#pragma once
// The server side of TLS, shared by the control plane's HTTP server
// (server.cc) and the OpenAI gateway (drover/gateway): one way to turn a
// certificate and key in PEM into an OpenSSL context, so that both serve
// the same protocol versions and refuse the same bad files.
// Stateless; thread-safe.

#include <openssl/ssl.h>

#include <string>

#include "drover/common/status.h"

namespace drover::http {

// Sets up `ctx` for `cert_pem` (leaf, then intermediates) and `key_pem`:
// TLS 1.2 or newer, no renegotiation, a peer that closes without
// close_notify reads as end of stream, OpenSSL's buffers freed while a
// connection is idle. InvalidArgument, naming what is wrong, for a
// certificate or key that does not parse or a key that is not the
// certificate's.
Status ConfigureServerContext(SSL_CTX* ctx, const std::string& cert_pem, const std::string& key_pem);

}  // namespace drover::http
