#pragma once
// Server: the control plane of one machine. Opens the store, rebuilds the
// state, starts the control loop and serves gRPC and HTTP. Used by
// `drover server` and `drover up`.
//
// Once listening it writes <data-dir>/endpoints.json with the bound
// addresses ({"grpc": "127.0.0.1:7070", "http": "127.0.0.1:8080"}), so that
// tools and tests that asked for port 0 can find it.

#include <memory>
#include <string>

#include "drover/common/status.h"
#include "drover/server/control_loop.h"

namespace drover::server {

struct ServerOptions {
  std::string data_dir = ".drover";
  std::string grpc_listen = "127.0.0.1:7070";
  std::string http_listen = "127.0.0.1:8080";
  // Scheduler policies and tenants (MakeControlLoopOptions).
  ControlLoopOptions control = {};
};

class Server {
 public:
  virtual ~Server() = default;
  virtual std::string grpc_address() const = 0;
  virtual std::string http_address() const = 0;
  // Stops serving; idempotent.
  virtual void Stop() = 0;
};

Result<std::unique_ptr<Server>> StartServer(const ServerOptions& options);

}  // namespace drover::server
