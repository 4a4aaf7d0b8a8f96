// Checkpoints and attempts end to end with `drover up` (one simulated node
// with one GPU, so a preempted job can only come back to the same node):
// the job is asked to checkpoint (SIGUSR1) before it is stopped, runs again
// as a new attempt on the node that ran it, and resumes from what it saved
// in DROVER_CHECKPOINT_DIR. `drover drain --requeue` moves a job the same way.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

// Counts to 30 steps of 0.1 s from where its checkpoint says; saves on
// SIGUSR1 and keeps going; SIGTERM ends it.
constexpr const char* kCounter =
    "d=$DROVER_CHECKPOINT_DIR; n=$(cat $d/step 2>/dev/null || echo 0); echo \"resumes at $n\"; "
    "trap 'echo $n > $d/step; echo \"saved $n\"' USR1; trap 'exit 143' TERM; "
    "while [ $n -lt 30 ]; do n=$((n+1)); echo \"step $n\"; sleep 0.1; done; echo \"done at $n\"";

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string config = dir_.path() + "/drover.yaml";
    std::ofstream(config) << "scheduler:\n"
                             "  queue: priority\n"
                             "  preemption: true\n"
                             "  preemption-grace: 5s\n";
    up_ = std::make_unique<DroverUp>(
        dir_.path() + "/data",
        std::vector<std::string>{"--config", config, "--devices", "none", "--simulate", "1", "--simulate-gpus", "1"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));
  }
  void TearDown() override {
    if (up_ && !up_->grpc_address().empty()) CancelAllJobs(up_->jobs());
  }
  std::string Submit(std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    CommandResult r = RunCli(up_->grpc_address(), args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  v1::Job Get(const std::string& id) { return GetJob(up_->jobs(), id); }
  std::string Logs(const std::string& id) { return RunCli(up_->grpc_address(), {"logs", id}).out; }
  // Waits until `id` runs and has said it started counting.
  void WaitCounting(const std::string& id) {
    ASSERT_TRUE(WaitUntil([&] { return Get(id).status().state() == v1::JOB_STATE_RUNNING; }));
    ASSERT_TRUE(WaitUntil([&] { return Logs(id).find("resumes at") != std::string::npos; }));
  }
  int ResumedAt(const std::string& log) {
    size_t at = log.find("resumes at ");
    return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + 11);
  }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(CheckpointTest, PreemptedJobCheckpointsRunsAgainOnTheSameNodeAndResumes) {
  std::string low = Submit({"--priority", "10", "--preemptible", "--gpu-model", "H100 80GB", "--checkpoint-grace", "1",
                            "--", "sh", "-c", kCounter});
  ASSERT_NO_FATAL_FAILURE(WaitCounting(low));
  std::string node = Get(low).status().allocation().node();
  ASSERT_TRUE(WaitUntil([&] { return Logs(low).find("resumes at 0") != std::string::npos; }));
  // Once it is some way in, take its GPU.
  ASSERT_TRUE(WaitUntil([&] { return Logs(low).find("step 8\n") != std::string::npos; }));
  std::string high = Submit({"--priority", "900", "--gpu-model", "H100 80GB", "--", "sleep", "1"});
  ASSERT_TRUE(WaitUntil([&] { return Get(high).status().state() == v1::JOB_STATE_SUCCEEDED; }));

  // The same node runs it again, as attempt 2, from its checkpoint.
  ASSERT_TRUE(WaitUntil([&] { return Get(low).status().state() == v1::JOB_STATE_SUCCEEDED; }));
  v1::Job done = Get(low);
  ASSERT_EQ(done.status().attempt(), 2);
  ASSERT_EQ(done.status().attempts_size(), 2);
  EXPECT_EQ(done.status().attempts(0).nodes(0), node);
  EXPECT_EQ(done.status().attempts(1).nodes(0), node);
  EXPECT_NE(done.status().attempts(0).outcome().find("preempted"), std::string::npos)
      << done.status().attempts(0).outcome();
  EXPECT_EQ(done.status().attempts(1).outcome(), "succeeded");
  EXPECT_EQ(done.status().preemptions(), 1);
  // The log is the last attempt's: it started from the saved step and ran on.
  std::string log = Logs(low);
  EXPECT_GT(ResumedAt(log), 0) << log;
  EXPECT_NE(log.find("done at 30"), std::string::npos) << log;
  CommandResult shown = RunCli(up_->grpc_address(), {"job", low});
  EXPECT_NE(shown.out.find("Attempt 1:"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Attempt 2:"), std::string::npos) << shown.out;

  // Ended for good: its checkpoint directory is marked for removal.
  std::string marker = up_->data_dir() + "/agents/" + node + "/checkpoints/" + low + "/.drover-ended";
  EXPECT_TRUE(WaitUntil([&] { return std::filesystem::exists(marker); })) << marker;
}

// A job that saves into its checkpoint directory while it runs: its node
// tells the server (the directory's modification time, with the GPU
// readings), which stores it as the job's last checkpoint, after the job
// started; a preemption then counts the work lost from there.
TEST_F(CheckpointTest, ACheckpointSavedWhileRunningReachesTheServer) {
  std::string job = Submit({"--gpu-model", "H100 80GB", "--", "sh", "-c",
                            "sleep 1; echo 7 > $DROVER_CHECKPOINT_DIR/step; echo saved; sleep 600"});
  ASSERT_TRUE(WaitUntil([&] { return Logs(job).find("saved") != std::string::npos; }));
  ASSERT_TRUE(WaitUntil([&] {
    v1::Job j = Get(job);
    return j.status().start_time_unix_nanos() > 0 &&
           j.status().checkpoint_time_unix_nanos() > j.status().start_time_unix_nanos();
  })) << Get(job).DebugString();
  EXPECT_LE(Get(job).status().checkpoint_time_unix_nanos(),
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count());
}

TEST_F(CheckpointTest, DrainWithRequeueCheckpointsAndMovesTheJob) {
  std::string job = Submit({"--gpu-model", "H100 80GB", "--checkpoint-grace", "1", "--", "sh", "-c", kCounter});
  ASSERT_NO_FATAL_FAILURE(WaitCounting(job));
  std::string node = Get(job).status().allocation().node();
  ASSERT_TRUE(WaitUntil([&] { return Logs(job).find("step 8\n") != std::string::npos; }));
  CommandResult drained = RunCli(up_->grpc_address(), {"drain", node, "--requeue"});
  ASSERT_EQ(drained.exit_code, 0) << drained.err;
  // Stopped after its checkpoint and waiting: its only node is drained.
  ASSERT_TRUE(WaitUntil([&] { return Get(job).status().state() == v1::JOB_STATE_PENDING; }));
  v1::Job waiting = Get(job);
  EXPECT_EQ(waiting.status().restarts(), 0);
  EXPECT_NE(waiting.status().attempts(0).outcome().find("drained"), std::string::npos)
      << waiting.status().attempts(0).outcome();
  ASSERT_EQ(RunCli(up_->grpc_address(), {"undrain", node}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return Get(job).status().state() == v1::JOB_STATE_SUCCEEDED; }));
  EXPECT_GT(ResumedAt(Logs(job)), 0) << Logs(job);
}

}  // namespace
}  // namespace drover::testing
