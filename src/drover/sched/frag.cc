#include "drover/sched/frag.h"

#include <algorithm>

namespace drover::sched {

double Fragmentation(const FragNode& node, const std::vector<FragShape>& shapes) {
  int64_t total = 0;
  for (int g = 0; g < node.n; ++g) total += node.free[g];
  if (total == 0) return 0;
  double f = 0;
  for (const FragShape& s : shapes) {
    int64_t lost = total;
    if (s.cpu_milli <= node.cpu_left && s.memory_bytes <= node.mem_left) {
      int usable = 0;
      int64_t usable_milli = 0;
      for (int g = 0; g < node.n; ++g) {
        if (node.free[g] < s.milli || node.cls[g] >= s.accepts.size() || s.accepts[node.cls[g]] == 0) continue;
        ++usable;
        usable_milli += node.free[g];
      }
      // The shape fits: what it cannot use is the GPUs it cannot take.
      if (usable >= s.gpus) lost = total - usable_milli;
    }
    f += s.p * static_cast<double>(lost);
  }
  return f;
}

void ShapeStats::Observe(const JobRequest& req) {
  if (req.gpus <= 0) return;
  std::string key = std::to_string(req.gpus) + '/' + std::to_string(req.gpu_milli) + '/' +
                    std::to_string(req.cpu_milli) + '/' + std::to_string(req.gpu_memory_bytes) + '/' + req.gpu_vendor +
                    '/' + req.gpu_model + '/';
  std::vector<std::string> models = req.gpu_models;
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  for (const std::string& m : models) key += m + '|';
  auto [it, inserted] = entries_.try_emplace(std::move(key));
  Entry& e = it->second;
  if (inserted) {
    e.rep = req;
    e.rep.id.clear();
    e.rep.tenant.clear();
    e.rep.replicas = 1;
    e.rep.memory_bytes = 0;
  }
  // A gang counts once per replica: each replica is placed like a job.
  e.count += req.replicas;
  e.mem_sum += req.memory_bytes * req.replicas;
  total_ += req.replicas;
  if (req.cpu_milli > 0 && req.gpu_milli > 0) {
    cpu_arrivals_ += req.replicas;
    gpu_per_cpu_ += static_cast<double>(req.replicas) * req.gpus * req.gpu_milli / static_cast<double>(req.cpu_milli);
  }
}

double ShapeStats::HostShare(int cls, int gpus, int64_t cpu_milli, int64_t memory_bytes) const {
  for (const HostKey& k : host_share_) {
    if (k.cls == cls && k.gpus == gpus && k.cpu_milli == cpu_milli && k.memory_bytes == memory_bytes) return k.share;
  }
  double share = 0;
  for (const Seen& x : all_) {
    if (x.gpus > gpus || static_cast<size_t>(cls) >= x.accepts.size() || x.accepts[static_cast<size_t>(cls)] == 0)
      continue;
    if (cpu_milli > 0 && x.cpu_milli > cpu_milli) continue;
    if (memory_bytes > 0 && x.memory_bytes > memory_bytes) continue;
    share += x.p;
  }
  host_share_.push_back(HostKey{cls, gpus, cpu_milli, memory_bytes, share});
  return share;
}

std::vector<const ShapeStats::Entry*> ShapeStats::Ranked() const {
  std::vector<std::pair<const std::string*, const Entry*>> all;
  all.reserve(entries_.size());
  for (const auto& [k, e] : entries_) all.emplace_back(&k, &e);
  // Most frequent first; the key breaks ties, so the set is the same whatever
  // the hash map's order.
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second->count != b.second->count ? a.second->count > b.second->count : *a.first < *b.first;
  });
  std::vector<const Entry*> out;
  out.reserve(all.size());
  for (const auto& [k, e] : all) out.push_back(e);
  return out;
}

}  // namespace drover::sched
