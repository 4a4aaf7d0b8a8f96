// JobLifecycle's transitions, on a real scheduler and a batch, without the
// loop: every edge from every state, the legal ones doing their whole work
// (state, record, resends, scheduler) and every illegal one refused with
// nothing changed.

#include "drover/server/job_lifecycle.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

using S = v1::JobState;
using Edge = JobLifecycle::Edge;

constexpr S kStates[] = {S::JOB_STATE_PENDING,    S::JOB_STATE_BOUND,     S::JOB_STATE_RUNNING, S::JOB_STATE_PREEMPTING,
                         S::JOB_STATE_CANCELLING, S::JOB_STATE_SUCCEEDED, S::JOB_STATE_FAILED,  S::JOB_STATE_CANCELLED};
constexpr S kEnds[] = {S::JOB_STATE_SUCCEEDED, S::JOB_STATE_FAILED, S::JOB_STATE_CANCELLED};

// The diagram of job_lifecycle.h, written out as the set of legal
// (edge, from, to) triples; `to` is the requested end for kFinish only.
struct Triple {
  Edge edge;
  S from;
  S to = S::JOB_STATE_UNSPECIFIED;
  auto operator<=>(const Triple&) const = default;
};
const std::set<Triple>& Legal() {
  static const std::set<Triple> kLegal = {
      {Edge::kBind, S::JOB_STATE_PENDING},
      {Edge::kReject, S::JOB_STATE_PENDING},
      {Edge::kStart, S::JOB_STATE_BOUND},
      {Edge::kStop, S::JOB_STATE_BOUND},
      {Edge::kStop, S::JOB_STATE_RUNNING},
      {Edge::kCancel, S::JOB_STATE_PENDING},
      {Edge::kCancel, S::JOB_STATE_BOUND},
      {Edge::kCancel, S::JOB_STATE_RUNNING},
      {Edge::kCancel, S::JOB_STATE_PREEMPTING},
      {Edge::kCancel, S::JOB_STATE_CANCELLING},
      {Edge::kRequeue, S::JOB_STATE_BOUND},
      {Edge::kRequeue, S::JOB_STATE_RUNNING},
      {Edge::kRequeue, S::JOB_STATE_PREEMPTING},
      {Edge::kFinish, S::JOB_STATE_PENDING, S::JOB_STATE_CANCELLED},
      {Edge::kFinish, S::JOB_STATE_BOUND, S::JOB_STATE_SUCCEEDED},
      {Edge::kFinish, S::JOB_STATE_BOUND, S::JOB_STATE_FAILED},
      {Edge::kFinish, S::JOB_STATE_RUNNING, S::JOB_STATE_SUCCEEDED},
      {Edge::kFinish, S::JOB_STATE_RUNNING, S::JOB_STATE_FAILED},
      {Edge::kFinish, S::JOB_STATE_PREEMPTING, S::JOB_STATE_SUCCEEDED},
      {Edge::kFinish, S::JOB_STATE_PREEMPTING, S::JOB_STATE_FAILED},
      {Edge::kFinish, S::JOB_STATE_CANCELLING, S::JOB_STATE_CANCELLED},
      {Edge::kFinish, S::JOB_STATE_CANCELLING, S::JOB_STATE_FAILED},
      {Edge::kArchive, S::JOB_STATE_SUCCEEDED},
      {Edge::kArchive, S::JOB_STATE_FAILED},
      {Edge::kArchive, S::JOB_STATE_CANCELLED},
  };
  return kLegal;
}

class JobLifecycleTest : public ::testing::Test {
 public:
  JobLifecycleTest()
      : sched_(sched::Config{}),
        life_(&sched_, &batch_, &clock_,
              [this](const v1::Job& j, const std::set<std::string>& n) { ended_[j.id()] = n; }) {
    v1::Node node;
    node.set_name("n0");
    node.set_cpu_millis(64000);
    node.set_memory_bytes(int64_t{512} << 30);
    for (int i = 0; i < 4; ++i) {
      v1::Gpu* g = node.add_gpus();
      g->set_index(i);
      g->set_uuid("n0-gpu-" + std::to_string(i));
      g->set_vendor("nvidia");
      g->set_model("H100 80GB");
      g->set_memory_bytes(int64_t{80} << 30);
      g->set_health(v1::GPU_HEALTH_HEALTHY);
    }
    Status s = sched_.UpsertNode(rpc::ToNodeInfo(node, true));
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    spec.set_gpus(1);
    spec.add_command("true");
    Status s = rpc::NormalizeJobSpec(&spec);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return spec;
  }

  v1::Job* Submit() {
    v1::Job job;
    *job.mutable_spec() = Spec();
    auto seqs = life_.Submit({job});
    EXPECT_TRUE(seqs.ok()) << seqs.status().ToString();
    return life_.Find(FormatJobId(seqs->front()));
  }
  // Binds every pending job the scheduler places.
  void Pass() {
    sched::Decisions d = sched_.Schedule(ToUnixNanos(clock_.Now()) / 1'000'000);
    for (const sched::Binding& b : d.bindings) EXPECT_TRUE(life_.Bind(b).ok());
  }
  // A job driven by legal edges into `state`.
  v1::Job* JobIn(S state) {
    v1::Job* job = Submit();
    auto must = [](const Status& s) { EXPECT_TRUE(s.ok()) << s.ToString(); };
    switch (state) {
      case S::JOB_STATE_PENDING: break;
      case S::JOB_STATE_CANCELLED: must(life_.Cancel(job)); break;
      default:
        Pass();
        EXPECT_EQ(job->status().state(), S::JOB_STATE_BOUND);
        if (state == S::JOB_STATE_BOUND) break;
        must(life_.Start(job, ToUnixNanos(clock_.Now())));
        if (state == S::JOB_STATE_PREEMPTING) must(life_.Stop(job, StopCause::Failure("gpu fell off the bus")));
        if (state == S::JOB_STATE_CANCELLING) must(life_.Cancel(job));
        if (state == S::JOB_STATE_SUCCEEDED || state == S::JOB_STATE_FAILED) {
          must(life_.Finish(job, state, state == S::JOB_STATE_FAILED ? 1 : 0, 0, ToUnixNanos(clock_.Now()), "ended"));
        }
    }
    EXPECT_EQ(job->status().state(), state);
    batch_.Seal();
    batch_.ClearDesired();
    return job;
  }

  Status Apply(Edge edge, v1::Job* job, S to) {
    const int64_t now = ToUnixNanos(clock_.Now());
    switch (edge) {
      case Edge::kBind: {
        sched::Binding b;
        b.job_id = job->id();
        b.replicas.push_back(sched::Placement{"n0", {3}});
        return life_.Bind(b);
      }
      case Edge::kStart: return life_.Start(job, now);
      case Edge::kStop: return life_.Stop(job, StopCause::Preempted("j-999999", "priority", 5000));
      case Edge::kCancel: return life_.Cancel(job);
      case Edge::kRequeue: return life_.Requeue(job);
      case Edge::kFinish: return life_.Finish(job, to, 0, 0, now, "done");
      case Edge::kReject: return life_.Reject(job, "refused");
      case Edge::kArchive: return life_.Archive(*ParseJobId(job->id()));
    }
    return Internal("unknown edge");
  }

  ManualClock clock_;
  sched::Scheduler sched_;
  Batch batch_;
  JobLifecycle life_;
  std::map<std::string, std::set<std::string>> ended_;
};

TEST(JobLifecycleEdgesTest, EveryEdgeFromEveryStateIsTakenOrRefusedAsTheDiagramSays) {
  struct World : JobLifecycleTest {
    void TestBody() override {}
  };
  const Edge edges[] = {Edge::kBind,    Edge::kStart,  Edge::kStop,   Edge::kCancel,
                        Edge::kRequeue, Edge::kFinish, Edge::kReject, Edge::kArchive};
  int legal = 0, refused = 0;
  for (Edge edge : edges) {
    for (S from : kStates) {
      std::vector<S> tos = {S::JOB_STATE_UNSPECIFIED};
      if (edge == Edge::kFinish) tos.assign(std::begin(kEnds), std::end(kEnds));
      for (S to : tos) {
        SCOPED_TRACE(::testing::Message() << "edge " << static_cast<int>(edge) << " from " << v1::JobState_Name(from)
                                          << " to " << v1::JobState_Name(to));
        const bool want = Legal().contains({edge, from, to});
        EXPECT_EQ(JobLifecycle::Allowed(edge, from, to), want);
        World w;
        v1::Job* job = w.JobIn(from);
        const std::string id = job->id();
        const v1::Job before = *job;
        Status s = w.Apply(edge, job, to);
        if (want) {
          ++legal;
          EXPECT_TRUE(s.ok()) << s.ToString();
          // A legal edge records what it did.
          Batch::Sealed sealed = w.batch_.Seal();
          // (A second cancel of a job being cancelled changes nothing.)
          if (edge != Edge::kCancel || from != S::JOB_STATE_CANCELLING) {
            EXPECT_FALSE(sealed.ops.empty());
          }
          // An edge that changes what runs on the job's node resends its
          // desired set; one that does not, does not.
          const bool resends = edge == Edge::kBind || (rpc::HoldsGpus(from) && edge != Edge::kStart &&
                                                       !(edge == Edge::kCancel && from == S::JOB_STATE_CANCELLING));
          EXPECT_EQ(w.batch_.desired().contains("n0"), resends);
          continue;
        }
        ++refused;
        EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
        // Nothing changed: not the job, not the batch.
        const v1::Job* after = w.life_.table().Find(id);
        ASSERT_NE(after, nullptr);
        EXPECT_EQ(after->SerializeAsString(), before.SerializeAsString());
        Batch::Sealed sealed = w.batch_.Seal();
        EXPECT_TRUE(sealed.ops.empty());
        EXPECT_TRUE(w.batch_.desired().empty());
      }
    }
  }
  EXPECT_EQ(legal, static_cast<int>(Legal().size()));
  EXPECT_GT(refused, 40);
}

TEST_F(JobLifecycleTest, BindStartsAnAttemptOnItsNodeAndMarksItForResend) {
  v1::Job* job = Submit();
  Batch::Sealed submitted = batch_.Seal();
  ASSERT_EQ(submitted.persisted.size(), 1u);
  Pass();
  EXPECT_EQ(job->status().state(), S::JOB_STATE_BOUND);
  EXPECT_EQ(job->status().attempt(), 1);
  ASSERT_EQ(job->status().attempts_size(), 1);
  EXPECT_EQ(job->status().attempts(0).nodes(0), "n0");
  EXPECT_TRUE(batch_.desired().contains("n0"));
  EXPECT_TRUE(life_.table().ActiveOn("n0").contains(*ParseJobId(job->id())));
  EXPECT_TRUE(batch_.persisted().contains(*ParseJobId(job->id())));
}

TEST_F(JobLifecycleTest, RequeueResetsTheRunAndQueuesItAgainInTheScheduler) {
  v1::Job* job = JobIn(S::JOB_STATE_RUNNING);
  ASSERT_TRUE(life_.Stop(job, StopCause::Preempted("j-000009", "priority 900 > 10", 30000)).ok());
  ASSERT_TRUE(life_.Requeue(job).ok());
  const v1::JobStatus& st = job->status();
  EXPECT_EQ(st.state(), S::JOB_STATE_PENDING);
  // What belonged to the attempt is gone; what belongs to the job stays.
  EXPECT_FALSE(st.has_allocation());
  EXPECT_EQ(st.bind_time_unix_nanos(), 0);
  EXPECT_EQ(st.start_time_unix_nanos(), 0);
  EXPECT_EQ(st.stop_grace_seconds(), 0);
  EXPECT_EQ(st.replica_states_size(), 0);
  EXPECT_EQ(st.attempt(), 1);
  ASSERT_EQ(st.attempts_size(), 1);
  EXPECT_EQ(st.attempts(0).outcome(), "preempted: preempted for j-000009: priority 900 > 10");
  EXPECT_EQ(st.preemptions(), 1);
  EXPECT_GT(st.submit_time_unix_nanos(), 0);
  EXPECT_TRUE(life_.table().ActiveOn("n0").empty());
  EXPECT_TRUE(batch_.desired().contains("n0"));
  // The scheduler has it pending again: the next pass binds a new attempt.
  EXPECT_EQ(sched_.pending(), 1u);
  Pass();
  EXPECT_EQ(job->status().state(), S::JOB_STATE_BOUND);
  EXPECT_EQ(job->status().attempt(), 2);
}

TEST_F(JobLifecycleTest, AFailureTheRestartPolicyDoesNotRetryEndsFailedAndTellsItsNodes) {
  v1::Job* job = JobIn(S::JOB_STATE_RUNNING);
  ASSERT_TRUE(life_.Stop(job, StopCause::Failure("ran too long", /*no_restart=*/true)).ok());
  EXPECT_EQ(job->status().stop_grace_seconds(), rpc::kDefaultGraceSeconds);
  ASSERT_TRUE(life_.Requeue(job).ok());
  EXPECT_EQ(job->status().state(), S::JOB_STATE_FAILED);
  EXPECT_EQ(job->status().message(), "ran too long");
  EXPECT_EQ(ended_[job->id()], std::set<std::string>{"n0"});
  EXPECT_EQ(sched_.pending(), 0u);
  EXPECT_TRUE(life_.table().ActiveOn("n0").empty());
}

TEST_F(JobLifecycleTest, APreemptionGetsTheShorterGraceAndTheDrainTellsTheScheduler) {
  v1::Job* job = JobIn(S::JOB_STATE_RUNNING);
  ASSERT_TRUE(life_.Stop(job, StopCause::Preempted("j-000009", "priority 900 > 10", 1500)).ok());
  EXPECT_EQ(job->status().stop_grace_seconds(), 2);  // 1.5 s, rounded up, below the job's own 10 s
  EXPECT_EQ(job->status().preempted_for(), "j-000009");
  EXPECT_TRUE(batch_.desired().contains("n0"));
  // A drain stops it for nobody, through the scheduler.
  v1::Job* other = JobIn(S::JOB_STATE_RUNNING);
  life_.Drain("n0");
  EXPECT_EQ(other->status().state(), S::JOB_STATE_PREEMPTING);
  EXPECT_EQ(other->status().message(), "drained off node 'n0'");
  ASSERT_TRUE(life_.Requeue(other).ok());
  EXPECT_EQ(other->status().preemptions(), 1);
}

TEST_F(JobLifecycleTest, ArchiveTakesAFinishedJobOutOfTheTableAndTheStore) {
  v1::Job* job = JobIn(S::JOB_STATE_SUCCEEDED);
  const uint64_t seq = *ParseJobId(job->id());
  ASSERT_TRUE(life_.Archive(seq).ok());
  EXPECT_EQ(life_.table().Find(FormatJobId(seq)), nullptr);
  Batch::Sealed sealed = batch_.Seal();
  ASSERT_EQ(sealed.ops.size(), 1u);
  EXPECT_EQ(sealed.unlisted, std::vector<uint64_t>{seq});
  EXPECT_EQ(life_.Archive(seq).code(), Code::kNotFound);
}

// ---- the launch contract (launch_contract.h) ----

TEST(LaunchPortsTest, TheLowestFreePortOfTheRangeAndAClearReasonWhenNoneIs) {
  EXPECT_EQ(*PickLaunchPort("n0", {30000, 30002}, {}), 30000);
  EXPECT_EQ(*PickLaunchPort("n0", {30000, 30002}, {30000, 30002}), 30001);
  auto none = PickLaunchPort("n0", {30000, 30001}, {30000, 30001});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kResourceExhausted);
  EXPECT_NE(none.status().message().find("node 'n0'"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("30000-30001"), std::string::npos) << none.status().message();
  // A node that registered no range gets the default one.
  EXPECT_EQ(LaunchPortsOf(nullptr).first, kDefaultLaunchPorts.first);
  v1::Node node;
  node.set_launch_port_first(40000);
  node.set_launch_port_last(40009);
  EXPECT_EQ(LaunchPortsOf(&node).last, 40009);
}

class LaunchContractTest : public JobLifecycleTest {
 public:
  LaunchContractTest() {
    node_.set_name("n0");
    node_.set_advertise_host("10.0.0.1");
    node_.set_launch_port_first(30000);
    node_.set_launch_port_last(30001);
    life_.SetNodeLookup([this](const std::string& name) { return name == "n0" ? &node_ : nullptr; });
  }
  static const v1::Attempt& Last(const v1::Job& job) { return job.status().attempts(job.status().attempts_size() - 1); }
  v1::Node node_;
};

TEST_F(LaunchContractTest, EachAttemptHoldsAPortOfItsMasterNodeUntilItsProcessesAreGone) {
  v1::Job* a = JobIn(S::JOB_STATE_RUNNING);
  v1::Job* b = JobIn(S::JOB_STATE_BOUND);
  EXPECT_EQ(Last(*a).master_port(), 30000);
  EXPECT_EQ(Last(*b).master_port(), 30001);
  EXPECT_EQ(std::vector<std::string>(Last(*a).hosts().begin(), Last(*a).hosts().end()),
            std::vector<std::string>{"10.0.0.1"});
  // The range is spent: a job of one node runs without a port ...
  v1::Job* single = JobIn(S::JOB_STATE_BOUND);
  EXPECT_EQ(Last(*single).master_port(), 0);
  ASSERT_TRUE(life_.Cancel(single).ok());
  ASSERT_TRUE(life_.Finish(single, S::JOB_STATE_CANCELLED, 0, 0, ToUnixNanos(clock_.Now()), "gone").ok());
  // ... and a gang waits, saying why, its GPUs back with the scheduler.
  v1::Job gang;
  *gang.mutable_spec() = Spec();
  gang.mutable_spec()->set_replicas(2);
  auto seqs = life_.Submit({gang});
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  v1::Job* c = life_.Find(FormatJobId(seqs->front()));
  sched::Decisions d = sched_.Schedule(ToUnixNanos(clock_.Now()) / 1'000'000);
  ASSERT_EQ(d.bindings.size(), 1u);
  EXPECT_EQ(life_.Bind(d.bindings[0]).code(), Code::kResourceExhausted);
  EXPECT_EQ(c->status().state(), S::JOB_STATE_PENDING);
  EXPECT_NE(c->status().message().find("launch port on node 'n0'"), std::string::npos) << c->status().message();
  EXPECT_EQ(sched_.pending(), 1u);
  // A preempted attempt keeps its port while its process stops; once it is
  // gone (requeued), the next binding takes the port.
  ASSERT_TRUE(life_.Stop(a, StopCause::Preempted("j-999999", "priority", 1000)).ok());
  EXPECT_EQ(LaunchPortsHeld(life_.table(), "n0"), (std::set<int>{30000, 30001}));
  ASSERT_TRUE(life_.Requeue(a).ok());
  EXPECT_EQ(LaunchPortsHeld(life_.table(), "n0"), (std::set<int>{30001}));
  ASSERT_TRUE(life_.Cancel(a).ok());  // pending again: out of the gang's way
  Pass();
  ASSERT_EQ(c->status().state(), S::JOB_STATE_BOUND);
  EXPECT_EQ(Last(*c).master_port(), 30000);
  EXPECT_EQ(Last(*c).hosts_size(), 2);
  // A finished job frees its port too.
  ASSERT_TRUE(life_.Finish(b, S::JOB_STATE_SUCCEEDED, 0, 0, ToUnixNanos(clock_.Now()), "done").ok());
  EXPECT_EQ(LaunchPortsHeld(life_.table(), "n0"), (std::set<int>{30000}));
}

TEST_F(LaunchContractTest, TheWorkloadCarriesItsAttemptsContract) {
  v1::Job* job = JobIn(S::JOB_STATE_RUNNING);
  v1::DesiredWorkloads out;
  life_.AddDesired("n0", &out);
  ASSERT_EQ(out.workloads_size(), 1);
  const v1::LaunchContract& c = out.workloads(0).launch();
  EXPECT_EQ(c.node_rank(), 0);
  EXPECT_EQ(c.nnodes(), 1);
  EXPECT_EQ(c.master_addr(), "10.0.0.1");
  EXPECT_EQ(c.master_port(), Last(*job).master_port());
  EXPECT_EQ(c.nodes(0), "n0");
}

}  // namespace
}  // namespace drover::server
