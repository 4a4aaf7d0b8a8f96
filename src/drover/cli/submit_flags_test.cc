#include "drover/cli/submit_flags.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "drover/v1/api.pb.h"

namespace drover::cli {
namespace {

// Parses `drover submit ARGS` with the real flags.
SubmitArgs Parse(std::vector<std::string> args) {
  CLI::App app("drover");
  CLI::App* submit = app.add_subcommand("submit");
  SubmitArgs a;
  AddSubmitFlags(submit, &a);
  std::vector<std::string> argv = {"drover", "submit"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (std::string& s : argv) raw.push_back(s.data());
  app.parse(static_cast<int>(raw.size()), raw.data());
  return a;
}

// Every flag lands in the field the server reads: the JSON parses into
// v1.SubmitJobRequest (an unknown field name would fail here, and at the
// server with 400) with the values given.
TEST(SubmitFlagsTest, EveryFlagBecomesItsFieldOfTheRequest) {
  SubmitArgs a = Parse({"--name",
                        "n",
                        "--tenant",
                        "t",
                        "--priority",
                        "7",
                        "--gpus",
                        "250m",
                        "--gpu-memory",
                        "10GiB",
                        "--cpus",
                        "1.5",
                        "--memory",
                        "2GiB",
                        "--replicas",
                        "1",
                        "--selector",
                        "rack=r1",
                        "--topology",
                        "numa",
                        "--estimate",
                        "90m",
                        "--preemptible",
                        "--grace",
                        "3",
                        "--restart-policy",
                        "on-failure",
                        "--max-restarts",
                        "2",
                        "--checkpoint-signal",
                        "SIGUSR2",
                        "--checkpoint-grace",
                        "4",
                        "--gpu-model",
                        "H100 80GB",
                        "--gpu-vendor",
                        "nvidia",
                        "--workdir",
                        "/w",
                        "-e",
                        "A=1=2",
                        "--array",
                        "1-9:2%3",
                        "--",
                        "sh",
                        "-c",
                        "exit 1"});
  auto json = SubmitRequestJson(a);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  v1::SubmitJobRequest req;
  auto st = google::protobuf::util::JsonStringToMessage(json->dump(), &req);
  ASSERT_TRUE(st.ok()) << st.message();
  const v1::JobSpec& s = req.spec();
  EXPECT_EQ(s.name(), "n");
  EXPECT_EQ(s.tenant(), "t");
  EXPECT_EQ(s.priority(), 7);
  EXPECT_EQ(s.gpus(), 1);
  EXPECT_EQ(s.gpu_milli(), 250);
  EXPECT_EQ(s.gpu_memory_bytes(), 10LL << 30);
  EXPECT_EQ(s.cpu_millis(), 1500);
  EXPECT_EQ(s.memory_bytes(), 2LL << 30);
  // --cpu is the same flag (the and Nomad's spelling).
  auto cpu = SubmitRequestJson(Parse({"--cpu", "2", "--", "true"}));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ((*cpu)["spec"]["cpu_millis"], 2000) << cpu->dump();
  EXPECT_EQ(s.node_selector().at("rack"), "r1");
  EXPECT_EQ(s.topology(), "numa");
  EXPECT_EQ(s.runtime_estimate_seconds(), 5400);
  EXPECT_TRUE(s.preemptible());
  EXPECT_EQ(s.termination_grace_seconds(), 3);
  EXPECT_EQ(s.restart_policy(), "on-failure");
  EXPECT_EQ(s.max_restarts(), 2);
  EXPECT_EQ(s.checkpoint_signal(), "SIGUSR2");
  EXPECT_EQ(s.checkpoint_grace_seconds(), 4);
  EXPECT_EQ(s.gpu_model(), "H100 80GB");
  EXPECT_EQ(s.gpu_vendor(), "nvidia");
  EXPECT_EQ(s.working_dir(), "/w");
  EXPECT_EQ(s.env().at("A"), "1=2");
  ASSERT_EQ(s.command_size(), 3);
  EXPECT_EQ(s.command(2), "exit 1");
  EXPECT_EQ(req.array().first(), 1);
  EXPECT_EQ(req.array().last(), 9);
  EXPECT_EQ(req.array().step(), 2);
  EXPECT_EQ(req.array().max_running(), 3);
}

TEST(SubmitFlagsTest, WholeGpusStayWholeAndNoArrayMeansNone) {
  auto json = SubmitRequestJson(Parse({"--gpus", "2", "--", "true"}));
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)["spec"]["gpus"], 2);
  EXPECT_FALSE((*json)["spec"].contains("gpu_milli"));
  EXPECT_FALSE(json->contains("array"));
}

TEST(SubmitFlagsTest, FlagsThatDoNotParseSayWhich) {
  auto message = [](std::vector<std::string> args) {
    args.insert(args.end(), {"--", "true"});
    auto r = SubmitRequestJson(Parse(args));
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_NE(message({"--gpus", "1.5"}).find("a share of one GPU (below 1)"), std::string::npos);
  EXPECT_NE(message({"--gpus", "0.5"}).find("also give --gpu-memory"), std::string::npos);
  EXPECT_NE(message({"--memory", "lots"}).find("--memory"), std::string::npos);
  EXPECT_NE(message({"--selector", "rack"}).find("is not NAME=VALUE"), std::string::npos);
  EXPECT_NE(message({"-e", "=1"}).find("--env '=1'"), std::string::npos);
  EXPECT_NE(message({"--estimate", "soon"}).find("--estimate"), std::string::npos);
  EXPECT_NE(message({"--array", "5-1"}).find("--array"), std::string::npos);
}

TEST(SubmitFlagsTest, AnImageJobCarriesItsContainerAndNeedsNoCommand) {
  auto json = SubmitRequestJson(Parse({"--image", "vllm/vllm-openai:v0.6.3", "--pull", "always", "--network", "none",
                                       "--shm-size", "16g", "--mount", "/data/team-a:/data:ro", "--mount",
                                       "/scratch/x:/scratch", "--replicas", "2", "--array", "0-3"}));
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  v1::SubmitJobRequest req;
  auto st = google::protobuf::util::JsonStringToMessage(json->dump(), &req);
  ASSERT_TRUE(st.ok()) << st.message();
  const v1::ContainerSpec& c = req.spec().container();
  EXPECT_EQ(c.image(), "vllm/vllm-openai:v0.6.3");  // as written: the server keeps it so
  EXPECT_EQ(c.pull_policy(), "always");
  EXPECT_EQ(c.network(), "none");
  EXPECT_EQ(c.shm_bytes(), 16LL << 30);
  ASSERT_EQ(c.mounts_size(), 2);
  EXPECT_EQ(c.mounts(0).source(), "/data/team-a");
  EXPECT_EQ(c.mounts(0).target(), "/data");
  EXPECT_TRUE(c.mounts(0).read_only());
  EXPECT_EQ(c.mounts(1).target(), "/scratch");
  EXPECT_FALSE(c.mounts(1).read_only());
  EXPECT_EQ(req.spec().command_size(), 0);
  EXPECT_EQ(req.spec().replicas(), 2);
  EXPECT_EQ(req.array().last(), 3);

  auto with_command = SubmitRequestJson(Parse({"--image", "busybox", "--shm-size", "512MiB", "--", "sleep", "1"}));
  ASSERT_TRUE(with_command.ok()) << with_command.status().ToString();
  EXPECT_EQ((*with_command)["spec"]["command"].size(), 2u);
  EXPECT_EQ((*with_command)["spec"]["container"]["shm_bytes"], 512LL << 20);
  // Without --image nothing of a container is sent.
  auto bare = SubmitRequestJson(Parse({"--", "true"}));
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE((*bare)["spec"].contains("container"));
}

TEST(SubmitFlagsTest, BadContainerFlagsAreRefusedBeforeSending) {
  auto message = [](std::vector<std::string> args) {
    auto r = SubmitRequestJson(Parse(args));
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    return r.status().message();
  };
  EXPECT_NE(message({}).find("a command is required"), std::string::npos);
  EXPECT_NE(message({"--image", "Busybox"}).find("--image"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--pull", "never"}).find("--pull 'never'"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--network", "bridge"}).find("--network 'bridge'"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--shm-size", "big"}).find("--shm-size"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--mount", "/data"}).find("is not SRC:DST[:ro]"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--mount", "/a:/b:rx"}).find("is not SRC:DST[:ro]"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--mount", "/a:/b:ro:x"}).find("is not SRC:DST[:ro]"), std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--mount", "data:/data"}).find("'data' is not an absolute path"),
            std::string::npos);
  EXPECT_NE(message({"--image", "busybox", "--mount", ":/data"}).find("not an absolute path"), std::string::npos);
  EXPECT_NE(message({"--mount", "/a:/b", "--", "true"}).find("go with --image"), std::string::npos);
}

// --after and --time-limit: JOB[:ok|:any] (repeatable) and a duration or
// plain seconds; --gpus 0 is CPU-only work.
TEST(SubmitFlagsTest, DependenciesTimeLimitAndCpuOnly) {
  auto r = SubmitRequestJson(
      Parse({"--gpus", "0", "--after", "j-000003", "--after", "j-000004:any", "--time-limit", "4h", "--", "true"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  v1::SubmitJobRequest req;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r->dump(), &req).ok()) << r->dump();
  EXPECT_EQ(req.spec().gpus(), 0);
  ASSERT_EQ(req.spec().after_size(), 2);
  EXPECT_EQ(req.spec().after(0).job_id(), "j-000003");
  EXPECT_EQ(req.spec().after(0).condition(), "ok");
  EXPECT_EQ(req.spec().after(1).condition(), "any");
  EXPECT_EQ(req.spec().time_limit_seconds(), 4 * 3600);
  EXPECT_EQ(*ParseTimeLimit("30m"), 1800);
  EXPECT_EQ(*ParseTimeLimit("90s"), 90);
  EXPECT_EQ(*ParseTimeLimit("3600"), 3600);
  for (const char* bad : {"0", "", "soon", "-5", "1x"}) {
    EXPECT_EQ(ParseTimeLimit(bad).status().code(), Code::kInvalidArgument) << bad;
  }
  for (const char* bad : {"j-000003:maybe", ":ok", ""}) {
    EXPECT_EQ(ParseAfter(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace drover::cli
