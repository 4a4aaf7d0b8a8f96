// drover: one binary, four roles (up, server, agent, gateway) and the CLI.
// Thin: parses the verb and hands off to the role's file (server_role.h,
// agent_role.h, up.h, gateway_role.h, sim_role.h, certs_verb.h; the
// client verbs in drover/cli).

#include <signal.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "agent_role.h"
#include "certs_verb.h"
#include "drover/agent/supervisor.h"
#include "drover/cli/commands.h"
#include "drover/common/config.h"
#include "drover/common/version.h"
#include "gateway_role.h"
#include "ha.h"
#include "server_role.h"
#include "sim_role.h"
#include "up.h"

namespace {

constexpr std::string_view kRoles[] = {"up", "server", "agent"};

// `drover up|server|agent --config F` reads F as that role's flags (and
// its scheduler: and tenants: sections): CLI11 reads a config file only
// for the top-level app, so the flag moves in front of the role, and the
// file is scoped to it. DROVER_CONFIG names the file when no flag does.
// Returns the role ("" for other verbs).
std::string MoveConfigInFront(std::vector<std::string>& args) {
  if (args.size() <= 1 || std::find(std::begin(kRoles), std::end(kRoles), args[1]) == std::end(kRoles)) return "";
  std::string scope = args[1];
  std::vector<std::string> config;
  for (size_t i = 2; i < args.size();) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      config = {"--config", args[i + 1]};
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    } else if (args[i].starts_with("--config=")) {
      config = {"--config", args[i].substr(9)};
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (args[i] == "--") {
      break;
    } else {
      ++i;
    }
  }
  if (config.empty() && std::getenv("DROVER_CONFIG") != nullptr) config = {"--config", std::getenv("DROVER_CONFIG")};
  args.insert(args.begin() + 1, config.begin(), config.end());
  return scope;
}

// Roles wait for signals with sigwait: block them before any thread starts.
void BlockSignalsForRoles(int argc, char** argv) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  bool is_role = argc > 1 && (std::string(argv[1]) == "up" || std::string(argv[1]) == "server" ||
                              std::string(argv[1]) == "agent" || std::string(argv[1]) == "gateway");
  if (is_role) {
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

int main(int argc, char** argv) {
  drover::app::SaveArgv(argv);
  // The supervisor must stay single-threaded and quiet: handle it first.
  if (argc == 4 && std::string(argv[1]) == "supervise" && std::string(argv[2]) == "--dir") {
    return drover::agent::RunSupervisor(argv[3]);
  }
  std::vector<std::string> args(argv, argv + argc);
  const std::string scope = MoveConfigInFront(args);
  CLI::App app("drover: a GPU cluster manager", "drover");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(drover::kVersion));
  drover::AddYamlConfig(app, scope);
  int exit_code = 0;

  // Each role's flags live here until the parse is over.
  drover::app::UpFlags up_flags;
  drover::app::ServerFlags server_flags;
  drover::app::AgentFlags agent_flags;
  drover::app::SimFlags sim_flags;
  drover::app::CertsFlags certs_flags;
  drover::app::StandaloneGatewayFlags gateway_flags;
  CLI::App* up = drover::app::AddUpCommand(app, &up_flags, &exit_code);
  CLI::App* server = drover::app::AddServerCommand(app, &server_flags, &exit_code);
  CLI::App* agent = drover::app::AddAgentCommand(app, &agent_flags, &exit_code);
  drover::app::AddSimCommand(app, &sim_flags, &args, &exit_code);
  drover::app::AddCertsCommand(app, &certs_flags, &exit_code);
  for (CLI::App* role : {up, server, agent}) drover::BindEnvironment(*role);
  drover::app::AddStandaloneGatewayCommand(app, &gateway_flags, &exit_code);
  drover::cli::AddClientCommands(app, &exit_code);

  BlockSignalsForRoles(argc, argv);
  try {
    std::vector<std::string> reversed(args.rbegin(), std::prev(args.rend()));  // CLI11 takes them reversed, no argv[0]
    app.parse(std::move(reversed));
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : drover::cli::kExitUsage;
  }
  return exit_code;
}
