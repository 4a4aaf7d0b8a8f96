#pragma once
// The verbs users run most, without gRPC: the small front program that
// `drover` is (apps/drover/front.cc) runs them before it would hand over to
// the full program, drover-core, whose start-up (gRPC, protobuf, 60-odd
// shared libraries) is most of what a user waits for.
//
// Same flags (submit_flags.h, job_table.h), same output and exit codes as
// the gRPC verbs, over the REST API: `submit` is POST /api/v1/jobs, then GET
// /api/v1/watch for --wait (server-sent events, pushed by the control loop);
// `jobs` is GET /api/v1/jobs, a page at a time. TLS when the CLI finds a CA
// (flags.h ResolveCaFile). They need the server's HTTP address
// (ResolveHttpAddr): DROVER_HTTP_ADDR, or the endpoints.json of the data
// directory of a local `drover up`. Several addresses, comma-separated
// (every server of `drover up --ha`): a request goes to the first; one that
// cannot be reached before anything was sent, or that stands by (503, and
// X-Drover-Leader names the leader), passes it on: to the leader it names
// when that is one of the addresses, else to the next.

#include <optional>

namespace drover::cli {

// Runs `drover submit ARGS...` (argv[1] is "submit") and returns its exit
// code; nullopt when it cannot tell (the HTTP address is unknown, or the
// flags do not parse, or ask for help): then the full program must run it,
// and nothing was sent.
std::optional<int> FastSubmit(int argc, char** argv);

// `drover jobs ARGS...` (argv[1] is "jobs"), as FastSubmit.
std::optional<int> FastJobs(int argc, char** argv);

}  // namespace drover::cli
