#include "drover/cli/top_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "drover/common/quantity.h"

namespace drover::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::vector<std::string> Lines(const std::string& frame) {
  std::vector<std::string> out;
  std::istringstream in(frame);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

v1::Gpu* AddGpu(v1::Node* n, int index) {
  v1::Gpu* g = n->add_gpus();
  g->set_index(index);
  g->set_model("H100 80GB");
  g->set_memory_bytes(80 * kGiB);
  g->set_health(v1::GPU_HEALTH_HEALTHY);
  return g;
}

// Two nodes, listed out of order, GPUs out of order: sim-2 (not ready, no
// telemetry) and sim-1 with a busy GPU 0 and a sick GPU 1.
TopSnapshot Snapshot() {
  TopSnapshot s;
  v1::Node* n2 = s.nodes.add_nodes();
  n2->set_name("sim-2");
  n2->set_state(v1::NODE_STATE_NOT_READY);
  AddGpu(n2, 1);
  AddGpu(n2, 0);
  v1::Node* n1 = s.nodes.add_nodes();
  n1->set_name("sim-1");
  n1->set_state(v1::NODE_STATE_READY);
  n1->mutable_topology()->set_sockets(2);
  n1->mutable_topology()->set_numa_nodes(2);
  n1->mutable_topology()->set_cores(64);
  v1::Gpu* sick = AddGpu(n1, 1);
  sick->set_health(v1::GPU_HEALTH_UNHEALTHY);
  sick->set_health_reason("xid 79 (GPU has fallen off the bus) (1 of 3 clean checks)");
  sick->mutable_telemetry()->set_utilization_pct(0);
  v1::Gpu* busy = AddGpu(n1, 0);
  busy->set_job_id("j-000001");
  v1::GpuTelemetry* t = busy->mutable_telemetry();
  t->set_utilization_pct(100);
  t->set_memory_used_bytes(40 * kGiB);
  t->set_temperature_c(61);
  t->set_power_w(350);
  t->set_power_limit_w(700);
  s.jobs_running = 1;
  s.jobs_pending = 2;
  return s;
}

TopFrameOptions Options() {
  TopFrameOptions o;
  o.addr = "127.0.0.1:7070";
  return o;
}

TEST(TopTest, UtilBar) {
  EXPECT_EQ(UtilBar(50, 10), "[#####.....]");
  EXPECT_EQ(UtilBar(100, 4), "[####]");
  EXPECT_EQ(UtilBar(0, 4), "[....]");
  EXPECT_EQ(UtilBar(std::nullopt, 4), "[....]");
  EXPECT_EQ(UtilBar(250, 4), "[####]") << "clamped";
  EXPECT_EQ(UtilBar(-3, 4), "[....]");
  EXPECT_EQ(UtilBar(std::nan(""), 4), "[....]");
}

TEST(TopTest, WholeFrame) {
  EXPECT_EQ(RenderTop(Snapshot(), Options()),
            "drover top  127.0.0.1:7070  every 2s\n"
            "nodes 1/2 ready   gpus 3/4 healthy, 1 busy   util 50% mean   jobs 1 running, 2 pending\n"
            "\n"
            "  GPU  MODEL      UTIL                         MEMORY       TEMP  POWER     JOB       HEALTH\n"
            "sim-1  Ready  1/2 healthy  2 sockets, 2 NUMA, 64 cores\n"
            "    0  H100 80GB  [####################] 100%  40GiB/80GiB  61C   350/700W  j-000001  Healthy\n"
            "!   1  H100 80GB  [....................]   0%  -            -     -         -         "
            "Unhealthy: xid 79 (GPU has fallen off the bus) (1 of 3 clean checks)\n"
            "sim-2  NotReady  2/2 healthy  -\n"
            "    0  H100 80GB  [....................]    -  -            -     -         -         Healthy\n"
            "    1  H100 80GB  [....................]    -  -            -     -         -         Healthy\n");
}

TEST(TopTest, SortsByNodeThenGpuIndex) {
  std::vector<std::string> lines = Lines(RenderTop(Snapshot(), Options()));
  std::vector<std::string> order;
  for (const std::string& l : lines) {
    if (l.rfind("sim-", 0) == 0) order.push_back(l.substr(0, 5));
    if (l.size() > 4 && (l[0] == ' ' || l[0] == '!') && std::isdigit(static_cast<unsigned char>(l[4]))) {
      order.push_back(l.substr(4, 1));
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"sim-1", "0", "1", "sim-2", "0", "1"}));
}

TEST(TopTest, MissingTelemetryAndJobsAreDashes) {
  TopSnapshot s = Snapshot();
  s.jobs_running.reset();
  s.jobs_pending.reset();
  for (v1::Node& n : *s.nodes.mutable_nodes()) {
    for (v1::Gpu& g : *n.mutable_gpus()) g.clear_telemetry();
  }
  std::string frame = RenderTop(s, Options());
  EXPECT_THAT(frame, HasSubstr("util - mean   jobs -\n"));
  EXPECT_THAT(frame,
              HasSubstr("    0  H100 80GB  [....................]    -  -       -     -      j-000001  Healthy\n"));
}

TEST(TopTest, UnhealthyGpuIsMarkedWithItsReason) {
  std::vector<TopLine> lines = RenderTopLines(Snapshot(), Options());
  int unhealthy = 0;
  for (const TopLine& l : lines) {
    if (l.kind != TopLine::Kind::kUnhealthyGpu) {
      EXPECT_THAT(l.text, Not(StartsWith("!")));
      continue;
    }
    ++unhealthy;
    EXPECT_THAT(l.text, StartsWith("!   1"));
    EXPECT_THAT(l.text, HasSubstr("Unhealthy: xid 79 (GPU has fallen off the bus)"));
  }
  EXPECT_EQ(unhealthy, 1);
}

TEST(TopTest, CutsLinesToTheWidthAndTheHeight) {
  TopFrameOptions o = Options();
  o.width = 40;
  std::vector<std::string> lines = Lines(RenderTop(Snapshot(), o));
  ASSERT_EQ(lines.size(), 10u);
  for (const std::string& l : lines) EXPECT_LE(l.size(), 40u) << l;
  EXPECT_EQ(lines[1], "nodes 1/2 ready   gpus 3/4 healthy, 1 bu");

  o.height = 6;
  lines = Lines(RenderTop(Snapshot(), o));
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[5], "... 5 more lines");
}

TEST(TopTest, InteractiveTitleErrorsAndEscapesFromTheServer) {
  TopSnapshot s = Snapshot();
  s.error = "cannot reach the drover server at 127.0.0.1:7070";
  s.nodes.mutable_nodes(0)->set_name("evil\x1b[2J");
  TopFrameOptions o = Options();
  o.interactive = true;
  o.interval_ms = 500;
  std::vector<TopLine> lines = RenderTopLines(s, o);
  EXPECT_EQ(lines[0].text, "drover top  127.0.0.1:7070  every 500ms  (q to quit)");
  EXPECT_EQ(lines[2].kind, TopLine::Kind::kError);
  EXPECT_EQ(lines[2].text, "error: cannot reach the drover server at 127.0.0.1:7070");
  std::string frame = RenderTop(s, o);
  EXPECT_EQ(frame.find('\x1b'), std::string::npos);
  EXPECT_THAT(frame, HasSubstr("evil\\x1b[2J  NotReady"));
}

TEST(TopTest, LongModelNamesAreCut) {
  TopSnapshot s = Snapshot();
  s.nodes.mutable_nodes(1)->mutable_gpus(0)->set_model("pthread-skylake-avx512-Intel(R) Xeon(R) Processor");
  std::string frame = RenderTop(s, Options());
  EXPECT_THAT(frame, HasSubstr("!   1  pthread-skylake-a...  [....................]"));
  EXPECT_THAT(frame, Not(HasSubstr("Xeon")));
}

TEST(TopTest, NoNodes) {
  std::string frame = RenderTop(TopSnapshot(), Options());
  EXPECT_THAT(frame, HasSubstr("nodes 0/0 ready   gpus 0/0 healthy, 0 busy   util - mean   jobs -\n"));
  EXPECT_THAT(frame, HasSubstr("\nno nodes\n"));
}

}  // namespace
}  // namespace drover::cli
