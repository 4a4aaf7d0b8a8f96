#include "drover/cli/flags.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "drover/cli/terminal.h"

namespace drover::cli {

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

void AddCommon(CLI::App* cmd, Common* c, bool output) {
  // The default is where the server of this data directory said it listens
  // (every server of `drover up --ha`), else 127.0.0.1:7070.
  if (std::ifstream in(DataDir() + "/endpoints.json"); in) {
    auto endpoints = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (endpoints.is_object() && endpoints.value("grpc", "") != "") c->addr = endpoints.value("grpc", "");
  }
  cmd->add_option("--addr", c->addr, "server gRPC address; several, comma-separated, for a leader and its standbys")
      ->envname("DROVER_ADDR")
      ->capture_default_str();
  cmd->add_option("--timeout", c->timeout_s, "seconds to wait for an answer")->check(CLI::Range(1, 3600));
  cmd->add_option("--token-file", c->token_file, "file holding the API token (default: DROVER_TOKEN, drover login's)");
  cmd->add_option("--ca-file", c->ca_file,
                  "cluster CA to verify a TLS server with (default: DROVER_CA_FILE, <data-dir>/tls/ca.crt)");
  if (output) cmd->add_option("-o,--output", c->output, "table, wide or json")->capture_default_str();
}

int CheckOutput(const Common& c) {
  if (c.output == "table" || c.output == "wide" || c.output == "json") return 0;
  std::cerr << "error: output format '" << EscapeTerminal(c.output) << "' is unknown (use table, wide or json)\n";
  return kExitUsage;
}

std::string DataDir() {
  std::string dir = Env("DROVER_DATA_DIR");
  return dir.empty() ? ".drover" : dir;
}

std::string LoginTokenPath() {
  std::string xdg = Env("XDG_CONFIG_HOME");
  std::string home = Env("HOME");
  std::string base = !xdg.empty() ? xdg : (home.empty() ? "." : home) + "/.config";
  return base + "/drover/token";
}

std::string ResolveToken(const Common& c) {
  if (std::string env = Env("DROVER_TOKEN"); !env.empty()) return env;
  if (!c.token_file.empty()) return FirstLine(c.token_file);
  if (std::string t = FirstLine(LoginTokenPath()); !t.empty()) return t;
  return FirstLine(DataDir() + "/admin.token");
}

std::string ResolveCaFile(const Common& c) {
  if (!c.ca_file.empty()) return c.ca_file;
  if (std::string env = Env("DROVER_CA_FILE"); !env.empty()) return env;
  std::string found = DataDir() + "/tls/ca.crt";
  return std::ifstream(found) ? found : "";
}

std::string ResolveHttpAddr(const Common& c) {
  if (std::string env = Env("DROVER_HTTP_ADDR"); !env.empty()) return env;
  std::ifstream in(DataDir() + "/endpoints.json");
  if (!in) return "";
  auto endpoints = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!endpoints.is_object() || endpoints.value("grpc", "") != c.addr) return "";
  return endpoints.value("http", "");
}

int ExitCodeFor(Code code) {
  switch (code) {
    case Code::kOk: return 0;
    case Code::kNotFound: return kExitNotFound;
    case Code::kUnavailable:
    case Code::kDeadlineExceeded: return kExitUnavailable;
    case Code::kInvalidArgument:
    case Code::kFailedPrecondition:
    case Code::kOutOfRange:
    case Code::kResourceExhausted: return kExitUsage;
    default: return kExitFailure;
  }
}

int Fail(Code code, const std::string& message, const Common& c) {
  std::string msg = message;
  if (code == Code::kUnavailable) {
    std::string ca = ResolveCaFile(c);
    msg =
        fmt::format("cannot reach the drover server at {} ({}); is it running? (--addr or DROVER_ADDR){}", c.addr, msg,
                    ca.empty() ? "; a server with TLS needs --ca-file or DROVER_CA_FILE"
                               : fmt::format("; talking TLS, verifying the server with {}", ca));
  } else if (code == Code::kUnauthenticated) {
    msg = fmt::format("{} (the CLI looks in DROVER_TOKEN, --token-file, {}, then {}/admin.token)", msg,
                      LoginTokenPath(), DataDir());
  }
  // The server's message quotes what tenants wrote: escaped (terminal.h).
  std::cerr << "error: " << EscapeTerminal(msg) << "\n";
  return ExitCodeFor(code);
}

int Usage(const std::string& message) {
  std::cerr << "error: " << EscapeTerminal(message) << "\n";
  return kExitUsage;
}

int ExitCodeOfJob(bool succeeded, int signal, int exit_code) {
  if (signal != 0) return 128 + signal;
  if (succeeded) return 0;
  return exit_code > 0 && exit_code < 256 ? exit_code : kExitFailure;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Or(const std::string& s, const char* fallback) { return s.empty() ? fallback : s; }

}  // namespace drover::cli
