#include "drover/server/log_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace drover::server {
namespace {

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "drover-log-store-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    auto logs = LogStore::Open(root_ + "/logs");
    ASSERT_TRUE(logs.ok()) << logs.status().ToString();
    logs_ = std::make_unique<LogStore>(std::move(logs).value());
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  std::string ReadAll(const std::string& job) {
    auto r = logs_->Read(job, 0, 1 << 20);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::string();
  }

  std::string root_;
  std::unique_ptr<LogStore> logs_;
};

TEST_F(LogStoreTest, OpenCreatesTheDirectory) {
  EXPECT_TRUE(std::filesystem::is_directory(root_ + "/logs"));
  auto nested = LogStore::Open(root_ + "/a/b/c");
  ASSERT_TRUE(nested.ok()) << nested.status().ToString();
  EXPECT_TRUE(std::filesystem::is_directory(root_ + "/a/b/c"));
}

TEST_F(LogStoreTest, OpenFailsWhenThePathIsAFile) {
  ASSERT_TRUE(logs_->Write("j-000001", 0, "x").ok());
  auto bad = LogStore::Open(root_ + "/logs/j-000001.log/sub");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kUnavailable);
}

TEST_F(LogStoreTest, WritesAtOffsetsAppendAndReadBack) {
  ASSERT_TRUE(logs_->Write("j-000001", 0, "hello ").ok());
  ASSERT_TRUE(logs_->Write("j-000001", 6, "world\n").ok());
  EXPECT_EQ(ReadAll("j-000001"), "hello world\n");
  EXPECT_TRUE(std::filesystem::exists(root_ + "/logs/j-000001.log"));
}

TEST_F(LogStoreTest, RewritingTheSameRangeIsIdempotent) {
  ASSERT_TRUE(logs_->Write("j-000002", 0, "abc").ok());
  ASSERT_TRUE(logs_->Write("j-000002", 3, "def").ok());
  // An agent that reconnects sends ranges again, whole or overlapping.
  ASSERT_TRUE(logs_->Write("j-000002", 3, "def").ok());
  ASSERT_TRUE(logs_->Write("j-000002", 0, "abcdef").ok());
  ASSERT_TRUE(logs_->Write("j-000002", 2, "cd").ok());
  EXPECT_EQ(ReadAll("j-000002"), "abcdef");
  ASSERT_TRUE(logs_->Write("j-000002", 6, "gh").ok());
  ASSERT_TRUE(logs_->Write("j-000002", 6, "gh").ok());
  EXPECT_EQ(ReadAll("j-000002"), "abcdefgh");
}

TEST_F(LogStoreTest, WriteOfNothingCreatesAnEmptyLog) {
  ASSERT_TRUE(logs_->Write("j-000003", 0, "").ok());
  EXPECT_EQ(ReadAll("j-000003"), "");
}

TEST_F(LogStoreTest, ReadsRanges) {
  ASSERT_TRUE(logs_->Write("j-000004", 0, "0123456789").ok());
  auto mid = logs_->Read("j-000004", 3, 4);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(*mid, "3456");
  auto tail = logs_->Read("j-000004", 8, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, "89");
  auto at_end = logs_->Read("j-000004", 10, 100);
  ASSERT_TRUE(at_end.ok());
  EXPECT_EQ(*at_end, "");
  auto past_end = logs_->Read("j-000004", 1000, 100);
  ASSERT_TRUE(past_end.ok());
  EXPECT_EQ(*past_end, "");
  auto none = logs_->Read("j-000004", 0, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
}

TEST_F(LogStoreTest, ReadingInChunksReassemblesTheLog) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>('a' + i % 26);
  ASSERT_TRUE(logs_->Write("j-000005", 0, data).ok());
  std::string got;
  for (int64_t off = 0;;) {
    auto chunk = logs_->Read("j-000005", off, 64);
    ASSERT_TRUE(chunk.ok());
    if (chunk->empty()) break;
    got += *chunk;
    off += static_cast<int64_t>(chunk->size());
  }
  EXPECT_EQ(got, data);
}

TEST_F(LogStoreTest, AWriteBeyondTheEndLeavesAHoleOfZeros) {
  ASSERT_TRUE(logs_->Write("j-000006", 4, "xy").ok());
  EXPECT_EQ(ReadAll("j-000006"), std::string("\0\0\0\0xy", 6));
}

TEST_F(LogStoreTest, BinaryDataRoundTrips) {
  std::string data("a\0b\xff\n", 5);
  ASSERT_TRUE(logs_->Write("j-000007", 0, data).ok());
  EXPECT_EQ(ReadAll("j-000007"), data);
}

TEST_F(LogStoreTest, EachReplicaAndAttemptHasALogOfItsOwn) {
  EXPECT_EQ(LogStore::LogId("j-000007", 1), "j-000007");
  EXPECT_EQ(LogStore::LogId("j-000007", 2, 0), "j-000007@2");
  EXPECT_EQ(LogStore::LogId("j-000007", 1, 3), "j-000007.3");
  EXPECT_EQ(LogStore::LogId("j-000007", 2, 3), "j-000007.3@2");
  int woken = 0;
  uint64_t watch = logs_->Watch("j-000007", [&] { ++woken; });
  ASSERT_TRUE(logs_->Write(LogStore::LogId("j-000007", 1), 0, "zero\n").ok());
  ASSERT_TRUE(logs_->Write(LogStore::LogId("j-000007", 1, 1), 0, "one\n").ok());
  ASSERT_TRUE(logs_->Write(LogStore::LogId("j-000007", 2, 1), 0, "one, again\n").ok());
  logs_->Unwatch(watch);
  EXPECT_EQ(woken, 3) << "a write to any replica's log wakes the job's followers";
  EXPECT_EQ(ReadAll("j-000007"), "zero\n");
  EXPECT_EQ(ReadAll("j-000007.1"), "one\n");
  EXPECT_EQ(ReadAll("j-000007.1@2"), "one, again\n");
  for (const char* bad : {"j-000007.0", "j-000007.", "j-000007.x", "j-000007.1.2", "j-000007.01@2", "../x.1"}) {
    EXPECT_EQ(logs_->Write(bad, 0, "x").code(), Code::kInvalidArgument) << bad;
  }
}

TEST_F(LogStoreTest, UnknownJobLogIsEmpty) {
  auto r = logs_->Read("j-000099", 0, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/logs/j-000099.log"));
}

TEST_F(LogStoreTest, MalformedJobIdIsInvalidArgument) {
  for (const char* bad : {"", "j-", "x-000001", "j-abc", "../etc/passwd", "j-000001/../../x", "j-000000"}) {
    SCOPED_TRACE(bad);
    Status w = logs_->Write(bad, 0, "x");
    EXPECT_EQ(w.code(), Code::kInvalidArgument);
    auto r = logs_->Read(bad, 0, 10);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  // Nothing escaped the log directory.
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/logs"));
}

TEST_F(LogStoreTest, NegativeOffsetIsAnError) {
  Status w = logs_->Write("j-000008", -1, "x");
  EXPECT_EQ(w.code(), Code::kInvalidArgument);
  EXPECT_NE(w.message().find("-1"), std::string::npos) << w.message();
  EXPECT_FALSE(std::filesystem::exists(root_ + "/logs/j-000008.log"));
  ASSERT_TRUE(logs_->Write("j-000008", 0, "x").ok());
  auto r = logs_->Read("j-000008", -5, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

TEST_F(LogStoreTest, BytesBeyondTheCapAreDropped) {
  // A write that starts at the cap is accepted and stores nothing.
  ASSERT_TRUE(logs_->Write("j-000009", kMaxJobLogBytes, "dropped").ok());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/logs/j-000009.log"));
  // A write that crosses the cap is cut at it (a sparse file: no real disk use).
  ASSERT_TRUE(logs_->Write("j-000009", kMaxJobLogBytes - 2, "abcd").ok());
  EXPECT_EQ(std::filesystem::file_size(root_ + "/logs/j-000009.log"), static_cast<uintmax_t>(kMaxJobLogBytes));
  auto r = logs_->Read("j-000009", kMaxJobLogBytes - 2, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "ab");
}

TEST_F(LogStoreTest, NegativeMaxBytesIsAnError) {
  ASSERT_TRUE(logs_->Write("j-000010", 0, "abc").ok());
  Result<std::string> r = InvalidArgument("not run");
  EXPECT_NO_THROW(r = logs_->Read("j-000010", 0, -1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace drover::server
