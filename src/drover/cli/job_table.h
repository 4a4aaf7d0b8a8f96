#pragma once
// `drover jobs`: its flags and its table, shared by the gRPC verb
// (commands.cc) and the small front program (fast_verbs.h), so that both
// accept the same flags and print the same rows. The table is printed from
// the proto3 JSON of a v1.ListJobsResponse (what GET /api/v1/jobs answers;
// the gRPC verb converts its answer), so this needs neither gRPC nor
// protobuf.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "drover/common/status.h"

namespace drover::cli {

struct JobsArgs {
  std::string state, tenant, array, node, ended_within, page_token;
  int page_size = 0;
  bool expand = false;
  bool all = false;
};

// Adds every flag of `jobs` but the common ones (flags.h AddCommon).
void AddJobsFlags(CLI::App* jobs, JobsArgs* a);

// --ended-within as the earliest end time, unix nanoseconds as of
// `now_nanos` (0 when not given); kInvalidArgument with the message to
// print for a duration that does not parse.
Result<int64_t> EndedAfter(const JobsArgs& a, int64_t now_nanos);

// "JOB_STATE_FAILED" -> "Failed" (as rpc::JobStateDisplay prints it).
std::string StateDisplay(std::string name);
// The states in the order of the proto enum (their numbers), display order
// of an array's state counts; rpc's test checks it against the enum.
const std::vector<std::string>& JobStateNames();

// A parser callback that keeps only the keys PrintJobList reads, at any
// depth: a client drops every other key while it parses (a page of 500
// jobs parses in a third of the time and memory).
nlohmann::ordered_json::parser_callback_t JobTableFilter();

// Prints a ListJobsResponse as JSON to `out` the way `drover jobs` does:
// one row per job array (its tasks counted by state) and one per other job,
// every job when `a.expand` or `a.array` is set; `wide` adds columns. "No
// jobs found." and the next-page hint go to `err`. Throws
// nlohmann::json::exception for a document of another shape.
void PrintJobList(const nlohmann::ordered_json& list, const JobsArgs& a, bool wide, int64_t now_nanos,
                  std::ostream& out, std::ostream& err);

}  // namespace drover::cli
