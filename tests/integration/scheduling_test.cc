// Scheduling end to end: `drover up --simulate 4` (32 simulated H100s) with
// a config file written here: preemption by priority, quota reclaim between
// tenants, and the reason a waiting job gives.

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

constexpr int kNodes = 4;
constexpr int kGpus = kNodes * 8;

class SchedulingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string config = dir_.path() + "/drover.yaml";
    // Fair share: tenants below their guarantee are served first (and
    // priority orders the jobs within a tenant). Short grace periods keep
    // the test fast: a preempted `sleep` dies on SIGTERM at once anyway.
    std::ofstream(config) << "scheduler:\n"
                             "  queue: fair-share\n"
                             "  placement: binpack\n"
                             "  backfill: true\n"
                             "  preemption: true\n"
                             "  preemption-grace: 1s\n"
                             "tenants:\n"
                             "  - name: a\n"
                             "    guaranteed: {\"H100 80GB\": 16}\n"
                             "  - name: b\n"
                             "    weight: 1\n"
                             "    guaranteed: {\"H100 80GB\": 16}\n"
                             "    borrow-limit: 0\n";
    up_ = std::make_unique<DroverUp>(dir_.path() + "/data",
                                     std::vector<std::string>{"--config", config, "--devices", "none", "--simulate",
                                                              std::to_string(kNodes), "--simulate-gpus", "8"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(kNodes + 1));  // this machine (no GPUs) + the simulated ones
  }
  void TearDown() override {
    if (up_ && !up_->grpc_address().empty()) CancelAllJobs(up_->jobs());
  }

  std::string Submit(const std::string& tenant, int priority, int gpus, bool preemptible) {
    v1::SubmitJobRequest req;
    v1::JobSpec* s = req.mutable_spec();
    s->set_tenant(tenant);
    s->set_priority(priority);
    s->set_gpus(gpus);
    s->set_preemptible(preemptible);
    s->set_termination_grace_seconds(1);
    s->add_command("sleep");
    s->add_command("1000");
    v1::SubmitJobResponse resp;
    auto ctx = Ctx();
    grpc::Status st = up_->jobs()->Submit(ctx.get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.job().id();
  }
  v1::Job Get(const std::string& id) { return GetJob(up_->jobs(), id); }
  bool AllIn(const std::vector<std::string>& ids, v1::JobState state) {
    return std::all_of(ids.begin(), ids.end(),
                       [&](const std::string& id) { return Get(id).status().state() == state; });
  }
  CommandResult Cli(std::vector<std::string> args) { return RunCli(up_->grpc_address(), std::move(args)); }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(SchedulingTest, HighPriorityJobPreemptsLowOnesWhichRunAgainAfterIt) {
  std::vector<std::string> low;
  for (int i = 0; i < kGpus; ++i) low.push_back(Submit("default", 10, 1, true));
  // 32 processes to start: generous on a loaded 2-core machine (reached only when broken).
  ASSERT_TRUE(WaitUntil([&] { return AllIn(low, v1::JOB_STATE_RUNNING); }, std::chrono::seconds(90)))
      << "the low jobs did not all start";

  CommandResult r = Cli({"submit", "--priority", "900", "--gpus", "8", "--grace", "1", "--", "sleep", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string high = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return Get(high).status().state() == v1::JOB_STATE_RUNNING; }))
      << Get(high).status().message();

  // Eight low jobs made room: they were preempted and wait in the queue again.
  std::vector<std::string> preempted;
  ASSERT_TRUE(WaitUntil([&] {
    preempted.clear();
    for (const std::string& id : low) {
      v1::Job j = Get(id);
      if (j.status().preemptions() > 0 && j.status().state() == v1::JOB_STATE_PENDING) preempted.push_back(id);
    }
    return preempted.size() == 8;
  })) << preempted.size()
      << " preempted";
  for (const std::string& id : preempted) {
    v1::Job j = Get(id);
    EXPECT_NE(j.status().message().find("waiting"), std::string::npos) << j.status().message();
    EXPECT_NE(j.status().message().find("preempted for " + high), std::string::npos) << j.status().message();
  }
  CommandResult shown = Cli({"job", preempted.front()});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("Preemptions:  1"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Preemptible:  yes"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Message:      waiting"), std::string::npos) << shown.out;
  // The others kept running.
  int running = 0;
  for (const std::string& id : low) running += Get(id).status().state() == v1::JOB_STATE_RUNNING ? 1 : 0;
  EXPECT_EQ(running, kGpus - 8);

  // The high job ends: the preempted jobs run again.
  ASSERT_EQ(Cli({"cancel", high}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return AllIn(preempted, v1::JOB_STATE_RUNNING); }));
  for (const std::string& id : preempted) EXPECT_EQ(Get(id).status().preemptions(), 1) << id;
}

TEST_F(SchedulingTest, TenantReclaimsItsGuaranteeFromABorrower) {
  // Tenant a fills the cluster: its guaranteed half, then b's half, borrowed.
  std::vector<std::string> a;
  for (int i = 0; i < kGpus; ++i) a.push_back(Submit("a", 0, 1, true));
  ASSERT_TRUE(WaitUntil([&] { return AllIn(a, v1::JOB_STATE_RUNNING); }));
  auto running_of_a = [&] {
    int n = 0;
    for (const std::string& id : a) n += Get(id).status().state() == v1::JOB_STATE_RUNNING ? 1 : 0;
    return n;
  };

  // b asks for 8 GPUs, within its guarantee of 16: 8 of a's borrowed GPUs
  // come back; a keeps the rest.
  std::string b = Submit("b", 0, 8, false);
  ASSERT_TRUE(WaitUntil([&] { return Get(b).status().state() == v1::JOB_STATE_RUNNING; })) << Get(b).status().message();
  int preempted = 0;
  for (const std::string& id : a) {
    v1::Job j = Get(id);
    if (j.status().preemptions() == 0) continue;
    ++preempted;
    EXPECT_EQ(j.status().state(), v1::JOB_STATE_PENDING) << id;
    EXPECT_NE(j.status().message().find("tenant 'b' reclaims"), std::string::npos) << j.status().message();
  }
  EXPECT_EQ(preempted, 8);
  EXPECT_EQ(running_of_a(), kGpus - 8);

  // A second 8 GPUs is still within b's guarantee; a third would be 24 of 16
  // (and b may not borrow), so it waits, and a keeps its guaranteed 16.
  CommandResult r = Cli({"submit", "--tenant", "b", "--gpus", "8", "--", "sleep", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string second = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return Get(second).status().state() == v1::JOB_STATE_RUNNING; }))
      << Get(second).status().message();
  EXPECT_EQ(running_of_a(), kGpus / 2);
  r = Cli({"submit", "--tenant", "b", "--gpus", "8", "--", "sleep", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string third = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return !Get(third).status().message().empty(); }));
  EXPECT_EQ(Get(third).status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(running_of_a(), kGpus / 2) << "a never drops below its guarantee";
  for (const std::string& id : a) EXPECT_NE(Get(id).status().state(), v1::JOB_STATE_PREEMPTING) << id;
}

TEST_F(SchedulingTest, JobThatCannotStartNowSaysWhy) {
  // Seven GPUs busy on every node: no node has 8 free.
  std::vector<std::string> fillers;
  for (int i = 0; i < kNodes; ++i) fillers.push_back(Submit("default", 0, 7, false));
  ASSERT_TRUE(WaitUntil([&] { return AllIn(fillers, v1::JOB_STATE_RUNNING); }));

  CommandResult r;
  r = Cli({"submit", "--gpus", "8", "--topology", "island", "--estimate", "2h", "--", "sleep", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string waiting = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return !Get(waiting).status().message().empty(); }));
  CommandResult shown = Cli({"job", waiting});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("State:        Pending"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Topology:     island"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Estimate:     2h"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Message:      waiting: needs 8 GPUs"), std::string::npos) << shown.out;
  CommandResult wide = Cli({"jobs", "--state", "pending", "-o", "wide"});
  EXPECT_NE(wide.out.find("waiting: needs 8 GPUs"), std::string::npos) << wide.out;
}

TEST_F(SchedulingTest, GangWithSwitchTopologyStaysUnderOneSwitch) {
  // Simulated nodes come two to a leaf switch: sim-1 and sim-2 on switch-1.
  // Take one GPU of sim-1 so that the only switch with two free nodes is switch-2.
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_gpus(1);
  (*req.mutable_spec()->mutable_node_selector())["switch"] = "switch-1";
  req.mutable_spec()->add_command("sleep");
  req.mutable_spec()->add_command("1000");
  v1::SubmitJobResponse resp;
  auto ctx = Ctx();
  ASSERT_TRUE(up_->jobs()->Submit(ctx.get(), req, &resp).ok());
  ASSERT_TRUE(WaitUntil([&] { return Get(resp.job().id()).status().state() == v1::JOB_STATE_RUNNING; }));

  CommandResult r = Cli({"submit", "--replicas", "2", "--gpus", "8", "--topology", "switch", "--", "sleep", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string gang = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return Get(gang).status().state() == v1::JOB_STATE_RUNNING; }))
      << Get(gang).status().message();
  v1::Job job = Get(gang);
  ASSERT_EQ(job.status().replicas_size(), 2);
  std::set<std::string> nodes = {job.status().replicas(0).node(), job.status().replicas(1).node()};
  EXPECT_EQ(nodes, (std::set<std::string>{"sim-3", "sim-4"}));
  CommandResult shown = Cli({"job", gang});
  EXPECT_NE(shown.out.find("Replica 1:"), std::string::npos) << shown.out;
}

}  // namespace
}  // namespace drover::testing
