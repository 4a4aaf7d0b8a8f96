#include "drover/rpc/gpu_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "drover/rpc/convert.h"

namespace drover::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Gpu Busy() {
  v1::Gpu g;
  g.set_index(3);
  g.set_uuid("GPU-abc");
  g.set_vendor("nvidia");
  g.set_model("H100 80GB");
  g.set_pci_bus_id("0000:3b:00.0");
  g.set_driver_version("550.54");
  g.set_health(v1::GPU_HEALTH_HEALTHY);
  g.set_job_id("j-000007");
  g.set_tenant("ml");
  v1::GpuTelemetry* t = g.mutable_telemetry();
  t->set_time_unix_nanos(1);
  t->set_utilization_pct(87.5);
  t->set_temperature_c(66);
  t->set_power_w(612.25);
  t->set_memory_used_bytes(int64_t{3} << 30);
  t->set_memory_total_bytes(int64_t{80} << 30);
  t->set_last_xid(79);
  t->add_throttle_reasons("thermal");
  t->set_processes_known(true);
  v1::GpuProcess* p = t->add_processes();
  p->set_pid(42);
  p->set_memory_bytes(int64_t{1} << 30);
  p->set_job_id("j-000007");
  v1::GpuProcess* other = t->add_processes();
  other->set_pid(43);
  other->set_memory_bytes(int64_t{1} << 20);  // not Drover's
  return g;
}

std::string Render(const v1::Gpu& g) {
  metrics::Registry r;
  r.AddCollector([&](metrics::Exposition& out) { WriteGpuMetrics("node-1", g, out); });
  return r.Render();
}

TEST(GpuMetricsTest, WritesDcgmNamesLabelsAndUnits) {
  std::string text = Render(Busy());
  const std::string labels =
      "{DCGM_FI_DRIVER_VERSION=\"550.54\",Hostname=\"node-1\",UUID=\"GPU-abc\",device=\"nvidia3\",gpu=\"3\","
      "job_id=\"j-000007\",modelName=\"H100 80GB\",pci_bus_id=\"0000:3b:00.0\",tenant=\"ml\"}";
  EXPECT_THAT(text, HasSubstr("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL" + labels + " 87.5\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_GPU_TEMP" + labels + " 66\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_POWER_USAGE" + labels + " 612.25\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_USED" + labels + " 3072\n"));   // MiB
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_FREE" + labels + " 78848\n"));  // MiB
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_XID_ERRORS" + labels + " 79\n"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" + labels + " 32\n"));  // SW thermal
  EXPECT_THAT(text, HasSubstr("drover_gpu_healthy" + labels + " 1\n"));
  // Only the Drover job's process memory, under that job alone.
  EXPECT_THAT(text, HasSubstr("drover_gpu_job_memory_used_bytes{DCGM_FI_DRIVER_VERSION=\"550.54\",Hostname=\"node-1\","
                              "UUID=\"GPU-abc\",device=\"nvidia3\",gpu=\"3\",job_id=\"j-000007\",modelName=\"H100 "
                              "80GB\",pci_bus_id=\"0000:3b:00.0\"} 1073741824\n"));
  // Fields the device did not report are left out, not zero.
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_SM_CLOCK")));
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")));
}

TEST(GpuMetricsTest, FreeUnhealthyGpuWithoutTelemetry) {
  v1::Gpu g;
  g.set_index(0);
  g.set_uuid("sim-1");
  g.set_vendor("amd");
  g.set_model("MI300X");
  g.set_health(v1::GPU_HEALTH_UNHEALTHY);
  std::string text = Render(g);
  EXPECT_THAT(text, HasSubstr("drover_gpu_healthy{Hostname=\"node-1\",UUID=\"sim-1\",device=\"amd0\",gpu=\"0\","
                              "modelName=\"MI300X\"} 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("DCGM_FI_DEV_GPU_TEMP")));
  EXPECT_THAT(text, Not(HasSubstr("job_id")));  // free: no empty labels
}

TEST(HeartbeatValidationTest, RejectsMalformedReports) {
  v1::Heartbeat hb;
  for (int i = 0; i < 2; ++i) {
    v1::GpuReport* r = hb.add_gpus();
    r->set_index(i);
    r->set_health(v1::GPU_HEALTH_HEALTHY);
  }
  EXPECT_TRUE(ValidateHeartbeat("n", 2, hb).ok());
  EXPECT_EQ(ValidateHeartbeat("n", 1, hb).code(), Code::kInvalidArgument);  // more GPUs than registered
  v1::Heartbeat swapped = hb;
  swapped.mutable_gpus(0)->set_index(1);
  EXPECT_EQ(ValidateHeartbeat("n", 2, swapped).code(), Code::kInvalidArgument);
  v1::Heartbeat no_health = hb;
  no_health.mutable_gpus(1)->set_health(v1::GPU_HEALTH_UNSPECIFIED);
  EXPECT_EQ(ValidateHeartbeat("n", 2, no_health).code(), Code::kInvalidArgument);
  v1::Heartbeat long_reason = hb;
  long_reason.mutable_gpus(0)->set_health_reason(std::string(5000, 'x'));
  EXPECT_EQ(ValidateHeartbeat("n", 2, long_reason).code(), Code::kInvalidArgument);
  // Checkpoint marks: a workload id and a time, at most 4096.
  v1::Heartbeat marks = hb;
  v1::CheckpointMark* m = marks.add_checkpoints();
  m->set_workload_id("j-000007@2");
  m->set_time_unix_nanos(1);
  EXPECT_TRUE(ValidateHeartbeat("n", 2, marks).ok());
  m->set_workload_id("j-7/../x");
  EXPECT_EQ(ValidateHeartbeat("n", 2, marks).code(), Code::kInvalidArgument);
  m->set_workload_id("j-000007@2");
  m->set_time_unix_nanos(-5);
  EXPECT_EQ(ValidateHeartbeat("n", 2, marks).code(), Code::kInvalidArgument);
  m->set_time_unix_nanos(1);
  for (int i = 0; i < kMaxCheckpointsPerHeartbeat; ++i) *marks.add_checkpoints() = *m;
  EXPECT_EQ(ValidateHeartbeat("n", 2, marks).code(), Code::kInvalidArgument);
}

TEST(RestartPolicyTest, NormalizedAndValidated) {
  v1::JobSpec spec;
  spec.set_gpus(1);
  spec.add_command("true");
  v1::JobSpec plain = spec;
  ASSERT_TRUE(NormalizeJobSpec(&plain).ok());
  EXPECT_EQ(plain.restart_policy(), "never");
  EXPECT_EQ(plain.max_restarts(), 0);
  v1::JobSpec restart = spec;
  restart.set_restart_policy("on-failure");
  ASSERT_TRUE(NormalizeJobSpec(&restart).ok());
  EXPECT_EQ(restart.max_restarts(), kDefaultMaxRestarts);
  v1::JobSpec bad = spec;
  bad.set_restart_policy("always");
  Status s = NormalizeJobSpec(&bad);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("restart_policy 'always' is unknown"));
  v1::JobSpec too_many = restart;
  too_many.set_max_restarts(101);
  EXPECT_EQ(NormalizeJobSpec(&too_many).code(), Code::kInvalidArgument);
  v1::JobSpec without_policy = spec;
  without_policy.set_max_restarts(2);
  EXPECT_EQ(NormalizeJobSpec(&without_policy).code(), Code::kInvalidArgument);
}

TEST(RegisterValidationTest, ChecksDeviceDetailsAndTopology) {
  v1::RegisterRequest req;
  req.set_node_name("n1");
  v1::Gpu* g = req.add_gpus();
  g->set_index(0);
  g->set_uuid("GPU-1");
  g->set_vendor("nvidia");
  g->set_model("H100 80GB");
  g->set_pci_bus_id("0000:3b:00.0");
  req.mutable_topology()->set_sockets(2);
  req.mutable_topology()->set_numa_nodes(2);
  req.mutable_topology()->set_cores(64);
  v1::Nic* nic = req.mutable_topology()->add_nics();
  nic->set_name("eth0");
  ASSERT_TRUE(ValidateRegister(req).ok());
  v1::RegisterRequest long_pci = req;
  long_pci.mutable_gpus(0)->set_pci_bus_id(std::string(100, '0'));
  EXPECT_EQ(ValidateRegister(long_pci).code(), Code::kInvalidArgument);
  v1::RegisterRequest sockets = req;
  sockets.mutable_topology()->set_sockets(-1);
  EXPECT_THAT(ValidateRegister(sockets).message(), HasSubstr("implausible topology"));
  v1::RegisterRequest unnamed = req;
  unnamed.mutable_topology()->mutable_nics(0)->clear_name();
  EXPECT_EQ(ValidateRegister(unnamed).code(), Code::kInvalidArgument);
  v1::RegisterRequest mig = req;
  for (int i = 0; i < 65; ++i) mig.mutable_gpus(0)->add_mig_instances();
  EXPECT_EQ(ValidateRegister(mig).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover::rpc
