#include "drover/server/deployments.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "drover/rpc/convert.h"

namespace drover::server {
namespace {

v1::DeploymentSpec Base(const std::string& engine) {
  v1::DeploymentSpec s;
  s.set_name("llm");
  s.set_tenant("default");
  s.set_owner("alice");
  s.set_model("/models/x y.gguf");  // a space: never split by the shell
  s.set_engine(engine);
  s.set_gpus(2);
  s.set_replicas(1);
  return s;
}

TEST(DeploymentSpecTest, FillsDefaults) {
  v1::DeploymentSpec s = Base("vllm");
  s.clear_gpus();
  ASSERT_TRUE(NormalizeDeploymentSpec(&s, DeploymentOptions()).ok());
  EXPECT_EQ(s.served_model_name(), "llm");
  EXPECT_EQ(s.gpus(), 1);
  EXPECT_EQ(s.readiness().http_path(), "/health");
  EXPECT_EQ(s.target_outstanding(), 4.0);
  EXPECT_EQ(s.scale_down_idle_seconds(), 300);
  v1::DeploymentSpec custom = Base("");
  custom.add_command("my-server");
  ASSERT_TRUE(NormalizeDeploymentSpec(&custom, DeploymentOptions()).ok());
  EXPECT_EQ(custom.engine(), "custom");
  EXPECT_EQ(custom.readiness().http_path(), "/health");
  // A custom command needs no model (it is then the served name); an engine template does.
  v1::DeploymentSpec unnamed = custom;
  unnamed.clear_model();
  ASSERT_TRUE(NormalizeDeploymentSpec(&unnamed, DeploymentOptions()).ok());
  EXPECT_EQ(unnamed.model(), "llm");
  v1::DeploymentSpec vllm = Base("vllm");
  vllm.clear_model();
  EXPECT_EQ(NormalizeDeploymentSpec(&vllm, DeploymentOptions()).code(), Code::kInvalidArgument);
  v1::DeploymentSpec tcp = Base("vllm");
  tcp.mutable_readiness()->set_tcp(true);
  ASSERT_TRUE(NormalizeDeploymentSpec(&tcp, DeploymentOptions()).ok());
  EXPECT_TRUE(tcp.readiness().http_path().empty());
}

TEST(DeploymentSpecTest, EngineTemplates) {
  struct Case {
    std::string engine;
    std::string script_part;
  };
  for (
      const Case& c : std::vector<Case>{
          {"vllm",
           "exec vllm serve \"$m\" --port \"$DROVER_PORT\" --served-model-name \"$n\" --tensor-parallel-size 2 \"$@\""},
          {"llama.cpp", "exec llama-server -m \"$m\" --port \"$DROVER_PORT\" --alias \"$n\" --n-gpu-layers 999 \"$@\""},
          {"sglang",
           "exec python3 -m sglang.launch_server --model-path \"$m\" --port \"$DROVER_PORT\" --served-model-name "
           "\"$n\" "
           "--tp 2 \"$@\""}}) {
    v1::DeploymentSpec s = Base(c.engine);
    s.set_served_model_name("chat");
    s.add_command("--max-model-len");
    s.add_command("4096");
    auto argv = EngineCommand(s);
    ASSERT_TRUE(argv.ok()) << argv.status().ToString();
    ASSERT_EQ(argv->size(), 8u) << c.engine;
    EXPECT_EQ((*argv)[0], "sh");
    EXPECT_EQ((*argv)[1], "-c");
    EXPECT_NE((*argv)[2].find(c.script_part), std::string::npos) << (*argv)[2];
    EXPECT_EQ((*argv)[4], "/models/x y.gguf");
    EXPECT_EQ((*argv)[5], "chat");
    EXPECT_EQ((*argv)[6], "--max-model-len");
    EXPECT_EQ((*argv)[7], "4096");
  }
  v1::DeploymentSpec custom = Base("custom");
  custom.add_command("python3");
  custom.add_command("serve.py");
  EXPECT_EQ(*EngineCommand(custom), (std::vector<std::string>{"python3", "serve.py"}));
}

// Runs a template's command line as the agent would (no shell of its own:
// argv[0] is "sh"), with only `env` and PATH=<bin>:/usr/bin:/bin; what it
// printed on stdout.
std::string RunTemplate(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                        const std::string& bin) {
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    std::vector<std::string> vars = {"PATH=" + bin + ":/usr/bin:/bin"};
    for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
    std::vector<char*> args, envp;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    for (const std::string& v : vars) envp.push_back(const_cast<char*>(v.c_str()));
    args.push_back(nullptr);
    envp.push_back(nullptr);
    ::execve("/bin/sh", args.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return text;
}

// Issue 37: each template hands the replica's secret (DROVER_ENGINE_API_KEY,
// which the agent sets) to its engine the way the engine reads it, and
// leaves the engine alone without one. The engines here are fakes on PATH
// that print what they got.
TEST(DeploymentSpecTest, TemplatesHandTheReplicasSecretToTheEngine) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "drover-engines-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string bin = tmpl;
  for (const char* engine : {"vllm", "llama-server", "python3"}) {
    const std::string path = bin + "/" + engine;
    std::ofstream(path) << "#!/bin/sh\necho \"VLLM_API_KEY=${VLLM_API_KEY-unset} "
                           "LLAMA_API_KEY=${LLAMA_API_KEY-unset} ARGS=$*\"\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  const std::string key = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I";
  auto run = [&](const std::string& engine, const std::map<std::string, std::string>& env) {
    v1::DeploymentSpec s = Base(engine);
    s.set_served_model_name("chat");
    s.add_command("--max-model-len");
    s.add_command("4096");
    auto argv = EngineCommand(s);
    EXPECT_TRUE(argv.ok()) << argv.status().ToString();
    if (!argv.ok()) return std::string();
    // The secret is never in the stored command line, only expanded by the shell.
    for (const std::string& a : *argv) EXPECT_EQ(a.find(key), std::string::npos) << a;
    return RunTemplate(*argv, env, bin);
  };
  const std::map<std::string, std::string> keyed = {{"DROVER_ENGINE_API_KEY", key}};
  std::string vllm = run("vllm", keyed);
  EXPECT_NE(vllm.find("VLLM_API_KEY=" + key + " LLAMA_API_KEY=unset ARGS=serve /models/x y.gguf --port"),
            std::string::npos)
      << vllm;
  EXPECT_EQ(vllm.find("--api-key"), std::string::npos) << vllm;
  std::string llama = run("llama.cpp", keyed);
  EXPECT_NE(llama.find("VLLM_API_KEY=unset LLAMA_API_KEY=" + key + " ARGS=-m /models/x y.gguf"), std::string::npos)
      << llama;
  std::string sglang = run("sglang", keyed);
  EXPECT_NE(sglang.find("VLLM_API_KEY=unset LLAMA_API_KEY=unset ARGS=-m sglang.launch_server"), std::string::npos)
      << sglang;
  // First among the extra arguments: a user's own --api-key after it wins.
  EXPECT_NE(sglang.find("--tp 2 --api-key " + key + " --max-model-len 4096\n"), std::string::npos) << sglang;
  // No secret (an older server's replica), or an empty one: the engine is
  // left as the job's env says, a user's own variable included.
  for (const auto& env : std::vector<std::map<std::string, std::string>>{
           {}, {{"DROVER_ENGINE_API_KEY", ""}}, {{"VLLM_API_KEY", "mine"}, {"LLAMA_API_KEY", "mine"}}}) {
    const std::string want = env.contains("VLLM_API_KEY") ? "mine" : "unset";
    std::string v = run("vllm", env);
    EXPECT_NE(v.find("VLLM_API_KEY=" + want + " "), std::string::npos) << v;
    std::string l = run("llama.cpp", env);
    EXPECT_NE(l.find("LLAMA_API_KEY=" + want + " "), std::string::npos) << l;
    std::string g = run("sglang", env);
    EXPECT_NE(g.find("--tp 2 --max-model-len 4096\n"), std::string::npos) << g;
    EXPECT_EQ(g.find("--api-key"), std::string::npos) << g;
  }
  std::error_code ec;
  std::filesystem::remove_all(bin, ec);
}

TEST(DeploymentSpecTest, ReplicaSpecIsANormalizedService) {
  v1::DeploymentSpec s = Base("vllm");
  ASSERT_TRUE(NormalizeDeploymentSpec(&s, DeploymentOptions()).ok());
  DeploymentOptions o;
  o.service_priority = 250;
  auto job = ReplicaSpec(s, 3, o);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->priority(), 250);
  EXPECT_EQ(job->deployment(), "llm");
  EXPECT_EQ(job->deployment_revision(), 3);
  EXPECT_EQ(job->gpus(), 2);
  EXPECT_FALSE(job->preemptible());
  EXPECT_EQ(job->service().model(), "llm");
  EXPECT_EQ(job->owner(), "alice");
  s.set_priority(900);
  EXPECT_EQ(ReplicaSpec(s, 3, o)->priority(), 900);
  // --services-preempt=false: its replicas wait rather than preempt.
  EXPECT_FALSE(job->never_preempt());
  EXPECT_TRUE(rpc::ToJobRequest("j-1", *job).may_preempt);
  o.services_preempt = false;
  auto polite = ReplicaSpec(s, 3, o);
  ASSERT_TRUE(polite.ok());
  EXPECT_TRUE(polite->never_preempt());
  EXPECT_FALSE(rpc::ToJobRequest("j-1", *polite).may_preempt);
}

TEST(DeploymentSpecTest, OnlyTemplateChangesMakeARevision) {
  v1::DeploymentSpec a = Base("vllm");
  ASSERT_TRUE(NormalizeDeploymentSpec(&a, DeploymentOptions()).ok());
  v1::DeploymentSpec b = a;
  b.set_replicas(5);
  b.set_max_replicas(8);
  b.set_target_outstanding(2);
  EXPECT_FALSE(TemplateChanged(a, b));
  b.set_model("/models/other");
  EXPECT_TRUE(TemplateChanged(a, b));
}

TEST(DeploymentSpecTest, AutoscaleRule) {
  v1::DeploymentSpec s = Base("vllm");
  s.set_min_replicas(0);
  s.set_max_replicas(10);
  s.set_target_outstanding(4);
  s.set_scale_down_idle_seconds(60);
  const int64_t now = int64_t{1000} * 1'000'000'000;
  const int64_t recent = now - int64_t{10} * 1'000'000'000;
  const int64_t long_ago = now - int64_t{61} * 1'000'000'000;
  EXPECT_EQ(AutoscaleWant(s, {9, 0}, now, recent), 3);  // ceil(9 / 4)
  EXPECT_EQ(AutoscaleWant(s, {8, 0}, now, recent), 2);
  EXPECT_EQ(AutoscaleWant(s, {400, 0}, now, recent), 10);  // max
  EXPECT_EQ(AutoscaleWant(s, {0, 0}, now, recent), 1);     // not idle yet
  EXPECT_EQ(AutoscaleWant(s, {0, 0}, now, long_ago), 0);   // idle: zero
  EXPECT_EQ(AutoscaleWant(s, {0, 1}, now, long_ago), 1);   // one waits
  // Queue time: ignored without a target.
  EXPECT_EQ(AutoscaleWant(s, {4, 0, 900}, now, recent, 1, 1), 1);
  s.set_target_queue_ms(500);
  EXPECT_EQ(AutoscaleWant(s, {4, 0, 900}, now, recent, 1, 1), 2);     // above: one more
  EXPECT_EQ(AutoscaleWant(s, {4, 0, 900}, now, recent, 1, 2), 2);     // one still starting: hold
  EXPECT_EQ(AutoscaleWant(s, {0, 0, 900}, now, recent, 3, 3), 4);     // few requests, long queues
  EXPECT_EQ(AutoscaleWant(s, {4, 0, 900}, now, recent, 10, 10), 10);  // max
  EXPECT_EQ(AutoscaleWant(s, {4, 0, 400}, now, recent, 3, 3), 1);     // below: outstanding decides
  EXPECT_EQ(AutoscaleWant(s, {4, 0, -1}, now, recent, 3, 3), 1);      // not known: the same
  s.set_min_replicas(2);
  EXPECT_EQ(AutoscaleWant(s, {0, 0}, now, long_ago), 2);  // min
}

TEST(DeploymentSpecTest, TargetQueueTimeIsChecked) {
  v1::DeploymentSpec fixed = Base("vllm");
  fixed.set_target_queue_ms(500);
  Status s = NormalizeDeploymentSpec(&fixed, DeploymentOptions());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("needs max_replicas"), std::string::npos) << s.message();
  for (double bad : {-1.0, 3'600'001.0, std::nan("")}) {
    v1::DeploymentSpec a = Base("vllm");
    a.set_max_replicas(4);
    a.set_target_queue_ms(bad);
    EXPECT_EQ(NormalizeDeploymentSpec(&a, DeploymentOptions()).code(), Code::kInvalidArgument) << bad;
  }
  v1::DeploymentSpec ok = Base("vllm");
  ok.set_max_replicas(4);
  ok.set_target_queue_ms(250);
  ASSERT_TRUE(NormalizeDeploymentSpec(&ok, DeploymentOptions()).ok());
  v1::DeploymentSpec other = ok;
  other.set_target_queue_ms(1000);
  EXPECT_FALSE(TemplateChanged(ok, other));  // a scaling setting: no new revision
}

TEST(DeploymentSpecTest, RoutingDefaultsToPrefixLoadAndIsChecked) {
  v1::DeploymentSpec s = Base("vllm");
  ASSERT_TRUE(NormalizeDeploymentSpec(&s, DeploymentOptions()).ok());
  EXPECT_EQ(s.routing().policy(), "prefix-load");
  EXPECT_EQ(s.routing().prefix_weight(), 2.0);
  EXPECT_EQ(s.routing().load_weight(), 1.0);
  EXPECT_EQ(s.routing().load_bound(), 12);
  for (const char* p : {"prefix", "least-load", "affinity", "round-robin"}) {
    v1::DeploymentSpec a = Base("vllm");
    a.mutable_routing()->set_policy(p);
    ASSERT_TRUE(NormalizeDeploymentSpec(&a, DeploymentOptions()).ok()) << p;
    EXPECT_EQ(a.routing().policy(), p);
  }
  auto refused = [](const std::function<void(v1::RoutingSpec*)>& set, const std::string& field) {
    v1::DeploymentSpec a = Base("vllm");
    set(a.mutable_routing());
    Status st = NormalizeDeploymentSpec(&a, DeploymentOptions());
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  refused([](v1::RoutingSpec* r) { r->set_policy("random"); }, "routing.policy 'random'");
  refused([](v1::RoutingSpec* r) { r->set_prefix_weight(-1); }, "routing.prefix_weight");
  refused([](v1::RoutingSpec* r) { r->set_load_weight(std::nan("")); }, "routing.load_weight");
  refused([](v1::RoutingSpec* r) { r->set_load_weight(1e9); }, "routing.load_weight");
  refused([](v1::RoutingSpec* r) { r->set_load_bound(-2); }, "routing.load_bound");
  // The gateways' business: no new revision, no replica restarted.
  v1::DeploymentSpec b = s;
  b.mutable_routing()->set_policy("round-robin");
  b.mutable_routing()->set_load_bound(9);
  EXPECT_FALSE(TemplateChanged(s, b));
}

TEST(DeploymentSpecTest, OptionsAreChecked) {
  EXPECT_TRUE(ValidateDeploymentOptions(DeploymentOptions()).ok());
  DeploymentOptions o;
  o.service_priority = 5000;
  Status s = ValidateDeploymentOptions(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--service-priority 5000"), std::string::npos) << s.message();
}

TEST(ServiceSpecTest, ServiceJobsAreChecked) {
  auto job = [] {
    v1::JobSpec j;
    j.set_gpus(1);
    j.add_command("serve");
    j.mutable_service()->mutable_readiness()->set_http_path("/ready");
    return j;
  };
  v1::JobSpec ok = job();
  EXPECT_TRUE(rpc::NormalizeJobSpec(&ok).ok());
  auto refused = [&](const std::function<void(v1::JobSpec*)>& edit, const std::string& words) {
    v1::JobSpec j = job();
    edit(&j);
    Status s = rpc::NormalizeJobSpec(&j);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  refused([](v1::JobSpec* j) { j->set_replicas(2); }, "a service runs one process per job");
  refused([](v1::JobSpec* j) { j->mutable_service()->mutable_readiness()->set_http_path("/a b"); },
          "must start with '/'");
  refused(
      [](v1::JobSpec* j) {
        j->mutable_service()->mutable_readiness()->set_http_path(std::string(300, 'a').insert(0, "/"));
      },
      "at most 256");
  refused([](v1::JobSpec* j) { j->mutable_service()->mutable_readiness()->set_tcp(true); }, "both http_path and tcp");
  refused([](v1::JobSpec* j) { j->mutable_service()->mutable_liveness()->set_timeout_ms(-1); }, "timeout_ms -1");
  refused([](v1::JobSpec* j) { j->mutable_service()->mutable_liveness()->set_failure_threshold(1000); },
          "failure_threshold 1000");
  refused([](v1::JobSpec* j) { j->mutable_service()->set_ready_timeout_ms(-3); }, "ready_timeout_ms -3");
  refused(
      [](v1::JobSpec* j) {
        j->mutable_service()->set_restart_backoff_ms(5000);
        j->mutable_service()->set_max_restart_backoff_ms(1000);
      },
      "below restart_backoff_ms");
  refused([](v1::JobSpec* j) { j->mutable_service()->set_model("bad model"); }, "service model 'bad model'");
  refused(
      [](v1::JobSpec* j) {
        j->clear_service();
        j->set_deployment("x");
      },
      "must be a service");
}

}  // namespace
}  // namespace drover::server
