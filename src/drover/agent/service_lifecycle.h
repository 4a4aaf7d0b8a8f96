#pragma once
// ServiceLifecycle: the agent's side of services (docs/deployments.md,
// "Agent: ports, probes, restarts"), driving each replica's ServiceReplica
// (service.h). It owns the node's service ports (PortAllocator), the host
// replicas' endpoints name, and the thread probes run on; in each service's
// record (LocalJob, local_job.h) it keeps the replica, its spec, a restart
// waiting for its back-off and the exit it follows.
//
// A replica's process is started and watched by the workload runner like
// any workload's; the runner tells the lifecycle what it saw (Observe) and
// the lifecycle asks the runner, through ServiceHost, to start the process
// again, to report, and to record an end.
//
// Owned by the agent (agent.cc), beside the runner it is given. Not
// thread-safe: owned by the agent's loop; probes run on a thread of their
// own and post their results to the loop.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "drover/agent/local_job.h"
#include "drover/agent/service.h"
#include "drover/common/status.h"
#include "drover/runtime/event_loop.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {

// What the lifecycle needs of the workload runner (workload_runner.h).
class ServiceHost {
 public:
  virtual ~ServiceHost() = default;
  // The record of `id`; null when the runner no longer knows it.
  virtual LocalJob* FindJob(const std::string& id) = 0;
  // False once a desired set arrived that does not list `id`.
  virtual bool StillDesired(const std::string& id) const = 0;
  // Starts the job's process again (a restart) and watches it.
  virtual Status Respawn(const std::string& id, LocalJob* job) = 0;
  // Reports the job unless the server was last told the same.
  virtual bool Report(const std::string& id, LocalJob* job) = 0;
  // The job ended as `e` says (exit.json written).
  virtual void RecordEnd(LocalJob* job, const ExitFile& e) = 0;
};

struct ServiceLifecycleOptions {
  std::string node_name;
  std::string advertise_host;  // replicas' endpoints name it
  int port_first = 0, port_last = 0;
};

class ServiceLifecycle {
 public:
  ServiceLifecycle(ServiceLifecycleOptions options, runtime::LoopClient* loop, const std::atomic<bool>* stopping);
  ServiceLifecycle(const ServiceLifecycle&) = delete;
  ServiceLifecycle& operator=(const ServiceLifecycle&) = delete;

  void SetHost(ServiceHost* host) { host_ = host; }

  // A service's settings checked, its port given, its variables set and
  // its record written (service.json); an error means the workload must
  // not start. The replica goes into `job` once its process is started
  // (Started), or its port back (Abandon).
  Status Prepare(const v1::Workload& w, const JobDir& dir, std::map<std::string, std::string>* env,
                 std::unique_ptr<ServiceReplica>* out);
  void Keep(LocalJob* job, std::unique_ptr<ServiceReplica> replica, const v1::ServiceSpec& spec);
  void Abandon(const ServiceReplica& replica) { ports_.Release(replica.port()); }
  // A service an earlier agent started: its port, restarts and settings
  // from service.json (nothing for a plain job).
  void Adopt(LocalJob* job);

  // What the runner just read of the service `id`: its process's start
  // begins its probes, its end is held for a restart.
  void Observe(const std::string& id, LocalJob* job);
  // Says when replicas that are not ready have been loading too long (a tick).
  void CheckReadyTimeout(LocalJob* job, ServiceTime now);
  // The server stops it: not ready from now on.
  void Stopping(LocalJob* job) { job->service->Stopping(); }
  // The server stopped it while it waited for its restart: it ends with
  // the exit it had.
  void AbandonRestart(LocalJob* job);
  // The job is forgotten: its port is free again.
  void Forget(const LocalJob& job);

  // Ends probes (one under way ends within its timeout; its result is dropped).
  void Stop();

 private:
  void Started(const std::string& id, LocalJob* job);
  void HoldForRestart(const std::string& id, LocalJob* job);
  void Relaunch(const std::string& id, uint64_t gen);
  LocalJob* RunningService(const std::string& id, uint64_t gen);
  void ProbeTimer(const std::string& id, uint64_t gen, bool liveness);
  void OnProbeResult(const std::string& id, uint64_t gen, bool liveness, const Status& r);

  const ServiceLifecycleOptions opts_;
  runtime::LoopClient* const loop_;
  const std::atomic<bool>* const stopping_;
  ServiceHost* host_ = nullptr;
  PortAllocator ports_;  // services' ports
  // Runs services' probes, one at a time, each within its timeout; made
  // with the first service (agents without services have no such thread).
  std::unique_ptr<runtime::EventLoop> prober_;
};

}  // namespace drover::agent
