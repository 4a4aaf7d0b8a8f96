// Servers sharing a real etcd (the store of docs/ha.md): one leads, the
// others stand by; a killed leader is replaced with nothing acknowledged
// lost, and a leader paused past its lease is fenced out and starts over as
// a standby.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/drover_process.h"
#include "support/etcd_cluster.h"

namespace drover::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Submit(v1::JobService::Stub* stub, const std::string& name, std::vector<std::string> command = {"true"}) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_name(name);
  req.mutable_spec()->set_gpus(1);
  for (std::string& c : command) req.mutable_spec()->add_command(std::move(c));
  v1::SubmitJobResponse resp;
  auto ctx = Ctx();
  grpc::Status s = stub->Submit(ctx.get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.job().id();
}

std::set<std::string> JobIds(v1::JobService::Stub* stub) {
  std::set<std::string> ids;
  for (const v1::Job& job : ListJobs(stub)) ids.insert(job.id());
  return ids;
}

// A server of an HA group: fixed ports (clients find the leader by them),
// the shared etcd store, a one-second leader lease. Nodes get a 10 s lease:
// longer than a failover (etcd's minimum lease, 2 s, and the takeover), so
// that agents never fence their jobs during one (docs/ha.md).
std::unique_ptr<DroverUp> HaServer(const std::string& data_dir, const std::string& store_url) {
  auto server = std::make_unique<DroverUp>(
      data_dir, std::vector<std::string>{"--store", store_url, "--leader-ttl", "1s", "--lease-ttl", "10s"}, "server",
      "127.0.0.1:" + std::to_string(FreePort()));
  server->SetHttpListen("127.0.0.1:" + std::to_string(FreePort()));
  server->SetLogLevel("info");  // "standing by" is news, not a warning
  return server;
}

class HaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    etcd_ = EtcdCluster::Start(1);
    ASSERT_TRUE(etcd_);
  }
  void TearDown() override {
    if (agent_ > 0) {
      ::kill(agent_, SIGKILL);
      ::waitpid(agent_, nullptr, 0);
    }
  }
  std::string Url() const { return etcd_->Url("ha/"); }

  // An agent with two simulated GPUs that knows every server, joined
  // through `leader`.
  void StartAgent(DroverUp* leader, const std::string& servers) {
    CommandResult join = RunCli(leader->grpc_address(), {"join-token", "--node", "gpu-01"});
    ASSERT_EQ(join.exit_code, 0) << join.err;
    agent_ = SpawnDrover({"agent", "--server", servers, "--data-dir", dir_.path() + "/agent", "--node-name", "gpu-01",
                          "--devices", "simulated", "--simulate-gpus", "2", "--log-level", "info", "--metrics-listen",
                          "127.0.0.1:0", "--join-token", join.out.substr(0, join.out.find('\n'))},
                         dir_.path() + "/agent.out", dir_.path() + "/agent.err");
    ASSERT_GT(agent_, 0);
    ASSERT_TRUE(leader->WaitForReadyNodes(1));
  }

  TempDir dir_;
  std::unique_ptr<EtcdCluster> etcd_;
  pid_t agent_ = -1;
};

bool Succeeded(v1::JobService::Stub* stub, const std::string& id) {
  return GetJob(stub, id).status().state() == v1::JOB_STATE_SUCCEEDED;
}

TEST_F(HaTest, AStandbyTakesOverAKilledLeaderWithEveryAcknowledgedJob) {
  auto a = HaServer(dir_.path() + "/a", Url());
  ASSERT_TRUE(a->Start());
  auto b = HaServer(dir_.path() + "/b", Url());
  ASSERT_TRUE(b->Spawn());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir_.path() + "/b/up.err").find("standing by") != std::string::npos; }))
      << ReadFile(dir_.path() + "/b/up.err");

  ASSERT_NO_FATAL_FAILURE(StartAgent(a.get(), a->grpc_listen() + "," + b->grpc_listen()));

  // A job that runs across the failover, and more that wait behind it.
  const std::string marker = dir_.path() + "/starts";
  std::string spanning = Submit(a->jobs(), "spanning", {"sh", "-c", "echo started >> " + marker + "; sleep 4"});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(a->jobs(), spanning).status().state() == v1::JOB_STATE_RUNNING; }));
  std::set<std::string> acknowledged{spanning};
  for (int i = 0; i < 10; ++i) acknowledged.insert(Submit(a->jobs(), "before-" + std::to_string(i)));
  ASSERT_EQ(acknowledged.size(), 11u);

  a->Kill(SIGKILL);
  ASSERT_TRUE(b->WaitServing(std::chrono::seconds(15))) << ReadFile(dir_.path() + "/b/up.err");
  std::set<std::string> after = JobIds(b->jobs());
  for (const std::string& id : acknowledged) EXPECT_TRUE(after.count(id)) << id << " was acknowledged and is lost";
  // The agent follows the new leader; the job that ran across the failover
  // was not disturbed (it started once and ends once), and the rest run.
  for (const std::string& id : acknowledged) {
    EXPECT_TRUE(WaitUntil([&] { return Succeeded(b->jobs(), id); }, std::chrono::seconds(60)))
        << id << ": " << GetJob(b->jobs(), id).DebugString() << ReadFile(dir_.path() + "/agent.err");
  }
  EXPECT_EQ(ReadFile(marker), "started\n");
  EXPECT_EQ(GetJob(b->jobs(), spanning).status().attempt(), 1);
  // The new leader goes on numbering after the old one's jobs.
  std::string next = Submit(b->jobs(), "after");
  EXPECT_FALSE(acknowledged.count(next));
  EXPECT_TRUE(WaitUntil([&] { return Succeeded(b->jobs(), next); }));
}

// The classic fencing case: the leader is paused (SIGSTOP) longer than its
// lease; a standby takes over; the old leader resumes believing it leads.
// Its writes must be refused, and it must stop serving and start over.
TEST_F(HaTest, ALeaderPausedPastItsLeaseIsFencedOutAndStartsOverAsAStandby) {
  auto a = HaServer(dir_.path() + "/a", Url());
  ASSERT_TRUE(a->Start());
  auto b = HaServer(dir_.path() + "/b", Url());
  ASSERT_TRUE(b->Spawn());
  ASSERT_NO_FATAL_FAILURE(StartAgent(a.get(), a->grpc_listen() + "," + b->grpc_listen()));
  std::string first = Submit(a->jobs(), "by-a");

  ::kill(a->pid(), SIGSTOP);
  ASSERT_TRUE(b->WaitServing(std::chrono::seconds(15))) << ReadFile(dir_.path() + "/b/up.err");
  std::string second = Submit(b->jobs(), "by-b");
  ::kill(a->pid(), SIGCONT);

  // A learns it was deposed (its keep-alive finds the lease gone, or a
  // write is refused) and replaces itself with a standby of the same pid.
  ASSERT_TRUE(WaitUntil([&] {
    return ReadFile(dir_.path() + "/a/up.err").find("starting over as a standby") != std::string::npos;
  })) << ReadFile(dir_.path() + "/a/up.err");
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(dir_.path() + "/a/up.err").find("standing by") != std::string::npos; }))
      << ReadFile(dir_.path() + "/a/up.err");
  EXPECT_EQ(::kill(a->pid(), 0), 0) << "the deposed leader should stand by, not exit";

  // A's old address no longer answers as a leader: submits there fail.
  v1::SubmitJobRequest req;
  req.mutable_spec()->add_command("true");
  v1::SubmitJobResponse resp;
  auto ctx = Ctx(std::chrono::seconds(2));
  EXPECT_FALSE(a->jobs()->Submit(ctx.get(), req, &resp).ok());

  // B still leads, with every job, and its agent runs them.
  std::string third = Submit(b->jobs(), "by-b-after");
  for (const std::string& id : {first, second, third}) {
    EXPECT_TRUE(WaitUntil([&] { return Succeeded(b->jobs(), id); }, std::chrono::seconds(60)))
        << id << ": " << GetJob(b->jobs(), id).DebugString() << ReadFile(dir_.path() + "/agent.err");
  }
}

}  // namespace
}  // namespace drover::testing
