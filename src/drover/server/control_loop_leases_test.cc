// Node leases in the control loop: Suspect and Lost on the lease clock, a
// node kept alive by its peers, the work of a lost node queued again (gangs
// whole), a node back from Lost kept out of service until it runs nothing
// it should not, attempts as workloads of their own, and a restart that
// gives every node a fresh lease.

#include <gmock/gmock.h>

#include "drover/server/control_loop_test_fixture.h"

namespace drover::server::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

class ControlLoopLeasesTest : public ControlLoopTest {
 protected:
  // Heartbeat of `node` on its current session, vouching for `peers`.
  v1::HeartbeatAck Beat(const std::string& node, std::shared_ptr<FakeSink> sink,
                        std::map<std::string, int64_t> peers = {}) {
    v1::Heartbeat hb;
    hb.set_seq(++seq_);
    for (const auto& [name, beat] : peers) {
      v1::PeerBeat* p = hb.add_peers();
      p->set_node_name(name);
      p->set_beat(beat);
    }
    loop_->Heartbeat(node, hb, sink);
    Must(loop_->Barrier());
    return sink->last_ack();
  }
  void Advance(milliseconds d) {
    lease_clock_.Advance(d);
    Must(loop_->CheckLeases());
  }
  v1::Job SubmitSpec(v1::JobSpec spec) {
    EXPECT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
    return Must(loop_->Submit(spec));
  }
  static v1::JobSpec Restartable(int gpus, int replicas = 1) {
    v1::JobSpec spec = Spec(gpus);
    spec.set_replicas(replicas);
    spec.set_restart_policy("on-failure");
    spec.set_max_restarts(3);
    return spec;
  }
  // Two nodes of one GPU, a restartable job running on one of them.
  struct OneOfTwo {
    v1::Job job;
    std::string node, other;
    std::shared_ptr<FakeSink> other_sink;
  };
  OneOfTwo RunOnOneOfTwo() {
    auto a = Connect("gpu-01", 1);
    auto b = Connect("gpu-02", 1);
    v1::Job job = SubmitSpec(Restartable(1));
    std::string node = Get(job.id()).status().allocation().node();
    Report(node, job.id(), v1::WORKLOAD_STATE_RUNNING);
    return {job, node, node == "gpu-01" ? "gpu-02" : "gpu-01", node == "gpu-01" ? b : a};
  }
  int64_t seq_ = 0;
};

TEST_F(ControlLoopLeasesTest, UnheardNodeTurnsSuspectThenLostAndItsJobRunsElsewhere) {
  auto [job, node, other, other_sink] = RunOnOneOfTwo();

  // 0.75 s: past suspect_after (0.6 s): no new work, its job stays. The
  // other node beats every 250 ms.
  for (int i = 0; i < 3; ++i) {
    Advance(milliseconds(250));
    Beat(other, other_sink);
  }
  EXPECT_EQ(Node(node).state(), v1::NODE_STATE_SUSPECT);
  EXPECT_EQ(Node(other).state(), v1::NODE_STATE_READY);
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_RUNNING);

  // 1.5 s unheard: lost. Its job is queued again and placed on the other node
  // as attempt 2, and the history says why attempt 1 ended.
  for (int i = 0; i < 3; ++i) {
    Advance(milliseconds(250));
    Beat(other, other_sink);
  }
  v1::Node lost = Node(node);
  EXPECT_EQ(lost.state(), v1::NODE_STATE_LOST);
  EXPECT_THAT(lost.state_reason(), HasSubstr("no heartbeat"));
  v1::Job moved = Get(job.id());
  EXPECT_EQ(moved.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(moved.status().allocation().node(), other);
  EXPECT_EQ(moved.status().attempt(), 2);
  EXPECT_EQ(moved.status().restarts(), 1);
  EXPECT_EQ(moved.status().node_losses(), 1);
  ASSERT_EQ(moved.status().attempts_size(), 2);
  EXPECT_EQ(moved.status().attempts(0).nodes(0), node);
  EXPECT_THAT(moved.status().attempts(0).outcome(), HasSubstr("node lost"));
  EXPECT_EQ(moved.status().attempts(1).nodes(0), other);
  EXPECT_EQ(moved.status().attempts(1).outcome(), "");
  auto sent = other_sink->WaitFor(0, [&](const v1::DesiredWorkloads& d) {
    return d.workloads_size() == 1 && d.workloads(0).workload_id() == job.id() + "@2";
  });
  EXPECT_TRUE(sent.has_value());

  // A late exit of attempt 1 changes nothing of attempt 2.
  v1::StatusReport late;
  v1::WorkloadStatus* ws = late.add_workloads();
  ws->set_job_id(job.id());
  ws->set_workload_id(job.id() + "@1");
  ws->set_state(v1::WORKLOAD_STATE_EXITED);
  ws->set_exit_code(3);
  loop_->HandleStatus(other, late);
  Must(loop_->Barrier());
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_BOUND);
}

TEST_F(ControlLoopLeasesTest, NeverRestartJobOnALostNodeFailsWithTheReason) {
  auto a = Connect("gpu-01", 1);
  v1::Job job = Submit(1);  // restart_policy: never (the default)
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  Advance(milliseconds(1600));
  v1::Job failed = Get(job.id());
  EXPECT_EQ(failed.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(failed.status().message(), HasSubstr("node lost"));
  EXPECT_GE(a->resets(), 1);  // its session is ended
}

TEST_F(ControlLoopLeasesTest, PeersKeepANodeWhoseOwnLinkIsDown) {
  auto [job, node, other, other_sink] = RunOnOneOfTwo();
  // The node's own heartbeats stop; its peer hears it, with a rising beat.
  // The renewal counts at once, but it is relayed to the node (a LeaseAck)
  // only once its own heartbeat is more than 1.5 intervals late: before,
  // its own acks keep it from fencing.
  for (int i = 1; i <= 20; ++i) {
    Advance(milliseconds(250));
    v1::HeartbeatAck ack = Beat(other, other_sink, {{node, 100 + i}});
    if (i == 1) {
      EXPECT_EQ(ack.renewed_size(), 0) << "relayed to a node whose own heartbeat is on time";
      continue;
    }
    ASSERT_EQ(ack.renewed_size(), 1);
    EXPECT_EQ(ack.renewed(0).node_name(), node);
    EXPECT_EQ(ack.renewed(0).beat(), 100 + i);
  }
  v1::Node kept = Node(node);
  EXPECT_EQ(kept.state(), v1::NODE_STATE_SUSPECT);
  EXPECT_TRUE(kept.lease_via_peers());
  EXPECT_THAT(kept.state_reason(), HasSubstr("peers hear it"));
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_RUNNING);
  // A replayed (older) beat renews nothing; once the peers stop too, it is lost.
  v1::HeartbeatAck stale = Beat(other, other_sink, {{node, 50}});
  EXPECT_EQ(stale.renewed_size(), 0);
  for (int i = 0; i < 7; ++i) {
    Advance(milliseconds(250));
    Beat(other, other_sink);
  }
  EXPECT_EQ(Node(node).state(), v1::NODE_STATE_LOST);
  EXPECT_EQ(Get(job.id()).status().allocation().node(), other);
  // What /metrics counts (drover_lease_renewals_total, drover_node_losses_total).
  LoopStats stats = Must(loop_->Stats());
  EXPECT_EQ(stats.renewals_via_peers, 20u);
  EXPECT_GT(stats.renewals_direct, 0u);
  EXPECT_EQ(stats.node_losses, 1u);
}

TEST_F(ControlLoopLeasesTest, SmallClusterHearsOfANewMemberAtItsNextHeartbeat) {
  // A node that just joined is protected by its peers only once they know
  // it: a second's wait for the list left it fencing with peers to spare.
  auto with_gossip = [&](const std::string& node) {
    v1::RegisterRequest req = Inventory(node, 1);
    req.set_gossip_address("10.0.0." + node.substr(node.size() - 1) + ":7946");
    Must(loop_->RegisterNode(req));
    auto sink = std::make_shared<FakeSink>();
    Open(node, sink);
    return sink;
  };
  auto a = with_gossip("gpu-1");
  auto b = with_gossip("gpu-2");
  auto names = [](const v1::HeartbeatAck& ack) {
    std::vector<std::string> out;
    for (const v1::Peer& p : ack.peers()) out.push_back(p.node_name());
    return out;
  };
  v1::HeartbeatAck first = Beat("gpu-1", a);
  ASSERT_TRUE(first.peers_changed());
  EXPECT_EQ(names(first), std::vector<std::string>{"gpu-2"});
  auto c = with_gossip("gpu-3");
  Advance(milliseconds(250));
  v1::Heartbeat hb;
  hb.set_seq(++seq_);
  hb.set_peers_version(first.peers_version());
  loop_->Heartbeat("gpu-1", hb, a);
  Must(loop_->Barrier());
  v1::HeartbeatAck next = a->last_ack();
  ASSERT_TRUE(next.peers_changed()) << "a three-node cluster waits one heartbeat, not a second";
  EXPECT_EQ(names(next), (std::vector<std::string>{"gpu-2", "gpu-3"}));
  // Unchanged since: no list.
  Advance(milliseconds(250));
  hb.set_seq(++seq_);
  hb.set_peers_version(next.peers_version());
  loop_->Heartbeat("gpu-1", hb, a);
  Must(loop_->Barrier());
  EXPECT_FALSE(a->last_ack().peers_changed());
}

TEST_F(ControlLoopLeasesTest, LostNodeThatComesBackRunningOldWorkTakesNoneUntilItStops) {
  auto a = Connect("gpu-01", 1);
  v1::Job job = SubmitSpec(Restartable(1));
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  Advance(milliseconds(1600));
  ASSERT_EQ(Node("gpu-01").state(), v1::NODE_STATE_LOST);
  // Still on the lost session: refused, and reset again.
  int resets = a->resets();
  loop_->Heartbeat("gpu-01", v1::Heartbeat(), a);
  Must(loop_->Barrier());
  EXPECT_GT(a->resets(), resets);
  EXPECT_EQ(Fails(loop_->SessionOpened("gpu-01", std::make_shared<FakeSink>())).code(), Code::kFailedPrecondition);

  // It registers again and reports attempt 1 still running (its fence did
  // not fire): no work for it, not even its own job's attempt 2, until the
  // old process is gone.
  Register("gpu-01", 1);
  auto back = std::make_shared<FakeSink>();
  v1::StatusReport full;
  v1::WorkloadStatus* ws = full.add_workloads();
  ws->set_job_id(job.id());
  ws->set_workload_id(job.id() + "@1");
  ws->set_state(v1::WORKLOAD_STATE_RUNNING);
  Open("gpu-01", back, full);
  EXPECT_EQ(Node("gpu-01").state(), v1::NODE_STATE_READY);
  EXPECT_THAT(Node("gpu-01").state_reason(), HasSubstr("should not run"));
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_PENDING);
  v1::StatusReport gone;
  ws = gone.add_workloads();
  ws->set_job_id(job.id());
  ws->set_workload_id(job.id() + "@1");
  ws->set_state(v1::WORKLOAD_STATE_EXITED);
  ws->set_signal(15);
  loop_->HandleStatus("gpu-01", gone);
  Must(loop_->Barrier());
  v1::Job again = Get(job.id());
  EXPECT_EQ(again.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(again.status().attempt(), 2);
}

TEST_F(ControlLoopLeasesTest, GangLosingOneNodeIsStoppedEverywhereAndQueuedWhole) {
  auto a = Connect("gpu-01", 1);
  auto b = Connect("gpu-02", 1);
  auto c = Connect("gpu-03", 1);
  v1::Job gang = SubmitSpec(Restartable(1, 2));
  v1::Job bound = Get(gang.id());
  ASSERT_EQ(bound.status().replicas_size(), 2);
  std::string n0 = bound.status().replicas(0).node(), n1 = bound.status().replicas(1).node();
  ReportReplica(n0, gang.id(), 0, v1::WORKLOAD_STATE_RUNNING);
  ReportReplica(n1, gang.id(), 1, v1::WORKLOAD_STATE_RUNNING);
  std::map<std::string, std::shared_ptr<FakeSink>> sinks = {{"gpu-01", a}, {"gpu-02", b}, {"gpu-03", c}};
  // n1 goes silent; the others keep beating.
  for (int i = 0; i < 7; ++i) {
    Advance(milliseconds(250));
    for (const auto& [name, sink] : sinks) {
      if (name != n1) Beat(name, sink);
    }
  }
  ASSERT_EQ(Node(n1).state(), v1::NODE_STATE_LOST);
  // Replica 0 is told to stop; the gang waits for it.
  v1::Job stopping = Get(gang.id());
  EXPECT_EQ(stopping.status().state(), v1::JOB_STATE_PREEMPTING);
  EXPECT_TRUE(stopping.status().replica_states(1).ended());
  ASSERT_TRUE(sinks[n0]->WaitFor(0, [](const v1::DesiredWorkloads& d) { return d.stops_size() == 1; }));
  ReportReplica(n0, gang.id(), 0, v1::WORKLOAD_STATE_EXITED, -1, 15);
  v1::Job again = Get(gang.id());
  EXPECT_EQ(again.status().attempt(), 2);
  EXPECT_EQ(again.status().state(), v1::JOB_STATE_BOUND);
  ASSERT_EQ(again.status().replicas_size(), 2);
  for (const v1::Allocation& r : again.status().replicas()) EXPECT_NE(r.node(), n1);
}

TEST_F(ControlLoopLeasesTest, JobPreemptedAndBoundAgainToTheSameNodeIsANewWorkload) {
  options_.scheduler.queue = sched::QueuePolicy::kPriority;
  options_.scheduler.preemption = true;
  options_.scheduler.preemption_grace_ms = 5'000;
  Restart();
  auto a = Connect("gpu-01", 1);
  v1::JobSpec preemptible = Spec(1);
  preemptible.set_priority(10);
  preemptible.set_preemptible(true);
  v1::Job low = SubmitSpec(preemptible);
  Report("gpu-01", low.id(), v1::WORKLOAD_STATE_RUNNING);
  v1::JobSpec urgent = Spec(1);
  urgent.set_priority(1000);
  v1::Job high = SubmitSpec(urgent);
  ASSERT_EQ(StateOf(low.id()), v1::JOB_STATE_PREEMPTING);
  Report("gpu-01", low.id(), v1::WORKLOAD_STATE_EXITED, -1, 15);
  Report("gpu-01", high.id(), v1::WORKLOAD_STATE_RUNNING);
  Report("gpu-01", high.id(), v1::WORKLOAD_STATE_EXITED, 0);
  // Attempt 2 of the low job, on the same node: sent under its own id.
  v1::Job again = Get(low.id());
  EXPECT_EQ(again.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(again.status().attempt(), 2);
  ASSERT_TRUE(a->WaitFor(0, [&](const v1::DesiredWorkloads& d) {
    return d.workloads_size() == 1 && d.workloads(0).workload_id() == low.id() + "@2";
  }));
  Report("gpu-01", low.id(), v1::WORKLOAD_STATE_EXITED, 7);
  v1::Job ended = Get(low.id());
  EXPECT_EQ(ended.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(ended.status().exit_code(), 7);
  ASSERT_EQ(ended.status().attempts_size(), 2);
  EXPECT_THAT(ended.status().attempts(0).outcome(), HasSubstr("preempted"));
  EXPECT_THAT(ended.status().attempts(1).outcome(), HasSubstr("failed"));
}

TEST_F(ControlLoopLeasesTest, RestartGivesEveryNodeAFreshLease) {
  auto a = Connect("gpu-01", 1);
  v1::Job job = Submit(1);
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  Advance(milliseconds(1400));
  Restart();
  // The restarted server heard nobody while it was down: a full ttl from now.
  Advance(milliseconds(1400));
  EXPECT_NE(Node("gpu-01").state(), v1::NODE_STATE_LOST);
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_RUNNING);
  Advance(milliseconds(200));
  EXPECT_EQ(Node("gpu-01").state(), v1::NODE_STATE_LOST);
}

TEST_F(ControlLoopLeasesTest, FencedExitQueuesTheJobAgain) {
  Connect("gpu-01", 1);
  v1::Job job = SubmitSpec(Restartable(1));
  Report("gpu-01", job.id(), v1::WORKLOAD_STATE_RUNNING);
  v1::StatusReport report;
  v1::WorkloadStatus* ws = report.add_workloads();
  ws->set_job_id(job.id());
  ws->set_workload_id(WorkloadOf(job.id()));
  ws->set_state(v1::WORKLOAD_STATE_EXITED);
  ws->set_signal(15);
  ws->set_fenced(true);
  loop_->HandleStatus("gpu-01", report);
  Must(loop_->Barrier());
  v1::Job again = Get(job.id());
  EXPECT_EQ(again.status().attempt(), 2);
  EXPECT_EQ(again.status().node_losses(), 1);
  EXPECT_THAT(again.status().attempts(0).outcome(), HasSubstr("fenced"));
}

TEST(LeaseOptionsTest, FenceMustEndBeforeTheLease) {
  LeaseOptions defaults = LeaseOptions().Derive();
  EXPECT_TRUE(defaults.Validate().ok()) << defaults.Validate().ToString();
  EXPECT_EQ(defaults.fence_after, milliseconds(1000));
  EXPECT_EQ(defaults.fence_grace, milliseconds(200));
  EXPECT_EQ(defaults.suspect_after, milliseconds(600));
  LeaseOptions tight = defaults;
  tight.fence_after = milliseconds(1300);
  EXPECT_FALSE(tight.Validate().ok());
  LeaseOptions slow = defaults;
  slow.heartbeat_interval = milliseconds(700);
  EXPECT_FALSE(slow.Validate().ok());
  LeaseOptions longer;
  longer.ttl = std::chrono::seconds(30);
  EXPECT_TRUE(longer.Derive().Validate().ok());
}

}  // namespace
}  // namespace drover::server::testing
