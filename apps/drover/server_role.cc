#include "server_role.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <utility>

#include "data_dir.h"
#include "drover/auth/cluster_ca.h"
#include "drover/auth/token.h"
#include "drover/common/address.h"
#include "drover/common/files.h"
#include "drover/common/quantity.h"
#include "drover/rpc/channel.h"
#include "drover/runtime/logging.h"
#include "drover/server/deployments.h"
#include "drover/server/scheduler_options.h"
#include "role_common.h"

namespace drover::app {

void AddServerFlags(CLI::App* cmd, ServerFlags* f) {
  AddGatewayFlags(cmd, &f->gateway, false);
  cmd->add_option("--service-priority", f->service_priority,
                  "priority of deployments' replicas that do not name one (0..1000; docs/deployments.md)")
      ->capture_default_str();
  cmd->add_option("--services-preempt", f->services_preempt,
                  "deployments' replicas may preempt lower-priority preemptible batch jobs")
      ->capture_default_str();
  cmd->add_option("--data-dir", f->data_dir, "where state, logs and job directories live")->capture_default_str();
  cmd->add_option("--grpc-listen", f->grpc_listen, "gRPC listen address (port 0 picks one)")->capture_default_str();
  cmd->add_option("--listen", f->http_listen, "HTTP listen address for /api/v1, /healthz, /readyz")
      ->capture_default_str();
  cmd->add_option("--log-level", f->log_level, "trace, debug, info, warn, error")->capture_default_str();
  AddSchedulerFlags(cmd, &f->sched);
  AddHaFlags(cmd, &f->ha);
  cmd->add_flag("--insecure", f->insecure,
                "allow listening beyond loopback without TLS (tokens cross the network in the clear)");
  cmd->add_option(
      "--tls-cert", f->tls_cert,
      "serve TLS with this certificate (PEM; default: <data-dir>/tls/server.crt when `drover certs init` made one)");
  cmd->add_option("--tls-key", f->tls_key, "the private key of --tls-cert (PEM)");
  cmd->add_option("--tls-ca", f->tls_ca, "the cluster CA certificate: client certificates must chain to it (PEM)");
  cmd->add_option("--tls-ca-key", f->tls_ca_key, "the CA's private key: issue node certificates at join (optional)");
  cmd->add_flag("--metrics-public", f->metrics_public, "serve /metrics without a token");
  cmd->add_option("--heartbeat-interval", f->heartbeat_interval, "how often agents send a heartbeat (docs/failures.md)")
      ->capture_default_str();
  cmd->add_option("--lease-ttl", f->lease_ttl,
                  "a node unheard for this long, directly or through its peers, is lost and its jobs run elsewhere; "
                  "its agent fences them at 2/3 of it (docs/failures.md)")
      ->capture_default_str();
  cmd->add_option("--archive-after", f->archive_after,
                  "a finished job moves from the live state to the archive (<data-dir>/archive.db) this long after "
                  "it ended; `drover jobs` lists both")
      ->capture_default_str();
  cmd->add_option("--archive-retention", f->archive_retention,
                  "archived jobs that ended longer ago than this are deleted (0: kept for good)")
      ->capture_default_str();
  cmd->add_option("--max-image-archive", f->max_image_archive,
                  "the largest image archive `drover images load` may upload; it is spooled under "
                  "<data-dir>/image-archives until the nodes fetched it")
      ->capture_default_str();
  cmd->add_option("--rate-limit-writes", f->rate_limit_writes,
                  "state-changing calls per token, RATE:BURST per second (a tenant: 4x)")
      ->capture_default_str();
  cmd->add_option("--rate-limit-reads", f->rate_limit_reads, "reads per token, RATE:BURST per second (a tenant: 4x)")
      ->capture_default_str();
  cmd->add_option(
      "--http-host-name", f->http_host_names,
      "a DNS name the HTTP listener answers to besides IP addresses, localhost and the hostname (repeatable)");
  // Only for the help text: main() moves it in front of the role.
  cmd->add_option("--config", "YAML file of this role's flags, scheduler: and tenants: (docs/configuration.md)");
}

namespace {

// "RATE:BURST" per token; a tenant's buckets are four times a token's.
Result<auth::RateLimit> ParseRateLimit(const std::string& text, const char* flag) {
  size_t colon = text.find(':');
  char* end = nullptr;
  double rate = std::strtod(text.c_str(), &end);
  double burst = colon == std::string::npos ? rate : std::strtod(text.c_str() + colon + 1, nullptr);
  if (text.empty() || end == text.c_str() || !(rate > 0) || !(burst >= 1) || rate > 1e9 || burst > 1e9) {
    return InvalidArgument(std::string(flag) + " '" + text + "' is not RATE:BURST (requests per second, > 0)");
  }
  return auth::RateLimit{rate, burst};
}

Status ApplySecurityFlags(const ServerFlags& f, server::ServerOptions* so) {
  so->security.metrics_public = f.metrics_public;
  so->security.http_host_names = f.http_host_names;
  DROVER_ASSIGN_OR_RETURN(auth::RateLimit writes, ParseRateLimit(f.rate_limit_writes, "--rate-limit-writes"));
  DROVER_ASSIGN_OR_RETURN(auth::RateLimit reads, ParseRateLimit(f.rate_limit_reads, "--rate-limit-reads"));
  so->security.per_token = writes;
  so->security.per_tenant = {writes.per_second * 4, writes.burst * 4};
  so->security.reads_per_token = reads;
  so->security.reads_per_tenant = {reads.per_second * 4, reads.burst * 4};
  return Status::Ok();
}

}  // namespace

Result<server::ServerOptions> ServerOptionsFrom(const ServerFlags& f, server::ControlLoopOptions control) {
  server::ServerOptions so{f.data_dir, f.grpc_listen, f.http_listen, std::move(control)};
  DROVER_ASSIGN_OR_RETURN(int64_t heartbeat, ParseDurationMs(f.heartbeat_interval));
  DROVER_ASSIGN_OR_RETURN(int64_t ttl, ParseDurationMs(f.lease_ttl));
  so.control.lease.heartbeat_interval = std::chrono::milliseconds(heartbeat);
  so.control.lease.ttl = std::chrono::milliseconds(ttl);
  so.control.lease = so.control.lease.Derive();
  DROVER_RETURN_IF_ERROR(so.control.lease.Validate());
  DROVER_ASSIGN_OR_RETURN(int64_t archive_after, ParseDurationMs(f.archive_after));
  DROVER_ASSIGN_OR_RETURN(int64_t archive_retention, ParseDurationMs(f.archive_retention));
  so.control.archive_after = std::chrono::milliseconds(archive_after);
  so.control.archive_retention = std::chrono::milliseconds(archive_retention);
  so.control.deployments.service_priority = f.service_priority;
  so.control.deployments.services_preempt = f.services_preempt;
  DROVER_RETURN_IF_ERROR(server::ValidateDeploymentOptions(so.control.deployments));
  auto archive = ParseBytes(f.max_image_archive);
  if (!archive.ok() || *archive <= 0) {
    return InvalidArgument(fmt::format("--max-image-archive '{}' is not a size (e.g. 64GiB)", f.max_image_archive));
  }
  so.max_image_archive_bytes = *archive;
  so.insecure = f.insecure;
  so.tls_cert = f.tls_cert;
  so.tls_key = f.tls_key;
  so.tls_ca = f.tls_ca;
  so.tls_ca_key = f.tls_ca_key;
  DROVER_RETURN_IF_ERROR(ApplyHaFlags(f.ha, &so));
  DROVER_RETURN_IF_ERROR(ApplySecurityFlags(f, &so));
  return so;
}

Status ControlPlane::StartServer(const server::ServerOptions& so) {
  DROVER_ASSIGN_OR_RETURN(server, server::StartServer(so));
  authority = server->authority();
  grpc_address = server->grpc_address();
  return Status::Ok();
}

void ControlPlane::Adopt(std::unique_ptr<HaGroup> group) {
  ha_group = std::move(group);
  authority = ha_group->authority();
  grpc_address = ha_group->servers();
}

Result<std::string> ControlPlane::MintInternal(const std::string& name, auth::Role role, const std::string& node) {
  return authority->MintInternal({name, "default", role, node, Duration(0)});
}

std::optional<int> ControlPlane::StartGatewayAndReadCa(const ServerFlags& f) {
  // The OpenAI-compatible gateway (docs/gateway.md), fed over the server's
  // own channel (or, for `up --ha`, over gRPC to the group) with a token of
  // its own.
  const GatewayFlags& gw = f.gateway;
  // A server that serves TLS serves the gateway with the same certificate
  // (the --tls-* files, else those of `drover certs init`).
  GatewayFlags gw_tls = gw;
  if (server && !server->ca_file().empty()) {
    auth::TlsPaths paths = auth::TlsPathsIn(f.data_dir + "/tls");
    gw_tls.tls_cert = f.tls_cert.empty() ? paths.server_cert : f.tls_cert;
    gw_tls.tls_key = f.tls_cert.empty() ? paths.server_key : f.tls_key;
  }
  if (!GatewayOff(gw)) {
    auto options = GatewayOptionsFrom(gw_tls, f.insecure);
    if (!options.ok()) return BadConfig(options.status());
    auto token = MintInternal("gateway", auth::Role::kGateway, "");
    if (!token.ok()) return Fatal(token.status());
    GatewayRoleOptions ro;
    ro.gateway = *options;
    ro.gateway.metrics_public = f.metrics_public;
    if (server) {
      ro.channel = [srv = server.get(), t = *token] { return srv->InProcessChannel(t); };
    } else {
      ro.channel = [addr = grpc_address, t = *token] { return rpc::MakeChannel(addr, t); };
    }
    auto started = GatewayRole::Start(std::move(ro));
    if (!started.ok() && !gw.listen_given) {
      // The default port is taken (another cluster on this machine): the
      // control plane runs without a gateway rather than not at all.
      spdlog::warn("no gateway: {} (choose another address with --gateway-listen)", started.status().message());
    } else if (!started.ok()) {
      return Fatal(started.status());
    } else {
      gateway = std::move(*started);
    }
  }
  if (gateway) {
    const std::string gateway_addr = fmt::format("{}:{}", HostOf(gw.listen), gateway->port());
    if (Status s = AddGatewayToEndpoints(f.data_dir, gateway_addr, !gw_tls.tls_cert.empty()); !s.ok()) return Fatal(s);
    spdlog::info("OpenAI-compatible gateway on {}://{}/v1 (docs/gateway.md)",
                 gw_tls.tls_cert.empty() ? "http" : "https", gateway_addr);
  }
  ca_file = server ? server->ca_file() : "";
  if (!ca_file.empty()) {
    auto pem = ReadTextFile(ca_file);
    if (!pem.ok()) return Fatal(pem.status());
    ca_pem = *pem;
  }
  return std::nullopt;
}

void ControlPlane::Stop() {
  if (server) server->Stop();
  if (ha_group) ha_group->Stop();
}

int RunServer(const ServerFlags& f) {
  if (Status s = runtime::InitLogging(f.log_level); !s.ok()) return Fatal(s);
  // Its owner's only, from the first file on (data_dir.h).
  UsePrivateUmask();
  if (Status s = SecureDataDir(f.data_dir, ServerJobOwned()); !s.ok()) return Fatal(s);
  auto control = server::MakeControlLoopOptions(f.sched);
  if (!control.ok()) return BadConfig(control.status());
  auto so = ServerOptionsFrom(f, std::move(*control));
  if (!so.ok()) return BadConfig(so.status());
  // From here on a signal ends the process's wait, a standby's included.
  SignalWaiter signals;
  so->stop = signals.stopped();
  so->on_leadership_lost = [](const Status& why) { StartOver(why); };
  ControlPlane cp;
  if (Status s = cp.StartServer(*so); s.code() == Code::kCancelled) {
    return 0;  // stopped while standing by
  } else if (!s.ok()) {
    return Fatal(s);
  }
  if (std::optional<int> rc = cp.StartGatewayAndReadCa(f)) return *rc;
  signals.Wait();
  if (cp.gateway) cp.gateway->Stop();
  cp.Stop();
  return 0;
}

CLI::App* AddServerCommand(CLI::App& app, ServerFlags* f, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("server", "control plane: state, scheduler, APIs");
  AddServerFlags(cmd, f);
  cmd->callback([cmd, f, exit_code] {
    f->gateway.listen_given = cmd->count("--gateway-listen") > 0;
    *exit_code = RunServer(*f);
  });
  return cmd;
}

}  // namespace drover::app
