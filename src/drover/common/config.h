#pragma once
// Configuration: defaults, then a YAML file (--config), then DROVER_*
// environment variables, then command-line flags; the later one wins.
//
// Every long flag --foo-bar of a command can also be set as the key foo-bar
// in the YAML file and as DROVER_FOO_BAR in the environment. Unknown YAML
// keys are errors, so a typo never silently falls back to a default.
//
// Two sections of the file are not flat flags:
//   scheduler:          its keys are the scheduler flags (queue ->
//     queue: priority   --queue-policy, placement -> --placement-policy,
//     ...               backfill, preemption, aging, preemption-grace,
//                       las-thresholds)
//   tenants:            a list of {name, weight, guaranteed, borrow-limit},
//     - name: a         handed to --tenants as YAML text
//
// Example (docs/configuration.md has every key):
//   scheduler: {queue: fair-share, preemption-grace: 30s}
//   tenants:
//     - {name: research, weight: 2, guaranteed: {"H100 80GB": 16}, borrow-limit: 8}

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover {

// "grpc-listen" -> "DROVER_GRPC_LISTEN".
std::string EnvNameFor(std::string_view long_flag);

// Adds --config (a YAML file) to `app` and reads it with the precedence above.
// With a `scope` (a subcommand of `app`), the file's top-level keys are that
// subcommand's flags: `drover up --config f.yaml` reads f.yaml as up's.
void AddYamlConfig(CLI::App& app, std::string scope = "");

// Gives every long option of `app` (not its subcommands) its DROVER_* name.
void BindEnvironment(CLI::App& app);

// The scheduler's settings as given (flags, DROVER_* variables, the file),
// not yet checked: the server checks them against the scheduler's names
// (server/scheduler_options.h). Empty means the scheduler's default.
struct SchedulerFlags {
  std::string queue_policy;      // fifo | priority | fair-share | las | sjf
  std::string placement_policy;  // frag | binpack | spread | best-fit | random
  std::string backfill;          // true | false
  std::string preemption;        // true | false
  std::string aging;             // a duration: 60s
  std::string preemption_grace;  // a duration: 30s
  std::string las_thresholds;    // durations of GPU time: 1h,10h
  std::string las_starvation;    // a factor >= 0: 4
  std::string tenants;           // a YAML list of tenants
  // Admission quotas of tenants that set none (server/tenant_book.h): a
  // count, 0 = none; empty = the defaults (10000, 1001).
  std::string default_max_pending_jobs;
  std::string default_max_array_tasks;
};
// Adds --queue-policy, --placement-policy, --backfill, --preemption,
// --aging, --preemption-grace, --las-thresholds, --las-starvation,
// --tenants, --default-max-pending-jobs and --default-max-array-tasks to `cmd`.
void AddSchedulerFlags(CLI::App* cmd, SchedulerFlags* flags);

// One entry of the tenants: list.
struct TenantConfig {
  std::string name;
  double weight = 1.0;
  std::map<std::string, int> guaranteed;  // GPU model -> GPUs
  int borrow_limit = -1;                  // -1: no limit
};
// Parses a YAML list of tenants; an error names the key
// ("tenants[1].weight: 'heavy' is not a number").
Result<std::vector<TenantConfig>> ParseTenants(std::string_view yaml);

// "90s", "2h", "1h30m", "500ms", "1.5h", "0" -> milliseconds. Units: ms, s,
// m, h, d. Empty, negative, unit-less (but 0) and over 10 years are errors.
Result<int64_t> ParseDurationMs(std::string_view text);
// "true", "false", "yes", "no", "on", "off", "1", "0".
Result<bool> ParseBool(std::string_view text);

}  // namespace drover
