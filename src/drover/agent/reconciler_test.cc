#include "drover/agent/reconciler.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace drover::agent {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kNow = 1'000 * kSec;

ObservedWorkload Running(const std::string& key, int grace = 10) {
  ObservedWorkload w;
  w.key = key;
  w.started = true;
  w.grace_seconds = grace;
  return w;
}

ObservedWorkload Ended(const std::string& key, bool reported) {
  ObservedWorkload w = Running(key);
  w.exited = true;
  w.reported_ended = reported;
  return w;
}

DesiredView Fresh(std::set<std::string> keys) { return DesiredView{std::move(keys), {}, true}; }

Action Start(const std::string& key) { return MakeAction(ActionKind::kStart, key); }
Action Terminate(const std::string& key, int grace, const std::string& reason = "") {
  return MakeAction(ActionKind::kTerminate, key, SIGTERM, grace, reason);
}
Action Kill(const std::string& key) { return MakeAction(ActionKind::kKill, key, SIGKILL); }
Action Forget(const std::string& key) { return MakeAction(ActionKind::kForget, key); }

std::string Describe(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) s += std::string(ActionKindName(a.kind)) + " " + a.key + "; ";
  return s;
}

TEST(ReconcilerTest, StartsWhatIsDesiredAndNotOnTheNode) {
  auto actions = Reconcile(Fresh({"j-000001", "j-000002"}), {Running("j-000002")}, kNow);
  EXPECT_EQ(actions, std::vector<Action>{Start("j-000001")}) << Describe(actions);
}

TEST(ReconcilerTest, StartsOnlyWhenADesiredSetArrives) {
  DesiredView d = Fresh({"j-000001"});
  d.fresh = false;
  EXPECT_TRUE(Reconcile(d, {}, kNow).empty());
}

TEST(ReconcilerTest, NeverStartsAWorkloadTheNodeKnows) {
  // Running, ended, or ended and reported: the same attempt never runs twice.
  std::vector<ObservedWorkload> observed = {Running("j-000001"), Ended("j-000002", false), Ended("j-000003", true)};
  auto actions = Reconcile(Fresh({"j-000001", "j-000002", "j-000003"}), observed, kNow);
  EXPECT_TRUE(actions.empty()) << Describe(actions);
}

TEST(ReconcilerTest, LeavesADesiredRunningWorkloadAlone) {
  ObservedWorkload w = Running("j-000001");
  w.sigterm_ns = kNow - 100 * kSec;  // even one stopped before (an agent restart)
  EXPECT_TRUE(Reconcile(Fresh({"j-000001"}), {w}, kNow).empty());
}

TEST(ReconcilerTest, StopsWhatIsNoLongerDesiredWithItsOwnGrace) {
  auto actions = Reconcile(Fresh({}), {Running("j-000001", 30)}, kNow);
  EXPECT_EQ(actions, std::vector<Action>{Terminate("j-000001", 30)}) << Describe(actions);
}

TEST(ReconcilerTest, StopsAlsoOnATick) {
  DesiredView d = Fresh({});
  d.fresh = false;
  auto actions = Reconcile(d, {Running("j-000001")}, kNow);
  EXPECT_EQ(actions, std::vector<Action>{Terminate("j-000001", 10)}) << Describe(actions);
}

TEST(ReconcilerTest, AStopOrderSetsGraceAndReason) {
  DesiredView d = Fresh({});
  d.stops["j-000001"] = StopOrder{3, "preempted by j-000009", 0, 0};
  d.stops["j-000002"] = StopOrder{-5, "", 0, 0};  // a negative grace is none
  auto actions = Reconcile(d, {Running("j-000001"), Running("j-000002")}, kNow);
  EXPECT_EQ(actions, (std::vector<Action>{Terminate("j-000001", 3, "preempted by j-000009"), Terminate("j-000002", 0)}))
      << Describe(actions);
}

TEST(ReconcilerTest, KillsOnlyOnceTheGraceIsOver) {
  ObservedWorkload w = Running("j-000001", 10);
  w.sigterm_ns = kNow - 10 * kSec;
  EXPECT_TRUE(Reconcile(Fresh({}), {w}, kNow).empty()) << "exactly the grace: not yet";
  w.sigterm_ns = kNow - 10 * kSec - 1;
  EXPECT_EQ(Reconcile(Fresh({}), {w}, kNow), std::vector<Action>{Kill("j-000001")});
}

TEST(ReconcilerTest, AStopOrdersGraceDecidesTheKill) {
  ObservedWorkload w = Running("j-000001", 60);
  w.sigterm_ns = kNow - 5 * kSec;
  DesiredView d = Fresh({});
  d.stops["j-000001"] = StopOrder{2, "", 0, 0};
  EXPECT_EQ(Reconcile(d, {w}, kNow), std::vector<Action>{Kill("j-000001")});
}

TEST(ReconcilerTest, CheckpointsFirstThenWaitsThenTerminates) {
  DesiredView d = Fresh({});
  d.stops["j-000001"] = StopOrder{7, "drain", SIGUSR1, 20};
  ObservedWorkload w = Running("j-000001");
  EXPECT_EQ(Reconcile(d, {w}, kNow), std::vector<Action>{MakeAction(ActionKind::kCheckpoint, "j-000001", SIGUSR1, 20)});
  w.checkpoint_ns = kNow - 19 * kSec;
  EXPECT_TRUE(Reconcile(d, {w}, kNow).empty()) << "inside the checkpoint's grace";
  w.checkpoint_ns = kNow - 20 * kSec;
  EXPECT_EQ(Reconcile(d, {w}, kNow), std::vector<Action>{Terminate("j-000001", 7, "drain")});
  w.sigterm_ns = kNow;  // after SIGTERM the checkpoint is history: the stop's grace counts
  EXPECT_TRUE(Reconcile(d, {w}, kNow + 7 * kSec).empty());
  EXPECT_EQ(Reconcile(d, {w}, kNow + 7 * kSec + 1), std::vector<Action>{Kill("j-000001")});
}

TEST(ReconcilerTest, ANewAttemptIsANewWorkload) {
  // The job was requeued and bound here again: its first attempt is stopped,
  // its second started; attempts are told apart by their key.
  auto actions = Reconcile(Fresh({"j-000007.1@2"}), {Running("j-000007.1@1")}, kNow);
  EXPECT_EQ(actions, (std::vector<Action>{Start("j-000007.1@2"), Terminate("j-000007.1@1", 10)})) << Describe(actions);
}

TEST(ReconcilerTest, ForgetsAnEndOnlyOnceTheServerHeardIt) {
  auto actions = Reconcile(Fresh({}), {Ended("j-000001", false), Ended("j-000002", true)}, kNow);
  EXPECT_EQ(actions, std::vector<Action>{Forget("j-000002")}) << Describe(actions);
}

TEST(ReconcilerTest, WaitsForAProcessNotYetStarted) {
  ObservedWorkload w;
  w.key = "j-000001";
  EXPECT_TRUE(Reconcile(Fresh({}), {w}, kNow).empty());
}

TEST(ReconcilerTest, AbandonsAServicesPendingRestart) {
  ObservedWorkload w = Running("j-000001");
  w.started = false;  // between two runs of its process
  w.restart_pending = true;
  EXPECT_EQ(Reconcile(Fresh({}), {w}, kNow), std::vector<Action>{MakeAction(ActionKind::kAbandonRestart, "j-000001")});
}

// A container cancelled while its image is pulled ends without starting;
// one still wanted waits for the pull (nothing to do).
TEST(ReconcilerTest, AContainerNoLongerWantedWhileItsImageIsPulledIsAbandoned) {
  ObservedWorkload w;
  w.key = "j-000001";
  w.pulling = true;
  EXPECT_EQ(Reconcile(Fresh({}), {w}, kNow), std::vector<Action>{MakeAction(ActionKind::kAbandonPull, "j-000001")});
  EXPECT_TRUE(Reconcile(Fresh({"j-000001"}), {w}, kNow).empty());
  EXPECT_TRUE(Reconcile(Fresh({"j-000001"}), {w}, kNow).empty()) << "still desired: it restarts";
}

TEST(ReconcilerTest, StartsComeFirstAndForgetsLast) {
  std::vector<ObservedWorkload> observed = {Ended("j-000001", true), Running("j-000002"), Running("j-000004")};
  auto actions = Reconcile(Fresh({"j-000003", "j-000004"}), observed, kNow);
  EXPECT_EQ(actions, (std::vector<Action>{Start("j-000003"), Terminate("j-000002", 10), Forget("j-000001")}))
      << Describe(actions);
}

}  // namespace
}  // namespace drover::agent
