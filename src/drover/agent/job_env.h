#pragma once
// The environment a job starts with (docs/security.md, "Workload
// isolation"): only what its spec gives it, Drover's variables, and the
// variables of the agent's environment an allow-list names; nothing else of
// the agent's (its tokens, cloud credentials, proxy settings ...).
//
// Pure functions: the agent captures its environment once at start and
// builds each job's environment from it; the supervisor passes the result
// to the job as it is.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/common.pb.h"

namespace drover::agent {

// What jobs get from the agent's environment unless configured otherwise:
// the basics every process expects. A name ending in '*' is a prefix.
inline const std::vector<std::string> kDefaultEnvAllowList = {"PATH", "HOME",     "USER", "LOGNAME", "SHELL",
                                                              "LANG", "LANGUAGE", "LC_*", "TZ",      "TMPDIR"};

// The PATH of a job when the agent has none.
inline constexpr std::string_view kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Whether `name` is on `allow` (exact names, or prefixes written "NCCL_*").
bool EnvAllowed(std::string_view name, const std::vector<std::string>& allow);

// "NAME=VALUE" strings (environ) -> a map; entries without '=' are skipped.
std::map<std::string, std::string> EnvMap(const char* const* environ);

// The job's environment: the allow-listed part of `agent_env`, then PATH
// (kDefaultPath when still unset), then the job's own `job_env`, then
// Drover's variables `drover_env` (DROVER_JOB_ID, CUDA_VISIBLE_DEVICES ...):
// each later one wins.
std::map<std::string, std::string> BuildJobEnv(const std::map<std::string, std::string>& agent_env,
                                               const std::vector<std::string>& allow,
                                               const std::map<std::string, std::string>& job_env,
                                               const std::map<std::string, std::string>& drover_env);

// ---- The launch contract (docs/distributed.md) -----------------------------

// The contract of a workload: the server's (Workload.launch), or for one
// from an older server a job of its own (one node, this one at `own_addr`,
// no master port).
v1::LaunchContract LaunchContractOf(const v1::Workload& w, const std::string& node, const std::string& own_addr);

// The MPI hostfile's name of a replica: "<job id>-r<rank>", distinct for two
// replicas on one machine ("j-000007-r1").
std::string ReplicaHostName(const std::string& job_id, int rank);

// The hosts file a job sees as /etc/hosts: localhost, every replica's node
// name and replica name on its address, and this machine's own host name
// (`machine`, unless a node has that name) on this node's address `own_addr`.
std::string LaunchHostsFile(const v1::LaunchContract& c, const std::string& job_id, const std::string& own_addr,
                            const std::string& machine);

// The MPI hostfile: one "<replica name> slots=1" line per replica, in rank order.
std::string LaunchHostfile(const v1::LaunchContract& c, const std::string& job_id);

// The variables of the contract (one process per replica): DROVER_NODE_RANK,
// DROVER_NNODES, DROVER_MASTER_ADDR, DROVER_MASTER_PORT (when there is a
// port), DROVER_HOSTS, DROVER_HOSTFILE (`hostfile`, when there is one); and
// the frameworks' names, each unless the job's own `job_env` sets it:
// MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK, RANK, LOCAL_RANK,
// LOCAL_WORLD_SIZE, the PET_* set torchrun reads, and NCCL_SOCKET_IFNAME and
// GLOO_SOCKET_IFNAME (`ifname`, the interface of this node's address, when
// known).
std::map<std::string, std::string> LaunchEnv(const v1::LaunchContract& c, const std::string& hostfile,
                                             const std::string& ifname,
                                             const std::map<std::string, std::string>& job_env);

// The name of the interface that holds the IP address `addr` on this
// machine (in this network namespace); empty when none does or `addr` is
// not an address.
std::string InterfaceWithAddress(const std::string& addr);

// ---- The GPU memory-limit shim (docs/memory.md) ----------------------------

// The shim's file name, and the smallest limit it accepts (one allocation
// granule of the CUDA driver: a smaller limit could never grant anything).
inline constexpr std::string_view kCudaShimName = "libdrover_cuda_shim.so";
inline constexpr int64_t kMinGpuMemoryLimit = int64_t{2} << 20;

// Where the shim is: `configured` (the agent's DROVER_CUDA_SHIM) when set,
// else beside the agent's executable `exe`, else in ../lib/drover/ from it.
// NotFound names every place looked at.
Result<std::string> FindCudaShim(const std::string& configured, const std::string& exe);

// The GPU memory limit of a job: `workload_limit` (a share's reservation,
// Workload.gpu_memory_limit_bytes) when > 0, else the job's own
// DROVER_GPU_MEMORY_LIMIT in `env` (a job that asks for the shim), else 0
// (none). InvalidArgument for a limit that is not a byte count or is below
// kMinGpuMemoryLimit.
Result<int64_t> GpuMemoryLimitOf(int64_t workload_limit, const std::map<std::string, std::string>& env);

// Sets the shim's variables in a job's environment: DROVER_GPU_MEMORY_LIMIT,
// DROVER_GPU_MEMORY_REPORT (report_dir) and LD_PRELOAD with the shim first
// and whatever LD_PRELOAD `env` had after it (the job's own is never
// dropped; a second copy of the shim is).
void ApplyGpuMemoryLimit(int64_t limit, const std::string& shim, const std::string& report_dir,
                         std::map<std::string, std::string>* env);

// All of the above for a job about to start: the limit from the workload or
// env; when there is one, the shim (DROVER_CUDA_SHIM of the agent's own
// environment, or beside /proc/self/exe), report_dir created, and env set.
// An error (a bad limit, no shim, no report directory) means the job must not
// start: running it without its limit would let it take a shared GPU's memory.
Status AddGpuMemoryLimit(int64_t workload_limit, const std::string& report_dir,
                         std::map<std::string, std::string>* env);

// The shim's reports in report_dir (one file per process, named by its pid)
// of processes still alive: pid -> bytes in use. Empty when there are none.
// A sandboxed job's processes name their reports by the pids of its own PID
// namespace: with `leader` (the node's pid of its sandbox's init, the first
// process of that namespace), they are read as the node's pids, and a report
// of a pid no process under the leader has is a dead one.
std::map<int64_t, int64_t> ReadGpuMemoryReportsByPid(const std::string& report_dir, int64_t leader = 0);

// `leader` and the processes under it, when it is the first of a PID
// namespace other than this process's: their pid there -> the node's. None
// when it is in this process's namespace; empty when it is gone.
std::optional<std::map<int64_t, int64_t>> NamespacePids(int64_t leader);

// The GPU memory in use by a job's processes: the sum of the above.
int64_t ReadGpuMemoryReports(const std::string& report_dir);

// A job under the shim on some GPU: its id and report directory.
struct ShimReport {
  std::string job_id;
  std::string report_dir;
  int64_t leader = 0;  // the node's pid of its process group leader (ReadGpuMemoryReportsByPid)
};

// Where the vendor names no processes on a GPU (simulated GPUs; a library
// without per-process accounting), the shim's reports of the jobs on it
// become its processes, each with its job, so drover_gpu_job_memory_used_bytes
// covers jobs under the shim. Sets processes_known when it adds any; a
// vendor's own list is left as it is (it also counts what the shim cannot
// see, the context).
void AddGpuMemoryReports(const std::vector<ShimReport>& jobs, v1::GpuTelemetry* t);

}  // namespace drover::agent
