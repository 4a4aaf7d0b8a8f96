#pragma once
// Configuration: defaults, then a YAML file (--config), then DROVER_*
// environment variables, then command-line flags; the later one wins.
//
// Every long flag --foo-bar of a command can also be set as the key foo-bar
// in the YAML file and as DROVER_FOO_BAR in the environment. Unknown YAML
// keys are errors, so a typo never silently falls back to a default.

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>

namespace drover {

// "grpc-listen" -> "DROVER_GRPC_LISTEN".
std::string EnvNameFor(std::string_view long_flag);

// Adds --config (a YAML file) to `app` and reads it with the precedence above.
void AddYamlConfig(CLI::App& app);

// Gives every long option of `app` (not its subcommands) its DROVER_* name.
void BindEnvironment(CLI::App& app);

}  // namespace drover
