// End to end through the CLI, as a user runs it: `drover up` with simulated
// nodes, then submit, jobs, job, logs, cancel, nodes, gpus, drain, and the
// telemetry views (gpus -o wide, nodes, top --once) and fault.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = std::make_unique<DroverUp>(dir_.path() + "/data",
                                     std::vector<std::string>{"--simulate", "2", "--simulate-gpus", "4"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(3));  // this machine (OpenCL) + 2 simulated
  }
  // As a user of `drover up` runs it: the CLI knows the HTTP address, so
  // `drover submit` and `drover jobs` run in the small front program over
  // REST (fast_verbs.h); every other verb runs in drover-core over gRPC.
  CommandResult Cli(std::vector<std::string> args) {
    return RunCli(up_->grpc_address(), std::move(args), {"DROVER_HTTP_ADDR=" + up_->http_address()});
  }
  // Without an HTTP address: `drover submit` and `jobs` too go to drover-core.
  CommandResult GrpcCli(std::vector<std::string> args) { return RunCli(up_->grpc_address(), std::move(args)); }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

TEST_F(CliTest, SubmitWaitPrintsGpuIdsAndSucceeds) {
  CommandResult r = Cli({"submit", "--gpus", "2", "--wait", "--", "sh", "-c", "echo $DROVER_GPU_IDS"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(std::regex_match(id, std::regex("j-[0-9]{6}"))) << r.out;

  CommandResult logs = Cli({"logs", id});
  ASSERT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_TRUE(std::regex_match(logs.out, std::regex("[0-9]+,[0-9]+\n"))) << logs.out;

  CommandResult jobs = Cli({"jobs"});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_TRUE(std::regex_search(jobs.out, std::regex(id + " +<none> +default +Succeeded +2 +sim-"))) << jobs.out;

  CommandResult json = Cli({"job", id, "-o", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["status"]["state"], "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(j["status"]["allocation"]["gpuIndices"].size(), 2u);
}

TEST_F(CliTest, VendorVariableMatchesGpuIds) {
  CommandResult r = Cli({"submit", "--gpus", "3", "--gpu-model", "H100 80GB", "--wait", "--", "sh", "-c",
                         "test \"$CUDA_VISIBLE_DEVICES\" = \"$DROVER_GPU_IDS\" && echo $DROVER_JOB_ID"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(Cli({"logs", id}).out, id + "\n");
}

TEST_F(CliTest, WaitExitsWithTheJobsExitCode) {
  CommandResult r = Cli({"submit", "--wait", "--", "sh", "-c", "echo oops >&2; exit 7"});
  EXPECT_EQ(r.exit_code, 7);
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(Cli({"logs", id}).out, "oops\n");
  CommandResult failed = Cli({"jobs", "--state", "failed", "-o", "wide"});
  EXPECT_NE(failed.out.find(id), std::string::npos) << failed.out;
  EXPECT_NE(failed.out.find("exited with code 7"), std::string::npos) << failed.out;

  CommandResult missing = Cli({"submit", "--wait", "--", "/nonexistent/tool"});
  EXPECT_EQ(missing.exit_code, 127) << missing.err;
}

// The gRPC verb (drover-core) gives what the REST one does: the id, -o
// json, the job's exit code, an array's highest code, usage errors.
TEST_F(CliTest, SubmitOverGrpcWhenNoHttpAddressIsKnown) {
  CommandResult r = GrpcCli({"submit", "--wait", "--", "sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("j-[0-9]{6}\n"))) << r.out;
  CommandResult array = GrpcCli({"submit", "--array", "1-3", "--wait", "--", "sh", "-c", "exit $DROVER_ARRAY_INDEX"});
  EXPECT_EQ(array.exit_code, 3) << array.err;
  CommandResult json = GrpcCli({"submit", "-o", "json", "--name", "viagrpc", "--", "true"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["spec"]["name"], "viagrpc");
  CommandResult usage = GrpcCli({"submit", "--gpus", "0.25", "--", "true"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("also give --gpu-memory"), std::string::npos) << usage.err;
}

// `drover submit` with the HTTP address known needs nothing but the small
// front program: a copy of it alone, without drover-core beside it, submits,
// waits and prints; without an address it hands over to drover-core (here
// missing, so it says so).
TEST_F(CliTest, SubmitRunsInTheFrontProgramAlone) {
  TempDir lone;
  std::string front = lone.path() + "/drover";
  std::filesystem::copy_file(DroverBinary(), front);
  std::filesystem::permissions(front, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  const std::string http = "DROVER_HTTP_ADDR=" + up_->http_address();
  auto run = [&](std::vector<std::string> args, std::vector<std::string> env) {
    return RunCli(up_->grpc_address(), std::move(args), std::move(env), front);
  };
  CommandResult r = run({"submit", "--wait", "--", "sh", "-c", "echo out; exit 5"}, {http});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(std::regex_match(id, std::regex("j-[0-9]{6}"))) << r.out;
  EXPECT_NE(r.err.find("job " + id + " Failed: exited with code 5"), std::string::npos) << r.err;
  EXPECT_EQ(Cli({"logs", id}).out, "out\n");

  CommandResult json = run({"submit", "-o", "json", "--name", "lone", "-e", "A=1", "--", "true"}, {http});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["spec"]["name"], "lone");
  EXPECT_EQ(j["spec"]["env"]["A"], "1");
  EXPECT_EQ(j["spec"]["command"], nlohmann::json::array({"true"}));

  // The data directory's endpoints.json names the HTTP address of the
  // server at DROVER_ADDR (a local `drover up`).
  CommandResult found = run({"submit", "--wait", "--", "true"}, {"DROVER_DATA_DIR=" + dir_.path() + "/data"});
  EXPECT_EQ(found.exit_code, 0) << found.err;

  // `drover jobs` too runs there.
  CommandResult jobs = run({"jobs", "-o", "wide"}, {http});
  ASSERT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_TRUE(std::regex_search(
      jobs.out, std::regex(id + " +<none> +default +Failed +1 .* 5 +sh -c echo out; exit 5 +exited with code 5")))
      << jobs.out;
  EXPECT_EQ(run({"jobs", "--state", "exploded"}, {http}).exit_code, 2);

  for (const std::string verb : {"submit", "jobs"}) {
    std::vector<std::string> args = {verb};
    if (verb == "submit") args.insert(args.end(), {"--", "true"});
    CommandResult bad_token = run(args, {http, "DROVER_TOKEN=drv_nothing_known"});
    EXPECT_EQ(bad_token.exit_code, 1) << verb;
    EXPECT_NE(bad_token.err.find("DROVER_TOKEN"), std::string::npos) << bad_token.err;
    CommandResult down = run(args, {"DROVER_HTTP_ADDR=127.0.0.1:1"});
    EXPECT_EQ(down.exit_code, 4) << verb;
    EXPECT_NE(down.err.find("cannot reach the drover server"), std::string::npos) << down.err;
  }

  TempDir empty;
  CommandResult unknown = run({"submit", "--", "true"}, {"DROVER_DATA_DIR=" + empty.path()});
  EXPECT_EQ(unknown.exit_code, 127);
  EXPECT_NE(unknown.err.find("drover-core"), std::string::npos) << unknown.err;
}

// A server on 127.0.0.1 that reads each request and then either answers
// `answer` (when not empty) or closes the connection unanswered.
class FakeHttp {
 public:
  explicit FakeHttp(std::string answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen";
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) ::close(c);
          return;
        }
        std::string got;
        char buf[4096];
        while (got.find("\r\n\r\n") == std::string::npos) {
          ssize_t n = ::read(c, buf, sizeof(buf));
          if (n <= 0) break;
          got.append(buf, static_cast<size_t>(n));
        }
        ++requests_;
        if (!answer_.empty()) (void)!::write(c, answer_.data(), answer_.size());
        ::close(c);
      }
    });
  }
  ~FakeHttp() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }

 private:
  std::string answer_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// An HA client's list of servers (DROVER_HTTP_ADDR as `up --ha` writes it):
// the front program passes a request over a server it cannot reach and one
// that stands by (to the leader that one names), and never sends a submit
// twice: one that may have arrived at a server that then failed is not
// sent on.
TEST_F(CliTest, TheFrontProgramFindsTheLeaderInAListOfServers) {
  const std::string leader = up_->http_address();
  FakeHttp standby(
      fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nX-Drover-Leader: {}\r\n"
                  "Retry-After: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
                  leader));
  FakeHttp nobody_leads(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
      "Connection: close\r\n\r\n{}");
  FakeHttp dies("");
  FakeHttp bystander("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  const std::string refused = "127.0.0.1:1";
  auto list = [](std::vector<std::string> addrs) {
    std::string s;
    for (const std::string& a : addrs) s += (s.empty() ? "" : ",") + a;
    return "DROVER_HTTP_ADDR=" + s;
  };

  // Unreachable, then a standby that names the leader (the bystander after
  // it is never asked), then the leader.
  CommandResult r = RunCli(up_->grpc_address(), {"submit", "--wait", "--", "true"},
                           {list({refused, standby.address(), bystander.address(), leader})});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("j-[0-9]{6}\n"))) << r.out;
  EXPECT_EQ(standby.requests(), 1);
  EXPECT_EQ(bystander.requests(), 0);

  // A standby that knows no leader: the next address.
  CommandResult jobs = RunCli(up_->grpc_address(), {"jobs"}, {list({nobody_leads.address(), leader})});
  EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
  EXPECT_NE(jobs.out.find(r.out.substr(0, r.out.size() - 1)), std::string::npos) << jobs.out;
  EXPECT_EQ(nobody_leads.requests(), 1);

  // The submit reached a server that closed without answering: not sent on.
  CommandResult lost = RunCli(up_->grpc_address(), {"submit", "--", "true"}, {list({dies.address(), leader})});
  EXPECT_EQ(lost.exit_code, 4) << lost.err;
  EXPECT_EQ(dies.requests(), 1);
  CommandResult after = RunCli(up_->grpc_address(), {"jobs", "-o", "json"}, {list({leader})});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(nlohmann::json::parse(after.out)["jobs"].size(), 1u) << after.out;

  // Only standbys: their answer.
  CommandResult none = RunCli(up_->grpc_address(), {"jobs"}, {list({nobody_leads.address(), refused})});
  EXPECT_EQ(none.exit_code, 4) << none.err;
}

// `drover jobs` prints the same from the front program over REST as from
// drover-core over gRPC: rows, columns, paging hint, exit codes and JSON.
TEST_F(CliTest, JobsIsTheSameOverRestAndGrpc) {
  ASSERT_EQ(
      Cli({"submit", "--array", "1-4%2", "--wait", "--", "sh", "-c", "exit $((DROVER_ARRAY_INDEX % 2))"}).exit_code, 1);
  CommandResult held = Cli({"submit", "--name", "held", "--gpus", "0.5", "--gpu-memory", "1GiB", "--", "sleep", "300"});
  ASSERT_EQ(held.exit_code, 0) << held.err;
  const std::string held_id = held.out.substr(0, held.out.find('\n'));
  ASSERT_EQ(Cli({"submit", "--wait", "--", "true"}).exit_code, 0);
  // Nothing changes between the two runs of each pair.
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), held_id).status().state() == v1::JOB_STATE_RUNNING; }));
  // An age can tick over between the two runs.
  auto without_ages = [](const std::string& text) {
    return std::regex_replace(text, std::regex(R"(\b[0-9]+[smhd]\b)"), "AGE");
  };
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"jobs"},
                                             {"jobs", "-o", "wide"},
                                             {"jobs", "--expand", "--page-size", "2"},
                                             {"jobs", "--state", "failed"},
                                             {"jobs", "--page-size", "2", "--page-token", "3", "--all"},
                                             {"jobs", "--ended-within", "1h", "--expand"},
                                             {"jobs", "--tenant", "nobody"},
                                             {"jobs", "--ended-within", "soon"},
                                             {"jobs", "--state", "exploded"}}) {
    CommandResult rest = Cli(args);
    CommandResult grpc = GrpcCli(args);
    const std::string what = fmt::format("{}", fmt::join(args, " "));
    EXPECT_EQ(rest.exit_code, grpc.exit_code) << what;
    EXPECT_EQ(without_ages(rest.out), without_ages(grpc.out)) << what;
    EXPECT_EQ(rest.err, grpc.err) << what;
  }
  CommandResult listed = Cli({"jobs", "--expand"});
  EXPECT_TRUE(std::regex_search(listed.out, std::regex("held +default +Running +0.5 "))) << listed.out;
  EXPECT_NE(Cli({"jobs", "--page-size", "2"}).err.find("More jobs: add --page-token"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(Cli({"jobs", "-o", "json"}).out),
            nlohmann::json::parse(GrpcCli({"jobs", "-o", "json"}).out));
  // Nothing left running after the test (supervisors outlive their server).
  EXPECT_EQ(Cli({"cancel", held_id}).exit_code, 0);
  EXPECT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), held_id).status().state() == v1::JOB_STATE_CANCELLED; }));
}

TEST_F(CliTest, CancelStopsARunningJobWithSigterm) {
  CommandResult r = Cli({"submit", "--", "sleep", "300"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == v1::JOB_STATE_RUNNING; }));
  CommandResult c = Cli({"cancel", id});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == v1::JOB_STATE_CANCELLED; }));
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().signal(), 15);
  EXPECT_EQ(Cli({"cancel", id}).exit_code, 2);  // already ended
}

// Children of `parent` that ended and were not waited for.
int Zombies(pid_t parent) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;  // processes only
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent && state == 'Z') ++n;
  }
  return n;
}

// Every job runs under a supervisor, a child of the agent (here, of
// `drover up`): each is waited for once it ended, even when it recorded its
// end (which the agent may read first) a moment before it exited.
TEST_F(CliTest, EndedSupervisorsAreReapedNotLeftAsZombies) {
  CommandResult r = Cli({"submit", "--array", "1-300", "--wait", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(WaitUntil([&] { return Zombies(up_->pid()) == 0; })) << Zombies(up_->pid()) << " zombies";
}

// A job array through the CLI: every task a real process that sees its
// index; --wait gives the highest exit code; jobs shows one row for it;
// cancelling the array's id cancels what did not end.
TEST_F(CliTest, ArrayTasksSeeTheirIndexAndWaitGivesTheHighestCode) {
  CommandResult r = Cli({"submit", "--array", "1-6:1%3", "--wait", "--", "sh", "-c",
                         "echo task $DROVER_ARRAY_INDEX of $DROVER_ARRAY_ID; exit $((DROVER_ARRAY_INDEX % 3))"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  std::string array = r.out.substr(0, r.out.find('\n'));
  ASSERT_TRUE(std::regex_match(array, std::regex("a-[0-9]{6}"))) << r.out;
  CommandResult tasks = Cli({"jobs", "--array", array, "-o", "json"});
  ASSERT_EQ(tasks.exit_code, 0) << tasks.err;
  auto j = nlohmann::json::parse(tasks.out);
  ASSERT_EQ(j["jobs"].size(), 6u);
  std::set<std::string> indices;
  for (const auto& job : j["jobs"]) {
    indices.insert(job["array"]["index"].get<std::string>());
    CommandResult logs = Cli({"logs", job["id"].get<std::string>()});
    EXPECT_EQ(logs.out, "task " + job["array"]["index"].get<std::string>() + " of " + array + "\n");
  }
  EXPECT_EQ(indices, (std::set<std::string>{"1", "2", "3", "4", "5", "6"}));
  CommandResult grouped = Cli({"jobs"});
  EXPECT_TRUE(std::regex_search(grouped.out, std::regex(array + " +<none> +default +6 \\(%3\\)"))) << grouped.out;

  CommandResult sleeping = Cli({"submit", "--array", "1-5%1", "--", "sleep", "300"});
  ASSERT_EQ(sleeping.exit_code, 0) << sleeping.err;
  std::string second = sleeping.out.substr(0, sleeping.out.find('\n'));
  CommandResult c = Cli({"cancel", second});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, second + ": 5 tasks cancelled\n");
  EXPECT_EQ(Cli({"cancel", "a-999999"}).exit_code, 3);  // not found
}

TEST_F(CliTest, FollowStreamsUntilTheJobEnds) {
  CommandResult r = Cli({"submit", "--", "sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.2; done"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  CommandResult f = Cli({"logs", "-f", id});
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "line 1\nline 2\nline 3\n");
}

TEST_F(CliTest, NodesGpusAndDrain) {
  CommandResult nodes = Cli({"nodes"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("sim-1 +Ready +0/4 +H100 80GB"))) << nodes.out;

  CommandResult gpus = Cli({"gpus", "-o", "json"});
  ASSERT_EQ(gpus.exit_code, 0) << gpus.err;
  auto list = nlohmann::json::parse(gpus.out);
  int sim = 0;
  for (const auto& g : list) sim += g["node"].get<std::string>().rfind("sim-", 0) == 0 ? 1 : 0;
  EXPECT_EQ(sim, 8);

  ASSERT_EQ(Cli({"drain", "sim-1"}).exit_code, 0);
  ASSERT_EQ(Cli({"drain", "sim-2"}).exit_code, 0);
  CommandResult r = Cli({"submit", "--gpus", "4", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  v1::Job pending = GetJob(up_->jobs(), id);
  EXPECT_EQ(pending.status().state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(pending.status().message().rfind("waiting", 0), 0u) << pending.status().message();
  EXPECT_NE(pending.status().message().find("4 GPUs"), std::string::npos) << pending.status().message();
  EXPECT_NE(Cli({"nodes"}).out.find("Ready,Drained"), std::string::npos);
  ASSERT_EQ(Cli({"undrain", "sim-2"}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), id).status().state() == v1::JOB_STATE_SUCCEEDED; }));
  EXPECT_EQ(GetJob(up_->jobs(), id).status().allocation().node(), "sim-2");
}

TEST_F(CliTest, SharesSelectorsAndTheJobView) {
  // Two quarters of one GPU: both run, on the same GPU.
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    CommandResult r = Cli({"submit", "--gpus", "0.25", "--gpu-memory", "10GiB", "--gpu-model", "H100 80GB",
                           "--selector", "rack=rack-1", "--", "sleep", "300"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ids.push_back(r.out.substr(0, r.out.find('\n')));
  }
  ASSERT_TRUE(WaitUntil([&] {
    return GetJob(up_->jobs(), ids[0]).status().state() == v1::JOB_STATE_RUNNING &&
           GetJob(up_->jobs(), ids[1]).status().state() == v1::JOB_STATE_RUNNING;
  }));
  v1::Job a = GetJob(up_->jobs(), ids[0]);
  v1::Job b = GetJob(up_->jobs(), ids[1]);
  EXPECT_EQ(a.spec().gpu_milli(), 250);
  EXPECT_EQ(a.status().allocation().gpu_milli(), 250);
  EXPECT_EQ(a.status().allocation().node(), b.status().allocation().node());
  EXPECT_EQ(a.status().allocation().gpu_indices(0), b.status().allocation().gpu_indices(0)) << "binpack shares one GPU";

  CommandResult shown = Cli({"job", ids[0]});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("Tenant:       default"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("GPUs:         0.25 of one GPU (250 milli-GPU), 10GiB of its memory"), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("Selector:     rack=rack-1"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("a 250 milli-GPU share, 10GiB reserved"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("Preemptible:  no"), std::string::npos) << shown.out;
  CommandResult jobs = Cli({"jobs", "--state", "running"});
  EXPECT_TRUE(std::regex_search(jobs.out, std::regex(ids[0] + " +<none> +default +Running +0.25 +sim-"))) << jobs.out;
  for (const std::string& id : ids) ASSERT_EQ(Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] {
    return GetJob(up_->jobs(), ids[0]).status().state() == v1::JOB_STATE_CANCELLED &&
           GetJob(up_->jobs(), ids[1]).status().state() == v1::JOB_STATE_CANCELLED;
  }));

  // Simulated nodes carry rack and switch labels and a link matrix.
  CommandResult nodes = Cli({"nodes", "-o", "json"});
  auto list = nlohmann::json::parse(nodes.out);
  for (const auto& n : list["nodes"]) {
    if (n["name"] != "sim-1") continue;
    EXPECT_EQ(n["labels"]["rack"], "rack-1");
    EXPECT_EQ(n["labels"]["switch"], "switch-1");
    EXPECT_EQ(n["links"].size(), 16u);
  }
}

TEST_F(CliTest, GangRunsOneProcessPerReplica) {
  CommandResult r = Cli({"submit", "--replicas", "2", "--gpus", "4", "--gpu-model", "H100 80GB", "--wait", "--", "sh",
                         "-c", "echo $DROVER_REPLICA/$DROVER_REPLICAS"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(Cli({"logs", id}).out, "0/2\n") << "the job's log is replica 0's output";
  CommandResult shown = Cli({"job", id});
  EXPECT_NE(shown.out.find("GPUs:         2 replicas x 4"), std::string::npos) << shown.out;
  EXPECT_TRUE(std::regex_search(shown.out, std::regex("Replica 0: +sim-[12] GPUs 0,1,2,3"))) << shown.out;
  EXPECT_TRUE(std::regex_search(shown.out, std::regex("Replica 1: +sim-[12] GPUs 0,1,2,3"))) << shown.out;
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_NE(job.status().replicas(0).node(), job.status().replicas(1).node());

  // One replica fails: the other is stopped and the job fails with its code.
  r = Cli({"submit", "--replicas", "2", "--gpus", "4", "--gpu-model", "H100 80GB", "--grace", "1", "--wait", "--", "sh",
           "-c", "if [ \"$DROVER_REPLICA\" = 1 ]; then exit 3; fi; exec sleep 300"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("replica 1 failed: exited with code 3"), std::string::npos) << r.err;
}

TEST_F(CliTest, BadSchedulingFlagsAreUsageErrors) {
  auto usage = [&](std::vector<std::string> args, const std::string& part) {
    CommandResult r = Cli(std::move(args));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  };
  usage({"submit", "--gpus", "1.5", "--", "true"}, "a share of one GPU (below 1)");
  usage({"submit", "--gpus", "0.25", "--", "true"}, "also give --gpu-memory");
  usage({"submit", "--gpus", "lots", "--", "true"}, "--gpus");
  usage({"submit", "--selector", "rack", "--", "true"}, "--selector 'rack' is not NAME=VALUE");
  usage({"submit", "--selector", "rack=a b", "--", "true"}, "node_selector label 'rack' has value 'a b'");
  usage({"submit", "--topology", "mesh", "--", "true"}, "topology 'mesh' is unknown");
  usage({"submit", "--estimate", "soon", "--", "true"}, "--estimate: duration 'soon' is malformed");
  usage({"submit", "--replicas", "3", "--gpus", "4", "--gpu-model", "H100 80GB", "--", "true"}, "never fit");
  usage({"submit", "--selector", "rack=rack-7", "--", "true"}, "never fit");
}

TEST_F(CliTest, ErrorsHaveMeaningfulExitCodes) {
  CommandResult nf = Cli({"job", "j-999999"});
  EXPECT_EQ(nf.exit_code, 3);
  EXPECT_NE(nf.err.find("job 'j-999999' not found"), std::string::npos) << nf.err;
  EXPECT_EQ(Cli({"job", "banana"}).exit_code, 2);
  EXPECT_EQ(Cli({"submit", "--gpus", "0", "--gpu-model", "H100 80GB", "--", "true"}).exit_code, 2);  // CPU-only: no model
  EXPECT_EQ(Cli({"submit", "--gpu-memory", "lots", "--", "true"}).exit_code, 2);
  CommandResult never = Cli({"submit", "--gpus", "5", "--", "true"});
  EXPECT_EQ(never.exit_code, 2);
  EXPECT_NE(never.err.find("never fit"), std::string::npos) << never.err;
  EXPECT_EQ(Cli({"jobs", "-o", "yaml"}).exit_code, 2);
  EXPECT_EQ(Cli({"jobs", "--state", "exploded"}).exit_code, 2);
  EXPECT_EQ(Cli({"frobnicate"}).exit_code, 2);
  CommandResult down = RunCli("127.0.0.1:1", {"jobs", "--timeout", "2"});
  EXPECT_EQ(down.exit_code, 4);
  EXPECT_NE(down.err.find("cannot reach the drover server"), std::string::npos) << down.err;
  EXPECT_EQ(Cli({"jobs", "-o", "json"}).exit_code, 0);
  CommandResult version = Cli({"version"});
  EXPECT_NE(version.out.find("server: 0.1.0"), std::string::npos) << version.out;
}

// One simulated node with two GPUs: telemetry, conditions, top and fault.
class CliTelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    up_ = std::make_unique<DroverUp>(dir_.path() + "/data",
                                     std::vector<std::string>{"--simulate", "1", "--simulate-gpus", "2"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));  // this machine + sim-1
  }
  CommandResult Cli(std::vector<std::string> args) { return RunCli(up_->grpc_address(), std::move(args)); }

  TempDir dir_;
  std::unique_ptr<DroverUp> up_;
};

// The cell of `column` in each line of a CLI table that starts with
// `prefix` (cells are padded to their column's header, so a cell begins at
// its header's offset and ends at the next run of spaces).
std::vector<std::string> Column(const std::string& table, const std::string& column, const std::string& prefix) {
  std::istringstream in(table);
  std::string header;
  std::getline(in, header);
  size_t at = header.find("   " + column);
  if (at == std::string::npos) return {};
  at += 3;
  std::vector<std::string> cells;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0 || line.size() <= at) continue;
    std::string cell = line.substr(at);
    cells.push_back(cell.substr(0, cell.find("  ")));
  }
  return cells;
}

TEST_F(CliTelemetryTest, GpusWideShowsLiveTelemetry) {
  // Telemetry arrives with heartbeats: poll until both GPUs have readings.
  CommandResult wide;
  ASSERT_TRUE(WaitUntil([&] {
    wide = Cli({"gpus", "-o", "wide"});
    std::vector<std::string> temp = Column(wide.out, "TEMP-C", "sim-1 ");
    std::vector<std::string> power = Column(wide.out, "POWER-W", "sim-1 ");
    if (temp.size() != 2 || power.size() != 2) return false;
    for (int i = 0; i < 2; ++i) {
      bool numbers =
          std::regex_match(temp[i], std::regex("[0-9]+")) && std::regex_match(power[i], std::regex("[0-9]+/[0-9]+"));
      if (!numbers) return false;
    }
    return true;
  })) << wide.out
      << wide.err;
  EXPECT_EQ(wide.exit_code, 0);
  EXPECT_EQ(Column(wide.out, "ECC", "sim-1 "), (std::vector<std::string>{"0/0", "0/0"})) << wide.out;
  EXPECT_EQ(Column(wide.out, "ARCH", "sim-1 "), (std::vector<std::string>{"sm_90", "sm_90"})) << wide.out;
  EXPECT_TRUE(std::regex_search(wide.out, std::regex("sim-1 +0 +nvidia +H100 80GB +80GiB +Healthy +<none> +[0-9]+% +"
                                                     "[0-9.]+[KMG]?i?B/80GiB")))
      << wide.out;

  // The plain view stays without telemetry columns; json still parses.
  CommandResult plain = Cli({"gpus"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("TEMP-C"), std::string::npos) << plain.out;
  EXPECT_EQ(Column(plain.out, "HEALTH", "sim-1 "), (std::vector<std::string>{"Healthy", "Healthy"})) << plain.out;
  CommandResult json = Cli({"gpus", "--output", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_GE(nlohmann::json::parse(json.out).size(), 2u);
}

TEST_F(CliTelemetryTest, NodesShowHealthConditionsAndTopology) {
  CommandResult nodes = Cli({"nodes"});
  ASSERT_EQ(nodes.exit_code, 0) << nodes.err;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex("sim-1 +Ready +0/2 +H100 80GB +2/2 healthy +2 sockets, "
                                                      "2 NUMA, 64 cores, 2 NICs +[0-9]+s +Ready, GpusHealthy"
                                                      // and, where a part is off, WorkloadIsolation=False (why)
                                                      "(, WorkloadIsolation(=False \\(.*\\))?)?\n")))
      << nodes.out;
  CommandResult wide = Cli({"nodes", "-o", "wide"});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  EXPECT_TRUE(std::regex_search(wide.out, std::regex("sim-1 .* 1 pair: 1 fabric +rack=rack-1,switch=switch-1\n")))
      << wide.out;
}

TEST_F(CliTelemetryTest, TopOncePrintsEveryNodeAndGpu) {
  auto ctx = Ctx();
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(up_->nodes()->List(ctx.get(), v1::ListNodesRequest(), &nodes).ok());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"top", "--once"}, std::vector<std::string>{"top", "--interval", "500ms"}}) {
    // Without a terminal, `top` prints one frame too.
    CommandResult top = Cli(args);
    ASSERT_EQ(top.exit_code, 0) << top.err;
    EXPECT_EQ(top.out.find('\x1b'), std::string::npos) << "no escapes without a terminal";
    EXPECT_TRUE(std::regex_search(top.out, std::regex("nodes 2/2 ready   gpus [0-9]+/[0-9]+ healthy"))) << top.out;
    int gpu_lines = 0;
    std::istringstream in(top.out);
    for (std::string line; std::getline(in, line);) {
      gpu_lines += std::regex_match(line, std::regex("[ !] +[0-9]+  .*(Healthy|Unhealthy.*|Unknown)")) ? 1 : 0;
    }
    int gpus = 0;
    for (const v1::Node& n : nodes.nodes()) {
      gpus += n.gpus_size();
      EXPECT_TRUE(std::regex_search(top.out, std::regex("\n" + n.name() + "  Ready  "))) << n.name() << "\n" << top.out;
    }
    EXPECT_EQ(gpu_lines, gpus) << top.out;
  }
  EXPECT_EQ(Cli({"top", "--interval", "soon"}).exit_code, 2);
  EXPECT_EQ(Cli({"top", "--interval", "1ms"}).exit_code, 2);
}

TEST_F(CliTelemetryTest, FaultAndRestartFlagsMapErrorsToExitCodes) {
  CommandResult unknown_node = Cli({"fault", "sim-9", "0", "xid:79"});
  EXPECT_EQ(unknown_node.exit_code, 3) << unknown_node.err;
  EXPECT_NE(unknown_node.err.find("node 'sim-9' is not registered"), std::string::npos) << unknown_node.err;
  CommandResult bad_fault = Cli({"fault", "sim-1", "0", "melt"});
  EXPECT_EQ(bad_fault.exit_code, 2) << bad_fault.err;
  EXPECT_NE(bad_fault.err.find("'melt' is unknown"), std::string::npos) << bad_fault.err;
  CommandResult bad_gpu = Cli({"fault", "sim-1", "7", "xid"});
  EXPECT_EQ(bad_gpu.exit_code, 2) << bad_gpu.err;
  EXPECT_EQ(Cli({"fault", "sim-1", "zero", "xid"}).exit_code, 2);

  CommandResult r = Cli({"submit", "--restart-policy", "on-failure", "--max-restarts", "2", "--wait", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  CommandResult shown = Cli({"job", id});
  EXPECT_NE(shown.out.find("Restarts:     0 of at most 2 (restart policy on-failure)"), std::string::npos) << shown.out;
  EXPECT_EQ(GetJob(up_->jobs(), id).spec().restart_policy(), "on-failure");
  CommandResult bad_policy = Cli({"submit", "--restart-policy", "always", "--", "true"});
  EXPECT_EQ(bad_policy.exit_code, 2);
  EXPECT_NE(bad_policy.err.find("restart_policy 'always' is unknown"), std::string::npos) << bad_policy.err;
}

}  // namespace
}  // namespace drover::testing
