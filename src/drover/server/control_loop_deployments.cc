// The deployment commands of the control loop: each runs on the loop and
// is the DeploymentController's (deployment_controller.h), which owns the
// deployments; their records commit with the batch of the call. The
// one-second timer that runs the controller lives here too.

#include "drover/server/control_loop.h"

namespace drover::server {

DeploymentController::Hooks ControlLoop::DeploymentHooks() {
  DeploymentController::Hooks h;
  h.submit = [this](const v1::JobSpec& spec) -> Result<uint64_t> {
    DROVER_ASSIGN_OR_RETURN(std::vector<uint64_t> seqs, AddJobs({spec}, nullptr));
    return seqs.front();
  };
  h.cancel = [this](const v1::Job& job) { CancelOne(job); };
  h.pending_reason = [this](const v1::Job& job) { return PendingMessage(job); };
  return h;
}

void ControlLoop::ScheduleDeploymentChecks() {
  loop_.PostAfter(std::chrono::seconds(1), [this] {
    // The batch this task makes runs the controller (AfterBatch).
    deployments_.MarkDirty();
    ScheduleDeploymentChecks();
  });
}

std::future<Result<Done>> ControlLoop::CheckDeployments() {
  return Call<Done>([this]() -> Result<Done> {
    deployments_.ReconcileAll();
    return Done{};
  });
}

std::future<Result<v1::Deployment>> ControlLoop::ApplyDeployment(v1::DeploymentSpec spec, bool replace) {
  return Call<v1::Deployment>([this, spec = std::move(spec), replace]() -> Result<v1::Deployment> {
    // Refused before anything is stored, as a job's mounts are at submit.
    DROVER_RETURN_IF_ERROR(tenants_.CheckMounts(spec.tenant(), spec.container()));
    return deployments_.Apply(spec, replace);
  });
}

std::future<Result<v1::Deployment>> ControlLoop::GetDeployment(std::string tenant, std::string name) {
  return Call<v1::Deployment>(
      [this, tenant = std::move(tenant), name = std::move(name)] { return deployments_.Get(tenant, name); });
}

std::future<Result<std::vector<v1::Deployment>>> ControlLoop::ListDeployments() {
  return Call<std::vector<v1::Deployment>>(
      [this]() -> Result<std::vector<v1::Deployment>> { return deployments_.List(); });
}

std::future<Result<v1::Deployment>> ControlLoop::ScaleDeployment(std::string tenant, std::string name,
                                                                 int32_t replicas) {
  return Call<v1::Deployment>([this, tenant = std::move(tenant), name = std::move(name), replicas] {
    return deployments_.Scale(tenant, name, replicas);
  });
}

std::future<Result<v1::Deployment>> ControlLoop::DeleteDeployment(std::string tenant, std::string name) {
  return Call<v1::Deployment>(
      [this, tenant = std::move(tenant), name = std::move(name)] { return deployments_.Delete(tenant, name); });
}

std::future<Result<v1::EndpointsResponse>> ControlLoop::ServingEndpoints() {
  return Call<v1::EndpointsResponse>([this]() -> Result<v1::EndpointsResponse> { return deployments_.Endpoints(); });
}

std::future<Result<Done>> ControlLoop::ReportLoad(v1::ReportLoadRequest report) {
  return Call<Done>([this, report = std::move(report)]() -> Result<Done> {
    deployments_.ReportLoad(report);
    return Done{};
  });
}

}  // namespace drover::server
