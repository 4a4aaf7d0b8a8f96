#pragma once
// ImageStore: the OCI images of one node (docs/containers.md), beside the
// workload runner that starts containers from them.
//
// Built on the well-kept tools rather than a layer store of our own:
// skopeo asks the registry and copies an image into a containers-storage
// (podman's, the overlay driver) of the store's own, which downloads each
// layer, checks it against its digest and unpacks it in one pass, once per
// layer (layers two images share are stored once). Every container of the
// image mounts those layers read-only as the lower layers of its own
// overlay (oci_bundle.h); nothing is unpacked twice and no packed copy is
// kept.
//
//   <root>/storage/             containers-storage's graph root (the overlay
//                               driver; its layers under overlay/)
//   <root>/run/                 containers-storage's run root (its locks)
//   <root>/storage.conf         the storage's configuration, for skopeo
//   <root>/images.json          what is held: references, config, uses
//   <root>/tmp/                 skopeo's downloads in progress (emptied at
//                               open and after each pull)
//   <root>/loads/               archives fetched for a load (image_archive.h),
//                               each removed once its load ends
//   <root>/empty/               the lower layer of an image of no layers
//
// An image is known by the digest of its manifest as the registry serves
// it ("sha256:..."), so that what a node records is what any other node
// pulls by digest; a manifest list is resolved to its linux/amd64 manifest.
//
// A pull is refused before any layer is fetched when the manifest or
// config is malformed or huge, when it has too many layers, no linux/amd64
// manifest, or more bytes than the store may hold; skopeo checks every
// blob against its digest, and a layer that unpacks to far more than its
// packed size is stopped while it grows. Jobs that want an image being
// pulled wait for that pull (one per image at a time; pulls run one after
// another on the store's thread). Above its size limit the store evicts the
// images used longest ago that no workload uses.
//
// Credentials: a registry auth file in the containers-auth.json format
// (the operator's, on the node), handed to skopeo by path; never in a job
// spec, a log or a message.
//
// Thread-safety: Ensure, Use, Release, Progress, Snapshot and Version may be
// called from any thread; pulls run on the store's own thread, and `done`
// callbacks run there.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "drover/common/image_ref.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"

namespace drover::agent {

// The parts of an image's configuration (OCI image spec, "config") a
// container starts from.
struct ImageConfig {
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> env;  // "K=V"
  std::string working_dir;
  std::string user;  // as written in the image ("1000", "app:app"); uid/gid below resolve it
  uint32_t uid = 0;
  uint32_t gid = 0;
};

// An image config blob (JSON, at most kMaxImageConfigBytes) read into an
// ImageConfig; kInvalidArgument naming what is malformed.
inline constexpr size_t kMaxImageConfigBytes = 1 << 20;
Result<ImageConfig> ParseImageConfig(std::string_view json);

// "sha256:<64 lower-case hex>": the digests the store keys images by.
bool ValidImageDigest(const std::string& digest);

// The uid and gid of an image's User ("", "1000", "1000:50", "app",
// "app:staff") in its own /etc/passwd and /etc/group, as the overlay of its
// `layers` (directories, the top one first; overlay whiteouts and opaque
// directories honoured) shows them, never through a link; kInvalidArgument
// for a name neither lists.
Result<std::pair<uint32_t, uint32_t>> ResolveImageUser(const std::vector<std::string>& layers,
                                                       const std::string& user);

// A manifest or an index (JSON, at most kMaxManifestBytes) as the store
// checks it before a pull.
inline constexpr size_t kMaxManifestBytes = 4 << 20;
struct ManifestInfo {
  bool is_index = false;
  std::string platform_digest;  // an index: its linux/amd64 manifest
  std::vector<int64_t> layer_sizes;
  std::string config_digest;
  int64_t config_size = 0;
};
Result<ManifestInfo> ParseManifest(std::string_view json, size_t max_layers);

// The most references one image is held under.
inline constexpr size_t kMaxImageReferences = 64;

struct StoredImage {
  std::string digest;  // "sha256:<hex>" of the registry's manifest
  std::vector<std::string> references;
  std::string storage_id;           // containers-storage's id of it
  std::vector<std::string> layers;  // containers-storage's layer ids, the top one first
  // Its layers as overlay lowerdir names relative to ImageStore::LowerDir()
  // ("l/<short id>", the top one first; short, so that 128 fit in a mount's
  // options), or one absolute empty directory for an image of no layers.
  std::vector<std::string> lowers;
  ImageConfig config;
  int64_t size_bytes = 0;  // its layers unpacked
  int64_t last_used_unix_nanos = 0;
  int in_use = 0;
};

struct ImageStoreOptions {
  std::string root;
  int64_t limit_bytes = 0;  // 0: no limit
  std::string skopeo = "skopeo";
  // Registries (host[:port]) spoken to over plain HTTP or unverified TLS.
  std::vector<std::string> insecure_registries;
  std::string auth_file;  // empty: skopeo's own default places
  size_t max_layers = 128;
  // A pull whose bytes stop growing this long is ended (a registry that
  // stalls mid-layer).
  std::chrono::milliseconds stall_timeout{60'000};
};

// How an agent runs container workloads (flags --containers,
// --container-runtime, --image-store, --image-store-limit,
// --insecure-registry, --registry-auth, --container-disk-limit).
struct ContainerOptions {
  bool enabled = true;
  std::string runtime = "runc";
  ImageStoreOptions store;  // root empty: <data_dir>/images
  // Where the node's CDI spec (cdi.h) is written: /var/run/cdi for podman
  // to read it; empty: <data_dir>/cdi.
  std::string cdi_dir;
  // The most a container's writable layer may hold (--container-disk-limit;
  // a job's ContainerSpec.disk_bytes asks for less); 0: no limit of the
  // node's. Measured every disk_check_every (disk_watch.h).
  int64_t disk_limit_bytes = 0;
  std::chrono::milliseconds disk_check_every{10'000};
};

class ImageStore {
 public:
  // Opens (or makes) the store at `o.root`; what a crash left half done
  // (downloads, layers, images the list does not name) is removed.
  static Result<std::unique_ptr<ImageStore>> Open(ImageStoreOptions o);
  ~ImageStore();
  ImageStore(const ImageStore&) = delete;
  ImageStore& operator=(const ImageStore&) = delete;

  struct Request {
    std::string reference;  // as the job gave it
    std::string digest;     // pinned (an earlier attempt's): run exactly it
    bool always = false;    // pull policy "always": ask the registry again
  };
  using Done = std::function<void(Result<StoredImage>)>;
  // The image of `r` when the store holds it and the policy lets it be
  // used without asking the registry; otherwise nullopt, and `done` is
  // called (on the store's thread) once the pull this request joined ends.
  // A bad reference is an error either way.
  Result<std::optional<StoredImage>> Ensure(const Request& r, Done done);

  // An image archive to load (NodeService.LoadImage): a plain tar the
  // agent fetched, which the store removes once the load ends.
  struct Archive {
    std::string path;  // PrepareArchive's
    std::string name;  // the reference to hold it as; empty: the archive's own
    int64_t size_bytes = 0;
    std::string sha256;  // of its bytes, as the server summed them
  };
  // Where the archive of load `load_id` is to be written: refused when the
  // id is malformed or the node lacks room for it.
  Result<std::string> PrepareArchive(const std::string& load_id, int64_t size) const;
  // Queues the load of `a`, after the pulls before it (the store's thread
  // runs one at a time); `done` is called there once it ends.
  void Load(Archive a, Done done);

  // The directory the lowers of a StoredImage are relative to.
  std::string LowerDir() const { return opts_.root + "/storage/overlay"; }

  // A workload runs `digest` now (it is not evicted) / no longer.
  void Use(const std::string& digest);
  void Release(const std::string& digest);

  // How far the pull `r` waits for is, in words; empty when none.
  std::string Progress(const Request& r) const;
  // Every image held, and a number that changes whenever the list does.
  std::vector<StoredImage> Snapshot() const;
  uint64_t Version() const;

 private:
  explicit ImageStore(ImageStoreOptions o);
  struct Pull {
    ImageRef ref;
    std::string digest;  // pinned
    std::vector<Done> waiters;
    std::string progress;
    std::optional<Archive> archive;  // a load, not a pull
  };
  static std::string PullKey(const ImageRef& ref, const std::string& digest, bool always);
  void Work();
  Result<StoredImage> RunPull(const std::string& key, const Pull& p);
  Result<StoredImage> RunLoad(const std::string& key, const Archive& a);
  Status CopyIn(const std::string& key, const std::string& verb, const std::string& name,
                const std::vector<std::string>& copy, int64_t total, int64_t unpack_limit, const std::string& stalled);
  Result<StoredImage> Keep(const std::string& digest, const std::string& config_digest,
                           const std::vector<std::string>& names, int64_t unpack_limit, int64_t total);
  int64_t UnpackLimit(int64_t packed) const;
  Result<std::string> Inspect(const ImageRef& ref, const std::string& what, std::string* digest) const;
  Result<StoredImage> ReadStored(const std::string& digest, const std::string& config_digest,
                                 const std::string& name, std::map<std::string, int64_t>* layer_bytes) const;
  std::vector<std::string> StorageEnv() const;
  void EmptyTmp() const;
  void DropNewLayers(const std::set<std::string>& before) const;
  void RemoveStored(const std::vector<std::string>& ids) const;
  std::vector<std::string> TransportFlags(const ImageRef& ref, bool src) const;
  void SaveLocked() const DROVER_REQUIRES(mu_);
  std::vector<std::string> EvictLocked(const std::string& keep) DROVER_REQUIRES(mu_);
  int64_t HeldBytesLocked() const DROVER_REQUIRES(mu_);
  void SetProgress(const std::string& key, std::string text);

  const ImageStoreOptions opts_;
  mutable Mutex mu_;
  std::map<std::string, StoredImage> images_ DROVER_GUARDED_BY(mu_);      // by digest
  std::map<std::string, int64_t> layer_bytes_ DROVER_GUARDED_BY(mu_);     // layer id -> unpacked size
  std::map<std::string, std::string> references_ DROVER_GUARDED_BY(mu_);  // reference as given -> digest
  std::map<std::string, Pull> pulls_ DROVER_GUARDED_BY(mu_);              // by PullKey
  std::deque<std::string> queue_ DROVER_GUARDED_BY(mu_);
  uint64_t version_ DROVER_GUARDED_BY(mu_) = 1;
  bool stopping_ DROVER_GUARDED_BY(mu_) = false;
  CondVar wake_;
  std::thread worker_;
};

}  // namespace drover::agent
