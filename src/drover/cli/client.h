#pragma once
// What the CLI's verbs share (internal to drover/cli): the common flags, the
// gRPC channel and deadlines, and how a gRPC status becomes an exit code
// (see commands.h).

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace drover::cli {

// Flags every client verb has. One instance is shared by all verbs: only
// the verb that runs parses into it.
struct Common {
  std::string addr = "127.0.0.1:7070";
  std::string output = "table";
  int timeout_s = 30;
  std::string token_file;  // --token-file
  std::string ca_file;     // --ca-file
};

// The token the CLI sends, from the first of: DROVER_TOKEN, --token-file,
// the file `drover login` wrote ($XDG_CONFIG_HOME or ~/.config,
// drover/token), <data-dir>/admin.token with the data dir DROVER_DATA_DIR or
// ./.drover (where `drover up` writes it). "" when none is found.
std::string ResolveToken(const Common& c);
// Where `drover login` keeps the token.
std::string LoginTokenPath();
// The cluster CA the CLI verifies the server with (then it talks TLS): the
// first of --ca-file, DROVER_CA_FILE, and <data-dir>/tls/ca.crt when that
// exists (written by `drover certs init`). "" for plaintext.
std::string ResolveCaFile(const Common& c);

// NOT_FOUND 3, UNAVAILABLE and DEADLINE_EXCEEDED 4, INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE and RESOURCE_EXHAUSTED 2, else 1.
int ExitCodeFor(const grpc::Status& s);

// Prints the error (with a hint when the server cannot be reached) and
// returns its exit code.
int Fail(const grpc::Status& s, const Common& c);

// Prints "error: MESSAGE" and returns kExitUsage.
int Usage(const std::string& message);

std::shared_ptr<grpc::Channel> Channel(const Common& c);

// A context whose deadline is --timeout from now, or `cap` when shorter.
std::unique_ptr<grpc::ClientContext> Context(const Common& c,
                                             std::chrono::milliseconds cap = std::chrono::milliseconds::max());

// Indented JSON with every field, as `-o json` prints it.
std::string Json(const google::protobuf::Message& m);

int64_t NowNanos();

// `s`, or `fallback` when empty.
std::string Or(const std::string& s, const char* fallback = "<none>");

// Adds --addr, --timeout and, when `output`, -o/--output.
void AddCommon(CLI::App* cmd, Common* c, bool output);

// Wraps a verb: checks -o, runs `fn` and stores its exit code.
using Runner = std::function<std::function<void()>(std::function<int()>)>;
Runner MakeRunner(int* exit_code, std::shared_ptr<Common> common);

// tenants list|create|set|delete (tenant_commands.cc).
void AddTenantCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

// login, whoami, tokens, audit, ui, join-token (auth_commands.cc).
void AddAuthCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

// The node verbs (nodes, gpus, drain, undrain, fault) and `top`.
void AddNodeCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);
void AddTopCommand(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common);

}  // namespace drover::cli
