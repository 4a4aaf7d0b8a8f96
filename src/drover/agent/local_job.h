#pragma once
// LocalJob: what the agent knows of one workload on its node, and the few
// helpers every part of the agent that handles workloads shares.
//
// The records live in the workload runner's map (workload_runner.h), which
// owns them; the service lifecycle (service_lifecycle.h) keeps its part of
// a service's record (the fields under "Services only") through the
// pointers the runner hands it. Not thread-safe: owned by the agent's loop.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "drover/agent/cgroup.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/service.h"
#include "drover/rpc/convert.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {

struct LocalJob {
  explicit LocalJob(JobDir d) : dir(std::move(d)) {}
  JobDir dir;
  std::string output_dir;  // its output.log (spec.json's output_dir)
  pid_t supervisor = 0;    // 0 when adopted (not our child) or unknown; -1 once gone
  std::optional<StartedFile> started;
  std::optional<ExitFile> exited;
  std::optional<int64_t> sigterm_ns;
  std::optional<int64_t> checkpoint_ns;  // when the checkpoint signal went
  int grace_seconds = 10;
  int64_t log_sent = 0;
  v1::WorkloadState reported = v1::WORKLOAD_STATE_UNSPECIFIED;
  int64_t checkpoint_said_ns = 0;  // the checkpoint directory's mtime last told the server
  int64_t launch_ns = 0;
  std::optional<JobCgroup> cgroup;  // its group, removed (with what is left in it) when forgotten
  // Containers only: the image it runs (held in use in the node's store
  // until the job is forgotten), or, while `pulling`, the one it waits for;
  // what the server was last told of the pull.
  std::string image_digest;
  bool pulling = false;
  std::string reported_pull;
  // Once it starts: whether the node held its image, else how long it
  // waited for the pull.
  bool image_cached = false;
  int64_t image_pull_ns = 0;
  // Why the node stopped it itself (its writable layer outgrew its limit):
  // the message of its end.
  std::string stopped_for;
  // Services only (service.h): the replica's state; the spec it runs under
  // (kept in service.json); a restart waiting for its back-off (nothing runs,
  // started.json and exit.json are gone) and the exit it follows; what the
  // server was last told of it; the first start of its process.
  std::unique_ptr<ServiceReplica> service;
  v1::ServiceSpec service_spec;
  bool restart_pending = false;
  std::optional<ExitFile> last_exit;
  ServiceView reported_service;
  int64_t first_start_ns = 0;
};

// The agent's name for a workload: its job directory and report key (see
// v1::Workload.workload_id).
std::string WorkloadKey(const v1::Workload& w);
std::string StopKey(const v1::Stop& s);

// "j-000007.1" -> {"j-000007", 1}; an adopted directory of any other name
// reports as itself.
rpc::WorkloadRef RefOf(const std::string& key);

// Wall clock and steady clock, in nanoseconds.
int64_t NowNanos();
int64_t MonoNanos();

// "exit code 1", "killed by signal 9", "failed to start: ...".
std::string DescribeExit(const ExitFile& e);

}  // namespace drover::agent
