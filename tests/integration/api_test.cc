// The management API over gRPC and REST: the same request gets the same
// answer and status code on both, bad input is rejected with a clear error,
// and nothing is stored by a rejected request.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "drover/http/client.h"
#include "support/drover_process.h"

namespace drover::testing {
namespace {

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    up_ = new DroverUp(dir_->path() + "/data", {"--devices", "none", "--simulate", "1", "--simulate-gpus", "8"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));  // this machine (no GPUs) and sim-1: a submit before sim-1 is refused
  }
  static void TearDownTestSuite() {
    delete up_;
    delete dir_;
  }

  static http::ClientResponse Http(const std::string& method, const std::string& target, const std::string& body = "") {
    auto r = http::HttpRequest(up_->http_address(), method, target, body, "application/json",
                               {{"Authorization", "Bearer " + up_->token()}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : http::ClientResponse{};
  }

  static int JobCount() {
    v1::ListJobsResponse resp;
    auto ctx = Ctx();
    EXPECT_TRUE(up_->jobs()->List(ctx.get(), v1::ListJobsRequest(), &resp).ok());
    return resp.jobs_size();
  }

  static grpc::Status GrpcSubmit(const v1::JobSpec& spec, v1::SubmitJobResponse* resp = nullptr) {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse r;
    auto ctx = Ctx();
    return up_->jobs()->Submit(ctx.get(), req, resp ? resp : &r);
  }

  static inline TempDir* dir_ = nullptr;
  static inline DroverUp* up_ = nullptr;
};

v1::JobSpec Good() {
  v1::JobSpec s;
  s.set_gpus(1);
  s.add_command("true");
  return s;
}

TEST_F(ApiTest, HealthAndReadiness) {
  EXPECT_EQ(Http("GET", "/healthz").status, 200);
  EXPECT_EQ(Http("GET", "/readyz").status, 200);
  auto v = Http("GET", "/api/v1/version");
  EXPECT_EQ(v.status, 200);
  EXPECT_EQ(nlohmann::json::parse(v.body)["version"], "0.1.0");
}

TEST_F(ApiTest, RestSubmitGetListCancelAndLogs) {
  auto created = Http("POST", "/api/v1/jobs",
                      R"({"spec": {"gpus": 2, "command": ["sh", "-c", "echo hello; sleep 0.3; echo bye"]}})");
  ASSERT_EQ(created.status, 201) << created.body;
  std::string id = nlohmann::json::parse(created.body)["job"]["id"];

  auto follow = Http("GET", "/api/v1/jobs/" + id + "/logs?follow=true");
  EXPECT_EQ(follow.status, 200);
  EXPECT_EQ(follow.body, "hello\nbye\n");
  auto got = Http("GET", "/api/v1/jobs/" + id);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(nlohmann::json::parse(got.body)["status"]["state"], "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(Http("GET", "/api/v1/jobs/" + id + "/logs?offset=6").body, "bye\n");

  auto list = Http("GET", "/api/v1/jobs?state=succeeded");
  ASSERT_EQ(list.status, 200);
  bool found = false;
  auto listed = nlohmann::json::parse(list.body);
  for (const auto& j : listed["jobs"]) found |= j["id"] == id;
  EXPECT_TRUE(found);

  auto sleeper = Http("POST", "/api/v1/jobs", R"({"spec": {"gpus": 1, "command": ["sleep", "300"]}})");
  std::string sid = nlohmann::json::parse(sleeper.body)["job"]["id"];
  auto cancelled = Http("POST", "/api/v1/jobs/" + sid + "/cancel");
  EXPECT_EQ(cancelled.status, 200);
  ASSERT_TRUE(WaitUntil([&] { return GetJob(up_->jobs(), sid).status().state() == v1::JOB_STATE_CANCELLED; }));

  auto nodes = Http("GET", "/api/v1/nodes");
  ASSERT_EQ(nodes.status, 200);
  EXPECT_EQ(nlohmann::json::parse(nodes.body)["nodes"][0]["name"], "sim-1");
  EXPECT_EQ(Http("GET", "/api/v1/nodes/sim-1").status, 200);
}

// `POST /api/v1/jobs?watch=...` (what `submit --wait` sends): the 201
// answer goes on as the jobs' event stream on the same connection, "all"
// with each change, "ended" with the end only; a bad watch value or spec
// is refused before anything is stored.
TEST_F(ApiTest, SubmitThatWatchesStreamsItsJobsOnTheSameConnection) {
  auto events = [](const std::string& body) {
    std::vector<std::pair<std::string, nlohmann::json>> out;
    size_t i = 0;
    for (size_t end; (end = body.find("\n\n", i)) != std::string::npos; i = end + 2) {
      std::string ev = body.substr(i, end - i);
      std::string name = ev.substr(7, ev.find('\n') - 7);
      out.emplace_back(name, nlohmann::json::parse(ev.substr(ev.find("data: ") + 6)));
    }
    return out;
  };
  const std::string spec = R"({"spec": {"gpus": 1, "command": ["sh", "-c", "exit 4"]}})";
  auto all = Http("POST", "/api/v1/jobs?watch=all", spec);
  ASSERT_EQ(all.status, 201) << all.body;
  EXPECT_EQ(all.headers["content-type"], "text/event-stream");
  auto evs = events(all.body);
  ASSERT_GE(evs.size(), 3u) << all.body;
  EXPECT_EQ(evs.front().first, "submitted");
  std::string id = evs.front().second["job"]["id"];
  EXPECT_EQ(evs.back().first, "end");
  const auto& last = evs[evs.size() - 2];
  EXPECT_EQ(last.first, "job");
  EXPECT_EQ(last.second["id"], id);
  EXPECT_EQ(last.second["status"]["state"], "JOB_STATE_FAILED");
  EXPECT_EQ(last.second["status"]["exitCode"], 4);
  size_t changes = 0;
  for (const auto& [name, data] : evs) changes += name == "job";
  EXPECT_GE(changes, 2u);  // at least where it was when the watch began, and its end

  auto ended = Http("POST", "/api/v1/jobs?watch=ended", spec);
  ASSERT_EQ(ended.status, 201) << ended.body;
  evs = events(ended.body);
  ASSERT_EQ(evs.size(), 3u) << ended.body;  // submitted, the end, end
  EXPECT_EQ(evs[0].first, "submitted");
  EXPECT_EQ(evs[1].first, "job");
  EXPECT_EQ(evs[1].second["id"], evs[0].second["job"]["id"]);
  EXPECT_EQ(evs[1].second["status"]["state"], "JOB_STATE_FAILED");
  EXPECT_EQ(evs[2].first, "end");

  // An array: every task's end, then the end.
  auto array = Http("POST", "/api/v1/jobs?watch=ended",
                    R"({"spec": {"gpus": 1, "command": ["true"]}, "array": {"first": 1, "last": 3}})");
  ASSERT_EQ(array.status, 201) << array.body;
  evs = events(array.body);
  ASSERT_EQ(evs.size(), 5u) << array.body;
  EXPECT_FALSE(evs[0].second["arrayId"].get<std::string>().empty());
  for (int k = 1; k <= 3; ++k) EXPECT_EQ(evs[k].second["status"]["state"], "JOB_STATE_SUCCEEDED");

  const int before = JobCount();
  auto bad = Http("POST", "/api/v1/jobs?watch=sometimes", spec);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("watch must be 'all' or 'ended'"), std::string::npos) << bad.body;
  auto refused = Http("POST", "/api/v1/jobs?watch=ended", R"({"spec": {"gpus": 99, "command": ["true"]}})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.headers["content-type"], "application/json");
  EXPECT_EQ(JobCount(), before);
}

// The threads of a process, from /proc.
int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// `logs -f` over REST holds no thread: 300 followers (more than the 256
// streams that once each held one) all get the output as it is written and
// all end with the job, while the server answers other requests and its
// thread count stays where it was. They come from five loopback addresses
// (the server takes 64 connections from one address).
TEST_F(ApiTest, ManyLogFollowersHoldNoThreads) {
  auto created = Http("POST", "/api/v1/jobs",
                      R"({"spec": {"gpus": 1, "command": ["sh", "-c", "echo start; sleep 300; echo never"]}})");
  ASSERT_EQ(created.status, 201) << created.body;
  std::string id = nlohmann::json::parse(created.body)["job"]["id"];
  ASSERT_TRUE(WaitUntil([&] { return Http("GET", "/api/v1/jobs/" + id + "/logs").body == "start\n"; }));
  const int before = Threads(up_->pid());

  std::string host = up_->http_address();
  int port = std::stoi(host.substr(host.rfind(':') + 1));
  std::string request = "GET /api/v1/jobs/" + id + "/logs?follow=true HTTP/1.1\r\nHost: " + host +
                        "\r\nAuthorization: Bearer " + up_->token() + "\r\n\r\n";
  constexpr int kFollowers = 300;
  std::vector<int> fds;
  std::vector<std::string> got(kFollowers);
  std::vector<bool> eof(kFollowers, false);
  for (int i = 0; i < kFollowers; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + static_cast<uint32_t>(i / 60));  // 127.0.0.2 ...
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    fds.push_back(fd);
  }
  // Reads every stream until `done(i)` holds for all; false on a timeout.
  auto read_until = [&](const std::function<bool(int)>& done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      std::vector<pollfd> polls;
      std::vector<int> which;
      for (int i = 0; i < kFollowers; ++i) {
        if (done(i) || eof[i]) continue;
        polls.push_back({fds[i], POLLIN, 0});
        which.push_back(i);
      }
      if (polls.empty()) {  // every stream done, or closed before it was
        for (int i = 0; i < kFollowers; ++i) {
          if (!done(i)) return false;
        }
        return true;
      }
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (::poll(polls.data(), polls.size(), 1000) < 0) return false;
      for (size_t k = 0; k < polls.size(); ++k) {
        if ((polls[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        char buf[4096];
        ssize_t n = ::recv(polls[k].fd, buf, sizeof(buf), 0);
        if (n > 0) got[which[k]].append(buf, static_cast<size_t>(n));
        if (n <= 0) eof[which[k]] = true;
      }
    }
  };
  auto started = [&](int i) { return got[i].find("start\n") != std::string::npos; };
  if (!read_until(started)) {
    for (int i = 0; i < kFollowers; ++i) ASSERT_TRUE(started(i)) << "stream " << i << " got: " << got[i];
  }
  for (int i = 0; i < kFollowers; ++i) EXPECT_EQ(got[i].rfind("HTTP/1.1 200", 0), 0u) << got[i].substr(0, 200);
  EXPECT_EQ(Http("GET", "/readyz").status, 200);
  EXPECT_LT(Threads(up_->pid()) - before, 20) << "threads before: " << before;

  ASSERT_EQ(Http("POST", "/api/v1/jobs/" + id + "/cancel").status, 200);
  // Each stream ends with the last chunk of its body ("0\r\n\r\n").
  auto ended = [&](int i) { return got[i].find("\r\n0\r\n\r\n") != std::string::npos; };
  bool all_ended = read_until(ended);
  int open = 0;
  for (int i = 0; i < kFollowers; ++i) open += ended(i) ? 0 : 1;
  ASSERT_TRUE(all_ended) << open << " streams did not end, e.g.: " << got[0];
  for (int i = 0; i < kFollowers; ++i) {
    EXPECT_EQ(got[i].find("never"), std::string::npos);
    ::close(fds[i]);
  }
}

TEST_F(ApiTest, BadJobSpecsAreRejectedOnBothTransportsAndNothingIsStored) {
  struct Case {
    const char* what;
    std::function<void(v1::JobSpec*)> mutate;
    grpc::StatusCode code;
  };
  const Case cases[] = {
      {"negative gpus", [](v1::JobSpec* s) { s->set_gpus(-1); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"absurd gpus", [](v1::JobSpec* s) { s->set_gpus(1 << 30); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"negative memory", [](v1::JobSpec* s) { s->set_gpu_memory_bytes(-1); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"absurd memory", [](v1::JobSpec* s) { s->set_gpu_memory_bytes(int64_t{1} << 60); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"empty command", [](v1::JobSpec* s) { s->clear_command(); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"oversized command", [](v1::JobSpec* s) { s->add_command(std::string(100000, 'x')); },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"bad tenant", [](v1::JobSpec* s) { s->set_tenant("Bad Tenant"); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"unknown vendor", [](v1::JobSpec* s) { s->set_gpu_vendor("voodoo"); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"never fits", [](v1::JobSpec* s) { s->set_gpus(9); }, grpc::StatusCode::FAILED_PRECONDITION},
      {"no such model", [](v1::JobSpec* s) { s->set_gpu_model("B200"); }, grpc::StatusCode::FAILED_PRECONDITION},
      {"too much memory", [](v1::JobSpec* s) { s->set_gpu_memory_bytes(int64_t{100} << 30); },
       grpc::StatusCode::FAILED_PRECONDITION},
      {"share without memory", [](v1::JobSpec* s) { s->set_gpu_milli(250); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"share over one", [](v1::JobSpec* s) { s->set_gpu_milli(2000); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"negative replicas", [](v1::JobSpec* s) { s->set_replicas(-2); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"gang that never fits",
       [](v1::JobSpec* s) {
         s->set_replicas(2);
         s->set_gpus(8);
       },
       grpc::StatusCode::FAILED_PRECONDITION},
      {"bad selector", [](v1::JobSpec* s) { (*s->mutable_node_selector())["rack"] = "a b"; },
       grpc::StatusCode::INVALID_ARGUMENT},
      {"no such rack", [](v1::JobSpec* s) { (*s->mutable_node_selector())["rack"] = "rack-9"; },
       grpc::StatusCode::FAILED_PRECONDITION},
      {"bad topology", [](v1::JobSpec* s) { s->set_topology("mesh"); }, grpc::StatusCode::INVALID_ARGUMENT},
      {"negative estimate", [](v1::JobSpec* s) { s->set_runtime_estimate_seconds(-1); },
       grpc::StatusCode::INVALID_ARGUMENT},
  };
  int before = JobCount();
  for (const Case& c : cases) {
    v1::JobSpec spec = Good();
    c.mutate(&spec);
    grpc::Status s = GrpcSubmit(spec);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_FALSE(s.error_message().empty()) << c.what;

    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    std::string body;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(req, &body).ok());
    auto h = Http("POST", "/api/v1/jobs", body);
    EXPECT_EQ(h.status, 400) << c.what << ": " << h.body;
    auto err = nlohmann::json::parse(h.body);
    EXPECT_EQ(err["message"], s.error_message()) << c.what;
  }
  v1::JobSpec never = Good();
  never.set_gpus(9);
  EXPECT_NE(GrpcSubmit(never).error_message().find("no node has 9 GPUs (the most any node has is 8)"),
            std::string::npos);
  EXPECT_EQ(JobCount(), before);
}

TEST_F(ApiTest, MalformedRequestsGetClearErrors) {
  int before = JobCount();
  EXPECT_EQ(Http("POST", "/api/v1/jobs", "{not json").status, 400);
  EXPECT_EQ(Http("POST", "/api/v1/jobs", "").status, 400);
  auto unknown_field = Http("POST", "/api/v1/jobs", R"({"spec": {"gpus": 1, "command": ["true"], "color": "red"}})");
  EXPECT_EQ(unknown_field.status, 400);
  EXPECT_NE(unknown_field.body.find("color"), std::string::npos) << unknown_field.body;
  EXPECT_EQ(Http("POST", "/api/v1/jobs", R"({"spec": {"gpus": "two", "command": ["true"]}})").status, 400);
  EXPECT_EQ(Http("GET", "/api/v1/jobs?state=JOB_STATE_EXPLODED").status, 400);
  EXPECT_EQ(Http("GET", "/api/v1/jobs?state=99").status, 400);
  auto big = Http("POST", "/api/v1/jobs", std::string(2 << 20, ' '));
  EXPECT_EQ(big.status, 413);
  EXPECT_EQ(JobCount(), before);

  // An oversized gRPC request is refused before it is parsed.
  v1::JobSpec huge = Good();
  huge.add_command(std::string(5 << 20, 'x'));
  EXPECT_EQ(GrpcSubmit(huge).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // An enum value the server does not know.
  v1::ListJobsRequest lr;
  lr.set_state(static_cast<v1::JobState>(42));
  v1::ListJobsResponse resp;
  auto ctx = Ctx();
  EXPECT_EQ(up_->jobs()->List(ctx.get(), lr, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(JobCount(), before);
}

TEST_F(ApiTest, UnknownIdsAndRoutes) {
  EXPECT_EQ(Http("GET", "/api/v1/jobs/j-424242").status, 404);
  EXPECT_EQ(Http("GET", "/api/v1/jobs/nonsense").status, 400);
  EXPECT_EQ(Http("POST", "/api/v1/jobs/j-424242/cancel").status, 404);
  EXPECT_EQ(Http("GET", "/api/v1/jobs/j-424242/logs").status, 404);
  EXPECT_EQ(Http("GET", "/api/v1/nodes/gpu-99").status, 404);
  EXPECT_EQ(Http("POST", "/api/v1/nodes/gpu-99/drain").status, 404);
  EXPECT_EQ(Http("GET", "/api/v1/nodes/Bad_Name").status, 400);
  EXPECT_EQ(Http("GET", "/api/v1/nowhere").status, 404);
  EXPECT_EQ(Http("DELETE", "/api/v1/jobs").status, 405);
  EXPECT_EQ(Http("GET", "/api/v1/jobs/j-000001/cancel").status, 405);

  v1::GetJobRequest gr;
  gr.set_id("j-424242");
  v1::Job job;
  auto ctx = Ctx();
  EXPECT_EQ(up_->jobs()->Get(ctx.get(), gr, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  gr.set_id("");
  auto ctx2 = Ctx();
  EXPECT_EQ(up_->jobs()->Get(ctx2.get(), gr, &job).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace drover::testing
