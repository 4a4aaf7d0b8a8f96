// The nvml backend against fake_nvml.cc, a stand-in libnvidia-ml built in
// three variants (current, legacy, missing a required symbol). Each test
// scripts the stand-in through its fake_nvml_* functions, reached with dlsym
// on the very library the backend opens.

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/nvml/fake_nvml.h"

namespace drover::agent {
namespace {

constexpr int kNotSupported = 3;
constexpr int kDriverNotLoaded = 9;
constexpr int kGpuIsLost = 15;
constexpr unsigned long long kXidEvent = 0x8;
constexpr unsigned long long kDoubleBitEvent = 0x2;
constexpr long long kGiB = 1ll << 30;

// The script interface of one stand-in library, bound with dlsym.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : path_(path), handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {}
  ~FakeNvml() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  bool ok() const { return handle_ != nullptr && reset != nullptr; }
  const char* path() const { return path_; }
  std::unique_ptr<DeviceBackend> Backend() const { return MakeNvmlBackend({{path_}}); }

#define DROVER_FAKE_NVML_FN(name) \
  decltype(&::fake_nvml_##name) name = Bind<decltype(::fake_nvml_##name)>("fake_nvml_" #name)
  template <typename Fn>
  Fn* Bind(const char* symbol) {
    return handle_ == nullptr ? nullptr : reinterpret_cast<Fn*>(dlsym(handle_, symbol));
  }

 private:
  const char* path_;
  void* handle_;

 public:
  DROVER_FAKE_NVML_FN(reset);
  DROVER_FAKE_NVML_FN(set_device_count);
  DROVER_FAKE_NVML_FN(set_string);
  DROVER_FAKE_NVML_FN(set_value);
  DROVER_FAKE_NVML_FN(fail);
  DROVER_FAKE_NVML_FN(set_nvlink);
  DROVER_FAKE_NVML_FN(set_topology);
  DROVER_FAKE_NVML_FN(add_process);
  DROVER_FAKE_NVML_FN(add_mig);
  DROVER_FAKE_NVML_FN(push_event);
  DROVER_FAKE_NVML_FN(init_count);
  DROVER_FAKE_NVML_FN(calls);
  DROVER_FAKE_NVML_FN(event_sets);
  DROVER_FAKE_NVML_FN(registered_events);
  DROVER_FAKE_NVML_FN(last_wait_timeout);
#undef DROVER_FAKE_NVML_FN
};

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << "cannot load " << FAKE_NVML_PATH << ": " << dlerror();
    fake_.reset();
  }

  // A backend over the stand-in's devices as scripted so far, discovered.
  std::unique_ptr<DeviceBackend> Discovered() {
    auto backend = fake_.Backend();
    Result<std::vector<GpuDevice>> devices = backend->Discover();
    EXPECT_TRUE(devices.ok()) << devices.status().ToString();
    return backend;
  }

  FakeNvml fake_{FAKE_NVML_PATH};
};

TEST_F(NvmlTest, BindsToTheFirstLibraryThatLoads) {
  auto missing = MakeNvmlBackend({{"/nonexistent/libnvidia-ml.so.1"}});
  EXPECT_EQ(missing->Name(), "nvml");
  EXPECT_FALSE(missing->IsAvailable());
  Status status = missing->Initialize();
  EXPECT_EQ(status.code(), Code::kUnavailable);
  EXPECT_NE(status.message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << status.message();

  auto backend = MakeNvmlBackend({{"/nonexistent/libnvidia-ml.so.1", FAKE_NVML_PATH}});
  EXPECT_TRUE(backend->IsAvailable());
  EXPECT_EQ(fake_.init_count(), 0);  // IsAvailable only loads
  ASSERT_TRUE(backend->Initialize().ok());
  EXPECT_EQ(fake_.init_count(), 1);
  EXPECT_EQ(fake_.calls("nvmlInit_v2"), 1);
  EXPECT_EQ(fake_.calls("nvmlInit"), 0);
  ASSERT_TRUE(backend->Initialize().ok());
  EXPECT_EQ(fake_.init_count(), 1);  // once per backend
  backend.reset();
  EXPECT_EQ(fake_.init_count(), 0);  // the destructor shuts NVML down
}

TEST_F(NvmlTest, DiscoversEveryField) {
  fake_.set_device_count(2);
  fake_.set_string(1, "name", "NVIDIA A100-SXM4-40GB");
  fake_.set_string(1, "uuid", "GPU-8c3e1a2b-0000-1111-2222-333344445555");
  fake_.set_string(1, "pci", "00000000:3B:00.0");
  fake_.set_value(1, "memory_total", 40 * kGiB);
  fake_.set_value(1, "cc_major", 8);
  fake_.set_value(1, "numa", 1);
  auto backend = fake_.Backend();
  Result<std::vector<GpuDevice>> devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  const GpuDevice& first = (*devices)[0];
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(first.uuid, "GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_EQ(first.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(first.vendor, "nvidia");
  EXPECT_EQ(first.backend, "nvml");
  EXPECT_EQ(first.memory_bytes, 80 * kGiB);
  EXPECT_EQ(first.pci_bus_id, "0000:10:00.0");
  EXPECT_EQ(first.architecture, "sm_90");
  EXPECT_EQ(first.driver_version, "550.54.15");
  EXPECT_EQ(first.numa_node, 0);
  EXPECT_TRUE(first.healthy);
  EXPECT_FALSE(first.mig_enabled);
  const GpuDevice& second = (*devices)[1];
  EXPECT_EQ(second.index, 1);
  EXPECT_EQ(second.model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(second.uuid, "GPU-8c3e1a2b-0000-1111-2222-333344445555");
  EXPECT_EQ(second.pci_bus_id, "0000:3b:00.0");  // NVML's 8-digit upper-case form, normalised
  EXPECT_EQ(second.memory_bytes, 40 * kGiB);
  EXPECT_EQ(second.architecture, "sm_80");
  EXPECT_EQ(second.numa_node, 1);
  // The current entry points, not the old ones.
  EXPECT_EQ(fake_.calls("nvmlDeviceGetCount_v2"), 1);
  EXPECT_EQ(fake_.calls("nvmlDeviceGetHandleByIndex_v2"), 2);
  EXPECT_EQ(fake_.calls("nvmlDeviceGetPciInfo_v3"), 2);
  EXPECT_EQ(fake_.calls("nvmlDeviceGetPciInfo"), 0);
}

TEST_F(NvmlTest, DiscoversMigInstances) {
  fake_.set_device_count(2);
  fake_.set_value(0, "mig_mode", 1);
  fake_.add_mig(0, "MIG-11111111-2222-3333-4444-555555555555", 10 * kGiB, 1, 0);
  fake_.add_mig(0, "MIG-66666666-7777-8888-9999-000000000000", 20 * kGiB, 2, 0);
  auto backend = fake_.Backend();
  Result<std::vector<GpuDevice>> devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  const GpuDevice& gpu = (*devices)[0];
  EXPECT_TRUE(gpu.mig_enabled);
  ASSERT_EQ(gpu.mig_instances.size(), 2u);
  EXPECT_EQ(gpu.mig_instances[0].uuid, "MIG-11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(gpu.mig_instances[0].memory_bytes, 10 * kGiB);
  EXPECT_EQ(gpu.mig_instances[0].gpu_instance_id, 1);
  EXPECT_EQ(gpu.mig_instances[0].compute_instance_id, 0);
  EXPECT_EQ(gpu.mig_instances[1].gpu_instance_id, 2);
  EXPECT_FALSE((*devices)[1].mig_enabled);
  EXPECT_TRUE((*devices)[1].mig_instances.empty());
}

TEST_F(NvmlTest, ReportsInitFailureClearly) {
  fake_.set_device_count(1);
  fake_.fail("nvmlInit_v2", -1, kDriverNotLoaded);
  auto backend = fake_.Backend();
  EXPECT_TRUE(backend->IsAvailable());
  Status status = backend->Initialize();
  EXPECT_EQ(status.code(), Code::kUnavailable);
  EXPECT_NE(status.message().find("nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED (9)"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("kernel driver is not loaded"), std::string::npos) << status.message();
  EXPECT_EQ(backend->Discover().status().code(), Code::kUnavailable);
  backend.reset();
  EXPECT_EQ(fake_.calls("nvmlShutdown"), 0);  // never initialized, never shut down
}

TEST_F(NvmlTest, RejectsAbsurdValues) {
  fake_.set_device_count(100000);
  Result<std::vector<GpuDevice>> devices = fake_.Backend()->Discover();
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_NE(devices.status().message().find("100000 devices"), std::string::npos) << devices.status().message();

  fake_.set_device_count(2);
  fake_.set_value(1, "memory_total", 0);
  devices = fake_.Backend()->Discover();
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_NE(devices.status().message().find("nvml device 1 ('NVIDIA H100 80GB HBM3') reported 0 bytes"),
            std::string::npos)
      << devices.status().message();

  fake_.set_device_count(1);
  fake_.set_string(0, "uuid", "");
  EXPECT_EQ(fake_.Backend()->Discover().status().code(), Code::kInternal);

  fake_.set_device_count(1);
  fake_.set_string(0, "pci", "00000000:3B:99.0");
  devices = fake_.Backend()->Discover();
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_NE(devices.status().message().find("00000000:3B:99.0"), std::string::npos) << devices.status().message();
}

TEST_F(NvmlTest, MapsCallErrorsToStatus) {
  fake_.set_device_count(2);
  fake_.fail("nvmlDeviceGetCount_v2", -1, 999);
  Result<std::vector<GpuDevice>> devices = fake_.Backend()->Discover();
  EXPECT_EQ(devices.status().code(), Code::kUnavailable);
  EXPECT_NE(devices.status().message().find("nvmlDeviceGetCount_v2: NVML_ERROR_UNKNOWN (999)"), std::string::npos)
      << devices.status().message();

  fake_.reset();
  fake_.set_device_count(2);
  fake_.fail("nvmlDeviceGetHandleByIndex_v2", 1, kGpuIsLost);
  auto backend = fake_.Backend();
  devices = backend->Discover();
  EXPECT_EQ(devices.status().code(), Code::kUnavailable);
  EXPECT_NE(devices.status().message().find("nvmlDeviceGetHandleByIndex_v2 on device 1: NVML_ERROR_GPU_IS_LOST (15)"),
            std::string::npos)
      << devices.status().message();
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_EQ(events[0].device, 1);
}

TEST_F(NvmlTest, SamplesTelemetry) {
  fake_.set_device_count(2);
  fake_.set_value(1, "util_gpu", 87);
  fake_.set_value(1, "util_memory", 40);
  fake_.set_value(1, "memory_used", 30 * kGiB);
  fake_.set_value(1, "temperature", 61);
  fake_.set_value(1, "power_mw", 512345);
  fake_.set_value(1, "throttle", 0x1 | 0x4 | 0x40);  // idle, SW power cap, HW thermal
  fake_.set_value(1, "ecc_corrected", 3);
  fake_.add_process(1, 4242, 20 * kGiB);
  fake_.add_process(1, 4343, 10 * kGiB);
  auto backend = Discovered();
  Result<GpuSample> sample = backend->Sample(1);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_DOUBLE_EQ(sample->utilization_pct, 87);
  EXPECT_DOUBLE_EQ(sample->memory_utilization_pct, 40);
  EXPECT_EQ(sample->memory_used_bytes, 30 * kGiB);
  EXPECT_EQ(sample->memory_total_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(sample->temperature_c, 61);
  EXPECT_DOUBLE_EQ(sample->power_w, 512.345);
  EXPECT_DOUBLE_EQ(sample->power_limit_w, 700);
  EXPECT_EQ(sample->sm_clock_mhz, 1980);
  EXPECT_EQ(sample->memory_clock_mhz, 2619);
  EXPECT_EQ(sample->throttle, uint32_t{kThrottleThermal | kThrottlePower});
  EXPECT_EQ(sample->ecc_corrected, 3);
  EXPECT_EQ(sample->ecc_uncorrected, 0);
  ASSERT_TRUE(sample->processes_known);
  ASSERT_EQ(sample->processes.size(), 2u);
  EXPECT_EQ(sample->processes[0].pid, 4242);
  EXPECT_EQ(sample->processes[0].memory_bytes, 20 * kGiB);
  EXPECT_EQ(sample->processes[1].pid, 4343);
  EXPECT_EQ(fake_.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
  // Device 0 stayed idle.
  Result<GpuSample> idle = backend->Sample(0);
  ASSERT_TRUE(idle.ok());
  EXPECT_DOUBLE_EQ(idle->utilization_pct, 0);
  EXPECT_TRUE(idle->processes_known);
  EXPECT_TRUE(idle->processes.empty());
}

TEST_F(NvmlTest, ReadsLongProcessListsAndUnknownMemory) {
  fake_.set_device_count(1);
  for (unsigned int pid = 100; pid < 140; ++pid) fake_.add_process(0, pid, 1 * kGiB);
  fake_.add_process(0, 999, ~0ull);  // NVML_VALUE_NOT_AVAILABLE
  auto backend = Discovered();
  Result<GpuSample> sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  ASSERT_EQ(sample->processes.size(), 41u);
  EXPECT_EQ(sample->processes[39].pid, 139);
  EXPECT_EQ(sample->processes[40].memory_bytes, -1);
}

TEST_F(NvmlTest, NotSupportedLeavesFieldsUnknown) {
  fake_.set_device_count(1);
  for (const char* call : {"nvmlDeviceGetTemperature", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEccErrors",
                           "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses_v3",
                           "nvmlDeviceGetCurrentClocksThrottleReasons"}) {
    fake_.fail(call, -1, kNotSupported);
  }
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  Result<GpuSample> sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_FALSE(Known(sample->temperature_c));
  EXPECT_FALSE(Known(sample->power_limit_w));
  EXPECT_FALSE(Known(sample->utilization_pct));
  EXPECT_EQ(sample->ecc_corrected, -1);
  EXPECT_EQ(sample->ecc_uncorrected, -1);
  EXPECT_FALSE(sample->processes_known);
  EXPECT_EQ(sample->throttle, 0u);
  EXPECT_DOUBLE_EQ(sample->power_w, 70);  // what is supported is still read
  EXPECT_EQ(sample->memory_total_bytes, 80 * kGiB);
}

TEST_F(NvmlTest, DropsAbsurdSampleValues) {
  fake_.set_device_count(1);
  fake_.set_value(0, "util_gpu", 150);
  fake_.set_value(0, "temperature", 5000);
  fake_.set_value(0, "memory_used", 81 * kGiB);  // more than the total
  fake_.set_value(0, "power_mw", 4'000'000'000);
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  Result<GpuSample> sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_FALSE(Known(sample->utilization_pct));
  EXPECT_FALSE(Known(sample->temperature_c));
  EXPECT_FALSE(Known(sample->power_w));
  EXPECT_EQ(sample->memory_used_bytes, -1);
  EXPECT_EQ(sample->memory_total_bytes, -1);
  EXPECT_EQ(sample->sm_clock_mhz, 1980);
}

TEST_F(NvmlTest, LostGpuFailsSampleAndRaisesOneEvent) {
  fake_.set_device_count(2);
  auto backend = Discovered();
  fake_.fail("nvmlDeviceGetPowerUsage", 1, kGpuIsLost);
  Result<GpuSample> sample = backend->Sample(1);
  EXPECT_EQ(sample.status().code(), Code::kUnavailable);
  EXPECT_NE(sample.status().message().find("nvmlDeviceGetPowerUsage on device 1: NVML_ERROR_GPU_IS_LOST (15)"),
            std::string::npos)
      << sample.status().message();
  EXPECT_TRUE(backend->Sample(0).ok());
  EXPECT_EQ(backend->Sample(1).status().code(), Code::kUnavailable);
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);  // once per loss, not once per sample
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].code, kGpuIsLost);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(NvmlTest, UnknownIndexIsNotFound) {
  auto backend = fake_.Backend();
  EXPECT_EQ(backend->Sample(0).status().code(), Code::kNotFound);  // before Discover
  ASSERT_TRUE(backend->Discover().ok());                           // no devices
  fake_.set_device_count(2);
  backend = Discovered();
  EXPECT_EQ(backend->Sample(-1).status().code(), Code::kNotFound);
  EXPECT_EQ(backend->Sample(2).status().code(), Code::kNotFound);
  EXPECT_TRUE(backend->Sample(1).ok());
}

TEST_F(NvmlTest, NvLinkPairsFormAFabric) {
  fake_.set_device_count(4);
  fake_.set_nvlink(0, 0, 1);
  fake_.set_nvlink(1, 0, 0);
  fake_.set_nvlink(2, 5, 3);  // any link number up to NVML_NVLINK_MAX_LINKS
  fake_.set_nvlink(3, 17, 2);
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) fake_.set_topology(a, b, (a < 2) == (b < 2) ? 10 : 50);
  }
  fake_.set_topology(1, 2, 40);
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  using L = DeviceLink;
  EXPECT_EQ(backend->Links(), (std::vector<L>{L::kFabric, L::kFabric, L::kCrossSocket, L::kCrossSocket,  //
                                              L::kFabric, L::kFabric, L::kSameNuma, L::kCrossSocket,     //
                                              L::kCrossSocket, L::kSameNuma, L::kFabric, L::kFabric,     //
                                              L::kCrossSocket, L::kCrossSocket, L::kFabric, L::kFabric}));
}

// Row remapping (Ampere and later) and NVLink errors summed over the
// active links: what the alert rules read as DCGM_FI_DEV_ROW_REMAP_FAILURE
// and DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL.
TEST_F(NvmlTest, SamplesRowRemappingAndNvLinkErrors) {
  fake_.set_device_count(3);
  fake_.set_nvlink(0, 0, 1);
  fake_.set_nvlink(0, 3, 1);
  fake_.set_nvlink(1, 0, 0);
  fake_.set_value(0, "row_remap_failure", 1);
  fake_.set_value(0, "nvlink_crc", 5);
  fake_.set_value(0, "nvlink_replay", 2);
  fake_.set_value(0, "nvlink_recovery", 1);
  fake_.set_value(2, "row_remap_failure", -1);  // a GPU before Ampere
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  Result<GpuSample> s0 = backend->Sample(0);
  ASSERT_TRUE(s0.ok()) << s0.status().ToString();
  EXPECT_EQ(s0->row_remap_failure, 1);
  EXPECT_EQ(s0->nvlink_crc_errors, 10);  // two links
  EXPECT_EQ(s0->nvlink_replay_errors, 4);
  EXPECT_EQ(s0->nvlink_recovery_errors, 2);
  Result<GpuSample> s1 = backend->Sample(1);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->row_remap_failure, 0);
  EXPECT_EQ(s1->nvlink_crc_errors, 0);
  // No active link, no remapper: unknown, not zero.
  Result<GpuSample> s2 = backend->Sample(2);
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->row_remap_failure, -1);
  EXPECT_EQ(s2->nvlink_crc_errors, -1);
}

TEST_F(NvmlTest, NvSwitchJoinsEveryLinkedGpu) {
  fake_.set_device_count(4);
  for (int d = 0; d < 3; ++d) {
    for (unsigned int link = 0; link < 18; ++link) fake_.set_nvlink(d, link, -1);
  }
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  std::vector<DeviceLink> links = backend->Links();
  ASSERT_EQ(links.size(), 16u);
  EXPECT_EQ(links[0 * 4 + 2], DeviceLink::kFabric);
  EXPECT_EQ(links[1 * 4 + 2], DeviceLink::kFabric);
  // GPU 3 has no NVLink and no topology is known: the NUMA nodes decide
  // (the default devices are all on node 0).
  EXPECT_EQ(links[0 * 4 + 3], DeviceLink::kSameNuma);
  EXPECT_EQ(links[3 * 4 + 3], DeviceLink::kFabric);
}

TEST_F(NvmlTest, CommonAncestorGivesLinksWithoutNvLink) {
  fake_.set_device_count(3);
  fake_.set_topology(0, 1, 10);  // NVML_TOPOLOGY_SINGLE
  fake_.set_topology(0, 2, 30);  // NVML_TOPOLOGY_HOSTBRIDGE
  fake_.set_topology(1, 2, 50);  // NVML_TOPOLOGY_SYSTEM
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  using L = DeviceLink;
  EXPECT_EQ(backend->Links(), (std::vector<L>{L::kFabric, L::kPcieSwitch, L::kSameNuma,     //
                                              L::kPcieSwitch, L::kFabric, L::kCrossSocket,  //
                                              L::kSameNuma, L::kCrossSocket, L::kFabric}));
}

TEST_F(NvmlTest, NoLinksWhenNvmlKnowsNothing) {
  fake_.set_device_count(3);
  auto backend = Discovered();
  EXPECT_TRUE(backend->Links().empty());
}

TEST_F(NvmlTest, DrainsXidAndEccEvents) {
  fake_.set_device_count(2);
  auto backend = Discovered();
  EXPECT_EQ(fake_.registered_events(0), kXidEvent | kDoubleBitEvent);
  EXPECT_TRUE(backend->TakeEvents().empty());
  fake_.push_event(1, kXidEvent, 79);
  fake_.push_event(0, kDoubleBitEvent, 0);
  fake_.push_event(0, 0x4, 0);  // a P-state change nobody registered: dropped
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kXid);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].code, 79);
  EXPECT_NE(events[0].message.find("xid 79"), std::string::npos) << events[0].message;
  EXPECT_EQ(events[1].kind, HealthEvent::Kind::kEccUncorrected);
  EXPECT_EQ(events[1].device, 0);
  EXPECT_EQ(fake_.last_wait_timeout(), 0);  // never blocks
  EXPECT_EQ(fake_.calls("nvmlEventSetWait_v2"), 4);
  EXPECT_EQ(fake_.calls("nvmlEventSetWait"), 0);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(NvmlTest, RegistersWhatEachDeviceSupports) {
  fake_.set_device_count(2);
  fake_.set_value(0, "supported_events", 0x8);  // no ECC (a GeForce)
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  EXPECT_EQ(fake_.registered_events(0), kXidEvent);
  EXPECT_EQ(fake_.registered_events(1), kXidEvent | kDoubleBitEvent);
  // Without ECC events, a rise of the double-bit count between samples is
  // reported; with them, the event set already tells.
  ASSERT_TRUE(backend->Sample(0).ok());
  ASSERT_TRUE(backend->Sample(1).ok());
  fake_.set_value(0, "ecc_uncorrected", 2);
  fake_.set_value(1, "ecc_uncorrected", 2);
  ASSERT_TRUE(backend->Sample(0).ok());
  ASSERT_TRUE(backend->Sample(1).ok());
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kEccUncorrected);
  EXPECT_EQ(events[0].device, 0);
  EXPECT_EQ(events[0].code, 2);
}

TEST_F(NvmlTest, EventSetIsFreedAndNotLeakedByRediscovery) {
  fake_.set_device_count(2);
  auto backend = Discovered();
  EXPECT_EQ(fake_.event_sets(), 1);
  ASSERT_TRUE(backend->Discover().ok());
  EXPECT_EQ(fake_.event_sets(), 1);
  backend.reset();
  EXPECT_EQ(fake_.event_sets(), 0);
  EXPECT_EQ(fake_.init_count(), 0);
}

TEST_F(NvmlTest, ReadsTheR535ProcessStructThroughV2) {
  fake_.set_string(-1, "driver", "535.54.03");
  fake_.set_device_count(1);
  fake_.add_process(0, 7, 3 * kGiB);
  fake_.add_process(0, 8, 4 * kGiB);
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  Result<GpuSample> sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok());
  ASSERT_EQ(sample->processes.size(), 2u);
  EXPECT_EQ(sample->processes[1].pid, 8);
  EXPECT_EQ(sample->processes[1].memory_bytes, 4 * kGiB);
  EXPECT_EQ(fake_.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 0);
  EXPECT_EQ(fake_.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 1);
}

TEST(NvmlLibraryTest, MissingRequiredSymbolIsNamed) {
  FakeNvml fake(FAKE_NVML_NO_UUID_PATH);
  ASSERT_TRUE(fake.ok()) << dlerror();
  fake.reset();
  fake.set_device_count(1);
  auto backend = fake.Backend();
  EXPECT_TRUE(backend->IsAvailable());
  Status status = backend->Initialize();
  EXPECT_EQ(status.code(), Code::kUnavailable);
  EXPECT_NE(status.message().find("'nvmlDeviceGetUUID'"), std::string::npos) << status.message();
  EXPECT_EQ(fake.init_count(), 0);
}

TEST(NvmlLibraryTest, FallsBackToUnversionedEntryPoints) {
  FakeNvml fake(FAKE_NVML_LEGACY_PATH);
  ASSERT_TRUE(fake.ok()) << dlerror();
  fake.reset();
  fake.set_device_count(2);
  fake.set_string(1, "pci", "00000000:3B:00.0");
  fake.set_topology(0, 1, 20);  // NVML_TOPOLOGY_MULTIPLE
  fake.add_process(1, 31337, 5 * kGiB);
  fake.add_process(1, 31338, 6 * kGiB);
  fake.add_process(1, 31339, 7 * kGiB);
  fake.set_value(1, "util_gpu", 55);
  auto backend = fake.Backend();
  Result<std::vector<GpuDevice>> devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ(fake.calls("nvmlInit"), 1);
  EXPECT_EQ(fake.calls("nvmlDeviceGetCount"), 1);
  EXPECT_EQ(fake.calls("nvmlDeviceGetHandleByIndex"), 2);
  EXPECT_EQ(fake.calls("nvmlDeviceGetPciInfo"), 2);
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_EQ((*devices)[1].pci_bus_id, "0000:3b:00.0");  // from the 16-byte legacy busId
  EXPECT_EQ((*devices)[1].architecture, "");            // no compute capability call: unknown
  EXPECT_EQ((*devices)[1].numa_node, 0);                // no affinity call: 0
  EXPECT_FALSE((*devices)[1].mig_enabled);
  EXPECT_EQ(backend->Links(), (std::vector<DeviceLink>{DeviceLink::kFabric, DeviceLink::kPcieSwitch,
                                                       DeviceLink::kPcieSwitch, DeviceLink::kFabric}));

  Result<GpuSample> sample = backend->Sample(1);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_DOUBLE_EQ(sample->utilization_pct, 55);
  EXPECT_EQ(sample->ecc_uncorrected, -1);  // no ECC call: unknown
  EXPECT_EQ(sample->throttle, 0u);
  // The v1 process struct is 16 bytes, not 24: every entry must line up.
  ASSERT_TRUE(sample->processes_known);
  ASSERT_EQ(sample->processes.size(), 3u);
  EXPECT_EQ(sample->processes[0].pid, 31337);
  EXPECT_EQ(sample->processes[2].pid, 31339);
  EXPECT_EQ(sample->processes[2].memory_bytes, 7 * kGiB);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses"), 1);
  EXPECT_TRUE(backend->TakeEvents().empty());  // no event API
  backend.reset();
  EXPECT_EQ(fake.init_count(), 0);
}

}  // namespace
}  // namespace drover::agent
