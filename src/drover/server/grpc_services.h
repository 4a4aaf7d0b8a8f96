#pragma once
// The gRPC face of the server: JobService, NodeService and InfoService over
// ApiService, and AgentService (Register and the per-agent Session stream)
// over the control loop.

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <memory>
#include <vector>

#include "drover/auth/authority.h"
#include "drover/auth/cluster_ca.h"
#include "drover/server/api_service.h"
#include "drover/server/control_loop.h"
#include "drover/server/edge.h"
#include "drover/server/log_store.h"

namespace drover::server {

// Every service authenticates its caller through `edge` (see edge.h).
// `tls` (null: plaintext) is what the listener serves: with it, an agent's
// verified client certificate names its node, and Join issues node
// certificates when the server holds the CA key. It must outlive the services.
std::vector<std::unique_ptr<grpc::Service>> MakeGrpcServices(ApiService* api, ControlLoop* loop, LogStore* logs,
                                                             Edge* edge, auth::Authority* authority,
                                                             const auth::ServerTls* tls = nullptr);

// AgentService: Join, Register and the per-agent Session stream
// (agent_service.cc). Sessions run on gRPC's callback API: no thread per
// agent.
std::unique_ptr<grpc::Service> MakeAgentService(ControlLoop* loop, LogStore* logs, ApiService* api, Edge* edge,
                                                auth::Authority* authority, const auth::ServerTls* tls);

}  // namespace drover::server
