#pragma once
// The scheduler's view of the cluster: plain values, no wire types.

#include <cstdint>
#include <string>
#include <vector>

namespace drover::sched {

// The most GPUs one node may hold (free sets are 64-bit masks).
inline constexpr int kMaxGpusPerNode = 64;

struct GpuInfo {
  int index = 0;  // node-local
  std::string vendor;
  std::string model;
  int64_t memory_bytes = 0;
  bool healthy = true;
};

struct NodeInfo {
  std::string name;
  std::vector<GpuInfo> gpus;  // gpus[i].index == i
  // A node takes new work only when connected and not drained.
  bool schedulable = false;
};

// What a job needs from the scheduler (validated before it gets here).
struct JobRequest {
  std::string id;
  int gpus = 1;                  // whole GPUs on one node
  int64_t gpu_memory_bytes = 0;  // minimum per GPU, 0 = any
  std::string gpu_model;         // exact, empty = any
  std::string gpu_vendor;        // exact, empty = any
};

struct Binding {
  std::string job_id;
  std::string node;
  std::vector<int> gpu_indices;  // ascending
};

}  // namespace drover::sched
