// Services and deployments in the control loop (control_loop_deployments.cc,
// docs/deployments.md): readiness into job status, replicas kept alive,
// rolling updates, scaling, auto-scaling on an injected clock, endpoints,
// and a restart of the server.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "drover/auth/authority.h"
#include "drover/common/ids.h"
#include "drover/common/metrics.h"
#include "drover/rpc/gpu_metrics.h"
#include "drover/server/api_service.h"
#include "drover/server/control_loop_test_fixture.h"
#include "drover/server/deployments.h"
#include "drover/server/edge.h"
#include "drover/server/rest.h"
#include "drover/server/rest_streams.h"

namespace drover::server::testing {
namespace {

class DeploymentTest : public ControlLoopTest {
 protected:
  // A REST request as a client on loopback sends it, with `token`.
  static http::Request RestRequest(const std::string& method, const std::string& path, const std::string& token,
                                   const std::string& body = "", std::map<std::string, std::string> query = {}) {
    http::Request r;
    r.method = method;
    r.path = path;
    r.query = std::move(query);
    r.body = body;
    r.headers["authorization"] = "Bearer " + token;
    if (!body.empty()) r.headers["content-type"] = "application/json";
    r.remote = "127.0.0.1:5555";
    return r;
  }
  // A token of `authority`'s, minted directly (no caller to authorise).
  static Result<std::string> Mint(auth::Authority& authority, const std::string& name, const std::string& tenant,
                                  auth::Role role) {
    auth::CreateTokenRequest cr;
    cr.name = name;
    cr.tenant = tenant;
    cr.role = role;
    return authority.MintInternal(cr);
  }
  static v1::DeploymentSpec DSpec(const std::string& name, int replicas, const std::string& tenant = "default") {
    v1::DeploymentSpec spec;
    spec.set_name(name);
    spec.set_tenant(tenant);
    spec.set_owner("alice");
    spec.set_model("/models/" + name + ".gguf");
    spec.set_engine("llama.cpp");
    spec.set_gpus(1);
    spec.set_replicas(replicas);
    Status s = NormalizeDeploymentSpec(&spec, DeploymentOptions());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return spec;
  }
  v1::Deployment Apply(const v1::DeploymentSpec& spec, bool replace = false) {
    return Must(loop_->ApplyDeployment(spec, replace));
  }
  v1::Deployment GetD(const std::string& name) {
    Must(loop_->Barrier());
    return Must(loop_->GetDeployment("default", name));
  }
  // The unfinished replica jobs of a deployment, in submission order.
  std::vector<v1::Job> Replicas(const std::string& name, bool include_stopping = false) {
    Must(loop_->Barrier());
    std::vector<v1::Job> out;
    for (const v1::Job& j : Jobs()) {
      if (j.spec().deployment() != name || rpc::IsTerminal(j.status().state())) continue;
      if (!include_stopping && j.status().state() == v1::JOB_STATE_CANCELLING) continue;
      out.push_back(j);
    }
    return out;
  }
  // The agent's report of a running service replica.
  void ReportService(const std::string& job_id, bool ready, const std::string& reason = "", int restarts = 0) {
    v1::Job job = Get(job_id);
    const std::string node = job.status().allocation().node();
    v1::StatusReport report;
    v1::WorkloadStatus* ws = report.add_workloads();
    ws->set_job_id(job_id);
    ws->set_workload_id(WorkloadOf(job_id));
    ws->set_state(v1::WORKLOAD_STATE_RUNNING);
    ws->set_start_time_unix_nanos(ToUnixNanos(clock_.Now()));
    ws->set_port(static_cast<int>(20000 + *ParseJobId(job_id)));
    ws->set_endpoint(fmt::format("{}:{}", node, ws->port()));
    ws->set_ready(ready);
    ws->set_restarts(restarts);
    ws->set_not_ready_reason(reason);
    loop_->HandleStatus(node, report);
    Must(loop_->Barrier());
  }
  // Ends a job the agent was told to stop (its process is gone).
  void Gone(const std::string& job_id) {
    v1::Job job = Get(job_id);
    Report(job.status().allocation().node(), job_id, v1::WORKLOAD_STATE_EXITED, -1, 15);
  }
  int ReadyCount(const std::string& name) {
    int n = 0;
    for (const v1::Job& j : Replicas(name, true)) {
      if (j.status().state() == v1::JOB_STATE_RUNNING && j.status().replica_states_size() > 0 &&
          j.status().replica_states(0).ready()) {
        ++n;
      }
    }
    return n;
  }
  void Tick() {
    Must(loop_->CheckDeployments());
    Must(loop_->Barrier());
  }
  v1::ReportLoadRequest Load(const std::string& model, int64_t outstanding, int64_t waiting, int64_t requests,
                             const std::string& gateway = "gw-1") {
    v1::ReportLoadRequest r;
    r.set_gateway(gateway);
    v1::ModelLoad* m = r.add_models();
    m->set_model(model);
    m->set_outstanding(outstanding);
    m->set_waiting(waiting);
    m->set_requests(requests);
    return r;
  }
};

TEST_F(DeploymentTest, ServiceReadinessIsStoredInTheJobStatus) {
  auto sink = Connect("n1", 4);
  v1::JobSpec spec = Spec(1);
  spec.mutable_service()->mutable_readiness()->set_http_path("/health");
  spec.mutable_service()->set_model("tiny");
  v1::Job job = Must(loop_->Submit(spec));
  ASSERT_TRUE(sink->WaitForJob(0, job.id()).has_value());
  auto desired = sink->WaitForJob(0, job.id());
  const v1::Workload& w = desired->workloads(0);
  EXPECT_EQ(w.service().readiness().http_path(), "/health");
  EXPECT_EQ(w.service().model(), "tiny");
  ASSERT_EQ(Get(job.id()).status().replica_states_size(), 1);

  ReportService(job.id(), false, "probe: connection refused");
  v1::Job running = Get(job.id());
  EXPECT_EQ(running.status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_FALSE(running.status().replica_states(0).ready());
  EXPECT_EQ(running.status().replica_states(0).not_ready_reason(), "probe: connection refused");

  ReportService(job.id(), true, "", 2);
  v1::Job ready = Get(job.id());
  EXPECT_TRUE(ready.status().replica_states(0).ready());
  EXPECT_EQ(ready.status().replica_states(0).restarts(), 2);
  EXPECT_EQ(ready.status().replica_states(0).port(), 20000 + static_cast<int>(*ParseJobId(job.id())));
  EXPECT_EQ(ready.status().replica_states(0).endpoint(), fmt::format("n1:{}", ready.status().replica_states(0).port()));
  EXPECT_TRUE(ready.status().replica_states(0).not_ready_reason().empty());
  // Committed: the store holds the readiness.
  bool stored = false;
  for (const v1::Job& j : StoredJobs()) {
    if (j.id() == job.id()) stored = j.status().replica_states(0).ready();
  }
  EXPECT_TRUE(stored);
}

TEST_F(DeploymentTest, ServiceNeverSucceedsAndIsQueuedAgainWhenItsNodeForgetsIt) {
  auto sink = Connect("n1", 1);
  v1::JobSpec spec = Spec(1);
  spec.mutable_service();
  v1::Job job = Must(loop_->Submit(spec));
  ReportService(job.id(), true);
  // A full report without it: the node lost it. A batch job would fail; a
  // service starts again (attempt 2), restarts not counted.
  v1::StatusReport full;
  full.set_full(true);
  loop_->HandleStatus("n1", full);
  Must(loop_->Barrier());
  v1::Job again = Get(job.id());
  EXPECT_EQ(again.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(again.status().attempt(), 2);
  EXPECT_EQ(again.status().restarts(), 0);
  // Its agent gives up on it (exit 0 included): it ends FAILED, not SUCCEEDED.
  Report("n1", job.id(), v1::WORKLOAD_STATE_EXITED, 0, 0, "gave up after 10 restarts");
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_FAILED);
}

TEST_F(DeploymentTest, AServiceOnALostNodeIsQueuedAgainWhateverItsRestartPolicy) {
  Connect("n1", 1);
  v1::JobSpec spec = Spec(1);  // restart_policy never
  spec.mutable_service();
  v1::Job job = Must(loop_->Submit(spec));
  ReportService(job.id(), true);
  lease_clock_.Advance(loop_->lease().ttl + std::chrono::milliseconds(1));
  Must(loop_->CheckLeases());
  v1::Job after = Get(job.id());
  EXPECT_EQ(after.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(after.status().restarts(), 0);
  EXPECT_EQ(after.status().node_losses(), 1);
  EXPECT_NE(after.status().message().find("node lost"), std::string::npos) << after.status().message();
}

TEST_F(DeploymentTest, ADeploymentRunsItsReplicasAndSaysWhyItIsNotReady) {
  Connect("n1", 4);
  v1::Deployment d = Apply(DSpec("llama", 2));
  EXPECT_EQ(d.status().revision(), 1);
  EXPECT_EQ(d.status().desired_replicas(), 2);
  std::vector<v1::Job> replicas = Replicas("llama");
  ASSERT_EQ(replicas.size(), 2u);
  for (const v1::Job& j : replicas) {
    EXPECT_TRUE(j.spec().has_service());
    EXPECT_EQ(j.spec().priority(), DeploymentOptions().service_priority);
    EXPECT_EQ(j.spec().service().model(), "llama");
    EXPECT_EQ(j.spec().service().readiness().http_path(), "/health");
    EXPECT_EQ(j.spec().deployment_revision(), 1);
    EXPECT_EQ(j.spec().command(0), "sh");
    EXPECT_NE(j.spec().command(2).find("llama-server -m \"$m\" --port \"$DROVER_PORT\""), std::string::npos);
    EXPECT_EQ(j.spec().command(4), "/models/llama.gguf");
  }
  ReportService(replicas[0].id(), true);
  ReportService(replicas[1].id(), false, "probe: GET /health: 503 (never became ready in 600s)");
  v1::Deployment view = GetD("llama");
  EXPECT_EQ(view.status().ready_replicas(), 1);
  EXPECT_NE(view.status().message().find("replica " + replicas[1].id() +
                                         " not ready: probe: GET /health: 503 (never became ready in 600s)"),
            std::string::npos)
      << view.status().message();
  ReportService(replicas[1].id(), true);
  view = GetD("llama");
  EXPECT_EQ(view.status().ready_replicas(), 2);
  EXPECT_TRUE(view.status().message().empty()) << view.status().message();
  v1::EndpointsResponse eps = Must(loop_->ServingEndpoints());
  ASSERT_EQ(eps.models_size(), 1);
  EXPECT_EQ(eps.models(0).model(), "llama");
  EXPECT_FALSE(eps.models(0).scales_from_zero());
  EXPECT_EQ(eps.models(0).routing().policy(), "prefix-load");  // the default, for the gateways
  EXPECT_EQ(eps.models(0).routing().load_bound(), 12);
  EXPECT_EQ(eps.endpoints_size(), 2);
}

TEST_F(DeploymentTest, TheGatewaysPrefixHitsShowPerReplica) {
  Connect("n1", 4);
  Apply(DSpec("chat", 2));
  std::vector<v1::Job> rs = Replicas("chat");
  ASSERT_EQ(rs.size(), 2u);
  for (const char* gw : {"gw-1", "gw-2"}) {
    v1::ReportLoadRequest r = Load("chat", 0, 0, 1, gw);
    v1::ReplicaRouting& a = (*r.mutable_models(0)->mutable_routing_by_replica())[rs[0].id()];
    a.set_prefix_blocks(100);
    a.set_prefix_hit_blocks(std::string(gw) == "gw-1" ? 90 : 70);
    a.set_engine_load(std::string(gw) == "gw-1" ? 3 : 5);
    Must(loop_->ReportLoad(r));
  }
  Tick();
  v1::Deployment d = GetD("chat");
  ASSERT_EQ(d.status().replicas_size(), 2);
  for (const v1::DeploymentReplica& r : d.status().replicas()) {
    if (r.job_id() == rs[0].id()) {
      EXPECT_DOUBLE_EQ(r.expected_prefix_hit(), 0.8);  // 160 of 200 blocks, both gateways
      EXPECT_EQ(r.engine_load(), 5);                   // the same engine: the latest, highest reading
    } else {
      EXPECT_EQ(r.expected_prefix_hit(), -1);  // nothing routed there by prefix
      EXPECT_EQ(r.engine_load(), -1);
    }
  }
}

TEST_F(DeploymentTest, AFailedReplicaIsReplacedAfterABackOff) {
  Connect("n1", 4);
  Apply(DSpec("svc", 2));
  std::vector<v1::Job> replicas = Replicas("svc");
  ASSERT_EQ(replicas.size(), 2u);
  Report("n1", replicas[0].id(), v1::WORKLOAD_STATE_FAILED_TO_START, 127, 0, "llama-server: not found");
  EXPECT_EQ(StateOf(replicas[0].id()), v1::JOB_STATE_FAILED);
  Tick();
  EXPECT_EQ(Replicas("svc").size(), 1u);  // backing off
  EXPECT_NE(GetD("svc").status().message().find("llama-server: not found"), std::string::npos);
  clock_.Advance(std::chrono::seconds(1));
  Tick();
  std::vector<v1::Job> now = Replicas("svc");
  ASSERT_EQ(now.size(), 2u);
  EXPECT_NE(now[1].id(), replicas[0].id());
}

TEST_F(DeploymentTest, ARollingUpdateKeepsTheReadyCountAndEndsOnTheNewRevision) {
  Connect("n1", 4);
  v1::DeploymentSpec spec = DSpec("roll", 2);
  Apply(spec);
  for (const v1::Job& j : Replicas("roll")) ReportService(j.id(), true);
  ASSERT_EQ(ReadyCount("roll"), 2);
  (*spec.mutable_env())["VERSION"] = "2";
  v1::Deployment d = Apply(spec, true);
  EXPECT_EQ(d.status().revision(), 2);
  for (int step = 0; step < 20; ++step) {
    ASSERT_GE(ReadyCount("roll"), 2) << "step " << step;
    std::vector<v1::Job> all = Replicas("roll", true);
    bool done = all.size() == 2 && std::all_of(all.begin(), all.end(), [](const v1::Job& j) {
                  return j.spec().deployment_revision() == 2 && j.status().replica_states_size() > 0 &&
                         j.status().replica_states(0).ready();
                });
    if (done) break;
    ASSERT_LE(Replicas("roll").size(), 3u) << "more than one surge replica";
    // The agent: stopped replicas exit, new ones turn ready, one at a time.
    bool acted = false;
    for (const v1::Job& j : all) {
      if (j.status().state() == v1::JOB_STATE_CANCELLING) {
        Gone(j.id());
        acted = true;
        break;
      }
    }
    if (acted) continue;
    for (const v1::Job& j : all) {
      if (j.spec().deployment_revision() == 2 && rpc::HoldsGpus(j.status().state()) &&
          !(j.status().replica_states_size() > 0 && j.status().replica_states(0).ready())) {
        ReportService(j.id(), true);
        acted = true;
        break;
      }
    }
    ASSERT_TRUE(acted) << "the rollout is stuck at step " << step;
  }
  std::vector<v1::Job> final_set = Replicas("roll", true);
  ASSERT_EQ(final_set.size(), 2u);
  for (const v1::Job& j : final_set) EXPECT_EQ(j.spec().deployment_revision(), 2);
  EXPECT_EQ(GetD("roll").status().ready_replicas(), 2);
}

TEST_F(DeploymentTest, ScalesUpAndDownStoppingNotReadyReplicasFirst) {
  Connect("n1", 4);
  Apply(DSpec("s", 1));
  std::vector<v1::Job> first = Replicas("s");
  ASSERT_EQ(first.size(), 1u);
  ReportService(first[0].id(), true);
  Must(loop_->ScaleDeployment("default", "s", 3));
  std::vector<v1::Job> three = Replicas("s");
  ASSERT_EQ(three.size(), 3u);
  ReportService(three[1].id(), true);
  // three[2] is not ready, three[1] is the newest ready one.
  Must(loop_->ScaleDeployment("default", "s", 1));
  std::vector<v1::Job> one = Replicas("s");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id(), first[0].id());
  EXPECT_EQ(StateOf(three[2].id()), v1::JOB_STATE_CANCELLING);
  EXPECT_EQ(Fails(loop_->ScaleDeployment("default", "nope", 1)).code(), Code::kNotFound);
  EXPECT_EQ(Fails(loop_->ScaleDeployment("default", "s", -1)).code(), Code::kInvalidArgument);
}

TEST_F(DeploymentTest, DeleteStopsEveryReplicaAndForgetsTheDeployment) {
  Connect("n1", 4);
  Apply(DSpec("gone", 2));
  std::vector<v1::Job> replicas = Replicas("gone");
  ASSERT_EQ(replicas.size(), 2u);
  Must(loop_->DeleteDeployment("default", "gone"));
  EXPECT_TRUE(Replicas("gone").empty());
  for (const v1::Job& j : replicas) EXPECT_EQ(StateOf(j.id()), v1::JOB_STATE_CANCELLING);
  EXPECT_EQ(Fails(loop_->GetDeployment("default", "gone")).code(), Code::kNotFound);
  auto stored = store_->Range("/deployments/");
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(stored->kvs.empty());
  // The name is free again.
  Apply(DSpec("gone", 1));
}

TEST_F(DeploymentTest, ApplyRefusesDuplicatesAndWhatCanNeverFit) {
  Connect("n1", 2);
  Apply(DSpec("a", 1));
  EXPECT_EQ(Fails(loop_->ApplyDeployment(DSpec("a", 1), false)).code(), Code::kAlreadyExists);
  EXPECT_EQ(Fails(loop_->ApplyDeployment(DSpec("b", 1), true)).code(), Code::kNotFound);
  v1::DeploymentSpec same_model = DSpec("c", 1);
  same_model.set_served_model_name("a");
  Status dup = Fails(loop_->ApplyDeployment(same_model, false));
  EXPECT_EQ(dup.code(), Code::kAlreadyExists);
  EXPECT_NE(dup.message().find("model name 'a'"), std::string::npos) << dup.message();
  v1::DeploymentSpec big = DSpec("big", 1);
  big.set_gpus(8);
  EXPECT_EQ(Fails(loop_->ApplyDeployment(big, false)).code(), Code::kFailedPrecondition);
}

TEST_F(DeploymentTest, AutoScalesOnLoadAndDownAfterTheWindow) {
  Connect("n1", 8);
  v1::DeploymentSpec spec = DSpec("auto", 1);
  spec.set_min_replicas(1);
  spec.set_max_replicas(4);
  spec.set_target_outstanding(2);
  Apply(spec);
  ASSERT_EQ(Replicas("auto").size(), 1u);
  Must(loop_->ReportLoad(Load("auto", 7, 0, 10)));
  Tick();
  EXPECT_EQ(GetD("auto").status().desired_replicas(), 4);  // ceil(7 / 2)
  EXPECT_EQ(Replicas("auto").size(), 4u);
  EXPECT_EQ(GetD("auto").status().outstanding(), 7);
  // Two gateways add up.
  Must(loop_->ReportLoad(Load("auto", 1, 0, 1, "gw-1")));
  Must(loop_->ReportLoad(Load("auto", 2, 0, 1, "gw-2")));
  Tick();
  EXPECT_EQ(GetD("auto").status().outstanding(), 3);
  // Lower load: not before the window.
  EXPECT_EQ(GetD("auto").status().desired_replicas(), 4);
  clock_.Advance(std::chrono::seconds(10));
  Must(loop_->ReportLoad(Load("auto", 1, 0, 1, "gw-1")));
  Tick();
  EXPECT_EQ(GetD("auto").status().desired_replicas(), 4);
  clock_.Advance(std::chrono::seconds(25));
  Must(loop_->ReportLoad(Load("auto", 1, 0, 1, "gw-1")));
  Tick();
  // The highest it wanted in the window: ceil(3 / 2) = 2.
  EXPECT_EQ(GetD("auto").status().desired_replicas(), 2);
  EXPECT_EQ(Replicas("auto").size(), 2u);
}

// Few requests in flight but long queues in the engines (each replica
// batches few requests): the queue time adds replicas one at a time, each
// once the one before is ready, and the outstanding rule takes over again
// when the queues are short.
TEST_F(DeploymentTest, AutoScalesOnTheEnginesQueueTime) {
  Connect("n1", 8);
  v1::DeploymentSpec spec = DSpec("q", 1);
  spec.set_min_replicas(1);
  spec.set_max_replicas(3);
  spec.set_target_outstanding(100);
  spec.set_target_queue_ms(500);
  Apply(spec);
  ASSERT_EQ(Replicas("q").size(), 1u);
  ReportService(Replicas("q")[0].id(), true);
  auto report = [&](double queue_ms) {
    v1::ReportLoadRequest r = Load("q", 2, 0, 5);
    r.mutable_models(0)->set_queue_ms(queue_ms);
    r.mutable_models(0)->set_engine_waiting(3);
    Must(loop_->ReportLoad(r));
    Tick();
    return GetD("q").status().desired_replicas();
  };
  EXPECT_EQ(report(900), 2);
  EXPECT_EQ(GetD("q").status().queue_ms(), 900);
  EXPECT_EQ(GetD("q").status().engine_waiting(), 3);
  EXPECT_EQ(report(900), 2);  // the second is not ready yet: wait for it
  ASSERT_EQ(Replicas("q").size(), 2u);
  ReportService(Replicas("q")[1].id(), true);
  EXPECT_EQ(report(900), 3);
  ReportService(Replicas("q")[2].id(), true);
  EXPECT_EQ(report(900), 3);  // max
  // Short queues: ceil(2 / 100) = 1 after the scale-down window.
  EXPECT_EQ(report(100), 3);
  clock_.Advance(std::chrono::seconds(35));
  EXPECT_EQ(report(100), 1);
  // A gateway that does not scrape the engines: no queue time, no step.
  EXPECT_EQ(report(-1), 1);
  EXPECT_EQ(GetD("q").status().queue_ms(), -1);
}

TEST_F(DeploymentTest, ScalesToZeroWhenIdleAndBackWhenARequestWaits) {
  Connect("n1", 4);
  v1::DeploymentSpec spec = DSpec("zero", 1);
  spec.set_min_replicas(0);
  spec.set_max_replicas(2);
  spec.set_scale_down_idle_seconds(60);
  Apply(spec);
  ASSERT_EQ(Replicas("zero").size(), 1u);
  clock_.Advance(std::chrono::seconds(30));
  Tick();
  EXPECT_EQ(Replicas("zero").size(), 1u);  // not idle long enough
  clock_.Advance(std::chrono::seconds(31));
  Tick();
  EXPECT_EQ(GetD("zero").status().desired_replicas(), 0);
  EXPECT_TRUE(Replicas("zero").empty());
  v1::EndpointsResponse eps = Must(loop_->ServingEndpoints());
  ASSERT_EQ(eps.models_size(), 1);
  EXPECT_TRUE(eps.models(0).scales_from_zero());
  EXPECT_EQ(eps.endpoints_size(), 0);
  // A request waits at a gateway: one replica at once.
  Must(loop_->ReportLoad(Load("zero", 0, 1, 0)));
  Must(loop_->Barrier());
  EXPECT_EQ(GetD("zero").status().desired_replicas(), 1);
  EXPECT_EQ(Replicas("zero").size(), 1u);
}

TEST_F(DeploymentTest, DeploymentsAndReplicasSurviveARestart) {
  Connect("n1", 4);
  v1::DeploymentSpec spec = DSpec("keep", 2);
  Apply(spec);
  std::vector<v1::Job> replicas = Replicas("keep");
  ASSERT_EQ(replicas.size(), 2u);
  ReportService(replicas[0].id(), true);
  (*spec.mutable_env())["V"] = "2";
  Apply(spec, true);  // revision 2 rolls
  ASSERT_NO_FATAL_FAILURE(Restart());
  Must(loop_->Barrier());
  v1::Deployment d = GetD("keep");
  EXPECT_EQ(d.status().revision(), 2);
  EXPECT_EQ(d.status().desired_replicas(), 2);
  std::vector<v1::Job> after = Replicas("keep");
  // The same replicas (and the surge one), not new ones.
  for (const v1::Job& j : replicas) {
    EXPECT_TRUE(std::any_of(after.begin(), after.end(), [&](const v1::Job& a) { return a.id() == j.id(); }));
  }
  EXPECT_EQ(after.size(), 3u);
  EXPECT_TRUE(after[0].status().replica_states(0).ready());
}

// Issue 37: each replica has its own secret, made by the server and kept
// in its job's spec (so in the store), which its agent gets (to hand to the
// engine) and gateways and admins get with the endpoints; no job view
// shows it, nor a user's or viewer's endpoints; a replacement replica gets
// a fresh one, and a restart keeps them.
TEST_F(DeploymentTest, EachReplicaHasASecretOnlyItsAgentAndTheGatewaysGet) {
  auto sink = Connect("n1", 4);
  const auth::Principal alice{"t1", "alice", "team-a", auth::Role::kUser, "", ""};
  const auth::Principal viewer{"t3", "val", "team-a", auth::Role::kViewer, "", ""};
  const auth::Principal admin{"t4", "root", "default", auth::Role::kAdmin, "", ""};
  const auth::Principal gateway{"t5", "gw", "default", auth::Role::kGateway, "", ""};
  Apply(DSpec("keyed", 2, "team-a"));
  // job id -> its secret, as the store holds it
  auto stored = [&] {
    std::map<std::string, std::string> out;
    for (const v1::Job& j : StoredJobs()) {
      if (j.spec().deployment() == "keyed" && !rpc::IsTerminal(j.status().state()))
        out[j.id()] = j.spec().service().api_key();
    }
    return out;
  };
  const std::map<std::string, std::string> secret = stored();
  ASSERT_EQ(secret.size(), 2u);
  std::set<std::string> distinct;
  for (const auto& [id, key] : secret) {
    EXPECT_EQ(key.size(), 43u) << id;  // 32 random bytes, base64url
    EXPECT_TRUE(rpc::ValidateEngineKey(key).ok()) << id;
    distinct.insert(key);
  }
  EXPECT_EQ(distinct.size(), 2u) << "each replica has its own";
  // Its agent gets it, to hand to the engine.
  for (const auto& [id, key] : secret) {
    auto desired = sink->WaitForJob(0, id);
    ASSERT_TRUE(desired.has_value());
    for (const v1::Workload& w : desired->workloads()) {
      if (w.job_id() == id) {
        EXPECT_EQ(w.service().api_key(), key);
      }
    }
  }
  {
    ApiService api(loop_.get(), nullptr, nullptr, nullptr);
    // No job view has it: the loop's reads, and the API's for the tenant's
    // user and for an admin (GetJob, ListJobs: gRPC, REST, the CLI and the
    // dashboard all read these).
    auto shows = [&](const v1::Job& j) {
      const std::string text = j.SerializeAsString();
      for (const auto& [id, key] : secret) {
        if (text.find(key) != std::string::npos) return true;
      }
      return !j.spec().service().api_key().empty();
    };
    for (const v1::Job& j : Replicas("keyed")) EXPECT_FALSE(shows(j)) << j.id();
    for (const auto& [id, key] : secret) {
      EXPECT_FALSE(shows(Get(id))) << id;
      v1::GetJobRequest get;
      get.set_id(id);
      for (const auth::Principal* who : {&alice, &admin}) {
        auto got = api.GetJob(*who, get);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_FALSE(shows(*got)) << id << " to " << who->name;
      }
    }
    for (const auth::Principal* who : {&alice, &admin}) {
      auto listed = api.ListJobs(*who, v1::ListJobsRequest());
      ASSERT_TRUE(listed.ok()) << listed.status().ToString();
      EXPECT_EQ(listed->jobs_size(), 2);
      for (const v1::Job& j : listed->jobs()) EXPECT_FALSE(shows(j)) << j.id() << " to " << who->name;
    }
    // The endpoints once ready: the secrets for a gateway and an admin;
    // where the replicas are, not how to call them, for the tenant's own.
    for (const auto& [id, key] : secret) ReportService(id, true);
    auto keys_of = [&](const auth::Principal& who) {
      std::map<std::string, std::string> out;
      auto eps = api.Endpoints(who);
      EXPECT_TRUE(eps.ok()) << eps.status().ToString();
      if (eps.ok()) {
        for (const v1::ServingEndpoint& e : eps->endpoints()) out[e.replica()] = e.api_key();
      }
      return out;
    };
    std::map<std::string, std::string> blank;
    for (const auto& [id, key] : secret) blank[id] = "";
    EXPECT_EQ(keys_of(gateway), secret);
    EXPECT_EQ(keys_of(admin), secret);
    EXPECT_EQ(keys_of(alice), blank);
    EXPECT_EQ(keys_of(viewer), blank);
    // A job of a user's own cannot name one: it is the server's to make.
    v1::SubmitJobRequest own;
    *own.mutable_spec() = Spec(1);
    own.mutable_spec()->clear_tenant();  // the caller's
    own.mutable_spec()->mutable_service()->set_api_key(std::string(43, 'a'));
    auto refused = api.Submit(alice, own);
    EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << refused.status().ToString();
    EXPECT_NE(refused.status().message().find("api_key is set by the server"), std::string::npos)
        << refused.status().ToString();
  }
  // A failed replica's replacement gets a fresh secret.
  const std::string failed = secret.begin()->first;
  Report("n1", failed, v1::WORKLOAD_STATE_FAILED_TO_START, 127, 0, "engine: not found");
  Tick();
  clock_.Advance(std::chrono::seconds(1));
  Tick();
  std::map<std::string, std::string> now = stored();
  ASSERT_EQ(now.size(), 2u);
  ASSERT_FALSE(now.contains(failed));
  for (const auto& [id, key] : now) {
    if (secret.contains(id)) {
      EXPECT_EQ(key, secret.at(id));
    } else {
      EXPECT_EQ(key.size(), 43u);
      EXPECT_EQ(distinct.count(key), 0u) << "the replacement has a secret of its own";
    }
  }
  // A restart (or a failover: it is the store's) keeps every secret, and the
  // gateways get the same ones.
  ASSERT_NO_FATAL_FAILURE(Restart());
  Must(loop_->Barrier());
  EXPECT_EQ(stored(), now);
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  auto eps = api.Endpoints(gateway);
  ASSERT_TRUE(eps.ok()) << eps.status().ToString();
  ASSERT_EQ(eps->endpoints_size(), 1);  // the ready one
  EXPECT_EQ(eps->endpoints(0).api_key(), now.at(eps->endpoints(0).replica()));
}

// The REST job views (what the dashboard and `drover job -o json` show)
// carry no replica secret either.
TEST_F(DeploymentTest, TheRestJobViewsHaveNoSecret) {
  Connect("n1", 4);
  auth::Authority authority(store_.get(), &clock_);
  auto admin = Mint(authority, "root", "default", auth::Role::kAdmin);
  ASSERT_TRUE(admin.ok());
  ApiService api(loop_.get(), nullptr, &authority, nullptr);
  Edge edge(&authority, &clock_, SecurityOptions{});
  metrics::Registry metrics;
  RestStreams streams(&api);
  http::Handler handler = MakeRestHandler({&api, &edge, &authority, [] { return Status::Ok(); }, &metrics, &streams});
  auto get = [&](const std::string& path) { return handler(RestRequest("GET", path, *admin)); };
  Apply(DSpec("web", 1));
  std::string id, key;
  for (const v1::Job& j : StoredJobs()) {
    if (j.spec().deployment() == "web") {
      id = j.id();
      key = j.spec().service().api_key();
    }
  }
  ASSERT_FALSE(key.empty());
  for (const std::string& path : std::vector<std::string>{"/api/v1/jobs", "/api/v1/jobs/" + id}) {
    http::Response r = get(path);
    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_NE(r.body.find(id), std::string::npos) << path;
    EXPECT_EQ(r.body.find(key), std::string::npos) << path << " shows the replica's secret";
    // The field, where the encoder prints it, is empty.
    for (size_t at = r.body.find("\"apiKey\""); at != std::string::npos; at = r.body.find("\"apiKey\"", at + 1)) {
      size_t v = r.body.find_first_not_of(": ", at + 8);
      EXPECT_EQ(r.body.compare(v, 2, "\"\""), 0) << r.body.substr(at, 60);
    }
  }
}

// A replica that an older server made has no secret: it keeps serving
// without one (the agent starts it without DROVER_ENGINE_API_KEY, and the
// gateways get it with an empty key, so they send no Authorization).
TEST_F(DeploymentTest, AReplicaWithoutASecretKeepsServing) {
  Connect("n1", 4);
  Apply(DSpec("old", 1));
  std::vector<v1::Job> replicas = Replicas("old");
  ASSERT_EQ(replicas.size(), 1u);
  const std::string id = replicas[0].id();
  ReportService(id, true);
  // The job as an older server stored it.
  Must(loop_->Barrier());
  loop_->Stop();
  auto range = store_->Range("/jobs/");
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  std::vector<store::Op> ops;
  for (const store::KeyValue& kv : range->kvs) {
    v1::Job job;
    ASSERT_TRUE(job.ParseFromString(kv.value));
    if (job.id() != id) continue;
    ASSERT_FALSE(job.spec().service().api_key().empty());
    job.mutable_spec()->mutable_service()->clear_api_key();
    ops.push_back(store::Op::Put(kv.key, job.SerializeAsString()));
  }
  ASSERT_EQ(ops.size(), 1u);
  ASSERT_TRUE(store_->Txn({}, ops, {}).ok());
  ASSERT_NO_FATAL_FAILURE(Restart());
  auto sink = Connect("n1", 4);
  Tick();
  // Still the deployment's replica, not replaced; routed, with no secret.
  replicas = Replicas("old");
  ASSERT_EQ(replicas.size(), 1u);
  EXPECT_EQ(replicas[0].id(), id);
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  const auth::Principal gateway{"t5", "gw", "default", auth::Role::kGateway, "", ""};
  auto eps = api.Endpoints(gateway);
  ASSERT_TRUE(eps.ok()) << eps.status().ToString();
  ASSERT_EQ(eps->endpoints_size(), 1);
  EXPECT_EQ(eps->endpoints(0).replica(), id);
  EXPECT_TRUE(eps->endpoints(0).api_key().empty());
  // Its agent is told to run it as before, without a secret.
  auto desired = sink->WaitForJob(0, id);
  ASSERT_TRUE(desired.has_value());
  for (const v1::Workload& w : desired->workloads()) {
    if (w.job_id() == id) {
      EXPECT_TRUE(w.service().api_key().empty());
    }
  }
}

TEST_F(DeploymentTest, TheApiChecksRolesTenantsAndSpecs) {
  Connect("n1", 4);
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  auth::Principal alice{"t1", "alice", "team-a", auth::Role::kUser, "", ""};
  auth::Principal bob{"t2", "bob", "team-b", auth::Role::kUser, "", ""};
  auth::Principal viewer{"t3", "val", "team-a", auth::Role::kViewer, "", ""};
  auth::Principal admin{"t4", "root", "default", auth::Role::kAdmin, "", ""};
  v1::ApplyDeploymentRequest req;
  req.mutable_spec()->set_name("chat");
  req.mutable_spec()->set_model("/m/chat.gguf");
  req.mutable_spec()->set_engine("vllm");
  req.mutable_spec()->set_replicas(1);
  EXPECT_EQ(api.ApplyDeployment(viewer, req).status().code(), Code::kPermissionDenied);
  auto created = api.ApplyDeployment(alice, req);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->spec().tenant(), "team-a");
  EXPECT_EQ(created->spec().owner(), "alice");
  // Bob's tenant sees nothing of it.
  v1::GetDeploymentRequest get;
  get.set_name("chat");
  EXPECT_EQ(api.GetDeployment(bob, get).status().code(), Code::kNotFound);
  EXPECT_TRUE(api.GetDeployment(viewer, get).ok());
  v1::ScaleDeploymentRequest scale;
  scale.set_name("chat");
  scale.set_replicas(2);
  EXPECT_EQ(api.ScaleDeployment(bob, scale).status().code(), Code::kNotFound);
  v1::ApplyDeploymentRequest replace = req;
  replace.set_replace(true);
  EXPECT_EQ(api.ApplyDeployment(bob, replace).status().code(), Code::kNotFound);
  EXPECT_EQ(api.ListDeployments(bob)->deployments_size(), 0);
  EXPECT_EQ(api.ListDeployments(admin)->deployments_size(), 1);
  // Endpoints: the model for its tenant and admins only.
  EXPECT_EQ(api.Endpoints(alice)->models_size(), 1);
  EXPECT_EQ(api.Endpoints(bob)->models_size(), 0);
  EXPECT_EQ(api.Endpoints(admin)->models_size(), 1);
  // Load reports and key resolution are for gateways (admins).
  v1::ReportLoadRequest load;
  load.set_gateway("gw");
  EXPECT_EQ(api.ReportLoad(alice, load).status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(api.ReportLoad(admin, load).ok());
  v1::ReportLoadRequest bad_load = load;
  bad_load.add_models()->set_model("chat");
  bad_load.mutable_models(0)->set_outstanding(-1);
  EXPECT_EQ(api.ReportLoad(admin, bad_load).status().code(), Code::kInvalidArgument);
  // The engines' queue: -1 (not known) or a sane value.
  for (double queue_ms :
       {-2.0, 2e9, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    v1::ReportLoadRequest q = load;
    q.add_models()->set_model("chat");
    q.mutable_models(q.models_size() - 1)->set_queue_ms(queue_ms);
    EXPECT_EQ(api.ReportLoad(admin, q).status().code(), Code::kInvalidArgument) << queue_ms;
  }
  v1::ReportLoadRequest waiting = load;
  waiting.add_models()->set_model("chat");
  waiting.mutable_models(waiting.models_size() - 1)->set_engine_waiting(-5);
  EXPECT_EQ(api.ReportLoad(admin, waiting).status().code(), Code::kInvalidArgument);
  waiting.mutable_models(waiting.models_size() - 1)->set_engine_waiting(-1);
  waiting.mutable_models(waiting.models_size() - 1)->set_queue_ms(-1);
  EXPECT_TRUE(api.ReportLoad(admin, waiting).ok());
  v1::ResolveKeyRequest key;
  EXPECT_EQ(api.ResolveKey(alice, key).status().code(), Code::kPermissionDenied);
  // A gateway token: every tenant's endpoints, load reports and keys (this
  // ApiService has no authority: the key is refused past the role check),
  // and nothing else.
  auth::Principal gateway{"t5", "gw", "default", auth::Role::kGateway, "", ""};
  auto routed = api.Endpoints(gateway);
  ASSERT_TRUE(routed.ok()) << routed.status().ToString();
  EXPECT_EQ(routed->models_size(), 1);
  EXPECT_TRUE(api.ReportLoad(gateway, load).ok());
  EXPECT_EQ(api.ResolveKey(gateway, key).status().code(), Code::kUnimplemented);
  EXPECT_EQ(api.ListDeployments(gateway).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(api.GetDeployment(gateway, get).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(api.ApplyDeployment(gateway, req).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(api.ScaleDeployment(gateway, scale).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(api.ServingUsage(gateway).status().code(), Code::kPermissionDenied);
  // Usage: each gateway's last report, summed per (tenant, model, key); a
  // tenant's viewer sees its rows only; bad rows are refused and change
  // nothing.
  auto row = [](v1::ReportLoadRequest* r, const std::string& tenant, const std::string& key_id, int64_t requests,
                int64_t prompt, double p50, double p99) {
    v1::GatewayUsage* u = r->add_usage();
    u->set_tenant(tenant);
    u->set_model("chat");
    u->set_key(key_id);
    u->set_requests(requests);
    u->set_errors(1);
    u->set_prompt_tokens(prompt);
    u->set_completion_tokens(2 * prompt);
    u->set_latency_p50_ms(p50);
    u->set_latency_p99_ms(p99);
  };
  v1::ReportLoadRequest gw1;
  gw1.set_gateway("gw-1");
  row(&gw1, "team-a", "k1", 10, 100, 2.0, 9.0);
  row(&gw1, "team-b", "k2", 5, 50, 1.0, 3.0);
  v1::ReportLoadRequest gw2;
  gw2.set_gateway("gw-2");
  row(&gw2, "team-a", "k1", 30, 300, 4.0, 7.0);
  ASSERT_TRUE(api.ReportLoad(gateway, gw1).ok());
  ASSERT_TRUE(api.ReportLoad(gateway, gw2).ok());
  gw1.mutable_usage(0)->set_requests(12);  // gw-1's next report replaces its last
  ASSERT_TRUE(api.ReportLoad(gateway, gw1).ok());
  auto all = api.ServingUsage(admin);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  nlohmann::json u = nlohmann::json::parse(*all);
  EXPECT_EQ(u["gateways"], 3);  // gw (no usage yet), gw-1, gw-2
  ASSERT_EQ(u["usage"].size(), 2u) << *all;
  const nlohmann::json& a = u["usage"][0];
  EXPECT_EQ(a["tenant"], "team-a");
  EXPECT_EQ(a["requests"], 42);
  EXPECT_EQ(a["errors"], 2);
  EXPECT_EQ(a["prompt_tokens"], 400);
  EXPECT_EQ(a["completion_tokens"], 800);
  EXPECT_DOUBLE_EQ(a["latency_p50_ms"].get<double>(), (2.0 * 12 + 4.0 * 30) / 42);
  EXPECT_DOUBLE_EQ(a["latency_p99_ms"].get<double>(), 9.0);
  auto own = api.ServingUsage(viewer);
  ASSERT_TRUE(own.ok());
  nlohmann::json v = nlohmann::json::parse(*own);
  ASSERT_EQ(v["usage"].size(), 1u) << *own;
  EXPECT_EQ(v["usage"][0]["tenant"], "team-a");
  for (auto spoil : std::vector<std::function<void(v1::GatewayUsage*)>>{
           [](v1::GatewayUsage* x) { x->set_requests(-1); },
           [](v1::GatewayUsage* x) { x->set_tenant(std::string(300, 'a')); },
           [](v1::GatewayUsage* x) { x->set_model("bad\nname"); },
           [](v1::GatewayUsage* x) { x->set_latency_p99_ms(std::numeric_limits<double>::infinity()); }}) {
    v1::ReportLoadRequest bad_usage = gw2;
    spoil(bad_usage.mutable_usage(0));
    EXPECT_EQ(api.ReportLoad(gateway, bad_usage).status().code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(api.ServingUsage(admin).value(), *all);
  // Bad specs: clear messages, nothing stored.
  auto bad = [&](const std::function<void(v1::DeploymentSpec*)>& edit, const std::string& words) {
    v1::ApplyDeploymentRequest r = req;
    r.mutable_spec()->set_name("bad");
    edit(r.mutable_spec());
    auto got = api.ApplyDeployment(alice, r);
    EXPECT_EQ(got.status().code(), Code::kInvalidArgument) << words;
    EXPECT_NE(got.status().message().find(words), std::string::npos) << got.status().message();
  };
  bad([](v1::DeploymentSpec* s) { s->set_name("Bad_Name"); }, "deployment name");
  bad([](v1::DeploymentSpec* s) { s->set_engine("tgi"); }, "engine 'tgi' is unknown");
  bad([](v1::DeploymentSpec* s) { s->set_engine(""); }, "engine is missing");
  bad([](v1::DeploymentSpec* s) { s->set_model(""); }, "model ''");
  bad([](v1::DeploymentSpec* s) { s->mutable_readiness()->set_http_path("health"); }, "must start with '/'");
  bad([](v1::DeploymentSpec* s) { s->mutable_liveness()->set_period_ms(-5); }, "period_ms -5");
  bad([](v1::DeploymentSpec* s) { s->set_served_model_name("a b"); }, "served_model_name");
  bad([](v1::DeploymentSpec* s) { s->set_replicas(100000); }, "replicas 100000");
  bad(
      [](v1::DeploymentSpec* s) {
        s->set_min_replicas(3);
        s->set_max_replicas(2);
      },
      "above max_replicas");
  bad([](v1::DeploymentSpec* s) { s->set_target_outstanding(-1); }, "target_outstanding");
  bad([](v1::DeploymentSpec* s) { (*s->mutable_env())["DROVER_PORT"] = "1"; }, "DROVER_PORT");
  bad([](v1::DeploymentSpec* s) { s->set_engine("custom"); }, "needs a command");
  EXPECT_EQ(api.GetDeployment(admin,
                              [] {
                                v1::GetDeploymentRequest g;
                                g.set_name("bad");
                                return g;
                              }())
                .status()
                .code(),
            Code::kNotFound);
  // A job may not claim to be a replica.
  v1::SubmitJobRequest sneaky;
  *sneaky.mutable_spec() = Spec(1);
  sneaky.mutable_spec()->set_tenant("team-a");
  sneaky.mutable_spec()->set_deployment("chat");
  EXPECT_EQ(api.Submit(alice, sneaky).status().code(), Code::kInvalidArgument);
}

TEST_F(DeploymentTest, GatewayKeysCarryTheirOwnAndTheirTenantsLimits) {
  v1::Tenant t;
  t.set_name("team-a");
  t.mutable_quota()->set_requests_per_minute(-1);
  EXPECT_EQ(Fails(loop_->SetTenant(t, true)).code(), Code::kInvalidArgument);
  t.mutable_quota()->set_requests_per_minute(600);
  t.mutable_quota()->set_tokens_per_minute(100000);
  Must(loop_->SetTenant(t, true));
  auth::Authority authority(store_.get(), &clock_);
  ApiService api(loop_.get(), nullptr, &authority, nullptr);
  auth::Principal admin{"t0", "root", "default", auth::Role::kAdmin, "", ""};
  v1::CreateTokenRequest cr;
  cr.set_name("app");
  cr.set_tenant("team-a");
  cr.set_role("user");
  cr.set_requests_per_minute(60);
  cr.set_tokens_per_minute(5000);
  auto created = api.CreateToken(admin, cr);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->info().requests_per_minute(), 60);
  EXPECT_EQ(created->info().tokens_per_minute(), 5000);
  auto key = api.ResolveGatewayKey(created->token());
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->token_id(), created->info().id());
  EXPECT_EQ(key->name(), "app");
  EXPECT_EQ(key->tenant(), "team-a");
  EXPECT_FALSE(key->admin());
  EXPECT_EQ(key->role(), "user");  // the gateway serves a viewer's key no inference (issue 37)
  EXPECT_EQ(key->key_requests_per_minute(), 60);
  EXPECT_EQ(key->key_tokens_per_minute(), 5000);
  EXPECT_EQ(key->tenant_requests_per_minute(), 600);
  EXPECT_EQ(key->tenant_tokens_per_minute(), 100000);
  // Listed with its limits; the same through ResolveKey for an admin.
  auto listed = api.ListTokens(admin);
  ASSERT_TRUE(listed.ok());
  bool found = false;
  for (const v1::TokenInfo& i : listed->tokens()) found |= i.id() == key->token_id() && i.requests_per_minute() == 60;
  EXPECT_TRUE(found);
  v1::ResolveKeyRequest rk;
  rk.set_token(created->token());
  EXPECT_TRUE(api.ResolveKey(admin, rk).ok());
  EXPECT_EQ(api.ResolveGatewayKey("drv_nonsense").status().code(), Code::kUnauthenticated);
  cr.set_requests_per_minute(-5);
  EXPECT_EQ(api.CreateToken(admin, cr).status().code(), Code::kInvalidArgument);
  v1::RevokeTokenRequest rv;
  rv.set_id(key->token_id());
  ASSERT_TRUE(api.RevokeToken(admin, rv).ok());
  EXPECT_EQ(api.ResolveGatewayKey(created->token()).status().code(), Code::kUnauthenticated);
}

TEST_F(DeploymentTest, TheRestRoutes) {
  Connect("n1", 4);
  auth::Authority authority(store_.get(), &clock_);
  auto admin = Mint(authority, "root", "default", auth::Role::kAdmin);
  auto user = Mint(authority, "ann", "team-a", auth::Role::kUser);
  ASSERT_TRUE(admin.ok() && user.ok());
  ApiService api(loop_.get(), nullptr, &authority, nullptr);
  Edge edge(&authority, &clock_, SecurityOptions{});
  metrics::Registry metrics;
  RestStreams streams(&api);
  http::Handler handler = MakeRestHandler({&api, &edge, &authority, [] { return Status::Ok(); }, &metrics, &streams});
  auto call = [&](const std::string& method, const std::string& path, const std::string& body,
                  const std::string& token) {
    http::Response resp = handler(RestRequest(method, path, token, body));
    Must(loop_->Barrier());
    return resp;
  };
  auto json = [](const http::Response& r) { return nlohmann::json::parse(r.body, nullptr, false); };
  const std::string apply = R"({"spec": {"name": "web", "model": "/m/web", "engine": "vllm", "replicas": 1}})";
  http::Response created = call("POST", "/api/v1/deployments", apply, *user);
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(json(created)["spec"]["tenant"], "team-a");
  EXPECT_EQ(call("POST", "/api/v1/deployments", apply, *user).status, 409);
  EXPECT_EQ(call("GET", "/api/v1/deployments/web", "", *user).status, 200);
  http::Response scaled = call("POST", "/api/v1/deployments/web/scale", R"({"replicas": 2})", *user);
  ASSERT_EQ(scaled.status, 200) << scaled.body;
  EXPECT_EQ(json(scaled)["status"]["desiredReplicas"], 2);
  EXPECT_EQ(Replicas("web").size(), 2u);
  EXPECT_EQ(call("POST", "/api/v1/deployments/web/scale", R"({"replicas": -2})", *user).status, 400);
  EXPECT_EQ(json(call("GET", "/api/v1/deployments", "", *admin))["deployments"].size(), 1u);
  EXPECT_EQ(json(call("GET", "/api/v1/serving/endpoints", "", *user))["models"].size(), 1u);
  const std::string load = R"({"gateway": "gw-1", "models": [{"model": "web", "outstanding": "3"}]})";
  EXPECT_EQ(call("POST", "/api/v1/serving/load", load, *user).status, 403);
  EXPECT_EQ(call("POST", "/api/v1/serving/load", load, *admin).status, 200);
  EXPECT_EQ(json(call("GET", "/api/v1/deployments/web", "", *user))["status"]["outstanding"], "3");
  http::Response key = call("POST", "/api/v1/serving/keys:resolve", R"({"token": ")" + *user + R"("})", *admin);
  ASSERT_EQ(key.status, 200) << key.body;
  EXPECT_EQ(json(key)["tenant"], "team-a");
  EXPECT_EQ(call("POST", "/api/v1/serving/keys:resolve", R"({"token": "drv_x"})", *admin).status, 401);
  http::Response bad =
      call("POST", "/api/v1/deployments", R"({"spec": {"name": "x", "model": "m", "engine": "tgi"}})", *user);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("engine 'tgi' is unknown"), std::string::npos) << bad.body;
  EXPECT_EQ(call("POST", "/api/v1/deployments", "{", *user).status, 400);
  EXPECT_EQ(call("PUT", "/api/v1/deployments/web", apply, *user).status, 405);
  // Usage: none until a gateway reports some with its load; then a user
  // sees its tenant's rows only.
  http::Response none = call("GET", "/api/v1/serving/usage", "", *user);
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(json(none)["usage"].size(), 0u);
  EXPECT_EQ(call("POST", "/api/v1/serving/load",
                 R"({"gateway": "gw-9", "usage": [{"tenant": "team-a", "model": "web", "key": "k1", "requests": 3},)"
                 R"( {"tenant": "team-b", "model": "x", "key": "k2", "requests": 5}]})",
                 *admin)
                .status,
            200);
  http::Response usage = call("GET", "/api/v1/serving/usage", "", *user);
  ASSERT_EQ(usage.status, 200) << usage.body;
  ASSERT_EQ(json(usage)["usage"].size(), 1u);
  EXPECT_EQ(json(usage)["usage"][0]["tenant"], "team-a");
  EXPECT_EQ(json(call("GET", "/api/v1/serving/usage", "", *admin))["usage"].size(), 2u);
  EXPECT_EQ(call("DELETE", "/api/v1/deployments/web", "", *user).status, 200);
  EXPECT_EQ(call("GET", "/api/v1/deployments/web", "", *user).status, 404);
}

// Names per tenant (issue 37, docs/security.md): two tenants each have
// `llama`; each sees its own, and another tenant's deployment is "not
// found" with the very status a name nobody has gets, for get, scale,
// replace and delete, over the API and REST; an admin names another
// tenant's with `tenant` (REST ?tenant=).
TEST_F(DeploymentTest, DeploymentNamesArePerTenantAndAnotherTenantsAreNotFound) {
  Connect("n1", 8);
  auth::Authority authority(store_.get(), &clock_);
  ApiService api(loop_.get(), nullptr, &authority, nullptr);
  auth::Principal alice{"t1", "alice", "team-a", auth::Role::kUser, "", ""};
  auth::Principal bob{"t2", "bob", "team-b", auth::Role::kUser, "", ""};
  auth::Principal admin{"t4", "root", "default", auth::Role::kAdmin, "", ""};
  auto apply = [&](const auth::Principal& who, const std::string& name, bool replace = false) {
    v1::ApplyDeploymentRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_model("/m/" + name + ".gguf");
    req.mutable_spec()->set_engine("llama.cpp");
    req.mutable_spec()->set_replicas(1);
    req.set_replace(replace);
    return api.ApplyDeployment(who, req);
  };
  auto get = [&](const auth::Principal& who, const std::string& name, const std::string& tenant = "") {
    v1::GetDeploymentRequest req;
    req.set_name(name);
    req.set_tenant(tenant);
    return api.GetDeployment(who, req);
  };
  auto scale = [&](const auth::Principal& who, const std::string& name, const std::string& tenant = "") {
    v1::ScaleDeploymentRequest req;
    req.set_name(name);
    req.set_replicas(2);
    req.set_tenant(tenant);
    return api.ScaleDeployment(who, req);
  };
  auto remove = [&](const auth::Principal& who, const std::string& name, const std::string& tenant = "") {
    v1::DeleteDeploymentRequest req;
    req.set_name(name);
    req.set_tenant(tenant);
    return api.DeleteDeployment(who, req);
  };
  // One name, two tenants: no "already exists" for the second.
  auto a = apply(alice, "llama");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = apply(bob, "llama");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->spec().tenant(), "team-b");
  EXPECT_EQ(b->spec().served_model_name(), "llama");                     // served names are per tenant too
  EXPECT_EQ(apply(bob, "llama").status().code(), Code::kAlreadyExists);  // its own, though
  ASSERT_TRUE(apply(alice, "only-a").ok());
  for (const auto& [who, tenant] : {std::pair{&alice, "team-a"}, std::pair{&bob, "team-b"}}) {
    auto mine = get(*who, "llama");
    ASSERT_TRUE(mine.ok()) << mine.status().ToString();
    EXPECT_EQ(mine->spec().tenant(), tenant);
    auto listed = api.ListDeployments(*who);
    ASSERT_TRUE(listed.ok());
    for (const v1::Deployment& d : listed->deployments()) EXPECT_EQ(d.spec().tenant(), tenant);
  }
  EXPECT_EQ(api.ListDeployments(admin)->deployments_size(), 3);
  // Each tenant's replica is a job of its own tenant.
  std::multiset<std::string> replica_tenants;
  for (const v1::Job& j : Replicas("llama")) replica_tenants.insert(j.spec().tenant());
  EXPECT_EQ(replica_tenants, (std::multiset<std::string>{"team-a", "team-b"}));

  // Bob and alice's "only-a": the answers while it exists, then once it is
  // gone, are the same, code and message (naming team-a changes nothing).
  auto refusals = [&] {
    std::vector<Status> out;
    out.push_back(get(bob, "only-a").status());
    out.push_back(get(bob, "only-a", "team-a").status());
    out.push_back(scale(bob, "only-a").status());
    out.push_back(scale(bob, "only-a", "team-a").status());
    out.push_back(apply(bob, "only-a", /*replace=*/true).status());
    out.push_back(remove(bob, "only-a").status());
    out.push_back(remove(bob, "only-a", "team-a").status());
    return out;
  };
  std::vector<Status> while_there = refusals();
  ASSERT_TRUE(get(alice, "only-a").ok());  // untouched by bob's tries
  EXPECT_EQ(get(alice, "only-a")->status().desired_replicas(), 1);
  ASSERT_TRUE(remove(alice, "only-a").ok());
  std::vector<Status> when_gone = refusals();
  ASSERT_EQ(while_there.size(), when_gone.size());
  for (size_t i = 0; i < while_there.size(); ++i) {
    EXPECT_EQ(while_there[i].code(), Code::kNotFound) << i << ": " << while_there[i].ToString();
    EXPECT_EQ(while_there[i].code(), when_gone[i].code()) << i;
    EXPECT_EQ(while_there[i].message(), when_gone[i].message()) << i;
    EXPECT_EQ(while_there[i].message(), "deployment 'only-a' not found") << i;
  }
  // Bob's replace made nothing either: a create does.
  ASSERT_TRUE(apply(bob, "only-a").ok());
  EXPECT_EQ(get(bob, "only-a")->spec().tenant(), "team-b");
  EXPECT_EQ(get(alice, "only-a").status().code(), Code::kNotFound);
  ASSERT_TRUE(remove(bob, "only-a").ok());

  // An admin names either tenant's; without `tenant`, its own (none).
  EXPECT_EQ(get(admin, "llama").status().code(), Code::kNotFound);
  auto theirs = scale(admin, "llama", "team-b");
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  EXPECT_EQ(theirs->spec().tenant(), "team-b");
  EXPECT_EQ(get(bob, "llama")->status().desired_replicas(), 2);
  EXPECT_EQ(get(alice, "llama")->status().desired_replicas(), 1);
  EXPECT_EQ(get(admin, "llama", "Bad/Tenant").status().code(), Code::kInvalidArgument);

  // The gateways see two models of one name, each with its tenant.
  auto eps = api.Endpoints(GatewayPrincipal());
  ASSERT_TRUE(eps.ok());
  std::set<std::string> served;
  for (const v1::ServingModel& m : eps->models()) {
    EXPECT_EQ(m.model(), "llama");
    served.insert(m.tenant());
  }
  EXPECT_EQ(served, (std::set<std::string>{"team-a", "team-b"}));
  // Load reported for team-a's `llama` is team-a's alone.
  v1::ReportLoadRequest load = Load("llama", 5, 0, 1);
  load.mutable_models(0)->set_tenant("team-a");
  ASSERT_TRUE(api.ReportLoad(GatewayPrincipal(), load).ok());
  EXPECT_EQ(get(alice, "llama")->status().outstanding(), 5);
  EXPECT_EQ(get(bob, "llama")->status().outstanding(), 0);
  load.mutable_models(0)->set_tenant("Not A Tenant");
  EXPECT_EQ(api.ReportLoad(GatewayPrincipal(), load).status().code(), Code::kInvalidArgument);

  // Stored under each tenant's key.
  auto stored = store_->Range("/deployments/");
  ASSERT_TRUE(stored.ok());
  std::vector<std::string> keys;
  for (const store::KeyValue& kv : stored->kvs) keys.push_back(kv.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"/deployments/team-a/llama", "/deployments/team-b/llama"}));

  // REST: ?tenant= for an admin; a user naming another tenant gets the 404
  // body of a name nobody has.
  auto admin_token = Mint(authority, "root", "default", auth::Role::kAdmin);
  auto user_token = Mint(authority, "ann", "team-a", auth::Role::kUser);
  ASSERT_TRUE(admin_token.ok() && user_token.ok());
  Edge edge(&authority, &clock_, SecurityOptions{});
  metrics::Registry registry;
  RestStreams streams(&api);
  http::Handler handler = MakeRestHandler({&api, &edge, &authority, [] { return Status::Ok(); }, &registry, &streams});
  auto call = [&](const std::string& method, const std::string& path, const std::map<std::string, std::string>& query,
                  const std::string& token, const std::string& body = "") {
    http::Response resp = handler(RestRequest(method, path, token, body, query));
    Must(loop_->Barrier());
    return resp;
  };
  http::Response as_admin = call("GET", "/api/v1/deployments/llama", {{"tenant", "team-b"}}, *admin_token);
  ASSERT_EQ(as_admin.status, 200) << as_admin.body;
  EXPECT_EQ(nlohmann::json::parse(as_admin.body)["spec"]["tenant"], "team-b");
  http::Response other = call("GET", "/api/v1/deployments/llama", {{"tenant", "team-b"}}, *user_token);
  http::Response nobody = call("GET", "/api/v1/deployments/nobody-has", {{"tenant", "team-b"}}, *user_token);
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(nobody.status, 404);
  std::string expected = nobody.body;
  expected.replace(expected.find("nobody-has"), std::string("nobody-has").size(), "llama");
  EXPECT_EQ(other.body, expected);
  http::Response scaled =
      call("POST", "/api/v1/deployments/llama/scale", {{"tenant", "team-b"}}, *admin_token, R"({"replicas": 1})");
  ASSERT_EQ(scaled.status, 200) << scaled.body;
  EXPECT_EQ(get(bob, "llama")->status().desired_replicas(), 1);
  EXPECT_EQ(call("POST", "/api/v1/deployments/llama/scale", {{"tenant", "team-b"}}, *admin_token,
                 R"({"replicas": 1, "tenant": "team-a"})")
                .status,
            400);
  EXPECT_EQ(call("DELETE", "/api/v1/deployments/llama", {{"tenant", "team-b"}}, *admin_token).status, 200);
  EXPECT_EQ(get(bob, "llama").status().code(), Code::kNotFound);
  EXPECT_TRUE(get(alice, "llama").ok());
}

// A store an older server wrote keeps deployments under /deployments/<name>.
// A server of today finds the record, keeps its revision and its running
// replica (no new one), and moves it under /deployments/<tenant>/<name>; the
// old key is gone and a second restart finds the one record.
TEST_F(DeploymentTest, AnOlderServersDeploymentRecordIsKeptAndMovedUnderItsTenant) {
  Connect("n1", 4);
  v1::DeploymentSpec spec = DSpec("legacy", 1, "team-a");
  Apply(spec);
  (*spec.mutable_env())["V"] = "2";
  Apply(spec, true);  // revision 2
  std::vector<v1::Job> replicas = Replicas("legacy", true);
  ASSERT_FALSE(replicas.empty());
  for (const v1::Job& j : Replicas("legacy")) ReportService(j.id(), true);
  Must(loop_->Barrier());
  // The older server's store: the same record under the name alone.
  loop_->Stop();
  auto now_key = store_->Get("/deployments/team-a/legacy");
  ASSERT_TRUE(now_key.ok() && now_key->has_value());
  const std::string record = (*now_key)->value;
  ASSERT_TRUE(store_->Delete("/deployments/team-a/legacy").ok());
  ASSERT_TRUE(store_->Put("/deployments/legacy", record).ok());
  ASSERT_NO_FATAL_FAILURE(Restart());
  Must(loop_->Barrier());
  EXPECT_EQ(Fails(loop_->GetDeployment("default", "legacy")).code(), Code::kNotFound);  // another tenant's
  auto found = Await(loop_->GetDeployment("team-a", "legacy"));
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(found->status().revision(), 2);
  EXPECT_EQ(found->spec().env().at("V"), "2");
  // Its replicas, not new ones.
  std::vector<v1::Job> after = Replicas("legacy", true);
  ASSERT_EQ(after.size(), replicas.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].id(), replicas[i].id());
  auto keys = [&] {
    std::vector<std::string> out;
    auto stored = store_->Range("/deployments/");
    EXPECT_TRUE(stored.ok());
    if (stored.ok()) {
      for (const store::KeyValue& kv : stored->kvs) out.push_back(kv.key);
    }
    return out;
  };
  EXPECT_EQ(keys(), (std::vector<std::string>{"/deployments/team-a/legacy"}));
  v1::Deployment stored;
  auto again = store_->Get("/deployments/team-a/legacy");
  ASSERT_TRUE(again.ok() && again->has_value());
  ASSERT_TRUE(stored.ParseFromString((*again)->value));
  EXPECT_EQ(stored.status().revision(), 2);
  ASSERT_NO_FATAL_FAILURE(Restart());
  Must(loop_->Barrier());
  EXPECT_EQ(keys(), (std::vector<std::string>{"/deployments/team-a/legacy"}));
  EXPECT_EQ(Replicas("legacy", true).size(), replicas.size());
}

// /metrics for a user's token: the GPU series of another tenant's job read
// job_id="other" and tenant="other", as /fleet shows them; series that
// become one add up; an admin's token sees every name.
TEST_F(DeploymentTest, MetricsHideOtherTenantsJobsAndNamesFromAUserToken) {
  Connect("n1", 2);
  v1::JobSpec mine = Spec(1);
  mine.set_tenant("team-a");
  v1::JobSpec theirs = Spec(1);
  theirs.set_tenant("team-b");
  v1::Job a = Must(loop_->Submit(mine));
  v1::Job b = Must(loop_->Submit(theirs));
  ASSERT_EQ(StateOf(a.id()), v1::JOB_STATE_BOUND);
  ASSERT_EQ(StateOf(b.id()), v1::JOB_STATE_BOUND);
  auth::Authority authority(store_.get(), &clock_);
  ApiService api(loop_.get(), nullptr, &authority, nullptr);
  auto admin = Mint(authority, "root", "default", auth::Role::kAdmin);
  auto viewer = Mint(authority, "val", "team-a", auth::Role::kViewer);
  ASSERT_TRUE(admin.ok() && viewer.ok());
  metrics::Registry registry;
  // The server's GPU series (server.cc's collector does the same), and a
  // family by tenant whose two other tenants' series become one.
  registry.AddCollector([&](metrics::Exposition& out) {
    auto nodes = Await(loop_->ListNodes());
    if (!nodes.ok()) return;
    for (const v1::Node& n : *nodes) {
      for (const v1::Gpu& g : n.gpus()) rpc::WriteGpuMetrics(n.name(), g, out);
    }
  });
  auto by_tenant = registry.AddCounter("drover_test_calls_total", "Calls, by tenant.");
  ASSERT_TRUE(by_tenant.ok());
  (*by_tenant)->Inc({{"tenant", "team-a"}}, 1);
  (*by_tenant)->Inc({{"tenant", "team-b"}}, 2);
  (*by_tenant)->Inc({{"tenant", "team-c"}}, 3);
  Edge edge(&authority, &clock_, SecurityOptions{});
  RestStreams streams(&api);
  http::Handler handler = MakeRestHandler({&api, &edge, &authority, [] { return Status::Ok(); }, &registry, &streams});
  auto scrape = [&](const std::string& token) {
    http::Response resp = handler(RestRequest("GET", "/metrics", token));
    EXPECT_EQ(resp.status, 200) << resp.body;
    return resp.body;
  };
  const std::string seen = scrape(*viewer);
  EXPECT_NE(seen.find("job_id=\"" + a.id() + "\""), std::string::npos) << seen;
  EXPECT_NE(seen.find("tenant=\"team-a\""), std::string::npos);
  EXPECT_EQ(seen.find(b.id()), std::string::npos) << seen;
  EXPECT_EQ(seen.find("team-b"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("team-c"), std::string::npos) << seen;
  EXPECT_NE(seen.find("job_id=\"other\""), std::string::npos) << seen;
  EXPECT_NE(seen.find("drover_test_calls_total{tenant=\"other\"} 5\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("drover_test_calls_total{tenant=\"team-a\"} 1\n"), std::string::npos) << seen;
  // Every GPU is still there, one series each: only names were hidden.
  auto count = [](const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(seen, "\ndrover_gpu_healthy{"), 2u) << seen;
  const std::string all = scrape(*admin);
  EXPECT_NE(all.find("job_id=\"" + b.id() + "\""), std::string::npos) << all;
  EXPECT_NE(all.find("tenant=\"team-b\""), std::string::npos);
  EXPECT_NE(all.find("drover_test_calls_total{tenant=\"team-c\"} 3\n"), std::string::npos) << all;
  EXPECT_EQ(all.find("\"other\""), std::string::npos) << all;
  EXPECT_EQ(count(all, "\ndrover_gpu_healthy{"), 2u);
}

}  // namespace
}  // namespace drover::server::testing
