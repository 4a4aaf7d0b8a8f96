#include "drover/agent/connection.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/v1/agent.grpc.pb.h"

namespace drover::agent {
namespace {

// A server that answers registrations as the leader of `epoch` and holds
// sessions open until the client ends them.
class FakeServer final : public v1::AgentService::Service {
 public:
  explicit FakeServer(int64_t epoch) : epoch_(epoch) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*, v1::RegisterResponse* resp) override {
    {
      MutexLock lock(&mu_);
      ++registrations_;
    }
    registered_.SignalAll();
    resp->set_leader_epoch(epoch_);
    resp->set_heartbeat_interval_ms(250);
    return grpc::Status::OK;
  }
  grpc::Status Session(grpc::ServerContext*,
                       grpc::ServerReaderWriter<v1::ServerMessage, v1::AgentMessage>* stream) override {
    v1::AgentMessage m;
    while (stream->Read(&m)) {
    }
    return grpc::Status::OK;
  }

  // Serves on `address` ("127.0.0.1:0": a free port); the port it got.
  int Start(const std::string& address) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return port;
  }
  void Stop() {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }
  ~FakeServer() override { Stop(); }

  // Whether `n` registrations arrived within 20 s.
  bool WaitRegistrations(int n) {
    MutexLock lock(&mu_);
    return registered_.WaitFor(&mu_, std::chrono::seconds(20),
                               [&]() DROVER_REQUIRES(mu_) { return registrations_ >= n; });
  }

 private:
  Mutex mu_;
  CondVar registered_;
  int registrations_ DROVER_GUARDED_BY(mu_) = 0;
  const int64_t epoch_;
  std::unique_ptr<grpc::Server> server_;
};

// An agent that has followed the leader of epoch 5 does not follow a server
// that answers as the leader of epoch 3 (a deposed leader that does not
// know it yet), however often it is the only one that answers; it follows
// the next leader, of epoch 7, at once.
TEST(ConnectionTest, AServerOfAnOlderEpochIsNotFollowed) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("drover-connection-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto leader = std::make_unique<FakeServer>(5);
  const int leader_port = leader->Start("127.0.0.1:0");
  FakeServer deposed(3);
  const int deposed_port = deposed.Start("127.0.0.1:0");
  ASSERT_GT(leader_port, 0);
  ASSERT_GT(deposed_port, 0);

  Mutex mu;
  CondVar cv;
  std::vector<int64_t> followed;  // the epoch of each session opened
  runtime::EventLoop loop("connection-test");
  loop.Start();
  ConnectionOptions options;
  options.node_name = "gpu-01";
  options.server_address = "127.0.0.1:" + std::to_string(leader_port) + ",127.0.0.1:" + std::to_string(deposed_port);
  options.data_dir = dir;
  options.token = "a-node-token";
  ConnectionEvents events;
  events.make_register = [] { return v1::RegisterRequest(); };
  events.connected = [&](const v1::RegisterResponse& r, int64_t) {
    MutexLock lock(&mu);
    followed.push_back(r.leader_epoch());
    cv.SignalAll();
  };
  events.message = [](v1::ServerMessage) {};
  auto connection = ServerConnection::Create(options, &loop, events);
  ASSERT_TRUE(connection.ok()) << connection.status().ToString();
  (*connection)->Begin();
  auto wait_followed = [&](size_t n) {
    MutexLock lock(&mu);
    return cv.WaitFor(&mu, std::chrono::seconds(20), [&]() DROVER_REQUIRES(mu) { return followed.size() >= n; });
  };
  ASSERT_TRUE(wait_followed(1));

  // The leader goes; the deposed server is the only one that answers.
  leader->Stop();
  ASSERT_TRUE(deposed.WaitRegistrations(3)) << "the other server was not tried";
  {
    MutexLock lock(&mu);
    EXPECT_EQ(followed, std::vector<int64_t>({5})) << "a session was opened with the deposed server";
  }

  // A new leader on the first address.
  FakeServer next(7);
  ASSERT_EQ(next.Start("127.0.0.1:" + std::to_string(leader_port)), leader_port);
  ASSERT_TRUE(wait_followed(2));
  {
    MutexLock lock(&mu);
    EXPECT_EQ(followed, std::vector<int64_t>({5, 7}));
  }
  (*connection)->Stop();
  loop.Stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace drover::agent
