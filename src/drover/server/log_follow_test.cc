#include "drover/server/log_follow.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <optional>
#include <string>

namespace drover::server {
namespace {

// A client of a follower: records what it got; acknowledges each chunk at
// once unless told to hold them.
struct Client {
  std::mutex mu;
  std::condition_variable cv;
  std::string got;
  int chunks = 0;
  int64_t base = 0;  // the offset asked for
  bool hold = false;
  std::optional<Status> done;
  std::shared_ptr<LogFollow> held;  // the follower of a held chunk

  LogFollow::Send Sender() {
    return [this](const std::shared_ptr<LogFollow>& self, v1::LogChunk c) {
      {
        std::lock_guard lock(mu);
        EXPECT_EQ(c.offset(), base + static_cast<int64_t>(got.size()));
        got += c.data();
        ++chunks;
        cv.notify_all();
        if (hold) {
          held = self;
          return true;
        }
      }
      self->Sent();
      return true;
    };
  }
  LogFollow::Done Ender() {
    return [this](const Status& s) {
      std::lock_guard lock(mu);
      done = s;
      cv.notify_all();
    };
  }
  bool WaitFor(const std::function<bool()>& pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), pred);
  }
};

class LogFollowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "drover-log-follow-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    auto logs = LogStore::Open(root_ + "/logs");
    ASSERT_TRUE(logs.ok()) << logs.status().ToString();
    logs_ = std::make_unique<LogStore>(std::move(logs).value());
    pump_.Start();
  }
  void TearDown() override {
    pump_.Stop();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  static v1::Job Job(v1::JobState state, int attempt = 1) {
    v1::Job j;
    j.set_id("j-000001");
    j.mutable_status()->set_state(state);
    j.mutable_status()->set_attempt(attempt);
    return j;
  }
  void Append(const std::string& log_id, const std::string& data) {
    auto now = logs_->Read(log_id, 0, kMaxLogReadBytes);
    ASSERT_TRUE(now.ok());
    ASSERT_TRUE(logs_->Write(log_id, static_cast<int64_t>(now->size()), data).ok());
  }

  std::string root_;
  std::unique_ptr<LogStore> logs_;
  JobWatch watch_;
  runtime::EventLoop pump_{"pump"};
};

// Woken by writes and by the job's end, not by a timer: everything written
// arrives in order, and the follow ends once the job ended and all was sent.
TEST_F(LogFollowTest, FollowsWritesUntilTheJobEnds) {
  Append("j-000001", "one\n");
  Client c;
  auto f = LogFollow::Start(logs_.get(), &watch_, &pump_, Job(v1::JOB_STATE_RUNNING), 0, true, c.Sender(), c.Ender());
  ASSERT_TRUE(c.WaitFor([&] { return c.got == "one\n"; }));
  Append("j-000001", "two\n");
  ASSERT_TRUE(c.WaitFor([&] { return c.got == "one\ntwo\n"; }));
  EXPECT_FALSE(c.done.has_value());
  Append("j-000001", "three\n");
  watch_.Publish(Job(v1::JOB_STATE_SUCCEEDED));
  ASSERT_TRUE(c.WaitFor([&] { return c.done.has_value(); }));
  EXPECT_TRUE(c.done->ok());
  EXPECT_EQ(c.got, "one\ntwo\nthree\n");
  EXPECT_EQ(watch_.watchers(), 0u);  // unsubscribed at the end
}

// One chunk in flight: nothing more is read until the client took it.
TEST_F(LogFollowTest, TheNextChunkWaitsForTheLastToBeSent) {
  std::string big(kLogChunkBytes + 10, 'x');
  Append("j-000001", big);
  Client c;
  c.hold = true;
  auto f = LogFollow::Start(logs_.get(), &watch_, &pump_, Job(v1::JOB_STATE_SUCCEEDED), 0, true, c.Sender(), c.Ender());
  ASSERT_TRUE(c.WaitFor([&] { return c.chunks == 1; }));
  Append("j-000001", "more");  // a wake while the chunk is out changes nothing
  // The pump has nothing queued: one more task runs after anything it had.
  std::promise<void> flushed;
  pump_.Post([&] { flushed.set_value(); });
  flushed.get_future().wait();
  {
    std::lock_guard lock(c.mu);
    EXPECT_EQ(c.chunks, 1);
    EXPECT_FALSE(c.done.has_value());
    c.hold = false;
  }
  c.held->Sent();
  ASSERT_TRUE(c.WaitFor([&] { return c.done.has_value(); }));
  EXPECT_EQ(c.got, big + "more");
}

// Without follow: what is there, then the end, though the job still runs.
TEST_F(LogFollowTest, WithoutFollowReadsWhatIsThere) {
  Append("j-000001", "so far");
  Client c;
  c.base = 3;
  auto f = LogFollow::Start(logs_.get(), &watch_, &pump_, Job(v1::JOB_STATE_RUNNING), 3, false, c.Sender(), c.Ender());
  ASSERT_TRUE(c.WaitFor([&] { return c.done.has_value(); }));
  EXPECT_EQ(c.got, "far");
}

// A new attempt's output is followed from its start; a late push of the
// old attempt or of a running state after the end changes nothing.
TEST_F(LogFollowTest, FollowsIntoANewAttemptAndNeverBack) {
  Append("j-000001", "first\n");
  Client c;
  auto f = LogFollow::Start(logs_.get(), &watch_, &pump_, Job(v1::JOB_STATE_RUNNING), 0, true, c.Sender(), c.Ender());
  ASSERT_TRUE(c.WaitFor([&] { return c.got == "first\n"; }));
  {
    std::lock_guard lock(c.mu);
    c.got.clear();  // offsets restart with the attempt
  }
  Append("j-000001@2", "second\n");
  watch_.Publish(Job(v1::JOB_STATE_RUNNING, 2));
  ASSERT_TRUE(c.WaitFor([&] { return c.got == "second\n"; }));
  f->Update(Job(v1::JOB_STATE_RUNNING, 1));  // late: ignored
  watch_.Publish(Job(v1::JOB_STATE_FAILED, 2));
  ASSERT_TRUE(c.WaitFor([&] { return c.done.has_value(); }));
  EXPECT_EQ(c.got, "second\n");
}

// A client that went away: no more callbacks, nothing subscribed.
TEST_F(LogFollowTest, CancelStopsEverything) {
  Client c;
  auto f = LogFollow::Start(logs_.get(), &watch_, &pump_, Job(v1::JOB_STATE_RUNNING), 0, true, c.Sender(), c.Ender());
  f->Cancel();
  EXPECT_EQ(watch_.watchers(), 0u);
  Append("j-000001", "late");
  watch_.Publish(Job(v1::JOB_STATE_SUCCEEDED));
  std::promise<void> flushed;
  pump_.Post([&] { flushed.set_value(); });
  flushed.get_future().wait();
  std::lock_guard lock(c.mu);
  EXPECT_EQ(c.chunks, 0);
  EXPECT_FALSE(c.done.has_value());
}

}  // namespace
}  // namespace drover::server
