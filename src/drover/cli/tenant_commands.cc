// drover tenants list|create|set|delete: tenants as data (admin).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <map>

#include "drover/cli/client.h"
#include "drover/cli/commands.h"
#include "drover/cli/table.h"
#include "drover/cli/terminal.h"
#include "drover/common/config.h"
#include "drover/common/quantity.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::cli {
namespace {

struct TenantArgs {
  std::string name;
  double weight = 1;
  std::vector<std::string> guarantees, max_gpus;
  int borrow_limit = -1;
  std::string max_gpu_memory, period, max_runtime, max_cpus;
  double gpu_hours = 0;
  int max_pending = 0, max_array_tasks = 0, max_gpus_per_user = 0;
  int64_t requests_per_minute = 0, tokens_per_minute = 0;  // the gateway's, for the whole tenant
  std::vector<std::string> mount_roots;                    // directories its container jobs may mount
};

// "H100 80GB=8" -> map entry; "*=16" counts every model.
Status ParseModelCounts(const std::vector<std::string>& in, const char* flag,
                        google::protobuf::Map<std::string, int32_t>* out) {
  out->clear();
  for (const std::string& kv : in) {
    size_t eq = kv.rfind('=');
    if (eq == std::string::npos || eq == 0) return InvalidArgument(fmt::format("{} '{}' is not MODEL=N", flag, kv));
    char* end = nullptr;
    long n = std::strtol(kv.c_str() + eq + 1, &end, 10);
    if (*end != '\0' || n < 0 || n > 1'000'000 || eq + 1 == kv.size()) {
      return InvalidArgument(fmt::format("{} '{}': N must be 0..1000000", flag, kv));
    }
    (*out)[kv.substr(0, eq)] = static_cast<int32_t>(n);
  }
  return Status::Ok();
}

// Applies the flags that were given (all of them for create) to `t`.
Status Apply(const TenantArgs& a, const CLI::App* cmd, bool all, v1::Tenant* t) {
  auto given = [&](const char* flag) { return all || cmd->count(flag) > 0; };
  t->set_name(a.name);
  if (given("--weight")) t->set_weight(a.weight);
  if (given("--guarantee"))
    DROVER_RETURN_IF_ERROR(ParseModelCounts(a.guarantees, "--guarantee", t->mutable_guaranteed_gpus()));
  if (given("--borrow-limit")) t->set_borrow_limit(a.borrow_limit);
  v1::TenantQuota* q = t->mutable_quota();
  if (given("--max-gpus")) DROVER_RETURN_IF_ERROR(ParseModelCounts(a.max_gpus, "--max-gpus", q->mutable_max_gpus()));
  if (given("--max-gpu-memory")) {
    if (a.max_gpu_memory.empty() || a.max_gpu_memory == "0") {
      q->set_max_gpu_memory_bytes(0);
    } else {
      DROVER_ASSIGN_OR_RETURN(int64_t b, ParseBytes(a.max_gpu_memory));
      q->set_max_gpu_memory_bytes(b);
    }
  }
  if (given("--max-cpus")) {
    // CPUs like submit's --cpus: "64", "0.5" or "500m"; 0: none.
    auto milli = ParseMilliGpu(a.max_cpus.empty() ? "0" : a.max_cpus);
    if (!milli.ok()) {
      return InvalidArgument(fmt::format("--max-cpus '{}' is not a number of CPUs (64, 0.5 or 500m)", a.max_cpus));
    }
    q->set_max_cpu_millis(*milli);
  }
  auto seconds = [](const std::string& text, const char* flag) -> Result<int64_t> {
    if (text.empty() || text == "0") return int64_t{0};
    auto ms = ParseDurationMs(text);
    if (!ms.ok()) return InvalidArgument(fmt::format("{}: {}", flag, ms.status().message()));
    return *ms / 1000;
  };
  if (given("--gpu-hours")) q->set_gpu_hours(a.gpu_hours);
  if (given("--period")) {
    DROVER_ASSIGN_OR_RETURN(int64_t s, seconds(a.period, "--period"));
    q->set_period_seconds(s);
  }
  if (given("--max-runtime")) {
    DROVER_ASSIGN_OR_RETURN(int64_t s, seconds(a.max_runtime, "--max-runtime"));
    q->set_max_runtime_seconds(s);
  }
  if (given("--max-pending")) q->set_max_pending_jobs(a.max_pending);
  if (given("--max-array-tasks")) q->set_max_array_tasks(a.max_array_tasks);
  if (given("--max-gpus-per-user")) q->set_max_gpus_per_user(a.max_gpus_per_user);
  if (given("--requests-per-minute")) q->set_requests_per_minute(a.requests_per_minute);
  if (given("--tokens-per-minute")) q->set_tokens_per_minute(a.tokens_per_minute);
  if (given("--mount-root")) {
    t->clear_mount_roots();
    for (const std::string& root : a.mount_roots) {
      // "--mount-root ''" clears them; the server checks the paths.
      if (root.empty()) continue;
      if (root.front() != '/') return InvalidArgument(fmt::format("--mount-root '{}' is not an absolute path", root));
      t->add_mount_roots(root);
    }
  }
  return Status::Ok();
}

std::string Limit(int64_t v, const std::string& text) { return v > 0 ? text : "-"; }

int List(const Common& c) {
  auto stub = v1::ClusterService::NewStub(Channel(c));
  v1::ListTenantsResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->ListTenants(ctx.get(), v1::ListTenantsRequest(), &resp); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  Table t({"NAME", "WEIGHT", "GPUS", "RUNNING", "PENDING", "MAX GPUS", "GPU-HOURS", "MAX RUNTIME", "MOUNT ROOTS",
           "SOURCE"});
  for (const v1::TenantStatus& ts : resp.tenants()) {
    const v1::TenantQuota& q = ts.quota();
    std::string caps;
    for (const auto& [model, n] : q.max_gpus()) caps += fmt::format("{}{}={}", caps.empty() ? "" : ",", model, n);
    t.AddRow({ts.name(), fmt::format("{:g}", ts.weight()), fmt::format("{:g}", ts.usage_milli() / 1000.0),
              std::to_string(ts.running_jobs()), std::to_string(ts.pending_jobs()), caps.empty() ? "-" : caps,
              q.gpu_hours() > 0 ? fmt::format("{:.2f}/{:g}", ts.gpu_hours_used(), q.gpu_hours()) : "-",
              Limit(q.max_runtime_seconds(), fmt::format("{}s", q.max_runtime_seconds())),
              ts.mount_roots().empty() ? "-" : fmt::format("{}", fmt::join(ts.mount_roots(), ",")),
              ts.stored() ? "stored" : "config/jobs"});
  }
  t.Print(std::cout);
  return 0;
}

int Set(const TenantArgs& a, const CLI::App* cmd, bool create, const Common& c) {
  v1::SetTenantRequest req;
  req.set_create(create);
  if (!create) {
    // Start from what is there: `set` changes only the flags given.
    auto cluster = v1::ClusterService::NewStub(Channel(c));
    v1::ListTenantsResponse resp;
    auto ctx = Context(c);
    if (grpc::Status s = cluster->ListTenants(ctx.get(), v1::ListTenantsRequest(), &resp); !s.ok()) return Fail(s, c);
    for (const v1::TenantStatus& ts : resp.tenants()) {
      if (ts.name() != a.name) continue;
      v1::Tenant* t = req.mutable_tenant();
      t->set_weight(ts.weight());
      *t->mutable_guaranteed_gpus() = ts.guaranteed_gpus();
      t->set_borrow_limit(ts.borrow_limit());
      *t->mutable_quota() = ts.quota();
      *t->mutable_mount_roots() = ts.mount_roots();  // kept unless --mount-root is given
    }
  } else {
    req.mutable_tenant()->set_borrow_limit(-1);
  }
  if (Status s = Apply(a, cmd, false, req.mutable_tenant()); !s.ok()) return Usage(s.message());
  auto stub = v1::TenantService::NewStub(Channel(c));
  v1::TenantStatus out;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Set(ctx.get(), req, &out); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(out) << "\n";
  } else {
    std::cout << fmt::format("tenant {} {}\n", EscapeTerminal(out.name()), create ? "created" : "updated");
  }
  return 0;
}

int Delete(const std::string& name, const Common& c) {
  auto stub = v1::TenantService::NewStub(Channel(c));
  v1::DeleteTenantRequest req;
  req.set_name(name);
  v1::DeleteTenantResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Delete(ctx.get(), req, &resp); !s.ok()) return Fail(s, c);
  std::cout << fmt::format("tenant {} deleted\n", EscapeTerminal(name));
  return 0;
}

void AddTenantFlags(CLI::App* cmd, TenantArgs* a) {
  cmd->add_option("name", a->name, "tenant name")->required();
  cmd->add_option("--weight", a->weight, "fair-share weight (> 0)");
  cmd->add_option("--guarantee", a->guarantees, "guaranteed GPUs, MODEL=N (repeatable)");
  cmd->add_option("--borrow-limit", a->borrow_limit, "GPUs beyond its guarantees, all models (-1: no limit)");
  cmd->add_option("--max-gpus", a->max_gpus, "quota: GPUs held at once, MODEL=N or *=N for all models (repeatable)");
  cmd->add_option("--max-gpu-memory", a->max_gpu_memory, "quota: GPU memory held at once, e.g. 640GiB (0: none)");
  cmd->add_option("--max-cpus", a->max_cpus,
                  "quota: CPUs held at once by its jobs, with GPUs or without, e.g. 64 or 0.5 (0: none)");
  cmd->add_option("--gpu-hours", a->gpu_hours,
                  "quota: GPU-hours per period; new jobs are refused when spent (0: none)");
  cmd->add_option("--period", a->period, "the budget's period (default 30d)");
  cmd->add_option("--max-pending", a->max_pending,
                  "quota: pending jobs at once (0: the server's default, 10000 unless set; -1: no limit)");
  cmd->add_option("--max-array-tasks", a->max_array_tasks,
                  "quota: jobs one submit (array or batch) may add (0: the server's default, 1001 unless set; -1: "
                  "the most, 100000)");
  cmd->add_option("--max-runtime", a->max_runtime,
                  "quota: longest job runtime, e.g. 24h; longer jobs are stopped (0: none)");
  cmd->add_option("--max-gpus-per-user", a->max_gpus_per_user, "quota: GPUs one user holds or queues (0: none)");
  cmd->add_option("--requests-per-minute", a->requests_per_minute,
                  "gateway: requests per minute for the whole tenant (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--tokens-per-minute", a->tokens_per_minute,
                  "gateway: prompt and completion tokens per minute for the whole tenant (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--mount-root", a->mount_roots,
                  "a node directory its container jobs may mount, it or under it (repeatable; replaces the list; '' "
                  "for none)");
}

}  // namespace

void AddTenantCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common) {
  CLI::App* tenants = app.add_subcommand("tenants", "tenants, their shares and quotas: list, create, set, delete");
  tenants->require_subcommand(1);
  CLI::App* list = tenants->add_subcommand("list", "tenants with usage and quotas");
  AddCommon(list, common.get(), true);
  list->callback(run([common] { return List(*common); }));

  auto ca = std::make_shared<TenantArgs>();
  CLI::App* create = tenants->add_subcommand("create", "admin: create a tenant");
  AddCommon(create, common.get(), true);
  AddTenantFlags(create, ca.get());
  create->callback(run([ca, create, common] { return Set(*ca, create, true, *common); }));

  auto sa = std::make_shared<TenantArgs>();
  CLI::App* set = tenants->add_subcommand("set", "admin: change a tenant (only the flags given)");
  AddCommon(set, common.get(), true);
  AddTenantFlags(set, sa.get());
  set->callback(run([sa, set, common] { return Set(*sa, set, false, *common); }));

  auto name = std::make_shared<std::string>();
  CLI::App* del = tenants->add_subcommand("delete", "admin: delete a stored tenant without unfinished jobs");
  AddCommon(del, common.get(), false);
  del->add_option("name", *name, "tenant name")->required();
  del->callback(run([name, common] { return Delete(*name, *common); }));
}

}  // namespace drover::cli
