// The level-zero backend against fake_level_zero (a scripted stand-in for
// libze_loader.so.1, see fake_level_zero.h) and, where installed, against the
// real loader with no driver.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/level_zero/fake_level_zero.h"

namespace drover::agent {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// The control functions of one fake library, reached the way the backend
// reaches the entry points: dlopen of the same path, then dlsym.
class FakeLevelZero {
 public:
  explicit FakeLevelZero(const char* path) : path_(path), handle_(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) return;
    reset = Symbol<FakeZeResetFn>("fake_ze_reset");
    set_devices = Symbol<FakeZeSetDevicesFn>("fake_ze_set_devices");
    device = Symbol<FakeZeDeviceFn>("fake_ze_device");
    fail = Symbol<FakeZeFailFn>("fake_ze_fail");
    advance = Symbol<FakeZeAdvanceFn>("fake_ze_advance");
    calls = Symbol<FakeZeCallsFn>("fake_ze_calls");
    sysman_env = Symbol<FakeZeSysmanEnvFn>("fake_ze_sysman_env_at_init");
  }
  ~FakeLevelZero() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  bool ok() const {
    return handle_ != nullptr && reset && set_devices && device && fail && advance && calls && sysman_env;
  }
  std::unique_ptr<DeviceBackend> Backend() const { return MakeLevelZeroBackend({{path_}}); }

  FakeZeResetFn* reset = nullptr;
  FakeZeSetDevicesFn* set_devices = nullptr;
  FakeZeDeviceFn* device = nullptr;
  FakeZeFailFn* fail = nullptr;
  FakeZeAdvanceFn* advance = nullptr;
  FakeZeCallsFn* calls = nullptr;
  FakeZeSysmanEnvFn* sysman_env = nullptr;

 private:
  template <typename Fn>
  Fn* Symbol(const char* name) {
    return reinterpret_cast<Fn*>(dlsym(handle_, name));
  }
  std::string path_;
  void* handle_;
};

class LevelZeroTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << dlerror();
    fake_.reset();
  }
  // A backend with its devices discovered.
  std::unique_ptr<DeviceBackend> Discovered(std::vector<GpuDevice>* devices = nullptr) {
    auto backend = fake_.Backend();
    EXPECT_TRUE(backend->IsAvailable());
    Status init = backend->Initialize();
    EXPECT_TRUE(init.ok()) << init.ToString();
    auto found = backend->Discover();
    EXPECT_TRUE(found.ok()) << found.status().ToString();
    if (devices != nullptr && found.ok()) *devices = *found;
    return backend;
  }
  GpuSample MustSample(DeviceBackend& backend, int index) {
    auto sample = backend.Sample(index);
    EXPECT_TRUE(sample.ok()) << sample.status().ToString();
    return sample.ok() ? *sample : GpuSample{};
  }

  FakeLevelZero fake_{FAKE_LEVEL_ZERO};
};

TEST_F(LevelZeroTest, DiscoversDevicesThroughZesInit) {
  std::vector<GpuDevice> devices;
  auto backend = Discovered(&devices);
  EXPECT_EQ(backend->Name(), "level-zero");
  ASSERT_EQ(devices.size(), 2u);
  const GpuDevice& d = devices[1];
  EXPECT_EQ(d.index, 1);
  EXPECT_EQ(d.uuid, "ze-202122232425262728292a2b2c2d2e2f");
  EXPECT_EQ(d.vendor, "intel");
  EXPECT_EQ(d.model, "Intel(R) Data Center GPU Max 1550");
  EXPECT_EQ(d.architecture, "0x0bd5");
  EXPECT_EQ(d.driver_version, "1.3.26918");
  EXPECT_EQ(d.pci_bus_id, "0000:9a:00.0");
  EXPECT_EQ(devices[0].pci_bus_id, "0000:3a:00.0");
  EXPECT_EQ(d.memory_bytes, 64 * kGiB);  // the device module, not the 512 GiB of system memory
  EXPECT_EQ(d.backend, "level-zero");
  EXPECT_EQ(d.numa_node, 0);
  EXPECT_TRUE(d.healthy);
  EXPECT_EQ(fake_.calls("zesInit"), 1);
  EXPECT_EQ(fake_.calls("zeInit"), 0);
  EXPECT_TRUE(backend->Links().empty());
}

TEST_F(LevelZeroTest, FallsBackToZeInitWithSysmanEnabled) {
  FakeLevelZero old(FAKE_LEVEL_ZERO_NO_ZES_INIT);
  ASSERT_TRUE(old.ok());
  old.reset();
  unsetenv("ZES_ENABLE_SYSMAN");
  // Core handles double as Sysman handles: the runtime's memory size fills in.
  old.device(0)->memory_physical = 0;
  old.device(0)->memory_size = 0;
  auto backend = old.Backend();
  ASSERT_TRUE(backend->Initialize().ok());
  auto devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);
  EXPECT_STREQ(old.sysman_env(), "1");
  EXPECT_EQ(old.calls("zeInit"), 1);
  EXPECT_EQ(old.calls("zeDriverGet"), 2);
  EXPECT_EQ((*devices)[0].memory_bytes, 48 * kGiB);
  EXPECT_EQ((*devices)[1].memory_bytes, 64 * kGiB);
  EXPECT_EQ((*devices)[1].uuid, "ze-202122232425262728292a2b2c2d2e2f");
}

TEST_F(LevelZeroTest, LeavesTheUsersSysmanSettingAlone) {
  FakeLevelZero old(FAKE_LEVEL_ZERO_NO_ZES_INIT);
  ASSERT_TRUE(old.ok());
  old.reset();
  setenv("ZES_ENABLE_SYSMAN", "0", 1);
  auto backend = old.Backend();
  ASSERT_TRUE(backend->Initialize().ok());
  EXPECT_STREQ(old.sysman_env(), "0");
  unsetenv("ZES_ENABLE_SYSMAN");
}

TEST_F(LevelZeroTest, ZesInitFailureFallsBackToZeInit) {
  fake_.fail("zesInit", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  std::vector<GpuDevice> devices;
  auto backend = Discovered(&devices);
  EXPECT_EQ(devices.size(), 2u);
  EXPECT_EQ(fake_.calls("zeInit"), 1);
  EXPECT_EQ(fake_.calls("zesDriverGet"), 0);
}

TEST_F(LevelZeroTest, NoDriverIsZeroDevicesNotAnError) {
  fake_.fail("zesInit", -1, ZE_RESULT_ERROR_UNINITIALIZED);
  fake_.fail("zeInit", -1, ZE_RESULT_ERROR_UNINITIALIZED);
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Initialize().ok());
  auto devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_TRUE(devices->empty());
  EXPECT_EQ(backend->Sample(0).status().code(), Code::kNotFound);
}

TEST_F(LevelZeroTest, InitFailureNamesTheCallAndResult) {
  fake_.fail("zesInit", -1, ZE_RESULT_ERROR_DEVICE_LOST);
  fake_.fail("zeInit", -1, ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY);
  Status init = fake_.Backend()->Initialize();
  EXPECT_EQ(init.code(), Code::kUnavailable);
  EXPECT_NE(init.message().find("zesInit: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)"), std::string::npos)
      << init.message();
  EXPECT_NE(init.message().find("zeInit: ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY"), std::string::npos) << init.message();
}

TEST_F(LevelZeroTest, MissingRequiredSymbolIsUnavailable) {
  FakeLevelZero broken(FAKE_LEVEL_ZERO_NO_DEVICE_PROPERTIES);
  ASSERT_TRUE(broken.ok());
  broken.reset();
  auto backend = broken.Backend();
  EXPECT_TRUE(backend->IsAvailable());
  Status init = backend->Initialize();
  EXPECT_EQ(init.code(), Code::kUnavailable);
  EXPECT_NE(init.message().find("zesDeviceGetProperties"), std::string::npos) << init.message();
  EXPECT_EQ(backend->Discover().status().code(), Code::kUnavailable);
}

TEST_F(LevelZeroTest, MissingLibraryIsNotAvailable) {
  auto backend = MakeLevelZeroBackend({{"/nonexistent/libze_loader.so.1"}});
  EXPECT_FALSE(backend->IsAvailable());
  EXPECT_EQ(backend->Initialize().code(), Code::kUnavailable);
}

TEST_F(LevelZeroTest, RejectsAbsurdDeviceCount) {
  fake_.set_devices(100000);
  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Initialize().ok());
  auto devices = backend->Discover();
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_NE(devices.status().message().find("100000 devices"), std::string::npos) << devices.status().message();
  EXPECT_EQ(backend->Sample(0).status().code(), Code::kNotFound);
}

TEST_F(LevelZeroTest, FormatsIdentityFields) {
  FakeZeDevice* d = fake_.device(0);
  const uint8_t uuid[16] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xff};
  std::memcpy(d->uuid, uuid, sizeof(uuid));
  d->pci_domain = 0x1;
  d->pci_bus = 0xab;
  d->pci_device = 0x1f;
  d->pci_function = 7;
  d->vendor_id = 0x1002;
  d->device_id = 0x74a1;
  std::memset(d->name, 'A', sizeof(d->name));  // no terminating NUL
  std::snprintf(d->driver_version, sizeof(d->driver_version), "unknown");
  FakeZeDevice* other = fake_.device(1);
  std::memset(other->uuid, 0, sizeof(other->uuid));  // falls back to the slot
  other->vendor_id = 0x1234;
  std::snprintf(other->name, sizeof(other->name), " \tArc\x01 A770\n");

  std::vector<GpuDevice> devices;
  auto backend = Discovered(&devices);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].uuid, "ze-deadbeef000102030405060708090aff");
  EXPECT_EQ(devices[0].pci_bus_id, "0001:ab:1f.7");
  EXPECT_EQ(devices[0].vendor, "amd");
  EXPECT_EQ(devices[0].architecture, "0x74a1");
  EXPECT_EQ(devices[0].model, std::string(256, 'A'));
  EXPECT_EQ(devices[0].driver_version, "");
  EXPECT_EQ(devices[1].uuid, "ze-pci-0000:9a:00.0");
  EXPECT_EQ(devices[1].vendor, "level-zero");
  EXPECT_EQ(devices[1].model, "Arc  A770");
}

TEST_F(LevelZeroTest, RejectsDuplicateUuids) {
  std::memcpy(fake_.device(1)->uuid, fake_.device(0)->uuid, 16);
  auto backend = fake_.Backend();
  auto devices = backend->Discover();
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_EQ(backend->Sample(0).status().code(), Code::kNotFound);
}

TEST_F(LevelZeroTest, RejectsAbsurdMemory) {
  fake_.device(1)->memory_physical = uint64_t{1} << 62;
  auto devices = fake_.Backend()->Discover();
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_NE(devices.status().message().find("level zero device 1"), std::string::npos);
}

TEST_F(LevelZeroTest, UtilizationAndPowerComeFromCounterDeltas) {
  auto backend = Discovered();
  GpuSample first = MustSample(*backend, 0);
  EXPECT_FALSE(Known(first.utilization_pct));  // no previous reading yet
  EXPECT_FALSE(Known(first.power_w));
  EXPECT_DOUBLE_EQ(first.power_limit_w, 600);

  fake_.advance(0, 1000000, 250000, 300000000);  // 1 s, 0.25 s busy, 300 J
  GpuSample second = MustSample(*backend, 0);
  EXPECT_DOUBLE_EQ(second.utilization_pct, 25);
  EXPECT_DOUBLE_EQ(second.power_w, 300);

  fake_.advance(0, 2000000, 1500000, 500000000);
  GpuSample third = MustSample(*backend, 0);
  EXPECT_DOUBLE_EQ(third.utilization_pct, 75);
  EXPECT_DOUBLE_EQ(third.power_w, 250);
  // Device 1 keeps its own previous readings.
  EXPECT_FALSE(Known(MustSample(*backend, 1).utilization_pct));
}

TEST_F(LevelZeroTest, ReadsTheOtherFields) {
  FakeZeDevice* d = fake_.device(0);
  d->memory_free = 16 * kGiB;
  d->temperature_c = 71.5;
  d->gpu_mhz = 1550.4;
  d->throttle_reasons = ZES_FREQ_THROTTLE_REASON_FLAG_THERMAL_LIMIT | ZES_FREQ_THROTTLE_REASON_FLAG_BURST_PWR_CAP |
                        ZES_FREQ_THROTTLE_REASON_FLAG_SW_RANGE;
  d->ras_correctable = 3;
  d->ras_uncorrectable = 0;
  d->process_count = 2;
  d->pids[0] = 4242;
  d->process_memory[0] = 2 * kGiB;
  d->pids[1] = 4343;
  d->process_memory[1] = 512;
  auto backend = Discovered();
  GpuSample s = MustSample(*backend, 0);
  EXPECT_EQ(s.memory_total_bytes, 64 * kGiB);
  EXPECT_EQ(s.memory_used_bytes, 48 * kGiB);
  EXPECT_DOUBLE_EQ(s.temperature_c, 71.5);  // the GPU sensor, not memory's
  EXPECT_EQ(s.sm_clock_mhz, 1550);
  EXPECT_EQ(s.memory_clock_mhz, 3200);
  EXPECT_EQ(s.throttle, kThrottleThermal | kThrottlePower | kThrottleOther);
  EXPECT_EQ(s.ecc_corrected, 3);
  EXPECT_EQ(s.ecc_uncorrected, 0);
  ASSERT_TRUE(s.processes_known);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[0].pid, 4242);
  EXPECT_EQ(s.processes[0].memory_bytes, 2 * kGiB);
  EXPECT_EQ(s.processes[1].pid, 4343);
  EXPECT_EQ(MustSample(*backend, 1).throttle, 0u);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(LevelZeroTest, UnsupportedFieldsAreUnknown) {
  fake_.fail("zesDeviceEnumEngineGroups", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  fake_.fail("zesTemperatureGetState", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  fake_.fail("zesFrequencyGetState", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  fake_.fail("zesRasGetState", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  fake_.fail("zesDeviceProcessesGetState", -1, ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS);
  fake_.fail("zesMemoryGetState", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  fake_.fail("zesPowerGetLimits", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  fake_.fail("zesDevicePciGetProperties", -1, ZE_RESULT_ERROR_UNSUPPORTED_FEATURE);
  std::vector<GpuDevice> devices;
  auto backend = Discovered(&devices);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].pci_bus_id, "");
  EXPECT_TRUE(devices[0].healthy);
  MustSample(*backend, 0);
  fake_.advance(0, 1000000, 500000, 100000000);
  GpuSample s = MustSample(*backend, 0);
  EXPECT_FALSE(Known(s.utilization_pct));
  EXPECT_FALSE(Known(s.temperature_c));
  EXPECT_FALSE(Known(s.power_limit_w));
  EXPECT_DOUBLE_EQ(s.power_w, 100);  // what is supported still reads
  EXPECT_EQ(s.sm_clock_mhz, -1);
  EXPECT_EQ(s.memory_clock_mhz, -1);
  EXPECT_EQ(s.ecc_corrected, -1);
  EXPECT_EQ(s.ecc_uncorrected, -1);
  EXPECT_EQ(s.memory_used_bytes, -1);
  EXPECT_FALSE(s.processes_known);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(LevelZeroTest, AbsurdReadingsAreUnknown) {
  fake_.device(0)->energy_uj = 1000000000;
  auto backend = Discovered();
  MustSample(*backend, 0);
  FakeZeDevice* d = fake_.device(0);
  d->temperature_c = 1e6;
  d->memory_free = d->memory_size + 1;
  d->gpu_mhz = 1e9;
  fake_.advance(0, 1000000, 3000000, 0);  // busier than the time that passed
  d->energy_uj = 0;                       // the counter went backwards
  d->power_limit_mw = -5;
  d->ras_uncorrectable = uint64_t{1} << 60;
  GpuSample s = MustSample(*backend, 0);
  EXPECT_FALSE(Known(s.temperature_c));
  EXPECT_EQ(s.memory_used_bytes, -1);
  EXPECT_EQ(s.sm_clock_mhz, -1);
  EXPECT_FALSE(Known(s.utilization_pct));
  EXPECT_FALSE(Known(s.power_w));
  EXPECT_FALSE(Known(s.power_limit_w));
  EXPECT_EQ(s.ecc_uncorrected, -1);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(LevelZeroTest, DeviceLostFailsSampleAndRaisesOneEvent) {
  auto backend = Discovered();
  fake_.fail("zesDeviceGetState", 1, ZE_RESULT_ERROR_DEVICE_LOST);
  auto lost = backend->Sample(1);
  EXPECT_EQ(lost.status().code(), Code::kUnavailable);
  EXPECT_NE(lost.status().message().find("zesDeviceGetState on level zero device 1: ZE_RESULT_ERROR_DEVICE_LOST"),
            std::string::npos)
      << lost.status().message();
  EXPECT_EQ(backend->Sample(1).status().code(), Code::kUnavailable);
  MustSample(*backend, 0);  // the other device is fine
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_EQ(events[0].code, ZE_RESULT_ERROR_DEVICE_LOST);

  // Back, then lost again on a later call: a new event.
  fake_.fail("zesDeviceGetState", 1, 0);
  MustSample(*backend, 1);
  fake_.fail("zesEngineGetActivity", 1, ZE_RESULT_ERROR_DEVICE_LOST);
  EXPECT_EQ(backend->Sample(1).status().code(), Code::kUnavailable);
  events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
}

TEST_F(LevelZeroTest, DeviceLostDuringDiscoveryIsUnhealthy) {
  fake_.fail("zesDeviceEnumEngineGroups", 0, ZE_RESULT_ERROR_DEVICE_LOST);
  std::vector<GpuDevice> devices;
  auto backend = Discovered(&devices);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_FALSE(devices[0].healthy);
  EXPECT_TRUE(devices[1].healthy);
}

TEST_F(LevelZeroTest, WedgedDeviceRaisesOneEvent) {
  fake_.device(0)->reset_reasons = ZES_RESET_REASON_FLAG_WEDGED;
  std::vector<GpuDevice> devices;
  auto backend = Discovered(&devices);
  EXPECT_FALSE(devices[0].healthy);
  MustSample(*backend, 0);
  MustSample(*backend, 0);
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_NE(events[0].message.find("wedged"), std::string::npos);
}

TEST_F(LevelZeroTest, UncorrectableErrorIncreaseRaisesEvent) {
  fake_.device(1)->ras_uncorrectable = 1;
  auto backend = Discovered();
  EXPECT_EQ(MustSample(*backend, 1).ecc_uncorrected, 1);  // the baseline: no event
  EXPECT_TRUE(backend->TakeEvents().empty());
  fake_.device(1)->ras_uncorrectable = 4;
  fake_.device(1)->ras_correctable = 9;
  GpuSample s = MustSample(*backend, 1);
  EXPECT_EQ(s.ecc_uncorrected, 4);
  EXPECT_EQ(s.ecc_corrected, 9);
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kEccUncorrected);
  EXPECT_EQ(events[0].code, 3);
  MustSample(*backend, 1);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(LevelZeroTest, DriverEventsBecomeHealthEvents) {
  auto backend = Discovered();
  EXPECT_NE(fake_.device(0)->registered_events & ZES_EVENT_TYPE_FLAG_DEVICE_RESET_REQUIRED, 0u);
  fake_.device(1)->pending_events =
      ZES_EVENT_TYPE_FLAG_DEVICE_RESET_REQUIRED | ZES_EVENT_TYPE_FLAG_TEMP_CRITICAL | ZES_EVENT_TYPE_FLAG_MEM_HEALTH;
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_EQ(events[1].kind, HealthEvent::Kind::kThermal);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(LevelZeroTest, FabricPortsMakeLinks) {
  fake_.set_devices(3);
  // 0 <-> 1 healthy both ways; 0 -> 2 healthy but 2 -> 0 failed.
  FakeZeDevice* d0 = fake_.device(0);
  FakeZeDevice* d1 = fake_.device(1);
  FakeZeDevice* d2 = fake_.device(2);
  d0->port_count = 2;
  d0->port_remote[0] = d1->fabric_id;
  d0->port_status[0] = ZES_FABRIC_PORT_STATUS_HEALTHY;
  d0->port_remote[1] = d2->fabric_id;
  d0->port_status[1] = ZES_FABRIC_PORT_STATUS_HEALTHY;
  d1->port_count = 1;
  d1->port_remote[0] = d0->fabric_id;
  d1->port_status[0] = ZES_FABRIC_PORT_STATUS_HEALTHY;
  d2->port_count = 1;
  d2->port_remote[0] = d0->fabric_id;
  d2->port_status[0] = ZES_FABRIC_PORT_STATUS_FAILED;
  auto backend = Discovered();
  std::vector<DeviceLink> links = backend->Links();
  ASSERT_EQ(links.size(), 9u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(links[i * 3 + i], DeviceLink::kFabric);
  EXPECT_EQ(links[0 * 3 + 1], DeviceLink::kFabric);
  EXPECT_EQ(links[1 * 3 + 0], DeviceLink::kFabric);
  EXPECT_EQ(links[0 * 3 + 2], DeviceLink::kCrossSocket);
  EXPECT_EQ(links[2 * 3 + 0], DeviceLink::kCrossSocket);
  EXPECT_EQ(links[1 * 3 + 2], DeviceLink::kCrossSocket);

  // Without a healthy pair there is nothing to say.
  d1->port_status[0] = ZES_FABRIC_PORT_STATUS_DISABLED;
  ASSERT_TRUE(backend->Discover().ok());
  EXPECT_TRUE(backend->Links().empty());
}

TEST_F(LevelZeroTest, UnknownIndexIsNotFound) {
  auto backend = Discovered();
  EXPECT_EQ(backend->Sample(-1).status().code(), Code::kNotFound);
  EXPECT_EQ(backend->Sample(2).status().code(), Code::kNotFound);
}

// The real loader with no Level Zero driver on the machine: no crash, and
// either a clear error or 0 devices (or real devices where a GPU exists).
TEST(LevelZeroRealLoaderTest, InitializesOrFailsClearly) {
  void* loader = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
  if (loader == nullptr) GTEST_SKIP() << "libze_loader.so.1 is not installed";
  dlclose(loader);
  auto backend = MakeLevelZeroBackend();
  ASSERT_TRUE(backend->IsAvailable());
  Status init = backend->Initialize();
  if (!init.ok()) {
    EXPECT_EQ(init.code(), Code::kUnavailable);
    EXPECT_NE(init.message().find("ZE_RESULT"), std::string::npos) << init.message();
    return;
  }
  auto devices = backend->Discover();
  if (!devices.ok()) {
    EXPECT_NE(devices.status().message().find("level zero"), std::string::npos) << devices.status().message();
    return;
  }
  for (const GpuDevice& d : *devices) {
    EXPECT_EQ(d.backend, "level-zero");
    EXPECT_FALSE(d.uuid.empty());
  }
  std::printf("real level zero loader: %zu devices\n", devices->size());
}

}  // namespace
}  // namespace drover::agent
