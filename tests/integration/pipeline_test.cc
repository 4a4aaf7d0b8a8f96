// A pipeline through the real CLI against `drover up --simulate`: a
// CPU-only step (`--gpus 0`, which sees none of the node's GPUs) and a GPU
// step joined by `--after`. The second waits, with the reason, while the
// first runs; it runs once the first succeeded, and ends FAILED with the
// reason, without running, when the first failed.

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = std::make_unique<DroverUp>(
        dir_.path() + "/data",
        std::vector<std::string>{"--devices", "simulated", "--simulate", "1", "--simulate-gpus", "2"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));  // this machine and one more, both of simulated NVIDIA GPUs
  }
  CommandResult Cli(std::vector<std::string> args) {
    return RunCli(up_->grpc_address(), std::move(args), {"DROVER_HTTP_ADDR=" + up_->http_address()});
  }
  std::string Submit(std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    CommandResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = r.out.substr(0, r.out.find('\n'));
    EXPECT_TRUE(std::regex_match(id, std::regex("j-[0-9]{6}"))) << r.out << r.err;
    return id;
  }
  nlohmann::json Job(const std::string& id) {
    CommandResult r = Cli({"job", id, "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  }
  v1::JobState StateOf(const std::string& id) { return GetJob(up_->jobs(), id).status().state(); }
  // A step that runs until the test creates `go`, then exits with `code`.
  std::vector<std::string> Step(const std::string& go, const std::string& check, int code) {
    return {"--", "sh", "-c",
            check + " && while [ ! -e " + go + " ]; do sleep 0.05; done && exit " + std::to_string(code)};
  }
  static void Touch(const std::string& path) { std::ofstream(path) << "go\n"; }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(PipelineTest, ACpuOnlyStepThenAGpuStepJoinedByAfter) {
  // The CPU-only step sees no GPU: the vendor's variable is set, and empty.
  const std::string no_gpus = "[ \"${CUDA_VISIBLE_DEVICES+set}\" = set ] && [ -z \"$CUDA_VISIBLE_DEVICES\" ]";
  std::vector<std::string> first_args = {"--gpus", "0", "--cpus", "1"};
  const std::string go = dir_.path() + "/go";
  for (const std::string& a : Step(go, no_gpus, 0)) first_args.push_back(a);
  std::string first = Submit(first_args);
  ASSERT_TRUE(WaitUntil([&] { return StateOf(first) == v1::JOB_STATE_RUNNING; })) << Job(first).dump();

  std::string second = Submit({"--gpus", "1", "--after", first + ":ok", "--time-limit", "10m", "--", "sh", "-c",
                               "test -n \"$CUDA_VISIBLE_DEVICES\" && test -e " + go});
  nlohmann::json waiting = Job(second);
  EXPECT_EQ(waiting["status"].value("state", ""), "JOB_STATE_PENDING");
  EXPECT_EQ(waiting["status"].value("message", ""), "waiting for " + first + " to end") << waiting.dump();
  CommandResult described = Cli({"job", second});
  EXPECT_NE(described.out.find("After"), std::string::npos) << described.out;
  EXPECT_NE(described.out.find("Time limit"), std::string::npos) << described.out;

  Touch(go);
  ASSERT_TRUE(WaitUntil([&] { return StateOf(second) == v1::JOB_STATE_SUCCEEDED; })) << Job(second).dump();
  EXPECT_EQ(StateOf(first), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(PipelineTest, AFailingFirstStepEndsTheSecondWithTheReason) {
  std::vector<std::string> first_args = {"--gpus", "0"};
  const std::string go = dir_.path() + "/go-fail";
  for (const std::string& a : Step(go, "true", 3)) first_args.push_back(a);
  std::string first = Submit(first_args);
  std::string second = Submit({"--gpus", "1", "--after", first, "--", "true"});
  Touch(go);
  ASSERT_TRUE(WaitUntil([&] { return StateOf(second) == v1::JOB_STATE_FAILED; })) << Job(second).dump();
  nlohmann::json ended = Job(second);
  EXPECT_EQ(ended["status"].value("message", ""), "dependency " + first + " failed") << ended.dump();
  EXPECT_EQ(StateOf(first), v1::JOB_STATE_FAILED);

  // Bad input through the CLI: a job that does not exist, a malformed flag.
  CommandResult unknown = Cli({"submit", "--after", "j-009999", "--", "true"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("not found"), std::string::npos) << unknown.err;
  CommandResult bad = Cli({"submit", "--after", first + ":maybe", "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("JOB:any"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace drover::testing
