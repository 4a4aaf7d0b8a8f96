// The shipped alert rules end to end: `drover up --monitoring` over TLS
// (`drover certs init`) starts Debian's Prometheus, Alertmanager and node
// exporter; Prometheus scrapes the server and gateway with the admin token,
// verified with the cluster's CA. A job holds the GPUs of simulated node
// sim-1; `drover fault sim-1 0 xid:79` reaches the webhook receiver this
// test runs as DroverGpuFellOffBus with the node, the GPU and the job on it
// in its labels; the GPU back in service resolves it. Intervals are a
// quarter of a second, so that it takes seconds; every wait is on an event
// (a notification arriving, a query answering), none a sleep.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "drover/http/client.h"
#include "drover/http/server.h"
#include "support/drover_process.h"
#include "support/prometheus_query.h"

namespace drover::testing {
namespace {

// Alertmanager's webhook notifications, as they arrive. Thread-safe.
class WebhookReceiver {
 public:
  bool Start() {
    auto s = http::StartServer("127.0.0.1:0", [this](const http::Request& r) {
      auto body = nlohmann::json::parse(r.body, nullptr, false);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!body.is_discarded()) notifications_.push_back(std::move(body));
      }
      arrived_.notify_all();
      return http::Response(200, "text/plain", "ok");
    });
    if (!s.ok()) return false;
    server_ = std::move(*s);
    return true;
  }
  ~WebhookReceiver() {
    if (server_) server_->Stop();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()) + "/hook"; }

  // The first alert of a notification with `status` that `match` accepts,
  // waiting up to `timeout` for one to arrive; null when none did.
  nlohmann::json WaitFor(const std::string& status, const std::function<bool(const nlohmann::json&)>& match,
                         std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    nlohmann::json found;
    arrived_.wait_for(lock, timeout, [&] {
      for (const auto& n : notifications_) {
        for (const auto& a : n.value("alerts", nlohmann::json::array())) {
          if (a.value("status", "") == status && match(a)) {
            found = a;
            return true;
          }
        }
      }
      return false;
    });
    return found;
  }
  std::string Dump() {
    std::lock_guard<std::mutex> lock(mu_);
    nlohmann::json all = notifications_;
    return all.dump(1);
  }

 private:
  std::mutex mu_;
  std::condition_variable arrived_;
  std::vector<nlohmann::json> notifications_;
  std::unique_ptr<http::Server> server_;
};

TEST(AlertingTest, XidReachesTheWebhookWithNodeGpuAndJobAndResolves) {
  for (const char* tool : {"prometheus", "prometheus-alertmanager", "prometheus-node-exporter", "amtool"}) {
    ASSERT_EQ(std::system((std::string("command -v ") + tool + " >/dev/null").c_str()), 0)
        << tool << " is not installed (scripts/install-deps.sh installs it)";
  }
  WebhookReceiver hook;
  ASSERT_TRUE(hook.Start());
  TempDir dir;
  const std::string data = dir.path() + "/data";
  CommandResult init = RunCli("", {"certs", "init", "--data-dir", data});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  const std::string ca_env = "DROVER_CA_FILE=" + data + "/tls/ca.crt";
  const std::string prometheus = "127.0.0.1:" + std::to_string(FreePort());
  const std::string alertmanager = "127.0.0.1:" + std::to_string(FreePort());
  // A simulated GPU comes back by itself after its clean checks (a real one
  // after XID 79 does not): 30 checks of 100 ms keep it out for 3 s, long
  // enough for a scrape and an evaluation every 250 ms to see it.
  DroverUp up(data, {"--devices",
                     "none",
                     "--simulate",
                     "1",
                     "--simulate-gpus",
                     "2",
                     "--telemetry-period",
                     "100ms",
                     "--health-interval",
                     "100ms",
                     "--health-clean-checks",
                     "30",
                     "--gateway-listen",
                     "127.0.0.1:0",
                     "--monitoring",
                     "--prometheus-listen",
                     prometheus,
                     "--alertmanager-listen",
                     alertmanager,
                     "--node-exporter-listen",
                     "127.0.0.1:" + std::to_string(FreePort()),
                     "--monitoring-interval",
                     "250ms",
                     "--alert-webhook",
                     hook.url(),
                     "--alert-group-wait",
                     "100ms",
                     "--alert-group-interval",
                     "500ms"});
  ASSERT_TRUE(up.Start());
  ASSERT_TRUE(up.WaitForReadyNodes(2));

  // Both GPUs of sim-1 to one job, which ignores SIGTERM: it holds GPU 0
  // through its 10 s grace after the XID fails it.
  CommandResult submit =
      RunCli(up.grpc_address(), {"submit", "--gpus", "2", "--grace", "10", "--", "sh", "-c", "trap '' TERM; sleep 600"},
             {ca_env});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  std::string job;
  for (const v1::Job& j : ListJobs(up.jobs())) job = j.id();
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up.jobs(), job).status().state() == v1::JOB_STATE_RUNNING; }));

  // Prometheus scrapes the server and the gateway (the token, the CA) and
  // the node exporter, and has GPU 0 with its job.
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto up_series = PrometheusQuery(prometheus, "up == 1");
        std::set<std::string> jobs;
        for (const auto& s : up_series) jobs.insert(s["metric"].value("job", ""));
        return jobs.count("drover-server") && jobs.count("drover-gateway") && jobs.count("node");
      },
      std::chrono::seconds(60)))
      << PrometheusQuery(prometheus, "up").dump();
  ASSERT_TRUE(WaitUntil(
      [&] {
        return PrometheusQuery(prometheus,
                               "DCGM_FI_DEV_XID_ERRORS{Hostname=\"sim-1\",gpu=\"0\",job_id=\"" + job + "\"}")
                   .size() == 1;
      },
      std::chrono::seconds(30)));

  CommandResult fault = RunCli(up.grpc_address(), {"fault", "sim-1", "0", "xid:79"}, {ca_env});
  ASSERT_EQ(fault.exit_code, 0) << fault.err;
  auto fell_off = [&](const nlohmann::json& a) {
    return a["labels"].value("alertname", "") == "DroverGpuFellOffBus" && a["labels"].value("node", "") == "sim-1" &&
           a["labels"].value("gpu", "") == "0";
  };
  nlohmann::json firing = hook.WaitFor("firing", fell_off, std::chrono::seconds(60));
  ASSERT_FALSE(firing.is_null()) << "no DroverGpuFellOffBus notification; got: " << hook.Dump();
  EXPECT_EQ(firing["labels"].value("job_id", ""), job) << firing.dump(1);
  EXPECT_FALSE(firing["labels"].value("tenant", "").empty()) << firing.dump(1);
  EXPECT_EQ(firing["labels"].value("severity", ""), "page");
  EXPECT_FALSE(firing["labels"].value("uuid", "").empty());
  EXPECT_NE(firing["annotations"].value("summary", "").find("job " + job), std::string::npos) << firing.dump(1);

  // Cleared (a real GPU: reset or replaced), it passes its clean checks
  // and the alert resolves.
  CommandResult clear = RunCli(up.grpc_address(), {"fault", "sim-1", "0", "clear"}, {ca_env});
  ASSERT_EQ(clear.exit_code, 0) << clear.err;
  nlohmann::json resolved = hook.WaitFor("resolved", fell_off, std::chrono::seconds(60));
  ASSERT_FALSE(resolved.is_null()) << "DroverGpuFellOffBus never resolved; got: " << hook.Dump();
  EXPECT_EQ(resolved["labels"].value("job_id", ""), job);

  // A drained node's GPU does not page again: with DroverNodeDrained active
  // in Alertmanager, GPU 1's XID 79 is suppressed, inhibited by it.
  ASSERT_EQ(RunCli(up.grpc_address(), {"drain", "sim-1"}, {ca_env}).exit_code, 0);
  auto am_alerts = [&](const std::string& alertname) {
    auto r = http::HttpRequest(alertmanager, "GET", "/api/v2/alerts?filter=alertname%3D%22" + alertname + "%22");
    auto j = r.ok() && r->status == 200 ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
    return j.is_array() ? j : nlohmann::json::array();
  };
  ASSERT_TRUE(WaitUntil([&] { return am_alerts("DroverNodeDrained").size() == 1; }, std::chrono::seconds(30)));
  ASSERT_EQ(RunCli(up.grpc_address(), {"fault", "sim-1", "1", "xid:79"}, {ca_env}).exit_code, 0);
  // (Alertmanager says "unprocessed" until its pipeline has seen it.)
  nlohmann::json seen, suppressed;
  EXPECT_TRUE(WaitUntil(
      [&] {
        for (const auto& a : am_alerts("DroverGpuFellOffBus")) {
          if (a["labels"].value("gpu", "") != "1") continue;
          seen = a;
          if (a["status"].value("state", "") == "suppressed") suppressed = a;
        }
        return !suppressed.is_null();
      },
      std::chrono::seconds(30)))
      << "last seen: " << seen.dump(1);
  EXPECT_EQ(suppressed["status"]["inhibitedBy"].size(), 1u) << suppressed.dump(1);
  EXPECT_TRUE(hook.WaitFor(
                      "firing", [](const nlohmann::json& a) { return a["labels"].value("gpu", "") == "1"; },
                      std::chrono::seconds(0))
                  .is_null())
      << hook.Dump();
  CancelAllJobs(up.jobs());
}

}  // namespace
}  // namespace drover::testing
