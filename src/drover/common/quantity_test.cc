#include "drover/common/quantity.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

TEST(ParseBytesTest, Units) {
  EXPECT_EQ(ParseBytes("10GiB").value(), 10 * kGiB);
  EXPECT_EQ(ParseBytes("10Gi").value(), 10 * kGiB);
  EXPECT_EQ(ParseBytes("80GB").value(), 80'000'000'000);
  EXPECT_EQ(ParseBytes("1.5KiB").value(), 1536);
  EXPECT_EQ(ParseBytes("4096").value(), 4096);
  EXPECT_EQ(ParseBytes("512MiB").value(), 512 * kMiB);
  EXPECT_EQ(ParseBytes(" 2TiB ").value(), 2 * kTiB);
  EXPECT_EQ(ParseBytes("0").value(), 0);
}

TEST(ParseBytesTest, Rejects) {
  for (const char* bad : {"", "-1GiB", "GiB", "10XB", "1.2.3G", "1.5B", "2048TiB", ".5G", "5.", "ten"}) {
    auto r = ParseBytes(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseBytes("10XB").status().message().find("unknown unit 'XB'"), std::string::npos);
}

TEST(FormatBytesTest, HumanUnits) {
  EXPECT_EQ(FormatBytes(0), "0B");
  EXPECT_EQ(FormatBytes(80 * kGiB), "80GiB");
  EXPECT_EQ(FormatBytes(1536), "1.5KiB");
  EXPECT_EQ(ParseBytes(FormatBytes(192 * kGiB)).value(), 192 * kGiB);
}

TEST(MilliGpuTest, ParseAndFormat) {
  EXPECT_EQ(ParseMilliGpu("2").value(), 2000);
  EXPECT_EQ(ParseMilliGpu("0.25").value(), 250);
  EXPECT_EQ(ParseMilliGpu("500m").value(), 500);
  EXPECT_FALSE(ParseMilliGpu("-1").ok());
  EXPECT_FALSE(ParseMilliGpu("0.0001").ok());
  EXPECT_FALSE(ParseMilliGpu("1x").ok());
  EXPECT_EQ(FormatMilliGpu(3000), "3");
  EXPECT_EQ(FormatMilliGpu(250), "250m");
}

}  // namespace
}  // namespace drover
