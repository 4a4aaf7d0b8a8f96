#pragma once
// Services on the agent (docs/deployments.md, "Agent: ports, probes,
// restarts"): a workload with Workload.service set runs until the server
// stops it. Each replica gets a TCP port from its agent (DROVER_PORT), kept
// across its restarts; the agent probes it (readiness, liveness) and
// restarts its process with back-off when it exits or fails liveness,
// reporting port, endpoint, readiness and restarts in WorkloadStatus.
//
// This header holds the parts that need no agent: the settings (validated,
// with common.proto's defaults), the probe itself, the port allocator, the
// record kept in the job directory, and ServiceReplica, the pure state
// machine of one replica (time comes in as an argument). ServiceLifecycle
// (service_lifecycle.h) drives them: it runs probes on a thread of their
// own and feeds the results, the process's starts and exits to the
// replica's ServiceReplica on the agent's loop.

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "drover/common/status.h"
#include "drover/v1/common.pb.h"

namespace drover::agent {

using ServiceTime = std::chrono::steady_clock::time_point;

// The longest http_path a probe accepts.
inline constexpr size_t kMaxProbePath = 1024;
// A replica ready this long has its restart back-off reset (common.proto).
inline constexpr std::chrono::minutes kBackoffResetAfter{10};

// One probe, as the agent runs it (v1::Probe with its defaults applied).
struct ProbeSettings {
  std::string http_path;  // GET http://127.0.0.1:<port><http_path>; 2xx or 3xx passes
  bool tcp = false;       // a TCP connection to the port opens
  std::chrono::milliseconds initial_delay{0};
  std::chrono::milliseconds period{1000};
  std::chrono::milliseconds timeout{1000};
  int failure_threshold = 3;
  // The replica's secret (ServiceSpec.api_key), sent as "Authorization:
  // Bearer" with an HTTP probe, for an engine that guards every path; empty:
  // no header.
  std::string bearer;
  // Neither an HTTP path nor TCP: the probe passes while the process runs.
  bool Checks() const { return tcp || !http_path.empty(); }
};

struct ServiceSettings {
  ProbeSettings readiness;
  ProbeSettings liveness;  // period 5000 by default
  std::string model;       // DROVER_MODEL and DROVER_SERVED_MODEL_NAME
  // DROVER_ENGINE_API_KEY: the replica's secret, which the engine asks of
  // every caller (the gateway sends it); empty for a replica without one.
  std::string api_key;
  std::chrono::milliseconds restart_backoff{1000};
  std::chrono::milliseconds max_restart_backoff{60000};
  std::chrono::milliseconds ready_timeout{600000};
};

// The spec with common.proto's defaults for fields left 0; InvalidArgument
// naming the field for a negative time or threshold, an http_path that is
// not an absolute path of printable characters (no spaces) up to
// kMaxProbePath, a probe with both http_path and tcp, a maximum back-off
// below the first, or an api_key that is not base64url
// (rpc::ValidateEngineKey). The api_key goes to both probes' bearer.
Result<ServiceSettings> ServiceSettingsOf(const v1::ServiceSpec& spec);

// The delay before a replica's `consecutive`-th restart in a row (1 for the
// first): the first back-off, doubled each time, up to the maximum.
std::chrono::milliseconds RestartDelay(const ServiceSettings& s, int consecutive);

// "1s", "0.5s", "1.25s": a delay as people read it in a reason.
std::string FormatDelay(std::chrono::milliseconds d);

// Runs `probe` against 127.0.0.1:`port` once, blocking at most its timeout.
// Ok when it passes; otherwise Unavailable with the reason ("connection
// refused", "http 503", "timed out after 1000 ms"). A probe that checks
// nothing passes.
Status CheckProbe(const ProbeSettings& probe, int port);

// "20000-29999" -> {20000, 29999}; InvalidArgument unless 1 <= first <= last
// <= 65535.
Result<std::pair<int, int>> ParsePortRange(std::string_view range);

// PortAllocator: the ports of one agent's service replicas. A port it gives
// is one no replica of this agent holds and that could be bound on every
// address when it was given (bind, then release). From a range [first,
// last] it takes the next free one round-robin; with none, it asks the
// kernel for a free ephemeral port (bind to port 0) and checks it again.
//
// A port is free only when it was given: a process of another user may
// take it before the replica binds it; the replica then fails and is
// restarted on the same port (the range should be kept for services).
// The agents of one process (`drover up --simulate N`: one machine, many
// nodes) never give the same port twice: what every allocator holds is
// also kept process-wide.
//
// Not thread-safe: owned by the agent's loop (the process-wide set has a
// lock of its own).
class PortAllocator {
 public:
  PortAllocator() = default;
  ~PortAllocator();  // releases what it holds
  PortAllocator(const PortAllocator&) = delete;
  PortAllocator& operator=(const PortAllocator&) = delete;

  // Ports from [first, last]; 0, 0: the kernel's picks. Before the first
  // Allocate.
  void SetRange(int first, int last);
  // ResourceExhausted when every port of the range is held or in use.
  Result<int> Allocate();
  // A port an adopted replica holds.
  void Hold(int port);
  void Release(int port);
  bool held(int port) const { return held_.contains(port); }

 private:
  bool TryTake(int port);  // free here, in this process and on the machine: now held
  int first_ = 0, last_ = 0;
  int next_ = 0;
  std::set<int> held_;
};

// Whether `port` can be bound on every address right now (SO_REUSEADDR, as
// servers bind).
bool PortBindable(int port);

// The host a node advertises its services on when not configured: the host
// of its gossip address ("10.0.0.7:7946") when it has one that names a
// host, else 127.0.0.1.
std::string DefaultAdvertiseHost(const std::string& gossip_listen);
// "host:port", with brackets for an IPv6 host.
std::string EndpointOf(const std::string& host, int port);

// What a replica keeps in its job directory (service.json), so that a
// restarted agent adopts it with its port, restarts and settings.
struct ServiceFile {
  int port = 0;
  int restarts = 0;
  v1::ServiceSpec spec;
};
Status WriteServiceFile(const std::string& job_dir, const ServiceFile& f);
// Nothing when the job is not a service (no file); an error when unreadable.
Result<std::optional<ServiceFile>> ReadServiceFile(const std::string& job_dir);

// What a replica reports (WorkloadStatus fields 10-14).
struct ServiceView {
  int port = 0;
  std::string endpoint;
  bool ready = false;
  int restarts = 0;
  std::string not_ready_reason;
  bool operator==(const ServiceView&) const = default;
};

// ServiceReplica: the state of one replica of a service on its node, fed
// its process's starts and exits and its probes' results.
//
//   started ──readiness passes──► ready ──readiness fails N times──► not ready
//                      (liveness failures count from here on)
//      │                             │                                  │
//      └────── process exits, or liveness fails N times (killed) ───────┘
//                                    ▼
//                 restarting in D (D doubles per restart in a row,
//                 back to the first after kBackoffResetAfter ready)
//
// Invariants: ready() implies running(); not_ready_reason() is empty
// exactly when ready(); each start and exit moves generation(), so a probe
// begun before either is recognised as stale.
//
// Not thread-safe: owned by the agent's loop. Pure: no clock, no I/O.
class ServiceReplica {
 public:
  ServiceReplica(ServiceSettings settings, int port, std::string endpoint, int restarts = 0);

  const ServiceSettings& settings() const { return settings_; }
  int port() const { return port_; }
  bool running() const { return running_; }
  bool ready() const { return ready_; }
  int restarts() const { return restarts_; }
  const std::string& not_ready_reason() const { return reason_; }
  uint64_t generation() const { return generation_; }
  ServiceView View() const { return {port_, endpoint_, ready_, restarts_, reason_}; }

  // The process started (its first start, or a restart).
  void Started(ServiceTime now);
  // A readiness probe's result (Ok: it passed).
  void Readiness(const Status& result, ServiceTime now);
  // A liveness probe's result; true when the process must be killed now
  // (its exit then says why: Exited uses the probe's reason). Failures
  // count only once the process has been ready: one still loading (a
  // model's weights, minutes) is not killed for it.
  bool Liveness(const Status& result, ServiceTime now);
  // Says when a replica that is not ready has been running longer than its
  // ready timeout.
  void CheckReadyTimeout(ServiceTime now);
  // The process ended (`how`: "exit code 1", "killed by signal 9"); the
  // delay before it is started again.
  std::chrono::milliseconds Exited(const std::string& how, ServiceTime now);
  // Its restart is under way: one more restart.
  void Restarting();
  // The server is stopping it: not ready from now on, whatever its probes say.
  void Stopping();

 private:
  std::string NotReadyYet(const std::string& why, ServiceTime now) const;

  ServiceSettings settings_;
  int port_;
  std::string endpoint_;
  int restarts_;
  uint64_t generation_ = 0;
  bool running_ = false;
  bool stopping_ = false;
  bool ready_ = false;
  bool been_ready_ = false;  // in this run of the process: liveness counts from then
  std::string reason_ = "not started yet";
  ServiceTime started_at_{};
  std::optional<ServiceTime> ready_since_;
  int readiness_failures_ = 0;
  int liveness_failures_ = 0;
  std::string kill_reason_;  // set when liveness asked for a kill
  int consecutive_restarts_ = 0;
};

}  // namespace drover::agent
