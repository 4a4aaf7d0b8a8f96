#include "drover/rpc/convert.h"

#include <gtest/gtest.h>

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
      {"zero gpus", [](v1::JobSpec* s) { s->set_gpus(0); }, "gpus 0 is outside"},
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

TEST(JobStateTest, DisplayAndParse) {
  EXPECT_EQ(JobStateDisplay(v1::JOB_STATE_RUNNING), "Running");
  EXPECT_EQ(JobStateDisplay(v1::JOB_STATE_CANCELLING), "Cancelling");
  EXPECT_EQ(ParseJobState("running").value(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(ParseJobState("JOB_STATE_FAILED").value(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(ParseJobState("exploded").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseJobState("unspecified").status().code(), Code::kInvalidArgument);
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
