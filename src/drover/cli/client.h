#pragma once
// What the CLI's verbs share over gRPC (internal to drover/cli): the
// channel, deadlines and how a gRPC status becomes an exit code; the rest
// is in flags.h.

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "drover/cli/flags.h"

namespace drover::cli {

// ExitCodeFor and Fail (flags.h) for a gRPC status.
int ExitCodeFor(const grpc::Status& s);
int Fail(const grpc::Status& s, const Common& c);

std::shared_ptr<grpc::Channel> Channel(const Common& c);

// A context whose deadline is --timeout from now, or `cap` when shorter.
std::unique_ptr<grpc::ClientContext> Context(const Common& c,
                                             std::chrono::milliseconds cap = std::chrono::milliseconds::max());

// Indented JSON with every field, as `-o json` prints it.
std::string Json(const google::protobuf::Message& m);

// Wraps a verb: checks -o, runs `fn` and stores its exit code.
using Runner = std::function<std::function<void()>(std::function<int()>)>;
Runner MakeRunner(int* exit_code, std::shared_ptr<Common> common);

// tenants list|create|set|delete (tenant_commands.cc).
void AddTenantCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

// login, whoami, tokens, audit, ui, join-token (auth_commands.cc).
void AddAuthCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

// deploy, deployments, deployment, scale, undeploy, models (deploy_commands.cc).
void AddDeployCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

// The node verbs (nodes, gpus, drain, undrain, fault) and `top`.
void AddNodeCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);
void AddTopCommand(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

}  // namespace drover::cli
