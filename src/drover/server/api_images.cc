// ApiService's image calls (docs/containers.md): an administrator's pull of
// an image into nodes' stores ahead of the jobs that run it, or its load
// from an archive. The request is checked here; the control loop relays it
// to each node's agent, whose store shows the image once pulled
// (Node.images). An archive is spooled here first (image_archives.h), and
// the nodes fetch it.

#include <fmt/format.h>

#include <chrono>
#include <set>

#include "drover/common/ids.h"
#include "drover/common/image_ref.h"
#include "drover/rpc/container.h"
#include "drover/server/api_service.h"
#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

constexpr auto kTimeout = std::chrono::seconds(30);
// More names than any cluster has nodes is a malformed request.
constexpr int kMaxPullNodes = 100'000;

template <typename T>
Result<T> Wait(std::future<Result<T>> f) {
  if (f.wait_for(kTimeout) != std::future_status::ready) return Unavailable("the control loop did not answer in time");
  return f.get();
}

// The nodes a request names, each once, in its order; a malformed name,
// or more names than any cluster has nodes, is refused.
Result<std::vector<std::string>> NamedNodes(const google::protobuf::RepeatedPtrField<std::string>& names) {
  if (names.size() > kMaxPullNodes) {
    return InvalidArgument(fmt::format("{} nodes named, more than {}", names.size(), kMaxPullNodes));
  }
  std::vector<std::string> nodes;
  std::set<std::string> seen;
  for (const std::string& n : names) {
    DROVER_RETURN_IF_ERROR(ValidateNodeName(n));
    if (seen.insert(n).second) nodes.push_back(n);
  }
  return nodes;
}

}  // namespace

Result<v1::PullImageResponse> ApiService::PullImage(const auth::Principal& who, const v1::PullImageRequest& req) {
  auto run = [&]() -> Result<v1::PullImageResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "pull images"));
    if (req.reference().empty()) return InvalidArgument("reference is empty: name the image to pull");
    DROVER_RETURN_IF_ERROR(ParseImageRef(req.reference()).status());
    DROVER_RETURN_IF_ERROR(rpc::ValidatePullPolicy("pull_policy", req.pull_policy()));
    DROVER_ASSIGN_OR_RETURN(std::vector<std::string> nodes, NamedNodes(req.nodes()));
    v1::PullImage pull;
    pull.set_reference(req.reference());
    pull.set_pull_policy(req.pull_policy());
    DROVER_ASSIGN_OR_RETURN(std::vector<std::string> told, Wait(loop_->PullImage(std::move(nodes), std::move(pull))));
    v1::PullImageResponse resp;
    for (std::string& n : told) resp.add_nodes(std::move(n));
    return resp;
  };
  return Audited(who, "images.pull", req.reference().substr(0, kMaxImageRefLength), run());
}

void ApiService::EnableImageArchives(std::string dir, int64_t max_bytes) {
  archives_ = std::make_unique<ImageArchives>(std::move(dir), max_bytes);
}

Result<v1::LoadImageResponse> ApiService::LoadImage(const auth::Principal& who, const v1::LoadImageHeader& header,
                                                    const ArchiveReader& read,
                                                    std::chrono::system_clock::time_point deadline) {
  auto run = [&]() -> Result<v1::LoadImageResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "load images"));
    if (archives_ == nullptr) return Unavailable("this server takes no image archives");
    if (!header.name().empty()) DROVER_RETURN_IF_ERROR(ParseImageRef(header.name()).status());
    if (header.nodes().empty()) return InvalidArgument("no node named: load the archive with --node NAME");
    // Every node is checked before a byte is taken: a wrong name costs no upload.
    DROVER_ASSIGN_OR_RETURN(std::vector<std::string> nodes, NamedNodes(header.nodes()));
    for (const std::string& n : nodes) {
      DROVER_ASSIGN_OR_RETURN(v1::Node node, Wait(loop_->GetNode(n)));
      if (node.state() != v1::NODE_STATE_READY) {
        return Unavailable(fmt::format("node '{}' is not ready; load the archive once it is", n));
      }
    }
    DROVER_ASSIGN_OR_RETURN(std::string id, archives_->Begin(nodes, header.size_bytes()));
    struct Ended {
      ImageArchives* a;
      std::string id;
      ~Ended() { a->End(id); }
    } ended{archives_.get(), id};
    std::string chunk;
    for (;;) {
      DROVER_ASSIGN_OR_RETURN(bool more, read(&chunk));
      if (!more) break;
      DROVER_RETURN_IF_ERROR(archives_->Append(id, chunk));
    }
    DROVER_ASSIGN_OR_RETURN(v1::ImageArchive archive, archives_->Seal(id));
    v1::PullImage load;
    load.set_reference(header.name());
    *load.mutable_archive() = std::move(archive);
    DROVER_RETURN_IF_ERROR(Wait(loop_->PullImage(nodes, std::move(load))).status());
    return archives_->Wait(id, deadline);
  };
  return Audited(who, "images.load", header.name().empty() ? "archive" : header.name().substr(0, kMaxImageRefLength),
                 run());
}

Result<std::pair<std::string, int64_t>> ApiService::OpenImageArchive(const std::string& node,
                                                                     const std::string& load_id) {
  if (archives_ == nullptr) return NotFound("this server takes no image archives");
  return archives_->OpenFor(load_id, node);
}

void ApiService::ImageLoaded(const std::string& node, const v1::ImageLoaded& loaded) {
  if (archives_ != nullptr) archives_->Report(node, loaded);
}

}  // namespace drover::server
