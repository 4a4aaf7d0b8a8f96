#include "drover/common/status.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  DROVER_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = NotFound("job 'j-000001' not found");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.ToString(), "not found: job 'j-000001' not found");
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(Quarter(8).value(), 2);
  EXPECT_EQ(Quarter(6).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Quarter(4).status().ok());
}

TEST(StatusTest, IgnoreErrorDropsOnPurpose) {
  // Compiles without a [[nodiscard]] warning, and does nothing.
  NotFound("job 'j-1' not found").IgnoreError("a test: nothing to handle");
  Result<int>(Internal("broken")).IgnoreError("a test: nothing to handle");
  Result<int>(7).IgnoreError("a test: nothing to handle");
}

TEST(StatusTest, HttpMapping) {
  EXPECT_EQ(HttpStatusFor(Code::kOk), 200);
  EXPECT_EQ(HttpStatusFor(Code::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(Code::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(Code::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFor(Code::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(Code::kInternal), 500);
}

}  // namespace
}  // namespace drover
