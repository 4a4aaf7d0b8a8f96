#include "drover/cli/client.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "drover/cli/commands.h"
#include "drover/cli/terminal.h"
#include "drover/rpc/channel.h"

namespace drover::cli {

int ExitCodeFor(const grpc::Status& s) { return cli::ExitCodeFor(static_cast<Code>(s.error_code())); }

int Fail(const grpc::Status& s, const Common& c) {
  return cli::Fail(static_cast<Code>(s.error_code()), s.error_message(), c);
}

std::shared_ptr<grpc::Channel> Channel(const Common& c) {
  std::string ca = ResolveCaFile(c);
  if (ca.empty()) return rpc::MakeChannel(c.addr, ResolveToken(c));
  grpc::SslCredentialsOptions o;
  std::ifstream in(ca);
  o.pem_root_certs.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  // Unreadable: no root at all rather than the system's, so the handshake fails closed.
  if (!in || o.pem_root_certs.empty()) {
    std::cerr << "warning: cannot read the CA file '" << EscapeTerminal(ca) << "'\n";
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
  // Protobuf's encoder (3.21) escapes C0, DEL, C1 and the bidirectional
  // controls itself; this keeps it so whatever its version (terminal.h).
  return EscapeJsonForTerminal(out);
}

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
