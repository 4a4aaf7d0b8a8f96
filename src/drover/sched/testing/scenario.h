#pragma once
// The scenario runner behind sched_scenario_test (habit 9): plays a script of
// cluster events (tests/testdata/sched/*.scenario) against a Scheduler and
// returns the transcript that scenario_test.cc compares with NAME.out. The
// line format is documented in tests/testdata/sched/README.md; the words and
// values of a line are parsed by scenario_syntax.h. Test-only.

#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"

namespace drover::sched::testing {

// Runs one scenario, `text`, read from `file` (named in errors). The
// transcript echoes each line of the script and writes the scheduler's
// answers, indented by two spaces, under the command that produced them.
// CheckInvariants runs after every command; a broken invariant, or a line the
// parser does not understand, comes back as "file:line: message".
Result<std::string> RunScenario(std::string file, std::string_view text);

// ------------------------------------------------------------------ diff --

// The lines of `text`, without the empty one after a final newline.
std::vector<std::string> Lines(std::string_view text);

// A unified diff (3 lines of context) from the longest common subsequence;
// the files are a few hundred lines, so O(n*m) is fine.
std::string UnifiedDiff(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace drover::sched::testing
