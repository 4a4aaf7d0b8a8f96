#pragma once
// The REST/JSON face of the management API: the same messages as the gRPC
// services in protobuf's JSON mapping, under /api/v1, plus /healthz and
// /readyz.
//
//   POST /api/v1/jobs                  SubmitJobRequest -> SubmitJobResponse
//   GET  /api/v1/jobs[?state=&tenant=] ListJobsResponse
//   GET  /api/v1/jobs/{id}             Job
//   POST /api/v1/jobs/{id}/cancel      Job
//   GET  /api/v1/jobs/{id}/logs[?follow=true&offset=N]   text/plain
//   GET  /api/v1/nodes                 ListNodesResponse
//   GET  /api/v1/nodes/{name}          Node
//   POST /api/v1/nodes/{name}/drain    Node      (and /undrain)
//   GET  /api/v1/version               VersionResponse

#include <functional>

#include "drover/common/metrics.h"
#include "drover/http/server.h"
#include "drover/server/api_service.h"

namespace drover::server {

// `ready` answers /readyz: true once the server serves requests.
// Also serves GET /metrics (the Prometheus text format) from `metrics`,
// and counts every request in drover_http_requests_total.
http::Handler MakeRestHandler(ApiService* api, std::function<Status()> ready, metrics::Registry* metrics);

}  // namespace drover::server
