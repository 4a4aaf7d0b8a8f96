#include "drover/agent/service.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "drover/agent/agent.h"
#include "drover/agent/agent_test_support.h"
#include "drover/agent/fake_agent_server.h"
#include "drover/common/mutex.h"
#include "drover/rpc/convert.h"
#include "drover/v1/agent.grpc.pb.h"

namespace drover::agent {
namespace {

using namespace std::chrono_literals;
using test_support::Slurp;
using test_support::Spit;
using test_support::FakeServer;
using test_support::TempDirTest;

// ---- settings ---------------------------------------------------------------

TEST(ServiceSettingsTest, EmptySpecTakesTheDefaults) {
  auto s = ServiceSettingsOf(v1::ServiceSpec());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->readiness.Checks());
  EXPECT_EQ(s->readiness.period, 1000ms);
  EXPECT_EQ(s->liveness.period, 5000ms);
  EXPECT_EQ(s->readiness.timeout, 1000ms);
  EXPECT_EQ(s->readiness.initial_delay, 0ms);
  EXPECT_EQ(s->liveness.failure_threshold, 3);
  EXPECT_EQ(s->restart_backoff, 1000ms);
  EXPECT_EQ(s->max_restart_backoff, 60000ms);
  EXPECT_EQ(s->ready_timeout, 600000ms);
}

TEST(ServiceSettingsTest, BadProbesAndTimesAreRefusedByName) {
  struct Case {
    std::function<void(v1::ServiceSpec*)> set;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](v1::ServiceSpec* s) { s->mutable_readiness()->set_http_path("healthz"); }, "must start with '/'"},
      {[](v1::ServiceSpec* s) { s->mutable_readiness()->set_http_path("/a b"); }, "without spaces"},
      {[](v1::ServiceSpec* s) { s->mutable_liveness()->set_http_path("/x\r\nHost: evil"); }, "liveness"},
      {[](v1::ServiceSpec* s) { s->mutable_readiness()->set_http_path("/" + std::string(2000, 'a')); }, "at most"},
      {[](v1::ServiceSpec* s) {
         s->mutable_readiness()->set_http_path("/h");
         s->mutable_readiness()->set_tcp(true);
       },
       "both http_path and tcp"},
      {[](v1::ServiceSpec* s) { s->mutable_readiness()->set_period_ms(-1); }, "readiness.period_ms is -1"},
      {[](v1::ServiceSpec* s) { s->mutable_liveness()->set_initial_delay_ms(-5); }, "liveness.initial_delay_ms"},
      {[](v1::ServiceSpec* s) { s->mutable_readiness()->set_timeout_ms(-1); }, "readiness.timeout_ms"},
      {[](v1::ServiceSpec* s) { s->mutable_readiness()->set_failure_threshold(-2); }, "failure_threshold"},
      {[](v1::ServiceSpec* s) { s->set_restart_backoff_ms(-1); }, "restart_backoff_ms"},
      {[](v1::ServiceSpec* s) {
         s->set_restart_backoff_ms(5000);
         s->set_max_restart_backoff_ms(1000);
       },
       "below restart_backoff_ms"},
      {[](v1::ServiceSpec* s) { s->set_ready_timeout_ms(-1); }, "ready_timeout_ms"},
      {[](v1::ServiceSpec* s) { s->set_model("a\nb"); }, "control character"},
  };
  for (const Case& c : cases) {
    v1::ServiceSpec spec;
    c.set(&spec);
    auto s = ServiceSettingsOf(spec);
    ASSERT_FALSE(s.ok()) << spec.ShortDebugString();
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << s.status().message();
  }
}

TEST(ServiceSettingsTest, BackoffDoublesUpToItsMaximum) {
  v1::ServiceSpec spec;
  spec.set_restart_backoff_ms(100);
  spec.set_max_restart_backoff_ms(500);
  auto s = ServiceSettingsOf(spec);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(RestartDelay(*s, 1), 100ms);
  EXPECT_EQ(RestartDelay(*s, 2), 200ms);
  EXPECT_EQ(RestartDelay(*s, 3), 400ms);
  EXPECT_EQ(RestartDelay(*s, 4), 500ms);
  EXPECT_EQ(RestartDelay(*s, 1000), 500ms);
  EXPECT_EQ(FormatDelay(1000ms), "1s");
  EXPECT_EQ(FormatDelay(200ms), "0.2s");
  EXPECT_EQ(FormatDelay(1250ms), "1.25s");
  // A first back-off above the default maximum raises the maximum with it.
  v1::ServiceSpec slow;
  slow.set_restart_backoff_ms(90000);
  auto t = ServiceSettingsOf(slow);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(RestartDelay(*t, 3), 90000ms);
}

// ---- the replica's state machine ----------------------------------------------

ServiceSettings Settings(int threshold = 3) {
  v1::ServiceSpec spec;
  spec.mutable_readiness()->set_http_path("/ready");
  spec.mutable_readiness()->set_failure_threshold(threshold);
  spec.mutable_liveness()->set_tcp(true);
  spec.mutable_liveness()->set_failure_threshold(2);
  spec.set_restart_backoff_ms(1000);
  spec.set_max_restart_backoff_ms(8000);
  spec.set_ready_timeout_ms(30000);
  auto s = ServiceSettingsOf(spec);
  EXPECT_TRUE(s.ok());
  return *s;
}

TEST(ServiceReplicaTest, ReadyOnAPassAndNotReadyAfterTheThresholdOfFailures) {
  ServiceTime t0{};
  ServiceReplica r(Settings(), 20001, "10.0.0.7:20001");
  EXPECT_FALSE(r.ready());
  r.Started(t0);
  EXPECT_EQ(r.not_ready_reason(), "waiting for the readiness probe");
  r.Readiness(Unavailable("connection refused"), t0 + 1s);
  EXPECT_FALSE(r.ready());
  EXPECT_EQ(r.not_ready_reason(), "readiness probe: connection refused");
  r.Readiness(Status::Ok(), t0 + 2s);
  EXPECT_TRUE(r.ready());
  EXPECT_EQ(r.not_ready_reason(), "");
  EXPECT_EQ(r.View(), (ServiceView{20001, "10.0.0.7:20001", true, 0, ""}));
  // Two failures in a row are below the threshold; a pass resets them.
  r.Readiness(Unavailable("http 503"), t0 + 3s);
  r.Readiness(Unavailable("http 503"), t0 + 4s);
  EXPECT_TRUE(r.ready());
  r.Readiness(Status::Ok(), t0 + 5s);
  r.Readiness(Unavailable("http 503"), t0 + 6s);
  r.Readiness(Unavailable("http 503"), t0 + 7s);
  EXPECT_TRUE(r.ready());
  r.Readiness(Unavailable("http 503"), t0 + 8s);
  EXPECT_FALSE(r.ready());
  EXPECT_EQ(r.not_ready_reason(), "readiness probe failed 3 times: http 503");
}

TEST(ServiceReplicaTest, AReplicaNotReadyInTimeSaysSo) {
  ServiceTime t0{};
  ServiceReplica r(Settings(), 20001, "h:20001");
  r.Started(t0);
  r.Readiness(Unavailable("http 503"), t0 + 10s);
  r.CheckReadyTimeout(t0 + 29s);
  EXPECT_EQ(r.not_ready_reason(), "readiness probe: http 503");
  r.CheckReadyTimeout(t0 + 30s);
  EXPECT_EQ(r.not_ready_reason(), "not ready 30s after its start (ready timeout): readiness probe: http 503");
  r.Readiness(Unavailable("connection refused"), t0 + 31s);
  EXPECT_EQ(r.not_ready_reason(), "not ready 30s after its start (ready timeout): readiness probe: connection refused");
  r.Readiness(Status::Ok(), t0 + 32s);
  EXPECT_TRUE(r.ready());
}

TEST(ServiceReplicaTest, LivenessFailuresKillAndTheExitSaysWhy) {
  ServiceTime t0{};
  ServiceReplica r(Settings(), 20001, "h:20001");
  r.Started(t0);
  // Still loading: not killed, however long.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(r.Liveness(Unavailable("connection refused"), t0));
  r.Readiness(Status::Ok(), t0);
  const uint64_t gen = r.generation();
  EXPECT_FALSE(r.Liveness(Unavailable("connection refused"), t0 + 1s));
  EXPECT_TRUE(r.ready());
  EXPECT_TRUE(r.Liveness(Unavailable("connection refused"), t0 + 2s));
  EXPECT_FALSE(r.ready());
  EXPECT_FALSE(r.Liveness(Unavailable("connection refused"), t0 + 3s)) << "one kill per run";
  EXPECT_EQ(r.Exited("killed by signal 9", t0 + 3s), 1000ms);
  EXPECT_NE(r.generation(), gen);
  EXPECT_EQ(r.not_ready_reason(), "restarting in 1s: liveness probe failed 2 times: connection refused");
  EXPECT_FALSE(r.running());
  r.Restarting();
  EXPECT_EQ(r.restarts(), 1);
  r.Started(t0 + 4s);
  EXPECT_EQ(r.Exited("exit code 3", t0 + 5s), 2000ms);
  EXPECT_EQ(r.not_ready_reason(), "restarting in 2s: exit code 3");
}

TEST(ServiceReplicaTest, BackoffGoesBackToTheFirstAfterTenMinutesReady) {
  ServiceTime t = ServiceTime{} + 1h;
  ServiceReplica r(Settings(), 20001, "h:20001");
  std::vector<std::chrono::milliseconds> delays;
  for (int i = 0; i < 5; ++i) {
    r.Started(t);
    r.Readiness(Status::Ok(), t + 1s);
    delays.push_back(r.Exited("exit code 1", t + 2s));
    r.Restarting();
    t += 1min;
  }
  EXPECT_EQ(delays, (std::vector<std::chrono::milliseconds>{1000ms, 2000ms, 4000ms, 8000ms, 8000ms}));
  r.Started(t);
  r.Readiness(Status::Ok(), t + 1s);
  EXPECT_EQ(r.Exited("exit code 1", t + 1s + kBackoffResetAfter), 1000ms);
  EXPECT_EQ(r.restarts(), 5);
}

TEST(ServiceReplicaTest, AStoppingReplicaIsNotReady) {
  ServiceTime t0{};
  ServiceReplica r(Settings(), 20001, "h:20001");
  r.Started(t0);
  r.Readiness(Status::Ok(), t0);
  r.Stopping();
  EXPECT_FALSE(r.ready());
  r.Readiness(Status::Ok(), t0 + 1s);
  EXPECT_FALSE(r.ready());
  EXPECT_EQ(r.not_ready_reason(), "stopping");
}

// ---- ports, hosts, records ------------------------------------------------------

TEST(ServicePortsTest, RangesParse) {
  auto r = ParsePortRange("20000-29999");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::pair{20000, 29999}));
  for (const char* bad : {"", "20000", "0-10", "10-5", "1-70000", "a-b", "-5-10", "10-", "1 -2"}) {
    EXPECT_FALSE(ParsePortRange(bad).ok()) << bad;
  }
}

// A listening socket on a free loopback port, closed at the end.
struct Listener {
  int fd = -1;
  int port = 0;
  explicit Listener(int want = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(want));
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ::close(fd);
      fd = -1;
      return;
    }
    port = ntohs(a.sin_port);
  }
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
};

TEST(ServicePortsTest, TheAllocatorSkipsHeldAndBusyPortsOfItsRange) {
  Listener busy;
  ASSERT_GT(busy.port, 0);
  // A range of three around the busy port (which is below 65535 - 2 in practice).
  const int first = busy.port;
  PortAllocator ports;
  ports.SetRange(first, first + 2);
  std::vector<int> got;
  for (int i = 0; i < 2; ++i) {
    auto p = ports.Allocate();
    if (!p.ok()) break;  // another process holds one of the neighbours
    got.push_back(*p);
  }
  for (int p : got) {
    EXPECT_NE(p, busy.port);
    EXPECT_TRUE(ports.held(p));
  }
  if (got.size() == 2) {
    EXPECT_NE(got[0], got[1]);
    auto none = ports.Allocate();
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), Code::kResourceExhausted);
    ports.Release(got[0]);
    auto again = ports.Allocate();
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, got[0]);
  }
  // Without a range: the kernel's pick, never one held.
  PortAllocator any;
  auto a = any.Allocate();
  auto b = any.Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(PortBindable(*a));
}

// The agents of one process (simulated nodes) never share a port.
TEST(ServicePortsTest, AllocatorsOfOneProcessNeverGiveTheSamePort) {
  Listener probe;
  ASSERT_GT(probe.port, 0);
  const int first = probe.port + 1;  // a small range just above a free port
  ::close(probe.fd);
  probe.fd = -1;
  PortAllocator a, b;
  a.SetRange(first, first + 3);
  b.SetRange(first, first + 3);
  std::set<int> given;
  for (int i = 0; i < 2; ++i) {
    for (PortAllocator* p : {&a, &b}) {
      auto port = p->Allocate();
      if (port.ok()) {
        EXPECT_TRUE(given.insert(*port).second) << "port " << *port << " given twice";
      }
    }
  }
  b.Hold(first + 10);
  {
    PortAllocator c;
    c.SetRange(first + 10, first + 10);
    EXPECT_FALSE(c.Allocate().ok()) << "held by b";
  }
  b.Release(first + 10);
  PortAllocator d;
  d.SetRange(first + 10, first + 10);
  auto freed = d.Allocate();
  if (PortBindable(first + 10)) {
    ASSERT_TRUE(freed.ok()) << freed.status().ToString();
    EXPECT_EQ(*freed, first + 10);
  }
}

TEST(ServicePortsTest, AdvertisedHostAndEndpoint) {
  EXPECT_EQ(DefaultAdvertiseHost("10.0.0.7:7946"), "10.0.0.7");
  EXPECT_EQ(DefaultAdvertiseHost("0.0.0.0:7946"), "127.0.0.1");
  EXPECT_EQ(DefaultAdvertiseHost(""), "127.0.0.1");
  EXPECT_EQ(DefaultAdvertiseHost("[::]:7946"), "127.0.0.1");
  EXPECT_EQ(DefaultAdvertiseHost("[fd00::7]:7946"), "fd00::7");
  EXPECT_EQ(DefaultAdvertiseHost("gpu-07.lab:7946"), "gpu-07.lab");
  EXPECT_EQ(EndpointOf("10.0.0.7", 20001), "10.0.0.7:20001");
  EXPECT_EQ(EndpointOf("fd00::7", 20001), "[fd00::7]:20001");
}

class ServiceFileTest : public TempDirTest {};

// A replica's secret as the server makes them (43 base64url characters).
constexpr std::string_view kSecret = "s3cr3t-0123456789_abcdefghijklmnopqrstuvwxy";

TEST_F(ServiceFileTest, RoundTripsAndRefusesGarbage) {
  auto none = ReadServiceFile(root_);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ServiceFile f;
  f.port = 20007;
  f.restarts = 4;
  f.spec.set_model("m");
  f.spec.mutable_readiness()->set_http_path("/health");
  f.spec.set_api_key(std::string(kSecret));
  ASSERT_TRUE(WriteServiceFile(root_, f).ok());
  auto back = ReadServiceFile(root_);
  ASSERT_TRUE(back.ok() && back->has_value()) << back.status().ToString();
  EXPECT_EQ((*back)->port, 20007);
  EXPECT_EQ((*back)->restarts, 4);
  EXPECT_EQ((*back)->spec.readiness().http_path(), "/health");
  EXPECT_EQ((*back)->spec.api_key(), kSecret);
  // It holds the replica's secret: its owner's only.
  struct stat st {};
  ASSERT_EQ(::stat((root_ + "/service.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Spit(root_ + "/service.json", "{\"port\": 99999, \"restarts\": 0, \"spec\": {}}");
  EXPECT_FALSE(ReadServiceFile(root_).ok());
  Spit(root_ + "/service.json", "not json");
  EXPECT_FALSE(ReadServiceFile(root_).ok());
}

// ---- probes -------------------------------------------------------------------

// Answers each connection on `l` with `answer` (after reading the request),
// `n` times, on a thread of its own.
std::thread Answer(const Listener& l, std::string answer, int n) {
  return std::thread([fd = l.fd, answer = std::move(answer), n] {
    for (int i = 0; i < n; ++i) {
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[2048];
      (void)!::recv(c, buf, sizeof buf, 0);
      (void)!::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  });
}

TEST(ProbeTest, TcpPassesOnAListenerAndFailsOnAClosedPort) {
  ProbeSettings p;
  p.tcp = true;
  int closed_port = 0;
  {
    Listener l;
    ASSERT_GT(l.port, 0);
    EXPECT_TRUE(CheckProbe(p, l.port).ok());
    closed_port = l.port;
  }
  Status s = CheckProbe(p, closed_port);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "connection refused");
  EXPECT_TRUE(CheckProbe(ProbeSettings{}, closed_port).ok()) << "a probe that checks nothing passes";
}

TEST(ProbeTest, HttpPassesOn2xxAnd3xxOnly) {
  ProbeSettings p;
  p.http_path = "/healthz";
  struct Case {
    std::string answer;
    std::string result;  // "" passes
  };
  const std::vector<Case> cases = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", ""},
      {"HTTP/1.0 302 Found\r\n\r\n", ""},
      {"HTTP/1.1 503 Service Unavailable\r\n\r\n", "http 503"},
      {"HTTP/1.1 404 Not Found\r\n\r\n", "http 404"},
      {"SSH-2.0-OpenSSH\r\n", "not an HTTP answer"},
      {"", "the connection closed before an answer"},
  };
  for (const Case& c : cases) {
    Listener l;
    ASSERT_GT(l.port, 0);
    std::thread t = Answer(l, c.answer, 1);
    Status s = CheckProbe(p, l.port);
    t.join();
    EXPECT_EQ(s.ok() ? "" : s.message(), c.result) << c.answer;
  }
}

TEST(ProbeTest, AServerThatNeverAnswersTimesOut) {
  Listener l;  // accepts into its backlog, never reads or answers
  ASSERT_GT(l.port, 0);
  ProbeSettings p;
  p.http_path = "/";
  p.timeout = 200ms;
  Status s = CheckProbe(p, l.port);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "timed out after 200 ms");
}

// ---- an agent running services --------------------------------------------------

// A service of Python's standard library: GET /ready answers 503 while
// <state>/unready exists (401 without "Authorization: Bearer
// $DROVER_ENGINE_API_KEY" when that is set), GET /live 500 while
// <state>/dead exists, GET /info "<pid> <DROVER_MODEL>
// <DROVER_SERVED_MODEL_NAME> <DROVER_ENGINE_API_KEY or ->".
constexpr const char* kServiceScript = R"PY(
import http.server, os, sys
state = sys.argv[1]
port = int(os.environ["DROVER_PORT"])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200
        if self.path == "/ready" and os.path.exists(state + "/unready"): code = 503
        if self.path == "/live" and os.path.exists(state + "/dead"): code = 500
        key = os.environ.get("DROVER_ENGINE_API_KEY", "")
        if self.path == "/ready" and key and self.headers.get("Authorization") != "Bearer " + key: code = 401
        body = "{} {} {} {}\n".format(os.getpid(), os.environ.get("DROVER_MODEL", ""),
                                      os.environ.get("DROVER_SERVED_MODEL_NAME", ""), key or "-").encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print("serving on", port, flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
)PY";

// GET http://127.0.0.1:port/path; the body, or "" when it fails.
std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    (void)!::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  auto body = got.find("\r\n\r\n");
  return body == std::string::npos ? "" : got.substr(body + 4);
}

class ServiceAgentTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    state_ = MakeDir("state");
    script_ = root_ + "/service.py";
    Spit(script_, kServiceScript);
    server_port_ = server_.Start();
    ASSERT_GT(server_port_, 0);
    data_dir_ = MakeDir("data");
    StartTheAgent();
  }
  void StartTheAgent() {
    AgentOptions o;
    o.node_name = "svc-node";
    o.server_address = "127.0.0.1:" + std::to_string(server_port_);
    o.token = "a-node-token";
    o.data_dir = data_dir_;
    o.supervisor_exe = DROVER_SUPERVISE_BINARY;
    o.discover_host_topology = false;
    o.fencing = false;
    auto agent = StartAgent(std::move(o));
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    agent_ = std::move(*agent);
  }
  void TearDown() override {
    // Whatever still runs is stopped by the server first (the supervisors
    // outlive the agent by design).
    if (agent_) {
      (void)server_.SendDesired({});
      for (const std::string& id : launched_) EXPECT_TRUE(server_.WaitEnded(id)) << id << " did not end";
      agent_->Stop();
      agent_.reset();
    }
    server_.Stop();
    TempDirTest::TearDown();
  }

  v1::Workload Service(const std::string& job_id, const v1::ServiceSpec& spec) {
    v1::Workload w;
    w.set_job_id(job_id);
    w.set_workload_id(rpc::WorkloadId(job_id, 0, 1, 1));
    w.set_tenant("default");  // as the server sends it; a root tenant: the script is in the test's 0700 directory
    w.add_command("/usr/bin/python3");
    w.add_command(script_);
    w.add_command(state_);
    w.set_termination_grace_seconds(5);
    *w.mutable_service() = spec;
    launched_.push_back(w.workload_id());
    return w;
  }

  // Fast probes; restarts after 100 ms, then 200 ms, ...
  static v1::ServiceSpec Spec() {
    v1::ServiceSpec s;
    s.set_model("tiny-llama");
    s.mutable_readiness()->set_http_path("/ready");
    s.mutable_readiness()->set_period_ms(100);
    s.set_restart_backoff_ms(100);
    s.set_max_restart_backoff_ms(200);
    return s;
  }

  static bool Ready(const v1::WorkloadStatus& ws) { return ws.state() == v1::WORKLOAD_STATE_RUNNING && ws.ready(); }

  // The node's pid of the process serving `port` now: the one holding its
  // listening socket (a replica runs in a PID namespace of its own, where
  // its getpid() is not the node's). 0 when none.
  static pid_t ServingPid(int port) {
    std::set<std::string> sockets;
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream in(table);
      std::string line;
      std::getline(in, line);  // the header
      while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string sl, local, remote, st, queues, timer, retransmits, uid, timeout, inode;
        f >> sl >> local >> remote >> st >> queues >> timer >> retransmits >> uid >> timeout >> inode;
        const size_t colon = local.rfind(':');
        if (st != "0A" || colon == std::string::npos) continue;  // 0A: listening
        if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) sockets.insert("socket:[" + inode + "]");
      }
    }
    std::error_code ec;
    for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = proc.path().filename().string();
      if (sockets.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", ec)) {
        std::error_code lec;
        if (sockets.contains(std::filesystem::read_symlink(fd.path(), lec).string())) return std::stoi(name);
      }
    }
    return 0;
  }

  FakeServer server_;
  int server_port_ = 0;
  std::string data_dir_;
  std::unique_ptr<Agent> agent_;
  std::string state_, script_;
  std::vector<std::string> launched_;
};

TEST_F(ServiceAgentTest, AServiceGetsAPortServesOnItAndBecomesReady) {
  v1::Workload w = Service("j-000001", Spec());
  ASSERT_TRUE(server_.SendDesired({w}));
  // Running, with its port and endpoint, not ready until its probe passes.
  auto first = server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) {
    return ws.state() == v1::WORKLOAD_STATE_RUNNING && ws.port() > 0;
  });
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->ready());
  EXPECT_FALSE(first->not_ready_reason().empty());
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->port(), first->port());
  EXPECT_EQ(ready->endpoint(), "127.0.0.1:" + std::to_string(ready->port()));
  EXPECT_EQ(ready->restarts(), 0);
  EXPECT_EQ(ready->not_ready_reason(), "");
  // The process serves on DROVER_PORT with the model's variables.
  const std::string info = HttpGet(ready->port(), "/info");
  EXPECT_NE(info.find(" tiny-llama tiny-llama"), std::string::npos) << info;
}

// Issue 37: the replica's secret reaches its process as
// DROVER_ENGINE_API_KEY (a job env of that name does not win), and the
// agent's probes send it; without one the process gets none.
TEST_F(ServiceAgentTest, AReplicaGetsItsSecretAndItsProbesSendIt) {
  v1::ServiceSpec spec = Spec();
  spec.set_api_key(std::string(kSecret));
  v1::Workload w = Service("j-000010", spec);
  (*w.mutable_env())["DROVER_ENGINE_API_KEY"] = "a-users-own-value";
  v1::Workload plain = Service("j-000011", Spec());
  (*plain.mutable_env())["DROVER_ENGINE_API_KEY"] = "a-users-own-value";
  ASSERT_TRUE(server_.SendDesired({w}));
  // Ready: its /ready answers only a probe that sends the secret.
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  EXPECT_NE(HttpGet(ready->port(), "/info").find(" tiny-llama tiny-llama " + std::string(kSecret) + "\n"),
            std::string::npos);
  // The other one only now: WaitFor looks at reports after the last one it
  // returned, and the two replicas' "ready" could come in either order.
  ASSERT_TRUE(server_.SendDesired({w, plain}));
  auto other = server_.WaitFor(plain.workload_id(), Ready);
  ASSERT_TRUE(other);
  EXPECT_NE(HttpGet(other->port(), "/info").find(" tiny-llama tiny-llama -\n"), std::string::npos)
      << "a replica without a secret serves anyone";
}

TEST_F(ServiceAgentTest, AFailingReadinessProbeSaysWhy) {
  Spit(state_ + "/unready", "");
  v1::ServiceSpec spec = Spec();
  spec.set_ready_timeout_ms(300);
  v1::Workload w = Service("j-000002", spec);
  ASSERT_TRUE(server_.SendDesired({w}));
  auto failing = server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) {
    return ws.not_ready_reason().find("http 503") != std::string::npos;
  });
  ASSERT_TRUE(failing);
  EXPECT_FALSE(failing->ready());
  EXPECT_EQ(failing->state(), v1::WORKLOAD_STATE_RUNNING);
  // Not ready 0.3 s after its start: said with the probe's answer.
  const std::string late = "not ready 0.3s after its start (ready timeout): readiness probe: http 503";
  if (failing->not_ready_reason() != late) {
    ASSERT_TRUE(
        server_.WaitFor(w.workload_id(), [&](const v1::WorkloadStatus& ws) { return ws.not_ready_reason() == late; }));
  }
  // It becomes ready once its probe passes, and not ready again after three failures.
  std::filesystem::remove(state_ + "/unready");
  ASSERT_TRUE(server_.WaitFor(w.workload_id(), Ready));
  Spit(state_ + "/unready", "");
  auto lost = server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) { return !ws.ready(); });
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->not_ready_reason(), "readiness probe failed 3 times: http 503");
  EXPECT_EQ(lost->restarts(), 0) << "readiness never restarts a process";
}

TEST_F(ServiceAgentTest, AKilledProcessIsRestartedWithBackoffOnItsPort) {
  v1::Workload w = Service("j-000003", Spec());
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  const int port = ready->port();
  pid_t pid = ServingPid(port);
  ASSERT_GT(pid, 0);
  for (int restart = 1; restart <= 3; ++restart) {
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    auto down = server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) {
      return ws.not_ready_reason().starts_with("restarting in");
    });
    ASSERT_TRUE(down);
    EXPECT_EQ(down->state(), v1::WORKLOAD_STATE_RUNNING);
    EXPECT_FALSE(down->ready());
    // 100 ms, then 200 ms, the maximum.
    EXPECT_EQ(down->not_ready_reason(),
              std::string(restart == 1 ? "restarting in 0.1s" : "restarting in 0.2s") + ": killed by signal 9");
    auto back = server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) { return Ready(ws); });
    ASSERT_TRUE(back);
    EXPECT_EQ(back->restarts(), restart);
    EXPECT_EQ(back->port(), port);
    EXPECT_EQ(back->endpoint(), ready->endpoint());
    EXPECT_EQ(back->start_time_unix_nanos(), ready->start_time_unix_nanos()) << "the replica's start stays";
    pid_t next = ServingPid(port);
    EXPECT_NE(next, pid);
    pid = next;
  }
  for (const v1::WorkloadStatus& ws : server_.Reports(w.workload_id())) {
    EXPECT_EQ(ws.state(), v1::WORKLOAD_STATE_RUNNING) << "a restart is not an end";
  }
  // Every run's output, and the agent's word on each restart, in one log.
  const std::string log = Slurp(root_ + "/data/jobs/" + w.workload_id() + "/output.log");
  size_t runs = 0;
  for (size_t at = 0; (at = log.find("serving on " + std::to_string(port), at)) != std::string::npos; ++at) ++runs;
  EXPECT_EQ(runs, 4u) << log;
  EXPECT_NE(log.find("drover: the service's process ended (killed by signal 9); restarting it in 0.1s"),
            std::string::npos)
      << log;
}

TEST_F(ServiceAgentTest, ALivenessFailureRestartsTheProcess) {
  v1::ServiceSpec spec = Spec();
  spec.mutable_liveness()->set_http_path("/live");
  spec.mutable_liveness()->set_period_ms(100);
  spec.mutable_liveness()->set_failure_threshold(2);
  v1::Workload w = Service("j-000004", spec);
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  const pid_t pid = ServingPid(ready->port());
  Spit(state_ + "/dead", "");
  auto killed = server_.WaitFor(
      w.workload_id(), [](const v1::WorkloadStatus& ws) { return ws.not_ready_reason().starts_with("restarting in"); });
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->not_ready_reason(), "restarting in 0.1s: liveness probe failed 2 times: http 500");
  EXPECT_EQ(killed->state(), v1::WORKLOAD_STATE_RUNNING);
  std::filesystem::remove(state_ + "/dead");
  auto back =
      server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) { return Ready(ws) && ws.restarts() >= 1; });
  ASSERT_TRUE(back);
  EXPECT_EQ(back->port(), ready->port());
  EXPECT_NE(ServingPid(back->port()), pid);
}

TEST_F(ServiceAgentTest, AStopEndsAServiceWithoutARestart) {
  v1::Workload w = Service("j-000005", Spec());
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  ASSERT_TRUE(server_.SendDesired({}));
  auto ended = server_.WaitFor(w.workload_id(),
                               [](const v1::WorkloadStatus& ws) { return ws.state() == v1::WORKLOAD_STATE_EXITED; });
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->restarts(), 0);
  EXPECT_FALSE(ended->ready());
  EXPECT_EQ(ended->signal(), SIGTERM);
  EXPECT_EQ(HttpGet(ready->port(), "/info"), "") << "nothing serves on its port";
  // Before it ended it said it was stopping (not ready: no new requests).
  bool said_stopping = false;
  for (const v1::WorkloadStatus& ws : server_.Reports(w.workload_id())) {
    said_stopping = said_stopping || (ws.not_ready_reason() == "stopping" && !ws.ready());
  }
  EXPECT_TRUE(said_stopping);
}

TEST_F(ServiceAgentTest, AStopDuringTheBackoffEndsItThere) {
  v1::ServiceSpec spec = Spec();
  spec.set_restart_backoff_ms(600000);  // the restart would come in ten minutes
  spec.set_max_restart_backoff_ms(600000);
  v1::Workload w = Service("j-000006", spec);
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  ASSERT_EQ(::kill(ServingPid(ready->port()), SIGKILL), 0);
  auto waiting = server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) {
    return ws.not_ready_reason() == "restarting in 600s: killed by signal 9";
  });
  ASSERT_TRUE(waiting);
  EXPECT_EQ(waiting->state(), v1::WORKLOAD_STATE_RUNNING);
  ASSERT_TRUE(server_.SendDesired({}));
  auto ended = server_.WaitFor(w.workload_id(),
                               [](const v1::WorkloadStatus& ws) { return ws.state() == v1::WORKLOAD_STATE_EXITED; });
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->signal(), SIGKILL);
  EXPECT_EQ(ended->restarts(), 0);
  EXPECT_NE(ended->message().find("stopped while waiting for its restart"), std::string::npos) << ended->message();
}

// The agent restarts (its replicas' processes run on under their
// supervisors): the new agent adopts a running replica with its port and
// restarts, and restarts one whose process ended while no agent ran.
TEST_F(ServiceAgentTest, ARestartedAgentAdoptsItsReplicasWithTheirPorts) {
  v1::Workload w = Service("j-000008", Spec());
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  const int port = ready->port();
  ASSERT_EQ(::kill(ServingPid(port), SIGKILL), 0);
  ASSERT_TRUE(
      server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) { return Ready(ws) && ws.restarts() == 1; }));
  const pid_t pid = ServingPid(port);
  ASSERT_GT(pid, 0);

  agent_->Stop();
  agent_.reset();
  StartTheAgent();
  ASSERT_TRUE(server_.WaitSessions(2));
  ASSERT_TRUE(server_.SendDesired({w}));
  auto adopted = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(adopted);
  EXPECT_EQ(adopted->port(), port);
  EXPECT_EQ(adopted->endpoint(), ready->endpoint());
  EXPECT_EQ(adopted->restarts(), 1);
  EXPECT_EQ(ServingPid(port), pid) << "the running process was adopted, not started again";

  // Its process ends while no agent runs.
  agent_->Stop();
  agent_.reset();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  StartTheAgent();
  ASSERT_TRUE(server_.WaitSessions(3));
  ASSERT_TRUE(server_.SendDesired({w}));
  auto restarted =
      server_.WaitFor(w.workload_id(), [](const v1::WorkloadStatus& ws) { return Ready(ws) && ws.restarts() == 2; });
  ASSERT_TRUE(restarted);
  EXPECT_EQ(restarted->port(), port);
  EXPECT_NE(ServingPid(port), pid);
  for (const v1::WorkloadStatus& ws : server_.Reports(w.workload_id())) {
    EXPECT_EQ(ws.state(), v1::WORKLOAD_STATE_RUNNING) << ws.ShortDebugString();
  }
}

// A job that is not a service ends as it always did: once, with its exit
// code, and none of a service's fields.
TEST_F(ServiceAgentTest, APlainJobIsNotRestarted) {
  v1::Workload w;
  w.set_job_id("j-000009");
  w.set_workload_id(rpc::WorkloadId("j-000009", 0, 1, 1));
  w.add_command("/bin/sh");
  w.add_command("-c");
  w.add_command("echo \"port=${DROVER_PORT:-none}\"; exit 3");
  launched_.push_back(w.workload_id());
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ended = server_.WaitFor(w.workload_id(),
                               [](const v1::WorkloadStatus& ws) { return ws.state() == v1::WORKLOAD_STATE_EXITED; });
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->exit_code(), 3);
  EXPECT_EQ(ended->port(), 0);
  EXPECT_EQ(ended->endpoint(), "");
  EXPECT_EQ(ended->restarts(), 0);
  EXPECT_EQ(ended->not_ready_reason(), "");
  const std::string log = Slurp(data_dir_ + "/jobs/" + w.workload_id() + "/output.log");
  EXPECT_EQ(log, "port=none\n");
}

// The agent restarts while a replica waits for its restart: the new agent
// knows how it ended and restarts it after its back-off.
TEST_F(ServiceAgentTest, ARestartedAgentKeepsAPendingRestart) {
  v1::ServiceSpec spec = Spec();
  spec.set_restart_backoff_ms(600000);
  spec.set_max_restart_backoff_ms(600000);
  v1::Workload w = Service("j-000010", spec);
  ASSERT_TRUE(server_.SendDesired({w}));
  auto ready = server_.WaitFor(w.workload_id(), Ready);
  ASSERT_TRUE(ready);
  ASSERT_EQ(::kill(ServingPid(ready->port()), SIGKILL), 0);
  const std::string waiting = "restarting in 600s: killed by signal 9";
  ASSERT_TRUE(
      server_.WaitFor(w.workload_id(), [&](const v1::WorkloadStatus& ws) { return ws.not_ready_reason() == waiting; }));
  agent_->Stop();
  agent_.reset();
  StartTheAgent();
  ASSERT_TRUE(server_.WaitSessions(2));
  ASSERT_TRUE(server_.SendDesired({w}));
  auto adopted =
      server_.WaitFor(w.workload_id(), [&](const v1::WorkloadStatus& ws) { return ws.not_ready_reason() == waiting; });
  ASSERT_TRUE(adopted);
  EXPECT_EQ(adopted->state(), v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(adopted->port(), ready->port());
  EXPECT_EQ(adopted->restarts(), 0);
}

TEST_F(ServiceAgentTest, AnInvalidServiceFailsToStartAndSaysWhy) {
  v1::ServiceSpec spec = Spec();
  spec.mutable_readiness()->set_http_path("ready");
  v1::Workload w = Service("j-000007", spec);
  ASSERT_TRUE(server_.SendDesired({w}));
  auto failed = server_.WaitFor(
      w.workload_id(), [](const v1::WorkloadStatus& ws) { return ws.state() == v1::WORKLOAD_STATE_FAILED_TO_START; });
  ASSERT_TRUE(failed);
  EXPECT_NE(failed->message().find("invalid service: the readiness probe's http_path 'ready' must start with '/'"),
            std::string::npos)
      << failed->message();
}

}  // namespace
}  // namespace drover::agent
