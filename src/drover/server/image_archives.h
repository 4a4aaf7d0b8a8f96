#pragma once
// ImageArchives: the image archives an administrator loads onto nodes
// (NodeService.LoadImage, `drover images load FILE.tar --node N`), held by
// the server between the upload and the nodes' fetches.
//
// An upload is spooled to <dir>/<id>.tar (mode 0600) as it arrives, no
// larger than it said and than the server allows, and summed (SHA-256) on
// the way. Once sealed, each node it was sent to may read it
// (AgentService.FetchImageArchive) until that node says how its load went
// (Report); the call that uploaded it waits for those answers and then
// removes it (End). Nothing of it is stored in the cluster's state: a
// server that stops or is deposed loses its uploads, and the calls that
// made them fail. What a crash left in <dir> is removed at start.
//
// Thread-safety: every method may be called from any thread.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drover/auth/token.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

class ImageArchives {
 public:
  // Uploads held at once; more are refused (RESOURCE_EXHAUSTED).
  static constexpr int kMaxUploads = 4;
  // Space an upload leaves free on the spool's file system.
  static constexpr int64_t kKeepFree = int64_t{1} << 30;

  // `dir` is made if missing and emptied; `max_bytes` bounds one archive.
  ImageArchives(std::string dir, int64_t max_bytes);
  ~ImageArchives();
  ImageArchives(const ImageArchives&) = delete;
  ImageArchives& operator=(const ImageArchives&) = delete;

  int64_t max_bytes() const { return max_bytes_; }

  // A new upload of exactly `size` bytes for `nodes`; its id. Refused when
  // it is larger than the server allows or than the spool has room for.
  Result<std::string> Begin(std::vector<std::string> nodes, int64_t size);
  // The next bytes of upload `id`; kInvalidArgument when they pass its size.
  Status Append(const std::string& id, std::string_view data);
  // All bytes came: the archive as the nodes are told of it. kInvalidArgument
  // when fewer came than it said.
  Result<v1::ImageArchive> Seal(const std::string& id);

  // For `node`'s fetch: the sealed archive's path and size. kNotFound when
  // there is none of `id` for it (never sent to it, already answered, or
  // gone).
  Result<std::pair<std::string, int64_t>> OpenFor(const std::string& id, const std::string& node) const;
  // `node` says how its load went; ignored unless it was sent the archive
  // and has not answered yet.
  void Report(const std::string& node, const v1::ImageLoaded& loaded);
  // Waits until every node answered or `deadline`; the answers in the
  // nodes' order, a node that did not answer with why.
  v1::LoadImageResponse Wait(const std::string& id, std::chrono::system_clock::time_point deadline);
  // Removes the upload and its file.
  void End(const std::string& id);

 private:
  struct Upload {
    std::vector<std::string> nodes;
    int64_t size = 0;
    int64_t got = 0;
    int fd = -1;
    bool sealed = false;
    std::string path;
    std::unique_ptr<auth::Sha256Stream> sum;
    std::map<std::string, v1::NodeImageLoad> answers;  // by node
  };

  const std::string dir_;
  const int64_t max_bytes_;
  mutable Mutex mu_;
  CondVar answered_;
  std::map<std::string, Upload> uploads_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::server
