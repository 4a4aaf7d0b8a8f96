#include "drover/agent/service_lifecycle.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

namespace drover::agent {
namespace {

namespace fs = std::filesystem;

// A line of the agent's own in the job's log (between two runs of a
// service's process, so nothing else writes then).
void AppendToLog(const LocalJob& job, const std::string& line) {
  int fd = ::open((job.output_dir + "/output.log").c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace

ServiceLifecycle::ServiceLifecycle(ServiceLifecycleOptions options, runtime::LoopClient* loop,
                                   const std::atomic<bool>* stopping)
    : opts_(std::move(options)), loop_(loop), stopping_(stopping) {
  ports_.SetRange(opts_.port_first, opts_.port_last);
}

void ServiceLifecycle::Stop() {
  if (prober_) prober_->Stop();
}

Status ServiceLifecycle::Prepare(const v1::Workload& w, const JobDir& dir, std::map<std::string, std::string>* env,
                                 std::unique_ptr<ServiceReplica>* out) {
  auto settings = ServiceSettingsOf(w.service());
  if (!settings.ok()) return InvalidArgument("invalid " + settings.status().message());
  DROVER_ASSIGN_OR_RETURN(int port, ports_.Allocate());
  (*env)["DROVER_PORT"] = std::to_string(port);
  if (!settings->model.empty()) {
    (*env)["DROVER_MODEL"] = settings->model;
    (*env)["DROVER_SERVED_MODEL_NAME"] = settings->model;
  }
  // The replica's secret: the engine answers only callers that send it (the
  // gateway). The server's value wins over a job env of the same name; a
  // replica of an older server has none and serves anyone, as before.
  if (!settings->api_key.empty()) {
    (*env)["DROVER_ENGINE_API_KEY"] = settings->api_key;
  } else {
    env->erase("DROVER_ENGINE_API_KEY");
  }
  if (Status s = WriteServiceFile(dir.path(), {port, 0, w.service()}); !s.ok()) {
    ports_.Release(port);
    return s;
  }
  *out = std::make_unique<ServiceReplica>(std::move(*settings), port, EndpointOf(opts_.advertise_host, port));
  return Status::Ok();
}

void ServiceLifecycle::Keep(LocalJob* job, std::unique_ptr<ServiceReplica> replica, const v1::ServiceSpec& spec) {
  job->service = std::move(replica);
  job->service_spec = spec;
}

void ServiceLifecycle::Adopt(LocalJob* job) {
  auto file = ReadServiceFile(job->dir.path());
  if (!file.ok()) {
    spdlog::warn("node '{}': job directory '{}' is adopted as a plain job: {}", opts_.node_name, job->dir.path(),
                 file.status().message());
    return;
  }
  if (!file->has_value()) return;
  ServiceFile& f = **file;
  auto settings = ServiceSettingsOf(f.spec);
  if (!settings.ok()) {
    spdlog::warn("node '{}': job directory '{}' is adopted as a plain job: {}", opts_.node_name, job->dir.path(),
                 settings.status().message());
    return;
  }
  ports_.Hold(f.port);
  job->service = std::make_unique<ServiceReplica>(std::move(*settings), f.port,
                                                  EndpointOf(opts_.advertise_host, f.port), f.restarts);
  job->service_spec = std::move(f.spec);
  // It was waiting for a restart (HoldForRestart): it ended as it said, and
  // is restarted after its back-off.
  std::error_code ec;
  const std::string waiting = job->dir.File("restart.json");
  if (fs::exists(waiting, ec) && !fs::exists(job->dir.File("started.json"), ec)) {
    (void)::rename(waiting.c_str(), job->dir.File("exit.json").c_str());
  }
}

void ServiceLifecycle::Observe(const std::string& id, LocalJob* job) {
  if (!job->service) return;
  if (job->exited) {
    HoldForRestart(id, job);
  } else if (job->started && !job->service->running()) {
    Started(id, job);
  }
}

void ServiceLifecycle::CheckReadyTimeout(LocalJob* job, ServiceTime now) {
  if (job->service) job->service->CheckReadyTimeout(now);
}

void ServiceLifecycle::Forget(const LocalJob& job) {
  if (job.service) ports_.Release(job.service->port());
}

void ServiceLifecycle::Started(const std::string& id, LocalJob* job) {
  job->service->Started(std::chrono::steady_clock::now());
  if (job->first_start_ns == 0) job->first_start_ns = job->started->start_unix_nanos;
  const uint64_t gen = job->service->generation();
  const ServiceSettings& s = job->service->settings();
  loop_->PostAfter(s.readiness.initial_delay, [this, id, gen] { ProbeTimer(id, gen, /*liveness=*/false); });
  if (s.liveness.Checks()) {
    loop_->PostAfter(s.liveness.initial_delay, [this, id, gen] { ProbeTimer(id, gen, /*liveness=*/true); });
  }
  (void)host_->Report(id, job);
}

// A service whose process ended is started again after its back-off,
// still running as far as the server is concerned, unless the server
// stopped it (or no longer wants it) or the node fenced it.
void ServiceLifecycle::HoldForRestart(const std::string& id, LocalJob* job) {
  const ExitFile e = *job->exited;
  if (e.fenced || job->sigterm_ns || *stopping_ || !host_->StillDesired(id)) return;
  const std::string how = DescribeExit(e);
  const std::chrono::milliseconds delay = job->service->Exited(how, std::chrono::steady_clock::now());
  job->last_exit = e;
  job->exited.reset();
  job->started.reset();
  job->restart_pending = true;
  // The exit waits in restart.json: an agent that restarts meanwhile finds
  // it (Adopt) instead of a job whose supervisor vanished.
  (void)::rename(job->dir.File("exit.json").c_str(), job->dir.File("restart.json").c_str());
  for (const char* f : {"started.json", "supervisor.pid"}) ::unlink(job->dir.File(f).c_str());
  AppendToLog(*job,
              fmt::format("drover: the service's process ended ({}); restarting it in {}\n", how, FormatDelay(delay)));
  spdlog::info("node '{}': service '{}' ended ({}); restarting it in {}", opts_.node_name, id, how, FormatDelay(delay));
  const uint64_t gen = job->service->generation();
  loop_->PostAfter(delay, [this, id, gen] { Relaunch(id, gen); });
  (void)host_->Report(id, job);
}

void ServiceLifecycle::Relaunch(const std::string& id, uint64_t gen) {
  LocalJob* found = *stopping_ ? nullptr : host_->FindJob(id);
  if (found == nullptr) return;
  LocalJob& job = *found;
  if (!job.restart_pending || !job.service || job.service->generation() != gen) return;
  if (!host_->StillDesired(id)) {
    AbandonRestart(&job);
    (void)host_->Report(id, &job);
    return;
  }
  job.restart_pending = false;
  job.service->Restarting();
  Status s = WriteServiceFile(job.dir.path(), {job.service->port(), job.service->restarts(), job.service_spec});
  ::unlink(job.dir.File("restart.json").c_str());
  if (s.ok()) s = host_->Respawn(id, &job);
  if (!s.ok()) {
    // Tried again after the next back-off.
    spdlog::error("node '{}' cannot restart service '{}': {}", opts_.node_name, id, s.message());
    job.exited = ExitFile{127, 0, NowNanos(), "the agent cannot restart it: " + s.message(), true};
    HoldForRestart(id, &job);
    return;
  }
  spdlog::info("node '{}' restarted service '{}' (restart {})", opts_.node_name, id, job.service->restarts());
  (void)host_->Report(id, &job);
}

void ServiceLifecycle::AbandonRestart(LocalJob* job) {
  job->restart_pending = false;
  ExitFile e = job->last_exit.value_or(ExitFile{});
  e.message = "stopped while waiting for its restart after " + DescribeExit(e);
  e.failed_to_start = false;
  host_->RecordEnd(job, e);
}

// The service job `id` while its process of generation `gen` runs.
LocalJob* ServiceLifecycle::RunningService(const std::string& id, uint64_t gen) {
  LocalJob* job = *stopping_ ? nullptr : host_->FindJob(id);
  if (job == nullptr) return nullptr;
  if (!job->service || job->service->generation() != gen || !job->started || job->exited || job->restart_pending) {
    return nullptr;
  }
  return job;
}

// Time for a probe of the process of generation `gen`: it runs on the
// probe thread; its result comes back to the loop.
void ServiceLifecycle::ProbeTimer(const std::string& id, uint64_t gen, bool liveness) {
  LocalJob* job = RunningService(id, gen);
  if (job == nullptr) return;
  const ProbeSettings& p = liveness ? job->service->settings().liveness : job->service->settings().readiness;
  if (!p.Checks()) {
    OnProbeResult(id, gen, liveness, Status::Ok());
    return;
  }
  if (!prober_) {
    prober_ = std::make_unique<runtime::EventLoop>("agent-probes");
    prober_->Start();
  }
  prober_->Post([this, p, port = job->service->port(), id, gen, liveness] {
    if (*stopping_) return;
    Status r = CheckProbe(p, port);
    loop_->Post([this, id, gen, liveness, r] { OnProbeResult(id, gen, liveness, r); });
  });
}

void ServiceLifecycle::OnProbeResult(const std::string& id, uint64_t gen, bool liveness, const Status& r) {
  LocalJob* job = RunningService(id, gen);
  if (job == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  if (liveness && job->service->Liveness(r, now)) {
    spdlog::warn("node '{}' kills service '{}': {}", opts_.node_name, id, job->service->not_ready_reason());
    ::kill(-job->started->pid, SIGKILL);
    (void)host_->Report(id, job);
    return;  // its exit restarts it
  }
  if (!liveness) job->service->Readiness(r, now);
  (void)host_->Report(id, job);
  const ProbeSettings& p = liveness ? job->service->settings().liveness : job->service->settings().readiness;
  loop_->PostAfter(p.period, [this, id, gen, liveness] { ProbeTimer(id, gen, liveness); });
}

}  // namespace drover::agent
