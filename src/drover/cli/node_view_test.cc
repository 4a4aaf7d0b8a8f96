#include "drover/cli/node_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "drover/common/quantity.h"

namespace drover::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Gpu HealthyWithTelemetry() {
  v1::Gpu g;
  g.set_index(0);
  g.set_model("H100 80GB");
  g.set_vendor("nvidia");
  g.set_memory_bytes(80 * kGiB);
  g.set_health(v1::GPU_HEALTH_HEALTHY);
  v1::GpuTelemetry* t = g.mutable_telemetry();
  t->set_utilization_pct(66.6);
  t->set_memory_used_bytes(40 * kGiB + 512 * kMiB);
  t->set_temperature_c(45.4);
  t->set_power_w(250.2);
  t->set_power_limit_w(700);
  t->set_sm_clock_mhz(1980);
  t->add_throttle_reasons("thermal");
  t->add_throttle_reasons("power");
  t->set_ecc_corrected(12);
  t->set_ecc_uncorrected(0);
  t->set_xid_errors(2);
  t->set_last_xid(48);
  return g;
}

TEST(NodeViewTest, TelemetryCells) {
  v1::Gpu g = HealthyWithTelemetry();
  EXPECT_EQ(UtilText(g), "67%");
  EXPECT_EQ(MemUsedText(g), "40.5GiB/80GiB") << "total falls back to the GPU's memory";
  g.mutable_telemetry()->set_memory_total_bytes(96 * kGiB);
  EXPECT_EQ(MemUsedText(g), "40.5GiB/96GiB");
  EXPECT_EQ(TempText(g), "45");
  EXPECT_EQ(PowerText(g), "250/700");
  EXPECT_EQ(SmClockText(g), "1980");
  EXPECT_EQ(ThrottleText(g), "thermal,power");
  EXPECT_EQ(EccText(g), "12/0");
  EXPECT_EQ(XidText(g), "2 (last 48)");
}

TEST(NodeViewTest, AbsentTelemetryIsADash) {
  v1::Gpu g;
  g.set_health(v1::GPU_HEALTH_HEALTHY);
  for (const std::string& cell : {UtilText(g), MemUsedText(g), TempText(g), PowerText(g), SmClockText(g),
                                  ThrottleText(g), EccText(g), XidText(g)}) {
    EXPECT_EQ(cell, "-");
  }
  // A reading with some fields: the others stay absent, not zero.
  v1::GpuTelemetry* t = g.mutable_telemetry();
  t->set_power_w(90);
  t->set_ecc_uncorrected(1);
  t->set_temperature_c(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(PowerText(g), "90/-");
  EXPECT_EQ(EccText(g), "-/1");
  EXPECT_EQ(TempText(g), "-") << "NaN from a driver is not a temperature";
  EXPECT_EQ(UtilText(g), "-");
  EXPECT_EQ(XidText(g), "0");
}

TEST(NodeViewTest, HealthTextGivesTheReason) {
  v1::Gpu g;
  EXPECT_EQ(GpuHealthText(g), "Unknown");
  g.set_health(v1::GPU_HEALTH_HEALTHY);
  EXPECT_EQ(GpuHealthText(g), "Healthy");
  g.set_health(v1::GPU_HEALTH_UNHEALTHY);
  EXPECT_EQ(GpuHealthText(g), "Unhealthy");
  g.set_health_reason("xid 79 (GPU has fallen off the bus) (1 of 3 clean checks)");
  EXPECT_EQ(GpuHealthText(g), "Unhealthy: xid 79 (GPU has fallen off the bus) (1 of 3 clean checks)");
  EXPECT_EQ(GpuHealthText(g, 30), "Unhealthy: xid 79 (GPU has ...");
  EXPECT_EQ(GpuHealthText(g, 30).size(), 30u);
}

v1::Node EightGpuNode() {
  v1::Node n;
  n.set_name("gpu-07");
  n.set_state(v1::NODE_STATE_READY);
  for (int i = 0; i < 8; ++i) {
    v1::Gpu* g = n.add_gpus();
    g->set_index(i);
    g->set_model("H100 80GB");
    g->set_health(i == 3 ? v1::GPU_HEALTH_UNHEALTHY : v1::GPU_HEALTH_HEALTHY);
  }
  v1::HostTopology* t = n.mutable_topology();
  t->set_sockets(2);
  t->set_numa_nodes(2);
  t->set_cores(64);
  t->add_nics()->set_name("eth0");
  t->add_nics()->set_name("ib0");
  v1::NodeCondition* ready = n.add_conditions();
  ready->set_type("Ready");
  ready->set_status(true);
  v1::NodeCondition* gpus = n.add_conditions();
  gpus->set_type("GpusHealthy");
  gpus->set_status(false);
  gpus->set_reason("UnhealthyGpus");
  gpus->set_message("gpu 3: xid 79 (GPU has fallen off the bus) (0 of 3 clean checks)");
  return n;
}

TEST(NodeViewTest, NodeSummaries) {
  v1::Node n = EightGpuNode();
  EXPECT_EQ(GpuHealthSummary(n), "7/8 healthy");
  EXPECT_EQ(TopologySummary(n.topology()), "2 sockets, 2 NUMA, 64 cores, 2 NICs");
  EXPECT_EQ(ConditionsText(n),
            "Ready, GpusHealthy=False (gpu 3: xid 79 (GPU has fallen off the bus) (0 of 3 clean checks))");
  EXPECT_EQ(ConditionsText(n, 20), "Ready, GpusHealthy=False (gpu 3: xid 79 (GP...)");
  n.mutable_conditions(1)->set_status(true);
  EXPECT_EQ(ConditionsText(n), "Ready, GpusHealthy");

  v1::HostTopology one;
  one.set_sockets(1);
  one.set_numa_nodes(1);
  one.set_cores(1);
  one.add_nics();
  EXPECT_EQ(TopologySummary(one), "1 socket, 1 NUMA, 1 core, 1 NIC");
  EXPECT_EQ(TopologySummary(v1::HostTopology()), "-");
  EXPECT_EQ(GpuHealthSummary(v1::Node()), "-");
  EXPECT_EQ(ConditionsText(v1::Node()), "-");
}

TEST(NodeViewTest, LinkSummaryCountsPairs) {
  v1::Node n;
  for (int i = 0; i < 3; ++i) n.add_gpus()->set_index(i);
  EXPECT_EQ(LinkSummary(n), "-") << "no matrix";
  // 0-1 fabric, 0-2 cross-socket, 1-2 fabric (the lower half is ignored).
  for (int v : {3, 3, 0, 3, 3, 3, 0, 3, 3}) n.add_links(v);
  EXPECT_EQ(LinkSummary(n), "3 pairs: 2 fabric, 1 cross-socket");
  n.set_links(1, 7);
  EXPECT_EQ(LinkSummary(n), "-") << "an unknown link code";
  n.set_links(1, 2);
  EXPECT_EQ(LinkSummary(n), "3 pairs: 1 fabric, 1 pcie-switch, 1 cross-socket");
  n.add_links(3);
  EXPECT_EQ(LinkSummary(n), "-") << "not gpus x gpus";

  v1::Node two;
  for (int i = 0; i < 2; ++i) two.add_gpus()->set_index(i);
  for (int v : {3, 1, 1, 3}) two.add_links(v);
  EXPECT_EQ(LinkSummary(two), "1 pair: 1 numa");
}

TEST(NodeViewTest, GpuTablePlainIsCompactWideHasTelemetry) {
  v1::ListNodesResponse resp;
  v1::Node* n = resp.add_nodes();
  n->set_name("sim-1");
  *n->add_gpus() = HealthyWithTelemetry();
  v1::Gpu* sick = n->add_gpus();
  sick->set_index(1);
  sick->set_model("H100 80GB");
  sick->set_health(v1::GPU_HEALTH_UNHEALTHY);
  sick->set_health_reason("xid 79 (GPU has fallen off the bus) (1 of 3 clean checks) and a long tail of words");

  std::ostringstream plain;
  PrintGpuTable(resp, false, plain);
  EXPECT_THAT(plain.str(),
              HasSubstr("Unhealthy: xid 79 (GPU has fallen off the bus) (1 of 3 clean checks) ...   <none>"));
  EXPECT_THAT(plain.str(), Not(HasSubstr("TEMP-C")));

  std::ostringstream wide;
  PrintGpuTable(resp, true, wide);
  std::string w = wide.str();
  for (const char* header :
       {"UTIL", "MEM-USED", "TEMP-C", "POWER-W", "SM-MHZ", "THROTTLE", "ECC", "XIDS", "PCI-BUS", "ARCH", "TENANT"}) {
    EXPECT_THAT(w, HasSubstr(header));
  }
  EXPECT_THAT(w, HasSubstr("67%    40.5GiB/80GiB   45       250/700   1980     thermal,power   12/0   2 (last 48)"));
  EXPECT_THAT(w, HasSubstr("and a long tail of words")) << "wide shows the whole reason";
}

TEST(NodeViewTest, NodeTableShowsHealthTopologyAndConditions) {
  v1::ListNodesResponse resp;
  *resp.add_nodes() = EightGpuNode();
  v1::Node* b = resp.add_nodes();
  b->set_name("a-node");
  b->set_state(v1::NODE_STATE_NOT_READY);
  std::ostringstream plain;
  PrintNodeTable(resp, false, 0, plain);
  std::string p = plain.str();
  EXPECT_THAT(p, HasSubstr("7/8 healthy   2 sockets, 2 NUMA, 64 cores, 2 NICs"));
  EXPECT_THAT(p, HasSubstr("GpusHealthy=False (gpu 3: xid 79 (GPU has fallen off the bus) (0 o...)"));
  EXPECT_LT(p.find("a-node"), p.find("gpu-07")) << "sorted by name";

  std::ostringstream wide;
  PrintNodeTable(resp, true, 0, wide);
  EXPECT_THAT(wide.str(), HasSubstr("GPU-LINKS"));
  EXPECT_THAT(wide.str(), HasSubstr("(0 of 3 clean checks))"));
}

TEST(NodeViewTest, ImageTableShowsEveryNodesStore) {
  v1::ListNodesResponse resp;
  v1::Node* b = resp.add_nodes();
  b->set_name("gpu-02");
  v1::NodeImage* im = b->add_images();
  im->add_references("docker.io/library/busybox:latest");
  im->add_references("docker.io/library/busybox:1.36");
  im->set_digest("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  im->set_size_bytes(4 * kMiB);
  im->set_in_use(2);
  im->set_last_used_unix_nanos(1'000'000'000'000);
  v1::Node* a = resp.add_nodes();
  a->set_name("gpu-01");
  v1::NodeImage* evil = a->add_images();
  evil->add_references("x\x1b[2J");
  evil->set_digest("sha256:ff");
  resp.add_nodes()->set_name("gpu-03");  // an empty store: no row
  std::ostringstream plain;
  PrintImageTable(resp, false, 1'000'000'000'000 + 300'000'000'000, plain);
  std::string p = plain.str();
  EXPECT_THAT(p, HasSubstr("NODE     IMAGE"));
  EXPECT_THAT(p, HasSubstr("IN USE   LAST USED"));
  EXPECT_THAT(p,
              HasSubstr("docker.io/library/busybox:latest,docker.io/library/busybo...   sha256:0123456789ab   4MiB"));
  EXPECT_THAT(p, HasSubstr("2        5m ago"));
  EXPECT_THAT(p, HasSubstr("x\\x1b[2J")) << "escaped";
  EXPECT_THAT(p, Not(HasSubstr("gpu-03")));
  EXPECT_LT(p.find("gpu-01"), p.find("gpu-02")) << "sorted by name";
  std::ostringstream wide;
  PrintImageTable(resp, true, 0, wide);
  EXPECT_THAT(wide.str(), HasSubstr(im->digest()));
  EXPECT_THAT(wide.str(), HasSubstr("docker.io/library/busybox:latest,docker.io/library/busybox:1.36"));
}

}  // namespace
}  // namespace drover::cli
