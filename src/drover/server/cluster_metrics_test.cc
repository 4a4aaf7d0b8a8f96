// The families the alert rules read (deploy/prometheus/rules), from views.

#include "drover/server/cluster_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace drover::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSecond = 1'000'000'000;

void ExpectLines(const std::string& text, std::initializer_list<const char*> lines) {
  for (const char* line : lines) EXPECT_THAT(text, HasSubstr(line));
}

TEST(ClusterMetricsTest, EveryNodeHasEveryStateOneHotAndItsDrain) {
  std::vector<v1::Node> nodes(2);
  nodes[0].set_name("gpu-01");
  nodes[0].set_state(v1::NODE_STATE_READY);
  v1::Gpu* g = nodes[0].add_gpus();
  g->set_index(0);
  g->set_uuid("GPU-a");
  g->set_job_id("j-000001");
  g->set_tenant("t");
  g->mutable_telemetry()->set_time_unix_nanos(1);
  g->mutable_telemetry()->set_last_xid(79);
  g->mutable_telemetry()->set_xid_errors(2);
  nodes[1].set_name("gpu-02");
  nodes[1].set_state(v1::NODE_STATE_LOST);
  nodes[1].set_drained(true);
  nodes[1].add_gpus()->set_uuid("GPU-b");
  metrics::Exposition out;
  WriteNodeMetrics(nodes, out);
  const std::string text = out.Text();
  ExpectLines(text, {"drover_node_state{node=\"gpu-01\",state=\"Ready\"} 1\n",
                     "drover_node_state{node=\"gpu-01\",state=\"Lost\"} 0\n",
                     "drover_node_state{node=\"gpu-02\",state=\"Lost\"} 1\n",
                     "drover_node_state{node=\"gpu-02\",state=\"Suspect\"} 0\n",
                     "drover_node_drained{node=\"gpu-02\"} 1\n", "drover_node_drained{node=\"gpu-01\"} 0\n"});
  // GPUs of ready nodes only, with the job on each.
  ExpectLines(text, {"DCGM_FI_DEV_XID_ERRORS{", "job_id=\"j-000001\"", "drover_gpu_xid_errors_total{"});
  EXPECT_THAT(text, Not(HasSubstr("GPU-b")));
}

TEST(ClusterMetricsTest, TenantsHaveUsageQuotaAndBudgetWhereSet) {
  v1::ListTenantsResponse r;
  v1::TenantStatus* t = r.add_tenants();
  t->set_name("t");
  t->set_usage_milli(2500);
  t->set_pending_jobs(3);
  t->set_gpu_hours_used(12.5);
  (*t->mutable_quota()->mutable_max_gpus())["*"] = 4;
  t->mutable_quota()->set_gpu_hours(100);
  t->mutable_quota()->set_period_seconds(3600);
  t->mutable_quota()->set_max_pending_jobs(10);
  r.add_tenants()->set_name("u");  // no limits
  metrics::Exposition out;
  WriteTenantMetrics(r, 5400 * kSecond, out);
  const std::string text = out.Text();
  ExpectLines(text,
              {"drover_tenant_gpus_allocated{tenant=\"t\"} 2.5\n", "drover_tenant_gpu_quota{tenant=\"t\"} 4\n",
               "drover_tenant_pending_jobs{tenant=\"t\"} 3\n", "drover_tenant_max_pending_jobs{tenant=\"t\"} 10\n",
               "drover_tenant_gpu_seconds_used{tenant=\"t\"} 45000\n",
               "drover_tenant_gpu_seconds_budget{tenant=\"t\"} 360000\n"});
  // The hour-long period that holds 1.5 h ends at 2 h.
  ExpectLines(text, {"drover_tenant_budget_period_end_timestamp_seconds{tenant=\"t\"} 7200\n",
                     "drover_tenant_gpus_allocated{tenant=\"u\"} 0\n"});
  EXPECT_THAT(text, Not(HasSubstr("drover_tenant_gpu_quota{tenant=\"u\"}")));
  EXPECT_THAT(text, Not(HasSubstr("drover_tenant_gpu_seconds_budget{tenant=\"u\"}")));
}

TEST(ClusterMetricsTest, PendingJobsAreCountedPerTenantAndClassWithTheOldest) {
  auto job = [](const std::string& id, const std::string& tenant, const std::string& cls, int64_t submit_s) {
    v1::Job j;
    j.set_id(id);
    j.mutable_spec()->set_tenant(tenant);
    j.mutable_status()->set_state(v1::JOB_STATE_PENDING);
    j.mutable_status()->set_wait_class(cls);
    j.mutable_status()->set_submit_time_unix_nanos(submit_s * kSecond);
    return j;
  };
  std::vector<v1::Job> jobs = {job("j-000003", "t", "no_fit", 300), job("j-000001", "t", "no_fit", 100),
                               job("j-000002", "t", "quota", 200), job("j-000004", "u", "no_fit", 400)};
  metrics::Exposition out;
  WritePendingJobMetrics(jobs, 1000 * kSecond, out);
  const std::string text = out.Text();
  ExpectLines(text, {"drover_jobs_pending{reason=\"no_fit\",tenant=\"t\"} 2\n",
                     "drover_jobs_pending{reason=\"quota\",tenant=\"t\"} 1\n"});
  EXPECT_THAT(
      text, HasSubstr("drover_jobs_pending_oldest_seconds{job_id=\"j-000001\",reason=\"no_fit\",tenant=\"t\"} 900\n"));
  EXPECT_THAT(
      text, HasSubstr("drover_jobs_pending_oldest_seconds{job_id=\"j-000004\",reason=\"no_fit\",tenant=\"u\"} 600\n"));
}

TEST(ClusterMetricsTest, ServerFactsAreTheEpochAndCertificateExpiry) {
  ServerFacts facts;
  facts.leader_epoch = 7;
  facts.certificate_not_after_unix = {{"server", 1'900'000'000}, {"ca", 2'000'000'000}};
  metrics::Exposition out;
  WriteServerMetrics(facts, out);
  const std::string text = out.Text();
  ExpectLines(text, {"drover_leader_epoch 7\n",
                     "drover_certificate_expiry_timestamp_seconds{certificate=\"server\"} 1900000000\n"});
}

}  // namespace
}  // namespace drover::server
