// DeploymentController (deployment_controller.h): the controller that keeps
// each deployment's replicas, jobs of their own with JobSpec.service and
// JobSpec.deployment set, alive.
//
// One round of Reconcile for a deployment of revision R wanting N:
//   1. replicas that ended are dropped; a FAILED one counts a failure in a
//      row (its replacement waits 1 s, doubling to 60 s; reset once a
//      replica of R is ready).
//   2. surplus replicas of R (more than N) are cancelled: not-ready first,
//      then the newest.
//   3. older replicas (a rolling update): a ready one is cancelled while
//      the ready count stays >= N without it; a not-ready one as soon as a
//      replica of R is ready or the ready count is >= N without it.
//   4. new replicas of R are submitted while fewer than N run, and, while
//      older ones remain, only while the total stays <= N + 1 (max surge 1,
//      max unavailable 0).
// Worked example, N = 2, two ready replicas a, b of revision 1, the
// template changes (R = 2): round 1 submits c (3 <= N+1). c turns ready:
// ready is 3, so a is cancelled (2 stay ready), and d is submitted. d
// turns ready: b is cancelled. c and d remain, and ready never fell below 2.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "drover/auth/token.h"
#include "drover/common/ids.h"
#include "drover/rpc/convert.h"
#include "drover/server/deployment_controller.h"

namespace drover::server {
namespace {

constexpr std::string_view kDeploymentsPrefix = "/deployments/";
constexpr int64_t kNsPerMs = 1'000'000;
// A replica's secret: 32 random bytes (43 base64url characters).
constexpr size_t kEngineKeyBytes = 32;

bool Ready(const v1::Job& job) {
  return job.status().state() == v1::JOB_STATE_RUNNING && job.status().replica_states_size() > 0 &&
         job.status().replica_states(0).ready();
}

bool Stopping(const v1::Job& job) {
  v1::JobState s = job.status().state();
  return s == v1::JOB_STATE_CANCELLING || rpc::IsTerminal(s);
}

int32_t Desired(const v1::Deployment& d) { return d.status().desired_replicas(); }

uint64_t SeqOf(const v1::Job* job) {
  auto seq = ParseJobId(job->id());
  return seq.ok() ? *seq : 0;
}

}  // namespace

std::string DeploymentController::StoreKey(const std::string& tenant, const std::string& name) {
  return fmt::format("{}{}/{}", kDeploymentsPrefix, tenant, name);
}

Result<DeploymentController::Map> DeploymentController::Load(store::Store* store, const JobTable::Map& jobs,
                                                             int64_t now) {
  DROVER_ASSIGN_OR_RETURN(store::RangeResult range, store->Range(std::string(kDeploymentsPrefix)));
  Map out;
  for (const store::KeyValue& kv : range.kvs) {
    v1::Deployment d;
    const std::string rest = kv.key.substr(kDeploymentsPrefix.size());
    // Tenant and deployment names are DNS labels: no '/' in either. A key
    // without one is an older server's, from before names were per tenant.
    const bool legacy = rest.find('/') == std::string::npos;
    if (!d.ParseFromString(kv.value) || d.spec().tenant().empty() || d.spec().name().empty() ||
        kv.key != (legacy ? std::string(kDeploymentsPrefix) + d.spec().name()
                          : StoreKey(d.spec().tenant(), d.spec().name()))) {
      spdlog::error("skipping unreadable deployment record '{}'", kv.key);
      continue;
    }
    Key key{d.spec().tenant(), d.spec().name()};
    auto found = out.find(key);
    if (found != out.end()) {
      // Both keys hold it (an older server ran after a newer one): the
      // later write wins, and the older server's key goes either way.
      Entry& e = found->second;
      const bool newer = d.status().updated_unix_nanos() > e.record.status().updated_unix_nanos();
      if (legacy) e.legacy_key = kv.key;
      if (!newer) continue;
    }
    Entry& e = out[key];
    if (legacy) e.legacy_key = kv.key;
    // A restart is not idleness: a scaled-to-zero countdown starts again.
    d.mutable_status()->set_last_request_unix_nanos(std::max(d.status().last_request_unix_nanos(), now));
    e.record = std::move(d);
  }
  for (const auto& [seq, job] : jobs) {
    if (job.spec().deployment().empty() || rpc::IsTerminal(job.status().state())) continue;
    auto it = out.find(Key{job.spec().tenant(), job.spec().deployment()});
    if (it != out.end()) it->second.replicas.insert(seq);
  }
  return out;
}

void DeploymentController::Replace(Map deployments) {
  deployments_ = std::move(deployments);
  dirty_ = !deployments_.empty();
  for (auto& [key, d] : deployments_) {
    if (d.legacy_key.empty()) continue;
    // One batch, one store transaction: the record is under one key or the
    // other whatever happens to this commit (a failed one recovers from the
    // old key again).
    spdlog::info("deployment '{}' of tenant '{}': moving its record from '{}' to '{}'", key.second, key.first,
                 d.legacy_key, StoreKey(key.first, key.second));
    Persist(&d);
    batch_->Delete(std::exchange(d.legacy_key, std::string()));
  }
}

void DeploymentController::Persist(Entry* d) {
  d->record.mutable_status()->set_updated_unix_nanos(NowNs());
  v1::Deployment stored;
  *stored.mutable_spec() = d->record.spec();
  const v1::DeploymentStatus& st = d->record.status();
  stored.mutable_status()->set_revision(st.revision());
  stored.mutable_status()->set_desired_replicas(st.desired_replicas());
  stored.mutable_status()->set_created_unix_nanos(st.created_unix_nanos());
  stored.mutable_status()->set_updated_unix_nanos(st.updated_unix_nanos());
  stored.mutable_status()->set_last_request_unix_nanos(st.last_request_unix_nanos());
  stored.mutable_status()->set_image_digest(st.image_digest());
  batch_->Put(StoreKey(d->record.spec().tenant(), d->record.spec().name()), stored.SerializeAsString());
  dirty_ = true;
}

void DeploymentController::ReconcileAll() {
  dirty_ = false;
  const int64_t now = NowNs();
  for (auto& [key, d] : deployments_) Reconcile(&d, now);
  // What the rounds changed themselves needs no other round.
  dirty_ = false;
}

DeploymentController::GatewayLoad DeploymentController::LoadOf(const std::string& tenant, const std::string& model,
                                                               int64_t now_ns) const {
  GatewayLoad sum;
  auto it = load_.find(Key{tenant, model});
  if (it == load_.end()) return sum;
  const int64_t stale = options_->load_staleness_ms * kNsPerMs;
  for (const auto& [gateway, l] : it->second) {
    if (now_ns - l.at_ns > stale) continue;
    sum.outstanding += l.outstanding;
    sum.waiting += l.waiting;
    for (const auto& [replica, n] : l.by_replica) sum.by_replica[replica] += n;
    for (const auto& [replica, r] : l.routing) {
      GatewayLoad::Routing& into = sum.routing[replica];
      into.blocks += r.blocks;
      into.hit_blocks += r.hit_blocks;
      into.engine_load = std::max(into.engine_load, r.engine_load);  // every gateway scrapes the same engine
    }
    sum.at_ns = std::max(sum.at_ns, l.at_ns);
    sum.engine_waiting = std::max(sum.engine_waiting, l.engine_waiting);
    sum.queue_ms = std::max(sum.queue_ms, l.queue_ms);
  }
  return sum;
}

void DeploymentController::Autoscale(Entry* d, int64_t now_ns) {
  const v1::DeploymentSpec& spec = d->record.spec();
  v1::DeploymentStatus* st = d->record.mutable_status();
  GatewayLoad load = LoadOf(spec.tenant(), spec.served_model_name(), now_ns);
  const int32_t desired = st->desired_replicas();
  int32_t ready = 0;
  for (uint64_t seq : d->replicas) {
    auto j = jobs_->find(seq);
    if (j != jobs_->end() && !Stopping(j->second) && Ready(j->second)) ++ready;
  }
  const int32_t want = AutoscaleWant(spec, {load.outstanding, load.waiting, load.queue_ms}, now_ns,
                                     st->last_request_unix_nanos(), ready, desired);
  if (want >= desired) {
    d->low_since_ns = 0;
    if (want > desired) {
      spdlog::info("deployment '{}' scales up from {} to {} replicas (outstanding {}, waiting {}, engine queue {})",
                   spec.name(), desired, want, load.outstanding, load.waiting,
                   load.queue_ms < 0 ? std::string("unknown") : fmt::format("{:.1f} ms", load.queue_ms));
      st->set_desired_replicas(want);
      Persist(d);
    }
    return;
  }
  // Lower: only once it stayed lower for the window, to the highest count
  // it wanted meanwhile (a burst in the window keeps its replicas). Zero
  // comes at once: AutoscaleWant answers it only after
  // scale_down_idle_seconds without a request, a longer wait already.
  if (want == 0) {
    d->low_max = 0;
  } else if (d->low_since_ns == 0) {
    d->low_since_ns = now_ns;
    d->low_max = want;
    return;
  } else {
    d->low_max = std::max(d->low_max, want);
    if (now_ns - d->low_since_ns < options_->scale_down_window_ms * kNsPerMs) return;
  }
  spdlog::info("deployment '{}' scales down from {} to {} replicas", spec.name(), desired, d->low_max);
  st->set_desired_replicas(d->low_max);
  d->low_since_ns = 0;
  Persist(d);
}

void DeploymentController::Reconcile(Entry* d, int64_t now_ns) {
  const v1::DeploymentSpec& spec = d->record.spec();
  const int64_t revision = d->record.status().revision();
  if (Autoscaled(spec)) Autoscale(d, now_ns);
  const int32_t want = Desired(d->record);

  // 1. Drop the replicas that ended; count failures.
  std::vector<const v1::Job*> current, old;
  for (auto it = d->replicas.begin(); it != d->replicas.end();) {
    auto j = jobs_->find(*it);
    if (j == jobs_->end() || rpc::IsTerminal(j->second.status().state())) {
      if (j != jobs_->end() && j->second.status().state() == v1::JOB_STATE_FAILED &&
          j->second.spec().deployment_revision() == revision) {
        ++d->failures;
        d->last_failure_ns = now_ns;
        d->last_failure = fmt::format("replica {} failed: {}", j->second.id(), j->second.status().message());
        spdlog::warn("deployment '{}': {}", spec.name(), d->last_failure);
      }
      it = d->replicas.erase(it);
      continue;
    }
    const v1::Job* job = &j->second;
    if (!Stopping(*job)) (job->spec().deployment_revision() == revision ? current : old).push_back(job);
    // The revision's tag resolves once: the first replica's digest is what
    // every later one runs (JobLifecycle::SetRevisionDigest).
    if (spec.has_container() && d->record.status().image_digest().empty() &&
        job->spec().deployment_revision() == revision && !job->status().image_digest().empty()) {
      d->record.mutable_status()->set_image_digest(job->status().image_digest());
      spdlog::info("deployment '{}': revision {} runs image {}", spec.name(), revision, job->status().image_digest());
      Persist(d);
    }
    ++it;
  }
  auto count_ready = [](const std::vector<const v1::Job*>& v) {
    return static_cast<int32_t>(std::count_if(v.begin(), v.end(), [](const v1::Job* j) { return Ready(*j); }));
  };
  int32_t ready_current = count_ready(current);
  int32_t ready = ready_current + count_ready(old);
  if (ready_current > 0) d->failures = 0;
  auto cancel = [&](const v1::Job* job, const char* why) {
    spdlog::info("deployment '{}': stopping replica {} ({})", spec.name(), job->id(), why);
    hooks_.cancel(*job);
  };

  // 2. Surplus replicas of this revision: not-ready first, then the newest.
  if (static_cast<int32_t>(current.size()) > want) {
    std::stable_sort(current.begin(), current.end(), [](const v1::Job* a, const v1::Job* b) {
      if (Ready(*a) != Ready(*b)) return !Ready(*a);
      return SeqOf(a) > SeqOf(b);
    });
    while (static_cast<int32_t>(current.size()) > want) {
      if (Ready(*current.front())) {
        --ready;
        --ready_current;
      }
      cancel(current.front(), "scaled down");
      current.erase(current.begin());
    }
  }

  // 3. Older replicas: never below `want` ready.
  std::stable_sort(old.begin(), old.end(), [](const v1::Job* a, const v1::Job* b) { return !Ready(*a) && Ready(*b); });
  for (auto it = old.begin(); it != old.end();) {
    const v1::Job* job = *it;
    bool stop = Ready(*job) ? ready - 1 >= want : (ready_current > 0 || ready >= want);
    if (!stop) {
      ++it;
      continue;
    }
    if (Ready(*job)) --ready;
    cancel(job, "rolling update");
    it = old.erase(it);
  }

  // 4. New replicas of this revision.
  const int32_t limit = old.empty() ? want : want + 1;
  int32_t running = static_cast<int32_t>(current.size() + old.size());
  int32_t missing = std::min(want - static_cast<int32_t>(current.size()), limit - running);
  if (missing > 0 && d->failures > 0) {
    int64_t backoff_ms =
        std::min<int64_t>(options_->max_replace_backoff_ms, int64_t{1000} << std::min(d->failures - 1, 20));
    if (now_ns - d->last_failure_ns < backoff_ms * kNsPerMs) missing = 0;
  }
  d->submit_error.clear();
  for (int32_t i = 0; i < missing; ++i) {
    auto spec_or = ReplicaSpec(spec, revision, *options_);
    // Each replica its own secret, in its job's spec (so it survives a
    // restart and a failover); a replacement gets a fresh one.
    if (spec_or.ok()) {
      Result<std::string> key = auth::RandomBase64Url(kEngineKeyBytes);
      if (key.ok()) {
        spec_or->mutable_service()->set_api_key(std::move(*key));
      } else {
        spec_or = key.status();
      }
    }
    Result<uint64_t> seq = spec_or.ok() ? hooks_.submit(*spec_or) : Result<uint64_t>(spec_or.status());
    if (!seq.ok()) {
      d->submit_error = "cannot start a replica: " + seq.status().message();
      spdlog::warn("deployment '{}': {}", spec.name(), d->submit_error);
      break;
    }
    d->replicas.insert(*seq);
    spdlog::info("deployment '{}': starting replica {} (revision {})", spec.name(), FormatJobId(*seq), revision);
  }
}

v1::Deployment DeploymentController::View(const Entry& d) const {
  v1::Deployment out = d.record;
  v1::DeploymentStatus* st = out.mutable_status();
  const int64_t now = NowNs();
  GatewayLoad load = LoadOf(d.record.spec().tenant(), d.record.spec().served_model_name(), now);
  st->set_outstanding(load.outstanding);
  st->set_waiting(load.waiting);
  st->set_engine_waiting(load.engine_waiting);
  st->set_queue_ms(load.queue_ms);
  int32_t ready = 0;
  std::vector<std::string> why;
  for (uint64_t seq : d.replicas) {
    auto it = jobs_->find(seq);
    if (it == jobs_->end()) continue;
    const v1::Job& job = it->second;
    v1::DeploymentReplica* r = st->add_replicas();
    r->set_job_id(job.id());
    r->set_revision(job.spec().deployment_revision());
    r->set_state(job.status().state());
    r->set_node(job.status().allocation().node());
    if (job.status().replica_states_size() > 0) {
      const v1::ReplicaState& rs = job.status().replica_states(0);
      r->set_endpoint(rs.endpoint());
      r->set_ready(Ready(job));
      r->set_restarts(rs.restarts());
      r->set_reason(rs.not_ready_reason());
    }
    if (auto o = load.by_replica.find(job.id()); o != load.by_replica.end()) r->set_outstanding(o->second);
    r->set_expected_prefix_hit(-1);
    r->set_engine_load(-1);
    if (auto o = load.routing.find(job.id()); o != load.routing.end()) {
      if (o->second.blocks > 0) {
        r->set_expected_prefix_hit(static_cast<double>(o->second.hit_blocks) / static_cast<double>(o->second.blocks));
      }
      r->set_engine_load(o->second.engine_load);
    }
    if (Stopping(job)) {
      r->set_reason("stopping");
      continue;
    }
    if (r->ready()) {
      if (job.spec().deployment_revision() == d.record.status().revision()) ++ready;
      continue;
    }
    if (job.status().state() == v1::JOB_STATE_PENDING) {
      r->set_reason(hooks_.pending_reason(job));
      why.push_back(fmt::format("replica {} pending: {}", job.id(), r->reason()));
    } else if (job.status().state() == v1::JOB_STATE_BOUND) {
      why.push_back(fmt::format("replica {} starting on node '{}'", job.id(), r->node()));
    } else {
      if (r->reason().empty())
        r->set_reason(job.status().message().empty() ? "readiness probe has not passed yet" : job.status().message());
      why.push_back(fmt::format("replica {} not ready: {}", job.id(), r->reason()));
    }
  }
  st->set_ready_replicas(ready);
  if (!d.submit_error.empty()) why.insert(why.begin(), d.submit_error);
  if (d.failures > 0) why.push_back(d.last_failure);
  if (ready < st->desired_replicas() || !why.empty()) {
    std::string msg;
    if (ready < st->desired_replicas()) msg = fmt::format("{} of {} replicas ready", ready, st->desired_replicas());
    for (const std::string& w : why) msg += (msg.empty() ? "" : "; ") + w;
    constexpr size_t kMaxMessage = 4096;
    if (msg.size() > kMaxMessage) msg = msg.substr(0, kMaxMessage) + "...";
    st->set_message(std::move(msg));
  }
  return out;
}

Result<v1::Deployment> DeploymentController::Apply(const v1::DeploymentSpec& spec, bool replace) {
  const Key key{spec.tenant(), spec.name()};
  auto it = deployments_.find(key);
  if (it == deployments_.end() && replace) return NotFound(fmt::format("deployment '{}' not found", spec.name()));
  if (it != deployments_.end() && !replace) {
    return AlreadyExists(fmt::format("deployment '{}' already exists (apply with replace to change it)", spec.name()));
  }
  // The served name is the tenant's: another tenant's of the name is not
  // this one's business (a gateway routes by the key's tenant).
  for (const auto& [other_key, other] : deployments_) {
    if (other_key.first == spec.tenant() && other_key.second != spec.name() &&
        other.record.spec().served_model_name() == spec.served_model_name()) {
      return AlreadyExists(fmt::format("model name '{}' is served by deployment '{}' already", spec.served_model_name(),
                                       other_key.second));
    }
  }
  DROVER_ASSIGN_OR_RETURN(v1::JobSpec replica, ReplicaSpec(spec, 1, *options_));
  if (auto why = sched_->NeverFits(rpc::ToJobRequest("", replica))) {
    return FailedPrecondition(
        fmt::format("a replica of deployment '{}' can never fit on this cluster: {}", spec.name(), *why));
  }
  const int64_t now = NowNs();
  int32_t desired = spec.replicas();
  if (Autoscaled(spec)) desired = std::clamp(desired, spec.min_replicas(), spec.max_replicas());
  if (it == deployments_.end()) {
    Entry& d = deployments_[key];
    *d.record.mutable_spec() = spec;
    v1::DeploymentStatus* st = d.record.mutable_status();
    st->set_revision(1);
    st->set_desired_replicas(desired);
    st->set_created_unix_nanos(now);
    st->set_last_request_unix_nanos(now);
    spdlog::info("deployment '{}' created: model '{}', {} replicas", spec.name(), spec.served_model_name(), desired);
    Persist(&d);
    Reconcile(&d, now);
    return View(d);
  }
  Entry& d = it->second;
  v1::DeploymentStatus* st = d.record.mutable_status();
  if (TemplateChanged(d.record.spec(), spec)) {
    st->set_revision(st->revision() + 1);
    st->clear_image_digest();  // the new template's tag is resolved again
    d.failures = 0;
    spdlog::info("deployment '{}' changed: rolling to revision {}", spec.name(), st->revision());
  }
  const bool counts_changed = d.record.spec().replicas() != spec.replicas() ||
                              d.record.spec().min_replicas() != spec.min_replicas() ||
                              d.record.spec().max_replicas() != spec.max_replicas();
  if (counts_changed) st->set_desired_replicas(desired);
  if (Autoscaled(spec)) {
    st->set_desired_replicas(std::clamp(st->desired_replicas(), spec.min_replicas(), spec.max_replicas()));
  }
  *d.record.mutable_spec() = spec;
  d.low_since_ns = 0;
  Persist(&d);
  Reconcile(&d, now);
  return View(d);
}

std::string DeploymentController::ImageDigest(const std::string& tenant, const std::string& name,
                                              int64_t revision) const {
  auto it = deployments_.find(Key{tenant, name});
  if (it == deployments_.end() || it->second.record.status().revision() != revision) return {};
  return it->second.record.status().image_digest();
}

Result<v1::Deployment> DeploymentController::Get(const std::string& tenant, const std::string& name) const {
  auto it = deployments_.find(Key{tenant, name});
  if (it == deployments_.end()) return NotFound(fmt::format("deployment '{}' not found", name));
  return View(it->second);
}

std::vector<v1::Deployment> DeploymentController::List() const {
  std::vector<v1::Deployment> out;
  out.reserve(deployments_.size());
  for (const auto& [key, d] : deployments_) out.push_back(View(d));
  return out;
}

Result<v1::Deployment> DeploymentController::Scale(const std::string& tenant, const std::string& name,
                                                   int32_t replicas) {
  auto it = deployments_.find(Key{tenant, name});
  if (it == deployments_.end()) return NotFound(fmt::format("deployment '{}' not found", name));
  if (replicas < 0 || replicas > kMaxDeploymentReplicas) {
    return InvalidArgument(fmt::format("replicas {} is outside 0..{}", replicas, kMaxDeploymentReplicas));
  }
  Entry& d = it->second;
  v1::DeploymentSpec* spec = d.record.mutable_spec();
  int32_t desired = replicas;
  if (Autoscaled(*spec)) desired = std::clamp(replicas, spec->min_replicas(), spec->max_replicas());
  spec->set_replicas(replicas);
  d.record.mutable_status()->set_desired_replicas(desired);
  d.low_since_ns = 0;
  spdlog::info("deployment '{}' scaled to {} replicas", name, desired);
  Persist(&d);
  Reconcile(&d, NowNs());
  return View(d);
}

Result<v1::Deployment> DeploymentController::Delete(const std::string& tenant, const std::string& name) {
  auto it = deployments_.find(Key{tenant, name});
  if (it == deployments_.end()) return NotFound(fmt::format("deployment '{}' not found", name));
  Entry& d = it->second;
  for (uint64_t seq : d.replicas) {
    auto j = jobs_->find(seq);
    if (j != jobs_->end() && !rpc::IsTerminal(j->second.status().state())) hooks_.cancel(j->second);
  }
  d.record.mutable_status()->set_desired_replicas(0);
  v1::Deployment last = View(d);
  batch_->Delete(StoreKey(tenant, name));
  load_.erase(Key{tenant, d.record.spec().served_model_name()});
  deployments_.erase(it);
  spdlog::info("deployment '{}' deleted; its replicas are stopping", name);
  return last;
}

v1::EndpointsResponse DeploymentController::Endpoints() const {
  v1::EndpointsResponse out;
  for (const auto& [key, d] : deployments_) {
    const std::string& name = key.second;
    const v1::DeploymentSpec& spec = d.record.spec();
    v1::ServingModel* m = out.add_models();
    m->set_model(spec.served_model_name());
    m->set_deployment(name);
    m->set_tenant(spec.tenant());
    m->set_scales_from_zero(spec.min_replicas() == 0 && spec.max_replicas() > 0);
    m->set_created_unix_nanos(d.record.status().created_unix_nanos());
    *m->mutable_routing() = spec.routing();
    for (uint64_t seq : d.replicas) {
      auto j = jobs_->find(seq);
      if (j == jobs_->end() || !Ready(j->second)) continue;
      v1::ServingEndpoint* e = out.add_endpoints();
      e->set_model(spec.served_model_name());
      e->set_deployment(name);
      e->set_tenant(spec.tenant());
      e->set_replica(j->second.id());
      e->set_address(j->second.status().replica_states(0).endpoint());
      // ApiService::Endpoints keeps it for gateways and admins only.
      e->set_api_key(j->second.spec().service().api_key());
    }
  }
  return out;
}

void DeploymentController::ReportLoad(const v1::ReportLoadRequest& report) {
  const int64_t now = NowNs();
  // Only models that are deployed: a gateway cannot grow this map at will.
  std::map<std::string, std::vector<Entry*>> by_model;  // served name -> its tenants' deployments
  for (auto& [key, d] : deployments_) by_model[d.record.spec().served_model_name()].push_back(&d);
  for (const v1::ModelLoad& m : report.models()) {
    auto it = by_model.find(m.model());
    if (it == by_model.end()) continue;
    for (Entry* d : it->second) {
      const std::string& tenant = d->record.spec().tenant();
      // A gateway older than ModelLoad.tenant: each tenant's model of the
      // name counts the load, as before names were per tenant.
      if (!m.tenant().empty() && m.tenant() != tenant) continue;
      GatewayLoad& l = load_[Key{tenant, m.model()}][report.gateway()];
      l.outstanding = std::max<int64_t>(0, m.outstanding());
      l.waiting = std::max<int64_t>(0, m.waiting());
      l.by_replica = {m.outstanding_by_replica().begin(), m.outstanding_by_replica().end()};
      l.routing.clear();
      for (const auto& [replica, r] : m.routing_by_replica()) {
        l.routing[replica] = {r.prefix_blocks(), r.prefix_hit_blocks(), r.engine_load()};
      }
      l.engine_waiting = m.engine_waiting();
      l.queue_ms = m.queue_ms();
      l.at_ns = now;
      if (m.requests() > 0 || m.waiting() > 0 || m.outstanding() > 0) {
        d->record.mutable_status()->set_last_request_unix_nanos(now);
      }
    }
  }
  // Gateways gone quiet for long are forgotten.
  for (auto& [key, gateways] : load_) {
    std::erase_if(gateways,
                  [&](const auto& g) { return now - g.second.at_ns > 60 * options_->load_staleness_ms * kNsPerMs; });
  }
  // The controller runs after this batch: a request that waits for a
  // deployment at zero replicas gets one at once.
  dirty_ = true;
}

}  // namespace drover::server
