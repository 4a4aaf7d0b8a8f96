#include "drover/cli/client.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "drover/cli/commands.h"
#include "drover/rpc/channel.h"

namespace drover::cli {

int ExitCodeFor(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return 0;
    case grpc::StatusCode::NOT_FOUND: return kExitNotFound;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED: return kExitUnavailable;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return kExitUsage;
    default: return kExitFailure;
  }
}

int Fail(const grpc::Status& s, const Common& c) {
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::string ca = ResolveCaFile(c);
    msg = fmt::format("cannot reach the drover server at {} ({}); is it running? (--addr or DROVER_ADDR){}", c.addr, msg,
                      ca.empty() ? "; a server with TLS needs --ca-file or DROVER_CA_FILE"
                                 : fmt::format("; talking TLS, verifying the server with {}", ca));
  } else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    msg = fmt::format("{} (the CLI looks in DROVER_TOKEN, --token-file, {}, then {}/admin.token)", msg, LoginTokenPath(),
                      std::getenv("DROVER_DATA_DIR") != nullptr ? std::getenv("DROVER_DATA_DIR") : ".drover");
  }
  std::cerr << "error: " << msg << "\n";
  return ExitCodeFor(s);
}

int Usage(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return kExitUsage;
}

namespace {

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::string LoginTokenPath() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  std::string base = xdg != nullptr && *xdg != '\0' ? xdg : std::string(home != nullptr ? home : ".") + "/.config";
  return base + "/drover/token";
}

std::string ResolveToken(const Common& c) {
  if (const char* env = std::getenv("DROVER_TOKEN"); env != nullptr && *env != '\0') return env;
  if (!c.token_file.empty()) return FirstLine(c.token_file);
  if (std::string t = FirstLine(LoginTokenPath()); !t.empty()) return t;
  const char* dir = std::getenv("DROVER_DATA_DIR");
  return FirstLine(std::string(dir != nullptr && *dir != '\0' ? dir : ".drover") + "/admin.token");
}

std::string ResolveCaFile(const Common& c) {
  if (!c.ca_file.empty()) return c.ca_file;
  if (const char* env = std::getenv("DROVER_CA_FILE"); env != nullptr && *env != '\0') return env;
  const char* dir = std::getenv("DROVER_DATA_DIR");
  std::string found = std::string(dir != nullptr && *dir != '\0' ? dir : ".drover") + "/tls/ca.crt";
  return std::ifstream(found) ? found : "";
}

std::shared_ptr<grpc::Channel> Channel(const Common& c) {
  std::string ca = ResolveCaFile(c);
  if (ca.empty()) return rpc::MakeChannel(c.addr, ResolveToken(c));
  grpc::SslCredentialsOptions o;
  std::ifstream in(ca);
  o.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  // Unreadable: no root at all rather than the system's, so the handshake fails closed.
  if (!in || o.pem_root_certs.empty()) {
    std::cerr << "warning: cannot read the CA file '" << ca << "'\n";
    o.pem_root_certs = "-";
  }
  return rpc::MakeChannel(c.addr, ResolveToken(c), grpc::SslCredentials(o));
}

std::unique_ptr<grpc::ClientContext> Context(const Common& c, std::chrono::milliseconds cap) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  auto wait = std::min<std::chrono::milliseconds>(std::chrono::seconds(c.timeout_s), cap);
  ctx->set_deadline(std::chrono::system_clock::now() + wait);
  return ctx;
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Or(const std::string& s, const char* fallback) { return s.empty() ? fallback : s; }

void AddCommon(CLI::App* cmd, Common* c, bool output) {
  cmd->add_option("--addr", c->addr, "server gRPC address")->envname("DROVER_ADDR")->capture_default_str();
  cmd->add_option("--timeout", c->timeout_s, "seconds to wait for an answer")->check(CLI::Range(1, 3600));
  cmd->add_option("--token-file", c->token_file, "file holding the API token (default: DROVER_TOKEN, drover login's)");
  cmd->add_option("--ca-file", c->ca_file,
                  "cluster CA to verify a TLS server with (default: DROVER_CA_FILE, <data-dir>/tls/ca.crt)");
  if (output) cmd->add_option("-o,--output", c->output, "table, wide or json")->capture_default_str();
}

namespace {

int CheckOutput(const Common& c) {
  if (c.output == "table" || c.output == "wide" || c.output == "json") return 0;
  std::cerr << "error: output format '" << c.output << "' is unknown (use table, wide or json)\n";
  return kExitUsage;
}

}  // namespace

Runner MakeRunner(int* exit_code, std::shared_ptr<Common> common) {
  return [exit_code, common](std::function<int()> fn) -> std::function<void()> {
    return [exit_code, common, fn = std::move(fn)] {
      if (int rc = CheckOutput(*common); rc != 0) {
        *exit_code = rc;
        return;
      }
      *exit_code = fn();
    };
  };
}

}  // namespace drover::cli
