// drover deploy|deployments|deployment|scale|undeploy|models: model
// deployments (docs/deployments.md) over DeploymentService.

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "drover/cli/client.h"
#include "drover/cli/commands.h"
#include "drover/cli/printers.h"
#include "drover/cli/submit_flags.h"
#include "drover/cli/table.h"
#include "drover/cli/terminal.h"
#include "drover/common/config.h"
#include "drover/common/quantity.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::cli {
namespace {

struct DeployArgs {
  std::string name, model, served_name, engine, tenant, gpu_model;
  std::string gpus = "1", gpu_memory = "0", cpus = "0", memory = "0";
  int replicas = 1, priority = 0, min_replicas = 0, max_replicas = 0;
  double target_outstanding = 0;
  std::string routing;
  double prefix_weight = 0, load_weight = 0;
  int load_bound = 0;
  std::string scale_down_idle, target_queue;
  std::string readiness_path, liveness_path;
  bool readiness_tcp = false, replace = false;
  std::vector<std::string> env, selector, command;
  ContainerArgs container;
};

Status ParsePairs(const std::vector<std::string>& in, const char* flag,
                  google::protobuf::Map<std::string, std::string>* out) {
  for (const std::string& kv : in) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return InvalidArgument(fmt::format("{} '{}' is not NAME=VALUE", flag, kv));
    (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return Status::Ok();
}

// The spec the flags ask for; the server checks the rest (names, bounds,
// engines, quota).
Result<v1::DeploymentSpec> SpecFrom(const DeployArgs& a) {
  v1::DeploymentSpec s;
  s.set_name(a.name);
  s.set_model(a.model);
  s.set_served_model_name(a.served_name);
  s.set_engine(a.engine);
  s.set_tenant(a.tenant);
  s.set_gpu_model(a.gpu_model);
  for (const std::string& c : a.command) s.add_command(c);
  DROVER_ASSIGN_OR_RETURN(int64_t milli, ParseMilliGpu(a.gpus));
  if (milli >= kMilliGpuPerGpu) {
    if (milli % kMilliGpuPerGpu != 0)
      return InvalidArgument(fmt::format("--gpus {}: whole GPUs or a share of one", a.gpus));
    s.set_gpus(static_cast<int32_t>(std::min<int64_t>(milli / kMilliGpuPerGpu, 1 << 20)));
  } else if (milli > 0) {
    s.set_gpus(1);
    s.set_gpu_milli(static_cast<int32_t>(milli));
  }
  if (a.gpu_memory != "0") {
    DROVER_ASSIGN_OR_RETURN(int64_t b, ParseBytes(a.gpu_memory));
    s.set_gpu_memory_bytes(b);
  }
  auto cpus = ParseMilliGpu(a.cpus);
  if (!cpus.ok()) return InvalidArgument(fmt::format("--cpus '{}' is not a number of CPUs (2, 0.5 or 500m)", a.cpus));
  s.set_cpu_millis(*cpus);
  if (a.memory != "0") {
    DROVER_ASSIGN_OR_RETURN(int64_t b, ParseBytes(a.memory));
    s.set_memory_bytes(b);
  }
  s.set_priority(a.priority);
  s.set_replicas(a.replicas);
  s.set_min_replicas(a.min_replicas);
  s.set_max_replicas(a.max_replicas);
  s.set_target_outstanding(a.target_outstanding);
  if (!a.target_queue.empty()) {
    auto ms = ParseDurationMs(a.target_queue);
    if (!ms.ok()) return InvalidArgument("--target-queue: " + ms.status().message());
    s.set_target_queue_ms(static_cast<double>(*ms));
  }
  if (!a.scale_down_idle.empty()) {
    auto ms = ParseDurationMs(a.scale_down_idle);
    if (!ms.ok()) return InvalidArgument("--scale-down-idle: " + ms.status().message());
    s.set_scale_down_idle_seconds(static_cast<int32_t>(std::min<int64_t>(*ms / 1000, INT32_MAX)));
  }
  if (!a.readiness_path.empty() || a.readiness_tcp) {
    s.mutable_readiness()->set_http_path(a.readiness_path);
    s.mutable_readiness()->set_tcp(a.readiness_tcp && a.readiness_path.empty());
  }
  if (!a.liveness_path.empty()) s.mutable_liveness()->set_http_path(a.liveness_path);
  if (!a.routing.empty() || a.prefix_weight != 0 || a.load_weight != 0 || a.load_bound != 0) {
    v1::RoutingSpec* r = s.mutable_routing();
    r->set_policy(a.routing);
    r->set_prefix_weight(a.prefix_weight);
    r->set_load_weight(a.load_weight);
    r->set_load_bound(a.load_bound);
  }
  DROVER_RETURN_IF_ERROR(ParsePairs(a.env, "--env", s.mutable_env()));
  DROVER_RETURN_IF_ERROR(ParsePairs(a.selector, "--selector", s.mutable_node_selector()));
  DROVER_ASSIGN_OR_RETURN(nlohmann::json container, ContainerJson(a.container));
  if (!container.is_null()) {
    auto parsed = google::protobuf::util::JsonStringToMessage(container.dump(), s.mutable_container());
    if (!parsed.ok()) return InvalidArgument("--image: " + parsed.ToString());
  }
  return s;
}

std::string StateName(v1::JobState s) {
  std::string n = v1::JobState_Name(s);
  const std::string prefix = "JOB_STATE_";
  if (n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return n;
}

std::string Scaling(const v1::DeploymentSpec& s) {
  if (s.max_replicas() <= 0) return "-";
  return fmt::format("{}..{}", s.min_replicas(), s.max_replicas());
}

}  // namespace

void DescribeDeployment(const v1::Deployment& d, std::ostream& out) {
  const v1::DeploymentSpec& s = d.spec();
  const v1::DeploymentStatus& st = d.status();
  // Names, the model and the message are what a tenant wrote: escaped (terminal.h).
  auto e = [](const std::string& text) { return EscapeTerminal(text); };
  out << fmt::format("name:        {}\n", e(s.name()));
  out << fmt::format("tenant:      {}\n", e(s.tenant()));
  out << fmt::format("model:       {} (served as {})\n", e(s.model()), e(Or(s.served_model_name(), s.name().c_str())));
  out << fmt::format("engine:      {}\n", e(Or(s.engine())));
  out << fmt::format("replicas:    {} ready of {} desired{}\n", st.ready_replicas(), st.desired_replicas(),
                     s.max_replicas() > 0 ? fmt::format(" (auto-scaling {})", Scaling(s)) : "");
  out << fmt::format("per replica: {} GPU{}{}\n",
                     s.gpu_milli() > 0 ? FormatMilliGpu(s.gpu_milli()) : std::to_string(s.gpus()),
                     s.gpus() == 1 && s.gpu_milli() == 0 ? "" : "s",
                     s.gpu_memory_bytes() > 0 ? ", " + FormatBytes(s.gpu_memory_bytes()) + " GPU memory" : "");
  if (s.has_container()) {
    out << fmt::format("image:       {}{}\n", e(s.container().image()),
                       st.image_digest().empty() ? "" : " (" + e(st.image_digest()) + ")");
  }
  out << fmt::format("revision:    {}\n", st.revision());
  if (s.has_routing()) {
    const v1::RoutingSpec& r = s.routing();
    out << fmt::format("routing:     {}", e(Or(r.policy(), "prefix-load")));
    if (r.policy().empty() || r.policy() == "prefix-load") {
      out << fmt::format(" (prefix weight {:g}, load weight {:g}, load bound {})", r.prefix_weight(), r.load_weight(),
                         r.load_bound());
    }
    out << "\n";
  }
  out << fmt::format("load:        {} outstanding, {} waiting", st.outstanding(), st.waiting());
  if (st.engine_waiting() > 0 || st.queue_ms() >= 0) {
    out << fmt::format("; engines: {} queued, queue time {}", std::max<int64_t>(0, st.engine_waiting()),
                       st.queue_ms() < 0 ? std::string("-") : fmt::format("{:.0f} ms", st.queue_ms()));
  }
  out << "\n";
  if (!st.message().empty()) out << fmt::format("message:     {}\n", e(st.message()));
  out << "\n";
  Table t({"REPLICA", "REV", "STATE", "READY", "NODE", "ENDPOINT", "RESTARTS", "OUTSTANDING", "ENGINE", "PREFIX HIT",
           "REASON"});
  for (const v1::DeploymentReplica& r : st.replicas()) {
    // ENGINE: its own running + waiting requests (scraped); PREFIX HIT: of
    // the prompt blocks the gateways sent it, those they expected it held.
    t.AddRow({r.job_id(), std::to_string(r.revision()), StateName(r.state()), r.ready() ? "yes" : "no", Or(r.node()),
              Or(r.endpoint()), std::to_string(r.restarts()), std::to_string(r.outstanding()),
              r.engine_load() >= 0 ? std::to_string(r.engine_load()) : "-",
              r.expected_prefix_hit() >= 0 ? fmt::format("{:.0f}%", 100 * r.expected_prefix_hit()) : "-",
              r.reason().empty() ? "-" : r.reason()});
  }
  t.Print(out);
}

namespace {

int Deploy(const DeployArgs& a, const Common& c) {
  auto spec = SpecFrom(a);
  if (!spec.ok()) return Usage(spec.status().message());
  auto stub = v1::DeploymentService::NewStub(Channel(c));
  v1::ApplyDeploymentRequest req;
  *req.mutable_spec() = *spec;
  req.set_replace(a.replace);
  v1::Deployment out;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Apply(ctx.get(), req, &out); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(out) << "\n";
  } else {
    std::cout << fmt::format("deployment {} {} (revision {}, {} replica{})\n", EscapeTerminal(out.spec().name()),
                             a.replace ? "applied" : "created", out.status().revision(),
                             out.status().desired_replicas(), out.status().desired_replicas() == 1 ? "" : "s");
  }
  return 0;
}

int List(const Common& c) {
  auto stub = v1::DeploymentService::NewStub(Channel(c));
  v1::ListDeploymentsResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->List(ctx.get(), v1::ListDeploymentsRequest(), &resp); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  Table t({"NAME", "TENANT", "MODEL", "ENGINE", "READY", "AUTOSCALE", "OUTSTANDING", "AGE", "MESSAGE"});
  const int64_t now = NowNanos();
  for (const v1::Deployment& d : resp.deployments()) {
    const v1::DeploymentSpec& s = d.spec();
    const v1::DeploymentStatus& st = d.status();
    t.AddRow({s.name(), s.tenant(), Or(s.served_model_name(), s.name().c_str()), Or(s.engine()),
              fmt::format("{}/{}", st.ready_replicas(), st.desired_replicas()), Scaling(s),
              std::to_string(st.outstanding()), Age(st.created_unix_nanos(), now),
              st.message().empty() ? "-" : st.message()});
  }
  t.Print(std::cout);
  return 0;
}

// `tenant`: empty for the token's own; an admin names another tenant's
// deployment with --tenant (names are per tenant).
int Show(const std::string& name, const std::string& tenant, const Common& c) {
  auto stub = v1::DeploymentService::NewStub(Channel(c));
  v1::GetDeploymentRequest req;
  req.set_name(name);
  req.set_tenant(tenant);
  v1::Deployment out;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Get(ctx.get(), req, &out); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(out) << "\n";
  } else {
    DescribeDeployment(out, std::cout);
  }
  return 0;
}

int Scale(const std::string& name, const std::string& tenant, int replicas, const Common& c) {
  if (replicas < 0) return Usage("replicas must be 0 or more");
  auto stub = v1::DeploymentService::NewStub(Channel(c));
  v1::ScaleDeploymentRequest req;
  req.set_name(name);
  req.set_tenant(tenant);
  req.set_replicas(replicas);
  v1::Deployment out;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Scale(ctx.get(), req, &out); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(out) << "\n";
  } else {
    std::cout << fmt::format("deployment {} scaled to {}\n", EscapeTerminal(name), out.status().desired_replicas());
  }
  return 0;
}

int Undeploy(const std::string& name, const std::string& tenant, const Common& c) {
  auto stub = v1::DeploymentService::NewStub(Channel(c));
  v1::DeleteDeploymentRequest req;
  req.set_name(name);
  req.set_tenant(tenant);
  v1::Deployment out;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Delete(ctx.get(), req, &out); !s.ok()) return Fail(s, c);
  std::cout << fmt::format("deployment {} deleted\n", EscapeTerminal(name));
  return 0;
}

int Models(const Common& c) {
  auto stub = v1::DeploymentService::NewStub(Channel(c));
  v1::EndpointsResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Endpoints(ctx.get(), v1::EndpointsRequest(), &resp); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  Table t({"MODEL", "DEPLOYMENT", "TENANT", "READY", "ENDPOINTS"});
  for (const v1::ServingModel& m : resp.models()) {
    int ready = 0;
    std::string where;
    for (const v1::ServingEndpoint& e : resp.endpoints()) {
      if (e.model() != m.model() || e.deployment() != m.deployment() || e.tenant() != m.tenant()) continue;
      ++ready;
      where += fmt::format("{}{}", where.empty() ? "" : ",", e.address());
    }
    t.AddRow({m.model(), m.deployment(), m.tenant(),
              ready == 0 && m.scales_from_zero() ? "0 (starts on demand)" : std::to_string(ready),
              where.empty() ? "-" : where});
  }
  t.Print(std::cout);
  return 0;
}

void AddDeployFlags(CLI::App* cmd, DeployArgs* a) {
  cmd->add_option("name", a->name, "deployment name (DNS label)")->required();
  cmd->add_option("--model", a->model, "the model to load: a path or the engine's model id");
  cmd->add_option("--served-model-name", a->served_name, "the name clients ask for (default: the deployment's name)");
  cmd->add_option("--engine", a->engine, "vllm, llama.cpp, sglang or custom (default: custom with a command)");
  cmd->add_option("--replicas", a->replicas, "replicas to run (default 1)");
  cmd->add_option("--gpus", a->gpus, "GPUs per replica (2), or a share of one GPU (0.5 or 500m)");
  cmd->add_option("--gpu-memory", a->gpu_memory, "GPU memory per replica, e.g. 20GiB");
  cmd->add_option("--gpu-model", a->gpu_model, "only GPUs of this model");
  cmd->add_option("--cpus,--cpu", a->cpus, "CPUs per replica (2, 0.5 or 500m)");
  cmd->add_option("--memory", a->memory, "host memory per replica, e.g. 16GiB");
  cmd->add_option("--tenant", a->tenant, "the tenant (default: your token's; another's needs an admin token)");
  cmd->add_option("--priority", a->priority, "priority of its replicas (default: the server's service priority)");
  cmd->add_option("--min-replicas", a->min_replicas, "auto-scaling: fewest replicas (0: scale to zero when idle)");
  cmd->add_option("--max-replicas", a->max_replicas, "auto-scaling: most replicas (0: no auto-scaling)");
  cmd->add_option("--target-outstanding", a->target_outstanding,
                  "auto-scaling: requests in flight per replica to aim for (default 4)");
  cmd->add_option("--target-queue", a->target_queue,
                  "auto-scaling: add a replica while the engines' mean queue time is above this, e.g. 500ms (needs "
                  "gateways with --scrape-engine-metrics; default: off)");
  cmd->add_option("--scale-down-idle", a->scale_down_idle,
                  "auto-scaling to zero: idle time before the last replica stops (default 5m)");
  cmd->add_option("--routing", a->routing,
                  "how gateways pick a replica: prefix-load (default: where the prompt's prefix is cached, within a "
                  "load bound), prefix, least-load, affinity or round-robin");
  cmd->add_option("--prefix-weight", a->prefix_weight, "prefix-load: weight of the expected prefix-cache hit (default 2)");
  cmd->add_option("--load-weight", a->load_weight, "prefix-load: weight of the load (default 1)");
  cmd->add_option("--load-bound", a->load_bound,
                  "prefix-load: a replica this many requests over the least loaded is never chosen for its cache "
                  "(default 12)");
  cmd->add_option("--readiness-path", a->readiness_path, "readiness probe: HTTP path (default /health)");
  cmd->add_flag("--readiness-tcp", a->readiness_tcp, "readiness probe: a TCP connect to the port");
  cmd->add_option("--liveness-path", a->liveness_path, "liveness probe: HTTP path (default: none)");
  cmd->add_option("-e,--env", a->env, "NAME=VALUE, repeatable");
  cmd->add_option("--selector", a->selector, "node label NAME=VALUE, repeatable");
  cmd->add_flag("--replace", a->replace, "change an existing deployment (a new template rolls its replicas over)");
  AddContainerFlags(cmd, &a->container);
  cmd->add_option("command", a->command,
                  "custom engine: the command (after --; with --image, optional: the image's own runs); others: "
                  "extra arguments");
}

}  // namespace

void AddDeployCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common) {
  auto da = std::make_shared<DeployArgs>();
  CLI::App* deploy = app.add_subcommand("deploy",
                                        "deploy a model: drover deploy NAME --model M --replicas N --gpus G [--engine "
                                        "vllm|llama.cpp|sglang|custom] [-- CMD...]");
  AddCommon(deploy, common.get(), true);
  AddDeployFlags(deploy, da.get());
  deploy->callback(run([da, common] { return Deploy(*da, *common); }));

  CLI::App* list = app.add_subcommand("deployments", "list model deployments");
  AddCommon(list, common.get(), true);
  list->callback(run([common] { return List(*common); }));

  auto name = std::make_shared<std::string>();
  auto tenant = std::make_shared<std::string>();
  const char* tenant_help = "the deployment's tenant (default: your token's; another's needs an admin token)";
  CLI::App* show =
      app.add_subcommand("deployment", "show one deployment: its replicas, where they run, readiness and load");
  AddCommon(show, common.get(), true);
  show->add_option("name", *name, "deployment name")->required();
  show->add_option("--tenant", *tenant, tenant_help);
  show->callback(run([name, tenant, common] { return Show(*name, *tenant, *common); }));

  auto replicas = std::make_shared<int>(0);
  CLI::App* scale = app.add_subcommand("scale", "set a deployment's replica count: drover scale NAME N");
  AddCommon(scale, common.get(), true);
  scale->add_option("name", *name, "deployment name")->required();
  scale->add_option("replicas", *replicas, "replicas")->required();
  scale->add_option("--tenant", *tenant, tenant_help);
  scale->callback(run([name, tenant, replicas, common] { return Scale(*name, *tenant, *replicas, *common); }));

  CLI::App* undeploy = app.add_subcommand("undeploy", "stop a deployment's replicas and delete it");
  AddCommon(undeploy, common.get(), false);
  undeploy->add_option("name", *name, "deployment name")->required();
  undeploy->add_option("--tenant", *tenant, tenant_help);
  undeploy->callback(run([name, tenant, common] { return Undeploy(*name, *tenant, *common); }));

  CLI::App* models = app.add_subcommand("models", "the models the gateway serves, with their ready endpoints");
  AddCommon(models, common.get(), true);
  models->callback(run([common] { return Models(*common); }));
}

}  // namespace drover::cli
