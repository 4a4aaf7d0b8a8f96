#include "drover/server/grpc_services.h"

#include <deque>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "drover/rpc/convert.h"
#include "drover/v1/agent.grpc.pb.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::server {
namespace {

using grpc::ServerContext;

template <typename T, typename Out>
grpc::Status Reply(Result<T> r, Out* out) {
  if (!r.ok()) return rpc::ToGrpc(r.status());
  *out = std::move(r).value();
  return grpc::Status::OK;
}

class JobServiceImpl final : public v1::JobService::Service {
 public:
  explicit JobServiceImpl(ApiService* api) : api_(api) {}

  grpc::Status Submit(ServerContext*, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    return Reply(api_->Submit(*req), resp);
  }
  grpc::Status Get(ServerContext*, const v1::GetJobRequest* req, v1::Job* resp) override {
    return Reply(api_->GetJob(*req), resp);
  }
  grpc::Status List(ServerContext*, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    return Reply(api_->ListJobs(*req), resp);
  }
  grpc::Status Cancel(ServerContext*, const v1::CancelJobRequest* req, v1::Job* resp) override {
    return Reply(api_->CancelJob(*req), resp);
  }
  grpc::Status Logs(ServerContext* ctx, const v1::LogsRequest* req, grpc::ServerWriter<v1::LogChunk>* w) override {
    return rpc::ToGrpc(api_->Logs(
        *req, [w](const v1::LogChunk& c) { return w->Write(c); }, [ctx] { return ctx->IsCancelled(); }));
  }

 private:
  ApiService* api_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  explicit NodeServiceImpl(ApiService* api) : api_(api) {}

  grpc::Status List(ServerContext*, const v1::ListNodesRequest* req, v1::ListNodesResponse* resp) override {
    return Reply(api_->ListNodes(*req), resp);
  }
  grpc::Status Get(ServerContext*, const v1::GetNodeRequest* req, v1::Node* resp) override {
    return Reply(api_->GetNode(*req), resp);
  }
  grpc::Status Drain(ServerContext*, const v1::DrainNodeRequest* req, v1::Node* resp) override {
    return Reply(api_->Drain(*req, true), resp);
  }
  grpc::Status Undrain(ServerContext*, const v1::DrainNodeRequest* req, v1::Node* resp) override {
    return Reply(api_->Drain(*req, false), resp);
  }
  grpc::Status InjectFault(ServerContext*, const v1::InjectFaultRequest* req, v1::InjectFaultResponse* resp) override {
    return Reply(api_->InjectFault(*req), resp);
  }

 private:
  ApiService* api_;
};

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  explicit ClusterServiceImpl(ApiService* api) : api_(api) {}
  grpc::Status GetFleet(ServerContext*, const v1::FleetRequest*, v1::Fleet* resp) override {
    return Reply(api_->Fleet(), resp);
  }
  grpc::Status GetSchedulerStats(ServerContext*, const v1::SchedulerStatsRequest*, v1::SchedulerStats* resp) override {
    return Reply(api_->SchedulerStats(), resp);
  }
  grpc::Status ListTenants(ServerContext*, const v1::ListTenantsRequest*, v1::ListTenantsResponse* resp) override {
    return Reply(api_->ListTenants(), resp);
  }
  grpc::Status GetGpuHistory(ServerContext*, const v1::GpuHistoryRequest* req, v1::GpuHistory* resp) override {
    return Reply(api_->GpuHistory(*req), resp);
  }

 private:
  ApiService* api_;
};

class InfoServiceImpl final : public v1::InfoService::Service {
 public:
  explicit InfoServiceImpl(ApiService* api) : api_(api) {}
  grpc::Status Version(ServerContext*, const v1::VersionRequest*, v1::VersionResponse* resp) override {
    *resp = api_->Version();
    return grpc::Status::OK;
  }

 private:
  ApiService* api_;
};

using SessionStream = grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>;

// The down direction of one agent session: a writer thread that sends the
// latest desired set. Only the newest unsent set matters (level-triggered).
class SessionSink final : public AgentSink {
 public:
  SessionSink(grpc::ServerContext* ctx, SessionStream* stream)
      : ctx_(ctx), stream_(stream), writer_([this] { WriteLoop(); }) {}
  ~SessionSink() override { Close(); }

  void SendDesired(const v1::DesiredWorkloads& desired) override {
    std::lock_guard lock(mu_);
    pending_ = desired;
    cv_.notify_one();
  }

  void SendInjectFault(const v1::InjectFault& fault) override {
    std::lock_guard lock(mu_);
    faults_.push_back(fault);
    cv_.notify_one();
  }

  void Reset() override {
    std::lock_guard lock(mu_);
    if (!closed_) ctx_->TryCancel();
  }

  // Stops the writer; after it returns the stream is never written again.
  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      cv_.notify_one();
    }
    if (writer_.joinable()) writer_.join();
  }

 private:
  void WriteLoop() {
    for (;;) {
      v1::ServerMessage msg;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return closed_ || pending_.has_value() || !faults_.empty(); });
        if (closed_) return;
        if (pending_.has_value()) {
          *msg.mutable_desired() = std::move(*pending_);
          pending_.reset();
        } else {
          *msg.mutable_inject_fault() = std::move(faults_.front());
          faults_.pop_front();
        }
      }
      if (!stream_->Write(msg)) return;
    }
  }

  grpc::ServerContext* ctx_;
  SessionStream* stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<v1::DesiredWorkloads> pending_;  // GUARDED_BY(mu_)
  std::deque<v1::InjectFault> faults_;            // GUARDED_BY(mu_)
  bool closed_ = false;                           // GUARDED_BY(mu_)
  std::thread writer_;
};

class AgentServiceImpl final : public v1::AgentService::Service {
 public:
  AgentServiceImpl(ControlLoop* loop, LogStore* logs) : loop_(loop), logs_(logs) {}

  grpc::Status Register(ServerContext*, const v1::RegisterRequest* req, v1::RegisterResponse* resp) override {
    if (Status s = rpc::ValidateRegister(*req); !s.ok()) return rpc::ToGrpc(s);
    auto f = loop_->RegisterNode(*req);
    if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the control loop did not answer in time");
    }
    if (auto r = f.get(); !r.ok()) return rpc::ToGrpc(r.status());
    resp->set_heartbeat_interval_ms(2000);
    return grpc::Status::OK;
  }

  grpc::Status Session(ServerContext* ctx, SessionStream* stream) override {
    v1::AgentMessage msg;
    if (!stream->Read(&msg)) return grpc::Status(grpc::StatusCode::CANCELLED, "session closed before hello");
    if (!msg.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first session message must be a hello");
    }
    const std::string node = msg.hello().node_name();
    auto sink = std::make_shared<SessionSink>(ctx, stream);
    auto opened = loop_->SessionOpened(node, sink);
    if (opened.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      sink->Close();
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the control loop did not answer in time");
    }
    if (auto r = opened.get(); !r.ok()) {
      sink->Close();
      return rpc::ToGrpc(r.status());
    }
    grpc::Status result = grpc::Status::OK;
    while (stream->Read(&msg)) {
      if (msg.has_heartbeat()) {
        if (Status s = rpc::ValidateHeartbeat(node, sched::kMaxGpusPerNode, msg.heartbeat()); !s.ok()) {
          spdlog::warn("{}; ignoring its GPU reports", s.message());
          msg.mutable_heartbeat()->clear_gpus();
        }
        loop_->Heartbeat(node, std::move(*msg.mutable_heartbeat()));
      } else if (msg.has_status()) {
        loop_->HandleStatus(node, msg.status());
      } else if (msg.has_log()) {
        // Written here, before any later status of the same job reaches the
        // loop: a job's output is complete once the job is seen to end.
        if (Status s = logs_->Write(msg.log().job_id(), msg.log().offset(), msg.log().data()); !s.ok()) {
          spdlog::warn("node '{}' sent a log chunk that was not stored: {}", node, s.ToString());
        }
      }
    }
    if (ctx->IsCancelled()) result = grpc::Status(grpc::StatusCode::CANCELLED, "session cancelled");
    loop_->SessionClosed(node, sink.get());
    sink->Close();
    return result;
  }

 private:
  ControlLoop* loop_;
  LogStore* logs_;
};

}  // namespace

std::vector<std::unique_ptr<grpc::Service>> MakeGrpcServices(ApiService* api, ControlLoop* loop, LogStore* logs) {
  std::vector<std::unique_ptr<grpc::Service>> out;
  out.push_back(std::make_unique<JobServiceImpl>(api));
  out.push_back(std::make_unique<NodeServiceImpl>(api));
  out.push_back(std::make_unique<InfoServiceImpl>(api));
  out.push_back(std::make_unique<ClusterServiceImpl>(api));
  out.push_back(std::make_unique<AgentServiceImpl>(loop, logs));
  return out;
}

}  // namespace drover::server
