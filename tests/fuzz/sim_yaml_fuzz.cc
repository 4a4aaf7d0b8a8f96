// The simulator's YAML inputs: a cluster file (node_groups:, tenants:;
// sim/cluster_yaml.cc through LoadCluster) and a synthetic workload
// (kind: synthetic; sim/synthetic.cc ParseSyntheticConfig, then
// GenerateSynthetic), and the job shapes of its gpus: mix (ParseJobShape).
// The first byte picks which; the rest is the file.
//
// Both formats let a valid file ask for a lot: 200,000 nodes of 64 GPUs, or
// 20 million jobs. That is the operator's choice, not a parser bug, so the
// target skips files over a budget (kMaxGpus GPUs, kMaxJobs jobs) instead of
// spending the run on allocation.
//
// Properties: as trace_csv_fuzz for what loads; generated jobs are as many
// as asked (count), in arrival order within [start, start + window), with
// run times in [min, max].

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <set>

#include "drover/sim/loaders.h"
#include "drover/sim/synthetic.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;
namespace sched = drover::sched;
namespace sim = drover::sim;

constexpr int64_t kMaxGpus = 20'000;
constexpr int64_t kMaxJobs = 5'000;

int64_t Int(const YAML::Node& n) {
  int64_t v = 0;
  if (!n || !n.IsScalar()) return 0;
  const std::string& s = n.Scalar();
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() ? v : 0;
}

// The GPUs (nodes, for CPU-only groups) the file asks for, roughly; what
// does not parse counts as nothing (the loader refuses it anyway).
int64_t ClusterSize(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || !root["node_groups"] || !root["node_groups"].IsSequence()) return 0;
    int64_t total = 0;
    for (const YAML::Node& g : root["node_groups"]) {
      if (!g.IsMap()) continue;
      const int64_t count = std::clamp<int64_t>(Int(g["count"]), 0, 1'000'000);
      const int64_t gpus = std::clamp<int64_t>(Int(g["gpus_per_node"]), 1, 64);
      total += count * gpus;
    }
    return total;
  } catch (const YAML::Exception&) {
    return 0;
  }
}

void Cluster(std::string_view text) {
  const std::string file(text);
  if (ClusterSize(file) > kMaxGpus) return;
  auto c = sim::LoadCluster(drover::fuzz::WriteTempFile("cluster.yaml", text));
  if (!c.ok()) return;
  FUZZ_CHECK(!c->nodes.empty());
  std::set<std::string> names;
  for (const sched::NodeInfo& n : c->nodes) {
    FUZZ_CHECK(!n.name.empty() && names.insert(n.name).second);
    FUZZ_CHECK(n.gpus.size() <= static_cast<size_t>(sched::kMaxGpusPerNode));
    FUZZ_CHECK(n.links.empty() || n.links.size() == n.gpus.size() * n.gpus.size());
  }
  std::set<std::string> tenants;
  for (const sched::TenantInfo& t : c->tenants) FUZZ_CHECK(tenants.insert(t.name).second && t.weight > 0);
}

void Synthetic(std::string_view text) {
  auto config = sim::ParseSyntheticConfig(text, "workload.yaml");
  if (!config.ok()) return;
  const sim::SyntheticConfig& c = *config;
  // Jobs it would make: count, or for a Poisson stream without one the
  // expected arrivals in the window.
  double jobs = static_cast<double>(c.count);
  if (c.count == 0 && c.arrivals == sim::ArrivalProcess::kPoisson) {
    jobs = c.rate_per_hour * static_cast<double>(c.window_ms) / 3'600'000.0;
  }
  if (!(jobs <= kMaxJobs)) return;
  auto w = sim::GenerateSynthetic(c, c.seed);
  FUZZ_CHECK(w.ok());
  if (c.count > 0 && c.window_ms == 0) FUZZ_CHECK(static_cast<int64_t>(w->jobs.size()) == c.count);
  for (size_t i = 0; i < w->jobs.size(); ++i) {
    const sim::SimJob& j = w->jobs[i];
    FUZZ_CHECK(i == 0 || w->jobs[i - 1].submit_ms <= j.submit_ms);
    FUZZ_CHECK(j.submit_ms >= c.start_ms);
    FUZZ_CHECK(c.window_ms == 0 || j.submit_ms <= c.start_ms + c.window_ms);
    FUZZ_CHECK(j.duration_ms >= c.min_ms && j.duration_ms <= c.max_ms);
    FUZZ_CHECK(j.req.replicas >= 1 && j.req.gpus >= 0 && j.req.gpus <= sched::kMaxGpusPerNode);
  }
}

void Shapes(std::string_view text) {
  auto s = sim::ParseJobShape(text);
  if (!s.ok()) return;
  FUZZ_CHECK(s->replicas >= 1 && s->gpus >= 0 && s->gpus <= sched::kMaxGpusPerNode);
  FUZZ_CHECK(s->gpu_milli >= 1 && s->gpu_milli <= sched::kWholeGpu);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text = AsText(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: Cluster(text); break;
    case 1: Synthetic(text); break;
    default: Shapes(text); break;
  }
  return 0;
}
