#include "drover/rpc/convert.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace drover::rpc {
namespace {

v1::JobSpec GoodSpec() {
  v1::JobSpec s;
  s.set_gpus(2);
  s.add_command("sh");
  s.add_command("-c");
  s.add_command("echo hi");
  return s;
}

TEST(NormalizeJobSpecTest, FillsDefaultTenantAndConverts) {
  v1::JobSpec s = GoodSpec();
  s.set_gpu_model("H100 80GB");
  s.set_gpu_memory_bytes(1 << 30);
  Status st = NormalizeJobSpec(&s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.tenant(), "default");
  sched::JobRequest r = ToJobRequest("j-000001", s);
  EXPECT_EQ(r.id, "j-000001");
  EXPECT_EQ(r.gpus, 2);
  EXPECT_EQ(r.gpu_model, "H100 80GB");
  EXPECT_EQ(r.gpu_memory_bytes, 1 << 30);
}

struct BadCase {
  const char* what;
  void (*mutate)(v1::JobSpec*);
  const char* message_part;
};

TEST(NormalizeJobSpecTest, RejectsEveryBadField) {
  const BadCase cases[] = {
      {"cpu-only with a gpu model",
       [](v1::JobSpec* s) {
         s->set_gpus(0);
         s->set_gpu_model("H100 80GB");
       },
       "gpus 0 (CPU-only) takes no"},
      {"after a non-id", [](v1::JobSpec* s) { s->add_after()->set_job_id("../x"); }, "is not a job id"},
      {"after twice",
       [](v1::JobSpec* s) {
         s->add_after()->set_job_id("j-000001");
         s->add_after()->set_job_id("j-000001");
       },
       "names j-000001 twice"},
      {"after with an unknown condition",
       [](v1::JobSpec* s) {
         v1::JobDependency* d = s->add_after();
         d->set_job_id("j-000001");
         d->set_condition("notok");
       },
       "condition 'notok' is unknown"},
      {"negative time limit", [](v1::JobSpec* s) { s->set_time_limit_seconds(-1); }, "time_limit_seconds -1"},
      {"negative gpus", [](v1::JobSpec* s) { s->set_gpus(-3); }, "gpus -3"},
      {"absurd gpus", [](v1::JobSpec* s) { s->set_gpus(100000); }, "gpus 100000"},
      {"negative memory", [](v1::JobSpec* s) { s->set_gpu_memory_bytes(-1); }, "gpu_memory_bytes -1"},
      {"absurd memory", [](v1::JobSpec* s) { s->set_gpu_memory_bytes(int64_t{1} << 62); }, "gpu_memory_bytes"},
      {"empty command", [](v1::JobSpec* s) { s->clear_command(); }, "command is empty"},
      {"empty argv0", [](v1::JobSpec* s) { s->set_command(0, ""); }, "command[0] is empty"},
      {"huge command", [](v1::JobSpec* s) { s->add_command(std::string(70000, 'x')); }, "more than 65536"},
      {"nul in command", [](v1::JobSpec* s) { s->add_command(std::string("a\0b", 3)); }, "NUL"},
      {"bad tenant", [](v1::JobSpec* s) { s->set_tenant("Team A"); }, "tenant 'Team A'"},
      {"bad name", [](v1::JobSpec* s) { s->set_name("-x"); }, "job name '-x'"},
      {"priority", [](v1::JobSpec* s) { s->set_priority(5000); }, "priority 5000"},
      {"vendor", [](v1::JobSpec* s) { s->set_gpu_vendor("3dfx"); }, "gpu_vendor '3dfx'"},
      {"env name", [](v1::JobSpec* s) { (*s->mutable_env())["1BAD"] = "x"; }, "env name '1BAD'"},
      {"reserved env", [](v1::JobSpec* s) { (*s->mutable_env())["CUDA_VISIBLE_DEVICES"] = "0"; }, "set by drover"},
      {"drover env", [](v1::JobSpec* s) { (*s->mutable_env())["DROVER_GPU_IDS"] = "0"; }, "set by drover"},
      {"relative dir", [](v1::JobSpec* s) { s->set_working_dir("tmp"); }, "not an absolute path"},
      {"grace", [](v1::JobSpec* s) { s->set_termination_grace_seconds(-1); }, "termination_grace_seconds -1"},
      {"negative cpus", [](v1::JobSpec* s) { s->set_cpu_millis(-1); }, "cpu_millis -1 is outside"},
      {"absurd cpus", [](v1::JobSpec* s) { s->set_cpu_millis(int64_t{1} << 40); }, "cpu_millis"},
      {"negative host memory", [](v1::JobSpec* s) { s->set_memory_bytes(-5); }, "memory_bytes -5 is outside"},
      {"absurd host memory", [](v1::JobSpec* s) { s->set_memory_bytes(int64_t{1} << 62); }, "memory_bytes"},
      {"negative share", [](v1::JobSpec* s) { s->set_gpu_milli(-1); }, "gpu_milli -1 is outside 0..1000"},
      {"share over one", [](v1::JobSpec* s) { s->set_gpu_milli(1500); }, "gpu_milli 1500"},
      {"share of two gpus",
       [](v1::JobSpec* s) {
         s->set_gpu_milli(250);
         s->set_gpu_memory_bytes(int64_t{10} << 30);
       },
       "gpus is 2 (must be 1)"},
      {"share without memory",
       [](v1::JobSpec* s) {
         s->set_gpus(1);
         s->set_gpu_milli(250);
       },
       "needs gpu_memory_bytes > 0"},
      {"share of a gang",
       [](v1::JobSpec* s) {
         s->set_gpus(1);
         s->set_gpu_milli(250);
         s->set_gpu_memory_bytes(1 << 30);
         s->set_replicas(2);
       },
       "replicas is 2 (must be 1)"},
      {"negative replicas", [](v1::JobSpec* s) { s->set_replicas(-1); }, "replicas -1 is outside 1..1024"},
      {"absurd replicas", [](v1::JobSpec* s) { s->set_replicas(5000); }, "replicas 5000"},
      {"huge gang",
       [](v1::JobSpec* s) {
         s->set_gpus(64);
         s->set_replicas(1000);
       },
       "replicas x gpus is 64000 GPUs"},
      {"selector name", [](v1::JobSpec* s) { (*s->mutable_node_selector())["-rack"] = "r1"; },
       "node_selector label name '-rack'"},
      {"selector empty name", [](v1::JobSpec* s) { (*s->mutable_node_selector())[""] = "r1"; },
       "node_selector label name ''"},
      {"selector value", [](v1::JobSpec* s) { (*s->mutable_node_selector())["rack"] = "r 1"; }, "has value 'r 1'"},
      {"selector prefix", [](v1::JobSpec* s) { (*s->mutable_node_selector())["Bad_Prefix/rack"] = "r1"; },
       "bad prefix"},
      {"long selector value", [](v1::JobSpec* s) { (*s->mutable_node_selector())["rack"] = std::string(64, 'r'); },
       "has value"},
      {"topology", [](v1::JobSpec* s) { s->set_topology("galaxy"); }, "topology 'galaxy' is unknown"},
      {"negative estimate", [](v1::JobSpec* s) { s->set_runtime_estimate_seconds(-5); }, "runtime_estimate_seconds -5"},
      {"absurd estimate", [](v1::JobSpec* s) { s->set_runtime_estimate_seconds(int64_t{1} << 50); },
       "runtime_estimate_seconds"},
  };
  for (const BadCase& c : cases) {
    v1::JobSpec s = GoodSpec();
    c.mutate(&s);
    Status r = NormalizeJobSpec(&s);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.code(), Code::kInvalidArgument) << c.what;
    EXPECT_NE(r.message().find(c.message_part), std::string::npos) << c.what << ": " << r.message();
  }
}

TEST(NormalizeJobSpecTest, MapsEverySchedulingField) {
  v1::JobSpec s = GoodSpec();
  s.set_tenant("research");
  s.set_priority(900);
  s.set_replicas(0);
  s.set_gpu_vendor("nvidia");
  (*s.mutable_node_selector())["rack"] = "r1";
  (*s.mutable_node_selector())["example.com/pool"] = "";
  s.set_topology("island");
  s.set_runtime_estimate_seconds(7200);
  s.set_preemptible(true);
  s.set_cpu_millis(1500);
  s.set_memory_bytes(int64_t{16} << 30);
  ASSERT_TRUE(NormalizeJobSpec(&s).ok());
  EXPECT_EQ(s.replicas(), 1);
  EXPECT_EQ(s.topology(), "island");
  sched::JobRequest r = ToJobRequest("j-000007", s);
  EXPECT_EQ(r.tenant, "research");
  EXPECT_EQ(r.priority, 900);
  EXPECT_EQ(r.replicas, 1);
  EXPECT_EQ(r.gpus, 2);
  EXPECT_EQ(r.gpu_milli, sched::kWholeGpu);
  EXPECT_FALSE(r.fractional());
  EXPECT_EQ(r.gpu_vendor, "nvidia");
  EXPECT_EQ(r.node_selector, (std::map<std::string, std::string>{{"rack", "r1"}, {"example.com/pool", ""}}));
  EXPECT_EQ(r.topology, sched::Topology::kIsland);
  EXPECT_EQ(r.runtime_estimate_ms, 7'200'000);
  EXPECT_TRUE(r.preemptible);
  EXPECT_EQ(r.cpu_milli, 1500);
  EXPECT_EQ(r.memory_bytes, int64_t{16} << 30);

  // A share of one GPU.
  v1::JobSpec f = GoodSpec();
  f.set_gpus(1);
  f.set_gpu_milli(250);
  f.set_gpu_memory_bytes(int64_t{20} << 30);
  ASSERT_TRUE(NormalizeJobSpec(&f).ok());
  sched::JobRequest fr = ToJobRequest("j-000008", f);
  EXPECT_TRUE(fr.fractional());
  EXPECT_EQ(fr.gpu_milli, 250);
  EXPECT_EQ(fr.gpu_memory_bytes, int64_t{20} << 30);
  EXPECT_EQ(fr.tenant, "default");
  EXPECT_EQ(fr.topology, sched::Topology::kBestEffort);
  EXPECT_EQ(fr.runtime_estimate_ms, 0);
  EXPECT_FALSE(fr.preemptible);

  // 1000 thousandths is a whole GPU; a gang keeps its shape.
  v1::JobSpec g = GoodSpec();
  g.set_gpu_milli(1000);
  g.set_replicas(4);
  g.set_topology("best-effort");
  ASSERT_TRUE(NormalizeJobSpec(&g).ok());
  EXPECT_EQ(g.gpu_milli(), 0);
  sched::JobRequest gr = ToJobRequest("j-000009", g);
  EXPECT_EQ(gr.replicas, 4);
  EXPECT_EQ(gr.milli(), 4 * 2 * sched::kWholeGpu);
}

TEST(AllocationTest, BindingRoundTripsThroughTheJobStatus) {
  sched::Binding b{"j-000001", {sched::Placement{"gpu-01", {3}, 250, int64_t{10} << 30}}};
  v1::Job job;
  job.set_id("j-000001");
  SetAllocation(b, job.mutable_status());
  EXPECT_EQ(job.status().allocation().node(), "gpu-01");
  EXPECT_EQ(job.status().allocation().gpu_milli(), 250);
  EXPECT_EQ(job.status().replicas_size(), 0);
  sched::Binding back = ToBinding(job);
  ASSERT_EQ(back.replicas.size(), 1u);
  EXPECT_EQ(back.replicas[0].gpu_indices, std::vector<int>{3});
  EXPECT_EQ(back.replicas[0].gpu_milli, 250);
  EXPECT_EQ(back.replicas[0].gpu_memory_bytes, int64_t{10} << 30);

  sched::Binding gang{"j-000002", {sched::Placement{"a", {0, 1}, 1000, 0}, sched::Placement{"b", {4, 5}, 1000, 0}}};
  SetAllocation(gang, job.mutable_status());
  EXPECT_EQ(job.status().allocation().node(), "a");
  ASSERT_EQ(job.status().replicas_size(), 2);
  back = ToBinding(job);
  ASSERT_EQ(back.replicas.size(), 2u);
  EXPECT_EQ(back.replicas[1].node, "b");
  EXPECT_EQ(back.replicas[1].gpu_indices, (std::vector<int>{4, 5}));

  // Records from before shares existed hold gpu_milli 0: whole GPUs.
  v1::Job old;
  old.mutable_status()->mutable_allocation()->set_node("n");
  old.mutable_status()->mutable_allocation()->add_gpu_indices(0);
  EXPECT_EQ(ToBinding(old).replicas[0].gpu_milli, sched::kWholeGpu);
}

TEST(WorkloadIdTest, NamesReplicasOfGangsOnly) {
  EXPECT_EQ(WorkloadId("j-000007", 0, 1, 0), "j-000007");
  EXPECT_EQ(WorkloadId("j-000007", 1, 2, 0), "j-000007.1");
  EXPECT_EQ(WorkloadId("j-000007", 0, 1, 2), "j-000007@2");
  EXPECT_EQ(WorkloadId("j-000007", 1, 2, 3), "j-000007.1@3");
  auto attempt = ParseWorkloadId("j-000007.1@3");
  ASSERT_TRUE(attempt.ok());
  EXPECT_EQ(attempt->job_id, "j-000007");
  EXPECT_EQ(attempt->replica, 1);
  EXPECT_EQ(attempt->attempt, 3);
  EXPECT_EQ(ParseWorkloadId("j-000007@12")->attempt, 12);
  auto one = ParseWorkloadId("j-000007");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->job_id, "j-000007");
  EXPECT_FALSE(one->gang);
  auto rep = ParseWorkloadId("j-000007.12");
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->job_id, "j-000007");
  EXPECT_EQ(rep->replica, 12);
  EXPECT_TRUE(rep->gang);
  for (const char* bad : {"", "j-000007.", "j-000007.x", "j-000007.-1", "j-000007.-0", "j-000007.01", "j-000007.5000",
                          "x.1", "j-000007.1.2", "j-000007@", "j-000007@0", "j-000007@01", "j-000007@-1", "j-000007@x",
                          "j-000007@1@2", "j-000007@1.2", "j-000007.1@"}) {
    EXPECT_FALSE(ParseWorkloadId(bad).ok()) << bad;
  }
}

TEST(ValidateRegisterTest, TheAdvertisedHostIsAnAddressAndTheLaunchPortsARange) {
  v1::RegisterRequest req;
  req.set_node_name("gpu-01");
  req.set_advertise_host("10.0.0.7");
  req.set_launch_port_first(29400);
  req.set_launch_port_last(29499);
  ASSERT_TRUE(ValidateRegister(req).ok()) << ValidateRegister(req).ToString();
  req.set_advertise_host("fd00::7");
  EXPECT_TRUE(ValidateRegister(req).ok());
  req.set_advertise_host("gpu-01.example");
  EXPECT_NE(ValidateRegister(req).message().find("'gpu-01.example', which is not an IP address"), std::string::npos)
      << ValidateRegister(req).ToString();
  req.clear_advertise_host();
  for (auto [first, last] : {std::pair{29499, 29400}, std::pair{0, 10}, std::pair{1, 70000}}) {
    req.set_launch_port_first(first);
    req.set_launch_port_last(last);
    EXPECT_NE(ValidateRegister(req).message().find("launch port range"), std::string::npos) << first << "-" << last;
  }
}

TEST(ValidateRegisterTest, ChecksTopologyAndLabels) {
  v1::RegisterRequest req;
  req.set_node_name("gpu-01");
  for (int i = 0; i < 2; ++i) {
    v1::Gpu* g = req.add_gpus();
    g->set_index(i);
    g->set_vendor("nvidia");
    g->set_model("H100 80GB");
    g->set_memory_bytes(int64_t{80} << 30);
    g->set_numa_node(i);
  }
  for (int l : {3, 0, 0, 3}) req.add_links(l);
  (*req.mutable_labels())["rack"] = "r1";
  ASSERT_TRUE(ValidateRegister(req).ok()) << ValidateRegister(req).ToString();
  v1::Node node;
  node.set_name("gpu-01");
  *node.mutable_gpus() = req.gpus();
  *node.mutable_links() = req.links();
  *node.mutable_labels() = req.labels();
  sched::NodeInfo info = ToNodeInfo(node, true);
  EXPECT_EQ(info.gpus[1].numa_node, 1);
  EXPECT_EQ(info.links, (std::vector<sched::Link>{sched::Link::kFabric, sched::Link::kCrossSocket,
                                                  sched::Link::kCrossSocket, sched::Link::kFabric}));
  EXPECT_EQ(info.labels.at("rack"), "r1");
  EXPECT_TRUE(info.schedulable);

  auto bad = req;
  bad.add_links(1);
  EXPECT_NE(ValidateRegister(bad).message().find("link matrix of 5 values, expected 4"), std::string::npos);
  bad = req;
  bad.set_links(1, 7);
  EXPECT_NE(ValidateRegister(bad).message().find("outside 0..3"), std::string::npos);
  bad = req;
  bad.set_links(1, 2);
  EXPECT_NE(ValidateRegister(bad).message().find("not symmetric"), std::string::npos);
  bad = req;
  bad.mutable_gpus(0)->set_numa_node(-1);
  EXPECT_NE(ValidateRegister(bad).message().find("NUMA node -1"), std::string::npos);
  bad = req;
  (*bad.mutable_labels())["rack"] = "not ok";
  EXPECT_EQ(ValidateRegister(bad).code(), Code::kInvalidArgument);
  bad = req;
  bad.clear_links();
  EXPECT_TRUE(ValidateRegister(bad).ok()) << "no matrix: derived from NUMA nodes";
}

TEST(ValidateRegisterTest, ChecksInventory) {
  v1::RegisterRequest req;
  req.set_node_name("gpu-01");
  for (int i = 0; i < 2; ++i) {
    v1::Gpu* g = req.add_gpus();
    g->set_index(i);
    g->set_vendor("nvidia");
    g->set_model("H100 80GB");
    g->set_memory_bytes(int64_t{80} << 30);
  }
  EXPECT_TRUE(ValidateRegister(req).ok());
  auto bad = req;
  bad.mutable_gpus(1)->set_index(5);
  EXPECT_EQ(ValidateRegister(bad).code(), Code::kInvalidArgument);
  bad = req;
  bad.set_node_name("GPU_01");
  EXPECT_EQ(ValidateRegister(bad).code(), Code::kInvalidArgument);
  bad = req;
  bad.mutable_gpus(0)->set_memory_bytes(-5);
  EXPECT_EQ(ValidateRegister(bad).code(), Code::kInvalidArgument);
  bad = req;
  for (int i = 2; i < 70; ++i) {
    v1::Gpu* g = bad.add_gpus();
    *g = req.gpus(0);
    g->set_index(i);
  }
  EXPECT_NE(ValidateRegister(bad).message().find("more than 64"), std::string::npos);
}

// Issue 37: a replica's secret is base64url of a sane length (it goes into
// an environment and a header line), and no job view keeps it.
TEST(EngineKeyTest, BoundsAndBlankedInViews) {
  EXPECT_TRUE(ValidateEngineKey("").ok());
  EXPECT_TRUE(ValidateEngineKey(std::string(43, 'A')).ok());
  EXPECT_TRUE(ValidateEngineKey("abcDEF0123456789-_xyz").ok());
  for (const std::string& bad : {std::string(15, 'a'), std::string(129, 'a'), std::string(20, 'a') + "\r\nX: y",
                                 std::string(20, 'a') + "=", std::string(20, 'a') + std::string(1, '\0'),
                                 std::string(20, 'a') + " b"}) {
    Status s = ValidateEngineKey(bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad.size();
    EXPECT_EQ(s.message().find(bad), std::string::npos) << "the key is never echoed";
  }
  v1::JobSpec spec;
  spec.add_command("serve");
  spec.set_gpus(1);
  spec.mutable_service()->set_api_key("x\ny");
  Status normalized = NormalizeJobSpec(&spec);
  EXPECT_EQ(normalized.code(), Code::kInvalidArgument);
  EXPECT_NE(normalized.message().find("service api_key must be"), std::string::npos) << normalized.ToString();
  v1::Job job;
  *job.mutable_spec()->mutable_service() = v1::ServiceSpec();
  job.mutable_spec()->mutable_service()->set_model("m");
  job.mutable_spec()->mutable_service()->set_api_key(std::string(43, 'k'));
  BlankSecrets(&job);
  EXPECT_TRUE(job.spec().service().api_key().empty());
  EXPECT_EQ(job.spec().service().model(), "m");
  v1::Job plain;
  plain.mutable_spec()->add_command("echo");
  BlankSecrets(&plain);
  EXPECT_FALSE(plain.spec().has_service()) << "a plain job does not become a service";
}

TEST(JobStateTest, DisplayAndParse) {
  EXPECT_EQ(JobStateDisplay(v1::JOB_STATE_RUNNING), "Running");
  EXPECT_EQ(JobStateDisplay(v1::JOB_STATE_CANCELLING), "Cancelling");
  EXPECT_EQ(JobStateDisplay(v1::JOB_STATE_PREEMPTING), "Preempting");
  EXPECT_EQ(ParseJobState("preempting").value(), v1::JOB_STATE_PREEMPTING);
  EXPECT_TRUE(HoldsGpus(v1::JOB_STATE_PREEMPTING));
  EXPECT_FALSE(HoldsGpus(v1::JOB_STATE_PENDING));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_PREEMPTING));
  EXPECT_EQ(ParseJobState("running").value(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(ParseJobState("JOB_STATE_FAILED").value(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(ParseJobState("exploded").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseJobState("unspecified").status().code(), Code::kInvalidArgument);
}

TEST(ConvertTest, ArraySpecsAsSlurmWritesThem) {
  auto a = ParseArraySpec("1-1000:10%5");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->first(), 1);
  EXPECT_EQ(a->last(), 1000);
  EXPECT_EQ(a->step(), 10);
  EXPECT_EQ(a->max_running(), 5);
  auto one = ParseArraySpec("7");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->first(), 7);
  EXPECT_EQ(one->last(), 7);
  EXPECT_EQ(one->max_running(), 0);
  for (const char* bad : {"", "-", "5-1", "1-x", "1-10%0", "1-10:0", "1-10%", "-3-4", "1-99999999999999999999"}) {
    EXPECT_EQ(ParseArraySpec(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(GrpcStatusTest, RoundTripsCodes) {
  Status s = NotFound("job 'j-000001' not found");
  grpc::Status g = ToGrpc(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(FromGrpc(g).code(), Code::kNotFound);
  EXPECT_EQ(FromGrpc(g).message(), s.message());
  EXPECT_TRUE(ToGrpc(Status::Ok()).ok());
}

}  // namespace
}  // namespace drover::rpc
