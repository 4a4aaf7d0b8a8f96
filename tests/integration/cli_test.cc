// End to end through the CLI, as a user runs it: `drover up` with simulated
// nodes, then submit, jobs, job, logs, cancel, nodes, gpus, drain.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = std::make_unique<DroverUp>(dir_.path() + "/data",
                                     std::vector<std::string>{"--simulate", "2", "--simulate-gpus", "4"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(3));  // this machine (OpenCL) + 2 simulated
  }
  CommandResult Cli(std::vector<std::string> args) { return RunCli(up_->grpc_address(), std::move(args)); }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(CliTest, SubmitWaitPrintsGpuIdsAndSucceeds) {
  CommandResult r = Cli({"submit", "--gpus", "2", "--wait", "--", "sh", "-c", "echo $DROVER_GPU_IDS"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(std::regex_match(id, std::regex("j-[0-9]{6}"))) << r.out;

  CommandResult logs = Cli({"logs", id});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_TRUE(std::regex_match(logs.out, std::regex("[0-9]+,[0-9]+\n"))) << logs.out;

  CommandResult jobs = Cli({"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_TRUE(std::regex_search(jobs.out, std::regex(id + " +<none> +default +Succeeded +2 +sim-"))) << jobs.out;

  CommandResult json = Cli({"job", id, "-o", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["status"]["state"], "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(j["status"]["allocation"]["gpuIndices"].size(), 2u);
}

TEST_F(CliTest, VendorVariableMatchesGpuIds) {
  CommandResult r = Cli({"submit", "--gpus", "3", "--gpu-model", "H100 80GB", "--wait", "--", "sh", "-c",
                         "test \"$CUDA_VISIBLE_DEVICES\" = \"$DROVER_GPU_IDS\" && echo $DROVER_JOB_ID"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(Cli({"logs", id}).out, id + "\n");
}

TEST_F(CliTest, WaitExitsWithTheJobsExitCode) {
  CommandResult r = Cli({"submit", "--wait", "--", "sh", "-c", "echo oops >&2; exit 7"});
  EXPECT_EQ(r.exit_code, 7);
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(Cli({"logs", id}).out, "oops\n");
  CommandResult failed = Cli({"jobs", "--state", "failed", "-o", "wide"});
  EXPECT_NE(failed.out.find(id), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("exited with code 7"), std::string::npos) << failed.out;

  CommandResult missing = Cli({"submit", "--wait", "--", "/nonexistent/tool"});
  EXPECT_EQ(missing.exit_code, 127) << missing.err;
}

TEST_F(CliTest, CancelStopsARunningJobWithSigterm) {
  CommandResult r = Cli({"submit", "--", "sleep", "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == v1::JOB_STATE_RUNNING; }));
  CommandResult c = Cli({"cancel", id});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == v1::JOB_STATE_CANCELLED; }));
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().signal(), 15);
  EXPECT_EQ(Cli({"cancel", id}).exit_code, 2);  // already ended
}

TEST_F(CliTest, FollowStreamsUntilTheJobEnds) {
  CommandResult r = Cli({"submit", "--", "sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.2; done"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  CommandResult f = Cli({"logs", "-f", id});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "line 1\nline 2\nline 3\n");
}

TEST_F(CliTest, NodesGpusAndDrain) {
  CommandResult nodes = Cli({"nodes"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("sim-1 +Ready +0/4 +H100 80GB"))) << nodes.out;

  CommandResult gpus = Cli({"gpus", "-o", "json"});
  ASSERT_EQ(gpus.exit_code, 0) << gpus.err;
  auto list = nlohmann::json::parse(gpus.out);
  int sim = 0;
  for (const auto& g : list) sim += g["node"].get<std::string>().rfind("sim-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(sim, 8);

  ASSERT_EQ(Cli({"drain", "sim-1"}).exit_code, 0);
  ASSERT_EQ(Cli({"drain", "sim-2"}).exit_code, 0);
  CommandResult r = Cli({"submit", "--gpus", "4", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  v1::Job pending = GetJob(up_->jobs(), id);
  EXPECT_EQ(pending.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(pending.status().message().rfind("waiting", 0), 0u) << pending.status().message();
  EXPECT_NE(pending.status().message().find("4 GPUs"), std::string::npos) << pending.status().message();
  EXPECT_NE(Cli({"nodes"}).out.find("Ready,Drained"), std::string::npos);
  ASSERT_EQ(Cli({"undrain", "sim-2"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == v1::JOB_STATE_SUCCEEDED; }));
  EXPECT_EQ(GetJob(up_->jobs(), id).status().allocation().node(), "sim-2");
}

TEST_F(CliTest, SharesSelectorsAndTheJobView) {
  // Two quarters of one GPU: both run, on the same GPU.
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    CommandResult r = Cli({"submit", "--gpus", "0.25", "--gpu-memory", "10GiB", "--gpu-model", "H100 80GB",
                           "--selector", "rack=rack-1", "--", "sleep", "300"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ids.push_back(r.out.substr(0, r.out.find('\n')));
  }
  ASSERT_TRUE(WaitUntil([&] {
    return GetJob(up_->jobs(), ids[0]).status().state() == v1::JOB_STATE_RUNNING &&
           GetJob(up_->jobs(), ids[1]).status().state() == v1::JOB_STATE_RUNNING;
  }));
  v1::Job a = GetJob(up_->jobs(), ids[0]);
  v1::Job b = GetJob(up_->jobs(), ids[1]);
  EXPECT_EQ(a.spec().gpu_milli(), 250);
  EXPECT_EQ(a.status().allocation().gpu_milli(), 250);
  EXPECT_EQ(a.status().allocation().node(), b.status().allocation().node());
  EXPECT_EQ(a.status().allocation().gpu_indices(0), b.status().allocation().gpu_indices(0)) << "binpack shares one GPU";

  CommandResult shown = Cli({"job", ids[0]});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("Tenant:       default"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("GPUs:         0.25 of one GPU (250 milli-GPU), 10GiB of its memory"), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("Selector:     rack=rack-1"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("a 250 milli-GPU share, 10GiB reserved"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Preemptible:  no"), std::string::npos) << shown.out;
  CommandResult jobs = Cli({"jobs", "--state", "running"});
  EXPECT_TRUE(std::regex_search(jobs.out, std::regex(ids[0] + " +<none> +default +Running +0.25 +sim-"))) << jobs.out;
  for (const std::string& id : ids) ASSERT_EQ(Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] {
    return GetJob(up_->jobs(), ids[0]).status().state() == v1::JOB_STATE_CANCELLED &&
           GetJob(up_->jobs(), ids[1]).status().state() == v1::JOB_STATE_CANCELLED;
  }));

  // Simulated nodes carry rack and switch labels and a link matrix.
  CommandResult nodes = Cli({"nodes", "-o", "json"});
  auto list = nlohmann::json::parse(nodes.out);
  for (const auto& n : list["nodes"]) {
    if (n["name"] != "sim-1") continue;
    EXPECT_EQ(n["labels"]["rack"], "rack-1");
    EXPECT_EQ(n["labels"]["switch"], "switch-1");
    EXPECT_EQ(n["links"].size(), 16u);
  }
}

TEST_F(CliTest, GangRunsOneProcessPerReplica) {
  CommandResult r = Cli({"submit", "--replicas", "2", "--gpus", "4", "--gpu-model", "H100 80GB", "--wait", "--", "sh",
                         "-c", "echo $DROVER_REPLICA/$DROVER_REPLICAS"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(Cli({"logs", id}).out, "0/2\n") << "the job's log is replica 0's output";
  CommandResult shown = Cli({"job", id});
  EXPECT_NE(shown.out.find("GPUs:         2 replicas x 4"), std::string::npos) << shown.out;
  EXPECT_TRUE(std::regex_search(shown.out, std::regex("Replica 0: +sim-[12] GPUs 0,1,2,3"))) << shown.out;
  EXPECT_TRUE(std::regex_search(shown.out, std::regex("Replica 1: +sim-[12] GPUs 0,1,2,3"))) << shown.out;
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_NE(job.status().replicas(0).node(), job.status().replicas(1).node());

  // One replica fails: the other is stopped and the job fails with its code.
  r = Cli({"submit", "--replicas", "2", "--gpus", "4", "--gpu-model", "H100 80GB", "--grace", "1", "--wait", "--",
           "sh", "-c", "if [ \"$DROVER_REPLICA\" = 1 ]; then exit 3; fi; exec sleep 300"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("replica 1 failed: exited with code 3"), std::string::npos) << r.err;
}

TEST_F(CliTest, BadSchedulingFlagsAreUsageErrors) {
  auto usage = [&](std::vector<std::string> args, const std::string& part) {
    CommandResult r = Cli(std::move(args));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  usage({"submit", "--gpus", "1.5", "--", "true"}, "a share of one GPU (below 1)");
  usage({"submit", "--gpus", "0.25", "--", "true"}, "also give --gpu-memory");
  usage({"submit", "--gpus", "lots", "--", "true"}, "--gpus");
  usage({"submit", "--selector", "rack", "--", "true"}, "--selector 'rack' is not NAME=VALUE");
  usage({"submit", "--selector", "rack=a b", "--", "true"}, "node_selector label 'rack' has value 'a b'");
  usage({"submit", "--topology", "mesh", "--", "true"}, "topology 'mesh' is unknown");
  usage({"submit", "--estimate", "soon", "--", "true"}, "--estimate: duration 'soon' is malformed");
  usage({"submit", "--replicas", "3", "--gpus", "4", "--gpu-model", "H100 80GB", "--", "true"}, "never fit");
  usage({"submit", "--selector", "rack=rack-7", "--", "true"}, "never fit");
}

TEST_F(CliTest, ErrorsHaveMeaningfulExitCodes) {
  CommandResult nf = Cli({"job", "j-999999"});
  EXPECT_EQ(nf.exit_code, 3);
  EXPECT_NE(nf.err.find("job 'j-999999' not found"), std::string::npos) << nf.err;
  EXPECT_EQ(Cli({"job", "banana"}).exit_code, 2);
  EXPECT_EQ(Cli({"submit", "--gpus", "0", "--", "true"}).exit_code, 2);
  EXPECT_EQ(Cli({"submit", "--gpu-memory", "lots", "--", "true"}).exit_code, 2);
  CommandResult never = Cli({"submit", "--gpus", "5", "--", "true"});
  EXPECT_EQ(never.exit_code, 2);
  EXPECT_NE(never.err.find("never fit"), std::string::npos) << never.err;
  EXPECT_EQ(Cli({"jobs", "-o", "yaml"}).exit_code, 2);
  EXPECT_EQ(Cli({"jobs", "--state", "exploded"}).exit_code, 2);
  EXPECT_EQ(Cli({"frobnicate"}).exit_code, 2);
  CommandResult down = RunCli("127.0.0.1:1", {"jobs", "--timeout", "2"});
  EXPECT_EQ(down.exit_code, 4);
  EXPECT_NE(down.err.find("cannot reach the drover server"), std::string::npos) << down.err;
  EXPECT_EQ(Cli({"jobs", "-o", "json"}).exit_code, 0);
  CommandResult version = Cli({"version"});
  EXPECT_NE(version.out.find("server: 0.1.0"), std::string::npos) << version.out;
}

}  // namespace
}  // namespace drover::testing
