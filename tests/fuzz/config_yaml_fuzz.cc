// The YAML config file, `drover server --config FILE` (common/config.cc):
// read through CLI11 with the YamlConfig formatter scoped to the role, as
// apps/drover/main.cc does it, then turned into the control loop's options
// by server/scheduler_options.cc (MakeControlLoopOptions: the scheduler:
// section's words and durations, the tenants: list). The input is also read
// as a bare tenants list (ParseTenants), which is what --tenants takes.
// (Listen addresses are http_request_fuzz's.)
//
// Properties: a bad file is a CLI::ParseError (which main turns into a usage
// error), never another exception; tenants that parse have valid, unique
// names, weights in (0, 1e6] and limits in range.

#include <CLI/CLI.hpp>

#include <set>

#include "drover/common/config.h"
#include "drover/common/ids.h"
#include "drover/server/scheduler_options.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;

struct ServerFlags {
  std::string data_dir = ".drover";
  std::string grpc_listen = "127.0.0.1:7070";
  std::string http_listen = "127.0.0.1:8080";
  std::string log_level = "info";
  std::vector<std::string> labels;
  int simulate = 0;
  drover::SchedulerFlags sched;
};

void CheckTenants(const std::vector<drover::TenantConfig>& tenants) {
  std::set<std::string> names;
  for (const auto& t : tenants) {
    FUZZ_CHECK(drover::ValidateName("tenant", t.name).ok());
    FUZZ_CHECK(names.insert(t.name).second);
    FUZZ_CHECK(t.weight > 0 && t.weight <= 1e6);
    FUZZ_CHECK(t.borrow_limit >= -1 && t.borrow_limit <= 1'000'000);
    for (const auto& [model, n] : t.guaranteed) FUZZ_CHECK(!model.empty() && n >= 0 && n <= 1'000'000);
  }
}

void ConfigFile(std::string_view text) {
  const std::string path = drover::fuzz::WriteTempFile("drover.yaml", text);
  CLI::App app("drover", "drover");
  app.require_subcommand(1);
  drover::AddYamlConfig(app, "server");
  ServerFlags f;
  CLI::App* server = app.add_subcommand("server", "control plane");
  server->add_option("--data-dir", f.data_dir);
  server->add_option("--grpc-listen", f.grpc_listen);
  server->add_option("--listen", f.http_listen);
  server->add_option("--log-level", f.log_level);
  server->add_option("--label", f.labels);
  server->add_option("--simulate", f.simulate)->check(CLI::Range(0, 1024));
  drover::AddSchedulerFlags(server, &f.sched);
  drover::BindEnvironment(*server);
  try {
    app.parse(std::vector<std::string>{"server", path, "--config"});  // reversed, as CLI11 takes them
  } catch (const CLI::ParseError&) {
    return;  // main prints it and exits with a usage error
  }
  auto options = drover::server::MakeControlLoopOptions(f.sched);
  if (options.ok()) {
    for (const auto& t : options->tenants) FUZZ_CHECK(t.weight > 0 && t.weight <= 1e6);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = AsText(data, size);
  ConfigFile(text);
  auto tenants = drover::ParseTenants(text);
  if (tenants.ok()) CheckTenants(*tenants);
  return 0;
}
