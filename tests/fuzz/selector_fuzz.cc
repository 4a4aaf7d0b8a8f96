// Node selectors and labels: `drover submit --selector NAME=VALUE` (split at
// the first '=' as cli/commands.cc does), node labels (`--label`, agents'
// registrations), checked by rpc::ValidateLabel; and the other words a
// client sends: a topology (sched::ParseTopology) and a job state filter
// (rpc::ParseJobState). Each input line is one NAME=VALUE.
//
// Properties: a label ValidateLabel accepts has a prefix of at most 253
// characters and a name and value of at most 63, all printable ASCII; a
// spec whose selector is those lines passes NormalizeJobSpec exactly when
// every line is a valid label and there are at most kMaxSelectorLabels; a
// parsed job state prints as a word that parses back to it.

#include <map>

#include "drover/rpc/convert.h"
#include "drover/sched/model.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;
namespace rpc = drover::rpc;
namespace v1 = drover::v1;

bool CheckLabel(std::string_view name, std::string_view value) {
  if (!rpc::ValidateLabel("node_selector", name, value).ok()) return false;
  size_t slash = name.find('/');
  std::string_view local = slash == std::string_view::npos ? name : name.substr(slash + 1);
  FUZZ_CHECK(slash == std::string_view::npos || (slash >= 1 && slash <= 253));
  FUZZ_CHECK(!local.empty() && local.size() <= 63 && local.find('/') == std::string_view::npos);
  FUZZ_CHECK(value.size() <= 63);
  for (char c : name) FUZZ_CHECK(c > 0x20 && c < 0x7f);
  for (char c : value) FUZZ_CHECK(c > 0x20 && c < 0x7f);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = AsText(data, size);
  v1::JobSpec spec;
  spec.set_gpus(1);
  spec.add_command("true");
  std::map<std::string, std::string> selector;
  bool all_valid = true;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);

    (void)drover::sched::ParseTopology(line);
    if (auto state = rpc::ParseJobState(line); state.ok()) {
      auto back = rpc::ParseJobState(rpc::JobStateDisplay(*state));
      FUZZ_CHECK(back.ok() && *back == *state);
    }

    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;  // the CLI refuses it before sending
    // A later line with the same name replaces the earlier, as in the map the CLI fills.
    selector[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  for (const auto& [k, v] : selector) {
    all_valid = CheckLabel(k, v) && all_valid;
    (*spec.mutable_node_selector())[k] = v;
  }
  const bool fits = static_cast<int>(selector.size()) <= rpc::kMaxSelectorLabels;
  FUZZ_CHECK(rpc::NormalizeJobSpec(&spec).ok() == (all_valid && fits));
  return 0;
}
