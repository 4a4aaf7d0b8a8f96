#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "drover/agent/devices/device_backend.h"
#include "drover/common/quantity.h"

namespace drover::agent {
namespace {

using ::testing::HasSubstr;

std::vector<GpuDevice> DiscoverSimulated(const SimulatedSpec& spec) {
  auto backend = MakeSimulatedBackend(spec);
  EXPECT_TRUE(backend.ok()) << backend.status().ToString();
  if (!backend.ok()) return {};
  EXPECT_TRUE((*backend)->IsAvailable());
  EXPECT_TRUE((*backend)->Initialize().ok());
  auto devices = (*backend)->Discover();
  EXPECT_TRUE(devices.ok()) << devices.status().ToString();
  return devices.ok() ? *devices : std::vector<GpuDevice>{};
}

TEST(SimulatedBackendTest, DiscoversCountDevicesOfTheModel) {
  auto backend = MakeSimulatedBackend({.count = 8, .model = "H100 80GB", .node_name = "gpu-01"});
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  EXPECT_EQ((*backend)->Name(), "simulated");
  auto devices = (*backend)->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 8u);
  std::set<std::string> uuids;
  for (size_t i = 0; i < devices->size(); ++i) {
    const GpuDevice& device = (*devices)[i];
    EXPECT_EQ(device.index, static_cast<int>(i));
    EXPECT_EQ(device.model, "H100 80GB");
    EXPECT_EQ(device.vendor, "nvidia");
    EXPECT_EQ(device.memory_bytes, 80 * kGiB);
    EXPECT_TRUE(device.healthy);
    EXPECT_EQ(device.backend, "simulated");
    EXPECT_TRUE(device.uuid.starts_with("sim-")) << device.uuid;
    uuids.insert(device.uuid);
  }
  EXPECT_EQ(uuids.size(), 8u) << "uuids must be distinct";
}

TEST(SimulatedBackendTest, VendorAndMemoryComeFromTheCatalog) {
  auto amd = DiscoverSimulated({.count = 1, .model = "MI300X", .node_name = "n"});
  ASSERT_EQ(amd.size(), 1u);
  EXPECT_EQ(amd[0].vendor, "amd");
  EXPECT_EQ(amd[0].memory_bytes, 192 * kGiB);
  auto intel = DiscoverSimulated({.count = 1, .model = "Max 1550", .node_name = "n"});
  ASSERT_EQ(intel.size(), 1u);
  EXPECT_EQ(intel[0].vendor, "intel");
  auto l4 = DiscoverSimulated({.count = 1, .model = "L4", .node_name = "n"});
  ASSERT_EQ(l4.size(), 1u);
  EXPECT_EQ(l4[0].memory_bytes, 24 * kGiB);
}

TEST(SimulatedBackendTest, CatalogHasTheExpectedModels) {
  std::set<std::string_view> names;
  for (const SimulatedModel& model : SimulatedModels()) {
    EXPECT_GT(model.memory_bytes, 0) << model.model;
    EXPECT_FALSE(VisibilityVariable(model.vendor).empty()) << model.model;
    EXPECT_TRUE(names.insert(model.model).second) << "duplicate " << model.model;
  }
  for (std::string_view expected :
       {"H100 80GB", "A100 80GB", "A100 40GB", "L4", "L40S", "MI300X", "MI250X", "Max 1550"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
}

TEST(SimulatedBackendTest, UuidsAreStableAcrossInstancesAndDifferAcrossNodes) {
  auto first = DiscoverSimulated({.count = 4, .model = "A100 40GB", .node_name = "gpu-07"});
  auto second = DiscoverSimulated({.count = 4, .model = "A100 40GB", .node_name = "gpu-07"});
  auto other = DiscoverSimulated({.count = 4, .model = "A100 40GB", .node_name = "gpu-08"});
  ASSERT_EQ(first.size(), 4u);
  ASSERT_EQ(second.size(), 4u);
  ASSERT_EQ(other.size(), 4u);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].uuid, second[i].uuid);
    EXPECT_NE(first[i].uuid, other[i].uuid);
  }
}

TEST(SimulatedBackendTest, ModelMatchIsCaseInsensitive) {
  auto devices = DiscoverSimulated({.count = 2, .model = "h100 80gb", .node_name = "n"});
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].model, "H100 80GB") << "devices report the catalog spelling";
  // Exact otherwise: no prefix or whitespace leniency.
  EXPECT_FALSE(MakeSimulatedBackend({.count = 1, .model = "H100", .node_name = "n"}).ok());
  EXPECT_FALSE(MakeSimulatedBackend({.count = 1, .model = " L4", .node_name = "n"}).ok());
}

TEST(SimulatedBackendTest, UnknownModelListsTheKnownOnes) {
  auto backend = MakeSimulatedBackend({.count = 1, .model = "Voodoo2", .node_name = "n"});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(backend.status().message(), HasSubstr("'Voodoo2'"));
  EXPECT_THAT(backend.status().message(), HasSubstr("H100 80GB"));
  EXPECT_THAT(backend.status().message(), HasSubstr("MI300X"));
}

TEST(SimulatedBackendTest, CountMustBeWithinZeroToSixtyFour) {
  for (int count : {-1, 65, 1000}) {
    auto backend = MakeSimulatedBackend({.count = count, .model = "L4", .node_name = "n"});
    ASSERT_FALSE(backend.ok()) << count;
    EXPECT_EQ(backend.status().code(), Code::kInvalidArgument);
    EXPECT_THAT(backend.status().message(), HasSubstr(std::to_string(count)));
  }
  EXPECT_TRUE(DiscoverSimulated({.count = 0, .model = "L4", .node_name = "n"}).empty());
  EXPECT_EQ(DiscoverSimulated({.count = 64, .model = "L4", .node_name = "n"}).size(), 64u);
}

TEST(VisibilityVariableTest, NamesTheVendorVariable) {
  EXPECT_EQ(VisibilityVariable("nvidia"), "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(VisibilityVariable("amd"), "ROCR_VISIBLE_DEVICES");
  EXPECT_EQ(VisibilityVariable("intel"), "ZE_AFFINITY_MASK");
  EXPECT_EQ(VisibilityVariable("opencl"), "");
  EXPECT_EQ(VisibilityVariable(""), "");
}

// Runs against whatever OpenCL platform the machine has (PoCL's CPU device on
// the dev and CI images); skips where no ICD loader is installed.
TEST(OpenClBackendTest, DiscoversTheMachinesDevices) {
  auto backend = MakeOpenClBackend();
  EXPECT_EQ(backend->Name(), "opencl");
  if (!backend->IsAvailable()) {
    GTEST_SKIP() << "libOpenCL.so.1 is not installed (apt install ocl-icd-libopencl1 pocl-opencl-icd)";
  }
  ASSERT_TRUE(backend->Initialize().ok());
  auto devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  if (devices->empty()) {
    GTEST_SKIP() << "the OpenCL loader is installed but no platform has a device";
  }
  std::set<std::string> uuids;
  for (size_t i = 0; i < devices->size(); ++i) {
    const GpuDevice& device = (*devices)[i];
    EXPECT_EQ(device.index, static_cast<int>(i));
    EXPECT_FALSE(device.model.empty());
    EXPECT_NE(device.model.back(), ' ') << "model names are trimmed: '" << device.model << "'";
    EXPECT_GT(device.memory_bytes, 0);
    EXPECT_EQ(device.backend, "opencl");
    EXPECT_TRUE(device.uuid.starts_with("ocl-")) << device.uuid;
    EXPECT_TRUE(uuids.insert(device.uuid).second) << "duplicate uuid " << device.uuid;
    EXPECT_THAT((std::set<std::string>{"nvidia", "amd", "intel", "opencl"}),
                ::testing::Contains(device.vendor));
  }

  // A second instance (an agent restart) sees the same identities.
  auto again = MakeOpenClBackend()->Discover();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->size(), devices->size());
  for (size_t i = 0; i < devices->size(); ++i) {
    EXPECT_EQ((*again)[i].uuid, (*devices)[i].uuid);
  }
}

TEST(SimulatedBackendTest, ReportsARealisticTopologyPerModel) {
  // HGX H100: one NVSwitch island, GPUs 0-3 on NUMA node 0 and 4-7 on 1.
  auto hgx = MakeSimulatedBackend({.count = 8, .model = "H100 80GB", .node_name = "n"});
  ASSERT_TRUE(hgx.ok());
  auto devices = (*hgx)->Discover();
  ASSERT_TRUE(devices.ok());
  for (const GpuDevice& d : *devices) EXPECT_EQ(d.numa_node, d.index < 4 ? 0 : 1) << d.index;
  std::vector<DeviceLink> links = (*hgx)->Links();
  ASSERT_EQ(links.size(), 64u);
  for (DeviceLink l : links) EXPECT_EQ(l, DeviceLink::kFabric);

  // PCIe L4 cards: pairs behind one switch, no fabric.
  auto pcie = MakeSimulatedBackend({.count = 4, .model = "L4", .node_name = "n"});
  ASSERT_TRUE(pcie.ok());
  ASSERT_TRUE((*pcie)->Discover().ok());
  links = (*pcie)->Links();
  ASSERT_EQ(links.size(), 16u);
  EXPECT_EQ(links[0 * 4 + 1], DeviceLink::kPcieSwitch);
  EXPECT_EQ(links[2 * 4 + 3], DeviceLink::kPcieSwitch);
  EXPECT_EQ(links[0 * 4 + 2], DeviceLink::kCrossSocket);
  EXPECT_EQ(links[1 * 4 + 3], DeviceLink::kCrossSocket);

  // MI300X: every GPU on xGMI.
  auto amd = MakeSimulatedBackend({.count = 8, .model = "MI300X", .node_name = "n"});
  ASSERT_TRUE(amd.ok());
  ASSERT_TRUE((*amd)->Discover().ok());
  for (DeviceLink l : (*amd)->Links()) EXPECT_EQ(l, DeviceLink::kFabric);
}

}  // namespace
}  // namespace drover::agent
