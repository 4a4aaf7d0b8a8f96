#include "drover/sim/loaders.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "drover/sim/test_traces.h"

namespace drover::sim {
namespace {

using ::testing::HasSubstr;

const std::string kTraces = TracesDir();
const std::string kData = DROVER_SIM_TESTDATA_DIR;

// The public traces are not in the repository (test_traces.h); without them
// the trace tests have nothing to check.
#define REQUIRE_TRACES() DROVER_REQUIRE_TRACES()

Workload MustLoad(const std::string& spec) {
  auto w = LoadWorkload(spec);
  EXPECT_TRUE(w.ok()) << spec << ": " << w.status().ToString();
  return w.ok() ? std::move(w).value() : Workload{};
}
Cluster MustLoadCluster(const std::string& spec) {
  auto c = LoadCluster(spec);
  EXPECT_TRUE(c.ok()) << spec << ": " << c.status().ToString();
  return c.ok() ? std::move(c).value() : Cluster{};
}
std::string WorkloadError(const std::string& spec) {
  auto w = LoadWorkload(spec);
  EXPECT_FALSE(w.ok()) << spec << " loaded";
  return w.status().message();
}
std::string ClusterError(const std::string& spec) {
  auto c = LoadCluster(spec);
  EXPECT_FALSE(c.ok()) << spec << " loaded";
  return c.status().message();
}
void ExpectSorted(const Workload& w) {
  for (size_t i = 1; i < w.jobs.size(); ++i) ASSERT_LE(w.jobs[i - 1].submit_ms, w.jobs[i].submit_ms) << i;
}
double GpuHours(const Workload& w) {
  double ms = 0;
  for (const auto& j : w.jobs) ms += static_cast<double>(j.req.milli()) / 1000.0 * static_cast<double>(j.duration_ms);
  return ms / 3.6e6;
}

// ---- the real traces: README row counts ----

TEST(TraceTest, ItpRawAndElasticflowLoadWithReadmeCounts) {
  REQUIRE_TRACES();
  const std::map<std::string, std::pair<size_t, double>> kFiles = {
      // jobs, GPU-hours
      {"cluster01", {1595, 22740}},  {"cluster02", {5778, 123748}}, {"cluster03", {3011, 165443}},
      {"cluster05", {3629, 14303}},  {"cluster06", {2396, 123879}}, {"cluster08", {13047, 67100}},
      {"cluster09", {11134, 39001}}, {"cluster10", {260, 4023}}};
  size_t total = 0;
  for (const auto& [name, want] : kFiles) {
    for (const char* dir : {"raw", "elasticflow"}) {
      Workload w = MustLoad(fmt::format("itp:{}/microsoft-itp-elasticflow/{}/{}.csv", kTraces, dir, name));
      EXPECT_EQ(w.jobs.size(), want.first) << dir << "/" << name;
      EXPECT_NEAR(GpuHours(w), want.second, 1.0) << dir << "/" << name;
      ExpectSorted(w);
      if (std::string(dir) == "raw") total += w.jobs.size();
    }
  }
  EXPECT_EQ(total, 40'850u);
  Workload testbed = MustLoad("itp:" + kTraces + "/microsoft-itp-elasticflow/elasticflow/195job.csv");
  EXPECT_EQ(testbed.jobs.size(), 195u);
}

TEST(TraceTest, ItpGangsAndClusterSizing) {
  REQUIRE_TRACES();
  const std::string raw = kTraces + "/microsoft-itp-elasticflow/raw/";
  Workload w = MustLoad("itp:" + raw + "cluster01.csv");
  ASSERT_FALSE(w.jobs.empty());
  // The first row: 965d744f-..., 1932025 s, 2429 s, 64 GPUs -> 8 x 8.
  const SimJob* first = nullptr;
  for (const auto& j : w.jobs) {
    if (j.req.id == "965d744f-0445-c1a8-12af-97e4c536c66e") first = &j;
    EXPECT_LE(j.req.gpus, 8);
    EXPECT_EQ(j.req.tenant, "default");
  }
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->submit_ms, 1'932'025'000);
  EXPECT_EQ(first->duration_ms, 2'429'000);
  EXPECT_EQ(first->req.replicas, 8);
  EXPECT_EQ(first->req.gpus, 8);

  const std::map<std::string, size_t> kNodes = {
      {"cluster01", 64}, {"cluster03", 64}, {"cluster08", 128}, {"cluster09", 128}, {"cluster10", 32}};
  for (const auto& [name, nodes] : kNodes) {
    Cluster c = MustLoadCluster("itp:" + raw + name + ".csv");
    EXPECT_EQ(c.nodes.size(), nodes) << name;
    EXPECT_EQ(c.gpus(), static_cast<int64_t>(nodes * 8)) << name;
  }
  Cluster c = MustLoadCluster("itp:" + raw + "cluster01.csv");
  ASSERT_EQ(c.nodes.size(), 64u);
  const auto& n = c.nodes[17];
  EXPECT_EQ(n.name, "cluster01-17");
  EXPECT_TRUE(n.schedulable);
  EXPECT_EQ(n.labels.at("rack"), "rack-1");
  EXPECT_EQ(n.labels.at("switch"), "switch-4");
  ASSERT_EQ(n.gpus.size(), 8u);
  EXPECT_EQ(n.gpus[0].model, "A100 80GB");
  EXPECT_EQ(n.gpus[3].numa_node, 0);
  EXPECT_EQ(n.gpus[4].numa_node, 1);
  ASSERT_EQ(n.links.size(), 64u);
  for (auto l : n.links) EXPECT_EQ(l, sched::Link::kFabric);
  EXPECT_EQ(MustLoadCluster("itp:" + kTraces + "/microsoft-itp-elasticflow/elasticflow/195job.csv").gpus(), 128);
}

TEST(TraceTest, Pai2023DefaultPodList) {
  REQUIRE_TRACES();
  Workload w = MustLoad("pai2023:" + kTraces + "/alibaba-pai-2023/openb_pod_list_default.csv");
  ASSERT_EQ(w.jobs.size(), 8152u);
  ExpectSorted(w);
  std::map<int, int> by_gpus;
  std::map<std::string, int> by_tenant;
  int sharing = 0, never_ends = 0;
  int64_t milli = 0;
  for (const auto& j : w.jobs) {
    by_gpus[j.req.gpus]++;
    by_tenant[j.req.tenant]++;
    if (j.req.fractional()) sharing++;
    if (j.duration_ms == 0) never_ends++;
    milli += j.req.milli();
    EXPECT_TRUE(j.req.gpu_models.empty()) << j.req.id;
    EXPECT_EQ(j.req.gpu_memory_bytes, 0);
    EXPECT_GT(j.req.cpu_milli, 0) << j.req.id;
  }
  EXPECT_EQ(by_gpus, (std::map<int, int>{{0, 1088}, {1, 6989}, {2, 16}, {4, 15}, {8, 44}}));
  EXPECT_EQ(sharing, 3078);
  EXPECT_EQ(by_tenant, (std::map<std::string, int>{{"be", 3398}, {"burstable", 100}, {"guaranteed", 7}, {"ls", 4647}}));
  EXPECT_EQ(never_ends, 897);   // the Pending pods (empty scheduled_time)
  EXPECT_EQ(milli, 6'086'800);  // 6,086.8 GPUs
  // openb-pod-0001: 6000 mCPU, 12288 MiB, 1 GPU at 460 milli, LS, created 427061 s, ran 12902960 - 427061 s.
  auto it = std::find_if(w.jobs.begin(), w.jobs.end(), [](const SimJob& j) { return j.req.id == "openb-pod-0001"; });
  ASSERT_NE(it, w.jobs.end());
  EXPECT_EQ(it->req.cpu_milli, 6000);
  EXPECT_EQ(it->req.memory_bytes, int64_t{12288} << 20);
  EXPECT_EQ(it->req.gpu_milli, 460);
  EXPECT_EQ(it->submit_ms, 427'061'000);
  EXPECT_EQ(it->duration_ms, (12'902'960 - 427'061) * int64_t{1000});
}

TEST(TraceTest, Pai2023VariantsLoad) {
  REQUIRE_TRACES();
  // Row counts of the files (the README's ranges for the multigpu and
  // gpushare variants are looser than the files; these are the files').
  const std::map<std::string, size_t> kPods = {
      {"cpu0", 7064},       {"cpu037", 7336},     {"cpu050", 7439},     {"cpu072", 7608},    {"cpu100", 7853},
      {"cpu200", 8832},     {"cpu235", 9240},     {"cpu250", 9420},     {"cpu300", 10094},   {"gpushare20", 8152},
      {"gpushare40", 8152}, {"gpushare60", 8152}, {"gpushare80", 8152}, {"gpuspec05", 8152}, {"gpuspec10", 8152},
      {"gpuspec20", 8152},  {"multigpu20", 8324}, {"multigpu30", 8508}, {"multigpu40", 8746}};
  for (const auto& [name, pods] : kPods) {
    Workload w = MustLoad(fmt::format("pai2023:{}/alibaba-pai-2023/openb_pod_list_{}.csv", kTraces, name));
    EXPECT_EQ(w.jobs.size(), pods) << name;
    int gpu_pods = 0, constrained = 0, sharing = 0;
    for (const auto& j : w.jobs) {
      gpu_pods += j.req.gpus > 0;
      constrained += !j.req.gpu_models.empty();
      sharing += j.req.fractional();
    }
    if (name.starts_with("cpu")) {
      EXPECT_EQ(gpu_pods, 7064) << name;
    }
    if (name == "gpushare20") {
      EXPECT_EQ(sharing, 2324);
    }
    if (name == "gpuspec05") {
      EXPECT_EQ(constrained, 369);
    }
    if (name.starts_with("multigpu")) {
      EXPECT_EQ(w.jobs.front().submit_ms, 0) << "no time columns";
      EXPECT_EQ(w.jobs.front().req.tenant, "default");
    }
  }
  // gpu_spec "V100M16|V100M32|V100M32" -> two distinct alternatives.
  Workload spec = MustLoad("pai2023:" + kTraces + "/alibaba-pai-2023/openb_pod_list_gpuspec20.csv");
  std::set<std::vector<std::string>> seen;
  for (const auto& j : spec.jobs) seen.insert(j.req.gpu_models);
  EXPECT_TRUE(seen.contains(std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_TRUE(seen.contains(std::vector<std::string>{"T4"}));
}

TEST(TraceTest, Pai2023NodeLists) {
  REQUIRE_TRACES();
  Cluster gpu = MustLoadCluster("pai2023:" + kTraces + "/alibaba-pai-2023/openb_node_list_gpu_node.csv");
  EXPECT_EQ(gpu.nodes.size(), 1213u);
  EXPECT_EQ(gpu.gpus(), 6212);
  Cluster all = MustLoadCluster("pai2023:" + kTraces + "/alibaba-pai-2023/openb_node_list_all_node.csv");
  EXPECT_EQ(all.nodes.size(), 1523u);
  EXPECT_EQ(all.gpus(), 6212);
  std::map<std::string, int> by_model;
  int cpu_only = 0;
  for (const auto& n : all.nodes) {
    if (n.gpus.empty()) cpu_only++;
    for (const auto& g : n.gpus) by_model[g.model]++;
    EXPECT_GT(n.cpu_milli, 0);
    EXPECT_GT(n.memory_bytes, 0);
    EXPECT_TRUE(n.links.empty()) << "topology-neutral, as in the FGD simulator";
  }
  EXPECT_EQ(cpu_only, 310);
  EXPECT_EQ(
      by_model,
      (std::map<std::string, int>{
          {"A10", 2}, {"G2", 4392}, {"G3", 312}, {"P100", 265}, {"T4", 842}, {"V100M16", 195}, {"V100M32", 204}}));
  EXPECT_EQ(all.nodes[0].name, "openb-node-0000");
  for (const auto& n : all.nodes) {
    for (const auto& g : n.gpus) EXPECT_GT(g.memory_bytes, 0) << g.model;
  }
}

TEST(TraceTest, Pai2020MachineSpec) {
  REQUIRE_TRACES();
  Cluster c = MustLoadCluster("pai2020:" + kTraces + "/alibaba-pai-2020/pai_machine_spec.csv");
  EXPECT_EQ(c.nodes.size(), 1897u);
  EXPECT_EQ(c.gpus(), 6742);
  std::map<std::string, int> nodes_by_model;
  for (const auto& n : c.nodes) nodes_by_model[n.gpus.empty() ? "CPU" : n.gpus[0].model]++;
  EXPECT_EQ(nodes_by_model,
            (std::map<std::string, int>{
                {"CPU", 83}, {"MISC", 280}, {"P100", 798}, {"T4", 497}, {"V100", 104}, {"V100M32", 135}}));
  EXPECT_THAT(WorkloadError("pai2020:" + kTraces + "/alibaba-pai-2020/pai_machine_spec.csv"),
              HasSubstr("only the machine spec"));
}

TEST(TraceTest, PhillyVcTraces) {
  REQUIRE_TRACES();
  const std::map<std::string, size_t> kJobs = {{"11cb48", 19048}, {"6c71a0", 14783}, {"ee9e8c", 5452}, {"ed69ec", 1400},
                                               {"e13805", 938},   {"103959", 2677},  {"0e4a51", 2465}, {"7f04ca", 1461},
                                               {"2869ce", 956},   {"51b7ef", 63}};
  size_t total = 0;
  for (const auto& [vc, jobs] : kJobs) {
    Workload w = MustLoad(fmt::format("philly-vc:{}/philly-derived/pcs-vc-traces/trace_{}.csv", kTraces, vc));
    EXPECT_EQ(w.jobs.size(), jobs) << vc;
    total += w.jobs.size();
    ExpectSorted(w);
    for (const auto& j : w.jobs) {
      ASSERT_EQ(j.req.tenant, vc);
      ASSERT_GT(j.duration_ms, 0);
      ASSERT_LE(j.req.gpus, 8);
    }
  }
  EXPECT_EQ(total, 49'243u);
  // VCs in Helios' table get its node counts; 51b7ef is not there and is
  // sized to its peak demand (32 GPUs).
  EXPECT_EQ(MustLoadCluster("philly-vc:" + kTraces + "/philly-derived/pcs-vc-traces/trace_11cb48.csv").nodes.size(),
            16u);
  EXPECT_EQ(MustLoadCluster("philly-vc:" + kTraces + "/philly-derived/pcs-vc-traces/trace_ee9e8c.csv").gpus(), 512);
  EXPECT_EQ(MustLoadCluster("philly-vc:" + kTraces + "/philly-derived/pcs-vc-traces/trace_51b7ef.csv").nodes.size(),
            4u);
}

TEST(TraceTest, NonJobFilesAreRefusedByName) {
  REQUIRE_TRACES();
  const std::string p = kTraces + "/philly-derived/";
  EXPECT_THAT(WorkloadError("philly-vc:" + p + "helios-artifact/philly_vc.csv"), HasSubstr("Helios table"));
  EXPECT_THAT(WorkloadError("philly-vc:" + p + "helios-artifact/philly_node_sequence.csv"),
              HasSubstr("busy Philly nodes"));
  EXPECT_THAT(WorkloadError("philly-vc:" + p + "alibaba-analysis/philly_runtime.csv"), HasSubstr("synthetic"));
  EXPECT_THAT(WorkloadError("itp:" + kTraces + "/reference-stats/helios_cluster_summary.csv"), HasSubstr("statistics"));
  EXPECT_THAT(WorkloadError("pai2023:" + kTraces + "/alibaba-pai-2023/openb_node_list_gpu_node.csv"),
              HasSubstr("node list"));
  EXPECT_THAT(ClusterError("pai2023:" + kTraces + "/alibaba-pai-2023/openb_pod_list_default.csv"),
              HasSubstr("pod list"));
}

// ---- small inputs ----

TEST(LoaderTest, SpecsNameAFormatOrAYamlFile) {
  EXPECT_THAT(WorkloadError("nope:x.csv"), HasSubstr("format 'nope' is unknown"));
  EXPECT_THAT(WorkloadError(kData + "/itp_bad_int.csv"), HasSubstr("name the trace format"));
  EXPECT_THAT(WorkloadError("itp:"), HasSubstr("no path"));
  EXPECT_THAT(WorkloadError("itp:/no/such/file.csv"), HasSubstr("cannot open"));
  EXPECT_THAT(ClusterError("itp:" + kData + "/itp_quoted.csv"), HasSubstr("cannot tell which ITP cluster"));
  EXPECT_EQ(TraceFormats().size(), 4u);
}

TEST(LoaderTest, QuotedFieldsCrlfAndGangShapes) {
  Workload w = MustLoad("itp:" + kData + "/itp_quoted.csv");
  ASSERT_EQ(w.jobs.size(), 4u);
  // Sorted by submit: job, one (0) / plain (3) / say "hi" (5) / multi\nline (7).
  EXPECT_EQ(w.jobs[0].req.id, "job, one");
  EXPECT_EQ(w.jobs[1].req.id, "plain");
  EXPECT_EQ(w.jobs[1].req.gpus, 2);
  EXPECT_EQ(w.jobs[2].req.id, "say \"hi\"");
  EXPECT_EQ(w.jobs[2].req.replicas, 2);  // 16 -> 2 x 8
  EXPECT_EQ(w.jobs[2].req.gpus, 8);
  EXPECT_EQ(w.jobs[3].req.id, "multi\nline");
  EXPECT_EQ(w.jobs[3].req.replicas, 2);  // 12 -> 2 x 6
  EXPECT_EQ(w.jobs[3].req.gpus, 6);
  EXPECT_EQ(w.jobs[3].duration_ms, 30'000);
}

TEST(LoaderTest, ShapeGang) {
  auto shape = [](int64_t n) {
    GangShape s = ShapeGang(n);
    return std::pair{s.replicas, s.gpus};
  };
  EXPECT_EQ(shape(1), std::pair(1, 1));
  EXPECT_EQ(shape(8), std::pair(1, 8));
  EXPECT_EQ(shape(12), std::pair(2, 6));
  EXPECT_EQ(shape(20), std::pair(3, 7));
  EXPECT_EQ(shape(48), std::pair(6, 8));
  EXPECT_EQ(shape(64), std::pair(8, 8));
}

TEST(LoaderTest, MalformedCsvNamesFileLineAndColumn) {
  const std::map<std::string, std::string> kCases = {
      {"itp_bad_int.csv", "itp_bad_int.csv:3: column 'num_gpu': 'abc' is not an integer"},
      {"itp_negative_duration.csv", "itp_negative_duration.csv:3: column 'duration': '-5' is outside 1.."},
      {"itp_missing_column.csv", "itp_missing_column.csv:1: missing column 'num_gpu'"},
      {"itp_unknown_column.csv", "itp_unknown_column.csv:1: unknown column 'user'"},
      {"empty.csv", "empty.csv: the file is empty"},
      {"itp_header_only.csv", "itp_header_only.csv: no rows after the header"},
      {"unterminated_quote.csv", "unterminated_quote.csv:3: column 'job_id': a quoted field is not closed"},
      {"text_after_quote.csv", "text_after_quote.csv:2: column 'job_id': text after a closing quote"},
      {"field_count.csv", "field_count.csv:3: row has 3 fields, the header has 4"},
      {"blank_line.csv", "blank_line.csv:3: blank line inside the file"},
  };
  for (const auto& [file, want] : kCases) EXPECT_THAT(WorkloadError("itp:" + kData + "/" + file), HasSubstr(want));
}

TEST(LoaderTest, Pai2023SmallFiles) {
  Workload w = MustLoad("pai2023:" + kData + "/pods_small.csv");
  ASSERT_EQ(w.jobs.size(), 5u);
  std::map<std::string, SimJob> by_id;
  for (const auto& j : w.jobs) by_id[j.req.id] = j;
  EXPECT_EQ(by_id["pod-a"].duration_ms, 3'590'000);
  EXPECT_EQ(by_id["pod-a"].req.tenant, "ls");
  EXPECT_EQ(by_id["pod-b"].req.gpu_milli, 460);
  EXPECT_EQ(by_id["pod-b"].req.gpu_models, (std::vector<std::string>{"T4", "V100M16"}));
  EXPECT_EQ(by_id["pod-c"].req.gpus, 0);
  EXPECT_EQ(by_id["pod-c"].req.tenant, "burstable");
  EXPECT_EQ(by_id["pod-c"].req.memory_bytes, int64_t{8192} << 20);
  EXPECT_EQ(by_id["pod-d"].duration_ms, 0) << "deleted before it was scheduled";
  EXPECT_EQ(by_id["pod-d"].req.gpus, 8);
  EXPECT_EQ(by_id["pod-e"].duration_ms, 0) << "pending";
  EXPECT_EQ(by_id["pod-e"].req.gpu_milli, 250);

  EXPECT_THAT(WorkloadError("pai2023:" + kData + "/pods_bad_milli.csv"),
              HasSubstr("pods_bad_milli.csv:3: column 'gpu_milli': '1200' is outside 0..1000"));
  EXPECT_THAT(
      WorkloadError("pai2023:" + kData + "/pods_share_multi.csv"),
      HasSubstr("pods_share_multi.csv:2: column 'gpu_milli': '500' is a share of a GPU, which needs num_gpu = 1"));
  EXPECT_THAT(WorkloadError("pai2023:" + kData + "/pods_negative_time.csv"),
              HasSubstr("pods_negative_time.csv:3: column 'creation_time': '-3' is outside 0.."));

  Cluster c = MustLoadCluster("pai2023:" + kData + "/nodes_small.csv");
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.gpus(), 10);
  EXPECT_EQ(c.nodes[0].gpus[0].memory_bytes, int64_t{32} << 30);
  EXPECT_EQ(c.nodes[1].gpus[1].model, "T4");
  EXPECT_EQ(c.nodes[2].cpu_milli, 32000);
  EXPECT_EQ(c.nodes[2].memory_bytes, int64_t{131072} << 20);
  EXPECT_THAT(ClusterError("pai2023:" + kData + "/nodes_missing_model.csv"),
              HasSubstr("nodes_missing_model.csv:5: column 'model': '' is empty for a node with GPUs"));
}

TEST(LoaderTest, Pai2020AndPhillySmallFiles) {
  Cluster c = MustLoadCluster("pai2020:" + kData + "/pai2020_small.csv");
  ASSERT_EQ(c.nodes.size(), 4u);
  EXPECT_EQ(c.gpus(), 18);
  EXPECT_EQ(c.nodes[0].cpu_milli, 96'000);
  EXPECT_EQ(c.nodes[2].gpus[0].memory_bytes, int64_t{32} << 30);
  EXPECT_THAT(ClusterError("pai2020:" + kData + "/pai2020_bad.csv"),
              HasSubstr("pai2020_bad.csv:3: column 'cap_mem': 'lots' is not an integer"));

  Workload w = MustLoad("philly-vc:" + kData + "/trace_abc123.csv");
  ASSERT_EQ(w.jobs.size(), 4u);
  EXPECT_EQ(w.name, "philly-abc123");
  EXPECT_EQ(w.jobs[0].req.id, "abc123-0");
  EXPECT_EQ(w.jobs[1].submit_ms, 10'500);
  EXPECT_EQ(w.jobs[1].duration_ms, 300'000);  // 3600 GPU-s / 12 GPUs
  EXPECT_EQ(w.jobs[1].req.replicas, 2);
  EXPECT_EQ(w.jobs[2].req.replicas, 6);  // 48 -> 6 x 8
  EXPECT_EQ(w.jobs[2].duration_ms, 2'083);
  EXPECT_EQ(w.jobs[3].req.gpus, 4);
  // No Helios size for abc123: peak demand at 20 s is 1 + 12 + 48 + 4 = 65 GPUs -> 9 nodes.
  Cluster pc = MustLoadCluster("philly-vc:" + kData + "/trace_abc123.csv");
  EXPECT_EQ(pc.nodes.size(), 9u);
  EXPECT_EQ(pc.nodes[0].name, "abc123-0");
  EXPECT_EQ(pc.nodes[0].links[0 * 8 + 1], sched::Link::kPcieSwitch);
  EXPECT_THAT(WorkloadError("philly-vc:" + kData + "/trace_badsvc.csv"),
              HasSubstr("trace_badsvc.csv:3: column 'service': '-1' is outside 0.."));
}

// philly-vc:DIR: every trace_<vc>.csv of the folder on one cluster, each
// VC a tenant with its GPUs as weight and guarantee.
TEST(LoaderTest, PhillyFolderPoolsTheVcs) {
  const std::string dir = kData + "/philly-pool";
  Workload w = MustLoad("philly-vc:" + dir);
  EXPECT_EQ(w.name, "philly-all");
  ASSERT_EQ(w.jobs.size(), 6u);  // 4 + 2; README.txt is not a trace_*.csv
  ExpectSorted(w);
  EXPECT_EQ(w.jobs[0].req.tenant, "abc123");  // both start at 0: file order (abc123 before ed69ec)
  EXPECT_EQ(w.jobs[1].req.id, "ed69ec-0");
  EXPECT_EQ(w.jobs[1].req.tenant, "ed69ec");
  Cluster c = MustLoadCluster("philly-vc:" + dir);
  EXPECT_EQ(c.name, "philly-all");
  ASSERT_EQ(c.nodes.size(), 9u + 8u);  // abc123 at its peak (9 nodes), ed69ec at Helios' 8
  EXPECT_EQ(c.nodes[9].name, "ed69ec-0");
  EXPECT_EQ(c.nodes[9].labels.at("rack"), "rack-1");  // each VC starts a rack
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants[1].name, "ed69ec");
  EXPECT_EQ(c.tenants[1].weight, 64.0);
  EXPECT_EQ(c.tenants[1].guaranteed_gpus.at("P100"), 64);
  EXPECT_THAT(WorkloadError("philly-vc:" + kData + "/golden"), HasSubstr("no trace_<vc>.csv files"));
  EXPECT_THAT(WorkloadError("philly-vc:" + kData + "/no-such-dir/trace_x.csv"), HasSubstr("trace_x.csv"));
}

TEST(LoaderTest, YamlCluster) {
  Cluster c = MustLoadCluster(kData + "/cluster.yaml");
  EXPECT_EQ(c.name, "demo");
  ASSERT_EQ(c.nodes.size(), 12u);
  EXPECT_EQ(c.gpus(), 4 * 8 + 6 * 4);
  EXPECT_EQ(c.nodes[0].name, "h100-0");
  EXPECT_EQ(c.nodes[5].name, "l4-1");
  EXPECT_EQ(c.nodes[11].name, "cpu-1");
  const auto& h = c.nodes[3];
  EXPECT_EQ(h.cpu_milli, 128'000);
  EXPECT_EQ(h.memory_bytes, int64_t{2} << 40);
  EXPECT_EQ(h.gpus[7].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(h.gpus[7].vendor, "nvidia");
  EXPECT_EQ(h.labels.at("pool"), "training");
  EXPECT_EQ(h.labels.at("rack"), "rack-1");
  EXPECT_EQ(h.labels.at("switch"), "switch-3");
  const auto& l4 = c.nodes[4 + 5];  // l4-5: racks continue after h100's two
  EXPECT_EQ(l4.labels.at("rack"), "rack-3");
  EXPECT_FALSE(l4.labels.contains("switch"));
  EXPECT_EQ(l4.cpu_milli, 64'000);
  EXPECT_EQ(l4.links[0 * 4 + 1], sched::Link::kPcieSwitch);
  EXPECT_EQ(l4.links[1 * 4 + 2], sched::Link::kCrossSocket);
  EXPECT_TRUE(c.nodes[10].gpus.empty());
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants[0].name, "research");
  EXPECT_EQ(c.tenants[0].weight, 2.0);
  EXPECT_EQ(c.tenants[0].guaranteed_gpus.at("H100 80GB"), 16);
  EXPECT_EQ(c.tenants[0].borrow_limit, 8);
  EXPECT_EQ(c.tenants[1].borrow_limit, -1);

  EXPECT_THAT(ClusterError(kData + "/cluster_unknown_key.yaml"),
              HasSubstr("cluster_unknown_key.yaml: node_groups[0]: key 'gpu_mem' is unknown"));
  EXPECT_THAT(ClusterError(kData + "/cluster_bad_count.yaml"),
              HasSubstr("cluster_bad_count.yaml: node_groups[0].count: 'many' is not an integer"));
  EXPECT_THAT(ClusterError(kData + "/cluster_list_key.yaml"), HasSubstr("cluster_list_key.yaml: "));
  EXPECT_THAT(ClusterError(kData + "/synthetic.yaml"), HasSubstr("is a workload"));
  EXPECT_THAT(WorkloadError(kData + "/cluster.yaml"), HasSubstr("is a cluster"));
}

}  // namespace
}  // namespace drover::sim
