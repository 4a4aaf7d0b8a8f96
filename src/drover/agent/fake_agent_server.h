#pragma once
// FakeServer: the control plane as one agent's tests need it (its
// registration, its session, the workload statuses it reports, the desired
// sets sent to it), for tests that run a real agent with real workloads
// (service_test.cc, container_test.cc).

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "drover/agent/agent_test_support.h"
#include "drover/common/mutex.h"
#include "drover/v1/agent.grpc.pb.h"

namespace drover::agent::test_support {

// A server for one agent: answers its registration, keeps its session,
// records every workload status it reports and sends it desired sets.
class FakeServer final : public v1::AgentService::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse* resp) override {
    resp->set_leader_epoch(1);
    resp->set_heartbeat_interval_ms(1000);
    return grpc::Status::OK;
  }
  grpc::Status Session(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream) override {
    {
      MutexLock lock(&mu_);
      stream_ = stream;
      ++sessions_;
    }
    cv_.SignalAll();
    v1::AgentMessage m;
    while (stream->Read(&m)) {
      if (m.has_heartbeat() && m.heartbeat().images_changed()) {
        MutexLock lock(&mu_);
        images_.assign(m.heartbeat().images().begin(), m.heartbeat().images().end());
        cv_.SignalAll();
      }
      if (!m.has_status()) continue;
      MutexLock lock(&mu_);
      for (const v1::WorkloadStatus& ws : m.status().workloads()) reports_.push_back(ws);
      cv_.SignalAll();
    }
    MutexLock write(&write_mu_);
    MutexLock lock(&mu_);
    if (stream_ == stream) stream_ = nullptr;  // not a newer session's
    return grpc::Status::OK;
  }

  int Start() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return port;
  }
  void Stop() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  ~FakeServer() override { Stop(); }

  // Waits until `n` sessions have opened.
  bool WaitSessions(int n) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, test_support::kDeadline, [&]() DROVER_REQUIRES(mu_) { return sessions_ >= n; });
  }

  // Sends the desired set once the agent's session is open.
  bool SendDesired(const std::vector<v1::Workload>& workloads) {
    v1::ServerMessage m;
    for (const v1::Workload& w : workloads) *m.mutable_desired()->add_workloads() = w;
    m.mutable_desired();
    MutexLock write(&write_mu_);
    grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream = nullptr;
    {
      MutexLock lock(&mu_);
      if (!cv_.WaitFor(&mu_, test_support::kDeadline, [&]() DROVER_REQUIRES(mu_) { return stream_ != nullptr; })) {
        return false;
      }
      stream = stream_;
    }
    return stream->Write(m);
  }

  // Waits for a report of workload `id` for which `pred` holds, and
  // returns it; nothing after the (failure) deadline.
  std::optional<v1::WorkloadStatus> WaitFor(const std::string& id,
                                            const std::function<bool(const v1::WorkloadStatus&)>& pred) {
    MutexLock lock(&mu_);
    std::optional<v1::WorkloadStatus> found;
    cv_.WaitFor(&mu_, std::chrono::seconds(60), [&]() DROVER_REQUIRES(mu_) {
      for (size_t i = seen_; i < reports_.size(); ++i) {
        if (reports_[i].workload_id() == id && pred(reports_[i])) {
          found = reports_[i];
          seen_ = i + 1;  // the next wait looks at what came after
          return true;
        }
      }
      return false;
    });
    return found;
  }

  // Waits until some report of `id`, of any time, says it ended.
  bool WaitEnded(const std::string& id) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, std::chrono::seconds(60), [&]() DROVER_REQUIRES(mu_) {
      for (const v1::WorkloadStatus& ws : reports_) {
        if (ws.workload_id() == id &&
            (ws.state() == v1::WORKLOAD_STATE_EXITED || ws.state() == v1::WORKLOAD_STATE_FAILED_TO_START)) {
          return true;
        }
      }
      return false;
    });
  }

  // Waits until the node's images, as its heartbeats last listed them,
  // satisfy `pred`.
  bool WaitImages(const std::function<bool(const std::vector<v1::NodeImage>&)>& pred) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, std::chrono::seconds(60), [&]() DROVER_REQUIRES(mu_) { return pred(images_); });
  }

  std::vector<v1::WorkloadStatus> Reports(const std::string& id) {
    MutexLock lock(&mu_);
    std::vector<v1::WorkloadStatus> out;
    for (const auto& ws : reports_) {
      if (ws.workload_id() == id) out.push_back(ws);
    }
    return out;
  }

 private:
  Mutex write_mu_;  // one writer at a time
  Mutex mu_;
  CondVar cv_;
  grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream_ DROVER_GUARDED_BY(mu_) = nullptr;
  std::vector<v1::WorkloadStatus> reports_ DROVER_GUARDED_BY(mu_);
  std::vector<v1::NodeImage> images_ DROVER_GUARDED_BY(mu_);
  size_t seen_ DROVER_GUARDED_BY(mu_) = 0;
  int sessions_ DROVER_GUARDED_BY(mu_) = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace drover::agent::test_support
