#include "drover/cli/commands.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "drover/cli/client.h"
#include "drover/cli/job_table.h"
#include "drover/cli/printers.h"
#include "drover/cli/submit_flags.h"
#include "drover/cli/table.h"
#include "drover/cli/terminal.h"
#include "drover/common/config.h"
#include "drover/common/quantity.h"
#include "drover/common/version.h"
#include "drover/rpc/convert.h"
#include "drover/rpc/json.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::cli {
namespace {

std::string Join(const google::protobuf::RepeatedField<int32_t>& v) {
  return v.empty() ? "<none>" : fmt::format("{}", fmt::join(v, ","));
}

// What a job asks for, short: "2", "0.25", "4x8" (a gang).
std::string GpusOf(const v1::JobSpec& spec) {
  if (spec.gpu_milli() > 0 && spec.gpu_milli() < 1000) {
    std::string digits = fmt::format("{:03d}", spec.gpu_milli());  // 250 -> "250" -> "0.25"
    return "0." + digits.substr(0, digits.find_last_not_of('0') + 1);
  }
  if (spec.replicas() > 1) return fmt::format("{}x{}", spec.replicas(), spec.gpus());
  return std::to_string(spec.gpus());
}

std::string DescribeAllocation(const v1::Allocation& a) {
  std::string out = fmt::format("{} GPU{} {}", a.node(), a.gpu_indices_size() == 1 ? "" : "s", Join(a.gpu_indices()));
  if (a.gpu_milli() > 0 && a.gpu_milli() < 1000) {
    out += fmt::format(" (a {} milli-GPU share, {} reserved)", a.gpu_milli(), FormatBytes(a.gpu_memory_bytes()));
  }
  return out;
}

// ---- verbs ----

// Waits for a job (or every task of an array) on the server's push stream,
// and exits with its code (for an array, the highest of its tasks').
int WaitFor(const std::string& id, const std::string& array_id, const Common& c) {
  auto stub = v1::JobService::NewStub(Channel(c));
  v1::WatchJobsRequest req;
  if (array_id.empty()) {
    req.add_ids(id);
  } else {
    req.set_array_id(array_id);
  }
  grpc::ClientContext ctx;  // no deadline: as long as the job runs
  auto reader = stub->Watch(&ctx, req);
  std::map<std::string, v1::JobStatus> ended;
  v1::Job job;
  while (reader->Read(&job)) {
    if (!rpc::IsTerminal(job.status().state()) || !ended.emplace(job.id(), job.status()).second) continue;
    const auto& st = job.status();
    if (st.state() != v1::JOB_STATE_SUCCEEDED) {
      std::cerr << fmt::format("job {} {}: {}\n", EscapeTerminal(job.id()), rpc::JobStateDisplay(st.state()),
                               EscapeTerminal(st.message()));
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return Fail(s, c);
  int code = 0;
  for (const auto& [job_id, st] : ended) {
    code = std::max(code, ExitCodeOfJob(st.state() == v1::JOB_STATE_SUCCEEDED, st.signal(), st.exit_code()));
  }
  return ended.empty() ? kExitFailure : code;
}

int FollowJob(const std::string& id, int replicas, const Common& c);

int Submit(const SubmitArgs& a, const Common& c) {
  auto body = SubmitRequestJson(a);
  if (!body.ok()) return Usage(body.status().message());
  if (a.follow && !a.array.empty()) {
    return Usage("--follow streams one job's output; an array's tasks: drover logs TASK -f");
  }
  v1::SubmitJobRequest req;
  if (auto st = google::protobuf::util::JsonStringToMessage(body->dump(), &req); !st.ok()) {
    return Usage(std::string(st.message()));
  }
  auto stub = v1::JobService::NewStub(Channel(c));
  v1::SubmitJobResponse resp;
  auto ctx = Context(c);
  grpc::Status st = stub->Submit(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(st, c);
  if (a.follow) {
    // Standard output is the job's: its id goes to stderr.
    std::cerr << "submitted " << EscapeTerminal(resp.job().id()) << "\n";
    return FollowJob(resp.job().id(), std::max(1, resp.job().spec().replicas()), c);
  }
  if (c.output == "json") {
    // One job prints as the job (as before arrays); an array as the answer
    // with its id and size.
    std::cout << (resp.array_id().empty() ? Json(resp.job()) : Json(resp)) << "\n";
  } else if (!resp.array_id().empty()) {
    std::cout << EscapeTerminal(resp.array_id()) << "\n";
  } else {
    std::cout << EscapeTerminal(resp.job().id()) << "\n";
  }
  std::cout.flush();
  return a.wait ? WaitFor(resp.job().id(), resp.array_id(), c) : 0;
}

int Jobs(const JobsArgs& a, const Common& c) {
  v1::ListJobsRequest req;
  req.set_array_id(a.array);
  if (!a.state.empty()) {
    auto s = rpc::ParseJobState(a.state);
    if (!s.ok()) return Usage(s.status().message());
    req.set_state(*s);
  }
  req.set_tenant(a.tenant);
  req.set_node(a.node);
  req.set_page_size(a.page_size);
  req.set_page_token(a.page_token);
  auto ended_after = EndedAfter(a, NowNanos());
  if (!ended_after.ok()) return Usage(ended_after.status().message());
  req.set_ended_after_unix_nanos(*ended_after);
  auto stub = v1::JobService::NewStub(Channel(c));
  v1::ListJobsResponse resp;
  while (true) {  // one page, or with --all every page
    v1::ListJobsResponse page;
    auto ctx = Context(c);
    grpc::Status st = stub->List(ctx.get(), req, &page);
    if (!st.ok()) return Fail(st, c);
    for (v1::Job& j : *page.mutable_jobs()) *resp.add_jobs() = std::move(j);
    resp.set_next_page_token(page.next_page_token());
    if (!a.all || page.next_page_token().empty()) break;
    req.set_page_token(page.next_page_token());
  }
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  // The table is printed from the answer's JSON, as the front program
  // prints GET /api/v1/jobs (job_table.h).
  PrintJobList(nlohmann::ordered_json::parse(rpc::ToJson(resp), JobTableFilter()), a, c.output == "wide", NowNanos(),
               std::cout, std::cerr);
  return 0;
}

}  // namespace

void DescribeJob(const v1::Job& job, int64_t now, std::ostream& out) {
  const v1::JobSpec& spec = job.spec();
  const v1::JobStatus& st = job.status();
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("ID", job.id());
  rows.emplace_back("Name", Or(spec.name()));
  rows.emplace_back("Tenant", spec.tenant());
  rows.emplace_back("State", rpc::JobStateDisplay(st.state()));
  rows.emplace_back("Priority", std::to_string(spec.priority()));
  rows.emplace_back("Preemptible", spec.preemptible() ? "yes" : "no");
  std::string gpus;
  if (spec.gpu_milli() > 0 && spec.gpu_milli() < 1000) {
    gpus = fmt::format("{} of one GPU ({} milli-GPU), {} of its memory", GpusOf(spec), spec.gpu_milli(),
                       FormatBytes(spec.gpu_memory_bytes()));
  } else {
    gpus = spec.replicas() > 1 ? fmt::format("{} replicas x {}", spec.replicas(), spec.gpus())
                               : std::to_string(spec.gpus());
    if (spec.gpu_memory_bytes() > 0) gpus += fmt::format(", at least {} each", FormatBytes(spec.gpu_memory_bytes()));
  }
  if (!spec.gpu_model().empty()) gpus += fmt::format(", model '{}'", spec.gpu_model());
  if (!spec.gpu_vendor().empty()) gpus += fmt::format(", vendor {}", spec.gpu_vendor());
  rows.emplace_back("GPUs", spec.gpus() == 0 ? std::string("none (CPU-only)") : gpus);
  if (spec.cpu_millis() > 0 || spec.memory_bytes() > 0) {
    std::vector<std::string> host;
    if (spec.cpu_millis() > 0) host.push_back(FormatMilliGpu(spec.cpu_millis()) + " CPU");
    if (spec.memory_bytes() > 0) host.push_back(FormatBytes(spec.memory_bytes()) + " of memory");
    rows.emplace_back("Host", fmt::format("{} per replica", fmt::join(host, ", ")));
  }
  if (spec.node_selector_size() > 0) {
    std::map<std::string, std::string> sorted(spec.node_selector().begin(), spec.node_selector().end());
    std::vector<std::string> kvs;
    for (const auto& [k, v] : sorted) kvs.push_back(k + "=" + v);
    rows.emplace_back("Selector", fmt::format("{}", fmt::join(kvs, ",")));
  }
  if (!spec.topology().empty()) rows.emplace_back("Topology", spec.topology());
  if (spec.runtime_estimate_seconds() > 0)
    rows.emplace_back("Estimate", FormatSeconds(spec.runtime_estimate_seconds()));
  if (spec.time_limit_seconds() > 0) rows.emplace_back("Time limit", FormatSeconds(spec.time_limit_seconds()));
  for (const v1::JobDependency& d : spec.after()) {
    const bool met = std::find(job.after_met().begin(), job.after_met().end(), d.job_id()) != job.after_met().end();
    rows.emplace_back("After", fmt::format("{}:{} ({})", d.job_id(), d.condition(), met ? "met" : "waiting"));
  }
  if (spec.has_container()) {
    const v1::ContainerSpec& ct = spec.container();
    std::string image = ct.image();
    if (!ct.pull_policy().empty()) image += fmt::format(" (pull {})", ct.pull_policy());
    rows.emplace_back("Image", image);
    if (!st.image_digest().empty()) rows.emplace_back("Digest", st.image_digest());
    if (!st.image_pull().empty()) rows.emplace_back("Pull", st.image_pull());
    std::vector<std::string> extra;
    if (!ct.network().empty()) extra.push_back("network " + ct.network());
    if (ct.shm_bytes() > 0) extra.push_back("/dev/shm " + FormatBytes(ct.shm_bytes()));
    if (!extra.empty()) rows.emplace_back("Container", fmt::format("{}", fmt::join(extra, ", ")));
    for (const v1::Mount& m : ct.mounts()) {
      rows.emplace_back("Mount", fmt::format("{} -> {}{}", m.source(), m.target(), m.read_only() ? " (ro)" : ""));
    }
  }
  rows.emplace_back("Command", spec.command().empty() && spec.has_container()
                                   ? std::string("(the image's)")
                                   : fmt::format("{}", fmt::join(spec.command(), " ")));
  if (!spec.working_dir().empty()) rows.emplace_back("Workdir", spec.working_dir());
  rows.emplace_back("Submitted", Age(st.submit_time_unix_nanos(), now) + " ago");
  if (st.replicas_size() > 0) {
    for (int i = 0; i < st.replicas_size(); ++i) {
      rows.emplace_back(fmt::format("Replica {}", i), DescribeAllocation(st.replicas(i)));
    }
  } else if (st.has_allocation() && !st.allocation().node().empty()) {
    rows.emplace_back("Allocation", DescribeAllocation(st.allocation()));
  }
  if (st.start_time_unix_nanos() > 0) rows.emplace_back("Started", Age(st.start_time_unix_nanos(), now) + " ago");
  rows.emplace_back("Preemptions", std::to_string(st.preemptions()));
  // The server fills in the default policy and bound; "never" with no
  // restarts is the common case and not worth a line.
  if (spec.restart_policy() == "on-failure") {
    rows.emplace_back("Restarts",
                      fmt::format("{} of at most {} (restart policy on-failure)", st.restarts(), spec.max_restarts()));
  } else if (st.restarts() > 0) {
    rows.emplace_back("Restarts", std::to_string(st.restarts()));
  }
  if (!st.failure().empty()) rows.emplace_back("Failure", st.failure());
  // Every binding, with where it ran and how it ended (the first and the
  // latest when there were many).
  for (const v1::Attempt& a : st.attempts()) {
    std::string when = a.start_time_unix_nanos() > 0 ? "started " + Age(a.start_time_unix_nanos(), now) + " ago"
                                                     : "bound " + Age(a.bind_time_unix_nanos(), now) + " ago";
    std::string image;
    if (a.image_cached()) {
      image = "; image cached";
    } else if (a.image_pull_millis() > 0) {
      image = fmt::format("; image pulled in {:.1f} s", static_cast<double>(a.image_pull_millis()) / 1000);
    }
    rows.emplace_back(fmt::format("Attempt {}", a.number()), fmt::format("{} on {}{}; {}", when, fmt::join(a.nodes(), ","),
                                                                          image, Or(a.outcome(), "running")));
  }
  if (rpc::IsTerminal(st.state())) {
    rows.emplace_back("Exit",
                      st.signal() != 0 ? fmt::format("signal {}", st.signal()) : std::to_string(st.exit_code()));
  }
  rows.emplace_back("Message", Or(st.message(), ""));
  size_t width = 0;
  for (const auto& [k, v] : rows) width = std::max(width, k.size());
  // Most values are what the job's submitter wrote: escaped (terminal.h).
  for (const auto& [k, v] : rows) out << fmt::format("{:<{}}  {}\n", k + ":", width + 1, EscapeTerminal(v));
}

namespace {

int JobShow(const std::string& id, const Common& c) {
  auto stub = v1::JobService::NewStub(Channel(c));
  v1::GetJobRequest req;
  req.set_id(id);
  v1::Job job;
  auto ctx = Context(c);
  grpc::Status st = stub->Get(ctx.get(), req, &job);
  if (!st.ok()) return Fail(st, c);
  if (c.output == "json") {
    std::cout << Json(job) << "\n";
    return 0;
  }
  DescribeJob(job, NowNanos(), std::cout);
  return 0;
}

int Cancel(const std::string& id, const Common& c) {
  auto stub = v1::JobService::NewStub(Channel(c));
  if (id.starts_with("a-")) {
    v1::CancelArrayRequest req;
    req.set_array_id(id);
    v1::CancelArrayResponse resp;
    auto ctx = Context(c);
    grpc::Status st = stub->CancelArray(ctx.get(), req, &resp);
    if (!st.ok()) return Fail(st, c);
    if (c.output == "json") {
      std::cout << Json(resp) << "\n";
    } else {
      std::cout << fmt::format("{}: {} tasks cancelled\n", EscapeTerminal(id), resp.cancelled());
    }
    return 0;
  }
  v1::CancelJobRequest req;
  req.set_id(id);
  v1::Job job;
  auto ctx = Context(c);
  grpc::Status st = stub->Cancel(ctx.get(), req, &job);
  if (!st.ok()) return Fail(st, c);
  if (c.output == "json") {
    std::cout << Json(job) << "\n";
  } else {
    std::cout << fmt::format("{} {}\n", EscapeTerminal(id), rpc::JobStateDisplay(job.status().state()));
  }
  return 0;
}

// One replica's output onto standard output, shared with the others a
// follow prints: with `prefix`, whole lines each led by "N: " (as srun
// --label), else the bytes as they come. Escaped for a terminal unless
// `raw` (terminal.h, LogEscaper).
grpc::Status StreamLog(const Common& c, const std::string& id, int replica, bool follow, bool raw, bool prefix,
                       std::mutex* out_mu) {
  auto stub = v1::JobService::NewStub(Channel(c));
  v1::LogsRequest req;
  req.set_id(id);
  req.set_follow(follow);
  req.set_replica(replica);
  grpc::ClientContext ctx;  // no deadline: a follow runs as long as the job
  auto reader = stub->Logs(&ctx, req);
  v1::LogChunk chunk;
  std::optional<LogEscaper> escaper;
  if (!raw && ::isatty(STDOUT_FILENO) == 1) escaper.emplace();
  std::string line;  // with a prefix: the start of a line not yet ended
  const std::string label = fmt::format("{}: ", replica);
  auto write = [&](const std::string& bytes, bool last) {
    std::string out;
    if (!prefix) {
      out = bytes;
    } else {
      line += bytes;
      size_t begin = 0;
      for (size_t nl; (nl = line.find('\n', begin)) != std::string::npos; begin = nl + 1) {
        out += label + line.substr(begin, nl + 1 - begin);
      }
      line.erase(0, begin);
      if (last && !line.empty()) out += label + std::exchange(line, "") + "\n";
    }
    if (out.empty()) return;
    std::lock_guard lock(*out_mu);
    std::cout.write(out.data(), static_cast<std::streamsize>(out.size()));
    std::cout.flush();
  };
  while (reader->Read(&chunk)) write(escaper ? escaper->Feed(chunk.data()) : chunk.data(), false);
  write(escaper ? escaper->Finish() : "", true);
  return reader->Finish();
}

// The job's bytes as they are with --raw or when standard output is not a
// terminal (a file, a pipe: `drover logs J > out` keeps them), else escaped
// but for newlines, tabs and carriage returns.
int Logs(const std::string& id, bool follow, bool raw, int replica, const Common& c) {
  std::mutex out_mu;
  grpc::Status st = StreamLog(c, id, replica, follow, raw, false, &out_mu);
  return st.ok() ? 0 : Fail(st, c);
}

// `submit --follow`, `drover run`: every replica's output as it comes,
// then the job's exit code (WaitFor: the job has ended by then).
int FollowJob(const std::string& id, int replicas, const Common& c) {
  std::mutex out_mu;
  std::vector<grpc::Status> ends(static_cast<size_t>(replicas));
  std::vector<std::thread> readers;
  for (int r = 0; r < replicas; ++r) {
    readers.emplace_back([&, r] { ends[static_cast<size_t>(r)] = StreamLog(c, id, r, true, false, replicas > 1, &out_mu); });
  }
  for (std::thread& t : readers) t.join();
  for (const grpc::Status& st : ends) {
    if (!st.ok()) return Fail(st, c);
  }
  return WaitFor(id, "", c);
}

int Version(const Common& c) {
  std::cout << fmt::format("client: {} ({})\n", kVersion, kGitCommit);
  auto stub = v1::InfoService::NewStub(Channel(c));
  v1::VersionResponse resp;
  auto ctx = Context(c);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  grpc::Status st = stub->Version(ctx.get(), v1::VersionRequest(), &resp);
  if (!st.ok()) {
    std::cout << "server: unreachable at " << c.addr << "\n";
    return 0;
  }
  std::cout << fmt::format("server: {} ({})\n", EscapeTerminal(resp.version()), EscapeTerminal(resp.git_commit()));
  return 0;
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  auto common = std::make_shared<Common>();
  Runner run = MakeRunner(exit_code, common);

  auto sa = std::make_shared<SubmitArgs>();
  CLI::App* submit = app.add_subcommand("submit", "submit a job: drover submit [flags] -- CMD ARGS...");
  AddCommon(submit, common.get(), true);
  AddSubmitFlags(submit, sa.get());
  submit->callback(run([sa, common] { return Submit(*sa, *common); }));

  auto ra = std::make_shared<SubmitArgs>();
  CLI::App* run_cmd = app.add_subcommand(
      "run", "submit a job and stream its output, then exit with its code (submit --follow): drover run [flags] -- CMD");
  AddCommon(run_cmd, common.get(), false);
  AddSubmitFlags(run_cmd, ra.get());
  run_cmd->callback(run([ra, common] {
    SubmitArgs a = *ra;
    a.follow = true;
    return Submit(a, *common);
  }));

  auto ja = std::make_shared<JobsArgs>();
  CLI::App* jobs = app.add_subcommand("jobs",
                                      "list live and archived jobs, newest first, a page at a time (a job array is one "
                                      "row; --array ID lists its tasks)");
  AddCommon(jobs, common.get(), true);
  AddJobsFlags(jobs, ja.get());
  jobs->callback(run([ja, common] { return Jobs(*ja, *common); }));

  auto id = std::make_shared<std::string>();
  CLI::App* job = app.add_subcommand("job", "show one job");
  AddCommon(job, common.get(), true);
  job->add_option("id", *id, "job id")->required();
  job->callback(run([id, common] { return JobShow(*id, *common); }));

  CLI::App* cancel = app.add_subcommand("cancel", "cancel a job (SIGTERM, then SIGKILL after its grace period)");
  AddCommon(cancel, common.get(), true);
  cancel->add_option("id", *id, "job id, or a job array's id (a-000042) to cancel all its tasks")->required();
  cancel->callback(run([id, common] { return Cancel(*id, *common); }));

  auto follow = std::make_shared<bool>(false);
  auto raw = std::make_shared<bool>(false);
  auto replica = std::make_shared<int>(0);
  CLI::App* logs = app.add_subcommand("logs", "print a job's output (a gang's: one replica's, --replica N)");
  AddCommon(logs, common.get(), false);
  logs->add_flag("-f,--follow", *follow, "keep printing until the job ends");
  logs->add_flag("--raw", *raw,
                 "the job's bytes unchanged, control characters included (the default when standard output is not "
                 "a terminal; on one they are escaped)");
  logs->add_option("--replica", *replica, "which replica of a gang (0-based; default 0)");
  logs->add_option("id", *id, "job id")->required();
  logs->callback(run([id, follow, raw, replica, common] { return Logs(*id, *follow, *raw, *replica, *common); }));

  CLI::App* version = app.add_subcommand("version", "print client and server versions");
  AddCommon(version, common.get(), false);
  version->callback(run([common] { return Version(*common); }));

  AddNodeCommands(app, run, common);
  AddTopCommand(app, run, common);
  AddAuthCommands(app, run, common);
  AddTenantCommands(app, run, common);
  AddDeployCommands(app, run, common);
}

}  // namespace drover::cli
