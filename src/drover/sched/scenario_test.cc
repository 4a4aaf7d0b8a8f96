// Scenario tests: short, readable scripts of cluster events run against the
// Scheduler and compared with a checked-in transcript (habit 9; the idea is
// flux-sched's t/data and etcd raft's testdata).
//
// Every tests/testdata/sched/NAME.scenario is one test. The runner echoes
// each line of the file into a transcript and writes the scheduler's answers,
// indented by two spaces, under the command that produced them; the
// transcript must equal NAME.out. To accept new behaviour:
//
//   DROVER_REWRITE=1 build/src/drover/sched/sched_scenario_test
//
// rewrites every .out from the scheduler as it is now. Read the diff before
// checking it in: the .out files are the scheduler's specification by
// example. The line format is documented in tests/testdata/sched/README.md.
//
// The runner is testing/scenario.{h,cc}; the parsing of a line,
// testing/scenario_syntax.{h,cc}.
//
// CheckInvariants runs after every command; a broken invariant, or a line
// the parser does not understand, fails the test with file:line.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "drover/common/status.h"
#include "drover/sched/testing/scenario.h"
#include "drover/sched/testing/scenario_syntax.h"

#ifndef DROVER_TESTDATA_DIR
#error "DROVER_TESTDATA_DIR must name tests/testdata/sched (set in CMakeLists.txt)"
#endif

namespace drover::sched::testing {
namespace {

namespace fs = std::filesystem;

// ----------------------------------------------------------------- tests --

fs::path TestdataDir() { return fs::path(DROVER_TESTDATA_DIR); }

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(TestdataDir(), ec)) {
    if (e.path().extension() == ".scenario") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Rewriting() {
  const char* v = std::getenv("DROVER_REWRITE");
  return v != nullptr && std::string_view(v) == "1";
}

class ScenarioTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioTest, MatchesExpectedTranscript) {
  fs::path scenario = TestdataDir() / (GetParam() + ".scenario");
  fs::path expected_path = TestdataDir() / (GetParam() + ".out");
  std::optional<std::string> text = ReadFile(scenario);
  ASSERT_TRUE(text.has_value()) << "cannot read " << scenario;
  Result<std::string> got = RunScenario(scenario.string(), *text);
  ASSERT_TRUE(got.ok()) << got.status().message();
  if (Rewriting()) {
    std::ofstream(expected_path, std::ios::binary | std::ios::trunc) << *got;
    std::cout << "rewrote " << expected_path.string() << "\n";
    return;
  }
  std::optional<std::string> want = ReadFile(expected_path);
  ASSERT_TRUE(want.has_value()) << "no " << expected_path.string() << "; run with DROVER_REWRITE=1 to create it";
  if (*want != *got) {
    ADD_FAILURE() << expected_path.string() << " differs from what the scheduler does now"
                  << " (DROVER_REWRITE=1 accepts the new transcript):\n--- " << GetParam() << ".out\n+++ actual\n"
                  << UnifiedDiff(Lines(*want), Lines(*got));
  }
}

INSTANTIATE_TEST_SUITE_P(Sched, ScenarioTest, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(ScenarioFilesTest, EveryExpectedOutputHasAScenario) {
  EXPECT_FALSE(ScenarioNames().empty()) << "no scenarios under " << TestdataDir();
  for (const auto& e : fs::directory_iterator(TestdataDir())) {
    if (e.path().extension() != ".out") continue;
    fs::path scenario = e.path();
    scenario.replace_extension(".scenario");
    EXPECT_TRUE(fs::exists(scenario)) << e.path() << " is stale: " << scenario << " does not exist";
  }
}

// The runner's own behaviour: errors name the file and line.
TEST(ScenarioRunnerTest, ParseErrorsNameFileAndLine) {
  auto r = RunScenario("x.scenario", "# comment\nnode n1 gpus=2\njob j1 gpus=1 colour=blue\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "x.scenario:3: unknown key 'colour'");
  r = RunScenario("y.scenario", "node n1 gpus=2\nconfig queue=fifo\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "y.scenario:2: config must come before every other command");
  r = RunScenario("z.scenario", "at 10m\nat 5m\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "z.scenario:2: time goes backwards (5m < 10m)");
  r = RunScenario("q.scenario", "node \"n1 gpus=2\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "q.scenario:1: unterminated quote");
}

TEST(ScenarioRunnerTest, TranscriptEchoesLinesAndIndentsAnswers) {
  auto r = RunScenario(
      "t.scenario",
      "# two GPUs\nnode n1 gpus=2 model=\"A100 40GB\" memory=40GiB\njob j1 gpus=2  # all of it\nschedule\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r,
            "# two GPUs\nnode n1 gpus=2 model=\"A100 40GB\" memory=40GiB\njob j1 gpus=2  # all of it\nschedule\n  bind "
            "j1 -> n1[0,1]\n");
}

TEST(ScenarioRunnerTest, DurationsRoundTrip) {
  EXPECT_EQ(ParseDurationMs("1h30m").value(), 5'400'000);
  EXPECT_EQ(ParseDurationMs("250ms").value(), 250);
  EXPECT_EQ(ParseDurationMs("0").value(), 0);
  EXPECT_FALSE(ParseDurationMs("10").ok());
  EXPECT_FALSE(ParseDurationMs("5x").ok());
  EXPECT_EQ(FormatDurationMs(5'400'000), "1h30m");
  EXPECT_EQ(FormatDurationMs(30'000), "30s");
  EXPECT_EQ(FormatDurationMs(1'500), "1s500ms");
}

TEST(ScenarioRunnerTest, FormatsIndexRuns) {
  EXPECT_EQ(FormatIndices({0, 1}), "0,1");
  EXPECT_EQ(FormatIndices({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(FormatIndices({1, 3, 4, 5, 6, 7}), "1,3-7");
}

TEST(ScenarioRunnerTest, DiffShowsChangedLinesWithContext) {
  std::string d = UnifiedDiff({"a", "b", "c", "d", "e", "f", "g", "h"}, {"a", "b", "c", "d", "X", "f", "g", "h"});
  EXPECT_EQ(d, "@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+X\n f\n g\n h\n");
}

}  // namespace
}  // namespace drover::sched::testing
