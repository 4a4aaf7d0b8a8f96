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
    EXPECT_THAT((std::set<std::string>{"nvidia", "amd", "intel", "opencl"}), ::testing::Contains(device.vendor));
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

namespace drover::agent {
namespace {

std::unique_ptr<DeviceBackend> SteppedSimulated(int count, double step = 1.0) {
  auto backend =
      MakeSimulatedBackend({.count = count, .model = "H100 80GB", .node_name = "gpu-01", .step_seconds = step});
  EXPECT_TRUE(backend.ok());
  EXPECT_TRUE((*backend)->Discover().ok());
  return std::move(*backend);
}

GpuSample SampleAfter(DeviceBackend* b, int device, int seconds) {
  GpuSample last;
  for (int i = 0; i < seconds; ++i) {
    auto s = b->Sample(device);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) last = *s;
  }
  return last;
}

TEST(SimulatedModelTest, IdleGpuStaysCoolAndReportsEveryField) {
  auto b = SteppedSimulated(2);
  GpuSample s = SampleAfter(b.get(), 0, 120);
  EXPECT_NEAR(s.utilization_pct, 0, 0.01);
  EXPECT_LT(s.temperature_c, 40);
  EXPECT_NEAR(s.power_w, 70, 0.5);
  EXPECT_EQ(s.power_limit_w, 700);
  EXPECT_EQ(s.memory_used_bytes, 0);
  EXPECT_EQ(s.memory_total_bytes, 80 * kGiB);
  EXPECT_EQ(s.throttle, 0u);
  EXPECT_EQ(s.ecc_uncorrected, 0);
}

TEST(SimulatedModelTest, LoadWarmsTheGpuWithThermalInertia) {
  auto b = SteppedSimulated(2);
  b->SetLoad(1, 1.0);
  GpuSample early = SampleAfter(b.get(), 1, 5);
  EXPECT_GT(early.utilization_pct, 90);  // utilization follows within a second or two
  EXPECT_GT(early.power_w, 600);
  EXPECT_LT(early.temperature_c, 60);  // the heat sink takes its time
  GpuSample later = SampleAfter(b.get(), 1, 200);
  EXPECT_GT(later.temperature_c, 80);
  EXPECT_LT(later.temperature_c, 87);  // below slowdown with working cooling
  EXPECT_EQ(later.throttle, 0u);
  EXPECT_GT(later.memory_used_bytes, 0);
  // The other GPU carries no work.
  EXPECT_NEAR(SampleAfter(b.get(), 0, 1).utilization_pct, 0, 0.01);
  // Load removed: it cools down again.
  b->SetLoad(1, 0);
  GpuSample cooled = SampleAfter(b.get(), 1, 200);
  EXPECT_LT(cooled.utilization_pct, 1);
  EXPECT_LT(cooled.temperature_c, 40);
}

TEST(SimulatedModelTest, BrokenCoolingThrottlesTheClock) {
  auto b = SteppedSimulated(1);
  b->SetLoad(0, 1.0);
  GpuSample before = SampleAfter(b.get(), 0, 30);
  ASSERT_TRUE(b->InjectFault(0, {Fault::Kind::kOverheat, 0}).ok());
  GpuSample hot = SampleAfter(b.get(), 0, 120);
  EXPECT_GE(hot.temperature_c, 87);
  EXPECT_EQ(hot.throttle, static_cast<uint32_t>(kThrottleThermal));
  EXPECT_LT(hot.sm_clock_mhz, before.sm_clock_mhz);
  EXPECT_LT(hot.power_w, before.power_w);
  ASSERT_TRUE(b->InjectFault(0, {Fault::Kind::kClear, 0}).ok());
  EXPECT_EQ(SampleAfter(b.get(), 0, 200).throttle, 0u);
}

TEST(SimulatedModelTest, InjectedFaultsRaiseHealthEvents) {
  auto b = SteppedSimulated(4);
  EXPECT_TRUE(b->TakeEvents().empty());
  ASSERT_TRUE(b->InjectFault(1, {Fault::Kind::kXid, 48}).ok());
  ASSERT_TRUE(b->InjectFault(2, {Fault::Kind::kEccUncorrected, 0}).ok());
  std::vector<HealthEvent> events = b->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kXid);
  EXPECT_EQ(events[0].code, 48);
  EXPECT_EQ(events[1].device, 2);
  EXPECT_EQ(events[1].kind, HealthEvent::Kind::kEccUncorrected);
  EXPECT_TRUE(b->TakeEvents().empty());  // drained
  EXPECT_EQ(SampleAfter(b.get(), 2, 1).ecc_uncorrected, 1);
}

TEST(SimulatedModelTest, LostDeviceCannotBeSampledUntilCleared) {
  auto b = SteppedSimulated(2);
  ASSERT_TRUE(b->InjectFault(0, {Fault::Kind::kLost, 0}).ok());
  auto s = b->Sample(0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kUnavailable);
  std::vector<HealthEvent> events = b->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_TRUE(b->Sample(1).ok());  // only that one
  ASSERT_TRUE(b->InjectFault(0, {Fault::Kind::kClear, 0}).ok());
  EXPECT_TRUE(b->Sample(0).ok());
  EXPECT_EQ(b->InjectFault(9, {Fault::Kind::kLost, 0}).code(), Code::kNotFound);
  EXPECT_EQ(b->Sample(-1).status().code(), Code::kNotFound);
}

TEST(SimulatedModelTest, OnlyModelledBackendsInjectFaults) {
  auto ocl = MakeOpenClBackend();
  Status s = ocl->InjectFault(0, {Fault::Kind::kXid, 79});
  EXPECT_EQ(s.code(), Code::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("opencl"));
}

TEST(FaultTest, ParsesEveryKindAndRejectsTheRest) {
  auto xid = ParseFault("xid:48");
  ASSERT_TRUE(xid.ok());
  EXPECT_EQ(xid->kind, Fault::Kind::kXid);
  EXPECT_EQ(xid->code, 48);
  EXPECT_EQ(ParseFault("xid")->code, 79);
  EXPECT_EQ(ParseFault("ecc")->kind, Fault::Kind::kEccUncorrected);
  EXPECT_EQ(ParseFault("lost")->kind, Fault::Kind::kLost);
  EXPECT_EQ(ParseFault("overheat")->kind, Fault::Kind::kOverheat);
  EXPECT_EQ(ParseFault("clear")->kind, Fault::Kind::kClear);
  for (const char* bad : {"", "xid:", "xid:0", "xid:1000", "xid:4x", "ecc:2", "melt", "XID"}) {
    auto f = ParseFault(bad);
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseFault("melt").status().message(), HasSubstr("'melt' is unknown"));
}

}  // namespace
}  // namespace drover::agent
