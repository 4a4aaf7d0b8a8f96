#include "drover/agent/image_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "drover/auth/token.h"
#include "drover/common/files.h"
#include "drover/common/json_depth.h"
#include "drover/common/quantity.h"

extern char** environ;

namespace drover::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxToolOutput = 8 << 20;  // a manifest is at most 4 MiB
constexpr size_t kMaxToolError = 4096;
constexpr size_t kMaxReferences = 64;

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What a tool printed and how it ended.
struct ToolResult {
  int status = 0;
  std::string out, err;
};

// Runs `argv` (posix_spawn: safe in this threaded process), its output
// kept up to bounds; `tick` is called about every 250 ms while it runs, and
// when it answers a reason, the tool is killed and that is the error.
Result<ToolResult> RunTool(const std::vector<std::string>& argv, const std::function<std::string()>& tick = nullptr) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Unavailable(fmt::format("pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return Unavailable(fmt::format("cannot run '{}': {}", argv[0], std::strerror(rc)));
  }
  ToolResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  std::string stopped;
  auto last_tick = std::chrono::steady_clock::now();
  while (open_fds > 0) {
    int n = ::poll(fds, 2, 250);
    if (n < 0 && errno != EINTR) break;
    if (tick && std::chrono::steady_clock::now() - last_tick >= std::chrono::milliseconds(250)) {
      last_tick = std::chrono::steady_clock::now();
      stopped = tick();
      if (!stopped.empty()) {
        ::kill(pid, SIGKILL);
        break;
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      std::string& into = i == 0 ? r.out : r.err;
      const size_t cap = i == 0 ? kMaxToolOutput : kMaxToolError;
      if (into.size() < cap) into.append(buf, std::min<size_t>(static_cast<size_t>(got), cap - into.size()));
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  if (!stopped.empty()) return Unavailable(stopped);
  return r;
}

// The last line a tool wrote to stderr, trimmed of its log prefix.
std::string LastLine(const std::string& err) {
  std::string s = err;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  if (size_t nl = s.rfind('\n'); nl != std::string::npos) s = s.substr(nl + 1);
  // skopeo: `time="..." level=fatal msg="..."`
  if (size_t m = s.find("msg=\""); m != std::string::npos) {
    s = s.substr(m + 5);
    if (!s.empty() && s.back() == '"') s.pop_back();
  }
  if (s.size() > 500) s = s.substr(0, 500) + "...";
  return s;
}

bool Exited0(const ToolResult& r) { return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

std::string Hex(const std::string& digest) { return digest.substr(digest.find(':') + 1); }

int64_t TreeBytes(const fs::path& p) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(p, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0) total += st.st_blocks * 512;
  }
  return total;
}

json ConfigJson(const ImageConfig& c) {
  return json{{"entrypoint", c.entrypoint},
              {"cmd", c.cmd},
              {"env", c.env},
              {"working_dir", c.working_dir},
              {"user", c.user},
              {"uid", c.uid},
              {"gid", c.gid}};
}

ImageConfig ConfigFrom(const json& j) {
  ImageConfig c;
  c.entrypoint = j.value("entrypoint", std::vector<std::string>{});
  c.cmd = j.value("cmd", std::vector<std::string>{});
  c.env = j.value("env", std::vector<std::string>{});
  c.working_dir = j.value("working_dir", "");
  c.user = j.value("user", "");
  c.uid = j.value("uid", 0u);
  c.gid = j.value("gid", 0u);
  return c;
}

}  // namespace
ImageStore::ImageStore(ImageStoreOptions o) : opts_(std::move(o)) {}

Result<std::unique_ptr<ImageStore>> ImageStore::Open(ImageStoreOptions o) {
  std::error_code ec;
  for (const char* d : {"oci", "bundles", "tmp"}) {
    fs::create_directories(o.root + "/" + d, ec);
    if (ec) return Unavailable(fmt::format("cannot create the image store '{}': {}", o.root, ec.message()));
  }
  ::chmod(o.root.c_str(), 0711);
  for (const auto& e : fs::directory_iterator(o.root + "/tmp", ec)) fs::remove_all(e.path(), ec);
  std::unique_ptr<ImageStore> store(new ImageStore(std::move(o)));
  auto text = ReadTextFile(store->opts_.root + "/images.json", 16 << 20);
  if (text.ok()) {
    json j = json::parse(*text, nullptr, false);
    MutexLock lock(&store->mu_);
    if (j.is_object() && j.contains("images") && j["images"].is_array()) {
      for (const json& e : j["images"]) {
        if (!e.is_object()) continue;
        StoredImage im;
        im.digest = e.value("digest", "");
        if (!ValidImageDigest(im.digest)) continue;
        im.rootfs = store->opts_.root + "/bundles/" + Hex(im.digest) + "/rootfs";
        if (!fs::is_directory(im.rootfs, ec)) continue;
        im.references = e.value("references", std::vector<std::string>{});
        im.size_bytes = e.value("size_bytes", int64_t{0});
        im.last_used_unix_nanos = e.value("last_used_unix_nanos", int64_t{0});
        if (e.contains("config") && e["config"].is_object()) im.config = ConfigFrom(e["config"]);
        for (const std::string& r : im.references) store->references_[r] = im.digest;
        store->images_[im.digest] = std::move(im);
      }
    }
  }
  store->worker_ = std::thread([s = store.get()] { s->Work(); });
  return store;
}

ImageStore::~ImageStore() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.SignalAll();
  if (worker_.joinable()) worker_.join();
}

std::string ImageStore::PullKey(const ImageRef& ref, const std::string& digest, bool always) {
  if (!digest.empty()) return ref.Name() + "@" + digest;
  return (always ? "always " : "") + ref.String();
}

Result<std::optional<StoredImage>> ImageStore::Ensure(const Request& r, Done done) {
  DROVER_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(r.reference));
  if (!r.digest.empty() && !ValidImageDigest(r.digest)) {
    return InvalidArgument(fmt::format("image digest '{}' is not sha256:<64 hex>", r.digest));
  }
  std::string pinned = !r.digest.empty() ? r.digest : ref.digest;
  MutexLock lock(&mu_);
  auto held = [&]() DROVER_REQUIRES(mu_) -> const StoredImage* {
    if (!pinned.empty()) {
      auto it = images_.find(pinned);
      return it == images_.end() ? nullptr : &it->second;
    }
    if (r.always) return nullptr;
    auto d = references_.find(ref.String());
    if (d == references_.end()) return nullptr;
    auto it = images_.find(d->second);
    return it == images_.end() ? nullptr : &it->second;
  }();
  if (held != nullptr) {
    StoredImage copy = *held;
    return std::optional<StoredImage>(std::move(copy));
  }
  const std::string key = PullKey(ref, pinned, r.always && pinned.empty());
  auto [it, fresh] = pulls_.try_emplace(key);
  it->second.waiters.push_back(std::move(done));
  if (fresh) {
    it->second.ref = ref;
    it->second.digest = pinned;
    it->second.progress = fmt::format("waiting to pull {}", ref.String());
    queue_.push_back(key);
    wake_.SignalAll();
  }
  return std::optional<StoredImage>();
}

std::string ImageStore::Progress(const Request& r) const {
  auto ref = ParseImageRef(r.reference);
  if (!ref.ok()) return "";
  std::string pinned = !r.digest.empty() ? r.digest : ref->digest;
  MutexLock lock(&mu_);
  auto it = pulls_.find(PullKey(*ref, pinned, r.always && pinned.empty()));
  return it == pulls_.end() ? "" : it->second.progress;
}

void ImageStore::SetProgress(const std::string& key, std::string text) {
  MutexLock lock(&mu_);
  if (auto it = pulls_.find(key); it != pulls_.end()) it->second.progress = std::move(text);
}

void ImageStore::Use(const std::string& digest) {
  MutexLock lock(&mu_);
  if (auto it = images_.find(digest); it != images_.end()) {
    ++it->second.in_use;
    it->second.last_used_unix_nanos = NowNanos();
    ++version_;
  }
}

void ImageStore::Release(const std::string& digest) {
  MutexLock lock(&mu_);
  if (auto it = images_.find(digest); it != images_.end() && it->second.in_use > 0) {
    --it->second.in_use;
    it->second.last_used_unix_nanos = NowNanos();
    ++version_;
  }
}

std::vector<StoredImage> ImageStore::Snapshot() const {
  MutexLock lock(&mu_);
  std::vector<StoredImage> out;
  for (const auto& [d, im] : images_) out.push_back(im);
  return out;
}

uint64_t ImageStore::Version() const {
  MutexLock lock(&mu_);
  return version_;
}

void ImageStore::SaveLocked() const {
  json list = json::array();
  for (const auto& [d, im] : images_) {
    list.push_back({{"digest", im.digest},
                    {"references", im.references},
                    {"size_bytes", im.size_bytes},
                    {"last_used_unix_nanos", im.last_used_unix_nanos},
                    {"config", ConfigJson(im.config)}});
  }
  WriteFileAtomic(opts_.root + "/images.json", json{{"images", list}}.dump(), 0600, /*durable=*/false)
      .IgnoreError("the store's list is rebuilt from what it holds only by pulling again");
}

std::vector<std::string> ImageStore::TransportFlags(const ImageRef& ref, bool src) const {
  std::vector<std::string> f;
  bool insecure = std::find(opts_.insecure_registries.begin(), opts_.insecure_registries.end(), ref.registry) !=
                  opts_.insecure_registries.end();
  if (src) {
    if (insecure) f.push_back("--src-tls-verify=false");
    if (!opts_.auth_file.empty()) f.push_back("--src-authfile=" + opts_.auth_file);
  } else {
    if (insecure) f.push_back("--tls-verify=false");
    if (!opts_.auth_file.empty()) f.push_back("--authfile=" + opts_.auth_file);
  }
  return f;
}

// The raw manifest of `what` (a tag or "@digest" of ref's name) and its digest.
Result<std::string> ImageStore::Inspect(const ImageRef& ref, const std::string& what, std::string* digest) const {
  std::vector<std::string> argv = {opts_.skopeo, "inspect", "--raw", "--retry-times=0"};
  for (std::string& f : TransportFlags(ref, false)) argv.push_back(std::move(f));
  argv.push_back("docker://" + ref.Name() + what);
  DROVER_ASSIGN_OR_RETURN(ToolResult r, RunTool(argv));
  if (!Exited0(r))
    return Unavailable(fmt::format("cannot read the manifest of {}{}: {}", ref.Name(), what, LastLine(r.err)));
  if (r.out.size() > kMaxManifestBytes)
    return InvalidArgument(fmt::format("the manifest of {} is too large", ref.Name()));
  *digest = "sha256:" + auth::Sha256Hex(r.out);
  return r.out;
}

void ImageStore::Work() {
  for (;;) {
    std::string key;
    Pull pull;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) wake_.Wait(&mu_);
      if (stopping_) return;
      key = queue_.front();
      queue_.pop_front();
      pull.ref = pulls_.at(key).ref;
      pull.digest = pulls_.at(key).digest;
    }
    Result<StoredImage> got = RunPull(key, pull);
    std::vector<Done> waiters;
    {
      MutexLock lock(&mu_);
      auto it = pulls_.find(key);
      waiters = std::move(it->second.waiters);
      pulls_.erase(it);
    }
    if (!got.ok()) spdlog::warn("image store: pull of {} failed: {}", pull.ref.String(), got.status().message());
    for (Done& d : waiters) d(got);
  }
}

// The config of the image named `tag` in the OCI layout `layout`.
static Result<ImageConfig> ReadLayoutConfig(const std::string& layout, const std::string& tag,
                                            const std::string& name) {
  auto index = ReadTextFile(layout + "/index.json", 16 << 20);
  if (!index.ok()) return Unavailable(fmt::format("cannot read the image layout: {}", index.status().message()));
  json j = json::parse(*index, nullptr, false);
  std::string local;
  if (j.is_object() && j.contains("manifests") && j["manifests"].is_array()) {
    for (const json& e : j["manifests"]) {
      if (e.is_object() && e.contains("annotations") && e["annotations"].is_object() &&
          e["annotations"].value("org.opencontainers.image.ref.name", "") == tag) {
        local = e.value("digest", "");
      }
    }
  }
  if (!ValidImageDigest(local)) return Unavailable(fmt::format("the image layout does not list {}", tag));
  auto manifest = ReadTextFile(layout + "/blobs/sha256/" + Hex(local), kMaxManifestBytes);
  if (!manifest.ok()) return Unavailable("cannot read the pulled manifest: " + manifest.status().message());
  json mj = json::parse(*manifest, nullptr, false);
  std::string cfg =
      mj.is_object() && mj.contains("config") && mj["config"].is_object() ? mj["config"].value("digest", "") : "";
  if (!ValidImageDigest(cfg)) return InvalidArgument(fmt::format("the manifest of {} has no config digest", name));
  auto blob = ReadTextFile(layout + "/blobs/sha256/" + Hex(cfg), kMaxImageConfigBytes);
  if (!blob.ok()) return Unavailable("cannot read the image config: " + blob.status().message());
  return ParseImageConfig(*blob);
}

Result<StoredImage> ImageStore::RunPull(const std::string& key, const Pull& p) {
  const std::string name = p.ref.String();
  SetProgress(key, fmt::format("resolving {}", name));
  // The manifest first: what it promises is checked before a layer comes.
  std::string digest;
  std::string raw;
  if (!p.digest.empty()) {
    DROVER_ASSIGN_OR_RETURN(raw, Inspect(p.ref, "@" + p.digest, &digest));
    if (digest != p.digest) {
      return InvalidArgument(
          fmt::format("the registry's manifest for {} has digest {}, not {}", name, digest, p.digest));
    }
  } else {
    DROVER_ASSIGN_OR_RETURN(raw, Inspect(p.ref, ":" + p.ref.tag, &digest));
  }
  DROVER_ASSIGN_OR_RETURN(ManifestInfo m, ParseManifest(raw, opts_.max_layers));
  if (m.is_index) {
    std::string list_digest = digest;
    DROVER_ASSIGN_OR_RETURN(raw, Inspect(p.ref, "@" + m.platform_digest, &digest));
    if (digest != m.platform_digest) {
      return InvalidArgument(
          fmt::format("the manifest list of {} names {}, the registry served {}", name, m.platform_digest, digest));
    }
    DROVER_ASSIGN_OR_RETURN(m, ParseManifest(raw, opts_.max_layers));
    if (m.is_index) return InvalidArgument(fmt::format("the manifest list of {} nests another", name));
  }
  int64_t total = m.config_size;
  for (int64_t s : m.layer_sizes) total += s;
  if (opts_.limit_bytes > 0 && total > opts_.limit_bytes) {
    return ResourceExhausted(fmt::format("{} is {} compressed, more than the node's image store may hold ({})", name,
                                         FormatBytes(total), FormatBytes(opts_.limit_bytes)));
  }
  {
    // A tag that resolves to an image held already (pull policy always).
    MutexLock lock(&mu_);
    if (auto it = images_.find(digest); it != images_.end()) {
      StoredImage& im = it->second;
      if (std::find(im.references.begin(), im.references.end(), name) == im.references.end() &&
          im.references.size() < kMaxReferences) {
        im.references.push_back(name);
      }
      references_[name] = digest;
      ++version_;
      SaveLocked();
      return im;
    }
  }
  // The layers, into the one layout (skopeo checks each against its digest).
  const std::string hex = Hex(digest);
  const std::string tag = "m-" + hex;
  const std::string layout = opts_.root + "/oci";
  std::vector<std::string> copy = {opts_.skopeo, "copy", "--retry-times=0", "--quiet"};
  for (std::string& f : TransportFlags(p.ref, true)) copy.push_back(std::move(f));
  copy.push_back("docker://" + p.ref.Name() + "@" + digest);
  copy.push_back("oci:" + layout + ":" + tag);
  // Progress: what the layout grew by (skopeo writes each blob beside it,
  // then renames it in).
  const int64_t before = TreeBytes(layout);
  int64_t seen = -1;
  auto moved_at = std::chrono::steady_clock::now();
  auto tick = [&]() -> std::string {
    int64_t now = std::max<int64_t>(0, TreeBytes(layout) - before);
    SetProgress(key, fmt::format("pulling {}: {} of {}", name, FormatBytes(std::min(now, total)), FormatBytes(total)));
    // A registry that stops sending: the pull ends instead of hanging.
    if (now != seen) {
      seen = now;
      moved_at = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - moved_at > opts_.stall_timeout) {
      return fmt::format("cannot pull {}: the registry sent nothing for {} s", name,
                         std::chrono::duration_cast<std::chrono::seconds>(opts_.stall_timeout).count());
    }
    return "";
  };
  SetProgress(key, fmt::format("pulling {}: 0 B of {}", name, FormatBytes(total)));
  DROVER_ASSIGN_OR_RETURN(ToolResult c, RunTool(copy, tick));
  if (!Exited0(c)) return Unavailable(fmt::format("cannot pull {}: {}", name, LastLine(c.err)));
  // Unpacked once, beside the others; a crash mid-way leaves only tmp/.
  SetProgress(key, fmt::format("unpacking {}", name));
  const std::string tmp = opts_.root + "/tmp/" + hex;
  const std::string bundle = opts_.root + "/bundles/" + hex;
  std::error_code ec;
  fs::remove_all(tmp, ec);
  // A layer that unpacks to far more than its bytes (a decompression bomb)
  // is stopped while it grows: at 100 times its packed size and 64 MiB,
  // or what the store may hold.
  int64_t unpack_limit = total * 100 + (int64_t{64} << 20);
  if (opts_.limit_bytes > 0) unpack_limit = std::min(unpack_limit, opts_.limit_bytes);
  auto bound = [&]() -> std::string {
    int64_t size = TreeBytes(tmp);
    if (size <= unpack_limit) return "";
    return fmt::format("cannot unpack {}: it unpacks to more than {} ({} packed)", name, FormatBytes(unpack_limit),
                       FormatBytes(total));
  };
  // `raw unpack`: the root file system only, without the runtime config
  // and the mtree of every file's digest a plain unpack adds (a third of
  // its time on a 1 GiB image: docs/performance.md).
  std::error_code mec;
  fs::create_directories(tmp, mec);
  auto unpacked = RunTool({opts_.umoci, "raw", "unpack", "--image", layout + ":" + tag, tmp + "/rootfs"}, bound);
  if (!unpacked.ok()) {
    fs::remove_all(tmp, ec);
    return unpacked.status();
  }
  const ToolResult& u = *unpacked;
  // What grew past the bound between two looks, or all at once.
  if (std::string over = bound(); !over.empty()) {
    fs::remove_all(tmp, ec);
    return Unavailable(over);
  }
  if (!Exited0(u)) {
    fs::remove_all(tmp, ec);
    return Unavailable(fmt::format("cannot unpack {}: {}", name, LastLine(u.err)));
  }
  // The image's own settings: its config blob, and its user resolved in
  // its own /etc/passwd.
  DROVER_ASSIGN_OR_RETURN(ImageConfig config, ReadLayoutConfig(layout, tag, name));
  DROVER_ASSIGN_OR_RETURN(auto ids, ResolveImageUser(tmp + "/rootfs", config.user));
  config.uid = ids.first;
  config.gid = ids.second;
  fs::remove_all(bundle, ec);
  fs::rename(tmp, bundle, ec);
  if (ec) return Unavailable(fmt::format("cannot keep the unpacked {}: {}", name, ec.message()));
  StoredImage im;
  im.digest = digest;
  im.references = {name};
  im.rootfs = bundle + "/rootfs";
  im.config = std::move(config);
  im.size_bytes = total + TreeBytes(bundle);
  im.last_used_unix_nanos = NowNanos();
  std::vector<std::string> evicted;
  {
    MutexLock lock(&mu_);
    references_[name] = digest;
    images_[digest] = im;
    ++version_;
    evicted = EvictLocked(digest);
    SaveLocked();
  }
  RemoveEvicted(evicted);
  return im;
}

// Above the limit, the images used longest ago that nothing uses go, but
// `keep` (the one just pulled, for the job waiting on it): forgotten here,
// their files removed by RemoveEvicted without the lock.
std::vector<std::string> ImageStore::EvictLocked(const std::string& keep) {
  std::vector<std::string> out;
  if (opts_.limit_bytes <= 0) return out;
  int64_t held = 0;
  for (const auto& [d, im] : images_) held += im.size_bytes;
  std::vector<const StoredImage*> order;
  for (const auto& [d, im] : images_) {
    if (d != keep && im.in_use == 0) order.push_back(&im);
  }
  std::sort(order.begin(), order.end(), [](const StoredImage* a, const StoredImage* b) {
    return a->last_used_unix_nanos < b->last_used_unix_nanos;
  });
  for (const StoredImage* im : order) {
    if (held <= opts_.limit_bytes) break;
    const std::string digest = im->digest;
    spdlog::info("image store: evicting {} ({}) to stay under {}", digest,
                 im->references.empty() ? "" : im->references.front(), FormatBytes(opts_.limit_bytes));
    held -= im->size_bytes;
    for (auto it = references_.begin(); it != references_.end();) {
      it = it->second == digest ? references_.erase(it) : std::next(it);
    }
    images_.erase(digest);
    out.push_back(digest);
  }
  if (!out.empty()) ++version_;
  return out;
}

// Runs on the store's thread, the only one that changes the layout.
void ImageStore::RemoveEvicted(const std::vector<std::string>& digests) {
  if (digests.empty()) return;
  for (const std::string& digest : digests) {
    std::error_code ec;
    fs::remove_all(opts_.root + "/bundles/" + Hex(digest), ec);
    auto rm = RunTool({opts_.umoci, "rm", "--image", opts_.root + "/oci:m-" + Hex(digest)});
    if (!rm.ok() || !Exited0(*rm)) spdlog::warn("image store: cannot remove {} from the layout", digest);
  }
  // Blobs no image names any more.
  auto gc = RunTool({opts_.umoci, "gc", "--layout", opts_.root + "/oci"});
  if (!gc.ok() || !Exited0(*gc)) spdlog::warn("image store: umoci gc failed");
}

}  // namespace drover::agent
