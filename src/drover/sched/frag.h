#pragma once
// Fragmentation under a learned workload: the pieces of the `frag`
// placement policy that do not need the scheduler's state, so that tests can
// drive them directly.
//
// The idea is FGD's (Weng et al., "Beware of Fragmentation", USENIX ATC '23):
// a node's free GPU share is a *fragment* for a request shape when that
// shape cannot use it: the node lacks the CPU or memory for it, its GPUs are
// of a model the shape does not accept, too few of its GPUs have the share
// the shape asks per GPU, or (when the shape fits) the part of each GPU's
// free share below what the shape asks per GPU. A node's fragmentation is
// the expected fragment over the distribution of request shapes. FGD scores
// every placement by the rise it causes; the `frag` policy
// (frag_placement.cc) does so for CPU-only jobs, and chooses between GPU
// classes by the "no access" part of it (ShapeStats::accept_share, then,
// on a tie, ShapeStats::HostShare: the same for a node's host capacity).
//
// Worked example: a node with 8 GPUs of which GPU 0 has 300 milli free and
// GPUs 1-7 are fully free, 20 cores left; shapes {1 GPU, 16 cores, p 0.5}
// and {0.5 GPU, 24 cores, p 0.5}. The first fits (7 GPUs with 1000 free):
// its fragment is GPU 0's 300. The second lacks CPU: its fragment is all
// 7,300. F = 0.5 * 300 + 0.5 * 7300 = 3,800 milli-GPU.
//
// Not thread-safe; owned by the scheduler's State (the control loop).

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "drover/sched/model.h"

namespace drover::sched {

// One request shape of the typical set, with its probability.
struct FragShape {
  int gpus = 1;           // per replica (> 0: CPU-only shapes leave GPU fragments unchanged)
  int milli = kWholeGpu;  // per GPU
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;  // the mean over the arrivals of this shape
  // Per GPU class of the scheduler: 1 if the shape may use it. Classes past
  // the end are not accepted (the set is rebuilt when classes are added).
  std::vector<uint8_t> accepts;
  double p = 0;  // probability; the typical set's sum to 1
};

// What fragmentation reads of one node: host resources left and, per GPU
// with free share (healthy, on a schedulable node), its free milli and class.
struct FragNode {
  static constexpr int64_t kUntracked = INT64_MAX / 4;
  int64_t cpu_left = kUntracked;
  int64_t mem_left = kUntracked;
  int n = 0;  // GPUs listed
  std::array<int16_t, kMaxGpusPerNode> free{};
  std::array<uint16_t, kMaxGpusPerNode> cls{};
};

// Expected milli-GPU of `node` that a request drawn from `shapes` could not
// use (see the file comment). O(shapes x GPUs listed).
double Fragmentation(const FragNode& node, const std::vector<FragShape>& shapes);

// The distribution of request shapes, learned from arrivals. Shapes are
// keyed as FGD keys its "typical pods": GPUs, share per GPU, CPU and the GPU
// constraints (models, vendor, GPU memory); host memory is averaged per key.
//
// The typical set is the most frequent shapes, taken ten at a time (most
// frequent first) until they cover `coverage` of the GPU arrivals, then
// renormalised: FGD's own rule (60 %, steps of 10). It is rebuilt lazily
// when the arrivals have grown by a sixteenth since the last build (at
// least 16 arrivals), so its cost is amortised O(1) per arrival.
class ShapeStats {
 public:
  // Counts one arrival (CPU-only requests are ignored).
  void Observe(const JobRequest& req);
  int64_t arrivals() const { return total_; }
  size_t distinct() const { return entries_.size(); }
  // Whether the typical set is older than the rule above allows.
  bool Stale() const { return total_ > 0 && total_ >= next_build_; }
  // Rebuilds the typical set; `accepts(req, cls)` says whether a shape (as
  // a representative request) may use GPU class `cls` of `classes`.
  template <typename Accepts>
  const std::vector<FragShape>& Build(double coverage, int classes, Accepts accepts) {
    std::vector<const Entry*> order = Ranked();
    typical_.clear();
    double covered = 0;
    const double want = coverage * static_cast<double>(total_);
    size_t i = 0;
    while (i < order.size() && covered < want) {
      for (size_t step = i + 10; i < step && i < order.size(); ++i) {
        const Entry& e = *order[i];
        FragShape s;
        s.gpus = e.rep.gpus;
        s.milli = e.rep.gpu_milli;
        s.cpu_milli = e.rep.cpu_milli;
        s.memory_bytes = e.mem_sum / e.count;
        s.accepts.resize(static_cast<size_t>(classes));
        for (int c = 0; c < classes; ++c) s.accepts[static_cast<size_t>(c)] = accepts(e.rep, c) ? 1 : 0;
        s.p = static_cast<double>(e.count);
        covered += s.p;
        typical_.push_back(std::move(s));
      }
    }
    double norm = 0;
    for (FragShape& s : typical_) norm += s.p;
    for (FragShape& s : typical_) s.p /= norm;
    // Every shape seen, not only the typical ones: a GPU model that only a
    // few jobs can use is what the rare constrained shapes are about.
    accept_share_.assign(static_cast<size_t>(classes), 0.0);
    for (const Entry* e : order) {
      for (int c = 0; c < classes; ++c) {
        if (accepts(e->rep, c)) accept_share_[static_cast<size_t>(c)] += static_cast<double>(e->count);
      }
    }
    for (double& a : accept_share_) a /= static_cast<double>(total_);
    all_.clear();
    for (const Entry* e : order) {
      Seen x;
      x.gpus = e->rep.gpus;
      x.cpu_milli = e->rep.cpu_milli;
      x.memory_bytes = e->mem_sum / e->count;
      x.p = static_cast<double>(e->count) / static_cast<double>(total_);
      x.accepts.resize(static_cast<size_t>(classes));
      for (int c = 0; c < classes; ++c) x.accepts[static_cast<size_t>(c)] = accepts(e->rep, c) ? 1 : 0;
      all_.push_back(std::move(x));
    }
    host_share_.clear();
    next_build_ = total_ + std::max<int64_t>(16, total_ / 16);
    ++version_;
    return typical_;
  }
  const std::vector<FragShape>& typical() const { return typical_; }
  // Per GPU class, at the last Build: the share of the GPU arrivals that may
  // use it.
  double accept_share(int cls) const {
    return cls < static_cast<int>(accept_share_.size()) ? accept_share_[static_cast<size_t>(cls)] : 1.0;
  }
  // At the last Build: the share of the GPU arrivals (every shape seen) that
  // an empty node would serve with its `gpus` GPUs of class `cls`, `cpu_milli`
  // cores and `memory_bytes` of memory (<= 0: untracked, any request fits):
  // shapes that accept the class, ask for at most `gpus` GPUs, and whose CPU
  // and mean memory fit. 0 before the first Build. The answer is kept per
  // (class, GPUs, CPU, memory) until the next Build, so a cluster of a few
  // node types pays O(shapes) once per type per Build, then a lookup.
  double HostShare(int cls, int gpus, int64_t cpu_milli, int64_t memory_bytes) const;
  // Raised by every Build: cached fragmentation under an older set is stale.
  uint64_t version() const { return version_; }

  // The CPU (milli-cores) a free milli-GPU needs beside it to be usable, for
  // bin-pack's stranding rule (State::Stranded); 0 while no GPU arrival has
  // asked for CPU. The rule: the CPU left on a node serves, in expectation,
  // as many GPUs as it would for one arrival drawn from the workload, so
  // cpu_left x E[GPU / CPU] over the GPU arrivals (each replica one arrival);
  // the value returned is 1 / E[GPU / CPU], the harmonic mean of their CPU
  // per GPU. No constant: the old rule took 80 % of the mean CPU per GPU
  // (total CPU / total GPU), the 80 % chosen on seeds 1-4 of one trace. The
  // harmonic mean weighs the many CPU-light arrivals, which a node short of
  // CPU can still take, more than the mean does; on the FGD experiment's 20
  // pod lists it comes to 0.70-0.75 of the mean. Arrivals that ask
  // for no CPU are left out (they would make every GPU usable, whatever the
  // CPU left). Kept up to date by Observe, O(1).
  double StrandCpuPerMilli() const { return gpu_per_cpu_ > 0 ? static_cast<double>(cpu_arrivals_) / gpu_per_cpu_ : 0; }

 private:
  struct Entry {
    JobRequest rep;  // the first arrival of the shape (id and tenant cleared)
    int64_t count = 0;
    int64_t mem_sum = 0;
  };
  std::vector<const Entry*> Ranked() const;
  std::unordered_map<std::string, Entry> entries_;
  int64_t total_ = 0;
  int64_t next_build_ = 0;
  uint64_t version_ = 0;
  std::vector<FragShape> typical_;
  std::vector<double> accept_share_;
  struct Seen {
    int gpus = 0;
    int64_t cpu_milli = 0;
    int64_t memory_bytes = 0;
    double p = 0;
    std::vector<uint8_t> accepts;
  };
  std::vector<Seen> all_;  // every shape at the last Build
  struct HostKey {
    int cls;
    int gpus;
    int64_t cpu_milli;
    int64_t memory_bytes;
    double share;
  };
  mutable std::vector<HostKey> host_share_;  // HostShare's answers since the last Build
  int64_t cpu_arrivals_ = 0;                 // GPU arrivals that ask for CPU
  double gpu_per_cpu_ = 0;                   // their sum of milli-GPU per milli-core
};

}  // namespace drover::sched
