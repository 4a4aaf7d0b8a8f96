#include "monitoring.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "children.h"
#include "drover/common/files.h"

namespace drover::app {

// deploy/prometheus/alertmanager.yml and deploy/prometheus/rules/*.yml,
// compiled in by CMakeLists.txt (monitoring_files.cc in the build folder).
struct EmbeddedFile {
  const char* name;  // "alertmanager.yml", "rules/gpu.rules.yml"
  const char* text;
};
extern const EmbeddedFile kMonitoringFiles[];
extern const size_t kMonitoringFileCount;

namespace {

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kPromtool = "/usr/bin/promtool";
constexpr const char* kAlertmanager = "/usr/bin/prometheus-alertmanager";
constexpr const char* kAmtool = "/usr/bin/amtool";
constexpr const char* kNodeExporter = "/usr/bin/prometheus-node-exporter";

// A YAML double-quoted scalar (paths and addresses come from flags).
std::string Quoted(const std::string& s) {
  YAML::Emitter e;
  e << YAML::DoubleQuoted << s;
  return e.c_str();
}

// Runs `argv` to its end with output to `log`; its exit status (-1: it
// could not run).
int RunToEnd(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = SpawnChild(argv, log);
  if (pid < 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

void AddMonitoringFlags(CLI::App* cmd, MonitoringFlags* f) {
  cmd->add_flag("--monitoring", f->enabled,
                "start Prometheus, Alertmanager and the node exporter (Debian's) with Drover's alert rules, scraping "
                "this cluster (docs/alerts.md)");
  cmd->add_option("--prometheus-listen", f->prometheus_listen, "--monitoring: Prometheus's address")
      ->capture_default_str();
  cmd->add_option("--alertmanager-listen", f->alertmanager_listen, "--monitoring: Alertmanager's address")
      ->capture_default_str();
  cmd->add_option("--node-exporter-listen", f->node_exporter_listen, "--monitoring: the node exporter's address")
      ->capture_default_str();
  cmd->add_option("--monitoring-interval", f->interval,
                  "--monitoring: how often Prometheus scrapes and evaluates the rules (a Prometheus duration)")
      ->capture_default_str();
  cmd->add_option("--alert-webhook", f->alert_webhook,
                  "--monitoring: where Alertmanager sends every alert (its webhook JSON), e.g. http://host:port/path")
      ->capture_default_str();
  cmd->add_option("--alert-group-wait", f->group_wait, "--monitoring: Alertmanager's group_wait")
      ->capture_default_str();
  cmd->add_option("--alert-group-interval", f->group_interval, "--monitoring: Alertmanager's group_interval")
      ->capture_default_str();
}

std::string PrometheusConfig(const MonitoringFlags& f, const MonitoringTargets& t, const std::string& rules_dir) {
  const bool tls = !t.ca_file.empty();
  // The server and the gateway: the same token and, with TLS, the same CA.
  auto drover_job = [&](const std::string& name, const std::string& target) {
    std::string job = fmt::format("  - job_name: {}\n    scheme: {}\n", name, tls ? "https" : "http");
    job += fmt::format("    authorization:\n      type: Bearer\n      credentials_file: {}\n", Quoted(t.token_file));
    if (tls) job += fmt::format("    tls_config:\n      ca_file: {}\n", Quoted(t.ca_file));
    job += fmt::format("    static_configs:\n      - targets: [{}]\n", Quoted(target));
    return job;
  };
  std::string out = fmt::format(
      "# Written by `drover up --monitoring`; rewritten at every start.\n"
      "global:\n  scrape_interval: {0}\n  evaluation_interval: {0}\n  scrape_timeout: {0}\n"
      "rule_files:\n  - {1}\n"
      "alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [{2}]\n"
      "scrape_configs:\n",
      f.interval, Quoted(rules_dir + "/*.yml"), Quoted(f.alertmanager_listen));
  out += drover_job("drover-server", t.server_http);
  if (!t.gateway_http.empty()) out += drover_job("drover-gateway", t.gateway_http);
  if (!t.agent_metrics.empty()) {
    // The server exports every node's GPUs, with the job holding each: the
    // agent's own copy of its GPUs would double every GPU alert.
    out += fmt::format(
        "  - job_name: drover-agent\n    static_configs:\n      - targets: [{}]\n"
        "    metric_relabel_configs:\n      - source_labels: [__name__]\n"
        "        regex: 'DCGM_FI_.*|drover_gpu_.*'\n        action: drop\n",
        Quoted(t.agent_metrics));
  }
  out +=
      fmt::format("  - job_name: node\n    static_configs:\n      - targets: [{}]\n", Quoted(f.node_exporter_listen));
  return out;
}

Result<std::string> AlertmanagerConfig(const MonitoringFlags& f) {
  const EmbeddedFile* shipped = nullptr;
  for (size_t i = 0; i < kMonitoringFileCount; ++i) {
    if (std::string_view(kMonitoringFiles[i].name) == "alertmanager.yml") shipped = &kMonitoringFiles[i];
  }
  if (shipped == nullptr) return Internal("alertmanager.yml is not compiled in");
  try {
    // The shipped routes and inhibitions, with this cluster's receiver.
    YAML::Node config = YAML::Load(shipped->text);
    config["route"]["group_wait"] = f.group_wait;
    config["route"]["group_interval"] = f.group_interval;
    for (YAML::Node receiver : config["receivers"]) {
      if (f.alert_webhook.empty() || receiver["name"].as<std::string>() == "null") continue;
      YAML::Node hook;
      hook["url"] = f.alert_webhook;
      hook["send_resolved"] = true;
      receiver["webhook_configs"].push_back(hook);
    }
    YAML::Emitter out;
    out << config;
    return std::string("# Written by `drover up --monitoring` from deploy/prometheus/alertmanager.yml.\n") +
           out.c_str() + "\n";
  } catch (const YAML::Exception& e) {
    return Internal(fmt::format("the compiled-in alertmanager.yml does not parse: {}", e.what()));
  }
}

Result<std::unique_ptr<MonitoringStack>> MonitoringStack::Start(const MonitoringFlags& f, const MonitoringTargets& t,
                                                                const std::string& dir) {
  for (const char* program : {kPrometheus, kPromtool, kAlertmanager, kAmtool, kNodeExporter}) {
    if (::access(program, X_OK) != 0) {
      return Unavailable(fmt::format(
          "--monitoring needs {} (Debian's prometheus, prometheus-alertmanager and prometheus-node-exporter; "
          "scripts/install-deps.sh installs them)",
          program));
    }
  }
  std::error_code ec;
  for (const char* sub : {"/rules", "/prometheus-data", "/alertmanager-data"}) {
    std::filesystem::create_directories(dir + sub, ec);
    if (ec) return Unavailable(fmt::format("cannot create '{}{}': {}", dir, sub, ec.message()));
  }
  // The rules as compiled in; a file of an older run that is gone now goes.
  for (const auto& old : std::filesystem::directory_iterator(dir + "/rules", ec)) {
    std::filesystem::remove(old.path(), ec);
  }
  for (size_t i = 0; i < kMonitoringFileCount; ++i) {
    const std::string name = kMonitoringFiles[i].name;
    if (name.rfind("rules/", 0) != 0) continue;
    DROVER_RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + name, kMonitoringFiles[i].text, 0600));
  }
  const std::string prometheus_yml = dir + "/prometheus.yml", alertmanager_yml = dir + "/alertmanager.yml";
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(prometheus_yml, PrometheusConfig(f, t, dir + "/rules"), 0600));
  DROVER_ASSIGN_OR_RETURN(std::string am, AlertmanagerConfig(f));
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(alertmanager_yml, am, 0600));
  // A bad flag (an interval Prometheus does not read) is said here, with
  // the checker's words in its log, not by a child that dies.
  const std::string check_log = dir + "/check.log";
  if (RunToEnd({kPromtool, "check", "config", prometheus_yml}, check_log) != 0) {
    return InvalidArgument(fmt::format("promtool refuses {} (see {})", prometheus_yml, check_log));
  }
  if (RunToEnd({kAmtool, "check-config", alertmanager_yml}, check_log) != 0) {
    return InvalidArgument(fmt::format("amtool refuses {} (see {})", alertmanager_yml, check_log));
  }
  std::unique_ptr<MonitoringStack> stack(new MonitoringStack());
  const std::vector<std::vector<std::string>> programs = {
      {kPrometheus, "--config.file=" + prometheus_yml, "--storage.tsdb.path=" + dir + "/prometheus-data",
       "--web.listen-address=" + f.prometheus_listen, "--storage.tsdb.retention.time=15d"},
      {kAlertmanager, "--config.file=" + alertmanager_yml, "--storage.path=" + dir + "/alertmanager-data",
       "--web.listen-address=" + f.alertmanager_listen, "--cluster.listen-address="},
      {kNodeExporter, "--web.listen-address=" + f.node_exporter_listen},
  };
  for (const auto& argv : programs) {
    const std::string log = dir + "/" + std::filesystem::path(argv[0]).filename().string() + ".log";
    const pid_t pid = SpawnChild(argv, log);
    if (pid < 0) return Unavailable(fmt::format("cannot start {}", argv[0]));
    stack->pids_.push_back(pid);
  }
  spdlog::info("monitoring: Prometheus on http://{}, Alertmanager on http://{}, node exporter on {} (logs in {})",
               f.prometheus_listen, f.alertmanager_listen, f.node_exporter_listen, dir);
  return stack;
}

MonitoringStack::~MonitoringStack() { Stop(); }

void MonitoringStack::Stop() {
  std::vector<pid_t*> pids;
  for (pid_t& p : pids_) pids.push_back(&p);
  StopChildren(std::move(pids), std::chrono::seconds(5));
}

}  // namespace drover::app
