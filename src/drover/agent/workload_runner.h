#pragma once
// WorkloadRunner: the workloads of the node. It owns their records
// (LocalJob, local_job.h) and job directories, the desired set the server
// last sent, the launcher that starts them (workload_launcher.h), the
// watches that say when their supervisors end, the supervisors not yet
// reaped, the shipping of their logs, their status reports, and their
// checkpoint directories' retention.
//
// What to do is the pure reconciler's (reconciler.h): the runner observes
// (the job directories), asks Reconcile, and carries out its actions.
//
// A job's end reaches the runner one way: Observe() reads it from the job
// directory (exit.json, or a supervisor gone without one), whichever
// trigger called it (the supervisor's pidfd or a pooled supervisor's
// socket through SupervisorEnded, the tick's look, a new session); an end
// the agent itself decides (a failed launch, a lost supervisor, a service
// stopped while it waited to restart, a state lost with a reboot) is
// written by RecordEnd, where the next Observe finds it. What follows an
// end (a service's restart, the rest of the log, the report, the
// reconcile) is the same whichever way it came.
//
// Owned by the agent (agent.cc), beside the node inventory and the service
// lifecycle it is given. Not thread-safe: owned by the agent's loop (Init
// runs before the loop runs anything of the agent; the shutdown steps
// after the loop was closed).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "drover/agent/connection.h"
#include "drover/agent/disk_watch.h"
#include "drover/agent/exit_watcher.h"
#include "drover/agent/image_store.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/job_env.h"
#include "drover/agent/local_job.h"
#include "drover/agent/node_inventory.h"
#include "drover/agent/reconciler.h"
#include "drover/agent/service_lifecycle.h"
#include "drover/agent/workload_launcher.h"
#include "drover/common/status.h"
#include "drover/runtime/event_loop.h"
#include "drover/v1/agent.pb.h"

namespace drover::agent {

struct WorkloadRunnerOptions {
  std::string node_name;
  std::string data_dir;   // outputs under <data_dir>/jobs/
  std::string state_dir;  // empty: JobStateRoot(data_dir)
  std::string supervisor_exe;
  bool spare_supervisor = true;
  bool shared_loop = false;     // the loop is shared with other agents: no janitor, no spares
  std::string lease_file;       // what supervisors fence by; empty: no fencing
  std::string checkpoint_root;  // empty: <data_dir>/checkpoints
  std::chrono::seconds checkpoint_retention{3600};
  std::vector<std::string> job_env_allow;
  ExitWatcher* exit_watcher = nullptr;  // shared; null: one of its own
  SandboxPolicy sandbox;
  ContainerOptions containers;
  // The node's address as its peers reach it (the launch contract's own
  // address when the server sent none).
  std::string advertise_host = "127.0.0.1";
};

// What a heartbeat or a load's answer says of a stored image.
void ToNodeImage(const StoredImage& im, v1::NodeImage* n);

class WorkloadRunner final : public ServiceHost {
 public:
  WorkloadRunner(WorkloadRunnerOptions options, runtime::LoopClient* loop, const std::atomic<bool>* stopping,
                 const NodeInventory* inventory, ServiceLifecycle* services);
  ~WorkloadRunner() override;
  WorkloadRunner(const WorkloadRunner&) = delete;
  WorkloadRunner& operator=(const WorkloadRunner&) = delete;

  // Makes the directories, adopts the jobs an earlier agent of this data
  // directory left and watches their supervisors, and readies the launcher.
  Status Init();
  // Before the loop runs anything of the agent.
  void SetConnection(ServerConnection* connection) { connection_ = connection; }

  // A session opened: nothing desired is known until its first set; the
  // next heartbeat carries the node's images whole.
  void SessionOpened() {
    have_desired_ = false;
    images_said_ = 0;
  }
  // Everything is news to a new session: every log from its start (the
  // server writes by offset, so repeats are harmless) and a full report.
  void ReportAll();
  // The server's desired set: what it lists is started, what it does not
  // is stopped, ended jobs' checkpoints are marked for removal.
  void OnDesired(const v1::DesiredWorkloads& d);
  // Looks at every job (their ends where nothing watches), ships logs,
  // reports what changed, reconciles.
  void Tick();
  // The minute timer: checkpoints past retention go, unwatched supervisors
  // are reaped.
  void Sweep();

  // For the other parts of the agent (all on the loop).
  // Per GPU of `gpus`: the ids and tenants of the desired jobs holding it.
  std::vector<std::pair<std::string, std::string>> GpuHolders(size_t gpus) const;
  // Which job each process on a GPU belongs to: jobs run in their own
  // process group, led by the process the supervisor started.
  std::map<int64_t, std::string> JobsByProcessGroup() const;
  // The running jobs on GPU `gpu` that the memory-limit shim reports for.
  std::vector<ShimReport> ShimReportsOn(int gpu) const;
  // Running workloads whose checkpoint directory changed since the server
  // was last told (one stat per running job).
  void AddCheckpoints(v1::Heartbeat* h);
  // How busy each of `gpus` GPUs is (0..1 each, may sum above 1): a running
  // job keeps its GPUs busy (DROVER_SIM_LOAD in its environment says how much).
  std::vector<double> Loads(size_t gpus) const;
  // The node's images, when they changed since the last heartbeat said.
  void AddImages(v1::Heartbeat* h);
  // An administrator's pull ahead of jobs (NodeService.PullImage), or with
  // p.archive the load of an archive (NodeService.LoadImage).
  void PullImage(const v1::PullImage& p);

  // Shutdown, after the loop was closed, in this order: the exit watches
  // end (no callback of theirs runs after), the launcher goes (a spare
  // supervisor exits), the janitor finishes and an empty state directory
  // is removed.
  void CancelWatches();
  void ReleaseLauncher() { launcher_.reset(); }
  void Finish();

  // ServiceHost
  LocalJob* FindJob(const std::string& id) override;
  bool StillDesired(const std::string& id) const override { return !have_desired_ || desired_.contains(id); }
  Status Respawn(const std::string& id, LocalJob* job) override { return StartProcess(id, job); }
  bool Report(const std::string& id, LocalJob* job) override { return ReportIfChanged(id, job); }
  void RecordEnd(LocalJob* job, const ExitFile& e) override;

 private:
  // Adoption and launch (workload_runner.cc).
  void AdoptJobs();
  // Starts `w`; a container workload whose image is not held yet waits for
  // its pull first (`image`: the image, once held).
  void Launch(const v1::Workload& w, const StoredImage* image = nullptr);
  // Containers (workload_containers.cc).
  // The node's image store, opened on first use; null (with `why`) when
  // this node runs no containers.
  ImageStore* Images(std::string* why);
  void LoadArchive(const v1::PullImage& p);
  // Asks for the image of `w`: true when it is held (in `image`); false when
  // the job waits for its pull (its record made) or failed (its end recorded).
  bool EnsureImage(const v1::Workload& w, const std::string& key, StoredImage* image);
  void OnImage(const std::string& key, Result<StoredImage> image);
  void OnDiskOver(const std::string& key, int64_t bytes, int64_t limit);
  // The job's run in its container: config.json in its bundle, the overlay's
  // directories, `spec->container` and the command it runs.
  Status PrepareContainer(const v1::Workload& w, const std::string& key, const StoredImage& image, LocalJob* job,
                          JobIsolation* iso, std::map<std::string, std::string> env, JobSpecFile* spec);
  ImageStore::Request ImageRequest(const v1::Workload& w) const;
  // The job's environment; a container's has nothing of the node's.
  std::map<std::string, std::string> EnvFor(const v1::Workload& w, const std::vector<int>& cpus,
                                            const v1::LaunchContract& launch, const std::string& output_dir,
                                            bool container = false) const;
  Status StartProcess(const std::string& key, LocalJob* job);
  std::string CheckpointRoot() const;
  std::string CheckpointDir(const std::string& job_id) const { return CheckpointRoot() + "/" + job_id; }
  void NoteEndedJobs(const google::protobuf::RepeatedPtrField<std::string>& ended);
  void SweepCheckpoints();
  void RefillSoon();
  void RefillDirs();
  void OffLoop(std::function<void()> work);
  // Reconciling (workload_runner.cc).
  void Reconcile(bool fresh);
  void Apply(const Action& a, int64_t now);
  void Forget(const std::string& id);

  // Watching and reporting (workload_watch.cc).
  void Observe(const std::string& id, LocalJob* job);
  void Refresh(LocalJob* job);
  bool Reap(pid_t pid);
  void WatchSupervisor(const std::string& id, pid_t pid);
  void WatchPooled(const std::string& id, pid_t pid, int fd);
  void KeepWatch(const std::string& id, Result<uint64_t> handle);
  void OnPooledReady(const std::string& id, pid_t pid, int fd);
  void WatchRetired(pid_t pid);
  void SupervisorEnded(const std::string& id);
  bool ReportIfChanged(const std::string& id, LocalJob* job);
  // The sandbox of `w` (sandbox.h) into `iso`; kInvalidArgument for a
  // working directory the job could not see.
  Status SandboxFor(const v1::Workload& w, const JobDir& dir, const std::string& output_dir, bool gpu_memory_reports,
                    JobIsolation* iso) const;
  v1::WorkloadStatus StatusOf(const std::string& id, const LocalJob& job) const;
  void ShipLog(const std::string& id, LocalJob* job, bool all);
  bool Connected() const { return connection_ != nullptr && connection_->connected(); }
  bool Send(const v1::AgentMessage& m) { return connection_ != nullptr && connection_->Send(m); }

  const WorkloadRunnerOptions opts_;
  runtime::LoopClient* const loop_;
  const std::atomic<bool>* const stopping_;
  const NodeInventory* const inventory_;
  ServiceLifecycle* const services_;
  ServerConnection* connection_ = nullptr;

  std::map<std::string, LocalJob> jobs_;
  std::map<std::string, v1::Workload> desired_;
  std::map<std::string, v1::Stop> stops_;  // how to stop what is not desired
  bool have_desired_ = false;

  std::unique_ptr<ImageStore> images_;
  std::unique_ptr<DiskWatch> disk_;  // made with the first container that has a disk limit
  std::string images_problem_;       // why images_ could not be opened (once tried)
  uint64_t images_said_ = 0;         // the store's version the last heartbeat carried

  std::unique_ptr<WorkloadLauncher> launcher_;
  bool refill_pending_ = false;
  std::unique_ptr<ExitWatcher> own_watcher_;      // unless the options name a shared one
  ExitWatcher* watcher_ = nullptr;                // null: job ends are noticed by looking
  std::map<std::string, uint64_t> exit_watches_;  // by workload id
  std::set<pid_t> unreaped_;                      // supervisors started here, not yet waited for

  std::string state_dir_;    // JobStateRoot's, or the options'
  std::string jobs_dir_;     // the jobs' state: <state_dir_>/jobs/<key>
  std::string outputs_dir_;  // their output: <data_dir>/jobs/<key>
  std::unique_ptr<SpareDirs> output_spares_, checkpoint_spares_;
  std::unique_ptr<runtime::EventLoop> janitor_;  // makes spares, removes outputs (own-loop agents)

  // Ended job ids already handled (NoteEndedJobs), oldest first; more than
  // the server repeats.
  static constexpr size_t kEndedRemembered = 1024;
  std::set<std::string> ended_seen_;
  std::deque<std::string> ended_order_;
};

}  // namespace drover::agent
