#include "drover/agent/image_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "drover/agent/image_tools.h"
#include "drover/auth/token.h"
#include "drover/common/files.h"
#include "drover/common/json_depth.h"
#include "drover/common/quantity.h"

namespace drover::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
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

// containers-storage's own records (the overlay driver's, read only):
// which image holds a manifest digest, its layers top first, where their
// short lower names are, and how large each layer unpacked is.
// Load reads its two lists once; the lookups below read what it read.
struct Storage {
  explicit Storage(std::string g) : graph(std::move(g)) {}
  std::string graph;  // <root>/storage
  json images = json::array();
  std::map<std::string, std::string> parent;   // every complete layer -> its parent ("" none)
  std::map<std::string, int64_t> layer_bytes;  // every complete layer -> its size unpacked

  struct Image {
    std::string id;
    std::vector<std::string> layers;  // top first
    std::vector<std::string> lowers;  // "l/<short>", as layers
  };

  static Result<json> ReadList(const std::string& path) {
    auto text = ReadTextFile(path, 64 << 20);
    if (!text.ok()) {
      if (text.status().code() == Code::kNotFound) return json::array();
      return Unavailable(fmt::format("cannot read '{}': {}", path, text.status().message()));
    }
    DROVER_RETURN_IF_ERROR(CheckJsonDepth(*text, 16));
    json j = json::parse(*text, nullptr, false);
    if (!j.is_array()) return Unavailable(fmt::format("'{}' is not a list", path));
    return j;
  }

  Status Load() {
    DROVER_ASSIGN_OR_RETURN(images, ReadList(graph + "/overlay-images/images.json"));
    DROVER_ASSIGN_OR_RETURN(json list, ReadList(graph + "/overlay-layers/layers.json"));
    parent.clear();
    layer_bytes.clear();
    for (const json& l : list) {
      if (!l.is_object() || !l.contains("id") || !l["id"].is_string()) continue;
      if (l.contains("flags") && l["flags"].is_object() && l["flags"].value("incomplete", false)) continue;
      const std::string id = l["id"];
      parent[id] = l.value("parent", "");
      layer_bytes[id] = l.contains("diff-size") && l["diff-size"].is_number_integer() ? l["diff-size"].get<int64_t>() : 0;
    }
    return Status::Ok();
  }

  // The image whose manifest digest is `digest`; kNotFound when none.
  Result<Image> Find(const std::string& digest, size_t max_layers) const {
    const json* found = nullptr;
    for (const json& im : images) {
      if (!im.is_object() || !im.contains("id") || !im["id"].is_string()) continue;
      // One image (its id is its config's digest) may hold several
      // manifests of the same config.
      bool names = im.value("digest", "") == digest;
      if (im.contains("digests") && im["digests"].is_array()) {
        for (const json& d : im["digests"]) names = names || (d.is_string() && d.get<std::string>() == digest);
      }
      // Every manifest it holds is an item "manifest-<digest>" (a load of
      // an archive adds one without listing it in digests).
      if (im.contains("big-data-names") && im["big-data-names"].is_array()) {
        for (const json& d : im["big-data-names"]) {
          names = names || (d.is_string() && d.get<std::string>() == "manifest-" + digest);
        }
      }
      if (names) found = &im;
    }
    if (found == nullptr) return NotFound(fmt::format("containers-storage holds no image of {}", digest));
    Image out;
    out.id = (*found)["id"];
    std::string at = found->value("layer", "");
    while (!at.empty()) {
      auto it = parent.find(at);
      if (it == parent.end()) return Unavailable(fmt::format("the layer {} of {} is missing or incomplete", at, digest));
      if (out.layers.size() >= max_layers) return Unavailable(fmt::format("{} has more than {} layers", digest, max_layers));
      auto link = ReadTextFile(graph + "/overlay/" + at + "/link", 64);
      std::string name = link.ok() ? *link : "";
      while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
      struct stat st {};
      if (name.empty() || name.size() > 32 ||
          !std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }) ||
          ::lstat((graph + "/overlay/l/" + name).c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
        return Unavailable(fmt::format("the layer {} of {} has no short name", at, digest));
      }
      out.layers.push_back(at);
      out.lowers.push_back("l/" + name);
      at = it->second;
    }
    return out;
  }

  // The image's config blob: the one of its stored items whose digest is
  // `config_digest` (checked here, not taken on trust).
  Result<std::string> Config(const std::string& id, const std::string& config_digest) const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(graph + "/overlay-images/" + id, ec)) {
      if (!e.is_regular_file(ec) || e.file_size(ec) > kMaxImageConfigBytes) continue;
      auto blob = ReadTextFile(e.path().string(), kMaxImageConfigBytes);
      if (blob.ok() && "sha256:" + auth::Sha256Hex(*blob) == config_digest) return *blob;
    }
    return Unavailable(fmt::format("containers-storage holds no config {} for image {}", config_digest, id));
  }

  // `found`'s layers on `im`: its id, layers, lowers (`empty`, a directory,
  // for an image of none) and size.
  void Fill(const Image& found, const std::string& empty, StoredImage* im) const {
    im->storage_id = found.id;
    im->layers = found.layers;
    im->lowers = found.lowers.empty() ? std::vector<std::string>{empty} : found.lowers;
    im->size_bytes = 0;
    for (const std::string& l : im->layers) {
      if (auto it = layer_bytes.find(l); it != layer_bytes.end()) im->size_bytes += it->second;
    }
  }
};

}  // namespace
ImageStore::ImageStore(ImageStoreOptions o) : opts_(std::move(o)) {}

std::vector<std::string> ImageStore::StorageEnv() const {
  return {"CONTAINERS_STORAGE_CONF=" + opts_.root + "/storage.conf"};
}

void ImageStore::EmptyTmp() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(opts_.root + "/tmp", ec)) fs::remove_all(e.path(), ec);
}

Result<std::unique_ptr<ImageStore>> ImageStore::Open(ImageStoreOptions o) {
  std::error_code ec;
  for (const char* d : {"storage", "run", "tmp", "empty", "loads"}) {
    fs::create_directories(o.root + "/" + d, ec);
    if (ec) return Unavailable(fmt::format("cannot create the image store '{}': {}", o.root, ec.message()));
  }
  ::chmod(o.root.c_str(), 0711);
  // The layout of the stores before containers-storage (an OCI layout and
  // an unpacked copy of each image): its images are pulled again.
  for (const char* old : {"oci", "bundles"}) fs::remove_all(o.root + "/" + old, ec);
  // skip_mount_home: the graph root is not made a private mount of its
  // own (the store never mounts through containers-storage; workloads
  // mount its layers themselves).
  DROVER_RETURN_IF_ERROR(WriteFileAtomic(o.root + "/storage.conf",
                                         fmt::format("[storage]\ndriver = \"overlay\"\ngraphroot = \"{0}/storage\"\n"
                                                     "runroot = \"{0}/run\"\n\n[storage.options.overlay]\n"
                                                     "skip_mount_home = \"true\"\n",
                                                     o.root),
                                         0600, /*durable=*/false));
  std::unique_ptr<ImageStore> store(new ImageStore(std::move(o)));
  store->EmptyTmp();
  for (const auto& e : fs::directory_iterator(store->opts_.root + "/loads", ec)) fs::remove_all(e.path(), ec);
  Storage storage{store->opts_.root + "/storage"};
  if (Status loaded = storage.Load(); !loaded.ok()) {
    spdlog::warn("image store: {}; its images are pulled again", loaded.message());
  }
  std::set<std::string> kept;  // storage ids
  auto text = ReadTextFile(store->opts_.root + "/images.json", 16 << 20);
  if (text.ok()) {
    json j = json::parse(*text, nullptr, false);
    MutexLock lock(&store->mu_);
    if (j.is_object() && j.contains("images") && j["images"].is_array()) {
      for (const json& e : j["images"]) {
        if (!e.is_object() || !e.contains("storage_id") || !e["storage_id"].is_string()) continue;
        StoredImage im;
        im.digest = e.value("digest", "");
        if (!ValidImageDigest(im.digest)) continue;
        // Where its layers are now, from containers-storage's own records.
        auto found = storage.Find(im.digest, store->opts_.max_layers);
        if (!found.ok() || found->id != e["storage_id"].get<std::string>()) continue;
        storage.Fill(*found, store->opts_.root + "/empty", &im);
        im.references = e.value("references", std::vector<std::string>{});
        im.last_used_unix_nanos = e.value("last_used_unix_nanos", int64_t{0});
        if (e.contains("config") && e["config"].is_object()) im.config = ConfigFrom(e["config"]);
        for (const std::string& l : im.layers) store->layer_bytes_[l] = storage.layer_bytes[l];
        for (const std::string& r : im.references) store->references_[r] = im.digest;
        kept.insert(im.storage_id);
        store->images_[im.digest] = std::move(im);
      }
    }
  }
  // What containers-storage holds that the list does not (a crash between
  // a pull and the list's save): removed, its layers with it.
  for (const json& im : storage.images) {
    if (!im.is_object() || !im.contains("id") || !im["id"].is_string()) continue;
    const std::string id = im["id"];
    if (!kept.contains(id)) store->RemoveStored({id});
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
                    {"storage_id", im.storage_id},
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
      pull.archive = pulls_.at(key).archive;
    }
    Result<StoredImage> got = pull.archive ? RunLoad(key, *pull.archive) : RunPull(key, pull);
    if (pull.archive) ::unlink(pull.archive->path.c_str());
    std::vector<Done> waiters;
    {
      MutexLock lock(&mu_);
      auto it = pulls_.find(key);
      waiters = std::move(it->second.waiters);
      pulls_.erase(it);
    }
    if (!got.ok()) {
      spdlog::warn("image store: {} failed: {}", pull.archive ? "the load of an archive" : "the pull of " + pull.ref.String(),
                   got.status().message());
    }
    for (Done& d : waiters) d(got);
  }
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
          im.references.size() < kMaxImageReferences) {
        im.references.push_back(name);
      }
      references_[name] = digest;
      ++version_;
      SaveLocked();
      return im;
    }
  }
  // The layers, into the store's containers-storage: skopeo checks each
  // against its digest and unpacks it as it comes; layers held already
  // (another image's) are not fetched again.
  std::vector<std::string> copy = {opts_.skopeo, "--tmpdir", opts_.root + "/tmp", "copy", "--retry-times=0", "--quiet"};
  for (std::string& f : TransportFlags(p.ref, true)) copy.push_back(std::move(f));
  copy.push_back("docker://" + p.ref.Name() + "@" + digest);
  copy.push_back("containers-storage:" + p.ref.Name() + "@" + digest);
  // A layer that unpacks to far more than its bytes (a decompression bomb)
  // is stopped while it grows: at 100 times the image's packed size and
  // 64 MiB, or what the store may hold.
  const int64_t unpack_limit = UnpackLimit(total);
  DROVER_RETURN_IF_ERROR(CopyIn(key, "pull", name, copy, total, unpack_limit,
                                fmt::format("cannot pull {}: the registry sent nothing for {} s", name,
                                            std::chrono::duration_cast<std::chrono::seconds>(opts_.stall_timeout).count())));
  return Keep(digest, m.config_digest, {name}, unpack_limit, total);
}

// The image `digest` that a copy just put into containers-storage, held
// under `names` (a name moves to it from any image that had it). One that
// unpacked to more than `unpack_limit` (what grew past the bound between
// two looks, or all at once) is removed instead.
Result<StoredImage> ImageStore::Keep(const std::string& digest, const std::string& config_digest,
                                     const std::vector<std::string>& names, int64_t unpack_limit, int64_t total) {
  std::map<std::string, int64_t> layer_bytes;
  DROVER_ASSIGN_OR_RETURN(StoredImage im, ReadStored(digest, config_digest, names.front(), &layer_bytes));
  if (im.size_bytes > unpack_limit) {
    RemoveStored({im.storage_id});
    return Unavailable(fmt::format("cannot unpack {}: it unpacks to more than {} ({} packed)", names.front(),
                                   FormatBytes(unpack_limit), FormatBytes(total)));
  }
  im.last_used_unix_nanos = NowNanos();
  std::vector<std::string> evicted;
  {
    MutexLock lock(&mu_);
    if (auto held = images_.find(digest); held != images_.end()) {
      im.references = held->second.references;
      im.in_use = held->second.in_use;
    }
    for (const std::string& name : names) {
      auto was = references_.find(name);
      if (was != references_.end() && was->second != digest) {
        if (auto other = images_.find(was->second); other != images_.end()) {
          auto& refs = other->second.references;
          refs.erase(std::remove(refs.begin(), refs.end(), name), refs.end());
        }
      }
      if (std::find(im.references.begin(), im.references.end(), name) == im.references.end() &&
          im.references.size() < kMaxImageReferences) {
        im.references.push_back(name);
      }
      references_[name] = digest;
    }
    images_[digest] = im;
    for (const auto& [l, b] : layer_bytes) layer_bytes_[l] = b;
    ++version_;
    evicted = EvictLocked(digest);
    SaveLocked();
  }
  RemoveStored(evicted);
  return im;
}

int64_t ImageStore::UnpackLimit(int64_t packed) const {
  int64_t limit = packed * 100 + (int64_t{64} << 20);
  if (opts_.limit_bytes > 0) limit = std::min(limit, opts_.limit_bytes);
  return limit;
}

// Runs `copy`, a skopeo copy into the store's containers-storage, watching
// what it downloads (its temporary files) and what the new layers hold
// unpacked: it is stopped past `unpack_limit`, or with `stalled` when
// nothing moved for the stall timeout. Progress under `key` reads
// "<verb>ing NAME: ...".
Status ImageStore::CopyIn(const std::string& key, const std::string& verb, const std::string& name,
                          const std::vector<std::string>& copy, int64_t total, int64_t unpack_limit,
                          const std::string& stalled) {
  const std::string tmp = opts_.root + "/tmp";
  const std::string layers = opts_.root + "/storage/overlay";
  std::set<std::string> before;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(layers, ec)) before.insert(e.path().filename().string());
  int64_t downloaded = 0, unpacked = 0;
  auto moved_at = std::chrono::steady_clock::now();
  // A walk of a layer of many files takes a while: it runs at most a fifth
  // of the time.
  auto next_measure = moved_at;
  auto measure = [&] {
    const auto began = std::chrono::steady_clock::now();
    if (began < next_measure) return false;  // the last look stands
    int64_t now_unpacked = 0;
    std::error_code dec;
    for (const auto& e : fs::directory_iterator(layers, dec)) {
      if (!before.contains(e.path().filename().string())) now_unpacked += TreeBytes(e.path().string());
    }
    int64_t now_downloaded = std::max(downloaded, TreeBytes(tmp));
    bool moved = now_unpacked != unpacked || now_downloaded != downloaded;
    unpacked = now_unpacked;
    downloaded = now_downloaded;
    next_measure = std::chrono::steady_clock::now() + 4 * (std::chrono::steady_clock::now() - began);
    return moved;
  };
  auto tick = [&]() -> std::string {
    if (measure()) {
      moved_at = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - moved_at > opts_.stall_timeout) {
      return stalled;  // a source that stops sending: the copy ends instead of hanging
    }
    SetProgress(key, fmt::format("{}ing {}: {} of {}, {} unpacked", verb, name, FormatBytes(std::min(downloaded, total)),
                                 FormatBytes(total), FormatBytes(unpacked)));
    if (unpacked <= unpack_limit) return "";
    return fmt::format("cannot unpack {}: it unpacks to more than {} ({} packed)", name, FormatBytes(unpack_limit),
                       FormatBytes(total));
  };
  SetProgress(key, fmt::format("{}ing {}: 0 B of {}", verb, name, FormatBytes(total)));
  auto copied = RunTool(copy, StorageEnv(), tick);
  EmptyTmp();
  if (!copied.ok() || !Exited0(*copied)) {
    // Whatever the copy added goes: a layer it left incomplete, and a
    // complete one too (a bomb's layer can complete between two looks, and
    // no image names a layer of a copy that failed). Their files go now;
    // each is flagged incomplete in containers-storage's list, which then
    // removes it the next time it opens the store for writing. A retry
    // fetches them again.
    DropNewLayers(before);
    if (!copied.ok()) return copied.status();
  }
  if (!Exited0(*copied)) return Unavailable(fmt::format("cannot {} {}: {}", verb, name, LastLine(copied->err)));
  return Status::Ok();
}

// The layers containers-storage holds now that are not in `before` (the
// layer directories before a copy that failed): emptied, and flagged
// incomplete in its layer list so that containers-storage removes them
// (never reused: a later copy of the same layer unpacks it afresh).
void ImageStore::DropNewLayers(const std::set<std::string>& before) const {
  const std::string graph = opts_.root + "/storage";
  std::set<std::string> dropped;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(graph + "/overlay", ec)) {
    const std::string id = e.path().filename().string();
    if (before.contains(id) || id == "l") continue;
    for (const auto& f : fs::directory_iterator(e.path() / "diff", ec)) fs::remove_all(f.path(), ec);
    dropped.insert(id);
  }
  if (dropped.empty()) return;
  const std::string list = graph + "/overlay-layers/layers.json";
  auto layers = Storage::ReadList(list);
  if (!layers.ok()) return;
  bool changed = false;
  for (json& l : *layers) {
    if (!l.is_object() || !l.contains("id") || !l["id"].is_string() || !dropped.contains(l["id"].get<std::string>())) {
      continue;
    }
    if (!l.contains("flags") || !l["flags"].is_object()) l["flags"] = json::object();
    l["flags"]["incomplete"] = true;
    changed = true;
  }
  if (!changed) return;
  if (Status s = WriteFileAtomic(list, layers->dump(), 0600); !s.ok()) {
    spdlog::warn("image store: cannot flag the layers of a failed copy for removal: {}", s.message());
  }
}

// The image `digest` as containers-storage holds it after a pull: its
// layers, its config (checked against the manifest's `config_digest`) and
// its user resolved in its own /etc/passwd.
Result<StoredImage> ImageStore::ReadStored(const std::string& digest, const std::string& config_digest,
                                           const std::string& name,
                                           std::map<std::string, int64_t>* layer_bytes) const {
  Storage storage{opts_.root + "/storage"};
  if (Status loaded = storage.Load(); !loaded.ok()) {
    return Unavailable(fmt::format("cannot read the pulled {}: {}", name, loaded.message()));
  }
  auto found = storage.Find(digest, opts_.max_layers);
  if (!found.ok()) return Unavailable(fmt::format("cannot read the pulled {}: {}", name, found.status().message()));
  DROVER_ASSIGN_OR_RETURN(std::string blob, storage.Config(found->id, config_digest));
  DROVER_ASSIGN_OR_RETURN(ImageConfig config, ParseImageConfig(blob));
  std::vector<std::string> dirs;
  for (const std::string& l : found->layers) dirs.push_back(storage.graph + "/overlay/" + l + "/diff");
  DROVER_ASSIGN_OR_RETURN(auto ids, ResolveImageUser(dirs, config.user));
  config.uid = ids.first;
  config.gid = ids.second;
  StoredImage im;
  im.digest = digest;
  storage.Fill(*found, opts_.root + "/empty", &im);
  im.config = std::move(config);
  for (const std::string& l : im.layers) (*layer_bytes)[l] = storage.layer_bytes[l];
  return im;
}

// The bytes of the distinct layers the images held use.
int64_t ImageStore::HeldBytesLocked() const {
  std::set<std::string> layers;
  for (const auto& [d, im] : images_) layers.insert(im.layers.begin(), im.layers.end());
  int64_t held = 0;
  for (const std::string& l : layers) {
    if (auto it = layer_bytes_.find(l); it != layer_bytes_.end()) held += it->second;
  }
  return held;
}

// Above the limit, the images used longest ago that nothing uses go, but
// `keep` (the one just pulled, for the job waiting on it): forgotten here,
// their storage ids returned for RemoveStored to remove without the lock.
std::vector<std::string> ImageStore::EvictLocked(const std::string& keep) {
  std::vector<std::string> out;
  if (opts_.limit_bytes <= 0) return out;
  std::vector<const StoredImage*> order;
  for (const auto& [d, im] : images_) {
    if (d != keep && im.in_use == 0) order.push_back(&im);
  }
  std::sort(order.begin(), order.end(), [](const StoredImage* a, const StoredImage* b) {
    return a->last_used_unix_nanos < b->last_used_unix_nanos;
  });
  for (const StoredImage* im : order) {
    if (HeldBytesLocked() <= opts_.limit_bytes) break;
    const std::string digest = im->digest;
    spdlog::info("image store: evicting {} ({}) to stay under {}", digest,
                 im->references.empty() ? "" : im->references.front(), FormatBytes(opts_.limit_bytes));
    for (auto it = references_.begin(); it != references_.end();) {
      it = it->second == digest ? references_.erase(it) : std::next(it);
    }
    const std::string id = im->storage_id;
    images_.erase(digest);
    if (std::none_of(images_.begin(), images_.end(), [&](const auto& e) { return e.second.storage_id == id; })) {
      out.push_back(id);
    }
  }
  std::set<std::string> used;
  for (const auto& [d, im] : images_) used.insert(im.layers.begin(), im.layers.end());
  for (auto it = layer_bytes_.begin(); it != layer_bytes_.end();) {
    it = used.contains(it->first) ? std::next(it) : layer_bytes_.erase(it);
  }
  if (!out.empty()) ++version_;
  return out;
}

// Removes images from containers-storage by id, with the layers no other
// image uses. Runs on the store's thread (or at Open, before it starts):
// the only writer of the storage.
void ImageStore::RemoveStored(const std::vector<std::string>& ids) const {
  for (const std::string& id : ids) {
    auto rm = RunTool({opts_.skopeo, "delete", "containers-storage:@" + id}, StorageEnv());
    if (!rm.ok() || !Exited0(*rm)) {
      spdlog::warn("image store: cannot remove {}: {}", id, rm.ok() ? LastLine(rm->err) : rm.status().message());
    }
  }
}

}  // namespace drover::agent
