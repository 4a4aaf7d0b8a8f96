#include "drover/sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

namespace drover::sched {
namespace {

std::vector<int> Indices(uint64_t mask) {
  std::vector<int> out;
  while (mask != 0) {
    out.push_back(std::countr_zero(mask));
    mask &= mask - 1;
  }
  return out;
}

// The `n` lowest set bits of `mask`.
uint64_t LowestBits(uint64_t mask, int n) {
  uint64_t out = 0;
  for (int i = 0; i < n && mask != 0; ++i) {
    uint64_t bit = mask & (~mask + 1);
    out |= bit;
    mask &= mask - 1;
  }
  return out;
}

std::string Describe(const JobRequest& job) {
  std::string what = fmt::format("{} GPU{}", job.gpus, job.gpus == 1 ? "" : "s");
  if (!job.gpu_vendor.empty()) what += fmt::format(" of vendor '{}'", job.gpu_vendor);
  if (!job.gpu_model.empty()) what += fmt::format(" of model '{}'", job.gpu_model);
  if (job.gpu_memory_bytes > 0) what += fmt::format(" with at least {} bytes of memory", job.gpu_memory_bytes);
  return what;
}

}  // namespace

Status Scheduler::UpsertNode(const NodeInfo& node) {
  if (node.gpus.size() > static_cast<size_t>(kMaxGpusPerNode)) {
    return InvalidArgument(fmt::format("node '{}' has {} GPUs, more than {}", node.name, node.gpus.size(), kMaxGpusPerNode));
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    if (node.gpus[i].index != static_cast<int>(i)) {
      return InvalidArgument(fmt::format("node '{}' GPU {} has index {}", node.name, i, node.gpus[i].index));
    }
  }
  NodeSlot& slot = nodes_[node.name];
  slot.info = node;
  return Status::Ok();
}

void Scheduler::SetSchedulable(const std::string& node, bool schedulable) {
  auto it = nodes_.find(node);
  if (it != nodes_.end()) it->second.info.schedulable = schedulable;
}

Status Scheduler::Enqueue(const JobRequest& job) {
  if (bound_.contains(job.id) || queued_ids_.contains(job.id)) {
    return AlreadyExists(fmt::format("job '{}' is already known to the scheduler", job.id));
  }
  queue_.push_back(job);
  queued_ids_.insert(job.id);
  return Status::Ok();
}

Status Scheduler::Restore(const JobRequest& job, const Binding& binding) {
  auto it = nodes_.find(binding.node);
  if (it == nodes_.end()) {
    return FailedPrecondition(fmt::format("job '{}' is bound to unknown node '{}'", job.id, binding.node));
  }
  uint64_t mask = 0;
  for (int i : binding.gpu_indices) {
    if (i < 0 || i >= kMaxGpusPerNode) return InvalidArgument(fmt::format("job '{}' holds GPU index {}", job.id, i));
    mask |= uint64_t{1} << i;
  }
  if ((it->second.held & mask) != 0) {
    return FailedPrecondition(fmt::format("job '{}' holds GPUs of node '{}' that another job holds", job.id, binding.node));
  }
  if (bound_.contains(job.id)) return AlreadyExists(fmt::format("job '{}' is already bound", job.id));
  it->second.held |= mask;
  bound_[job.id] = BoundJob{binding.node, mask};
  return Status::Ok();
}

void Scheduler::Remove(const std::string& job_id) {
  if (auto it = bound_.find(job_id); it != bound_.end()) {
    if (auto n = nodes_.find(it->second.node); n != nodes_.end()) n->second.held &= ~it->second.mask;
    bound_.erase(it);
    return;
  }
  if (queued_ids_.erase(job_id) == 0) return;
  auto q = std::find_if(queue_.begin(), queue_.end(), [&](const JobRequest& j) { return j.id == job_id; });
  if (q != queue_.end()) queue_.erase(q);
}

uint64_t Scheduler::MatchingMask(const NodeInfo& node, const JobRequest& job) {
  uint64_t mask = 0;
  for (const GpuInfo& g : node.gpus) {
    if (!job.gpu_model.empty() && g.model != job.gpu_model) continue;
    if (!job.gpu_vendor.empty() && g.vendor != job.gpu_vendor) continue;
    if (g.memory_bytes < job.gpu_memory_bytes) continue;
    mask |= uint64_t{1} << g.index;
  }
  return mask;
}

std::optional<Binding> Scheduler::FirstFit(const JobRequest& job) const {
  for (const auto& [name, slot] : nodes_) {
    if (!slot.info.schedulable) continue;
    uint64_t healthy = 0;
    for (const GpuInfo& g : slot.info.gpus) {
      if (g.healthy) healthy |= uint64_t{1} << g.index;
    }
    uint64_t free = MatchingMask(slot.info, job) & healthy & ~slot.held;
    if (std::popcount(free) < job.gpus) continue;
    return Binding{job.id, name, Indices(LowestBits(free, job.gpus))};
  }
  return std::nullopt;
}

std::vector<Binding> Scheduler::Schedule() {
  std::vector<Binding> out;
  while (!queue_.empty()) {
    const JobRequest& head = queue_.front();
    std::optional<Binding> b = FirstFit(head);
    if (!b) break;  // strict FIFO: the head waits, and so does everyone behind it
    uint64_t mask = 0;
    for (int i : b->gpu_indices) mask |= uint64_t{1} << i;
    nodes_[b->node].held |= mask;
    bound_[head.id] = BoundJob{b->node, mask};
    out.push_back(std::move(*b));
    queued_ids_.erase(head.id);
    queue_.pop_front();
  }
  return out;
}

std::optional<std::string> Scheduler::NeverFits(const JobRequest& job) const {
  int best = 0;
  for (const auto& [name, slot] : nodes_) {
    best = std::max(best, std::popcount(MatchingMask(slot.info, job)));
    if (best >= job.gpus) return std::nullopt;
  }
  if (nodes_.empty()) return std::string("the cluster has no nodes");
  return fmt::format("no node has {} (the most any node has is {})", Describe(job), best);
}

std::string Scheduler::PendingReason(const std::string& job_id) const {
  for (size_t i = 0; i < queue_.size(); ++i) {
    if (queue_[i].id != job_id) continue;
    if (i > 0) return fmt::format("queued behind {} earlier job{}", i, i == 1 ? "" : "s");
    return fmt::format("waiting for {} free on a ready node", Describe(queue_[i]));
  }
  return {};
}

uint64_t Scheduler::HeldMask(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? 0 : it->second.held;
}

}  // namespace drover::sched
