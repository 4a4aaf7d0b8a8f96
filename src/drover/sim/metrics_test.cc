// Metrics of the simulator: the statistics, the time-weighted mean, Jain's
// index and the FGD fragmentation measure, each on a worked example.

#include "drover/sim/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "drover/sim/report.h"

namespace drover::sim {
namespace {

TEST(Percentile, NearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // order does not matter
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 95), 95);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 99), 7);
  // Nearest rank, not interpolated: p50 of {1, 2, 3, 4} is 2.
  EXPECT_EQ(Percentile({4, 3, 2, 1}, 50), 2);
}

TEST(Summarize, MeanAndTail) {
  Distribution d = Summarize({1, 2, 3, 4, 10});
  EXPECT_EQ(d.count, 5);
  EXPECT_DOUBLE_EQ(d.mean, 4);
  EXPECT_EQ(d.p50, 3);
  EXPECT_EQ(d.p99, 10);
  EXPECT_EQ(d.max, 10);
  EXPECT_EQ(Summarize({}).count, 0);
}

TEST(TimeWeighted, WorkedExample) {
  TimeWeighted w;
  w.Set(0, 10);
  w.Set(10, 30);
  EXPECT_DOUBLE_EQ(w.Mean(40), 25);  // (10*10 + 30*30) / 40
  EXPECT_DOUBLE_EQ(w.Mean(10), 10);
}

TEST(TimeWeighted, LaterSetAtTheSameTimeWins) {
  TimeWeighted w;
  w.Set(5, 100);  // the mean starts at the first Set
  w.Set(5, 0);
  w.Set(15, 50);
  EXPECT_DOUBLE_EQ(w.Mean(25), 25);  // (10*0 + 10*50) / 20
  EXPECT_DOUBLE_EQ(w.Mean(5), 50);   // an empty span: the last value
  EXPECT_DOUBLE_EQ(TimeWeighted().Mean(10), 0);
}

TEST(JainIndex, Bounds) {
  EXPECT_DOUBLE_EQ(JainIndex({1, 1, 1, 1}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({1, 0, 0, 0}), 0.25);
  EXPECT_DOUBLE_EQ(JainIndex({2, 1}), 0.9);  // 9 / (2 * 5)
  EXPECT_DOUBLE_EQ(JainIndex({}), 1);
  EXPECT_DOUBLE_EQ(JainIndex({0, 0}), 1);
}

sched::NodeInfo Node(const std::string& name, int gpus, const std::string& model = "A100", int64_t cpu = 0) {
  sched::NodeInfo n;
  n.name = name;
  n.schedulable = true;
  n.cpu_milli = cpu;
  n.memory_bytes = 0;
  for (int i = 0; i < gpus; ++i) {
    sched::GpuInfo g;
    g.index = i;
    g.vendor = "nvidia";
    g.model = model;
    g.memory_bytes = int64_t{80} << 30;
    n.gpus.push_back(g);
  }
  return n;
}

TaskClass Task(int gpus, int milli = sched::kWholeGpu) {
  TaskClass t;
  t.gpus = gpus;
  t.gpu_milli = milli;
  t.count = 1;
  return t;
}

// The example of NodeFragment's comment: 8 GPUs, 2 idle, 3 half free, 3 full.
TEST(NodeFragment, WorkedExample) {
  sched::NodeInfo n = Node("n", 8, "A100", 64'000);
  NodeFree f;
  f.gpu_milli = {1000, 1000, 500, 500, 500, 0, 0, 0};
  f.gpu_memory.assign(8, int64_t{40} << 30);
  f.cpu_milli = 8'000;
  EXPECT_EQ(NodeFragment(n, f, Task(1)), 1500);       // fits; the half GPUs are stranded
  EXPECT_EQ(NodeFragment(n, f, Task(1, 600)), 1500);  // 500 < 600
  EXPECT_EQ(NodeFragment(n, f, Task(1, 500)), 0);     // fits in any half GPU
  EXPECT_EQ(NodeFragment(n, f, Task(2)), 1500);       // both idle GPUs: fits
  EXPECT_EQ(NodeFragment(n, f, Task(4)), 3500);       // does not fit: all of it
  EXPECT_EQ(NodeFragment(n, f, Task(0)), 0);          // CPU only, fits: uses no GPU
  TaskClass big_cpu = Task(0);
  big_cpu.cpu_milli = 16'000;  // more CPU than is free: nothing fits
  EXPECT_EQ(NodeFragment(n, f, big_cpu), 3500);
  TaskClass other_model = Task(1, 100);
  other_model.models = {"H100"};
  EXPECT_EQ(NodeFragment(n, f, other_model), 3500);
  other_model.models = {"A100", "H100"};
  EXPECT_EQ(NodeFragment(n, f, other_model), 0);
}

TEST(NodeFragment, UntrackedHostResourcesNeverBlock) {
  sched::NodeInfo n = Node("n", 2);  // cpu_milli 0: not tracked
  NodeFree f;
  f.gpu_milli = {1000, 300};
  f.gpu_memory = {int64_t{80} << 30, int64_t{10} << 30};
  TaskClass t = Task(1);
  t.cpu_milli = 1'000'000;
  EXPECT_EQ(NodeFragment(n, f, t), 300);
  // A share that needs more GPU memory than the shared GPU has left.
  TaskClass share = Task(1, 200);
  share.gpu_memory_bytes = int64_t{20} << 30;
  EXPECT_EQ(NodeFragment(n, f, share), 300);
}

SimJob Job(const std::string& id, int gpus, int milli = sched::kWholeGpu, int replicas = 1) {
  SimJob j;
  j.req.id = id;
  j.req.gpus = gpus;
  j.req.gpu_milli = milli;
  j.req.replicas = replicas;
  return j;
}

TEST(TargetWorkload, GroupsByRequestWeightedByReplicas) {
  std::vector<SimJob> jobs = {Job("a", 1), Job("b", 1), Job("c", 1, 500), Job("d", 8, 1000, 4)};
  jobs[1].req.gpu_model = "H100";
  std::vector<TaskClass> t = TargetWorkload(jobs);
  ASSERT_EQ(t.size(), 4u);
  int64_t total = 0;
  for (const TaskClass& c : t) total += c.count;
  EXPECT_EQ(total, 7);  // 1 + 1 + 1 + 4 replicas
}

// Two 2-GPU nodes; the target is half whole-GPU tasks, half 0.5-GPU tasks.
// A 0.3 share on a:0 leaves 700 free there: the whole-GPU task strands it
// (fits on a:1), the half task does not. Expected: (700 + 0) / 2 = 350
// milli of 4000, 8.75%.
TEST(ClusterUsage, FragmentationFollowsBindings) {
  Cluster c;
  c.nodes = {Node("a", 2), Node("b", 2)};
  std::vector<SimJob> target = {Job("w", 1), Job("h", 1, 500)};
  ClusterUsage u(c, TargetWorkload(target));
  EXPECT_EQ(u.total_milli(), 4000);
  EXPECT_DOUBLE_EQ(u.fragmentation_pct(), 0);
  sched::JobRequest req = Job("s", 1, 300).req;
  sched::Binding b{"s", {sched::Placement{"a", {0}, 300, 0}}};
  u.Apply(req, b, +1);
  EXPECT_EQ(u.allocated_milli(), 300);
  EXPECT_DOUBLE_EQ(u.fragmentation_pct(), 8.75);
  EXPECT_EQ(u.HeldMask("a"), 1u);
  EXPECT_EQ(u.HeldMask("b"), 0u);
  u.Apply(req, b, -1);
  EXPECT_EQ(u.allocated_milli(), 0);
  EXPECT_DOUBLE_EQ(u.fragmentation_pct(), 0);
  EXPECT_EQ(u.HeldMask("a"), 0u);
}

// An empty cluster is already fragmented for tasks larger than its nodes:
// a 4-GPU task strands every GPU of a 2-GPU node (FGD's definition).
TEST(ClusterUsage, TasksLargerThanANodeStrandItsGpus) {
  Cluster c;
  c.nodes = {Node("small", 2), Node("big", 4)};
  ClusterUsage u(c, TargetWorkload({Job("x", 4)}));
  EXPECT_DOUBLE_EQ(u.fragmentation_pct(), 100.0 * 2000 / 6000);
}

TEST(Recorder, AllocationByDemandInPacking) {
  Cluster c;
  c.nodes = {Node("a", 2)};
  std::vector<SimJob> jobs = {Job("j1", 1), Job("j2", 1), Job("j3", 1)};
  Recorder r(c, jobs, Mode::kPacking);
  r.Sample(0, 0, 0, 0);
  r.Arrived(0);
  r.Started(0, {"j1", {sched::Placement{"a", {0}, 1000, 0}}}, 0);
  r.Sample(0, 1, 0, 1);
  r.Arrived(1);
  r.Started(1, {"j2", {sched::Placement{"a", {1}, 1000, 0}}}, 0);
  r.Sample(0, 2, 0, 2);
  r.Arrived(2);
  r.Stopped(2, 0, JobEnd::kFailed);
  r.Sample(0, 3, 0, 2);
  Summary s = r.Finish(0, 0);
  EXPECT_EQ(s.failed, 1);
  EXPECT_DOUBLE_EQ(s.failed_demand_pct, 50);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(0), 0);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(1), 50);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(50), 50);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(51), 100);
  EXPECT_DOUBLE_EQ(s.allocation_by_demand.at(130), 100);
  EXPECT_EQ(s.allocation_by_demand.size(), 131u);
}

// ------------------------------------------------------------------ report --

TEST(TimeseriesCsv, ThinsToAGridKeepingFirstAndLast) {
  std::vector<Sample> samples;
  for (int i = 0; i <= 100; ++i) samples.push_back(Sample{i * 1000, 0, static_cast<double>(i), 0, 0, 0});
  std::string csv = TimeseriesCsv(samples, Mode::kTime, 5);
  EXPECT_EQ(csv,
            "time_s,arrived_pct,allocation_pct,fragmentation_pct,pending,running\n"
            "0.000,0.0000,0.0000,0.0000,0,0\n"
            "25.000,0.0000,25.0000,0.0000,0,0\n"
            "50.000,0.0000,50.0000,0.0000,0,0\n"
            "75.000,0.0000,75.0000,0.0000,0,0\n"
            "100.000,0.0000,100.0000,0.0000,0,0\n");
  std::string all = TimeseriesCsv(samples, Mode::kTime);
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 102);  // header + every sample
}

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Without gnuplot the page says so and keeps its tables.
TEST(WriteReport, WithoutGnuplotStillWritesEverything) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("drover-sim-report-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Cluster c;
  c.name = "tiny";
  c.nodes = {Node("a", 2)};
  RunResult run;
  run.jobs = {Job("j1", 1)};
  Recorder r(c, run.jobs, Mode::kPacking);
  r.Sample(0, 0, 0, 0);
  r.Arrived(0);
  r.Started(0, {"j1", {sched::Placement{"a", {0}, 1000, 0}}}, 0);
  r.Sample(0, 1, 0, 1);
  run.summary = r.Finish(0, 0.5);
  run.samples = r.samples();
  run.records = r.records();
  RunInfo info;
  info.command = "drover sim --mode packing <test>";
  info.cluster = "tiny";
  info.options.mode = Mode::kPacking;
  ASSERT_TRUE(WriteReport(dir.string(), info, run, {"/nonexistent/gnuplot"}).ok());
  std::string html = Slurp(dir / "report.html");
  EXPECT_NE(html.find("Charts are missing"), std::string::npos);
  EXPECT_NE(html.find("&lt;test&gt;"), std::string::npos);  // escaped
  EXPECT_NE(html.find("<table>"), std::string::npos);
  std::string json = Slurp(dir / "summary.json");
  EXPECT_NE(json.find("\"allocation_by_demand\""), std::string::npos);
  EXPECT_NE(json.find("\"50\": 50.0"), std::string::npos);
  EXPECT_NE(Slurp(dir / "jobs.csv").find("j1,default,1,0.000,0.000,,,0.000,0,started"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace drover::sim
