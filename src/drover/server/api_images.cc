// ApiService's image calls (docs/containers.md): an administrator's pull of
// an image into nodes' stores ahead of the jobs that run it. The request is
// checked here; the control loop relays it to each node's agent, whose
// store shows the image once pulled (Node.images).

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

}  // namespace

Result<v1::PullImageResponse> ApiService::PullImage(const auth::Principal& who, const v1::PullImageRequest& req) {
  auto run = [&]() -> Result<v1::PullImageResponse> {
    DROVER_RETURN_IF_ERROR(RequireRole(who, auth::Role::kAdmin, "pull images"));
    if (req.reference().empty()) return InvalidArgument("reference is empty: name the image to pull");
    DROVER_RETURN_IF_ERROR(ParseImageRef(req.reference()).status());
    DROVER_RETURN_IF_ERROR(rpc::ValidatePullPolicy("pull_policy", req.pull_policy()));
    if (req.nodes_size() > kMaxPullNodes) {
      return InvalidArgument(fmt::format("{} nodes named, more than {}", req.nodes_size(), kMaxPullNodes));
    }
    std::vector<std::string> nodes;
    std::set<std::string> seen;
    for (const std::string& n : req.nodes()) {
      DROVER_RETURN_IF_ERROR(ValidateNodeName(n));
      if (seen.insert(n).second) nodes.push_back(n);
    }
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

}  // namespace drover::server
