#include "certs_verb.h"

#include <chrono>
#include <ctime>
#include <iostream>

#include "data_dir.h"
#include "drover/auth/cluster_ca.h"
#include "drover/cli/commands.h"
#include "drover/common/status.h"

namespace drover::app {

namespace {

std::string Date(int64_t unix_seconds) {
  char buf[32] = {};
  time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

int RunCertsInit(const CertsFlags& f) {
  const std::string& data_dir = f.data_dir;
  // The CA's key and its certificates go in the server's data directory:
  // its owner's only, as the server keeps it (data_dir.h).
  UsePrivateUmask();
  int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto r = auth::InitClusterTls(data_dir + "/tls", f.sans, now);
  if (!r.ok()) {
    std::cerr << "error: " << r.status().message() << "\n";
    return r.status().code() == Code::kInvalidArgument || r.status().code() == Code::kFailedPrecondition
               ? cli::kExitUsage
               : cli::kExitFailure;
  }
  std::vector<std::string> names = r->server.dns_names;
  names.insert(names.end(), r->server.ip_addresses.begin(), r->server.ip_addresses.end());
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ", ") + n;
  std::cout << (r->created_ca ? "created" : "kept") << " the cluster CA   " << r->paths.ca_cert << " ("
            << r->ca.fingerprint << ", until " << Date(r->ca.not_after_unix) << ")\n"
            << "                          " << r->paths.ca_key << " (private: keep it on the server)\n"
            << (r->issued_server ? "issued" : "kept") << " the server certificate " << r->paths.server_cert
            << " (until " << Date(r->server.not_after_unix) << ") for " << joined << "\n\n"
            << "A server started with --data-dir " << data_dir << " now serves TLS on gRPC and HTTP and issues node\n"
            << "certificates at join. Copy " << r->paths.ca_cert << " to each machine, then:\n"
            << "  drover join-token --node gpu-07\n"
            << "  drover agent --server <host>:7070 --ca-file ca.crt --node-name gpu-07 --join-token <token>\n"
            << "The CLI finds the CA in <data-dir>/tls/ca.crt, or takes --ca-file / DROVER_CA_FILE.\n";
  return 0;
}

CLI::App* AddCertsCommand(CLI::App& app, CertsFlags* f, int* exit_code) {
  CLI::App* certs = app.add_subcommand("certs", "the cluster CA and the server's certificate (TLS)");
  certs->require_subcommand(1);
  CLI::App* certs_init = certs->add_subcommand(
      "init", "make the cluster CA (once) and a server certificate in <data-dir>/tls; idempotent");
  certs_init->add_option("--data-dir", f->data_dir, "the server's data directory")->capture_default_str();
  certs_init->add_option("--san", f->sans,
                         "a DNS name or IP address agents and clients dial the server by (repeatable; 127.0.0.1, ::1, "
                         "localhost and the host name are always in)");
  certs_init->callback([f, exit_code] { *exit_code = RunCertsInit(*f); });
  return certs;
}

}  // namespace drover::app
