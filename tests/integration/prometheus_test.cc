// /metrics under a real Prometheus: `drover up` with a simulated node and
// this machine's agent serving its own /metrics, Debian's `prometheus`
// scraping both, and DCGM-named series queried back through Prometheus's
// HTTP API. `promtool check metrics` reads both endpoints.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "drover/http/client.h"
#include "support/drover_process.h"
#include "support/prometheus_query.h"

namespace drover::testing {
namespace {

std::string Get(const std::string& host_port, const std::string& target, const std::string& token = "") {
  std::map<std::string, std::string> headers;
  if (!token.empty()) headers["Authorization"] = "Bearer " + token;
  auto r = http::HttpRequest(host_port, "GET", target, "", "application/json", headers);
  if (!r.ok() || r->status != 200) return "";
  return r->body;
}

// Runs promtool on `text`; returns its exit status and output.
std::pair<int, std::string> Promtool(const std::string& text, const std::string& dir) {
  std::string in = dir + "/exposition.txt";
  std::ofstream(in) << text;
  std::string cmd = "promtool check metrics < " + in + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  int status = p != nullptr ? ::pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// promtool's lint wants snake_case label names and a lower-case "_total"
// counter suffix; dcgm-exporter's names (modelName, Hostname, UUID,
// DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) break both, and dashboards depend on them.
// Those two findings, on families carrying dcgm-exporter's labels, are the
// only ones allowed; a malformed exposition exits 1 instead of 3.
void ExpectOnlyDcgmNamingLints(const std::pair<int, std::string>& result) {
  ASSERT_TRUE(result.first == 0 || result.first == 3) << "promtool exit " << result.first << ":\n" << result.second;
  std::istringstream lines(result.second);
  std::regex allowed(
      R"(^(DCGM_FI_DEV_[A-Z_]+|drover_gpu_healthy|drover_gpu_job_memory_used_bytes|drover_gpu_xid_errors_total) (label names should be written in 'snake_case' not 'camelCase'|counter metrics should have "_total" suffix)$)");
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(std::regex_match(line, allowed)) << "unexpected promtool finding: " << line;
  }
}

TEST(PrometheusTest, ScrapesServerAndAgentAndQueriesDcgmSeries) {
  if (std::system("command -v prometheus >/dev/null && command -v promtool >/dev/null") != 0) {
    GTEST_SKIP() << "prometheus and promtool are not installed (scripts/install-deps.sh installs them)";
  }
  TempDir dir;
  std::string agent_metrics = "127.0.0.1:" + std::to_string(FreePort());
  DroverUp up(dir.path() + "/data",
              {"--devices", "simulated", "--simulate-gpus", "2", "--simulate", "1", "--agent-metrics-listen",
               agent_metrics, "--node-name", "local-1", "--telemetry-period", "100ms"});
  ASSERT_TRUE(up.Start());
  ASSERT_TRUE(up.WaitForReadyNodes(2));
  // Telemetry reaches the server with the first heartbeats.
  // The server's /metrics needs a token (unless --metrics-public).
  EXPECT_EQ(Get(up.http_address(), "/metrics"), "");
  ASSERT_TRUE(WaitUntil([&] {
    return Get(up.http_address(), "/metrics", up.token()).find("DCGM_FI_DEV_GPU_TEMP{") != std::string::npos;
  }));

  std::string server_text = Get(up.http_address(), "/metrics", up.token());
  std::string agent_text = Get(agent_metrics, "/metrics");
  ASSERT_NE(agent_text.find("DCGM_FI_DEV_GPU_TEMP{"), std::string::npos) << agent_text;
  for (const char* family : {"drover_scheduler_decision_duration_seconds_bucket", "drover_scheduler_queue_depth",
                             "drover_jobs{", "drover_grpc_requests_total{", "DCGM_FI_DEV_POWER_USAGE{",
                             "DCGM_FI_DEV_FB_USED{", "DCGM_FI_DEV_FB_FREE{", "DCGM_FI_DEV_XID_ERRORS{"}) {
    EXPECT_NE(server_text.find(family), std::string::npos) << family;
  }
  // The agent's ring buffer of recent samples, oldest first.
  // (Sampled once a second: the server may show a reading before three exist.)
  nlohmann::json samples;
  ASSERT_TRUE(WaitUntil([&] {
    samples = nlohmann::json::parse(Get(agent_metrics, "/api/v1/gpus/1/samples?max=3"), nullptr, false);
    return samples.is_array() && samples.size() == 3u;
  })) << samples.dump();
  EXPECT_LT(samples[0]["time_ns"].get<int64_t>(), samples[2]["time_ns"].get<int64_t>());
  EXPECT_TRUE(samples[2]["temperature_c"].is_number());
  auto missing = http::HttpRequest(agent_metrics, "GET", "/api/v1/gpus/9/samples");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  auto bad_max = http::HttpRequest(agent_metrics, "GET", "/api/v1/gpus/0/samples?max=x");
  ASSERT_TRUE(bad_max.ok());
  EXPECT_EQ(bad_max->status, 400);

  ExpectOnlyDcgmNamingLints(Promtool(server_text, dir.path()));
  ExpectOnlyDcgmNamingLints(Promtool(agent_text, dir.path()));
  // Drover's own families pass promtool with no finding at all.
  std::string own;
  std::istringstream all(server_text);
  for (std::string line; std::getline(all, line);) {
    if (line.find("DCGM_FI_") == std::string::npos && line.find("drover_gpu_") == std::string::npos) own += line + "\n";
  }
  auto own_result = Promtool(own, dir.path());
  EXPECT_EQ(own_result.first, 0) << own_result.second;

  // A real Prometheus scraping both endpoints every second.
  int prom_port = FreePort();
  std::string config = dir.path() + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n"
                           "scrape_configs:\n"
                           "  - job_name: drover-server\n"
                           "    authorization:\n      type: Bearer\n      credentials_file: "
                        << up.data_dir()
                        << "/admin.token\n"
                           "    static_configs:\n      - targets: ['"
                        << up.http_address()
                        << "']\n"
                           "  - job_name: drover-agent\n    static_configs:\n      - targets: ['"
                        << agent_metrics << "']\n";
  std::string prom_addr = "127.0.0.1:" + std::to_string(prom_port);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string log = dir.path() + "/prometheus.log";
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    std::string c = "--config.file=" + config, s = "--storage.tsdb.path=" + dir.path() + "/tsdb",
                l = "--web.listen-address=" + prom_addr;
    ::execlp("prometheus", "prometheus", c.c_str(), s.c_str(), l.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  auto query = [&](const std::string& q) { return PrometheusQuery(prom_addr, q); };
  // The simulated node's GPU temperature, through the server's endpoint.
  bool server_seen =
      WaitUntil([&] { return query("DCGM_FI_DEV_GPU_TEMP{job=\"drover-server\",Hostname=\"sim-1\"}").size() == 2; },
                std::chrono::seconds(60));
  // This machine's simulated GPUs, through its agent's own endpoint.
  bool agent_seen =
      WaitUntil([&] { return query("DCGM_FI_DEV_POWER_USAGE{job=\"drover-agent\",Hostname=\"local-1\"}").size() == 2; },
                std::chrono::seconds(60));
  nlohmann::json temps = query("DCGM_FI_DEV_GPU_TEMP{job=\"drover-server\",Hostname=\"sim-1\"}");
  nlohmann::json depth = query("drover_scheduler_queue_depth");
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(server_seen) << "Prometheus never had DCGM_FI_DEV_GPU_TEMP from the server";
  ASSERT_TRUE(agent_seen) << "Prometheus never had DCGM_FI_DEV_POWER_USAGE from the agent";
  for (const auto& series : temps) {
    EXPECT_EQ(series["metric"]["modelName"], "H100 80GB");
    EXPECT_TRUE(series["metric"].contains("UUID"));
    EXPECT_TRUE(series["metric"].contains("gpu"));
    double celsius = std::stod(series["value"][1].get<std::string>());
    EXPECT_GT(celsius, 20);
    EXPECT_LT(celsius, 100);
  }
  ASSERT_EQ(depth.size(), 1u);
  EXPECT_EQ(depth[0]["value"][1], "0");
}

}  // namespace
}  // namespace drover::testing
