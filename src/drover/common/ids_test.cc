#include "drover/common/ids.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

TEST(JobIdTest, FormatAndParse) {
  EXPECT_EQ(FormatJobId(42), "j-000042");
  EXPECT_EQ(FormatJobId(1234567), "j-1234567");
  EXPECT_EQ(ParseJobId("j-000042").value(), 42u);
  EXPECT_EQ(ParseJobId("j-1234567").value(), 1234567u);
  for (const char* bad : {"", "j-", "42", "j-00x1", "J-000001", "j-000000", "j--1"}) {
    EXPECT_EQ(ParseJobId(bad).status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(JobIdTest, ArrayIdsAreTheirOwnKind) {
  EXPECT_EQ(FormatArrayId(42), "a-000042");
  EXPECT_EQ(ParseArrayId("a-000042").value(), 42u);
  // A job id is not an array id, nor the other way round.
  EXPECT_EQ(ParseArrayId("j-000042").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseJobId("a-000042").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ParseArrayId("a-000000").status().code(), Code::kInvalidArgument);
}

TEST(NameTest, DnsLabelRules) {
  EXPECT_TRUE(ValidateNodeName("gpu-07").ok());
  EXPECT_TRUE(ValidateNodeName("node1.rack2").ok());
  EXPECT_FALSE(ValidateNodeName("").ok());
  EXPECT_FALSE(ValidateNodeName("GPU").ok());
  EXPECT_FALSE(ValidateNodeName("-a").ok());
  EXPECT_FALSE(ValidateNodeName("a_b").ok());
  EXPECT_FALSE(ValidateNodeName(std::string(64, 'a')).ok());
}

}  // namespace
}  // namespace drover
