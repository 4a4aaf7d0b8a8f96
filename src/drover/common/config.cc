#include "drover/common/config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdlib>

namespace drover {
namespace {

// Reads a YAML mapping of flag names to scalars or lists; nested mappings
// address subcommands (CLI11's "parents").
class YamlConfig final : public CLI::Config {
 public:
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> out;
    YAML::Node root;
    try {
      root = YAML::Load(input);
    } catch (const YAML::Exception& e) {
      throw CLI::ConversionError("config file is not valid YAML: " + std::string(e.what()));
    }
    if (root.IsNull()) return out;
    if (!root.IsMap()) throw CLI::ConversionError("config file must be a YAML mapping of flag names to values");
    Walk(root, {}, &out);
    return out;
  }

 private:
  static void Walk(const YAML::Node& map, std::vector<std::string> parents, std::vector<CLI::ConfigItem>* out) {
    for (const auto& kv : map) {
      std::string key = kv.first.as<std::string>();
      const YAML::Node& value = kv.second;
      if (value.IsMap()) {
        auto sub = parents;
        sub.push_back(key);
        Walk(value, sub, out);
        continue;
      }
      // CLI11 reads the file before the environment and keeps the first value
      // it finds, so a key whose DROVER_* variable is set yields to it here.
      if (std::getenv(EnvNameFor(key).c_str()) != nullptr) continue;
      CLI::ConfigItem item;
      item.parents = parents;
      item.name = key;
      if (value.IsSequence()) {
        for (const auto& v : value) item.inputs.push_back(v.as<std::string>());
      } else if (value.IsScalar()) {
        item.inputs.push_back(value.as<std::string>());
      }
      out->push_back(std::move(item));
    }
  }
};

}  // namespace

std::string EnvNameFor(std::string_view long_flag) {
  std::string out = "DROVER_";
  for (char c : long_flag) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void AddYamlConfig(CLI::App& app) {
  app.config_formatter(std::make_shared<YamlConfig>());
  app.set_config("--config", "", "YAML file of flag values (flags and DROVER_* variables override it)")
      ->envname("DROVER_CONFIG");
  app.allow_config_extras(CLI::config_extras_mode::error);
}

void BindEnvironment(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const auto& names = opt->get_lnames();
    if (names.empty() || names.front() == "help" || names.front() == "config") continue;
    if (!opt->get_envname().empty()) continue;
    opt->envname(EnvNameFor(names.front()));
  }
}

}  // namespace drover
