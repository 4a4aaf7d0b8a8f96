#pragma once
// NodeRegistry: the control loop's nodes and their leases. It owns every
// node's record (inventory, labels, drain, GPU health), its agent session,
// its lease (renewed by its own heartbeats and by peers that hear it) and
// its liveness, and turns what happens to a node into what it means for
// the scheduler (schedulable or not) and for the jobs on it (through
// JobLifecycle: a lost node's jobs are queued again, a sick GPU's stopped).
// It also renders the node views readers get (NodeReplica).
//
// Leases (docs/failures.md), one file (node_leases.cc):
//
//   Alive --no renewal for suspect_after--> Suspect --for ttl--> Lost
//     ^                                        |                   |
//     +------------- heard again --------------+                   |
//     +---- registers again, then a full report shows it clean ----+
//
// The lease clock is monotonic. A server that starts gives every node it
// recovers a fresh full ttl: it could not hear anyone while it was down.
//
// Invariants: a node is schedulable in the scheduler iff it has a session,
// is not drained, is Alive and is not awaiting a clean report (Schedulable);
// a Lost node has no session.
//
// Not thread-safe: owned by the control loop, on its thread.

#include <chrono>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/sched/scheduler.h"
#include "drover/server/batch.h"
#include "drover/server/job_lifecycle.h"
#include "drover/server/loop_board.h"
#include "drover/server/loop_stats.h"
#include "drover/server/node_replica.h"
#include "drover/v1/agent.pb.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// Where the loop sends a node's desired workloads: the agent's session.
class AgentSink {
 public:
  virtual ~AgentSink() = default;
  // Replaces whatever was not yet sent (level-triggered: the latest wins).
  virtual void SendDesired(const v1::DesiredWorkloads& desired) = 0;
  // Ends the session; the agent reconnects and reports its full state.
  virtual void Reset() = 0;
  // Relays an administrator's fault injection (simulated GPUs only).
  virtual void SendInjectFault(const v1::InjectFault& fault) { (void)fault; }
  // Relays an administrator's image pull (NodeService.PullImage).
  virtual void SendPullImage(const v1::PullImage& pull) { (void)pull; }
  // Tells the agent that its heartbeat renewed its lease (and its peers').
  virtual void SendHeartbeatAck(const v1::HeartbeatAck& ack) { (void)ack; }
};

// Node leases (docs/failures.md). A node's lease is renewed by each
// heartbeat of its session, or by a peer that heard it directly through the
// gossip group. Unrenewed for suspect_after the node is Suspect (no new
// work); for ttl it is Lost: its jobs are queued again at once. The agent
// fences itself (stops its jobs) after fence_after without acknowledged
// contact and kills them fence_grace later; LeaseOptions::Validate keeps
// fence_after + fence_grace + a margin below ttl, so that a job is gone
// before the server may start it elsewhere.
struct LeaseOptions {
  std::chrono::milliseconds heartbeat_interval{250};
  std::chrono::milliseconds ttl{1500};
  // Derived from ttl by Derive() unless set: 2/5, 2/3 and 2/15 of it.
  std::chrono::milliseconds suspect_after{0};
  std::chrono::milliseconds fence_after{0};
  std::chrono::milliseconds fence_grace{0};

  // Fills the derived intervals.
  LeaseOptions Derive() const;
  // kInvalidArgument unless heartbeat < suspect_after < ttl and the fence
  // (with its grace, the agent's 100 ms check and 1% clock-rate drift)
  // ends before ttl.
  Status Validate() const;
};

class NodeRegistry {
 public:
  enum class Liveness { kAlive, kSuspect, kLost };
  struct Entry {
    v1::Node node;                    // as persisted (state and heartbeat are filled on read)
    std::shared_ptr<AgentSink> sink;  // null while no session
    int64_t last_heartbeat_ns = 0;
    // Lease (on the lease clock): last renewed by the node's own heartbeat,
    // by a peer's report; the newest beat a peer reported.
    int64_t heard_direct_ns = 0;
    int64_t heard_via_peer_ns = 0;
    int64_t peer_beat = -1;
    // When the node was last sent the peer list (lease clock): at most once
    // per 1 ms times the cluster's size (1 s at most), however often the
    // list changes (a thousand nodes registering would otherwise send every
    // node a thousand lists).
    int64_t peers_sent_ns = std::numeric_limits<int64_t>::min() / 2;
    Liveness liveness = Liveness::kAlive;
    std::string liveness_reason;
    // Back from Lost: no new work until a full report shows nothing
    // running there that should not (its fence may not have fired).
    bool awaiting_clean_report = false;
    bool full_report_seen = false;
    std::set<std::string> undesired_running;  // workload ids it reported running that it should not run
    std::deque<std::string> ended_jobs;       // ran here, ended for good (newest last; checkpoint cleanup)
    std::vector<v1::GpuTelemetry> telemetry;  // by GPU index, from the last heartbeat
    // Its image store as it last said (Heartbeat.images_changed), shared
    // with the snapshots; not persisted: the agent says it again.
    std::shared_ptr<const std::vector<v1::NodeImage>> images;
    // When its view was last published to node_replica_ (lease clock).
    int64_t published_ns = std::numeric_limits<int64_t>::min() / 2;
    // `node` as last persisted, shared with the snapshots in node_replica_;
    // null once it changed (Persist), copied again at the next capture.
    mutable std::shared_ptr<const v1::Node> record;
    // `telemetry` shared the same way (null once new readings came).
    mutable std::shared_ptr<const std::vector<v1::GpuTelemetry>> readings;
  };
  using Map = std::map<std::string, Entry>;

  struct Options {
    LeaseOptions lease;
    Clock* clock = nullptr;        // wall clock (records, views)
    Clock* lease_clock = nullptr;  // leases; null: the machine's monotonic clock
    // Whether this server still leads (null: always): nothing goes to an
    // agent from a deposed leader.
    std::function<bool()> leading;
  };
  NodeRegistry(Options options, sched::Scheduler* sched, Batch* batch, JobLifecycle* jobs, LoopBoard* board)
      : options_(std::move(options)), sched_(sched), batch_(batch), jobs_(jobs), board_(board) {}

  // ---- recovery ----
  // The nodes of the store, kept live where this registry already has them
  // (a rebuild after a failed commit), each with a fresh lease otherwise,
  // into `sched` (a fresh scheduler); Replace swaps them in.
  Result<Map> Rebuild(std::vector<v1::Node> stored, sched::Scheduler* sched);
  void Replace(Map nodes);
  // Every session is reset: its agent reports its full state again.
  void ResetSessions();

  // ---- agents (node_registry.cc) ----
  // `req` must already be validated (rpc::ValidateRegister).
  Status Register(const v1::RegisterRequest& req);
  Status Open(const std::string& node, std::shared_ptr<AgentSink> sink);
  void Close(const std::string& node, const AgentSink* sink);
  void Report(const std::string& node, const v1::StatusReport& report);
  Status InjectFault(const std::string& node, int gpu, const std::string& fault);
  // Tells `nodes` (every ready node when empty) to pull `pull`'s image;
  // answers the nodes told. kNotFound for a node not registered,
  // kUnavailable for one without a session; then nobody is told.
  Result<std::vector<std::string>> PullImage(const std::vector<std::string>& nodes, const v1::PullImage& pull);
  Result<v1::Node> SetDrained(const std::string& name, bool drained, bool requeue);
  // The node registry's part of a job's end: its nodes may drop its
  // checkpoints now.
  void JobEndedOn(const v1::Job& job, const std::set<std::string>& nodes);

  // ---- leases (node_leases.cc) ----
  void Heartbeat(const std::string& node, const v1::Heartbeat& hb, const std::shared_ptr<AgentSink>& sink);
  // Turns unrenewed leases into Suspect and Lost.
  void EnforceLeases();
  // The gossip endpoints of every node but `node` that is not lost, and the
  // list's version.
  std::pair<int64_t, std::vector<v1::Peer>> Peers(const std::string& node) const;

  // ---- what goes out at commit ----
  // The new desired state to every node the batch marked.
  void SendDesired() const;
  v1::DesiredWorkloads DesiredFor(const std::string& node) const;
  // Snapshots of the touched and resent nodes into `replica`.
  void Publish(NodeReplica* replica);
  // Every node's snapshot.
  std::map<std::string, NodeReplica::SnapshotPtr> CaptureAll() const;

  const Map& nodes() const { return nodes_; }
  void AddCounters(LoopStats* stats) const {
    stats->renewals_direct = renewals_direct_;
    stats->renewals_via_peers = renewals_via_peers_;
    stats->node_losses = node_losses_;
  }

 private:
  static constexpr int64_t kPublishReadingsEveryNs = 1'000'000'000;
  int64_t NowNs() const { return ToUnixNanos(options_.clock->Now()); }
  int64_t LeaseNowNs() const;
  bool Leading() const { return !options_.leading || options_.leading(); }
  void Persist(const v1::Node& node);
  void Touch(const std::string& name) { batch_->Touch(name); }
  bool Schedulable(const Entry& entry) const;
  void UpdateSchedulable(const std::string& name);
  // Suspect -> Alive: its own heartbeat came in time again.
  void HeardAgain(const std::string& name, Entry* entry);
  // The node's lease expired: its jobs are queued again (or fail, by their
  // restart policy), its session is reset and it must rejoin clean.
  void DeclareLost(const std::string& name, std::string reason);
  // How late a node's own heartbeat may be before its peers' renewals are
  // relayed to it.
  int64_t LagNs() const;
  void RenewViaPeers(const std::string& reporter, const v1::Heartbeat& hb, v1::HeartbeatAck* ack);
  void FillPeers(const std::string& node, v1::HeartbeatAck* ack) const;
  // The GPU health of a heartbeat: sick GPUs stop taking work, and the jobs
  // on them are stopped.
  void ApplyGpuReports(const std::string& node, Entry* entry, const v1::Heartbeat& hb);
  // Tracks what a node runs that it should not; it takes work once none.
  void NoteUndesired(Entry* entry, const v1::StatusReport& report);
  NodeReplica::SnapshotPtr Capture(const Entry& entry) const;

  const Options options_;
  sched::Scheduler* sched_;
  Batch* batch_;
  JobLifecycle* jobs_;
  LoopBoard* board_;
  Map nodes_;
  int64_t peers_version_ = 1;        // bumped when a node's gossip endpoint or liveness changes
  int64_t last_lease_check_ns_ = 0;  // SteadyClock: when the loop last looked at leases
  uint64_t renewals_direct_ = 0, renewals_via_peers_ = 0, node_losses_ = 0;  // LoopStats
};

}  // namespace drover::server
