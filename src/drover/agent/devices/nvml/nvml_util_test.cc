// The pure helpers of the nvml backend, without any library.

#include "drover/agent/devices/nvml/nvml_util.h"

#include <gtest/gtest.h>

#include <cstring>

namespace drover::agent::nvml {
namespace {

TEST(NvmlUtil, NormalizesPciBusIds) {
  EXPECT_EQ(NormalizePciBusId("00000000:3B:00.0").value(), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("0000:3B:00.0").value(), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("3b:00.0").value(), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("00000001:DB:1F.7").value(), "0001:db:1f.7");
  EXPECT_EQ(NormalizePciBusId("00010000:01:00.0").value(), "10000:01:00.0");
}

TEST(NvmlUtil, RejectsMalformedPciBusIds) {
  for (const char* bad : {"", "3b:00", "0000:3b:00.", "0000:3g:00.0", "0000:100:00.0", "0000:3b:20.0", "0000:3b:00.8",
                          "000000000:3b:00.0", "0000::00.0", "0000:3b:00.0 junk"}) {
    Result<std::string> normal = NormalizePciBusId(bad);
    ASSERT_FALSE(normal.ok()) << bad << " -> " << normal.value();
    EXPECT_EQ(normal.status().code(), Code::kInvalidArgument);
    EXPECT_NE(normal.status().message().find(bad), std::string::npos) << normal.status().message();
  }
}

TEST(NvmlUtil, ReadsBufferStrings) {
  char buffer[16] = "  H100 80GB \n";
  EXPECT_EQ(BufferString(buffer, sizeof(buffer)).value(), "H100 80GB");
  // No terminating NUL: stops at the end of the buffer, never past it.
  char full[4] = {'G', 'P', 'U', '-'};
  EXPECT_EQ(BufferString(full, sizeof(full)).value(), "GPU-");
  char empty[8] = {};
  EXPECT_FALSE(BufferString(empty, sizeof(empty)).ok());
  char control[8] =
      "ab\x01"
      "cd";
  EXPECT_FALSE(BufferString(control, sizeof(control)).ok());
}

TEST(NvmlUtil, NamesArchitectures) {
  EXPECT_EQ(ArchitectureFor(9, 0), "sm_90");
  EXPECT_EQ(ArchitectureFor(8, 6), "sm_86");
  EXPECT_EQ(ArchitectureFor(10, 0), "sm_100");
  EXPECT_EQ(ArchitectureFor(0, 0), "");
  EXPECT_EQ(ArchitectureFor(9, 12), "");
  EXPECT_EQ(ArchitectureFor(-1, 0), "");
}

TEST(NvmlUtil, MapsThrottleReasons) {
  EXPECT_EQ(ThrottleBits(0), 0u);
  EXPECT_EQ(ThrottleBits(0x1 | 0x2), 0u);                         // idle, application clocks: not slowdowns
  EXPECT_EQ(ThrottleBits(0x8), uint32_t{kThrottleThermal});       // HW slowdown
  EXPECT_EQ(ThrottleBits(0x20), uint32_t{kThrottleThermal});      // SW thermal
  EXPECT_EQ(ThrottleBits(0x40), uint32_t{kThrottleThermal});      // HW thermal
  EXPECT_EQ(ThrottleBits(0x4), uint32_t{kThrottlePower});         // SW power cap
  EXPECT_EQ(ThrottleBits(0x80), uint32_t{kThrottlePower});        // HW power brake
  EXPECT_EQ(ThrottleBits(0x10), uint32_t{kThrottleOther});        // sync boost
  EXPECT_EQ(ThrottleBits(0x100), uint32_t{kThrottleOther});       // display clock
  EXPECT_EQ(ThrottleBits(1ull << 40), uint32_t{kThrottleOther});  // a reason newer than this code
  EXPECT_EQ(ThrottleBits(0x1 | 0x4 | 0x40), uint32_t{kThrottleThermal | kThrottlePower});
}

TEST(NvmlUtil, KnowsTheR535ProcessStructQuirk) {
  EXPECT_TRUE(ProcessesV3LayoutIsBroken("535.54.03"));
  EXPECT_TRUE(ProcessesV3LayoutIsBroken("535.86.10"));
  EXPECT_FALSE(ProcessesV3LayoutIsBroken("535.98"));
  EXPECT_FALSE(ProcessesV3LayoutIsBroken("535.104.05"));
  EXPECT_FALSE(ProcessesV3LayoutIsBroken("530.30.02"));
  EXPECT_FALSE(ProcessesV3LayoutIsBroken("550.54.15"));
  EXPECT_FALSE(ProcessesV3LayoutIsBroken("garbage"));
}

TEST(NvmlUtil, BuildsNoLinksWithoutFabricOrTopology) {
  LinkFacts facts;
  facts.count = 2;
  EXPECT_TRUE(BuildLinks(facts).empty());
  facts.topology = {-1, 10, 10, -1};  // the diagonal is never asked
  EXPECT_EQ(BuildLinks(facts), (std::vector<DeviceLink>{DeviceLink::kFabric, DeviceLink::kPcieSwitch,
                                                        DeviceLink::kPcieSwitch, DeviceLink::kFabric}));
  facts.topology = {-1, 10, -1, -1};  // one direction unknown: unknown
  EXPECT_TRUE(BuildLinks(facts).empty());
  facts.count = 1;
  facts.topology = {};
  EXPECT_EQ(BuildLinks(facts), std::vector<DeviceLink>{DeviceLink::kFabric});
}

TEST(NvmlUtil, BuildsLinksFromFabricAndTopology) {
  LinkFacts facts;
  facts.count = 3;
  facts.nvlink_pairs = {{0, 1}, {1, 0}, {0, 7}};  // out-of-range pairs are ignored
  facts.topology = {-1, 50, 20, 50, -1, 40, 20, 40, -1};
  facts.numa_node = {0, 0, 1};
  using L = DeviceLink;
  EXPECT_EQ(BuildLinks(facts), (std::vector<L>{L::kFabric, L::kFabric, L::kPcieSwitch,  //
                                               L::kFabric, L::kFabric, L::kSameNuma,    //
                                               L::kPcieSwitch, L::kSameNuma, L::kFabric}));
  // Asymmetric answers: the farther one wins.
  facts.topology = {-1, 50, 10, 50, -1, 40, 50, 40, -1};
  EXPECT_EQ(BuildLinks(facts)[2], L::kCrossSocket);
  // Fabric but no topology: the NUMA nodes decide.
  facts.topology = {};
  facts.on_nvswitch = {false, false, false};
  EXPECT_EQ(BuildLinks(facts), (std::vector<L>{L::kFabric, L::kFabric, L::kCrossSocket,  //
                                               L::kFabric, L::kFabric, L::kCrossSocket,  //
                                               L::kCrossSocket, L::kCrossSocket, L::kFabric}));
  facts.numa_node = {0, 0, 0};
  EXPECT_EQ(BuildLinks(facts)[2], L::kSameNuma);
  // Every device on the NVSwitch fabric.
  facts.nvlink_pairs = {};
  facts.on_nvswitch = {true, true, true};
  EXPECT_EQ(BuildLinks(facts), std::vector<L>(9, L::kFabric));
}

}  // namespace
}  // namespace drover::agent::nvml
