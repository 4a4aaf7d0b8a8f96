#include "drover/server/api_service.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "drover/common/ids.h"
#include "drover/common/version.h"
#include "drover/rpc/convert.h"

namespace drover::server {

namespace {
constexpr auto kApiTimeout = std::chrono::seconds(30);
constexpr int64_t kLogChunkBytes = 64 * 1024;
constexpr auto kLogPollInterval = std::chrono::milliseconds(100);
}  // namespace

template <typename T>
Result<T> Await(std::future<Result<T>> f) {
  if (f.wait_for(kApiTimeout) != std::future_status::ready) {
    return Unavailable("the control loop did not answer in time");
  }
  return f.get();
}

Result<v1::SubmitJobResponse> ApiService::Submit(v1::SubmitJobRequest req) {
  if (!req.has_spec()) return InvalidArgument("spec is missing");
  DROVER_RETURN_IF_ERROR(rpc::NormalizeJobSpec(req.mutable_spec()));
  DROVER_ASSIGN_OR_RETURN(v1::Job job, Await(loop_->Submit(std::move(*req.mutable_spec()))));
  v1::SubmitJobResponse resp;
  *resp.mutable_job() = std::move(job);
  return resp;
}

Result<v1::Job> ApiService::GetJob(const v1::GetJobRequest& req) {
  if (auto id = ParseJobId(req.id()); !id.ok()) return id.status();
  return Await(loop_->GetJob(req.id()));
}

Result<v1::ListJobsResponse> ApiService::ListJobs(const v1::ListJobsRequest& req) {
  if (!v1::JobState_IsValid(req.state())) {
    return InvalidArgument(fmt::format("job state {} is unknown", static_cast<int>(req.state())));
  }
  if (!req.tenant().empty()) DROVER_RETURN_IF_ERROR(ValidateName("tenant", req.tenant()));
  DROVER_ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, Await(loop_->ListJobs(req)));
  v1::ListJobsResponse resp;
  for (v1::Job& j : jobs) *resp.add_jobs() = std::move(j);
  return resp;
}

Result<v1::Job> ApiService::CancelJob(const v1::CancelJobRequest& req) {
  if (auto id = ParseJobId(req.id()); !id.ok()) return id.status();
  return Await(loop_->Cancel(req.id()));
}

Result<v1::ListNodesResponse> ApiService::ListNodes(const v1::ListNodesRequest&) {
  DROVER_ASSIGN_OR_RETURN(std::vector<v1::Node> nodes, Await(loop_->ListNodes()));
  v1::ListNodesResponse resp;
  for (v1::Node& n : nodes) *resp.add_nodes() = std::move(n);
  return resp;
}

Result<v1::Node> ApiService::GetNode(const v1::GetNodeRequest& req) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.name()));
  return Await(loop_->GetNode(req.name()));
}

Result<v1::Node> ApiService::Drain(const v1::DrainNodeRequest& req, bool drained) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.name()));
  return Await(loop_->SetDrained(req.name(), drained));
}

Result<v1::InjectFaultResponse> ApiService::InjectFault(const v1::InjectFaultRequest& req) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.node()));
  DROVER_RETURN_IF_ERROR(Await(loop_->InjectFault(req.node(), req.gpu_index(), req.fault())).status());
  return v1::InjectFaultResponse();
}

Result<v1::Fleet> ApiService::Fleet() { return Await(loop_->Fleet()); }
Result<v1::SchedulerStats> ApiService::SchedulerStats() { return Await(loop_->SchedulerStats()); }
Result<v1::ListTenantsResponse> ApiService::ListTenants() { return Await(loop_->ListTenants()); }
Result<v1::GpuHistory> ApiService::GpuHistory(const v1::GpuHistoryRequest& req) {
  DROVER_RETURN_IF_ERROR(ValidateNodeName(req.node()));
  return Await(loop_->GpuHistory(req.node(), req.gpu_index()));
}

v1::VersionResponse ApiService::Version() const {
  v1::VersionResponse v;
  v.set_version(kVersion);
  v.set_git_commit(kGitCommit);
  return v;
}

Status ApiService::Logs(const v1::LogsRequest& req, const std::function<bool(const v1::LogChunk&)>& write,
                        const std::function<bool()>& cancelled) {
  if (auto id = ParseJobId(req.id()); !id.ok()) return id.status();
  if (req.offset() < 0) return InvalidArgument(fmt::format("offset {} is negative", req.offset()));
  DROVER_ASSIGN_OR_RETURN(v1::Job job, Await(loop_->GetJob(req.id())));
  int64_t offset = req.offset();
  for (;;) {
    // Read the state before the bytes: output that the job wrote before it
    // ended reached the log store before its end did.
    bool ended = rpc::IsTerminal(job.status().state());
    for (;;) {
      DROVER_ASSIGN_OR_RETURN(std::string data, logs_->Read(req.id(), offset, kLogChunkBytes));
      if (data.empty()) break;
      v1::LogChunk chunk;
      chunk.set_offset(offset);
      offset += static_cast<int64_t>(data.size());
      chunk.set_data(std::move(data));
      if (!write(chunk)) return Status::Ok();
    }
    if (!req.follow() || ended) return Status::Ok();
    if (cancelled()) return Status::Ok();
    std::this_thread::sleep_for(kLogPollInterval);
    DROVER_ASSIGN_OR_RETURN(job, Await(loop_->GetJob(req.id())));
  }
}

}  // namespace drover::server
