// The node commands of the control loop: agents' registrations, sessions,
// heartbeats and reports, drains and fault injection, the lease checks and
// the gossip group's secret. Each posts to the loop; the work is the node
// registry's (node_registry.h, node_leases.cc).

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "drover/server/control_loop.h"

namespace drover::server {
namespace {

constexpr std::string_view kGossipKey = "/cluster/gossip";
constexpr size_t kGossipKeyBytes = 32;

}  // namespace

std::future<Result<Done>> ControlLoop::RegisterNode(v1::RegisterRequest req) {
  return Call<Done>([this, req = std::move(req)]() -> Result<Done> {
    DROVER_RETURN_IF_ERROR(nodes_.Register(req));
    return Done{};
  });
}

std::future<Result<Done>> ControlLoop::SessionOpened(std::string node, std::shared_ptr<AgentSink> sink) {
  auto promise = std::make_shared<std::promise<Result<Done>>>();
  auto future = promise->get_future();
  SessionOpened(std::move(node), std::move(sink), [promise](Result<Done> r) { promise->set_value(std::move(r)); });
  return future;
}

void ControlLoop::SessionOpened(std::string node, std::shared_ptr<AgentSink> sink,
                                std::function<void(Result<Done>)> done) {
  CallThen<Done>(
      [this, node = std::move(node), sink = std::move(sink)]() -> Result<Done> {
        DROVER_RETURN_IF_ERROR(nodes_.Open(node, sink));
        return Done{};
      },
      std::move(done));
}

void ControlLoop::SessionClosed(std::string node, const AgentSink* sink) {
  Run([this, node = std::move(node), sink] { nodes_.Close(node, sink); }, Needs::kAnyState);
}

void ControlLoop::HandleStatus(std::string node, v1::StatusReport report) {
  // While the state cannot be read the report is dropped: the session is
  // reset, and the agent reports again.
  Run([this, node = std::move(node), report = std::move(report)] { nodes_.Report(node, report); });
}

void ControlLoop::Heartbeat(std::string node, v1::Heartbeat hb, std::shared_ptr<AgentSink> sink) {
  // Renewals must not wait for the store (a degraded loop rereads it per
  // command): heartbeats run whatever the state.
  Run([this, node = std::move(node), hb = std::move(hb), sink = std::move(sink)] { nodes_.Heartbeat(node, hb, sink); },
      Needs::kAnyState);
}

std::future<Result<Done>> ControlLoop::InjectFault(std::string node, int gpu, std::string fault) {
  return Call<Done>([this, node = std::move(node), gpu, fault = std::move(fault)]() -> Result<Done> {
    DROVER_RETURN_IF_ERROR(nodes_.InjectFault(node, gpu, fault));
    return Done{};
  });
}

std::future<Result<std::vector<std::string>>> ControlLoop::PullImage(std::vector<std::string> nodes,
                                                                     v1::PullImage pull) {
  return Call<std::vector<std::string>>(
      [this, nodes = std::move(nodes), pull = std::move(pull)]() -> Result<std::vector<std::string>> {
        return nodes_.PullImage(nodes, pull);
      });
}

std::future<Result<v1::Node>> ControlLoop::SetDrained(std::string name, bool drained, bool requeue) {
  return Call<v1::Node>([this, name = std::move(name), drained, requeue]() -> Result<v1::Node> {
    return nodes_.SetDrained(name, drained, requeue);
  });
}

void ControlLoop::ScheduleLeaseChecks() {
  auto period = std::max(options_.lease.heartbeat_interval / 2, std::chrono::milliseconds(5));
  loop_.PostAfter(period, [this] {
    if (EnsureRecovered().ok()) nodes_.EnforceLeases();
    ScheduleLeaseChecks();
  });
}

std::future<Result<Done>> ControlLoop::CheckLeases() {
  return Call<Done>([this]() -> Result<Done> {
    nodes_.EnforceLeases();
    return Done{};
  });
}

std::future<Result<std::pair<int64_t, std::vector<v1::Peer>>>> ControlLoop::Peers(std::string node) {
  return Call<std::pair<int64_t, std::vector<v1::Peer>>>(
      [this, node = std::move(node)]() -> Result<std::pair<int64_t, std::vector<v1::Peer>>> {
        return nodes_.Peers(node);
      });
}

Status ControlLoop::LoadGossipSecret() {
  DROVER_ASSIGN_OR_RETURN(store::RangeResult r, store_->Range(std::string(kGossipKey)));
  std::string secret;
  for (const store::KeyValue& kv : r.kvs) {
    if (kv.key == kGossipKey) secret = kv.value;
  }
  if (secret.size() != 8 + kGossipKeyBytes) {
    // Made once per cluster (std::random_device reads the kernel's CSPRNG here).
    std::random_device rd;
    secret.clear();
    for (size_t i = 0; i < 8 + kGossipKeyBytes; ++i) secret.push_back(static_cast<char>(rd() & 0xff));
    auto w = store_->Txn({}, {store::Op::Put(std::string(kGossipKey), secret)}, {});
    if (!w.ok()) return w.status();
  }
  gossip_cluster_ = 0;
  for (size_t i = 0; i < 8; ++i) gossip_cluster_ = gossip_cluster_ << 8 | static_cast<uint8_t>(secret[i]);
  gossip_key_ = secret.substr(8);
  return Status::Ok();
}

}  // namespace drover::server
