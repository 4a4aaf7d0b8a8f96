#include "drover/sim/loaders.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <unordered_set>

#include "drover/common/config.h"
#include "drover/common/ids.h"
#include "drover/common/quantity.h"
#include "drover/sim/cluster_yaml.h"
#include "drover/sim/csv_reader.h"
#include "drover/sim/synthetic.h"

namespace drover::sim {
namespace {

// The strict CSV reader (csv_reader.h) and the node groups and YAML clusters
// (cluster_yaml.h) live beside this file.
using detail::AddGroup;
using detail::BaseName;
using detail::Csv;
using detail::MakeNode;
using detail::NodeGroup;
using detail::ParseYaml;
using detail::ReadFile;
using detail::Scalar;
using detail::Stem;
using detail::UniformCluster;
using detail::Wiring;
using detail::YamlCluster;

// A run time or submit time beyond a century is a unit mistake.
constexpr int64_t kMaxSeconds = 100LL * 365 * 86'400;
// kMaxReplicas of the scheduler: larger gangs could never be enqueued.
constexpr int64_t kMaxGangGpus = 8LL * 4096;
// The most nodes a cluster may have, as for YAML clusters (cluster_yaml.cc):
// a Philly VC sized by its jobs' peak demand can otherwise ask for millions
// from a few hundred rows of 32,768-GPU jobs (tests/fuzz/regressions/
// trace_csv_fuzz).
constexpr int64_t kMaxClusterNodes = 200'000;

Status TooManyNodes(const std::string& file, int64_t nodes) {
  return InvalidArgument(
      fmt::format("{}: the jobs' peak demand needs {} nodes, more than {}", file, nodes, kMaxClusterNodes));
}

// Files of the trace folder that hold no jobs, recognised by their header so
// the error says what they are instead of listing unknown columns.
Status RefuseNonJobFile(const Csv& csv) {
  const std::string header = fmt::format("{}", fmt::join(csv.header(), ","));
  std::string what;
  if (header == "vc,node num") {
    what = "the Helios table of Philly VC sizes, not a job list (philly-vc:trace_<vc>.csv clusters use it, built in)";
  } else if (header == "time,active,total") {
    what = "a per-minute count of busy Philly nodes, not a job list";
  } else if (header == "runtime") {
    what = "a distribution of Philly run times without submit times or GPU counts; use a kind: synthetic workload";
  } else if (csv.Has("job_num") && csv.Has("avg_run_time_gpu")) {
    what = "published per-cluster statistics, not a job list";
  } else if (csv.Has("sn") && csv.Has("model")) {
    what = "a node list: load it as the cluster (LoadCluster), not as the workload";
  } else {
    return Status::Ok();
  }
  return InvalidArgument(fmt::format("{}: this file is {}", csv.file(), what));
}

// Sorts by submit time, keeping file order among equal times, and checks ids.
Result<Workload> Finish(Workload w, const std::string& file) {
  std::unordered_set<std::string> ids;
  ids.reserve(w.jobs.size());
  for (const auto& j : w.jobs) {
    if (!ids.insert(j.req.id).second) {
      return InvalidArgument(fmt::format("{}: job id '{}' appears twice", file, j.req.id));
    }
  }
  std::stable_sort(w.jobs.begin(), w.jobs.end(),
                   [](const SimJob& a, const SimJob& b) { return a.submit_ms < b.submit_ms; });
  return w;
}

// ---- itp: Microsoft ITP via ElasticFlow ----

Result<Cluster> ItpCluster(const std::string& path) {
  if (!std::ifstream(path)) return NotFound(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  const std::string stem = Stem(path);
  // ElasticFlow's simulation sizes; 195job.csv ran on their 128-GPU testbed.
  static const std::map<std::string, int> kNodes = {{"cluster01", 64},  {"cluster02", 64},  {"cluster03", 64},
                                                    {"cluster04", 128}, {"cluster05", 64},  {"cluster06", 64},
                                                    {"cluster07", 128}, {"cluster08", 128}, {"cluster09", 128},
                                                    {"cluster10", 32},  {"195job", 16}};
  auto it = kNodes.find(stem);
  if (it == kNodes.end()) {
    return InvalidArgument(fmt::format(
        "{}: cannot tell which ITP cluster this is from the file name (expected cluster01 ... cluster10 or 195job); "
        "use a YAML cluster",
        BaseName(path)));
  }
  NodeGroup g{.name = stem == "195job" ? "testbed" : stem,
              .count = it->second,
              .gpus = 8,
              .model = "A100 80GB",
              .gpu_memory = 80 * kGiB,
              .wiring = Wiring::kHgx,
              .per_rack = 16,
              .per_switch = 4,
              .labels = {}};
  return UniformCluster("itp-" + stem, g);
}

Result<Workload> ItpWorkload(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(Csv csv, Csv::Read(path));
  DROVER_RETURN_IF_ERROR(RefuseNonJobFile(csv));
  DROVER_RETURN_IF_ERROR(csv.Expect({"job_id", "submission_time", "duration", "num_gpu"},
                                    {"num_iteration", "model_name", "deadline", "batch_size"}));
  const int c_id = csv.Col("job_id"), c_submit = csv.Col("submission_time"), c_dur = csv.Col("duration"),
            c_gpu = csv.Col("num_gpu");
  Workload w;
  w.name = "itp-" + Stem(path);
  w.jobs.reserve(csv.size());
  for (size_t r = 0; r < csv.size(); ++r) {
    SimJob j;
    j.req.id = std::string(csv.Get(r, c_id));
    if (j.req.id.empty()) return csv.Bad(r, c_id, "is empty");
    DROVER_ASSIGN_OR_RETURN(int64_t submit, csv.Int(r, c_submit, 0, kMaxSeconds));
    DROVER_ASSIGN_OR_RETURN(int64_t dur, csv.Int(r, c_dur, 1, kMaxSeconds));
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(r, c_gpu, 1, kMaxGangGpus));
    GangShape shape = ShapeGang(gpus);
    j.req.replicas = shape.replicas;
    j.req.gpus = shape.gpus;
    j.submit_ms = submit * 1000;
    j.duration_ms = dur * 1000;
    w.jobs.push_back(std::move(j));
  }
  return Finish(std::move(w), csv.file());
}

// ---- pai2023: Alibaba PAI GPU-sharing cluster (openb) ----

Result<Cluster> PaiNodeCluster(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(Csv csv, Csv::Read(path));
  if (csv.Has("name") && csv.Has("num_gpu")) {
    return InvalidArgument(
        fmt::format("{}: this is a pod list; a pai2023 cluster is a node list (openb_node_list_*.csv)", csv.file()));
  }
  DROVER_RETURN_IF_ERROR(csv.Expect({"sn", "cpu_milli", "memory_mib", "gpu", "model"}, {}));
  const int c_sn = csv.Col("sn"), c_cpu = csv.Col("cpu_milli"), c_mem = csv.Col("memory_mib"), c_gpu = csv.Col("gpu"),
            c_model = csv.Col("model");
  Cluster c;
  c.name = Stem(path);
  std::unordered_set<std::string> names;
  for (size_t r = 0; r < csv.size(); ++r) {
    NodeGroup g;
    g.name = std::string(csv.Get(r, c_sn));
    if (!ValidateNodeName(g.name).ok()) return csv.Bad(r, c_sn, "is not a valid node name (RFC 1123 label)");
    if (!names.insert(g.name).second) return csv.Bad(r, c_sn, "appears twice");
    DROVER_ASSIGN_OR_RETURN(g.cpu_milli, csv.Int(r, c_cpu, 0, 1'000'000'000));
    DROVER_ASSIGN_OR_RETURN(int64_t mib, csv.Int(r, c_mem, 0, 1'000'000'000));
    g.memory_bytes = mib * kMiB;
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(r, c_gpu, 0, sched::kMaxGpusPerNode));
    g.gpus = static_cast<int>(gpus);
    g.model = std::string(csv.Get(r, c_model));
    if (g.gpus > 0 && g.model.empty()) return csv.Bad(r, c_model, "is empty for a node with GPUs");
    g.gpu_memory = PaiGpuMemoryBytes(g.model);
    sched::NodeInfo n = MakeNode(g);
    n.name = g.name;
    c.nodes.push_back(std::move(n));
  }
  return c;
}

Result<Workload> PaiPodWorkload(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(Csv csv, Csv::Read(path));
  DROVER_RETURN_IF_ERROR(RefuseNonJobFile(csv));
  DROVER_RETURN_IF_ERROR(
      csv.Expect({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
                 {"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"}));
  const int c_name = csv.Col("name"), c_cpu = csv.Col("cpu_milli"), c_mem = csv.Col("memory_mib"),
            c_gpu = csv.Col("num_gpu"), c_milli = csv.Col("gpu_milli"), c_spec = csv.Col("gpu_spec"),
            c_qos = csv.Col("qos"), c_create = csv.Col("creation_time"), c_del = csv.Col("deletion_time"),
            c_sched = csv.Col("scheduled_time");
  Workload w;
  w.name = Stem(path);
  w.jobs.reserve(csv.size());
  for (size_t r = 0; r < csv.size(); ++r) {
    SimJob j;
    j.req.id = std::string(csv.Get(r, c_name));
    if (j.req.id.empty()) return csv.Bad(r, c_name, "is empty");
    DROVER_ASSIGN_OR_RETURN(j.req.cpu_milli, csv.Int(r, c_cpu, 0, 1'000'000'000));
    DROVER_ASSIGN_OR_RETURN(int64_t mib, csv.Int(r, c_mem, 0, 1'000'000'000));
    j.req.memory_bytes = mib * kMiB;
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(r, c_gpu, 0, sched::kMaxGpusPerNode));
    DROVER_ASSIGN_OR_RETURN(int64_t milli, csv.Int(r, c_milli, 0, sched::kWholeGpu));
    j.req.gpus = static_cast<int>(gpus);
    if (gpus == 1 && milli == 0) return csv.Bad(r, c_milli, "is 0 for a pod with a GPU (expected 1..1000)");
    if (gpus > 1 && milli != sched::kWholeGpu) {
      return csv.Bad(r, c_milli, fmt::format("is a share of a GPU, which needs num_gpu = 1 (num_gpu is {})", gpus));
    }
    if (gpus == 1) j.req.gpu_milli = static_cast<int>(milli);  // a CPU-only pod keeps 1000: its gpu_milli means nothing
    if (c_spec >= 0 && !csv.Get(r, c_spec).empty()) {
      std::string_view spec = csv.Get(r, c_spec);
      size_t start = 0;
      while (start <= spec.size()) {
        size_t bar = std::min(spec.find('|', start), spec.size());
        std::string model(spec.substr(start, bar - start));
        if (model.empty()) return csv.Bad(r, c_spec, "has an empty GPU model (expected e.g. V100M16|V100M32)");
        if (std::find(j.req.gpu_models.begin(), j.req.gpu_models.end(), model) == j.req.gpu_models.end()) {
          j.req.gpu_models.push_back(std::move(model));
        }
        start = bar + 1;
      }
    }
    if (c_qos >= 0 && !csv.Get(r, c_qos).empty()) {
      std::string tenant(csv.Get(r, c_qos));
      for (char& ch : tenant) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (!ValidateName("tenant", tenant).ok()) return csv.Bad(r, c_qos, "is not a valid tenant name");
      j.req.tenant = std::move(tenant);
    }
    // Times in seconds; -1 = empty (scheduled_time is empty for Pending pods).
    int64_t t[3] = {0, -1, -1};
    const int cols[3] = {c_create, c_sched, c_del};
    for (int k = 0; k < 3; ++k) {
      if (cols[k] < 0 || (k > 0 && csv.Get(r, cols[k]).empty())) continue;
      DROVER_ASSIGN_OR_RETURN(t[k], csv.Int(r, cols[k], 0, kMaxSeconds));
    }
    j.submit_ms = t[0] * 1000;
    if (t[1] >= 0 && t[2] > t[1]) j.duration_ms = (t[2] - t[1]) * 1000;
    w.jobs.push_back(std::move(j));
  }
  return Finish(std::move(w), csv.file());
}

// ---- pai2020: machine spec of the 2020 PAI cluster (no header) ----

Result<Cluster> Pai2020Cluster(const std::string& path) {
  const std::vector<std::string> columns = {"machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"};
  DROVER_ASSIGN_OR_RETURN(Csv csv, Csv::Read(path, columns));
  Cluster c;
  c.name = Stem(path);
  std::unordered_set<std::string> names;
  for (size_t r = 0; r < csv.size(); ++r) {
    if (r == 0 && csv.Get(r, 0) == "machine") continue;  // a header someone added
    NodeGroup g;
    g.name = std::string(csv.Get(r, 0));
    if (!ValidateNodeName(g.name).ok()) return csv.Bad(r, 0, "is not a valid node name (RFC 1123 label)");
    if (!names.insert(g.name).second) return csv.Bad(r, 0, "appears twice");
    DROVER_ASSIGN_OR_RETURN(int64_t cores, csv.Int(r, 2, 0, 1'000'000));
    DROVER_ASSIGN_OR_RETURN(int64_t gib, csv.Int(r, 3, 0, 1'000'000));
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(r, 4, 0, sched::kMaxGpusPerNode));
    g.cpu_milli = cores * 1000;
    g.memory_bytes = gib * kGiB;
    g.gpus = static_cast<int>(gpus);
    g.model = std::string(csv.Get(r, 1));
    if (g.model.empty()) return csv.Bad(r, 1, "is empty (expected a GPU model or CPU)");
    if (g.model == "CPU" && gpus > 0) return csv.Bad(r, 4, "is GPUs on a machine of type CPU");
    if (g.model != "CPU" && gpus == 0) return csv.Bad(r, 4, fmt::format("is no GPUs on a {} machine", g.model));
    if (g.model == "CPU") g.model.clear();
    g.gpu_memory = PaiGpuMemoryBytes(g.model);
    sched::NodeInfo n = MakeNode(g);
    n.name = g.name;
    c.nodes.push_back(std::move(n));
  }
  if (c.nodes.empty()) return InvalidArgument(fmt::format("{}: no machines", csv.file()));
  return c;
}

// ---- philly-vc: PCS per-VC Philly job lists ----

std::string VcName(const std::string& path) {
  std::string stem = Stem(path);
  return stem.starts_with("trace_") ? stem.substr(6) : stem;
}

Result<Workload> PhillyWorkload(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(Csv csv, Csv::Read(path));
  DROVER_RETURN_IF_ERROR(RefuseNonJobFile(csv));
  DROVER_RETURN_IF_ERROR(csv.Expect({"app_id", "submit_time", "service", "num_jobs"}, {"sleep_time", "model_name"}));
  const std::string vc = VcName(path);
  if (!ValidateName("tenant", vc).ok()) {
    return InvalidArgument(
        fmt::format("{}: the VC name '{}' from the file name is not a valid tenant name", csv.file(), vc));
  }
  const int c_id = csv.Col("app_id"), c_submit = csv.Col("submit_time"), c_service = csv.Col("service"),
            c_gpu = csv.Col("num_jobs");
  Workload w;
  w.name = "philly-" + vc;
  w.jobs.reserve(csv.size());
  for (size_t r = 0; r < csv.size(); ++r) {
    SimJob j;
    if (csv.Get(r, c_id).empty()) return csv.Bad(r, c_id, "is empty");
    j.req.id = fmt::format("{}-{}", vc, csv.Get(r, c_id));
    j.req.tenant = vc;
    DROVER_ASSIGN_OR_RETURN(double submit, csv.Real(r, c_submit, 0, static_cast<double>(kMaxSeconds)));
    DROVER_ASSIGN_OR_RETURN(double service, csv.Real(r, c_service, 0, static_cast<double>(kMaxSeconds) * 1000));
    if (service <= 0) return csv.Bad(r, c_service, "is not a positive number of GPU-seconds");
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, csv.Int(r, c_gpu, 1, kMaxGangGpus));
    GangShape shape = ShapeGang(gpus);
    j.req.replicas = shape.replicas;
    j.req.gpus = shape.gpus;
    j.submit_ms = std::llround(submit * 1000);
    j.duration_ms = std::max<int64_t>(1, std::llround(service * 1000 / static_cast<double>(gpus)));
    if (j.duration_ms > kMaxSeconds * 1000) return csv.Bad(r, c_service, "gives a run time over a century");
    w.jobs.push_back(std::move(j));
  }
  return Finish(std::move(w), csv.file());
}

// The VC's nodes: its size in Helios' simulation of Philly
// (philly-derived/helios-artifact/philly_vc.csv), or for a VC Helios does
// not list, its peak concurrent GPU demand if no job ever waited; never
// fewer than the widest gang needs.
int64_t PhillyVcNodes(const std::string& vc, const Workload& w) {
  static const std::map<std::string, int> kHeliosNodes = {
      {"6214e9", 64}, {"7f04ca", 32}, {"11cb48", 16}, {"b436b2", 64}, {"ee9e8c", 64}, {"e13805", 16},
      {"6c71a0", 32}, {"2869ce", 16}, {"ed69ec", 8},  {"103959", 8},  {"0e4a51", 32}};
  int64_t nodes = 0;
  int64_t widest = 1;  // nodes of the largest gang
  for (const auto& j : w.jobs) widest = std::max<int64_t>(widest, j.req.replicas);
  if (auto it = kHeliosNodes.find(vc); it != kHeliosNodes.end()) {
    nodes = it->second;
  } else {
    // Peak GPUs in use if no job ever waited: +gpus at submit, -gpus at end.
    std::vector<std::pair<int64_t, int64_t>> events;
    for (const auto& j : w.jobs) {
      events.emplace_back(j.submit_ms, j.req.milli() / sched::kWholeGpu);
      events.emplace_back(j.submit_ms + j.duration_ms, -j.req.milli() / sched::kWholeGpu);
    }
    std::sort(events.begin(), events.end());  // ends before starts at equal times
    int64_t now = 0, peak = 0;
    for (const auto& e : events) peak = std::max(peak, now += e.second);
    nodes = (peak + 7) / 8;
  }
  return std::max(nodes, widest);
}

NodeGroup PhillyGroup(const std::string& vc, int64_t nodes) {
  return NodeGroup{.name = vc,
                   .count = nodes,
                   .gpus = 8,
                   .model = "P100",
                   .gpu_memory = 16 * kGiB,
                   .wiring = Wiring::kPcie,
                   .per_rack = 16,
                   .per_switch = 4,
                   .labels = {}};
}

// philly-vc:DIR: every trace_<vc>.csv of the folder, in name order.
Result<std::vector<std::string>> PhillyFiles(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.starts_with("trace_") && name.ends_with(".csv")) files.push_back(e.path().string());
  }
  if (ec) return InvalidArgument(fmt::format("{}: {}", dir, ec.message()));
  if (files.empty()) return InvalidArgument(fmt::format("{}: no trace_<vc>.csv files in this folder", dir));
  std::sort(files.begin(), files.end());
  return files;
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

// All VCs on one shared cluster, each VC a tenant: the jobs of every file
// with their own submit times (each file's origin is its first job; the
// PCS traces all cover the same weeks of 2017).
Result<Workload> PhillyPooledWorkload(const std::string& dir) {
  DROVER_ASSIGN_OR_RETURN(std::vector<std::string> files, PhillyFiles(dir));
  Workload all;
  all.name = "philly-all";
  for (const auto& f : files) {
    DROVER_ASSIGN_OR_RETURN(Workload w, PhillyWorkload(f));
    all.jobs.insert(all.jobs.end(), std::make_move_iterator(w.jobs.begin()), std::make_move_iterator(w.jobs.end()));
  }
  return Finish(std::move(all), BaseName(dir));
}

// The VCs' nodes in one cluster (nodes <vc>-<i>, one group per VC, racks
// and switches counted across the cluster), and each VC a tenant whose
// weight is its GPUs and who is guaranteed them: Philly's VC quotas, with
// idle GPUs lent to the others.
Result<Cluster> PhillyPooledCluster(const std::string& dir) {
  DROVER_ASSIGN_OR_RETURN(std::vector<std::string> files, PhillyFiles(dir));
  Cluster c;
  c.name = "philly-all";
  int64_t racks = 0, switches = 0;
  for (const auto& f : files) {
    DROVER_ASSIGN_OR_RETURN(Workload w, PhillyWorkload(f));
    const std::string vc = VcName(f);
    const int64_t nodes = PhillyVcNodes(vc, w);
    if (static_cast<int64_t>(c.nodes.size()) + nodes > kMaxClusterNodes) {
      return TooManyNodes(BaseName(dir), static_cast<int64_t>(c.nodes.size()) + nodes);
    }
    AddGroup(PhillyGroup(vc, nodes), &c, &racks, &switches);
    const int gpus = static_cast<int>(nodes * 8);
    c.tenants.push_back({vc, static_cast<double>(gpus), {{"P100", gpus}}, -1});
  }
  return c;
}

Result<Cluster> PhillyCluster(const std::string& path) {
  if (IsDirectory(path)) return PhillyPooledCluster(path);
  DROVER_ASSIGN_OR_RETURN(Workload w, PhillyWorkload(path));
  const std::string vc = VcName(path);
  const int64_t nodes = PhillyVcNodes(vc, w);
  if (nodes > kMaxClusterNodes) return TooManyNodes(BaseName(path), nodes);
  return UniformCluster("philly-" + vc, PhillyGroup(vc, nodes));
}

// ---- specs ----

struct Spec {
  std::string format;  // "" = YAML
  std::string path;
};

Result<Spec> ParseSpec(std::string_view spec) {
  size_t colon = spec.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    std::string_view prefix = spec.substr(0, colon);
    bool word = std::all_of(prefix.begin(), prefix.end(),
                            [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
    if (word) {
      const auto& known = TraceFormats();
      if (std::find(known.begin(), known.end(), prefix) == known.end()) {
        return InvalidArgument(fmt::format("input '{}': format '{}' is unknown (use {}, or a YAML file)", spec, prefix,
                                           fmt::join(known, ", ")));
      }
      if (colon + 1 == spec.size()) return InvalidArgument(fmt::format("input '{}': no path after the format", spec));
      return Spec{std::string(prefix), std::string(spec.substr(colon + 1))};
    }
  }
  if (spec.empty()) return InvalidArgument("input is empty (use FORMAT:PATH or a YAML file)");
  if (spec.ends_with(".csv")) {
    return InvalidArgument(fmt::format("input '{}': name the trace format, e.g. itp:{} ({})", spec, spec,
                                       fmt::join(TraceFormats(), ", ")));
  }
  return Spec{"", std::string(spec)};
}

}  // namespace

const std::vector<std::string>& TraceFormats() {
  static const std::vector<std::string> kFormats = {"itp", "pai2023", "pai2020", "philly-vc"};
  return kFormats;
}

GangShape ShapeGang(int64_t gpus, int per_node) {
  if (gpus <= per_node) return {1, static_cast<int>(std::max<int64_t>(gpus, 0))};
  int64_t replicas = (gpus + per_node - 1) / per_node;
  return {static_cast<int>(replicas), static_cast<int>((gpus + replicas - 1) / replicas)};
}

int64_t PaiGpuMemoryBytes(std::string_view model) {
  // Public specs; G2/G3 are undisclosed Alibaba codes (assumed 32 GiB), MISC
  // the 2020 trace's older K40m/K80/M60 cards (12 GiB).
  static const std::map<std::string, int64_t, std::less<>> kGiBs = {{"V100M32", 32}, {"V100M16", 16}, {"V100", 16},
                                                                    {"P100", 16},    {"T4", 16},      {"A10", 24},
                                                                    {"G2", 32},      {"G3", 32},      {"MISC", 12}};
  auto it = kGiBs.find(model);
  return it == kGiBs.end() ? 0 : it->second * kGiB;
}

Result<Cluster> LoadCluster(std::string_view text) {
  DROVER_ASSIGN_OR_RETURN(Spec spec, ParseSpec(text));
  Result<Cluster> c = InvalidArgument("unreachable");
  if (spec.format == "itp") {
    c = ItpCluster(spec.path);
  } else if (spec.format == "pai2023") {
    c = PaiNodeCluster(spec.path);
  } else if (spec.format == "pai2020") {
    c = Pai2020Cluster(spec.path);
  } else if (spec.format == "philly-vc") {
    c = PhillyCluster(spec.path);
  } else {
    DROVER_ASSIGN_OR_RETURN(std::string yaml_text, ReadFile(spec.path));
    DROVER_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, BaseName(spec.path)));
    try {
      c = YamlCluster(spec.path, root);
    } catch (const YAML::Exception& e) {  // a key that is not a scalar, say
      return InvalidArgument(fmt::format("{}: {}", BaseName(spec.path), e.what()));
    }
  }
  if (c.ok() && c->nodes.empty()) {
    return InvalidArgument(fmt::format("{}: the cluster has no nodes", BaseName(spec.path)));
  }
  return c;
}

Result<Workload> LoadWorkload(std::string_view text, std::optional<uint64_t> seed) {
  DROVER_ASSIGN_OR_RETURN(Spec spec, ParseSpec(text));
  if (spec.format == "itp") return ItpWorkload(spec.path);
  if (spec.format == "pai2023") return PaiPodWorkload(spec.path);
  if (spec.format == "philly-vc") {
    return IsDirectory(spec.path) ? PhillyPooledWorkload(spec.path) : PhillyWorkload(spec.path);
  }
  if (spec.format == "pai2020") {
    return InvalidArgument(
        fmt::format("{}: the pai2020 trace here is only the machine spec (a cluster); its job tables "
                    "were too large to include",
                    BaseName(spec.path)));
  }
  const std::string file = BaseName(spec.path);
  DROVER_ASSIGN_OR_RETURN(std::string yaml_text, ReadFile(spec.path));
  DROVER_ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml_text, file));
  std::string kind = root["kind"] ? Scalar(root["kind"]) : "";
  if (kind.empty()) {
    if (root["node_groups"]) {
      return InvalidArgument(fmt::format("{}: this is a cluster (node_groups), not a workload", file));
    }
    return InvalidArgument(fmt::format("{}: kind: is missing (a workload file says kind: synthetic)", file));
  }
  if (kind != "synthetic") return InvalidArgument(fmt::format("{}: kind: '{}' is unknown (use synthetic)", file, kind));
  DROVER_ASSIGN_OR_RETURN(SyntheticConfig config, ParseSyntheticConfig(yaml_text, file));
  return GenerateSynthetic(config, seed.value_or(config.seed));
}

}  // namespace drover::sim
