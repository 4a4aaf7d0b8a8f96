#include "drover/cli/client.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>

#include "drover/cli/commands.h"

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
    msg = fmt::format("cannot reach the drover server at {} ({}); is it running? (--addr or DROVER_ADDR)", c.addr, msg);
  }
  std::cerr << "error: " << msg << "\n";
  return ExitCodeFor(s);
}

int Usage(const std::string& message) {
  std::cerr << "error: " << message << "\n";
  return kExitUsage;
}

std::shared_ptr<grpc::Channel> Channel(const Common& c) {
  return grpc::CreateChannel(c.addr, grpc::InsecureChannelCredentials());
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
