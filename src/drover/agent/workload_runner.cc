// WorkloadRunner: adoption, launch, reconciling, checkpoint directories and
// what the other parts of the agent ask of the workloads. Watching their
// supervisors and reporting them is workload_watch.cc's.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "drover/agent/cgroup.h"
#include "drover/agent/workload_runner.h"
#include "drover/common/files.h"
#include "drover/common/ids.h"

namespace drover::agent {
namespace {

namespace fs = std::filesystem;

// How long after a job's launch the next spare supervisor is started.
constexpr auto kSpareRefillDelay = std::chrono::milliseconds(50);
constexpr int kSpareDirs = 16;  // of each kind (SpareDirs)

// The launch contract's files in the job's output directory (its own, so
// that its user reads them): the hosts file bound over its /etc/hosts, and
// the MPI hostfile (DROVER_HOSTFILE). Replica 0 checks that its master port
// is free, so a port some other process took fails the attempt with the
// reason instead of hanging its peers.
Status PrepareLaunch(const v1::LaunchContract& c, const std::string& job_id, const std::string& node,
                     const std::string& own_addr, const std::string& output_dir) {
  if (c.node_rank() == 0 && c.master_port() > 0 && !PortBindable(c.master_port())) {
    return FailedPrecondition(
        fmt::format("the master port {} the server reserved on node '{}' is taken by another process (outside Drover's "
                    "--launch-ports bookkeeping)",
                    c.master_port(), node));
  }
  char machine[256] = {};
  if (::gethostname(machine, sizeof machine - 1) != 0) machine[0] = '\0';
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(output_dir + "/hosts", LaunchHostsFile(c, job_id, own_addr, machine), 0644,
                                         /*durable=*/false));
  return WriteFileAtomic(output_dir + "/hostfile", LaunchHostfile(c, job_id), 0644, /*durable=*/false);
}

}  // namespace

WorkloadRunner::WorkloadRunner(WorkloadRunnerOptions options, runtime::LoopClient* loop,
                               const std::atomic<bool>* stopping, const NodeInventory* inventory,
                               ServiceLifecycle* services)
    : opts_(std::move(options)), loop_(loop), stopping_(stopping), inventory_(inventory), services_(services) {}

WorkloadRunner::~WorkloadRunner() = default;

Status WorkloadRunner::Init() {
  std::error_code ec;
  state_dir_ = opts_.state_dir.empty() ? JobStateRoot(opts_.data_dir) : opts_.state_dir;
  // An agent with a loop of its own is the only one of its process.
  if (opts_.state_dir.empty() && !opts_.shared_loop) SweepJobStateRoots(state_dir_);
  jobs_dir_ = state_dir_ + "/jobs";
  outputs_dir_ = opts_.data_dir + "/jobs";
  for (const std::string& d : {jobs_dir_, outputs_dir_}) {
    fs::create_directories(d, ec);
    if (ec) return Unavailable(fmt::format("cannot create '{}': {}", d, ec.message()));
  }
  AdoptJobs();
  {
    // A store an earlier agent filled is reported from the start (the
    // scheduler's hint, `drover images`); a node without one opens it on
    // its first container.
    const std::string store =
        opts_.containers.store.root.empty() ? opts_.data_dir + "/images" : opts_.containers.store.root;
    std::string why;
    if (!images_ && fs::exists(store + "/images.json", ec)) Images(&why);
  }
  // A job's output directory (output.log, work/) and its checkpoint
  // directory, made ahead of its launch (job_dir.h, SpareDirs).
  // Made ahead by a thread of the lowest priority (SCHED_IDLE): it runs
  // when a core would idle, never before a launch. Agents that share a
  // loop (simulated nodes, a thousand in a process) keep none.
  const int spares = opts_.shared_loop ? 0 : kSpareDirs;
  if (spares > 0) {
    janitor_ = std::make_unique<runtime::EventLoop>("agent-janitor");
    janitor_->Start();
    janitor_->Post([] {
      struct sched_param none {};
      (void)::sched_setscheduler(0, SCHED_IDLE, &none);  // this thread only
    });
  }
  output_spares_ = std::make_unique<SpareDirs>(outputs_dir_, ".spare-", spares, [](const std::string& d) {
    ::mkdir((d + "/work").c_str(), 0755);
    int fd = ::open((d + "/output.log").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  });
  fs::create_directories(CheckpointRoot(), ec);
  checkpoint_spares_ = std::make_unique<SpareDirs>(CheckpointRoot(), ".spare-" + opts_.node_name + "-", spares);
  RefillDirs();
  if (!jobs_.empty()) spdlog::info("node '{}' adopted {} job directories", opts_.node_name, jobs_.size());
  watcher_ = opts_.exit_watcher;
  if (watcher_ == nullptr) {
    auto w = ExitWatcher::Start();
    if (w.ok()) {
      own_watcher_ = std::move(*w);
      watcher_ = own_watcher_.get();
    } else {
      spdlog::warn("node '{}' notices job ends by looking every 100 ms: {}", opts_.node_name, w.status().message());
    }
  }
  for (auto& [id, job] : jobs_) {
    pid_t sup = job.dir.ReadSupervisorPid().value_or(0);
    if (sup > 0 && SupervisorAlive(sup, job.dir.path())) WatchSupervisor(id, sup);
  }
  launcher_ = MakeSupervisorLauncher(opts_.supervisor_exe, opts_.spare_supervisor);
  return Status::Ok();
}

// The jobs an earlier agent of this data directory left: their state
// directories (the agent restarted, the machine did not), job directories
// of the layout before the state moved to memory (state and output in
// one), and outputs whose state went with a reboot: those jobs ended with
// it, and are reported so.
void WorkloadRunner::AdoptJobs() {
  auto adopt = [this](const JobDir& dir) {
    auto spec = dir.ReadSpec();
    if (!spec.ok()) {
      spdlog::warn("ignoring job directory '{}': {}", dir.path(), spec.status().message());
      return;
    }
    LocalJob job(dir);
    job.output_dir = dir.OutputDir(*spec);
    job.grace_seconds = spec->grace_seconds;
    job.sigterm_ns = dir.ReadStop();
    if (auto iso = dir.ReadIsolation(); iso.ok()) job.cgroup = iso->cgroup;
    if (spec->container) {
      job.image_digest = spec->container->digest;
      std::string why;
      if (ImageStore* store = Images(&why); store != nullptr && !job.image_digest.empty()) {
        store->Use(job.image_digest);
      }
    }
    services_->Adopt(&job);
    jobs_.emplace(spec->job_id, std::move(job));
  };
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(jobs_dir_, ec)) {
    if (entry.is_directory()) adopt(JobDir(entry.path().string()));
  }
  if (outputs_dir_ == jobs_dir_) return;
  for (const auto& entry : fs::directory_iterator(outputs_dir_, ec)) {
    const std::string key = entry.path().filename().string();
    if (!entry.is_directory() || jobs_.contains(key)) continue;
    JobDir old(entry.path().string());
    if (fs::exists(old.File("spec.json"), ec)) {
      adopt(old);
      continue;
    }
    if (!rpc::ParseWorkloadId(key).ok()) continue;
    JobDir dir(jobs_dir_ + "/" + key);
    fs::create_directories(dir.path(), ec);
    LocalJob job(dir);
    job.output_dir = entry.path().string();
    RecordEnd(&job, ExitFile{-1, 0, NowNanos(), "its state was lost: the machine restarted while it ran", false});
    jobs_.emplace(key, std::move(job));
  }
}

void WorkloadRunner::RecordEnd(LocalJob* job, const ExitFile& e) {
  job->exited = e;
  job->dir.WriteExit(e).IgnoreError("best effort: job.exited is what gets reported");
}

// The job's whole environment: allow-listed variables of the agent's,
// the job's own, then Drover's (job_env.h).
std::map<std::string, std::string> WorkloadRunner::EnvFor(const v1::Workload& w, const std::vector<int>& cpus,
                                                          const v1::LaunchContract& launch,
                                                          const std::string& output_dir, bool container) const {
  std::map<std::string, std::string> env =
      LaunchEnv(launch, output_dir + "/hostfile",
                InterfaceWithAddress(launch.hosts_size() > launch.node_rank() ? launch.hosts(launch.node_rank()) : ""),
                {w.env().begin(), w.env().end()});
  if (!cpus.empty()) env["DROVER_CPUS"] = FormatCpuList(cpus);
  env["DROVER_JOB_ID"] = w.job_id();
  env["DROVER_REPLICA"] = std::to_string(w.replica());
  env["DROVER_REPLICAS"] = std::to_string(std::max(w.replicas(), 1));
  env["DROVER_NODE"] = opts_.node_name;
  if (!w.array_id().empty()) {
    env["DROVER_ARRAY_ID"] = w.array_id();
    env["DROVER_ARRAY_INDEX"] = std::to_string(w.array_index());
  }
  env["DROVER_CHECKPOINT_DIR"] = CheckpointDir(w.job_id());
  inventory_->AddGpuVisibility(w, &env);
  if (container) {
    // Nothing of the node's own: the image's environment is the base
    // (ContainerEnv), PATH included unless the job sets it.
    std::map<std::string, std::string> out = BuildJobEnv({}, {}, {w.env().begin(), w.env().end()}, env);
    if (!w.env().contains("PATH")) out.erase("PATH");
    return out;
  }
  return BuildJobEnv(inventory_->agent_env(), opts_.job_env_allow, {w.env().begin(), w.env().end()}, env);
}

void WorkloadRunner::Launch(const v1::Workload& w, const StoredImage* image) {
  const std::string key = WorkloadKey(w);
  auto ref = rpc::ParseWorkloadId(key);
  if (!ref.ok() || ref->job_id != w.job_id() || (ref->gang && ref->replica != w.replica())) {
    spdlog::error("server sent a workload with a malformed id '{}' (job '{}')", key, w.job_id());
    return;
  }
  const bool container = w.has_container() && !w.container().image().empty();
  StoredImage held;
  const bool cached = container && image == nullptr;
  if (cached) {
    if (!EnsureImage(w, key, &held)) return;  // it waits for its pull, or failed
    image = &held;
  }
  JobDir dir(jobs_dir_ + "/" + key);
  LocalJob job(dir);
  job.output_dir = outputs_dir_ + "/" + key;
  job.grace_seconds = w.termination_grace_seconds() > 0 ? w.termination_grace_seconds() : 10;
  job.launch_ns = NowNanos();
  job.image_cached = cached;
  // The state first: an output directory without it is a job whose state
  // a reboot took (AdoptJobs).
  std::error_code ec;
  fs::create_directories(dir.path(), ec);
  if (!ec) ec = output_spares_->Take(job.output_dir);
  JobIsolation iso = inventory_->IsolationFor(key, w);
  // Kept across attempts: made once, left as it is by a new attempt.
  std::error_code cec = checkpoint_spares_->Take(CheckpointDir(w.job_id()));
  RefillSoon();
  if (cec) {
    spdlog::warn("node '{}': cannot create the checkpoint directory of '{}': {}", opts_.node_name, w.job_id(),
                 cec.message());
  }
  job.cgroup = iso.cgroup;
  const v1::LaunchContract launch = LaunchContractOf(w, opts_.node_name, opts_.advertise_host);
  Status launchable =
      ec ? Status::Ok() : PrepareLaunch(launch, w.job_id(), opts_.node_name, opts_.advertise_host, job.output_dir);
  std::map<std::string, std::string> env = EnvFor(w, iso.cpus, launch, job.output_dir, container);
  std::unique_ptr<ServiceReplica> service;
  Status svc = w.has_service() ? services_->Prepare(w, dir, &env, &service) : Status::Ok();
  // A GPU memory limit: the shim preloaded (job_env.h); the job fails to start without it.
  Status limit = AddGpuMemoryLimit(w.gpu_memory_limit_bytes(), dir.path() + "/gpu-memory", &env);
  // A container's sandbox is its runtime's (PrepareContainer).
  Status sandboxed =
      container ? Status::Ok() : SandboxFor(w, dir, job.output_dir, env.contains("DROVER_GPU_MEMORY_REPORT"), &iso);
  if (iso.sandbox && iso.sandbox->namespaces) {
    // Its names (docs/distributed.md): /etc/hosts of the contract, and the
    // node's name as its host name (a name the kernel takes).
    iso.sandbox->hosts_file = job.output_dir + "/hosts";
    if (opts_.node_name.size() <= 64) iso.sandbox->hostname = opts_.node_name;
  }
  JobSpecFile spec{key,
                   {w.command().begin(), w.command().end()},
                   std::move(env),
                   container ? "" : w.working_dir(),
                   job.grace_seconds,
                   opts_.lease_file,
                   job.output_dir,
                   std::nullopt};
  Status s = ec ? Unavailable(fmt::format("cannot create the directories of '{}': {}", key, ec.message()))
             : !launchable.ok() ? launchable
             : !sandboxed.ok()  ? sandboxed
             : !limit.ok()      ? limit
             : !svc.ok()        ? svc
                                : dir.WriteSpec(spec);
  if (s.ok() && container) s = PrepareContainer(w, key, *image, &job, &iso, spec.env, &spec);
  if (s.ok() && container) s = dir.WriteSpec(spec);
  if (s.ok()) s = dir.WriteIsolation(iso);
  if (s.ok()) s = StartProcess(key, &job);
  if (service && s.ok()) {
    services_->Keep(&job, std::move(service), w.service());
  } else if (service) {
    services_->Abandon(*service);
  }
  if (!s.ok()) {
    spdlog::error("node '{}' cannot start job '{}': {}", opts_.node_name, key, s.message());
    RecordEnd(&job, ExitFile{127, 0, NowNanos(), s.message(), true});
  } else {
    spdlog::info("node '{}' started job '{}' on GPUs [{}]", opts_.node_name, key, fmt::join(w.gpu_indices(), ","));
  }
  jobs_.emplace(key, std::move(job));
}

// The job's process started through the launcher, and watched (its first
// start, or a service's restart).
Status WorkloadRunner::StartProcess(const std::string& key, LocalJob* job) {
  DROVER_ASSIGN_OR_RETURN(WorkloadLauncher::Launched launched, launcher_->Launch(job->dir.path()));
  job->supervisor = launched.pid;
  unreaped_.insert(launched.pid);
  if (launched.done_fd >= 0) {
    WatchPooled(key, launched.pid, launched.done_fd);
  } else {
    WatchSupervisor(key, launched.pid);
  }
  return job->dir.WriteSupervisorPid(launched.pid);
}

// The next spare supervisor and directories, once the job just launched
// has had its start (supervisor.h: spawned at once, it took a core from
// that job). Jobs launched meanwhile find no spare and make their own.
void WorkloadRunner::RefillSoon() {
  if (refill_pending_) return;
  refill_pending_ = true;
  loop_->PostAfter(kSpareRefillDelay, [this] {
    refill_pending_ = false;
    if (*stopping_) return;
    if (launcher_) launcher_->Refill();
  });
  RefillDirs();
}

// Disk work the launch path need not wait for: on the janitor when there
// is one (it runs when a core is free; ext4 takes its time), else here.
void WorkloadRunner::OffLoop(std::function<void()> work) {
  if (janitor_) {
    janitor_->Post(std::move(work));
  } else {
    work();
  }
}

void WorkloadRunner::RefillDirs() {
  if (janitor_)
    janitor_->Post([this] {
      output_spares_->Refill();
      checkpoint_spares_->Refill();
    });
}

// ---- reconciling (reconciler.h) ----

void WorkloadRunner::OnDesired(const v1::DesiredWorkloads& d) {
  NoteEndedJobs(d.ended_jobs());
  desired_.clear();
  for (const v1::Workload& w : d.workloads()) desired_[WorkloadKey(w)] = w;
  stops_.clear();
  for (const v1::Stop& stop : d.stops()) stops_[StopKey(stop)] = stop;
  have_desired_ = true;
  Reconcile(/*fresh=*/true);
}

// Starts what is desired and missing (with a fresh set), stops jobs that
// are no longer desired, forgets ended ones the server has heard of.
void WorkloadRunner::Reconcile(bool fresh) {
  if (!have_desired_) return;
  DesiredView desired;
  desired.fresh = fresh;
  for (const auto& [key, w] : desired_) desired.keys.insert(key);
  for (const auto& [key, s] : stops_) {
    desired.stops[key] = StopOrder{s.grace_seconds(), s.reason(), s.checkpoint_signal(), s.checkpoint_grace_seconds()};
  }
  std::vector<ObservedWorkload> observed;
  observed.reserve(jobs_.size());
  for (const auto& [key, job] : jobs_) {
    ObservedWorkload o;
    o.key = key;
    o.started = job.started.has_value();
    o.exited = job.exited.has_value();
    o.reported_ended = job.reported == v1::WORKLOAD_STATE_EXITED || job.reported == v1::WORKLOAD_STATE_FAILED_TO_START;
    o.restart_pending = job.restart_pending;
    o.pulling = job.pulling;
    o.sigterm_ns = job.sigterm_ns;
    o.checkpoint_ns = job.checkpoint_ns;
    o.grace_seconds = job.grace_seconds;
    observed.push_back(std::move(o));
  }
  const int64_t now = NowNanos();
  for (const Action& a : agent::Reconcile(desired, observed, now)) Apply(a, now);
}

void WorkloadRunner::Apply(const Action& a, int64_t now) {
  if (a.kind == ActionKind::kStart) {
    Launch(desired_.at(a.key));
    return;
  }
  if (a.kind == ActionKind::kForget) {
    Forget(a.key);
    return;
  }
  LocalJob& job = jobs_.at(a.key);
  if (a.kind == ActionKind::kAbandonPull) {
    // The pull goes on (another job, or the next attempt, may want it).
    job.pulling = false;
    RecordEnd(&job, ExitFile{-1, SIGTERM, now, "stopped while its image was pulled", false});
    return;
  }
  if (a.kind == ActionKind::kAbandonRestart) {
    services_->AbandonRestart(&job);
    return;
  }
  const pid_t pgid = job.started->pid;
  switch (a.kind) {
    case ActionKind::kCheckpoint:
      spdlog::info("node '{}' asks job '{}' to checkpoint (signal {}, {}s before SIGTERM)", opts_.node_name, a.key,
                   a.signal, a.grace_seconds);
      ::kill(-pgid, a.signal);
      job.checkpoint_ns = now;
      break;
    case ActionKind::kTerminate:
      spdlog::info("node '{}' stopping job '{}' (SIGTERM, {}s grace){}", opts_.node_name, a.key, a.grace_seconds,
                   stops_.contains(a.key) ? ": " + a.reason : "");
      ::kill(-pgid, SIGTERM);
      job.sigterm_ns = now;
      job.dir.WriteStop(now).IgnoreError("best effort: an agent restarted without it sends SIGTERM again");
      if (job.service) {
        services_->Stopping(&job);
        (void)ReportIfChanged(a.key, &job);
      }
      break;
    case ActionKind::kKill: ::kill(-pgid, SIGKILL); break;
    default: break;
  }
}

void WorkloadRunner::Forget(const std::string& id) {
  LocalJob& job = jobs_.at(id);
  // The supervisor removes the group when the job ends; one that died
  // first leaves it (and perhaps the job's processes) behind.
  if (const auto& g = job.cgroup) RemoveJobCgroup(g->dir, g->parent, std::chrono::milliseconds(0));
  services_->Forget(job);
  if (!job.image_digest.empty() && images_) images_->Release(job.image_digest);
  if (disk_) disk_->Remove(id);
  std::error_code ec;
  fs::remove_all(job.dir.path(), ec);  // in memory: at once
  OffLoop([dir = job.output_dir] {
    std::error_code oec;
    fs::remove_all(dir, oec);
  });
  jobs_.erase(id);
}

// ---- the sandbox ----

Status WorkloadRunner::SandboxFor(const v1::Workload& w, const JobDir& dir, const std::string& output_dir,
                                  bool gpu_memory_reports, JobIsolation* iso) const {
  if (!opts_.sandbox.enabled) return Status::Ok();
  // What no job sees: this agent's data (other jobs' output, the node's
  // credentials), its jobs' state (their specs and environments), the
  // checkpoints of other jobs, and what the operator adds.
  std::vector<std::string> hide = {opts_.data_dir, state_dir_, CheckpointRoot()};
  // Every agent's job state on this machine, not only this one's.
  for (const std::string& base : JobStateBases()) hide.push_back(base);
  std::vector<std::string> keep = {dir.path(), output_dir, CheckpointDir(w.job_id())};
  // Its output directory (0700, the way to work/), work/ and checkpoints
  // are its user's; its state directory is not (the agent trusts what the
  // supervisor writes there), but the memory-limit shim's reports are.
  std::vector<std::string> own = {output_dir, CheckpointDir(w.job_id())};
  if (w.working_dir().empty()) own.push_back(output_dir + "/work");
  if (gpu_memory_reports) own.push_back(dir.path() + "/gpu-memory");
  JobSandbox s = MakeJobSandbox(opts_.sandbox, w.tenant(), std::move(hide), std::move(keep), std::move(own));
  s.namespaces = inventory_->sandbox();
  s.seccomp = s.seccomp && inventory_->seccomp();
  if (gpu_memory_reports && !s.as_root) s.enter.push_back(dir.path());
  if (!w.working_dir().empty() && s.namespaces) {
    for (const SandboxMount& m : PlanSandboxMounts(s)) {
      if (m.kind != SandboxMount::kTmpfs || !PathWithin(w.working_dir(), m.target)) continue;
      bool kept = std::any_of(s.keep.begin(), s.keep.end(),
                              [&](const std::string& k) { return PathWithin(w.working_dir(), k); });
      if (!kept) {
        return InvalidArgument(fmt::format(
            "working directory '{}' is inside '{}', which jobs do not see (the agent's or server's data, or a "
            "directory others may not enter)",
            w.working_dir(), m.target));
      }
    }
  }
  if (!s.as_root && ::geteuid() != 0) {
    // Nobody to switch users: the job runs as the agent's own user.
    s.as_root = true;
  }
  iso->sandbox = std::move(s);
  return Status::Ok();
}

// ---- checkpoint directories ----

std::string WorkloadRunner::CheckpointRoot() const {
  return opts_.checkpoint_root.empty() ? opts_.data_dir + "/checkpoints" : opts_.checkpoint_root;
}

// The server says these jobs ended for good: their checkpoint directories
// are marked, and go once the retention has passed (SweepCheckpoints).
// The server repeats its last kEndedJobsPerNode ids in every desired set:
// only ids not seen before cost a look at the disk, and the sweep of
// every directory is the minute timer's (both ran per job start, and
// with thousands of ended jobs they were most of the agent's time).
void WorkloadRunner::NoteEndedJobs(const google::protobuf::RepeatedPtrField<std::string>& ended) {
  for (const std::string& id : ended) {
    if (!ParseJobId(id).ok() || !ended_seen_.insert(id).second) continue;
    ended_order_.push_back(id);
    if (ended_order_.size() > kEndedRemembered) {
      ended_seen_.erase(ended_order_.front());
      ended_order_.pop_front();
    }
    OffLoop([dir = CheckpointDir(id), keep = opts_.checkpoint_retention.count() > 0] {
      std::error_code ec;
      if (!fs::is_directory(dir, ec) || fs::exists(dir + "/.drover-ended", ec)) return;
      if (!keep) {
        fs::remove_all(dir, ec);
        return;
      }
      std::ofstream(dir + "/.drover-ended") << NowNanos() << "\n";
    });
  }
}

void WorkloadRunner::Sweep() {
  SweepCheckpoints();
  // Supervisors whose end nobody watched (no pidfd here): not left as zombies.
  for (pid_t pid : std::vector<pid_t>(unreaped_.begin(), unreaped_.end())) Reap(pid);
}

void WorkloadRunner::SweepCheckpoints() {
  std::error_code ec;
  auto now = fs::file_time_type::clock::now();
  for (const auto& entry : fs::directory_iterator(CheckpointRoot(), ec)) {
    fs::path marker = entry.path() / ".drover-ended";
    std::error_code mec;
    auto when = fs::last_write_time(marker, mec);
    if (mec || now - when < opts_.checkpoint_retention) continue;
    fs::remove_all(entry.path(), mec);
    if (!mec) {
      spdlog::info("node '{}' removed the checkpoints of ended job '{}'", opts_.node_name,
                   entry.path().filename().string());
    }
  }
}

void WorkloadRunner::AddCheckpoints(v1::Heartbeat* h) {
  for (auto& [key, job] : jobs_) {
    if (job.reported != v1::WORKLOAD_STATE_RUNNING) continue;
    auto w = desired_.find(key);
    if (w == desired_.end()) continue;
    struct stat st {};
    if (::stat(CheckpointDir(w->second.job_id()).c_str(), &st) != 0) continue;
    const int64_t mtime = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (mtime <= job.checkpoint_said_ns || h->checkpoints_size() >= rpc::kMaxCheckpointsPerHeartbeat) continue;
    job.checkpoint_said_ns = mtime;
    v1::CheckpointMark* c = h->add_checkpoints();
    c->set_workload_id(key);
    c->set_time_unix_nanos(mtime);
  }
}

// ---- what the other parts ask ----

std::vector<std::pair<std::string, std::string>> WorkloadRunner::GpuHolders(size_t gpus) const {
  std::vector<std::pair<std::string, std::string>> holders(gpus);  // job ids, tenants
  for (const auto& [id, w] : desired_) {
    for (int i : w.gpu_indices()) {
      if (i < 0 || static_cast<size_t>(i) >= holders.size()) continue;
      auto& [jobs, tenants] = holders[static_cast<size_t>(i)];
      jobs += (jobs.empty() ? "" : ",") + w.job_id();
      tenants += (tenants.empty() ? "" : ",") + w.tenant();
    }
  }
  return holders;
}

std::map<int64_t, std::string> WorkloadRunner::JobsByProcessGroup() const {
  std::map<int64_t, std::string> out;
  for (const auto& [id, job] : jobs_) {
    if (job.started && !job.exited) out[job.started->pid] = RefOf(id).job_id;
  }
  return out;
}

std::vector<ShimReport> WorkloadRunner::ShimReportsOn(int gpu) const {
  std::vector<ShimReport> out;
  for (const auto& [id, job] : jobs_) {
    auto w = desired_.find(id);
    if (!job.started || job.exited || w == desired_.end()) continue;
    const auto& on = w->second.gpu_indices();
    if (std::find(on.begin(), on.end(), gpu) == on.end()) continue;
    out.push_back({w->second.job_id(), job.dir.path() + "/gpu-memory", job.started->pid});
  }
  return out;
}

std::vector<double> WorkloadRunner::Loads(size_t gpus) const {
  std::vector<double> load(gpus, 0.0);
  for (const auto& [id, job] : jobs_) {
    if (!job.started || job.exited) continue;
    auto w = desired_.find(id);
    if (w == desired_.end()) continue;
    double l = 1.0;
    if (auto e = w->second.env().find("DROVER_SIM_LOAD"); e != w->second.env().end()) {
      char* end = nullptr;
      double v = std::strtod(e->second.c_str(), &end);
      if (end != e->second.c_str() && *end == '\0' && v >= 0 && v <= 1) l = v;
    }
    for (int i : w->second.gpu_indices()) {
      if (i >= 0 && static_cast<size_t>(i) < load.size()) load[static_cast<size_t>(i)] += l;
    }
  }
  return load;
}

LocalJob* WorkloadRunner::FindJob(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

// ---- shutdown ----

void WorkloadRunner::CancelWatches() {
  if (watcher_ == nullptr) return;
  for (const auto& [id, handle] : exit_watches_) watcher_->Cancel(handle);
  exit_watches_.clear();
}

void WorkloadRunner::Finish() {
  if (janitor_) janitor_->Stop();  // what it was given is done first
  // Nothing left to adopt: nothing left in memory (the data directory may
  // go next, and nobody else would remove this).
  if (!jobs_dir_.empty() && ::rmdir(jobs_dir_.c_str()) == 0 && opts_.state_dir.empty()) {
    ::unlink((state_dir_ + "/owner").c_str());
    ::rmdir(state_dir_.c_str());
  }
}

}  // namespace drover::agent
