#pragma once
// DeploymentController: the deployments (docs/deployments.md) as state of
// their own. It owns the stored records (/deployments/<tenant>/<name>, a
// v1::Deployment: its spec, and of its status the template revision, the
// desired replica count and times), which unfinished jobs are each one's
// replicas, the gateways' load reports, and the controller that keeps the
// replicas alive (Reconcile: replace, scale, roll). It writes its records
// through the loop's Batch; the replica jobs it starts and stops go through
// the loop's submit and cancel (Hooks), that is the job lifecycle, so they
// are scheduled in the same pass and commit with the same batch.
//
// Names are per tenant (docs/security.md, "Names per tenant"): a
// deployment is found by (tenant, name), and its served model name is
// unique in its tenant only, so another tenant's is "not found" exactly as
// a missing one is, and two tenants may each have `llama`. A record an
// older server wrote under /deployments/<name> is moved under its tenant's
// key by the first commit after Load (the new key put and the old one
// deleted in that one transaction).
//
// The loop runs ReconcileIfDirty after each batch (before the scheduling
// pass): a replica or a deployment changed (MarkDirty, or the Batch saw a
// deployment's job change), or a second passed.
//
// Not thread-safe: owned by the control loop, on its thread.

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/status.h"
#include "drover/sched/scheduler.h"
#include "drover/server/batch.h"
#include "drover/server/deployments.h"
#include "drover/server/job_table.h"
#include "drover/store/store.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

class DeploymentController {
 public:
  // What the controller asks of the loop for the replica jobs.
  struct Hooks {
    // Submits one replica (the loop's admission: quotas, fit, size);
    // answers its sequence number.
    std::function<Result<uint64_t>(const v1::JobSpec&)> submit;
    // Cancels one unfinished job (a refusal is logged, not answered).
    std::function<void(const v1::Job&)> cancel;
    // Why a pending job waits, as a job's view says it.
    std::function<std::string(const v1::Job&)> pending_reason;
  };

  // One deployment.
  struct Entry {
    // As stored: the spec, and of the status revision, desired_replicas,
    // created/updated and last_request times.
    v1::Deployment record;
    std::set<uint64_t> replicas;  // its unfinished replica jobs, by sequence number
    // Replacing failed replicas backs off: failures in a row, the last one.
    int failures = 0;
    int64_t last_failure_ns = 0;
    std::string last_failure;
    // Auto-scaling: since when the wanted count stayed below desired, and
    // the highest it wanted meanwhile.
    int64_t low_since_ns = 0;
    int32_t low_max = 0;
    // Why a replica could not be submitted (its tenant's quota), if so.
    std::string submit_error;
    // Load found it under an older server's key (/deployments/<name>):
    // Replace moves it under /deployments/<tenant>/<name>.
    std::string legacy_key;
  };
  // (tenant, deployment name).
  using Key = std::pair<std::string, std::string>;
  using Map = std::map<Key, Entry>;

  DeploymentController(const DeploymentOptions* options, const sched::Scheduler* sched, Batch* batch,
                       const JobTable* jobs, Clock* clock, Hooks hooks)
      : options_(options), sched_(sched), batch_(batch), jobs_(jobs), clock_(clock), hooks_(std::move(hooks)) {}

  // The stored deployments of `store`, with their unfinished replicas among
  // `jobs`. An unreadable record is logged and skipped (and left in the
  // store). A record under an older server's key keeps it in legacy_key;
  // if its tenant's key holds the deployment too, the later updated wins.
  static Result<Map> Load(store::Store* store, const JobTable::Map& jobs, int64_t now_ns);
  // After a recovery: the controller runs after the next batch, and the
  // records Load found under an older server's key are moved in it.
  void Replace(Map deployments);
  // The store key of a deployment.
  static std::string StoreKey(const std::string& tenant, const std::string& name);

  // The controller runs after this batch (a second passed, a job of a
  // deployment changed).
  void MarkDirty() {
    if (!deployments_.empty()) dirty_ = true;
  }
  // Runs a round of Reconcile for every deployment when one is due.
  void ReconcileIfDirty() {
    if (dirty_) ReconcileAll();
  }
  void ReconcileAll();

  // The commands (the loop's thin wrappers: control_loop_deployments.cc).
  // `spec` is normalized (NormalizeDeploymentSpec) with its tenant and
  // owner set; it names a deployment of spec.tenant(). kNotFound,
  // kAlreadyExists (the name, or its model name served by another of the
  // tenant's), kFailedPrecondition (a replica that can never fit). Another
  // tenant's deployment of the name is never seen: "deployment 'x' not
  // found", word for word as for a name nobody has.
  Result<v1::Deployment> Apply(const v1::DeploymentSpec& spec, bool replace);
  Result<v1::Deployment> Get(const std::string& tenant, const std::string& name) const;
  std::vector<v1::Deployment> List() const;
  Result<v1::Deployment> Scale(const std::string& tenant, const std::string& name, int32_t replicas);
  // Cancels every replica and forgets the deployment; answers its last view.
  Result<v1::Deployment> Delete(const std::string& tenant, const std::string& name);
  // Every deployment's model and the ready replicas' endpoints.
  v1::EndpointsResponse Endpoints() const;
  // The image digest revision `revision` of a tenant's deployment resolved
  // to (its first replica that reported one); empty when unknown, for
  // another revision or for a deployment without an image.
  std::string ImageDigest(const std::string& tenant, const std::string& name, int64_t revision) const;
  // A gateway's load report (only deployed models count, each by its
  // tenant and served name); the controller runs after this batch.
  void ReportLoad(const v1::ReportLoadRequest& report);

 private:
  // A gateway's last report for one model.
  struct GatewayLoad {
    int64_t outstanding = 0;
    int64_t waiting = 0;
    std::map<std::string, int64_t> by_replica;
    // By replica: prefix blocks routed, of which expected held (since the
    // gateway started), and the engine's load (-1: not known).
    struct Routing {
      int64_t blocks = 0, hit_blocks = 0, engine_load = -1;
    };
    std::map<std::string, Routing> routing;
    int64_t at_ns = 0;  // when it came (clock_)
    // The engines' queue (-1: not known). Every gateway scrapes the same
    // engines: LoadOf takes the highest, not the sum.
    int64_t engine_waiting = -1;
    double queue_ms = -1;
  };

  int64_t NowNs() const { return ToUnixNanos(clock_->Now()); }
  void Persist(Entry* d);
  void Reconcile(Entry* d, int64_t now_ns);
  void Autoscale(Entry* d, int64_t now_ns);
  // The gateways' fresh reports for a tenant's model, summed.
  GatewayLoad LoadOf(const std::string& tenant, const std::string& model, int64_t now_ns) const;
  v1::Deployment View(const Entry& d) const;

  const DeploymentOptions* options_;
  const sched::Scheduler* sched_;
  Batch* batch_;
  const JobTable* jobs_;
  Clock* clock_;
  Hooks hooks_;
  Map deployments_;
  std::map<Key, std::map<std::string, GatewayLoad>> load_;  // by (tenant, served model name), then gateway
  bool dirty_ = false;  // a replica or a deployment changed: reconcile after this batch
};

}  // namespace drover::server
