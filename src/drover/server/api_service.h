#pragma once
// ApiService: the management API, once, for every transport. The gRPC
// services and the REST/JSON mapping both call it, so the same request gets
// the same validation, the same answer and the same status code.
//
// Thread-safety: thread-safe; it forwards to the control loop and waits.

#include <functional>
#include <string>

#include "drover/common/status.h"
#include "drover/server/control_loop.h"
#include "drover/server/log_store.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

class ApiService {
 public:
  ApiService(ControlLoop* loop, LogStore* logs) : loop_(loop), logs_(logs) {}

  Result<v1::SubmitJobResponse> Submit(v1::SubmitJobRequest req);
  Result<v1::Job> GetJob(const v1::GetJobRequest& req);
  Result<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req);
  Result<v1::Job> CancelJob(const v1::CancelJobRequest& req);

  Result<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req);
  Result<v1::Node> GetNode(const v1::GetNodeRequest& req);
  Result<v1::Node> Drain(const v1::DrainNodeRequest& req, bool drained);
  // Admin: a fault for a simulated GPU (kFailedPrecondition for real ones).
  Result<v1::InjectFaultResponse> InjectFault(const v1::InjectFaultRequest& req);

  // Dashboards.
  Result<v1::Fleet> Fleet();
  Result<v1::SchedulerStats> SchedulerStats();
  Result<v1::ListTenantsResponse> ListTenants();
  Result<v1::GpuHistory> GpuHistory(const v1::GpuHistoryRequest& req);

  v1::VersionResponse Version() const;

  // Sends the job's output in chunks to `write` (which returns false when the
  // reader is gone). With follow, keeps going until the job ended and all its
  // output was sent, or `cancelled()` turns true.
  Status Logs(const v1::LogsRequest& req, const std::function<bool(const v1::LogChunk&)>& write,
              const std::function<bool()>& cancelled);

 private:
  ControlLoop* loop_;
  LogStore* logs_;
};

}  // namespace drover::server
