#pragma once
// The REST/JSON face of the management API: the same messages as the gRPC
// services in protobuf's JSON mapping, under /api/v1, plus /healthz and
// /readyz.
//
//   POST /api/v1/jobs                  SubmitJobRequest -> SubmitJobResponse
//   GET  /api/v1/jobs[?state=&tenant=&array=&node=&ended_after=&ended_before=&page_size=&page_token=]
//                                      ListJobsResponse: live and archived, newest first, a page
//   GET  /api/v1/jobs/{id}             Job
//   POST /api/v1/jobs/{id}/cancel      Job
//   GET  /api/v1/jobs/{id}/logs[?follow=true&offset=N]   text/plain
//   GET  /api/v1/nodes                 ListNodesResponse
//   GET  /api/v1/nodes/{name}          Node
//   POST /api/v1/nodes/{name}/drain    Node      (and /undrain)
//   GET  /api/v1/version               VersionResponse
//   GET  /api/v1/whoami                Principal
//   GET|POST /api/v1/tokens            ListTokensResponse | CreateTokenRequest -> CreateTokenResponse
//   POST /api/v1/tokens/{id}/revoke    TokenInfo
//   POST /api/v1/login-codes           CreateLoginCodeResponse (a dashboard login link)
//   POST /api/v1/join-tokens           CreateJoinTokenRequest -> CreateJoinTokenResponse (admin)
//   POST /api/v1/tenants, PUT|DELETE /api/v1/tenants/{name}   Tenant -> TenantStatus (admin)
//   GET  /api/v1/audit[?since=&limit=] ListAuditResponse (admin); /api/v1/audit/verify
//   GET|POST|DELETE /api/v1/session    the dashboard's cookie session (see edge.h); a login
//                                      passes the token's rate limits like any other call
//
// Every body is depth-scanned before it is parsed (CheckJsonDepth:
// deeper than 64 levels is 400), and a route's role is checked before its
// body is read (docs/security.md, "Bounded parsing and default quotas").

#include <functional>

#include "drover/common/metrics.h"
#include "drover/http/server.h"
#include "drover/server/api_service.h"
#include "drover/server/edge.h"
#include "drover/server/rest_streams.h"

namespace drover::server {

struct RestContext {
  ApiService* api = nullptr;
  Edge* edge = nullptr;                  // browser rules, authentication, limits
  auth::Authority* authority = nullptr;  // dashboard sessions
  // Answers /readyz: OK once the server serves requests.
  std::function<Status()> ready;
  // GET /metrics (the Prometheus text format); every request is counted in
  // drover_http_requests_total.
  metrics::Registry* metrics = nullptr;
  // GET /api/v1/events and /api/v1/watch (rest_streams.h).
  RestStreams* streams = nullptr;
};

// Every route but /healthz and /readyz passes the Edge's browser rules;
// everything under /api/v1 (and /metrics unless --metrics-public) needs a
// token or a dashboard session (see edge.h and docs/security.md).
http::Handler MakeRestHandler(RestContext context);

}  // namespace drover::server
