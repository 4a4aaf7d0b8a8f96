// WorkloadRunner: watching the workloads' supervisors, noticing their
// starts and ends, and reporting them and their logs to the server.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <fstream>

#include "drover/agent/cgroup.h"
#include "drover/agent/supervisor.h"
#include "drover/agent/workload_runner.h"

namespace drover::agent {
namespace {

constexpr int64_t kLogChunk = 256 * 1024;
constexpr int64_t kLogPerTick = 4 * kLogChunk;
// Log output waiting for the network beyond which no more is read for now.
constexpr size_t kLogBacklog = 4 << 20;

// `s` cut to at most `max` bytes, at a UTF-8 character's start.
std::string Bounded(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
  return s;
}

ServiceView ViewOf(const v1::WorkloadStatus& ws) {
  return {ws.port(), ws.endpoint(), ws.ready(), ws.restarts(), ws.not_ready_reason()};
}

// Whether `ws` says something the server was not told of `job`.
bool Unreported(const v1::WorkloadStatus& ws, const LocalJob& job) {
  return ws.state() != job.reported || (job.service && ViewOf(ws) != job.reported_service) ||
         ws.image_pull() != job.reported_pull;
}

void MarkReported(const v1::WorkloadStatus& ws, LocalJob* job) {
  job->reported = ws.state();
  job->reported_service = ViewOf(ws);
  job->reported_pull = ws.image_pull();
}

}  // namespace

// ---- the one way an end comes in ----

// What the supervisor recorded since the last look, and a service's part
// of it: its probes begin once its process has started, its exit is held
// for a restart.
void WorkloadRunner::Observe(const std::string& id, LocalJob* job) {
  if (job->restart_pending) return;  // nothing runs, and its files are gone
  Refresh(job);
  services_->Observe(id, job);
}

// Reads what the supervisor recorded since the last look.
void WorkloadRunner::Refresh(LocalJob* job) {
  if (job->exited || job->pulling) return;  // a pulling container has no supervisor yet
  if (!job->started) job->started = job->dir.ReadStarted();
  job->exited = job->dir.ReadExit();
  if (job->exited) {
    // It records the end, then exits: not always gone yet (its exit
    // watch, or the minute sweep, reaps it then).
    if (job->supervisor > 0 && Reap(job->supervisor)) job->supervisor = -1;
    return;
  }
  if (job->supervisor > 0 && unreaped_.contains(job->supervisor)) {
    // Our own child, not ended: alive, whatever its /proc entry says. A
    // supervisor just spawned can still be inside execve, its argv not yet
    // readable, which SupervisorAlive takes for a zombie; under load that
    // killed jobs as "died without recording an exit".
    if (!Reap(job->supervisor)) return;
    job->supervisor = -1;
  }
  pid_t sup = job->supervisor > 0 ? job->supervisor : job->dir.ReadSupervisorPid().value_or(0);
  if (job->supervisor != -1 && sup > 0 && SupervisorAlive(sup, job->dir.path())) return;
  // Re-read: the supervisor may have written exit.json just before it ended.
  job->exited = job->dir.ReadExit();
  if (!job->exited) {
    // Nobody watches the job any more: it is killed before it is reported
    // ended, so its GPUs are never given to another job while it runs.
    if (job->started) ::kill(-job->started->pid, SIGKILL);
    if (job->cgroup) RemoveJobCgroup(job->cgroup->dir, job->cgroup->parent, std::chrono::seconds(2));
    RecordEnd(job, ExitFile{-1, 0, NowNanos(), "the job's supervisor died without recording an exit", false});
  }
}

// The job's supervisor is done with it (ended, or a pooled one told so):
// what it recorded is read, and the end reported at once.
void WorkloadRunner::SupervisorEnded(const std::string& id) {
  exit_watches_.erase(id);
  auto it = jobs_.find(id);
  if (*stopping_ || it == jobs_.end()) return;
  LocalJob& job = it->second;
  Observe(id, &job);
  ShipLog(id, &job, job.exited.has_value());
  if (ReportIfChanged(id, &job)) Reconcile(/*fresh=*/false);
}

void WorkloadRunner::Tick() {
  v1::AgentMessage m;
  const ServiceTime now = std::chrono::steady_clock::now();
  for (auto& [id, job] : jobs_) {
    Observe(id, &job);
    services_->CheckReadyTimeout(&job, now);
    ShipLog(id, &job, job.exited.has_value());  // all of an ended job's output precedes its end
    v1::WorkloadStatus ws = StatusOf(id, job);
    if (Unreported(ws, job)) *m.mutable_status()->add_workloads() = ws;
  }
  if (m.status().workloads_size() > 0 && Send(m)) {
    for (const auto& ws : m.status().workloads()) MarkReported(ws, &jobs_.at(ws.workload_id()));
  }
  Reconcile(/*fresh=*/false);
}

// ---- supervisors ----

// Waits for `pid`, a supervisor this agent started, if it has ended;
// true once it is reaped (or was never ours to reap). Every supervisor
// is reaped through here, and only while unreaped_ holds its pid: a pid
// not yet waited for cannot name a newer process.
bool WorkloadRunner::Reap(pid_t pid) {
  if (!unreaped_.contains(pid)) return true;
  pid_t r = ::waitpid(pid, nullptr, WNOHANG);
  if (r == 0) return false;
  unreaped_.erase(pid);  // reaped, or not our child after all (ECHILD)
  return true;
}

// Reports the job's end the moment its supervisor is gone (it records
// the end first), and reaps it, whether or not the job is still known.
void WorkloadRunner::WatchSupervisor(const std::string& id, pid_t pid) {
  if (watcher_ == nullptr) return;
  KeepWatch(id, watcher_->Watch(pid, [this, id, pid] {
    loop_->Post([this, id, pid] {
      auto it = jobs_.find(id);
      if (Reap(pid) && it != jobs_.end() && it->second.supervisor == pid) it->second.supervisor = -1;
      SupervisorEnded(id);
    });
  }));
}

// A pooled supervisor (supervisor.h) says when its job has ended instead
// of ending itself: its socket becomes readable then, or when it dies.
void WorkloadRunner::WatchPooled(const std::string& id, pid_t pid, int fd) {
  if (watcher_ == nullptr) return;  // Refresh looks: exit.json, or the process gone
  KeepWatch(id, watcher_->WatchReadable(
                    fd, [this, id, pid, fd] { loop_->Post([this, id, pid, fd] { OnPooledReady(id, pid, fd); }); }));
}

// The job's one watch (a new one replaces the old); without one, its end
// is noticed by looking.
void WorkloadRunner::KeepWatch(const std::string& id, Result<uint64_t> handle) {
  if (!handle.ok()) {
    spdlog::warn("node '{}' will notice the end of job '{}' by looking: {}", opts_.node_name, id,
                 handle.status().message());
    return;
  }
  if (auto old = exit_watches_.find(id); old != exit_watches_.end()) watcher_->Cancel(old->second);
  exit_watches_[id] = *handle;
}

void WorkloadRunner::OnPooledReady(const std::string& id, pid_t pid, int fd) {
  exit_watches_.erase(id);
  if (*stopping_ || !launcher_) return;
  auto it = jobs_.find(id);
  switch (launcher_->Hear(pid)) {
    case WorkloadLauncher::Heard::kNothing:
      if (it != jobs_.end() && it->second.supervisor == pid) WatchPooled(id, pid, fd);  // still the pool's
      return;
    case WorkloadLauncher::Heard::kStarted:
      // Its process runs: reported now, with its start time, rather than
      // at the next look (Tick).
      if (it == jobs_.end() || it->second.supervisor != pid) return;
      WatchPooled(id, pid, fd);
      Observe(id, &it->second);
      (void)ReportIfChanged(id, &it->second);
      return;
    case WorkloadLauncher::Heard::kDone: break;  // it waits for the next job, still our child
    case WorkloadLauncher::Heard::kRetired:
    case WorkloadLauncher::Heard::kGone:
      // It exits (or has): reaped when it has, through its pidfd.
      if (!Reap(pid)) WatchRetired(pid);
      break;
  }
  // The job is no longer this process's: its end is in exit.json (or,
  // for one that died, nowhere, which Refresh says).
  if (it != jobs_.end() && it->second.supervisor == pid) it->second.supervisor = -1;
  SupervisorEnded(id);
}

// Reaps a supervisor that no job needs any more once it has ended.
void WorkloadRunner::WatchRetired(pid_t pid) {
  if (watcher_ == nullptr) return;  // the minute sweep reaps it
  watcher_->Watch(pid, [this, pid] { loop_->Post([this, pid] { Reap(pid); }); })
      .IgnoreError("unwatched, the minute sweep reaps it");
}

// ---- reports ----

void WorkloadRunner::ReportAll() {
  for (auto& [id, job] : jobs_) {
    job.log_sent = 0;
    job.reported = v1::WORKLOAD_STATE_UNSPECIFIED;
    job.reported_pull.clear();
    job.reported_service = {};
    job.checkpoint_said_ns = 0;
    Observe(id, &job);
    ShipLog(id, &job, /*all=*/true);
  }
  v1::AgentMessage m;
  m.mutable_status()->set_full(true);
  for (auto& [id, job] : jobs_) {
    *m.mutable_status()->add_workloads() = StatusOf(id, job);
    MarkReported(*m.status().workloads().rbegin(), &job);
  }
  Send(m);
}

// Sends the job's status alone unless it is the one last reported; false
// when it was.
bool WorkloadRunner::ReportIfChanged(const std::string& id, LocalJob* job) {
  v1::WorkloadStatus ws = StatusOf(id, *job);
  if (!Unreported(ws, *job)) return false;
  v1::AgentMessage m;
  *m.mutable_status()->add_workloads() = ws;
  if (Send(m)) MarkReported(ws, job);
  return true;
}

v1::WorkloadStatus WorkloadRunner::StatusOf(const std::string& id, const LocalJob& job) const {
  v1::WorkloadStatus ws;
  ws.set_job_id(RefOf(id).job_id);
  ws.set_workload_id(id);
  ws.set_start_time_unix_nanos(job.started ? job.started->start_unix_nanos : job.launch_ns);
  if (job.exited) {
    ws.set_state(job.exited->failed_to_start ? v1::WORKLOAD_STATE_FAILED_TO_START : v1::WORKLOAD_STATE_EXITED);
    ws.set_exit_code(job.exited->exit_code);
    ws.set_signal(job.exited->signal);
    ws.set_end_time_unix_nanos(job.exited->end_unix_nanos);
    ws.set_message(job.stopped_for.empty() ? job.exited->message : job.stopped_for);
    ws.set_fenced(job.exited->fenced);
  } else if (job.pulling) {
    // Not started: its image is on its way (the server keeps it BOUND).
    ws.set_state(v1::WORKLOAD_STATE_UNSPECIFIED);
    auto w = desired_.find(id);
    std::string progress = w != desired_.end() && images_ ? images_->Progress(ImageRequest(w->second)) : "";
    ws.set_image_pull(progress.empty() ? "waiting for its image" : progress);
  } else {
    ws.set_state(v1::WORKLOAD_STATE_RUNNING);
  }
  ws.set_image_digest(job.image_digest);
  if (!job.pulling && !job.image_digest.empty()) {
    ws.set_image_cached(job.image_cached);
    ws.set_image_pull_millis(job.image_pull_ns / 1'000'000);
  }
  if (job.service) {
    ServiceView v = job.service->View();
    ws.set_port(v.port);
    ws.set_endpoint(v.endpoint);
    ws.set_restarts(v.restarts);
    ws.set_ready(v.ready && !job.exited);
    ws.set_not_ready_reason(
        Bounded(job.exited ? "ended: " + DescribeExit(*job.exited) : v.not_ready_reason, rpc::kMaxReasonBytes));
    if (job.first_start_ns > 0) ws.set_start_time_unix_nanos(job.first_start_ns);
  }
  return ws;
}

// Sends output not yet sent: a bounded amount, or all of it. Every
// replica of a gang ships its own (the server keeps a log per replica).
void WorkloadRunner::ShipLog(const std::string& id, LocalJob* job, bool all) {
  if (!Connected()) return;
  rpc::WorkloadRef ref = RefOf(id);
  std::ifstream in(job->output_dir + "/output.log", std::ios::binary);
  if (!in) return;
  in.seekg(job->log_sent);
  int64_t budget = all ? INT64_MAX : kLogPerTick;
  std::string buf(static_cast<size_t>(kLogChunk), '\0');
  // Bounded by what waits for the network too: a slow link paces the logs.
  while (budget > 0 && Connected() && connection_->queued_bytes() < kLogBacklog) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize n = in.gcount();
    if (n <= 0) break;
    v1::AgentMessage m;
    m.mutable_log()->set_job_id(ref.job_id);
    m.mutable_log()->set_workload_id(id);
    m.mutable_log()->set_offset(job->log_sent);
    m.mutable_log()->set_data(buf.data(), static_cast<size_t>(n));
    if (!Send(m)) break;
    job->log_sent += n;
    budget -= n;
  }
}

}  // namespace drover::agent
