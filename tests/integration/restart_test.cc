// Crash safety of `drover up`: SIGKILL the whole process (server and agents)
// and start it again on the same data directory.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Submit(v1::JobService::Stub* stub, std::vector<std::string> command, int gpus = 1) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_gpus(gpus);
  for (auto& c : command) req.mutable_spec()->add_command(c);
  v1::SubmitJobResponse resp;
  auto ctx = Ctx();
  grpc::Status s = stub->Submit(ctx.get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.job().id();
}

void RunningJobSurvivesSigkillAndCompletesOnce(const std::vector<std::string>& flags, int nodes) {
  TempDir dir;
  std::string data = dir.path() + "/data";
  std::string marker = dir.path() + "/starts";
  auto up = std::make_unique<DroverUp>(data, flags);
  ASSERT_TRUE(up->Start());
  ASSERT_TRUE(up->WaitForReadyNodes(nodes));

  std::string quick = Submit(up->jobs(), {"true"});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up->jobs(), quick).status().state() == v1::JOB_STATE_SUCCEEDED; }));
  // Sleeps long enough to span the kill and the restart.
  std::string sleeper = Submit(up->jobs(), {"sh", "-c", "echo started >> " + marker + "; sleep 5; echo finished"});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up->jobs(), sleeper).status().state() == v1::JOB_STATE_RUNNING; }));
  std::string queued = Submit(up->jobs(), {"sh", "-c", "echo second"}, 2);  // waits for the sleeper's GPU

  up->Kill(SIGKILL);
  up = std::make_unique<DroverUp>(data, flags);
  ASSERT_TRUE(up->Start());

  // Everything acknowledged before the kill is still there.
  std::set<std::string> ids;
  for (const auto& j : ListJobs(up->jobs())) ids.insert(j.id());
  EXPECT_EQ(ids, (std::set<std::string>{quick, sleeper, queued}));

  ASSERT_TRUE(WaitUntil([&] { return GetJob(up->jobs(), sleeper).status().state() == v1::JOB_STATE_SUCCEEDED; },
                        std::chrono::seconds(60)));
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up->jobs(), queued).status().state() == v1::JOB_STATE_SUCCEEDED; },
                        std::chrono::seconds(60)));
  EXPECT_EQ(ReadFile(marker), "started\n");  // started exactly once
  CommandResult logs = RunCli(up->grpc_address(), {"logs", sleeper});
  EXPECT_EQ(logs.out, "finished\n");
  EXPECT_EQ(GetJob(up->jobs(), quick).status().state(), v1::JOB_STATE_SUCCEEDED);
}

// On a simulated node: every job has a supervisor of its own.
TEST(RestartTest, RunningJobSurvivesSigkillAndCompletesOnce) {
  RunningJobSurvivesSigkillAndCompletesOnce({"--devices", "none", "--simulate", "1", "--simulate-gpus", "2"}, 2);
}

// On this machine's own node, whose agent keeps its supervisors between
// jobs (supervisor.h, SupervisorPool): the sleeper's supervisor already ran
// the quick job; it outlives the agent, finishes the job, cannot tell the
// dead agent and exits, which the next agent sees.
TEST(RestartTest, PooledSupervisorFinishesItsJobAcrossAnAgentKill) {
  RunningJobSurvivesSigkillAndCompletesOnce({"--devices", "simulated", "--simulate-gpus", "2", "--workload", "none"},
                                            1);
}

TEST(RestartTest, ThousandAcknowledgedSubmitsSurviveSigkill) {
  TempDir dir;
  std::string data = dir.path() + "/data";
  std::vector<std::string> flags = {"--devices", "none", "--simulate", "1", "--simulate-gpus", "8"};
  auto up = std::make_unique<DroverUp>(data, flags);
  ASSERT_TRUE(up->Start());
  ASSERT_TRUE(up->WaitForReadyNodes(2));  // this machine (no GPUs) and sim-1, which is drained next
  // Keep the jobs pending so that 1,000 processes are not started.
  ASSERT_EQ(RunCli(up->grpc_address(), {"drain", "sim-1"}).exit_code, 0);

  constexpr int kThreads = 8;
  constexpr int kPerThread = 125;
  std::mutex mu;
  std::set<std::string> acked;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string id = Submit(up->jobs(), {"true"});
        std::lock_guard lock(mu);
        acked.insert(id);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(acked.size(), 1000u);

  up->Kill(SIGKILL);
  up = std::make_unique<DroverUp>(data, flags);
  ASSERT_TRUE(up->Start());
  std::set<std::string> listed;
  for (const auto& j : ListJobs(up->jobs())) {
    listed.insert(j.id());
    EXPECT_EQ(j.status().state(), v1::JOB_STATE_PENDING) << j.id();
  }
  EXPECT_EQ(listed, acked);
  // Ids are not reused after the restart.
  std::string next = Submit(up->jobs(), {"true"});
  EXPECT_FALSE(acked.contains(next));
  EXPECT_EQ(next, "j-001001");
}

// Separate processes, as on a real cluster: the server restarts under a
// running job, then the agent does; the job finishes exactly once.
TEST(RestartTest, SeparateServerAndAgentSurviveEachOthersCrash) {
  TempDir dir;
  std::string data = dir.path() + "/server";
  std::string marker = dir.path() + "/starts";
  std::string grpc = "127.0.0.1:" + std::to_string(FreePort());
  // A lease long enough to ride out the server's restart: with the default
  // (1.5 s) the agent would fence its job while the server is down, which is
  // right for a partition but not what this test is about (docs/failures.md).
  const std::vector<std::string> lease = {"--lease-ttl", "30s"};
  auto server = std::make_unique<DroverUp>(data, lease, "server", grpc);
  ASSERT_TRUE(server->Start());
  // The agent joins once with a one-time join token; its restarts use the
  // node credential it keeps in its data directory.
  CommandResult join = RunCli(grpc, {"join-token", "--node", "gpu-01"});
  ASSERT_EQ(join.exit_code, 0) << join.err;
  std::string join_token = join.out.substr(0, join.out.find('\n'));
  std::vector<std::string> agent_args = {"agent",
                                         "--server",
                                         grpc,
                                         "--data-dir",
                                         dir.path() + "/agent",
                                         "--node-name",
                                         "gpu-01",
                                         "--devices",
                                         "simulated",
                                         "--simulate-gpus",
                                         "2",
                                         "--log-level",
                                         "warn",
                                         "--metrics-listen",
                                         "127.0.0.1:0",
                                         "--join-token",
                                         join_token};
  auto start_agent = [&] { return SpawnDrover(agent_args, dir.path() + "/agent.out", dir.path() + "/agent.err"); };
  pid_t agent = start_agent();
  ASSERT_GT(agent, 0);
  ASSERT_TRUE(server->WaitForReadyNodes(1));

  std::string cmd = "echo started >> " + marker + "; sleep 3; echo finished";
  std::string first = Submit(server->jobs(), {"sh", "-c", cmd});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server->jobs(), first).status().state() == v1::JOB_STATE_RUNNING; }));

  server->Kill(SIGKILL);
  server = std::make_unique<DroverUp>(data, lease, "server", grpc);
  ASSERT_TRUE(server->Start());
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server->jobs(), first).status().state() == v1::JOB_STATE_SUCCEEDED; },
                        std::chrono::seconds(60)));
  EXPECT_EQ(RunCli(server->grpc_address(), {"logs", first}).out, "finished\n");

  std::string second = Submit(server->jobs(), {"sh", "-c", cmd});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server->jobs(), second).status().state() == v1::JOB_STATE_RUNNING; }));
  ::kill(agent, SIGKILL);
  ::waitpid(agent, nullptr, 0);
  agent = start_agent();
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server->jobs(), second).status().state() == v1::JOB_STATE_SUCCEEDED; },
                        std::chrono::seconds(60)));
  EXPECT_EQ(RunCli(server->grpc_address(), {"logs", second}).out, "finished\n");
  EXPECT_EQ(ReadFile(marker), "started\nstarted\n");  // each job started once
  ::kill(agent, SIGTERM);
  ::waitpid(agent, nullptr, 0);
}

// A reboot takes the jobs' processes and their state (in memory, job_dir.h)
// but leaves their output on disk: the agent that comes back reports those
// jobs as ended by the restart instead of running them again or forgetting
// them. Simulated here: the agent killed, the job and its supervisor killed,
// the state directory removed.
TEST(RestartTest, JobWhoseStateARebootTookIsReportedEndedNotRunAgain) {
  TempDir dir;
  std::string grpc = "127.0.0.1:" + std::to_string(FreePort());
  std::string marker = dir.path() + "/starts";
  std::string state = dir.path() + "/state";
  auto server = std::make_unique<DroverUp>(dir.path() + "/server", std::vector<std::string>{"--lease-ttl", "30s"},
                                           "server", grpc);
  ASSERT_TRUE(server->Start());
  CommandResult join = RunCli(grpc, {"join-token", "--node", "gpu-01"});
  ASSERT_EQ(join.exit_code, 0) << join.err;
  std::vector<std::string> agent_args = {"agent",
                                         "--server",
                                         grpc,
                                         "--data-dir",
                                         dir.path() + "/agent",
                                         "--state-dir",
                                         state,
                                         "--node-name",
                                         "gpu-01",
                                         "--devices",
                                         "simulated",
                                         "--simulate-gpus",
                                         "1",
                                         "--log-level",
                                         "warn",
                                         "--metrics-listen",
                                         "127.0.0.1:0",
                                         "--join-token",
                                         join.out.substr(0, join.out.find('\n'))};
  auto start_agent = [&] { return SpawnDrover(agent_args, dir.path() + "/agent.out", dir.path() + "/agent.err"); };
  pid_t agent = start_agent();
  ASSERT_GT(agent, 0);
  ASSERT_TRUE(server->WaitForReadyNodes(1));
  std::string job = Submit(server->jobs(), {"sh", "-c", "echo started >> " + marker + "; echo before; sleep 60"});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server->jobs(), job).status().state() == v1::JOB_STATE_RUNNING; }));
  ASSERT_TRUE(WaitUntil([&] { return RunCli(grpc, {"logs", job}).out == "before\n"; }));

  ::kill(agent, SIGKILL);
  ::waitpid(agent, nullptr, 0);
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(state + "/jobs")) dirs.push_back(e.path());
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/agent/jobs/" + dirs[0].filename().string() + "/output.log"));
  int job_pid = nlohmann::json::parse(ReadFile(dirs[0] / "started.json"), nullptr, false).value("pid", 0);
  int supervisor = std::stoi(ReadFile(dirs[0] / "supervisor.pid"));
  ASSERT_GT(job_pid, 1);
  ASSERT_GT(supervisor, 1);
  ::kill(-job_pid, SIGKILL);
  ::kill(supervisor, SIGKILL);
  std::filesystem::remove_all(state);

  agent = start_agent();
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server->jobs(), job).status().state() == v1::JOB_STATE_FAILED; },
                        std::chrono::seconds(60)));
  v1::Job ended = GetJob(server->jobs(), job);
  EXPECT_NE(ended.status().message().find("the machine restarted"), std::string::npos) << ended.status().message();
  EXPECT_EQ(ReadFile(marker), "started\n");  // not run again
  // Once reported, the job's output directory goes as its state did.
  const std::string output = dir.path() + "/agent/jobs/" + dirs[0].filename().string();
  EXPECT_TRUE(WaitUntil([&] { return !std::filesystem::exists(output); }));
  ::kill(agent, SIGTERM);
  ::waitpid(agent, nullptr, 0);
}

}  // namespace
}  // namespace drover::testing
