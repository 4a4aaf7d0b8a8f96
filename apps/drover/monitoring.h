#pragma once
// `drover up --monitoring`: Debian's Prometheus, Alertmanager and node
// exporter as child processes of `up`, with Drover's alert rules
// (deploy/prometheus/rules, compiled in) wired to the cluster: Prometheus
// scrapes the server's /metrics with the admin token (over TLS, verified
// with the cluster's CA, when the server serves TLS), the gateway's, the
// local agent's and the node exporter's, evaluates the rules and sends
// alerts to Alertmanager, which routes them with the inhibitions of
// deploy/prometheus/alertmanager.yml to --alert-webhook (none: nowhere).
// Everything lives in <data-dir>/monitoring (configuration, data, logs).
// docs/alerts.md says how to run the same on a real cluster.
//
// Thread-safety: for the role's one thread, which must outlive the stack
// (its children die with the thread that started them).

#include <CLI/CLI.hpp>

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::app {

struct MonitoringFlags {
  bool enabled = false;
  std::string prometheus_listen = "127.0.0.1:9090";
  std::string alertmanager_listen = "127.0.0.1:9093";
  std::string node_exporter_listen = "127.0.0.1:9100";
  std::string interval = "15s";  // scrape and rule evaluation
  std::string alert_webhook;     // every alert's receiver; "": none
  std::string group_wait = "30s";
  std::string group_interval = "5m";
};
void AddMonitoringFlags(CLI::App* cmd, MonitoringFlags* f);

// What the stack scrapes.
struct MonitoringTargets {
  std::string server_http;    // host:port of the server's /metrics
  std::string gateway_http;   // "": no gateway
  std::string agent_metrics;  // "": the local agent serves none
  std::string token_file;     // the bearer token Prometheus sends
  std::string ca_file;        // "": the server speaks plain HTTP
};

// The configuration files, as text (pure: a test reads them).
std::string PrometheusConfig(const MonitoringFlags& f, const MonitoringTargets& t, const std::string& rules_dir);
Result<std::string> AlertmanagerConfig(const MonitoringFlags& f);

class MonitoringStack {
 public:
  // Writes the configuration under `dir`, checks it with promtool and
  // amtool, and starts the three programs. Unavailable when one is not
  // installed (scripts/install-deps.sh installs them).
  static Result<std::unique_ptr<MonitoringStack>> Start(const MonitoringFlags& f, const MonitoringTargets& t,
                                                        const std::string& dir);
  ~MonitoringStack();  // Stop()
  void Stop();

 private:
  MonitoringStack() = default;
  std::vector<pid_t> pids_;
};

}  // namespace drover::app
