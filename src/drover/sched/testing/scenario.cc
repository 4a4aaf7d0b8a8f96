// See scenario.h. The Runner keeps its own record of what the script has
// done and prints the scheduler's answers in the transcript format of
// tests/testdata/sched/README.md.

#include "drover/sched/testing/scenario.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drover/common/quantity.h"
#include "drover/common/status.h"
#include "drover/sched/model.h"
#include "drover/sched/scheduler.h"
#include "drover/sched/testing/scenario_syntax.h"

namespace drover::sched::testing {
namespace {

// ---------------------------------------------------------------- runner --

// Runs one scenario: owns the Scheduler and the runner's own record of what
// the script has done (node inventories for `unhealthy`, submission order for
// the pending list, bindings for `show`).
class Runner {
 public:
  explicit Runner(std::string file) : file_(std::move(file)) {}

  // The transcript, or the first failure as "file:line: message".
  Result<std::string> Run(std::string_view text) {
    std::string transcript;
    int number = 0;
    for (std::string_view raw : Split(text, '\n')) {
      ++number;
      std::string_view line = TrimRight(raw);
      transcript += std::string(line) + "\n";
      auto words = Tokenize(line);
      if (!words.ok()) return Fail(number, words.status().message());
      if (words->empty()) continue;
      std::vector<std::string> out;
      if (Status s = Exec(*words, out); !s.ok()) return Fail(number, s.message());
      for (const std::string& o : out) transcript += "  " + o + "\n";
      if (Status s = sched().CheckInvariants(); !s.ok()) {
        return Fail(number, "invariant broken after this line: " + s.ToString());
      }
    }
    while (transcript.size() >= 2 && transcript.ends_with("\n\n")) transcript.pop_back();
    return transcript;
  }

 private:
  Status Fail(int line, std::string_view message) const {
    return InvalidArgument(fmt::format("{}:{}: {}", file_, line, message));
  }

  Scheduler& sched() {
    if (!sched_) sched_ = std::make_unique<Scheduler>(Config{});
    return *sched_;
  }

  Status Exec(const std::vector<std::string>& words, std::vector<std::string>& out) {
    const std::string& verb = words[0];
    Args args(words, 1);
    if (verb == "config") return DoConfig(args);
    if (verb == "tenant") return DoTenant(args, out);
    if (verb == "node") return DoNode(args, out);
    if (verb == "job") return DoJob(args, out);
    if (verb == "never") return DoNever(args, out);
    if (verb == "at" || verb == "advance") return DoTime(verb == "advance", args);
    if (verb == "schedule") return DoSchedule(args, out);
    if (verb == "finish" || verb == "requeue") return DoEnd(verb == "requeue", args, out);
    if (verb == "drain" || verb == "undrain") return DoDrain(verb == "drain", args);
    if (verb == "unhealthy" || verb == "healthy") return DoHealth(verb == "healthy", args, out);
    if (verb == "show") return DoShow(args, out);
    if (verb == "usage") return DoUsage(args, out);
    if (verb == "why") return DoWhy(args, out);
    return InvalidArgument(fmt::format("unknown command '{}'", verb));
  }

  Status DoConfig(Args& a) {
    if (sched_) return InvalidArgument("config must come before every other command");
    Config c;
    if (auto v = a.Take("queue")) {
      DROVER_ASSIGN_OR_RETURN(c.queue, ParseQueuePolicy(*v));
    }
    if (auto v = a.Take("placement")) {
      DROVER_ASSIGN_OR_RETURN(c.placement, ParsePlacementPolicy(*v));
    }
    if (auto v = a.Take("backfill")) {
      DROVER_ASSIGN_OR_RETURN(c.backfill, ParseOnOff(*v));
    }
    if (auto v = a.Take("preemption")) {
      DROVER_ASSIGN_OR_RETURN(c.preemption, ParseOnOff(*v));
    }
    if (auto v = a.Take("aging")) {
      DROVER_ASSIGN_OR_RETURN(c.aging_ms, ParseDurationMs(*v));
    }
    if (auto v = a.Take("grace")) {
      DROVER_ASSIGN_OR_RETURN(c.preemption_grace_ms, ParseDurationMs(*v));
    }
    DROVER_RETURN_IF_ERROR(a.Done(0));
    sched_ = std::make_unique<Scheduler>(c);
    return Status::Ok();
  }

  Status DoTenant(Args& a, std::vector<std::string>& out) {
    TenantInfo t;
    DROVER_ASSIGN_OR_RETURN(t.name, a.Positional(0, "tenant name"));
    if (auto v = a.Take("weight")) {
      char* end = nullptr;
      t.weight = std::strtod(v->c_str(), &end);
      if (v->empty() || *end != '\0') return InvalidArgument(fmt::format("bad weight '{}'", *v));
    }
    for (const std::string& g : a.TakeAll("guarantee")) {
      size_t colon = g.rfind(':');
      if (colon == std::string::npos) return InvalidArgument(fmt::format("bad guarantee '{}' (want \"MODEL\":N)", g));
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(g.substr(colon + 1), "guarantee"));
      t.guaranteed_gpus[g.substr(0, colon)] = static_cast<int>(n);
    }
    if (auto v = a.Take("borrow")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "borrow limit"));
      t.borrow_limit = static_cast<int>(n);
    }
    DROVER_RETURN_IF_ERROR(a.Done(1));
    Report(sched().SetTenant(t), out);
    return Status::Ok();
  }

  Status DoNode(Args& a, std::vector<std::string>& out) {
    NodeInfo n;
    DROVER_ASSIGN_OR_RETURN(n.name, a.Positional(0, "node name"));
    DROVER_ASSIGN_OR_RETURN(int64_t gpus, ParseInt(a.Take("gpus").value_or(""), "gpus"));
    GpuInfo proto{0, a.Take("vendor").value_or("nvidia"), a.Take("model").value_or("H100 80GB"), 80 * kGiB, true, 0};
    if (auto v = a.Take("memory")) {
      DROVER_ASSIGN_OR_RETURN(proto.memory_bytes, ParseBytes(*v));
    }
    for (int i = 0; i < gpus; ++i) {
      n.gpus.push_back(proto);
      n.gpus.back().index = i;
    }
    auto gpu = [&](int i) -> Result<GpuInfo*> {
      if (i >= static_cast<int>(n.gpus.size())) return InvalidArgument(fmt::format("GPU {} beyond gpus={}", i, gpus));
      return &n.gpus[static_cast<size_t>(i)];
    };
    std::vector<std::vector<int>> islands, pcie;
    if (auto v = a.Take("numa")) {
      DROVER_ASSIGN_OR_RETURN(auto groups, ParseGroups(*v));
      for (size_t g = 0; g < groups.size(); ++g) {
        for (int i : groups[g]) {
          DROVER_ASSIGN_OR_RETURN(GpuInfo * info, gpu(i));
          info->numa_node = static_cast<int>(g);
        }
      }
    }
    if (auto v = a.Take("islands")) {
      DROVER_ASSIGN_OR_RETURN(islands, ParseGroups(*v));
    }
    if (auto v = a.Take("pcie")) {
      DROVER_ASSIGN_OR_RETURN(pcie, ParseGroups(*v));
    }
    if (auto v = a.Take("unhealthy")) {
      DROVER_ASSIGN_OR_RETURN(std::vector<int> bad, ParseIndexSet(*v));
      for (int i : bad) {
        DROVER_ASSIGN_OR_RETURN(GpuInfo * info, gpu(i));
        info->healthy = false;
      }
    }
    if (auto v = a.Take("labels")) {
      DROVER_ASSIGN_OR_RETURN(n.labels, ParseLabels(*v));
    }
    n.schedulable = !a.Flag("drained");
    DROVER_RETURN_IF_ERROR(a.Done(1));
    if (!islands.empty() || !pcie.empty()) n.links = LinkMatrix(n.gpus, islands, pcie);
    nodes_[n.name] = n;
    Report(sched().UpsertNode(n), out);
    return Status::Ok();
  }

  // Same island -> fabric; same PCIe group -> switch; else by NUMA node.
  static std::vector<Link> LinkMatrix(const std::vector<GpuInfo>& gpus, const std::vector<std::vector<int>>& islands,
                                      const std::vector<std::vector<int>>& pcie) {
    size_t n = gpus.size();
    auto group_of = [](const std::vector<std::vector<int>>& groups, size_t i) {
      for (size_t g = 0; g < groups.size(); ++g) {
        if (std::find(groups[g].begin(), groups[g].end(), static_cast<int>(i)) != groups[g].end())
          return static_cast<int>(g);
      }
      return -1;
    };
    std::vector<Link> links(n * n, Link::kCrossSocket);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        Link& l = links[i * n + j];
        if (gpus[i].numa_node == gpus[j].numa_node) l = Link::kSameNuma;
        int pi = group_of(pcie, i);
        if (pi >= 0 && pi == group_of(pcie, j)) l = Link::kPcieSwitch;
        int ii = group_of(islands, i);
        if (ii >= 0 && ii == group_of(islands, j)) l = Link::kFabric;
      }
    }
    return links;
  }

  Result<JobRequest> ParseJob(Args& a) {
    JobRequest j;
    DROVER_ASSIGN_OR_RETURN(j.id, a.Positional(0, "job id"));
    if (auto v = a.Take("gpus")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "gpus"));
      j.gpus = static_cast<int>(n);
    }
    if (auto v = a.Take("replicas")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "replicas"));
      j.replicas = static_cast<int>(n);
    }
    if (auto v = a.Take("share")) {
      DROVER_ASSIGN_OR_RETURN(int64_t m, ParseMilliGpu(*v));
      j.gpu_milli = static_cast<int>(m);
    }
    if (auto v = a.Take("memory")) {
      DROVER_ASSIGN_OR_RETURN(j.gpu_memory_bytes, ParseBytes(*v));
    }
    j.gpu_model = a.Take("model").value_or("");
    j.gpu_vendor = a.Take("vendor").value_or("");
    j.tenant = a.Take("tenant").value_or("default");
    if (auto v = a.Take("priority")) {
      DROVER_ASSIGN_OR_RETURN(int64_t n, ParseInt(*v, "priority"));
      j.priority = static_cast<int>(n);
    }
    if (auto v = a.Take("estimate")) {
      DROVER_ASSIGN_OR_RETURN(j.runtime_estimate_ms, ParseDurationMs(*v));
    }
    if (auto v = a.Take("selector")) {
      DROVER_ASSIGN_OR_RETURN(j.node_selector, ParseLabels(*v));
    }
    if (auto v = a.Take("topology")) {
      DROVER_ASSIGN_OR_RETURN(j.topology, ParseTopology(*v));
    }
    j.preemptible = a.Flag("preemptible");
    DROVER_RETURN_IF_ERROR(a.Done(1));
    return j;
  }

  Status DoJob(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(JobRequest j, ParseJob(a));
    Status s = sched().Enqueue(j, now_ms_);
    if (s.ok() && std::find(order_.begin(), order_.end(), j.id) == order_.end()) order_.push_back(j.id);
    Report(s, out);
    return Status::Ok();
  }

  Status DoNever(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(JobRequest j, ParseJob(a));
    std::optional<std::string> why = sched().NeverFits(j);
    out.push_back(why ? fmt::format("never fits: {}", *why) : "fits once the cluster is idle");
    return Status::Ok();
  }

  Status DoTime(bool relative, Args& a) {
    DROVER_ASSIGN_OR_RETURN(std::string v, a.Positional(0, "time"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    DROVER_ASSIGN_OR_RETURN(int64_t t, ParseDurationMs(v));
    if (relative) t += now_ms_;
    if (t < now_ms_) return InvalidArgument(fmt::format("time goes backwards ({} < {})", v, FormatDurationMs(now_ms_)));
    sched();  // a script may start with `at`; the default config applies
    now_ms_ = t;
    return Status::Ok();
  }

  Status DoSchedule(Args& a, std::vector<std::string>& out) {
    DROVER_RETURN_IF_ERROR(a.Done(0));
    Decisions d = sched().Schedule(now_ms_);
    for (const Binding& b : d.bindings) {
      out.push_back("bind " + FormatBinding(b));
      bound_[b.job_id] = b;
    }
    for (const Preemption& p : d.preemptions) {
      out.push_back(
          fmt::format("preempt {} for {}: {} (grace {})", p.job_id, p.for_job, p.reason, FormatDurationMs(p.grace_ms)));
    }
    if (d.bindings.empty() && d.preemptions.empty()) out.push_back("(no decisions)");
    ListPending(out);
    return Status::Ok();
  }

  void ListPending(std::vector<std::string>& out) {
    for (const std::string& id : order_) {
      if (sched().IsPending(id)) out.push_back(fmt::format("pending {}: {}", id, sched().PendingReason(id)));
    }
  }

  Status DoEnd(bool requeue, Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string id, a.Positional(0, "job id"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    if (requeue) {
      Status s = sched().Requeue(id, now_ms_);
      if (s.ok()) bound_.erase(id);
      Report(s, out);
    } else {
      sched().Remove(id, now_ms_);
      bound_.erase(id);
      std::erase(order_, id);
    }
    return Status::Ok();
  }

  Status DoDrain(bool drain, Args& a) {
    DROVER_ASSIGN_OR_RETURN(std::string node, a.Positional(0, "node name"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return InvalidArgument(fmt::format("unknown node '{}'", node));
    it->second.schedulable = !drain;
    sched().SetSchedulable(node, !drain);
    return Status::Ok();
  }

  // Re-sends the node's inventory with GPUs marked (un)healthy, as the server
  // does when an agent reports a device change.
  Status DoHealth(bool healthy, Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string node, a.Positional(0, "node name"));
    DROVER_ASSIGN_OR_RETURN(std::string which, a.Positional(1, "GPU indices"));
    DROVER_RETURN_IF_ERROR(a.Done(2));
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return InvalidArgument(fmt::format("unknown node '{}'", node));
    DROVER_ASSIGN_OR_RETURN(std::vector<int> idx, ParseIndexSet(which));
    for (int i : idx) {
      if (i >= static_cast<int>(it->second.gpus.size()))
        return InvalidArgument(fmt::format("node '{}' has no GPU {}", node, i));
      it->second.gpus[static_cast<size_t>(i)].healthy = healthy;
    }
    Report(sched().UpsertNode(it->second), out);
    return Status::Ok();
  }

  Status DoShow(Args& a, std::vector<std::string>& out) {
    DROVER_RETURN_IF_ERROR(a.Done(0));
    for (const auto& [id, b] : bound_) {
      out.push_back(fmt::format("bound {}{}", FormatBinding(b), sched().IsPreempting(id) ? " (preempting)" : ""));
    }
    ListPending(out);
    for (const auto& [name, n] : nodes_) {
      uint64_t held = sched().HeldMask(name);
      std::vector<int> idx;
      for (int i = 0; i < kMaxGpusPerNode; ++i) {
        if ((held >> i) & 1U) idx.push_back(i);
      }
      out.push_back(fmt::format("node {}: {} of {} GPUs held{}{}", name, idx.size(), n.gpus.size(),
                                idx.empty() ? "" : " [" + FormatIndices(idx) + "]", n.schedulable ? "" : ", drained"));
    }
    return Status::Ok();
  }

  Status DoUsage(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string tenant, a.Positional(0, "tenant name"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    Scheduler::TenantUsage u = sched().Usage(tenant);
    out.push_back(fmt::format("usage {}: gpus={} memory={} borrowed={}", tenant, FormatMilliGpu(u.milli_gpus),
                              FormatBytes(u.memory_bytes), FormatMilliGpu(u.borrowed_milli)));
    return Status::Ok();
  }

  Status DoWhy(Args& a, std::vector<std::string>& out) {
    DROVER_ASSIGN_OR_RETURN(std::string id, a.Positional(0, "job id"));
    DROVER_RETURN_IF_ERROR(a.Done(1));
    std::string why = sched().PendingReason(id);
    out.push_back(why.empty() ? fmt::format("{} is not pending", id) : fmt::format("pending {}: {}", id, why));
    return Status::Ok();
  }

  static void Report(const Status& s, std::vector<std::string>& out) {
    if (!s.ok()) out.push_back("error: " + s.ToString());
  }

  std::string file_;
  std::unique_ptr<Scheduler> sched_;
  int64_t now_ms_ = 0;
  std::map<std::string, NodeInfo> nodes_;
  std::vector<std::string> order_;  // submission order; a requeued job keeps its place
  std::map<std::string, Binding> bound_;
};

}  // namespace

Result<std::string> RunScenario(std::string file, std::string_view text) { return Runner(std::move(file)).Run(text); }

// ------------------------------------------------------------------ diff --

std::vector<std::string> Lines(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view l : Split(text, '\n')) out.emplace_back(l);
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string UnifiedDiff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;) {
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  }
  struct Op {
    char kind;      // ' ', '-', '+'
    size_t ai, bi;  // line numbers (0-based) before this op
    const std::string* text;
  };
  std::vector<Op> ops;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      ops.push_back({' ', i, j, &a[i]});
      ++i, ++j;
    } else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) {
      ops.push_back({'-', i, j, &a[i]});
      ++i;
    } else {
      ops.push_back({'+', i, j, &b[j]});
      ++j;
    }
  }
  constexpr size_t kContext = 3;
  std::vector<bool> shown(ops.size(), false);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].kind == ' ') continue;
    for (size_t c = k > kContext ? k - kContext : 0; c <= std::min(ops.size() - 1, k + kContext); ++c) shown[c] = true;
  }
  std::string out;
  for (size_t k = 0; k < ops.size();) {
    if (!shown[k]) {
      ++k;
      continue;
    }
    size_t end = k;
    size_t alen = 0, blen = 0;
    while (end < ops.size() && shown[end]) {
      alen += ops[end].kind != '+';
      blen += ops[end].kind != '-';
      ++end;
    }
    out += fmt::format("@@ -{},{} +{},{} @@\n", ops[k].ai + 1, alen, ops[k].bi + 1, blen);
    for (; k < end; ++k) out += fmt::format("{}{}\n", ops[k].kind, *ops[k].text);
  }
  return out;
}

}  // namespace drover::sched::testing
