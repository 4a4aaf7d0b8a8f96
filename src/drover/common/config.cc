#include "drover/common/config.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include "drover/common/ids.h"

namespace drover {
namespace {

// The keys of the scheduler: section and the flags they set.
const std::map<std::string, std::string>& SchedulerKeys() {
  static const std::map<std::string, std::string> kKeys = {{"queue", "queue-policy"},
                                                           {"placement", "placement-policy"},
                                                           {"backfill", "backfill"},
                                                           {"preemption", "preemption"},
                                                           {"aging", "aging"},
                                                           {"preemption-grace", "preemption-grace"},
                                                           {"las-thresholds", "las-thresholds"},
                                                           {"las-starvation", "las-starvation"}};
  return kKeys;
}

// A mapping key's text. A key that is itself a mapping or a list ("[a]: 1")
// names no flag; yaml-cpp would throw its own exception for it, which CLI11
// does not turn into a usage error.
std::string KeyName(const YAML::Node& key) {
  if (key.IsMap() || key.IsSequence()) {
    throw CLI::ConversionError(fmt::format("config file: the key at line {}, column {} is a {}, not a name",
                                           key.Mark().line + 1, key.Mark().column + 1,
                                           key.IsMap() ? "mapping" : "list"));
  }
  return key.as<std::string>();
}

// Reads a YAML mapping of flag names to scalars or lists; nested mappings
// address subcommands (CLI11's "parents"), except the scheduler: section
// (flat scheduler flags) and the tenants: list (one YAML value for --tenants).
class YamlConfig final : public CLI::Config {
 public:
  explicit YamlConfig(std::string scope) : scope_(std::move(scope)) {}

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
    std::vector<std::string> parents;
    if (!scope_.empty()) parents.push_back(scope_);
    Walk(root, parents, &out);
    return out;
  }

 private:
  static void Add(const std::vector<std::string>& parents, const std::string& name, std::vector<std::string> inputs,
                  std::vector<CLI::ConfigItem>* out) {
    // CLI11 reads the file before the environment and keeps the first value
    // it finds, so a key whose DROVER_* variable is set yields to it here.
    if (std::getenv(EnvNameFor(name).c_str()) != nullptr) return;
    CLI::ConfigItem item;
    item.parents = parents;
    item.name = name;
    item.inputs = std::move(inputs);
    out->push_back(std::move(item));
  }

  static void WalkScheduler(const YAML::Node& map, const std::vector<std::string>& parents,
                            std::vector<CLI::ConfigItem>* out) {
    if (map.IsNull()) return;
    if (!map.IsMap()) throw CLI::ConversionError("config key 'scheduler' must be a mapping (queue: priority, ...)");
    for (const auto& kv : map) {
      std::string key = KeyName(kv.first);
      auto it = SchedulerKeys().find(key);
      if (it == SchedulerKeys().end()) {
        throw CLI::ConversionError(
            fmt::format("config key 'scheduler.{}' is unknown (use queue, placement, backfill, preemption, aging, "
                        "preemption-grace, las-thresholds, las-starvation)",
                        key));
      }
      if (!kv.second.IsScalar()) {
        throw CLI::ConversionError(fmt::format("config key 'scheduler.{}' must be a single value", key));
      }
      Add(parents, it->second, {kv.second.as<std::string>()}, out);
    }
  }

  static void Walk(const YAML::Node& map, std::vector<std::string> parents, std::vector<CLI::ConfigItem>* out) {
    for (const auto& kv : map) {
      std::string key = KeyName(kv.first);
      const YAML::Node& value = kv.second;
      if (key == "scheduler") {
        WalkScheduler(value, parents, out);
        continue;
      }
      if (key == "tenants") {
        // Checked by ParseTenants, which names the offending key.
        YAML::Emitter e;
        e.SetMapFormat(YAML::Flow);
        e.SetSeqFormat(YAML::Flow);
        e << value;
        Add(parents, "tenants", {e.c_str()}, out);
        continue;
      }
      if (value.IsMap()) {
        auto sub = parents;
        sub.push_back(key);
        Walk(value, sub, out);
        continue;
      }
      std::vector<std::string> inputs;
      if (value.IsSequence()) {
        for (const auto& v : value) {
          if (!v.IsScalar()) throw CLI::ConversionError(fmt::format("config key '{}' must be a list of values", key));
          inputs.push_back(v.as<std::string>());
        }
      } else if (value.IsScalar()) {
        inputs.push_back(value.as<std::string>());
      }
      Add(parents, key, std::move(inputs), out);
    }
  }

  std::string scope_;
};

}  // namespace

std::string EnvNameFor(std::string_view long_flag) {
  std::string out = "DROVER_";
  for (char c : long_flag) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void AddYamlConfig(CLI::App& app, std::string scope) {
  app.config_formatter(std::make_shared<YamlConfig>(std::move(scope)));
  app.set_config("--config", "", "YAML file of flag values (flags and DROVER_* variables override it)")
      ->envname("DROVER_CONFIG");
  app.allow_config_extras(CLI::config_extras_mode::error);
}

void AddSchedulerFlags(CLI::App* cmd, SchedulerFlags* f) {
  cmd->add_option("--queue-policy", f->queue_policy,
                  "queue order: fifo, priority, fair-share, las or sjf (default priority; config scheduler.queue)");
  cmd->add_option("--placement-policy", f->placement_policy,
                  "placement: frag, binpack, spread, best-fit or random (default frag; config scheduler.placement)");
  cmd->add_option("--backfill", f->backfill, "true or false: EASY backfill (default true; config scheduler.backfill)");
  cmd->add_option(
      "--preemption", f->preemption,
      "true or false: preempt for priority and reclaimed guarantees (default true; config scheduler.preemption)");
  cmd->add_option("--aging", f->aging,
                  "priority policy: a waiting job gains one priority level per this duration, 0 = none (default 60s)");
  cmd->add_option("--preemption-grace", f->preemption_grace,
                  "time a preempted job gets between SIGTERM and SIGKILL (default 30s; at most the job's own grace)");
  cmd->add_option("--las-thresholds", f->las_thresholds,
                  "las policy: levels of attained GPU time, ascending, e.g. 1h,10h (the default: 1 and 10 GPU-hours); "
                  "none = one level");
  cmd->add_option("--las-starvation", f->las_starvation,
                  "las policy: a waiting job that waited this many times the time it ran goes back to the first "
                  "level (Tiresias' promotion; default 4, 0 = never)");
  cmd->add_option("--tenants", f->tenants, "tenants as a YAML list (usually the config file's tenants: section)");
  cmd->add_option("--default-max-pending-jobs", f->default_max_pending_jobs,
                  "pending jobs a tenant may have at once unless its quota says otherwise (default 10000, 0 = none)");
  cmd->add_option("--default-max-array-tasks", f->default_max_array_tasks,
                  "jobs one submit (an array's tasks, a batch) may add unless its tenant's quota says otherwise "
                  "(default 1001, as Slurm's MaxArraySize; at most 100000; 0 = the most, 100000)");
}

namespace {

std::string Quoted(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.as<std::string>() + "'";
  return n.IsMap() ? "a mapping" : n.IsSequence() ? "a list" : "empty";
}

// A mapping key's text; a key that is a mapping or a list is an error
// (yaml-cpp would throw).
Result<std::string> KeyText(const YAML::Node& key, const std::string& where) {
  if (key.IsMap() || key.IsSequence()) {
    return InvalidArgument(fmt::format("{}: a key is {}, not a name", where, Quoted(key)));
  }
  return key.as<std::string>();
}

Result<int64_t> IntIn(const YAML::Node& n, const std::string& key, int64_t lo, int64_t hi) {
  int64_t v = 0;
  std::string text = n.IsScalar() ? n.as<std::string>() : "";
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (!n.IsScalar() || ec != std::errc() || p != text.data() + text.size()) {
    return InvalidArgument(fmt::format("{}: {} is not a whole number", key, Quoted(n)));
  }
  if (v < lo || v > hi) return InvalidArgument(fmt::format("{}: {} is outside {}..{}", key, v, lo, hi));
  return v;
}

}  // namespace

Result<std::vector<TenantConfig>> ParseTenants(std::string_view yaml) {
  std::vector<TenantConfig> out;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("tenants: not valid YAML: {}", e.what()));
  }
  if (root.IsNull()) return out;
  if (!root.IsSequence()) return InvalidArgument("tenants: must be a list of {name, weight, guaranteed, borrow-limit}");
  std::set<std::string> seen;
  for (size_t i = 0; i < root.size(); ++i) {
    const YAML::Node& t = root[i];
    std::string at = fmt::format("tenants[{}]", i);
    if (!t.IsMap()) return InvalidArgument(fmt::format("{}: must be a mapping with a name", at));
    TenantConfig tc;
    bool named = false;
    for (const auto& kv : t) {
      DROVER_ASSIGN_OR_RETURN(std::string key, KeyText(kv.first, at));
      const YAML::Node& v = kv.second;
      std::string where = fmt::format("{}.{}", at, key);
      if (key == "name") {
        if (!v.IsScalar()) return InvalidArgument(fmt::format("{}: must be a name", where));
        tc.name = v.as<std::string>();
        DROVER_RETURN_IF_ERROR(ValidateName(where, tc.name));
        named = true;
      } else if (key == "weight") {
        std::string text = v.IsScalar() ? v.as<std::string>() : "";
        char* end = nullptr;
        double w = std::strtod(text.c_str(), &end);
        if (!v.IsScalar() || text.empty() || end != text.c_str() + text.size() || !std::isfinite(w)) {
          return InvalidArgument(fmt::format("{}: {} is not a number", where, Quoted(v)));
        }
        if (w <= 0 || w > 1e6) return InvalidArgument(fmt::format("{}: {} is outside (0, 1000000]", where, text));
        tc.weight = w;
      } else if (key == "guaranteed") {
        if (v.IsNull()) continue;
        if (!v.IsMap()) {
          return InvalidArgument(
              fmt::format("{}: must map GPU models to GPU counts, e.g. {{\"H100 80GB\": 8}}", where));
        }
        for (const auto& g : v) {
          DROVER_ASSIGN_OR_RETURN(std::string model, KeyText(g.first, where));
          if (model.empty() || model.size() > 256) {
            return InvalidArgument(fmt::format("{}: GPU model '{}' is empty or too long", where, model.substr(0, 64)));
          }
          DROVER_ASSIGN_OR_RETURN(int64_t n, IntIn(g.second, fmt::format("{}[\"{}\"]", where, model), 0, 1'000'000));
          tc.guaranteed[model] = static_cast<int>(n);
        }
      } else if (key == "borrow-limit") {
        DROVER_ASSIGN_OR_RETURN(int64_t n, IntIn(v, where, -1, 1'000'000));
        tc.borrow_limit = static_cast<int>(n);
      } else {
        return InvalidArgument(
            fmt::format("{}: key '{}' is unknown (use name, weight, guaranteed, borrow-limit)", at, key));
      }
    }
    if (!named) return InvalidArgument(fmt::format("{}.name: is missing", at));
    if (!seen.insert(tc.name).second) {
      return InvalidArgument(fmt::format("{}.name: tenant '{}' is listed twice", at, tc.name));
    }
    out.push_back(std::move(tc));
  }
  return out;
}

Result<int64_t> ParseDurationMs(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument(fmt::format("duration '{}' is malformed (use e.g. 500ms, 30s, 5m, 2h, 1h30m, 1d)", text));
  };
  if (text == "0") return int64_t{0};
  if (text.empty() || text.size() > 64) return bad();
  double total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (i == start) return bad();
    std::string number(text.substr(start, i - start));
    char* end = nullptr;
    double v = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return bad();
    size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    double scale = unit == "ms"  ? 1
                   : unit == "s" ? 1e3
                   : unit == "m" ? 60e3
                   : unit == "h" ? 3600e3
                   : unit == "d" ? 86400e3
                                 : 0;
    if (scale == 0) return bad();
    total += v * scale;
  }
  constexpr double kMax = 10.0 * 366 * 86400e3;
  if (total > kMax) return InvalidArgument(fmt::format("duration '{}' is longer than 10 years", text));
  return static_cast<int64_t>(std::llround(total));
}

Result<bool> ParseBool(std::string_view text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  return InvalidArgument(fmt::format("'{}' is not true or false", text));
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
