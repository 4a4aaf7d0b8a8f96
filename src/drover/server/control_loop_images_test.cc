// Container jobs in the control loop (docs/containers.md): mounts checked
// against the tenant's roots at submit, the container and the resolved
// digest in the workload, the digest kept for every later attempt (and a
// deployment's revision), the pull's progress while bound, the nodes'
// image stores from heartbeats, an administrator's pull relayed to the
// agents, and an archive's load: spooled, fetched only by the nodes named,
// answered with what they stored.

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "drover/auth/token.h"
#include "drover/common/files.h"

#include "drover/auth/authority.h"
#include "drover/common/image_ref.h"
#include "drover/common/metrics.h"
#include "drover/rpc/container.h"
#include "drover/server/api_service.h"
#include "drover/server/control_loop_test_fixture.h"
#include "drover/server/deployments.h"
#include "drover/server/edge.h"
#include "drover/server/rest.h"
#include "drover/server/rest_streams.h"

namespace drover::server::testing {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');
const std::string kOtherDigest = "sha256:" + std::string(64, 'b');

class ImagesTest : public ControlLoopTest {
 protected:
  static v1::JobSpec ContainerSpec(const std::string& tenant = "default", const std::string& mount = "") {
    v1::JobSpec spec;
    spec.set_gpus(1);
    spec.set_tenant(tenant);
    spec.set_owner("alice");
    spec.mutable_container()->set_image("busybox");
    if (!mount.empty()) {
      v1::Mount* m = spec.mutable_container()->add_mounts();
      m->set_source(mount);
      m->set_target("/data");
    }
    Status s = rpc::NormalizeJobSpec(&spec);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return spec;
  }
  void SetRoots(const std::string& tenant, const std::vector<std::string>& roots, bool create = true) {
    v1::Tenant t;
    t.set_name(tenant);
    t.set_weight(1);
    t.set_borrow_limit(-1);
    for (const std::string& r : roots) t.add_mount_roots(r);
    Must(loop_->SetTenant(t, create));
  }
  // One workload status with what an agent says of its image.
  void ReportImage(const std::string& node, const std::string& job_id, v1::WorkloadState state,
                   const std::string& digest, const std::string& pull = "", bool fenced = false) {
    v1::StatusReport report;
    v1::WorkloadStatus* ws = report.add_workloads();
    ws->set_job_id(job_id);
    ws->set_workload_id(WorkloadOf(job_id));
    ws->set_state(state);
    ws->set_start_time_unix_nanos(ToUnixNanos(clock_.Now()));
    if (state == v1::WORKLOAD_STATE_EXITED) {
      ws->set_end_time_unix_nanos(ToUnixNanos(clock_.Now()) + 5);
      ws->set_exit_code(1);
    }
    ws->set_image_digest(digest);
    ws->set_image_pull(pull);
    ws->set_fenced(fenced);
    loop_->HandleStatus(node, report);
    Must(loop_->Barrier());
  }
  // The workload of `job_id` in the newest desired set `sink` got.
  static std::optional<v1::Workload> WorkloadIn(FakeSink& sink, const std::string& job_id, int attempt) {
    auto set = sink.WaitFor(0, [&](const v1::DesiredWorkloads& d) {
      for (const v1::Workload& w : d.workloads()) {
        if (w.job_id() == job_id && w.workload_id() == rpc::WorkloadId(job_id, 0, 1, attempt)) return true;
      }
      return false;
    });
    if (!set) return std::nullopt;
    for (const v1::Workload& w : set->workloads()) {
      if (w.job_id() == job_id) return w;
    }
    return std::nullopt;
  }
  static v1::NodeImage Image(const std::string& ref, const std::string& digest, int in_use = 0) {
    v1::NodeImage im;
    im.add_references(ref);
    im.set_digest(digest);
    im.set_size_bytes(4 << 20);
    im.set_in_use(in_use);
    im.set_last_used_unix_nanos(1'700'000'000'000'000'000);
    return im;
  }
};

// ---- item 1: mounts under the tenant's roots ----

TEST_F(ImagesTest, MountsOutsideTheTenantsRootsAreRefusedAndNothingIsStored) {
  Connect("n1", 4);
  SetRoots("team-a", {"/data/team-a", "/scratch"});
  v1::Job ok = Must(loop_->Submit(ContainerSpec("team-a", "/data/team-a/set-1")));
  EXPECT_EQ(ok.spec().container().mounts(0).source(), "/data/team-a/set-1");
  Must(loop_->Submit(ContainerSpec("team-a", "/scratch")));  // a root itself
  const size_t stored = StoredJobs().size();

  Status outside = Fails(loop_->Submit(ContainerSpec("team-a", "/data/team-b")));
  EXPECT_EQ(outside.code(), Code::kPermissionDenied);
  EXPECT_NE(outside.message().find("mount '/data/team-b'"), std::string::npos) << outside.message();
  EXPECT_NE(outside.message().find("tenant 'team-a'"), std::string::npos) << outside.message();
  // A prefix is not a parent.
  EXPECT_EQ(Fails(loop_->Submit(ContainerSpec("team-a", "/data/team-a2"))).code(), Code::kPermissionDenied);
  // A tenant without roots (or without a record) mounts nothing.
  Status none = Fails(loop_->Submit(ContainerSpec("team-b", "/data/team-a")));
  EXPECT_EQ(none.code(), Code::kPermissionDenied);
  EXPECT_NE(none.message().find("it has none"), std::string::npos) << none.message();
  // A batch is refused whole, naming the job.
  Status batch = Fails(loop_->SubmitBatch({ContainerSpec("team-a", "/scratch"), ContainerSpec("team-a", "/etc")}));
  EXPECT_EQ(batch.code(), Code::kPermissionDenied);
  EXPECT_NE(batch.message().find("job 1:"), std::string::npos) << batch.message();
  // An array too.
  v1::ArraySpec array;
  array.set_first(0);
  array.set_last(3);
  EXPECT_EQ(Fails(loop_->SubmitArray(ContainerSpec("team-a", "/etc"), array)).code(), Code::kPermissionDenied);
  EXPECT_EQ(StoredJobs().size(), stored);
  // A container without mounts needs no root.
  Must(loop_->Submit(ContainerSpec("team-b")));
}

TEST_F(ImagesTest, MountRootsAreCheckedWhenSetAndSurviveARestart) {
  v1::Tenant t;
  t.set_name("team-a");
  t.set_weight(1);
  t.set_borrow_limit(-1);
  for (const char* bad : {"/", "data", "/data/../etc", "/data/", ""}) {
    t.clear_mount_roots();
    t.add_mount_roots(bad);
    EXPECT_EQ(Fails(loop_->SetTenant(t, true)).code(), Code::kInvalidArgument) << bad;
  }
  SetRoots("team-a", {"/data/team-a"});
  ASSERT_NO_FATAL_FAILURE(Restart());
  Connect("n1", 4);
  Must(loop_->Submit(ContainerSpec("team-a", "/data/team-a/x")));
  // Roots replaced: what was allowed is not any more.
  SetRoots("team-a", {"/other"}, /*create=*/false);
  EXPECT_EQ(Fails(loop_->Submit(ContainerSpec("team-a", "/data/team-a/x"))).code(), Code::kPermissionDenied);
}

TEST_F(ImagesTest, ADeploymentsMountsAreCheckedWhenApplied) {
  Connect("n1", 4);
  SetRoots("team-a", {"/models"});
  v1::DeploymentSpec d;
  d.set_name("web");
  d.set_tenant("team-a");
  d.set_owner("alice");
  d.set_replicas(1);
  d.mutable_container()->set_image("vllm/vllm-openai:v0.6.3");
  v1::Mount* m = d.mutable_container()->add_mounts();
  m->set_source("/weights");
  m->set_target("/models");
  Status normalized = NormalizeDeploymentSpec(&d, DeploymentOptions());
  ASSERT_TRUE(normalized.ok()) << normalized.ToString();  // custom, the image's command
  EXPECT_EQ(d.engine(), "custom");
  Status refused = Fails(loop_->ApplyDeployment(d, false));
  EXPECT_EQ(refused.code(), Code::kPermissionDenied);
  EXPECT_NE(refused.message().find("mount '/weights'"), std::string::npos) << refused.message();
  EXPECT_EQ(Fails(loop_->GetDeployment("team-a", "web")).code(), Code::kNotFound);
  EXPECT_TRUE(StoredJobs().empty());
  m->set_source("/models/llama");
  Must(loop_->ApplyDeployment(d, false));
}

// ---- items 2 and 3: the workload carries it, the digest is recorded ----

TEST_F(ImagesTest, TheDigestTheFirstStartResolvedIsWhatEveryLaterAttemptRuns) {
  auto sink = Connect("n1", 4);
  v1::JobSpec spec = ContainerSpec();
  spec.set_restart_policy("on-failure");
  spec.set_max_restarts(0);
  ASSERT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
  v1::Job job = Must(loop_->Submit(spec));
  ASSERT_EQ(StateOf(job.id()), v1::JOB_STATE_BOUND);
  auto first = WorkloadIn(*sink, job.id(), 1);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->container().image(), "busybox");
  EXPECT_TRUE(first->command().empty());
  EXPECT_TRUE(first->image_digest().empty());  // resolve the reference

  // Still pulling: bound, with the progress; an UNSPECIFIED report is harmless.
  ReportImage("n1", job.id(), v1::WORKLOAD_STATE_UNSPECIFIED, "", "pulling docker.io/library/busybox:latest: 1 MB");
  v1::Job pulling = Get(job.id());
  EXPECT_EQ(pulling.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(pulling.status().image_pull(), "pulling docker.io/library/busybox:latest: 1 MB");
  EXPECT_EQ(pulling.status().message(), pulling.status().image_pull());
  ReportImage("n1", job.id(), v1::WORKLOAD_STATE_UNSPECIFIED, "");
  EXPECT_EQ(StateOf(job.id()), v1::JOB_STATE_BOUND);

  // Running: the digest is kept, the pull is over.
  ReportImage("n1", job.id(), v1::WORKLOAD_STATE_RUNNING, kDigest);
  v1::Job running = Get(job.id());
  EXPECT_EQ(running.status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.status().image_digest(), kDigest);
  EXPECT_TRUE(running.status().image_pull().empty());
  EXPECT_TRUE(running.status().message().empty());
  // A later word cannot change it.
  ReportImage("n1", job.id(), v1::WORKLOAD_STATE_RUNNING, kOtherDigest);
  EXPECT_EQ(Get(job.id()).status().image_digest(), kDigest);

  // Its node stopped it (fenced: not the job's doing) and it runs again:
  // the next attempt runs that digest, also after a restart of the server.
  ReportImage("n1", job.id(), v1::WORKLOAD_STATE_EXITED, "", "", /*fenced=*/true);
  v1::Job again = Get(job.id());
  ASSERT_EQ(again.status().attempt(), 2);
  EXPECT_EQ(again.status().image_digest(), kDigest);
  auto second = WorkloadIn(*sink, job.id(), 2);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->image_digest(), kDigest);
  ASSERT_NO_FATAL_FAILURE(Restart());
  auto after = Connect("n1", 4);
  EXPECT_EQ(Get(job.id()).status().image_digest(), kDigest);
  auto resent = WorkloadIn(*after, job.id(), 2);
  ASSERT_TRUE(resent.has_value());
  EXPECT_EQ(resent->image_digest(), kDigest);
  EXPECT_EQ(resent->container().image(), "busybox");
}

TEST_F(ImagesTest, AMalformedDigestIsIgnoredAndAJobWithoutAnImageKeepsNone) {
  Connect("n1", 4);
  v1::Job job = Must(loop_->Submit(ContainerSpec()));
  ReportImage("n1", job.id(), v1::WORKLOAD_STATE_RUNNING, "sha256:nothex");
  v1::Job running = Get(job.id());
  EXPECT_EQ(running.status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_TRUE(running.status().image_digest().empty());
  v1::Job bare = Submit(1);
  ReportImage("n1", bare.id(), v1::WORKLOAD_STATE_UNSPECIFIED, kDigest, "pulling");
  v1::Job b = Get(bare.id());
  EXPECT_EQ(b.status().state(), v1::JOB_STATE_BOUND);
  EXPECT_TRUE(b.status().image_digest().empty());
  EXPECT_TRUE(b.status().image_pull().empty());
}

TEST_F(ImagesTest, AGangTakesTheFirstReplicasDigest) {
  auto a = Connect("n1", 1);
  Connect("n2", 1);
  v1::JobSpec spec = ContainerSpec();
  spec.set_replicas(2);
  ASSERT_TRUE(rpc::NormalizeJobSpec(&spec).ok());
  v1::Job job = Must(loop_->Submit(spec));
  ASSERT_EQ(StateOf(job.id()), v1::JOB_STATE_BOUND);
  auto report = [&](int replica, v1::WorkloadState state, const std::string& digest, const std::string& pull) {
    v1::Job now = Get(job.id());
    v1::StatusReport r;
    v1::WorkloadStatus* ws = r.add_workloads();
    ws->set_job_id(job.id());
    ws->set_workload_id(WorkloadOf(job.id(), replica));
    ws->set_state(state);
    ws->set_start_time_unix_nanos(ToUnixNanos(clock_.Now()));
    ws->set_image_digest(digest);
    ws->set_image_pull(pull);
    loop_->HandleStatus(now.status().replicas(replica).node(), r);
    Must(loop_->Barrier());
  };
  report(1, v1::WORKLOAD_STATE_UNSPECIFIED, "", "pulling 5%");
  EXPECT_EQ(Get(job.id()).status().image_pull(), "pulling 5%");
  report(0, v1::WORKLOAD_STATE_RUNNING, kDigest, "");
  EXPECT_EQ(Get(job.id()).status().state(), v1::JOB_STATE_BOUND);
  EXPECT_EQ(Get(job.id()).status().image_digest(), kDigest);
  report(1, v1::WORKLOAD_STATE_RUNNING, kOtherDigest, "");
  v1::Job running = Get(job.id());
  EXPECT_EQ(running.status().state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(running.status().image_digest(), kDigest);
  EXPECT_TRUE(running.status().image_pull().empty());
  auto set = a->WaitFor(0, [&](const v1::DesiredWorkloads& d) {
    return !d.workloads().empty() && d.workloads(0).job_id() == job.id() && d.workloads(0).image_digest() == kDigest;
  });
  EXPECT_TRUE(set.has_value());  // resent with the digest once known
  if (set) {
    EXPECT_EQ(set->workloads(0).container().image(), "busybox");
  }
}

TEST_F(ImagesTest, ADeploymentsRevisionRunsItsFirstReplicasDigest) {
  auto sink = Connect("n1", 4);
  v1::DeploymentSpec d;
  d.set_name("web");
  d.set_tenant("default");
  d.set_owner("alice");
  d.set_replicas(1);
  d.mutable_container()->set_image("tiny:1");
  ASSERT_TRUE(NormalizeDeploymentSpec(&d, DeploymentOptions()).ok());
  Must(loop_->ApplyDeployment(d, false));
  auto replicas = [&] {
    Must(loop_->Barrier());
    std::vector<v1::Job> out;
    for (const v1::Job& j : Jobs()) {
      if (j.spec().deployment() == "web" && !rpc::IsTerminal(j.status().state())) out.push_back(j);
    }
    return out;
  };
  std::vector<v1::Job> one = replicas();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].spec().container().image(), "tiny:1");  // the replica's JobSpec carries the container
  ReportImage("n1", one[0].id(), v1::WORKLOAD_STATE_RUNNING, kDigest);
  Must(loop_->CheckDeployments());
  EXPECT_EQ(Must(loop_->GetDeployment("default", "web")).status().image_digest(), kDigest);

  // A second replica of the revision is told that digest before it resolved any.
  Must(loop_->ScaleDeployment("default", "web", 2));
  std::vector<v1::Job> two = replicas();
  ASSERT_EQ(two.size(), 2u);
  const v1::Job& added = two[0].id() == one[0].id() ? two[1] : two[0];
  EXPECT_TRUE(added.status().image_digest().empty());
  auto w = WorkloadIn(*sink, added.id(), 1);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->image_digest(), kDigest);

  // Kept across a restart; a new template is resolved again.
  ASSERT_NO_FATAL_FAILURE(Restart());
  Connect("n1", 4);
  EXPECT_EQ(Must(loop_->GetDeployment("default", "web")).status().image_digest(), kDigest);
  d.mutable_container()->set_image("tiny:2");
  v1::Deployment rolled = Must(loop_->ApplyDeployment(d, true));
  EXPECT_EQ(rolled.status().revision(), 2);
  EXPECT_TRUE(rolled.status().image_digest().empty());
}

// ---- item 4: the nodes' image stores ----

TEST_F(ImagesTest, AHeartbeatWithChangedImagesReplacesTheNodesStore) {
  auto sink = Connect("n1", 1);
  v1::Heartbeat hb;
  *hb.add_images() = Image("docker.io/library/busybox:latest", kDigest, 1);
  *hb.add_images() = Image("tiny:1", kOtherDigest);
  hb.set_images_changed(true);
  loop_->Heartbeat("n1", hb, sink);
  v1::Node n = Node("n1");
  ASSERT_EQ(n.images_size(), 2);
  EXPECT_EQ(n.images(0).references(0), "docker.io/library/busybox:latest");
  EXPECT_EQ(n.images(0).digest(), kDigest);
  EXPECT_EQ(n.images(0).in_use(), 1);
  // A heartbeat that says nothing changed keeps them.
  loop_->Heartbeat("n1", v1::Heartbeat(), sink);
  EXPECT_EQ(Node("n1").images_size(), 2);
  EXPECT_EQ(Must(loop_->ListNodes())[0].images_size(), 2);
  // An empty list with the flag: the store was emptied.
  v1::Heartbeat emptied;
  emptied.set_images_changed(true);
  loop_->Heartbeat("n1", emptied, sink);
  EXPECT_EQ(Node("n1").images_size(), 0);
}

TEST_F(ImagesTest, NodeImagesAreBounded) {
  v1::Heartbeat hb;
  hb.set_images_changed(true);
  for (int i = 0; i < rpc::kMaxNodeImages; ++i) *hb.add_images() = Image("tiny:" + std::to_string(i), kDigest);
  EXPECT_TRUE(rpc::ValidateNodeImages("n1", hb.images()).ok());
  *hb.add_images() = Image("one-too-many", kDigest);
  EXPECT_EQ(rpc::ValidateNodeImages("n1", hb.images()).code(), Code::kInvalidArgument);
  v1::Heartbeat bad;
  *bad.add_images() = Image("tiny", "sha256:short");
  EXPECT_EQ(rpc::ValidateNodeImages("n1", bad.images()).code(), Code::kInvalidArgument);
  bad.mutable_images(0)->set_digest(kDigest);
  bad.mutable_images(0)->set_size_bytes(-1);
  EXPECT_EQ(rpc::ValidateNodeImages("n1", bad.images()).code(), Code::kInvalidArgument);
  bad.mutable_images(0)->set_size_bytes(1);
  bad.mutable_images(0)->add_references(std::string(kMaxImageRefLength + 1, 'a'));
  EXPECT_EQ(rpc::ValidateNodeImages("n1", bad.images()).code(), Code::kInvalidArgument);
}

// ---- item 5: an administrator's pull ----

TEST_F(ImagesTest, APullGoesToTheNodesNamedOrEveryReadyOne) {
  auto a = Connect("n1", 1);
  auto b = Connect("n2", 1);
  Register("n3", 1);  // no session
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  const auth::Principal admin{"t1", "root", "default", auth::Role::kAdmin, "", ""};
  const auth::Principal user{"t2", "alice", "default", auth::Role::kUser, "", ""};

  v1::PullImageRequest req;
  req.set_reference("busybox:1.36");
  auto all = api.PullImage(admin, req);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(std::vector<std::string>(all->nodes().begin(), all->nodes().end()), (std::vector<std::string>{"n1", "n2"}));
  ASSERT_EQ(a->pulls().size(), 1u);
  EXPECT_EQ(a->pulls()[0].reference(), "busybox:1.36");
  EXPECT_EQ(b->pulls().size(), 1u);

  req.add_nodes("n2");
  req.add_nodes("n2");
  req.set_pull_policy("always");
  auto named = api.PullImage(admin, req);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  ASSERT_EQ(named->nodes_size(), 1);
  EXPECT_EQ(b->pulls().size(), 2u);
  EXPECT_EQ(b->pulls()[1].pull_policy(), "always");
  EXPECT_EQ(a->pulls().size(), 1u);

  // Refusals tell nobody.
  v1::PullImageRequest unknown = req;
  unknown.add_nodes("n9");
  EXPECT_EQ(api.PullImage(admin, unknown).status().code(), Code::kNotFound);
  v1::PullImageRequest offline = req;
  offline.add_nodes("n3");
  EXPECT_EQ(api.PullImage(admin, offline).status().code(), Code::kUnavailable);
  v1::PullImageRequest bad = req;
  bad.set_reference("Busybox");
  EXPECT_EQ(api.PullImage(admin, bad).status().code(), Code::kInvalidArgument);
  bad = req;
  bad.set_reference("");
  EXPECT_EQ(api.PullImage(admin, bad).status().code(), Code::kInvalidArgument);
  bad = req;
  bad.set_pull_policy("never");
  EXPECT_EQ(api.PullImage(admin, bad).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(api.PullImage(user, req).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(b->pulls().size(), 2u);
}

TEST_F(ImagesTest, RestPullsAndShowsTheImages) {
  auto sink = Connect("n1", 1);
  auth::Authority authority(store_.get(), &clock_);
  auth::CreateTokenRequest cr;
  cr.name = "root";
  cr.tenant = "default";
  cr.role = auth::Role::kAdmin;
  auto admin = authority.MintInternal(cr);
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  cr.name = "alice";
  cr.role = auth::Role::kUser;
  auto user = authority.MintInternal(cr);
  ASSERT_TRUE(user.ok());
  ApiService api(loop_.get(), nullptr, &authority, nullptr);
  Edge edge(&authority, &clock_, SecurityOptions{});
  metrics::Registry metrics;
  RestStreams streams(&api);
  http::Handler handler = MakeRestHandler({&api, &edge, &authority, [] { return Status::Ok(); }, &metrics, &streams});
  auto request = [&](const std::string& method, const std::string& path, const std::string& token,
                     const std::string& body) {
    http::Request r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.headers["authorization"] = "Bearer " + token;
    if (!body.empty()) r.headers["content-type"] = "application/json";
    r.remote = "127.0.0.1:5555";
    return handler(r);
  };
  http::Response ok = request("POST", "/api/v1/images/pull", *admin, R"({"reference": "busybox", "nodes": ["n1"]})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_NE(ok.body.find("n1"), std::string::npos) << ok.body;
  EXPECT_EQ(sink->pulls().size(), 1u);
  EXPECT_EQ(request("POST", "/api/v1/images/pull", *admin, R"({"reference": "a//b"})").status, 400);
  EXPECT_EQ(request("POST", "/api/v1/images/pull", *admin, R"({"reference": "busybox", "nodes": ["nx"]})").status, 404);
  EXPECT_EQ(request("POST", "/api/v1/images/pull", *user, R"({"reference": "busybox"})").status, 403);
  EXPECT_EQ(request("GET", "/api/v1/images/pull", *admin, "").status, 405);

  v1::Heartbeat hb;
  *hb.add_images() = Image("docker.io/library/busybox:latest", kDigest);
  hb.set_images_changed(true);
  loop_->Heartbeat("n1", hb, sink);
  Must(loop_->Barrier());
  http::Response node = request("GET", "/api/v1/nodes/n1", *user, "");
  ASSERT_EQ(node.status, 200) << node.body;
  EXPECT_NE(node.body.find(kDigest), std::string::npos) << node.body;

  // A submit over REST with a mount outside the tenant's roots is a 403.
  http::Response refused = request(
      "POST", "/api/v1/jobs", *user,
      R"({"spec": {"gpus": 1, "container": {"image": "busybox", "mounts": [{"source": "/etc", "target": "/x"}]}}})");
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_NE(refused.body.find("mount '/etc'"), std::string::npos) << refused.body;
  http::Response bad =
      request("POST", "/api/v1/jobs", *user, R"({"spec": {"gpus": 1, "container": {"image": "x:y:z"}}})");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_NE(bad.body.find("container image"), std::string::npos) << bad.body;
  EXPECT_TRUE(StoredJobs().empty());
}

// ---- images load: an archive spooled, fetched by the nodes told, answered ----

class LoadTest : public ImagesTest {
 protected:
  // The archive's bytes in chunks of `chunk` (a stream as gRPC gives it).
  static ApiService::ArchiveReader Chunks(std::string bytes, size_t chunk = 3) {
    auto at = std::make_shared<size_t>(0);
    auto data = std::make_shared<std::string>(std::move(bytes));
    return [=](std::string* out) -> Result<bool> {
      if (*at >= data->size()) return false;
      *out = data->substr(*at, chunk);
      *at += out->size();
      return true;
    };
  }
  static v1::LoadImageHeader Header(std::vector<std::string> nodes, int64_t size, std::string name = "") {
    v1::LoadImageHeader h;
    for (auto& n : nodes) h.add_nodes(n);
    h.set_size_bytes(size);
    h.set_name(std::move(name));
    return h;
  }
  size_t Spooled() const {
    size_t n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir_ + "/archives", ec);
         it != std::filesystem::directory_iterator(); ++it) {
      ++n;
    }
    return n;
  }
  static auto Soon() { return std::chrono::system_clock::now() + std::chrono::seconds(20); }
  const auth::Principal admin_{"t1", "root", "default", auth::Role::kAdmin, "", ""};
  const auth::Principal user_{"t2", "alice", "default", auth::Role::kUser, "", ""};
};

TEST_F(LoadTest, AnArchiveReachesOnlyTheNodesToldAndTheirAnswersComeBack) {
  auto a = Connect("n1", 1);
  auto b = Connect("n2", 1);
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  api.EnableImageArchives(dir_ + "/archives", 1 << 20);
  const std::string bytes = "not really a tar, but the server does not look";
  auto done = std::async(std::launch::async, [&] {
    return api.LoadImage(admin_, Header({"n1"}, static_cast<int64_t>(bytes.size()), "localhost/tiny:1"),
                         Chunks(bytes), Soon());
  });
  ASSERT_TRUE(a->WaitForPulls(1));
  const v1::PullImage told = a->pulls()[0];
  ASSERT_TRUE(told.has_archive());
  EXPECT_EQ(told.reference(), "localhost/tiny:1");
  EXPECT_EQ(told.archive().size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(told.archive().sha256(), auth::Sha256Hex(bytes));
  EXPECT_TRUE(b->pulls().empty());
  // Only the node told may read it, and what it reads is what came.
  EXPECT_EQ(api.OpenImageArchive("n2", told.archive().load_id()).status().code(), Code::kNotFound);
  EXPECT_EQ(api.OpenImageArchive("n1", "../../etc/passwd").status().code(), Code::kNotFound);
  auto opened = api.OpenImageArchive("n1", told.archive().load_id());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->second, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(*ReadTextFile(opened->first), bytes);
  // Another node's answer, or one for another load, changes nothing.
  v1::ImageLoaded stray;
  stray.set_load_id(told.archive().load_id());
  stray.set_error("n2 never had it");
  api.ImageLoaded("n2", stray);
  v1::ImageLoaded loaded;
  loaded.set_load_id(told.archive().load_id());
  loaded.mutable_image()->add_references("localhost/tiny:1");
  loaded.mutable_image()->set_digest(kDigest);
  api.ImageLoaded("n1", loaded);
  auto resp = done.get();
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  ASSERT_EQ(resp->loads_size(), 1);
  EXPECT_EQ(resp->loads(0).node(), "n1");
  EXPECT_EQ(resp->loads(0).error(), "");
  EXPECT_EQ(resp->loads(0).image().digest(), kDigest);
  // Answered: gone, for every node.
  EXPECT_EQ(api.OpenImageArchive("n1", told.archive().load_id()).status().code(), Code::kNotFound);
  EXPECT_EQ(Spooled(), 0u);
}

TEST_F(LoadTest, ANodeThatDoesNotAnswerIsSaidToHaveNotLoadedIt) {
  auto a = Connect("n1", 1);
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  api.EnableImageArchives(dir_ + "/archives", 1 << 20);
  auto resp = api.LoadImage(admin_, Header({"n1"}, 4), Chunks("abcd"),
                            std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  ASSERT_EQ(resp->loads_size(), 1);
  EXPECT_NE(resp->loads(0).error().find("did not say"), std::string::npos) << resp->loads(0).error();
  EXPECT_EQ(a->pulls().size(), 1u);
  EXPECT_EQ(Spooled(), 0u);
}

TEST_F(LoadTest, BadLoadsAreRefusedBeforeAnyNodeHearsAndLeaveNothing) {
  auto a = Connect("n1", 1);
  Register("n3", 1);  // no session
  ApiService api(loop_.get(), nullptr, nullptr, nullptr);
  auto off = api.LoadImage(admin_, Header({"n1"}, 4), Chunks("abcd"), Soon());
  EXPECT_EQ(off.status().code(), Code::kUnavailable);  // no spool: this server takes none
  api.EnableImageArchives(dir_ + "/archives", 16);
  auto code = [&](const auth::Principal& who, v1::LoadImageHeader h, std::string bytes) {
    return api.LoadImage(who, h, Chunks(std::move(bytes)), Soon()).status().code();
  };
  EXPECT_EQ(code(user_, Header({"n1"}, 4), "abcd"), Code::kPermissionDenied);
  EXPECT_EQ(code(admin_, Header({}, 4), "abcd"), Code::kInvalidArgument);
  EXPECT_EQ(code(admin_, Header({"n9"}, 4), "abcd"), Code::kNotFound);
  EXPECT_EQ(code(admin_, Header({"n3"}, 4), "abcd"), Code::kUnavailable);
  EXPECT_EQ(code(admin_, Header({"n1"}, 4, "Busybox"), "abcd"), Code::kInvalidArgument);
  EXPECT_EQ(code(admin_, Header({"n1"}, 0), ""), Code::kInvalidArgument);
  EXPECT_EQ(code(admin_, Header({"n1"}, 17), std::string(17, 'x')), Code::kResourceExhausted);  // over the limit
  EXPECT_EQ(code(admin_, Header({"n1"}, 4), "abcdef"), Code::kInvalidArgument);                 // more than it said
  EXPECT_EQ(code(admin_, Header({"n1"}, 4), "ab"), Code::kInvalidArgument);                     // fewer
  // A stream that breaks off mid-way.
  int calls = 0;
  ApiService::ArchiveReader broken = [&](std::string* out) -> Result<bool> {
    if (calls++ == 0) {
      *out = "ab";
      return true;
    }
    return Aborted("the upload was cancelled");
  };
  EXPECT_EQ(api.LoadImage(admin_, Header({"n1"}, 4), broken, Soon()).status().code(), Code::kAborted);
  EXPECT_TRUE(a->pulls().empty());
  EXPECT_EQ(Spooled(), 0u);
}

}  // namespace
}  // namespace drover::server::testing
