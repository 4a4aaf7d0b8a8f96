// A standalone gateway for the openai-client tests (tests/gateway/*.test.mjs):
// static keys, static routes to drover-test-engine processes it starts.
//
//   gateway_harness --engine PATH [--tls-cert PEM-FILE --tls-key PEM-FILE]
//
// With --tls-cert and --tls-key it serves HTTPS (and wss) with them.
// Prints "listening on PORT" once serving; runs until stdin closes (the
// test's end) or SIGTERM. Keys (Authorization: Bearer ...):
//   sk-a        tenant a, unlimited
//   sk-rpm      tenant r, 2 requests a minute
//   sk-tpm      tenant t, 60 tokens a minute
// Models: "test-model" (two replicas), "slow-model" (5 ms a token),
// "private-b" (tenant b only).

#include <unistd.h>

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "drover/gateway/gateway.h"
#include "gateway/engine_process.h"

using drover::Result;
using drover::gateway::KeyInfo;

int main(int argc, char** argv) {
  std::string engine, tls_cert, tls_key;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string a = argv[i];
    if (a == "--engine") engine = argv[++i];
    if (a == "--tls-cert") tls_cert = argv[++i];
    if (a == "--tls-key") tls_key = argv[++i];
  }
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  if (engine.empty()) {
    std::cerr << "usage: gateway_harness --engine PATH\n";
    return 2;
  }
  using drover::gateway::testing::ChildProcess;
  ChildProcess e1({engine, "--port", "0", "--model", "test-model"});
  ChildProcess e2({engine, "--port", "0", "--model", "test-model"});
  ChildProcess slow({engine, "--port", "0", "--model", "slow-model", "--token-delay-us", "5000"});
  ChildProcess priv({engine, "--port", "0", "--model", "private-b"});
  if (e1.port() == 0 || e2.port() == 0 || slow.port() == 0 || priv.port() == 0) {
    std::cerr << "gateway_harness: an engine did not start\n";
    return 1;
  }
  static const std::map<std::string, KeyInfo, std::less<>> keys = {
      {"sk-a", {"key-a", "key a", "a", false, 0, 0, 0, 0}},
      {"sk-rpm", {"key-rpm", "limited key", "r", false, 2, 0, 0, 0}},
      {"sk-tpm", {"key-tpm", "token key", "t", false, 0, 0, 0, 60}},
  };
  drover::gateway::GatewayOptions o;
  o.listen = "127.0.0.1:0";
  o.io_threads = 2;
  if (!tls_cert.empty()) o.tls_cert_pem = slurp(tls_cert);
  if (!tls_key.empty()) o.tls_key_pem = slurp(tls_key);
  auto gw = drover::gateway::StartGateway(
      o,
      [](std::string_view token) -> Result<KeyInfo> {
        auto it = keys.find(token);
        if (it == keys.end()) return drover::Unauthenticated("unknown key");
        return it->second;
      },
      nullptr);
  if (!gw.ok()) {
    std::cerr << "gateway_harness: " << gw.status().ToString() << "\n";
    return 1;
  }
  (*gw)->SetRoutes({{"test-model", "test", "", false, {{"j-1", e1.address()}, {"j-2", e2.address()}}},
                    {"slow-model", "slow", "", false, {{"j-3", slow.address()}}},
                    {"private-b", "priv", "b", false, {{"j-4", priv.address()}}}});
  std::cout << "listening on " << (*gw)->port() << std::endl;
  char c;
  while (::read(0, &c, 1) > 0) {
  }
  std::cout << (*gw)->UsageJson() << std::endl;
  (*gw)->Stop();
  return 0;
}
