// WorkloadRunner: container workloads (docs/containers.md). Their images
// come from the node's store (image_store.h), their bundles from
// oci_bundle.h; the supervisor runs the runtime as the job's process
// (job_dir.h, ContainerRun), so a container has every guarantee a bare
// process has: it outlives the agent, its end is recorded, it is never
// started twice.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <filesystem>

#include "drover/agent/cgroup.h"
#include "drover/agent/devices/topology/host_topology.h"
#include "drover/agent/oci_bundle.h"
#include "drover/agent/seccomp_profile.h"
#include "drover/agent/workload_runner.h"
#include "drover/common/quantity.h"

namespace drover::agent {
namespace {

namespace fs = std::filesystem;

// Where no container mount may come from, beside the agent's own
// directories: the node's root, and what the kernel serves.
bool ForbiddenSource(const std::string& src) {
  if (src == "/") return true;
  for (const char* p : {"/proc", "/sys", "/dev", "/boot", "/etc", "/run", "/var/run"}) {
    if (PathWithin(src, p)) return true;
  }
  return false;
}

uint64_t HardLimit(int resource, uint64_t fallback) {
  struct rlimit r {};
  if (::getrlimit(resource, &r) != 0) return fallback;
  return r.rlim_max == RLIM_INFINITY ? UINT64_MAX : r.rlim_max;
}

}  // namespace

ImageStore* WorkloadRunner::Images(std::string* why) {
  if (images_) return images_.get();
  if (!images_problem_.empty()) {
    *why = images_problem_;
    return nullptr;
  }
  if (!opts_.containers.enabled) {
    images_problem_ = "containers are off on this node (--containers=off)";
  } else if (::geteuid() != 0) {
    images_problem_ = "containers need the agent to run as root";
  } else {
    ImageStoreOptions so = opts_.containers.store;
    if (so.root.empty()) so.root = opts_.data_dir + "/images";
    auto store = ImageStore::Open(std::move(so));
    if (store.ok()) {
      images_ = std::move(*store);
      return images_.get();
    }
    images_problem_ = store.status().message();
  }
  *why = images_problem_;
  return nullptr;
}

ImageStore::Request WorkloadRunner::ImageRequest(const v1::Workload& w) const {
  return ImageStore::Request{w.container().image(), w.image_digest(), w.container().pull_policy() == "always"};
}

bool WorkloadRunner::EnsureImage(const v1::Workload& w, const std::string& key, StoredImage* image) {
  LocalJob job(JobDir(jobs_dir_ + "/" + key));
  job.output_dir = outputs_dir_ + "/" + key;
  job.grace_seconds = w.termination_grace_seconds() > 0 ? w.termination_grace_seconds() : 10;
  job.launch_ns = NowNanos();
  std::string why;
  ImageStore* store = Images(&why);
  Result<std::optional<StoredImage>> got = Unavailable(why);
  if (store != nullptr) {
    got = store->Ensure(ImageRequest(w), [this, key](Result<StoredImage> r) {
      loop_->Post([this, key, r = std::move(r)]() mutable { OnImage(key, std::move(r)); });
    });
  }
  if (got.ok() && got->has_value()) {
    *image = std::move(**got);
    return true;
  }
  std::error_code ec;
  fs::create_directories(job.dir.path(), ec);
  fs::create_directories(job.output_dir, ec);
  if (!got.ok()) {
    spdlog::error("node '{}' cannot start job '{}': {}", opts_.node_name, key, got.status().message());
    RecordEnd(&job, ExitFile{127, 0, NowNanos(), got.status().message(), true});
  } else {
    spdlog::info("node '{}': job '{}' waits for its image {}", opts_.node_name, key, w.container().image());
    job.pulling = true;
  }
  auto [it, added] = jobs_.emplace(key, std::move(job));
  // The server hears at once that it waits for its image (or why it failed).
  if (added) ReportIfChanged(key, &it->second);
  return false;
}

void WorkloadRunner::OnImage(const std::string& key, Result<StoredImage> image) {
  if (*stopping_) return;
  auto it = jobs_.find(key);
  if (it == jobs_.end() || !it->second.pulling) return;  // cancelled meanwhile, and forgotten
  LocalJob& job = it->second;
  job.pulling = false;
  auto desired = desired_.find(key);
  if (!image.ok() || desired == desired_.end()) {
    std::string why = !image.ok() ? image.status().message() : "stopped while its image was pulled";
    RecordEnd(&job, ExitFile{!image.ok() ? 127 : -1, image.ok() ? SIGTERM : 0, NowNanos(), why, !image.ok()});
    ReportIfChanged(key, &job);
    return;
  }
  // The placeholder goes; the launch makes the job's record anew.
  const int64_t waited_ns = NowNanos() - job.launch_ns;
  std::error_code ec;
  fs::remove_all(job.dir.path(), ec);
  jobs_.erase(it);
  const v1::Workload w = desired->second;
  Launch(w, &*image);
  if (auto j = jobs_.find(key); j != jobs_.end()) {
    j->second.image_pull_ns = waited_ns;
    ReportIfChanged(key, &j->second);
  }
}

Status WorkloadRunner::PrepareContainer(const v1::Workload& w, const std::string& key, const StoredImage& image,
                                        LocalJob* job, JobIsolation* iso, std::map<std::string, std::string> env,
                                        JobSpecFile* spec) {
  const v1::ContainerSpec& c = w.container();
  ContainerInputs in;
  DROVER_ASSIGN_OR_RETURN(in.args, ContainerArgs(image.config, {w.command().begin(), w.command().end()}));
  in.env = ContainerEnv(image.config, env);
  in.cwd = !w.working_dir().empty()            ? w.working_dir()
           : !image.config.working_dir.empty() ? image.config.working_dir
                                               : "/";
  if (in.cwd[0] != '/') return InvalidArgument(fmt::format("working directory '{}' is not absolute", in.cwd));
  // The sandbox's user and filter (sandbox.h): a tenant's own uid, or the
  // image's user for a tenant that may run as root.
  const bool sandboxed = opts_.sandbox.enabled;
  const bool as_root = !sandboxed || opts_.sandbox.root_tenants.contains(w.tenant());
  in.as_root = as_root;
  if (as_root) {
    in.uid = image.config.uid;
    in.gid = image.config.gid;
  } else {
    in.uid = in.gid = SandboxUid(opts_.sandbox, w.tenant());
  }
  if (sandboxed && opts_.sandbox.seccomp && inventory_->seccomp()) in.seccomp_json = SeccompOciJson(as_root);
  in.hostname = opts_.node_name;
  in.network_none = c.network() == "none";
  in.memory_bytes = w.memory_bytes();
  in.cpu_millis = w.cpu_millis();
  in.shm_bytes = ShmBytes(c.shm_bytes(), w.memory_bytes());
  in.cpus = iso->cpus;
  in.nofile = HardLimit(RLIMIT_NOFILE, 1024);
  in.memlock = HardLimit(RLIMIT_MEMLOCK, 64 << 10);
  // Inside the job's v2 group (its device program holds, the supervisor
  // kills its subtree when it ends); runc makes the same path in each v1
  // hierarchy for the limits of the controllers v1 holds (docs/containers.md).
  // A group of the container's own inside the job's: runc removes it when
  // the container ends, which it cannot do to the group its own process is in.
  if (iso->cgroup) {
    std::string path = CgroupPath(ProcessCgroupHome().mount, iso->cgroup->dir);
    if (!path.empty()) in.cgroups_path = path + "/container";
  }
  if (in.cgroups_path.empty()) in.cgroups_path = "/drover/" + ContainerId(key);
  // Its checkpoint directory, at the path DROVER_CHECKPOINT_DIR names.
  const std::string checkpoint = CheckpointDir(w.job_id());
  in.binds.push_back({checkpoint, checkpoint, false});
  // The launch contract's names (docs/distributed.md): its hosts file as
  // /etc/hosts, the MPI hostfile where DROVER_HOSTFILE names it.
  in.binds.push_back({job->output_dir + "/hosts", "/etc/hosts", true});
  if (auto h = env.find("DROVER_HOSTFILE"); h != env.end()) in.binds.push_back({h->second, h->second, true});
  // The memory-limit shim and its reports, at the paths its variables name.
  if (auto p = env.find("LD_PRELOAD"); p != env.end() && !p->second.empty()) {
    in.binds.push_back({p->second, p->second, true});
  }
  if (auto r = env.find("DROVER_GPU_MEMORY_REPORT"); r != env.end()) {
    in.binds.push_back({r->second, r->second, false});
  }
  for (const v1::Mount& m : c.mounts()) {
    const std::string src = fs::path(m.source()).lexically_normal().string();
    if (src.empty() || src[0] != '/' || ForbiddenSource(src) || PathWithin(src, opts_.data_dir) ||
        PathWithin(src, state_dir_) || PathWithin(src, CheckpointRoot()) || PathWithin(opts_.data_dir, src)) {
      return PermissionDenied(
          fmt::format("mount '{}' is not allowed on this node (the node's own directories)", m.source()));
    }
    if (!fs::exists(src)) return InvalidArgument(fmt::format("mount source '{}' does not exist on this node", src));
    in.binds.push_back({src, m.target(), m.read_only()});
  }
  // Its GPUs' device files (CDI edits: cdi.h), no other.
  for (const DeviceNode& d : inventory_->DeviceNodesFor(w)) in.devices.push_back(d);

  // The bundle in the job's state directory; the writable layer beside its output.
  const std::string bundle = job->dir.path() + "/bundle";
  const std::string upper = job->output_dir + "/container/upper";
  const std::string work = job->output_dir + "/container/work";
  std::error_code ec;
  for (const std::string& d : {bundle + "/rootfs", upper, work}) {
    fs::create_directories(d, ec);
    if (ec) return Unavailable(fmt::format("cannot create '{}': {}", d, ec.message()));
  }
  // The root of the container is the upper layer's root: as the image's.
  ::chmod(upper.c_str(), 0755);
  ::chmod((job->output_dir + "/container").c_str(), 0700);
  if (!as_root) {
    // Its checkpoint directory and the shim's reports are its user's.
    for (const BindMount& b : in.binds) {
      if (!b.read_only) (void)::chown(b.source.c_str(), in.uid, in.gid);
    }
  }
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(bundle + "/config.json", RuntimeSpecJson(in), 0600, /*durable=*/false));

  ContainerRun run;
  run.runtime = opts_.containers.runtime;
  run.root = state_dir_ + "/runc";
  run.id = ContainerId(key);
  run.bundle = bundle;
  run.lower_dir = images_->LowerDir();
  run.lower = fmt::format("{}", fmt::join(image.lowers, ":"));
  run.upper = upper;
  run.work = work;
  // The kernel takes a page of mount options: an image of very many layers
  // (128 at most are pulled) with a long data directory may not fit.
  if (constexpr size_t kMaxMountOptions = 4000;
      run.lower.size() + run.upper.size() + run.work.size() + 32 > kMaxMountOptions) {
    return InvalidArgument(fmt::format("{} has too many layers ({}) to mount under '{}'", c.image(),
                                       image.lowers.size(), job->output_dir));
  }
  run.image = c.image();
  run.digest = image.digest;
  spec->container = std::move(run);
  spec->command = in.args;
  spec->env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
  iso->sandbox.reset();  // the runtime's (config.json)
  job->image_digest = image.digest;
  if (images_) images_->Use(image.digest);
  // Its writable layer's limit: the job's, within the node's.
  int64_t disk = opts_.containers.disk_limit_bytes;
  if (c.disk_bytes() > 0) disk = disk > 0 ? std::min(disk, c.disk_bytes()) : c.disk_bytes();
  if (disk > 0) {
    if (!disk_) {
      disk_ = std::make_unique<DiskWatch>(opts_.containers.disk_check_every,
                                          [this](const std::string& k, int64_t bytes, int64_t limit) {
                                            loop_->Post([this, k, bytes, limit] { OnDiskOver(k, bytes, limit); });
                                          });
    }
    disk_->Add(key, upper, disk);
  }
  spdlog::info("node '{}': job '{}' runs in {} ({})", opts_.node_name, key, c.image(), image.digest);
  return Status::Ok();
}

// A container wrote more than its limit outside its mounts: stopped at once
// (SIGKILL: a job filling the node's disk gets no grace), with why.
void WorkloadRunner::OnDiskOver(const std::string& key, int64_t bytes, int64_t limit) {
  if (*stopping_) return;
  auto it = jobs_.find(key);
  // Not started yet (the next look comes back), ended, or stopped already.
  if (it == jobs_.end() || it->second.exited || !it->second.started || !it->second.stopped_for.empty()) return;
  LocalJob& job = it->second;
  job.stopped_for =
      fmt::format("stopped: its container wrote {} outside its mounts, more than its limit of {} (--disk)",
                  FormatBytes(bytes), FormatBytes(limit));
  spdlog::warn("node '{}': job '{}' {}", opts_.node_name, key, job.stopped_for);
  ::kill(-job.started->pid, SIGKILL);
}

void WorkloadRunner::AddImages(v1::Heartbeat* h) {
  if (!images_) return;
  const uint64_t version = images_->Version();
  if (version == images_said_) return;
  images_said_ = version;
  h->set_images_changed(true);
  for (const StoredImage& im : images_->Snapshot()) ToNodeImage(im, h->add_images());
}

void WorkloadRunner::PullImage(const v1::PullImage& p) {
  if (p.has_archive()) {
    LoadArchive(p);
    return;
  }
  std::string why;
  ImageStore* store = Images(&why);
  if (store == nullptr) {
    spdlog::warn("node '{}' cannot pull {}: {}", opts_.node_name, p.reference(), why);
    return;
  }
  const std::string ref = p.reference();
  auto got = store->Ensure(ImageStore::Request{ref, "", p.pull_policy() == "always"},
                           [node = opts_.node_name, ref](Result<StoredImage> r) {
                             if (r.ok()) {
                               spdlog::info("node '{}' pulled {} ({})", node, ref, r->digest);
                             } else {
                               spdlog::warn("node '{}' cannot pull {}: {}", node, ref, r.status().message());
                             }
                           });
  if (!got.ok()) spdlog::warn("node '{}' cannot pull {}: {}", opts_.node_name, ref, got.status().message());
}

// An administrator's load of an archive (NodeService.LoadImage): fetched
// from the server, checked and stored by the store; the server hears how
// it went (ImageLoaded), a refusal included.
void WorkloadRunner::LoadArchive(const v1::PullImage& p) {
  const v1::ImageArchive& a = p.archive();
  auto answer = [this, id = a.load_id()](const Result<StoredImage>& r) {
    v1::AgentMessage m;
    v1::ImageLoaded* l = m.mutable_image_loaded();
    l->set_load_id(id);
    if (r.ok()) {
      spdlog::info("node '{}' loaded {} ({}) from an archive", opts_.node_name, r->references.front(), r->digest);
      ToNodeImage(*r, l->mutable_image());
    } else {
      spdlog::warn("node '{}' cannot load an image archive: {}", opts_.node_name, r.status().message());
      l->set_error(r.status().message());
    }
    if (!Send(m)) spdlog::warn("node '{}' could not tell the server how its load went", opts_.node_name);
  };
  std::string why;
  ImageStore* store = Images(&why);
  if (store == nullptr) return answer(Unavailable(why));
  if (!p.reference().empty()) {
    if (auto ref = ParseImageRef(p.reference()); !ref.ok()) return answer(ref.status());
  }
  if (a.sha256().size() != 64) return answer(InvalidArgument("the archive's sha256 is not 64 hex digits"));
  auto path = store->PrepareArchive(a.load_id(), a.size_bytes());
  if (!path.ok()) return answer(path.status());
  if (connection_ == nullptr) return answer(Unavailable("the node has no connection to the server"));
  ImageStore::Archive archive{*path, p.reference(), a.size_bytes(), a.sha256()};
  connection_->FetchImageArchive(a.load_id(), *path, a.size_bytes(),
                                 [this, store, answer, archive = std::move(archive)](Status fetched) mutable {
                                   if (*stopping_) return;
                                   if (!fetched.ok()) {
                                     ::unlink(archive.path.c_str());
                                     return answer(fetched);
                                   }
                                   store->Load(std::move(archive), [this, answer](Result<StoredImage> r) {
                                     loop_->Post([answer, r = std::move(r)] { answer(r); });
                                   });
                                 });
}

void ToNodeImage(const StoredImage& im, v1::NodeImage* n) {
  for (const std::string& r : im.references) n->add_references(r);
  n->set_digest(im.digest);
  n->set_size_bytes(im.size_bytes);
  n->set_in_use(im.in_use);
  n->set_last_used_unix_nanos(im.last_used_unix_nanos);
}

}  // namespace drover::agent
