#pragma once
// The human-readable printers of verbs that show the API's messages
// (internal to drover/cli; the tables of `jobs`, `nodes` and `gpus` are in
// job_table.h and node_view.h). Pure functions of the message, so tests can
// check them without a server. Every one escapes what it prints for the
// terminal (terminal.h).

#include <cstdint>
#include <ostream>

#include "drover/v1/api.pb.h"

namespace drover::cli {

// `drover job ID`: every field a user asks about, one per line, and why the
// job is in its state (for a pending job, the scheduler's reason); ages as
// of `now_nanos` (commands.cc).
void DescribeJob(const v1::Job& job, int64_t now_nanos, std::ostream& out);

// `drover audit`: one row per entry (auth_commands.cc).
void PrintAuditTable(const v1::ListAuditResponse& resp, std::ostream& out);

// `drover deployment NAME`: its spec and status, then a row per replica
// (deploy_commands.cc).
void DescribeDeployment(const v1::Deployment& d, std::ostream& out);

}  // namespace drover::cli
