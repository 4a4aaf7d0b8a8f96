#pragma once
// What every client verb shares and that needs neither gRPC nor protobuf
// (internal to drover/cli): the common flags, where the token, the CA and
// the server's HTTP address come from, and how an error becomes an exit
// code. The small `drover` front program (fast_verbs.h) is built from this
// and submit_flags.h alone.
//
// Exit codes: 0 success; 1 the request failed; 2 bad usage or a request the
// server rejected as invalid (or a failed precondition, such as a fault
// for a GPU that is not simulated); 3 not found; 4 the server cannot be
// reached. `submit --wait` exits with the job's exit code (128+N when
// killed by signal N).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "drover/common/status.h"

namespace drover::cli {

inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitUnavailable = 4;

// Flags every client verb has. One instance is shared by all verbs: only
// the verb that runs parses into it.
struct Common {
  std::string addr = "127.0.0.1:7070";
  std::string output = "table";
  int timeout_s = 30;
  std::string token_file;  // --token-file
  std::string ca_file;     // --ca-file
};

// Adds --addr, --timeout, --token-file, --ca-file and, when `output`,
// -o/--output.
void AddCommon(CLI::App* cmd, Common* c, bool output);

// 0 when --output names a format, else prints why and returns kExitUsage.
int CheckOutput(const Common& c);

// The data directory the CLI looks in: DROVER_DATA_DIR, else ./.drover
// (where `drover up` keeps it).
std::string DataDir();

// The token the CLI sends, from the first of: DROVER_TOKEN, --token-file,
// the file `drover login` wrote ($XDG_CONFIG_HOME or ~/.config,
// drover/token), <data-dir>/admin.token. "" when none is found.
std::string ResolveToken(const Common& c);
// Where `drover login` keeps the token.
std::string LoginTokenPath();
// The cluster CA the CLI verifies the server with (then it talks TLS): the
// first of --ca-file, DROVER_CA_FILE, and <data-dir>/tls/ca.crt when that
// exists (written by `drover certs init`). "" for plaintext.
std::string ResolveCaFile(const Common& c);
// The HTTP address of the server at c.addr: DROVER_HTTP_ADDR, else the
// "http" of <data-dir>/endpoints.json when its "grpc" is c.addr (the
// server writes it when it serves). "" when unknown.
std::string ResolveHttpAddr(const Common& c);

// NOT_FOUND 3, UNAVAILABLE and DEADLINE_EXCEEDED 4, INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE and RESOURCE_EXHAUSTED 2, else 1.
int ExitCodeFor(Code code);
// Prints "error: MESSAGE" (with a hint when the server cannot be reached or
// refused the token) and returns ExitCodeFor(code).
int Fail(Code code, const std::string& message, const Common& c);
// Prints "error: MESSAGE" and returns kExitUsage.
int Usage(const std::string& message);

// The exit code `submit --wait` gives for an ended job: its own, 128 + the
// signal that killed it, or 1 when it failed otherwise.
int ExitCodeOfJob(bool succeeded, int signal, int exit_code);

int64_t NowNanos();

// `s`, or `fallback` when empty.
std::string Or(const std::string& s, const char* fallback = "<none>");

}  // namespace drover::cli
