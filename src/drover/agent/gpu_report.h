#pragma once
// How an agent describes its GPUs to others: the v1::Gpu it registers and
// exports metrics for, the telemetry its heartbeats carry, and the samples
// of a GPU's ring buffer over HTTP. Pure functions of what the agent knows.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/telemetry.h"
#include "drover/http/server.h"
#include "drover/v1/common.pb.h"

namespace drover::agent {

// Static information and health of one node GPU (no telemetry, no jobs).
v1::Gpu GpuView(const GpuDevice& device, const GpuReading& reading);

// The latest reading and the summary as the wire has them; fields the
// device did not report stay unset. `jobs_by_process_group` names the job
// of each process on the GPU (a job's processes share its process group).
void FillTelemetry(const GpuReading& reading, const std::map<int64_t, std::string>& jobs_by_process_group,
                   v1::GpuTelemetry* out);

// GET /api/v1/gpus/{index}/samples?max=N: the GPU's ring buffer as JSON,
// oldest first; 404 for another path or GPU, 400 for a bad max.
http::Response SamplesResponse(const Telemetry& telemetry, size_t gpus, const http::Request& req);

}  // namespace drover::agent
