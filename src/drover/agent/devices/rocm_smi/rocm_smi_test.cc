// The rocm-smi backend against stand-in ROCm SMI libraries (fake_rocm_smi.h)
// and, where installed, against the real librocm_smi64.

#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "drover/agent/devices/device_backend.h"
#include "drover/agent/devices/rocm_smi/fake_rocm_smi.h"

namespace drover::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kGiB64 = 1ULL << 30;

// One stand-in library, opened for the test's lifetime: the backend's own
// dlopen of the same file then shares its state.
class FakeRocmSmi {
 public:
  explicit FakeRocmSmi(const char* path) : path_(path) {
    handle_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) return;
    state_ = reinterpret_cast<decltype(&fake_rsmi_state)>(dlsym(handle_, "fake_rsmi_state"));
    reset_ = reinterpret_cast<decltype(&fake_rsmi_reset)>(dlsym(handle_, "fake_rsmi_reset"));
    set_devices_ = reinterpret_cast<decltype(&fake_rsmi_set_devices)>(dlsym(handle_, "fake_rsmi_set_devices"));
    fail_ = reinterpret_cast<decltype(&fake_rsmi_fail)>(dlsym(handle_, "fake_rsmi_fail"));
    reset_();
  }
  ~FakeRocmSmi() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  FakeRocmSmi(const FakeRocmSmi&) = delete;
  FakeRocmSmi& operator=(const FakeRocmSmi&) = delete;

  bool loaded() const { return handle_ != nullptr && state_ != nullptr && fail_ != nullptr; }
  fake_rsmi::State& state() { return *state_(); }
  fake_rsmi::Device& device(uint32_t i) { return state_()->devices[i]; }
  void SetDevices(uint32_t count) { set_devices_(count); }
  void Fail(const char* function, int device, rsmi_status_t status) {
    fail_(function, device, static_cast<int>(status));
  }
  std::unique_ptr<DeviceBackend> Backend() const { return MakeRocmSmiBackend({{path_}}); }

 private:
  std::string path_;
  void* handle_ = nullptr;
  decltype(&fake_rsmi_state) state_ = nullptr;
  decltype(&fake_rsmi_reset) reset_ = nullptr;
  decltype(&fake_rsmi_set_devices) set_devices_ = nullptr;
  decltype(&fake_rsmi_fail) fail_ = nullptr;
};

class RocmSmiBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fake_.loaded()) << dlerror(); }

  // A backend that has discovered the fake's `count` devices.
  std::unique_ptr<DeviceBackend> Discovered(uint32_t count) {
    auto backend = fake_.Backend();
    auto devices = backend->Discover();
    EXPECT_TRUE(devices.ok()) << devices.status().ToString();
    if (devices.ok()) {
      EXPECT_EQ(devices->size(), count);
    }
    return backend;
  }

  FakeRocmSmi fake_{FAKE_ROCM_SMI_PATH};
};

TEST_F(RocmSmiBackendTest, IsAvailableWhenTheLibraryLoads) {
  auto backend = fake_.Backend();
  EXPECT_EQ(backend->Name(), "rocm-smi");
  EXPECT_TRUE(backend->IsAvailable());

  auto missing = MakeRocmSmiBackend({{"/nonexistent/librocm_smi64.so.1"}});
  EXPECT_FALSE(missing->IsAvailable());
  Status status = missing->Initialize();
  EXPECT_EQ(status.code(), Code::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/librocm_smi64.so.1"));
}

TEST_F(RocmSmiBackendTest, DiscoversEveryField) {
  fake_.SetDevices(2);
  fake_.device(1).numa_node = 1;
  fake_.device(1).unique_id = 0xf2f1b24b2b6ba8d1ULL;
  fake_.device(1).vram_total = 128 * kGiB64;
  // Domain 0x1234, bus 0xc1, device 0x1f, function 7; bits 31..16 are
  // reserved (a partition id in newer ROCm) and must not leak in.
  fake_.device(1).bdfid = (0x1234ULL << 32) | (0x5ULL << 28) | (0xc1 << 8) | (0x1f << 3) | 0x7;
  std::snprintf(fake_.device(1).name, sizeof(fake_.device(1).name), "%s", "  AMD Instinct MI250X \n");

  auto backend = fake_.Backend();
  ASSERT_TRUE(backend->Initialize().ok());
  auto devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 2u);

  const GpuDevice& first = (*devices)[0];
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(first.uuid, "amd-0000000000001000");
  EXPECT_EQ(first.vendor, "amd");
  EXPECT_EQ(first.backend, "rocm-smi");
  EXPECT_EQ(first.model, "AMD Instinct MI210");
  EXPECT_EQ(first.memory_bytes, static_cast<int64_t>(64 * kGiB64));
  EXPECT_EQ(first.pci_bus_id, "0000:03:00.0");
  EXPECT_EQ(first.numa_node, 0);
  EXPECT_EQ(first.architecture, "0x740f");
  EXPECT_EQ(first.driver_version, "6.2.4-fake");
  EXPECT_TRUE(first.healthy);

  const GpuDevice& second = (*devices)[1];
  EXPECT_EQ(second.index, 1);
  EXPECT_EQ(second.uuid, "amd-f2f1b24b2b6ba8d1");
  EXPECT_EQ(second.model, "AMD Instinct MI250X");  // trimmed
  EXPECT_EQ(second.memory_bytes, static_cast<int64_t>(128 * kGiB64));
  EXPECT_EQ(second.pci_bus_id, "1234:c1:1f.7");
  EXPECT_EQ(second.numa_node, 1);
}

TEST_F(RocmSmiBackendTest, UuidFallsBackToSerialThenPciAddressAndStaysStable) {
  fake_.SetDevices(3);
  fake_.device(0).unique_id = 0;  // unprogrammed
  fake_.device(1).unique_id = 0;
  std::snprintf(fake_.device(1).serial, sizeof(fake_.device(1).serial), "%s", "000000");
  fake_.device(2).unique_id = ~0ULL;
  fake_.Fail("rsmi_dev_serial_number_get", 2, RSMI_STATUS_NOT_SUPPORTED);

  auto first = fake_.Backend()->Discover();
  auto again = fake_.Backend()->Discover();
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ((*first)[0].uuid, "amd-sn-sn0000");
  EXPECT_THAT((*first)[1].uuid, ::testing::MatchesRegex("amd-[0-9a-f]{16}"));
  EXPECT_THAT((*first)[2].uuid, ::testing::MatchesRegex("amd-[0-9a-f]{16}"));
  EXPECT_NE((*first)[1].uuid, (*first)[2].uuid);  // different PCI addresses
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*first)[i].uuid, (*again)[i].uuid);
}

TEST_F(RocmSmiBackendTest, PartitionsSharingAUniqueIdGetDistinctUuids) {
  fake_.SetDevices(3);
  for (uint32_t i = 0; i < 3; ++i) fake_.device(i).unique_id = 0xabc;
  auto devices = fake_.Backend()->Discover();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ((*devices)[0].uuid, "amd-0000000000000abc");
  EXPECT_EQ((*devices)[1].uuid, "amd-0000000000000abc-1");
  EXPECT_EQ((*devices)[2].uuid, "amd-0000000000000abc-2");
}

TEST_F(RocmSmiBackendTest, NameFallsBackToTheDeviceIdAndNumaMinusOneIsNodeZero) {
  fake_.SetDevices(2);
  fake_.Fail("rsmi_dev_name_get", -1, RSMI_STATUS_NOT_SUPPORTED);
  fake_.device(0).numa_node = 0xFFFFFFFFu;  // -1: no affinity
  fake_.device(1).numa_node = 5000;         // garbage
  fake_.Fail("rsmi_dev_id_get", 1, RSMI_STATUS_NOT_SUPPORTED);
  fake_.Fail("rsmi_dev_pci_id_get", 1, RSMI_STATUS_NOT_SUPPORTED);
  fake_.Fail("rsmi_version_str_get", -1, RSMI_STATUS_NOT_SUPPORTED);

  auto devices = fake_.Backend()->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ((*devices)[0].model, "AMD GPU 0x740f");
  EXPECT_EQ((*devices)[0].numa_node, 0);
  EXPECT_EQ((*devices)[1].model, "AMD GPU");
  EXPECT_EQ((*devices)[1].architecture, "");
  EXPECT_EQ((*devices)[1].pci_bus_id, "");
  EXPECT_EQ((*devices)[1].numa_node, 0);
  EXPECT_EQ((*devices)[1].driver_version, "");
}

TEST_F(RocmSmiBackendTest, RejectsAnAbsurdDeviceCount) {
  fake_.SetDevices(100000);
  auto devices = fake_.Backend()->Discover();
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_THAT(devices.status().message(), HasSubstr("100000 devices"));
}

TEST_F(RocmSmiBackendTest, RejectsADeviceWithoutMemory) {
  fake_.SetDevices(2);
  fake_.device(1).vram_total = 0;
  auto devices = fake_.Backend()->Discover();
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), Code::kInternal);
  EXPECT_THAT(devices.status().message(), HasSubstr("device 1"));
  EXPECT_THAT(devices.status().message(), HasSubstr("0 bytes of vram"));
}

TEST_F(RocmSmiBackendTest, DeviceCountFailureNamesTheCallAndStatus) {
  fake_.Fail("rsmi_num_monitor_devices", -1, RSMI_STATUS_PERMISSION);
  auto devices = fake_.Backend()->Discover();
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), Code::kUnavailable);
  EXPECT_THAT(devices.status().message(),
              HasSubstr("rsmi_num_monitor_devices: RSMI_STATUS_PERMISSION (4): fake description"));
}

TEST_F(RocmSmiBackendTest, InitFailureIsUnavailableWithTheLibrarysWords) {
  fake_.SetDevices(1);
  fake_.state().init_status = RSMI_STATUS_INIT_ERROR;
  {
    auto backend = fake_.Backend();
    Status status = backend->Initialize();
    EXPECT_EQ(status.code(), Code::kUnavailable);
    EXPECT_THAT(status.message(), HasSubstr("rsmi_init: RSMI_STATUS_INIT_ERROR (8): An error occurred during "
                                            "initialization"));
    EXPECT_FALSE(backend->Discover().ok());
  }
  // Never initialized, so never shut down.
  EXPECT_EQ(fake_.state().shut_down_calls, 0);
}

TEST_F(RocmSmiBackendTest, InitializesOnceAndShutsDownOnce) {
  fake_.SetDevices(1);
  {
    auto backend = fake_.Backend();
    ASSERT_TRUE(backend->Initialize().ok());
    ASSERT_TRUE(backend->Initialize().ok());
    ASSERT_TRUE(backend->Discover().ok());
    EXPECT_EQ(fake_.state().shut_down_calls, 0);
  }
  EXPECT_EQ(fake_.state().init_calls, 1);
  EXPECT_EQ(fake_.state().shut_down_calls, 1);
}

TEST_F(RocmSmiBackendTest, SampleConvertsUnits) {
  fake_.SetDevices(1);
  fake_rsmi::Device& d = fake_.device(0);
  d.busy_percent = 87;
  d.memory_busy_percent = 42;
  d.vram_used = 3 * kGiB64;
  d.temp_current[0] = 45'500;    // millidegrees
  d.power_ave_uw = 123'456'789;  // microwatts
  d.power_cap_uw = 560'000'000;
  d.sys_clock.frequency[1] = 1'700'000'000;  // Hz
  d.mem_clock.current = 0;
  d.mem_clock.frequency[0] = 400'000'000;
  d.ecc_blocks = 0b101;  // UMC and GFX count
  d.ecc[0] = {3, 0};
  d.ecc[2] = {4, 0};
  auto backend = Discovered(1);

  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_DOUBLE_EQ(sample->utilization_pct, 87);
  EXPECT_DOUBLE_EQ(sample->memory_utilization_pct, 42);
  EXPECT_EQ(sample->memory_used_bytes, static_cast<int64_t>(3 * kGiB64));
  EXPECT_EQ(sample->memory_total_bytes, static_cast<int64_t>(64 * kGiB64));
  EXPECT_DOUBLE_EQ(sample->temperature_c, 45.5);
  EXPECT_DOUBLE_EQ(sample->power_w, 123.456789);
  EXPECT_DOUBLE_EQ(sample->power_limit_w, 560);
  EXPECT_EQ(sample->sm_clock_mhz, 1700);
  EXPECT_EQ(sample->memory_clock_mhz, 400);
  EXPECT_EQ(sample->ecc_corrected, 7);
  EXPECT_EQ(sample->ecc_uncorrected, 0);
  EXPECT_EQ(sample->throttle, 0u);
}

TEST_F(RocmSmiBackendTest, NotSupportedLeavesEachFieldUnknown) {
  fake_.SetDevices(1);
  for (const char* call : {"rsmi_dev_busy_percent_get", "rsmi_dev_memory_usage_get", "rsmi_dev_memory_busy_percent_get",
                           "rsmi_dev_temp_metric_get", "rsmi_dev_power_ave_get", "rsmi_dev_power_cap_get",
                           "rsmi_dev_gpu_clk_freq_get", "rsmi_dev_ecc_count_get", "rsmi_compute_process_info_get"}) {
    fake_.Fail(call, -1, RSMI_STATUS_NOT_SUPPORTED);
  }
  auto backend = Discovered(1);
  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok()) << sample.status().ToString();
  EXPECT_FALSE(Known(sample->utilization_pct));
  EXPECT_FALSE(Known(sample->memory_utilization_pct));
  EXPECT_EQ(sample->memory_used_bytes, -1);
  EXPECT_EQ(sample->memory_total_bytes, static_cast<int64_t>(64 * kGiB64));
  EXPECT_FALSE(Known(sample->temperature_c));
  EXPECT_FALSE(Known(sample->power_w));
  EXPECT_FALSE(Known(sample->power_limit_w));
  EXPECT_EQ(sample->sm_clock_mhz, -1);
  EXPECT_EQ(sample->memory_clock_mhz, -1);
  EXPECT_EQ(sample->ecc_corrected, -1);
  EXPECT_EQ(sample->ecc_uncorrected, -1);
  EXPECT_FALSE(sample->processes_known);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(RocmSmiBackendTest, TemperatureFallsBackToJunctionAndThrottlesAtTheCriticalLimit) {
  fake_.SetDevices(1);
  fake_rsmi::Device& d = fake_.device(0);
  d.temp_not_supported[0] = true;  // no edge sensor, as on MI200 and later
  d.temp_current[1] = 99'000;
  d.temp_critical[1] = 100'000;
  auto backend = Discovered(1);

  auto cool = backend->Sample(0);
  ASSERT_TRUE(cool.ok());
  EXPECT_DOUBLE_EQ(cool->temperature_c, 99);
  EXPECT_EQ(cool->throttle, 0u);

  d.temp_current[1] = 100'000;
  auto hot = backend->Sample(0);
  ASSERT_TRUE(hot.ok());
  EXPECT_DOUBLE_EQ(hot->temperature_c, 100);
  EXPECT_EQ(hot->throttle, static_cast<uint32_t>(kThrottleThermal));
}

TEST_F(RocmSmiBackendTest, AbsurdReadingsAreUnknown) {
  fake_.SetDevices(1);
  fake_rsmi::Device& d = fake_.device(0);
  d.busy_percent = 250;
  d.memory_busy_percent = 101;
  d.vram_used = 65 * kGiB64;  // more than the 64 GiB there are
  d.temp_current[0] = -300'000;
  d.temp_current[1] = 9'000'000;
  d.power_ave_uw = 1ULL << 60;
  d.power_cap_uw = 0;
  d.sys_clock.current = 0xFFFFFFFFu;  // "no current level"
  d.mem_clock.num_supported = 99;
  d.ecc[0] = {1ULL << 62, 0};
  auto backend = Discovered(1);

  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok());
  EXPECT_FALSE(Known(sample->utilization_pct));
  EXPECT_FALSE(Known(sample->memory_utilization_pct));
  EXPECT_EQ(sample->memory_used_bytes, -1);
  EXPECT_FALSE(Known(sample->temperature_c));
  EXPECT_FALSE(Known(sample->power_w));
  EXPECT_FALSE(Known(sample->power_limit_w));
  EXPECT_EQ(sample->sm_clock_mhz, -1);
  EXPECT_EQ(sample->memory_clock_mhz, -1);
  EXPECT_EQ(sample->ecc_uncorrected, -1);
}

TEST_F(RocmSmiBackendTest, UnknownIndexIsNotFound) {
  fake_.SetDevices(2);
  auto fresh = fake_.Backend();
  EXPECT_EQ(fresh->Sample(0).status().code(), Code::kNotFound);  // before Discover()
  auto backend = Discovered(2);
  EXPECT_EQ(backend->Sample(-1).status().code(), Code::kNotFound);
  EXPECT_EQ(backend->Sample(2).status().code(), Code::kNotFound);
  EXPECT_TRUE(backend->Sample(1).ok());
}

TEST_F(RocmSmiBackendTest, LostDeviceFailsSamplesAndRaisesOneEventPerOutage) {
  fake_.SetDevices(2);
  auto backend = Discovered(2);
  ASSERT_TRUE(backend->Sample(1).ok());

  fake_.Fail("rsmi_dev_memory_total_get", 1, RSMI_STATUS_NOT_FOUND);
  auto lost = backend->Sample(1);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), Code::kUnavailable);
  EXPECT_THAT(lost.status().message(),
              HasSubstr("rsmi_dev_memory_total_get on device 1: RSMI_STATUS_NOT_FOUND (10): An "
                        "item was searched for but not found"));
  EXPECT_THAT(lost.status().message(), HasSubstr("amd-0000000000001001"));
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device, 1);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_THAT(events[0].message, HasSubstr("RSMI_STATUS_NOT_FOUND"));

  // Still gone: fails again, but the outage was already reported.
  EXPECT_EQ(backend->Sample(1).status().code(), Code::kUnavailable);
  EXPECT_TRUE(backend->TakeEvents().empty());
  EXPECT_TRUE(backend->Sample(0).ok());  // the other device is unaffected

  // Back, then gone again through another basic call: a new outage.
  fake_.Fail("rsmi_dev_memory_total_get", 1, RSMI_STATUS_SUCCESS);
  ASSERT_TRUE(backend->Sample(1).ok());
  fake_.Fail("rsmi_dev_busy_percent_get", 1, RSMI_STATUS_FILE_ERROR);
  EXPECT_EQ(backend->Sample(1).status().code(), Code::kUnavailable);
  events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kDeviceLost);
  EXPECT_THAT(events[0].message, HasSubstr("rsmi_dev_busy_percent_get"));
}

TEST_F(RocmSmiBackendTest, VanishedSysfsNodeOnTheProbeIsLostButABusyLibraryIsNot) {
  fake_.SetDevices(1);
  auto backend = Discovered(1);
  // ROCm SMI maps ENOENT to RSMI_STATUS_NOT_SUPPORTED; the probe answered before.
  fake_.Fail("rsmi_dev_memory_total_get", 0, RSMI_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(backend->Sample(0).status().code(), Code::kUnavailable);
  EXPECT_EQ(backend->TakeEvents().size(), 1u);

  fake_.Fail("rsmi_dev_memory_total_get", 0, RSMI_STATUS_SUCCESS);
  ASSERT_TRUE(backend->Sample(0).ok());
  fake_.Fail("rsmi_dev_memory_total_get", 0, RSMI_STATUS_BUSY);
  EXPECT_EQ(backend->Sample(0).status().code(), Code::kUnavailable);
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(RocmSmiBackendTest, UncorrectableEccIncreaseRaisesAnEvent) {
  fake_.SetDevices(1);
  fake_rsmi::Device& d = fake_.device(0);
  d.ecc_blocks = 0b11;  // UMC and SDMA
  d.ecc[0] = {10, 1};
  auto backend = Discovered(1);

  ASSERT_TRUE(backend->Sample(0).ok());  // the baseline
  EXPECT_TRUE(backend->TakeEvents().empty());
  ASSERT_TRUE(backend->Sample(0).ok());  // unchanged
  EXPECT_TRUE(backend->TakeEvents().empty());

  d.ecc[1] = {0, 2};
  d.ecc[0] = {11, 1};  // corrected errors alone raise nothing
  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok());
  EXPECT_EQ(sample->ecc_uncorrected, 3);
  EXPECT_EQ(sample->ecc_corrected, 11);
  std::vector<HealthEvent> events = backend->TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].device, 0);
  EXPECT_EQ(events[0].kind, HealthEvent::Kind::kEccUncorrected);
  EXPECT_EQ(events[0].code, 2);
  EXPECT_THAT(events[0].message, HasSubstr("2 new uncorrectable"));
  EXPECT_TRUE(backend->TakeEvents().empty());
}

TEST_F(RocmSmiBackendTest, LinksFollowXgmiHopsAndNumaNodes) {
  fake_.SetDevices(4);
  auto& s = fake_.state();
  auto link = [&](uint32_t a, uint32_t b, RSMI_IO_LINK_TYPE type, uint64_t hops) {
    s.link_type[a][b] = s.link_type[b][a] = type;
    s.link_hops[a][b] = s.link_hops[b][a] = hops;
  };
  fake_.device(2).numa_node = 1;
  fake_.device(3).numa_node = 1;
  link(0, 1, RSMI_IOLINK_TYPE_XGMI, 1);
  link(2, 3, RSMI_IOLINK_TYPE_PCIEXPRESS, 2);
  link(0, 2, RSMI_IOLINK_TYPE_PCIEXPRESS, 3);  // across CPU nodes
  link(0, 3, RSMI_IOLINK_TYPE_XGMI, 3);        // GPU-CPU xGMI, through the CPUs
  link(1, 2, RSMI_IOLINK_TYPE_PCIEXPRESS, 2);  // hops say near, NUMA nodes differ
  link(1, 3, RSMI_IOLINK_TYPE_PCIEXPRESS, 4);
  auto backend = Discovered(4);

  using L = DeviceLink;
  EXPECT_THAT(backend->Links(), ElementsAre(                                                     //
                                    L::kFabric, L::kFabric, L::kCrossSocket, L::kCrossSocket,    //
                                    L::kFabric, L::kFabric, L::kCrossSocket, L::kCrossSocket,    //
                                    L::kCrossSocket, L::kCrossSocket, L::kFabric, L::kSameNuma,  //
                                    L::kCrossSocket, L::kCrossSocket, L::kSameNuma, L::kFabric));
}

TEST_F(RocmSmiBackendTest, LinksAreEmptyWhenAPairQueryFails) {
  fake_.SetDevices(3);
  fake_.Fail("rsmi_topo_get_link_type", 1, RSMI_STATUS_NOT_SUPPORTED);  // from device 1
  auto backend = Discovered(3);
  EXPECT_TRUE(backend->Links().empty());
}

TEST_F(RocmSmiBackendTest, ProcessesAreThoseOnTheDevice) {
  fake_.SetDevices(2);
  auto& s = fake_.state();
  s.processes[0] = {100, 1 * kGiB64, {0}, 1};
  s.processes[1] = {200, 2 * kGiB64, {1}, 1};
  s.processes[2] = {300, 5 * kGiB64, {1, 0}, 2};
  s.num_processes = 3;
  auto backend = Discovered(2);

  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok());
  ASSERT_TRUE(sample->processes_known);
  ASSERT_EQ(sample->processes.size(), 2u);
  EXPECT_EQ(sample->processes[0].pid, 100);
  EXPECT_EQ(sample->processes[0].memory_bytes, static_cast<int64_t>(kGiB64));
  EXPECT_EQ(sample->processes[1].pid, 300);
  EXPECT_EQ(sample->processes[1].memory_bytes, static_cast<int64_t>(5 * kGiB64));

  // A process that exits between the list and its details is left out.
  fake_.Fail("rsmi_compute_process_info_by_pid_get", -1, RSMI_STATUS_NOT_FOUND);
  sample = backend->Sample(1);
  ASSERT_TRUE(sample.ok());
  EXPECT_TRUE(sample->processes_known);
  EXPECT_TRUE(sample->processes.empty());

  fake_.Fail("rsmi_compute_process_info_by_pid_get", -1, RSMI_STATUS_PERMISSION);
  sample = backend->Sample(1);
  ASSERT_TRUE(sample.ok());
  EXPECT_FALSE(sample->processes_known);
}

TEST_F(RocmSmiBackendTest, DriverNotificationsBecomeHealthEvents) {
  fake_.SetDevices(2);
  {
    auto backend = Discovered(2);
    auto& s = fake_.state();
    EXPECT_TRUE(s.event_subscribed[0] && s.event_subscribed[1]);
    EXPECT_EQ(s.event_mask[0], RSMI_EVENT_MASK_FROM_INDEX(RSMI_EVT_NOTIF_THERMAL_THROTTLE) |
                                   RSMI_EVENT_MASK_FROM_INDEX(RSMI_EVT_NOTIF_GPU_PRE_RESET));
    s.events[0] = {0, RSMI_EVT_NOTIF_THERMAL_THROTTLE, "sclk capped"};
    s.events[1] = {1, RSMI_EVT_NOTIF_VMFAULT, "pid 7"};  // not subscribed
    s.events[2] = {1, RSMI_EVT_NOTIF_GPU_PRE_RESET, ""};
    s.num_events = 3;

    std::vector<HealthEvent> events = backend->TakeEvents();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].device, 0);
    EXPECT_EQ(events[0].kind, HealthEvent::Kind::kThermal);
    EXPECT_THAT(events[0].message, HasSubstr("thermal throttling (sclk capped)"));
    EXPECT_EQ(events[1].device, 1);
    EXPECT_EQ(events[1].kind, HealthEvent::Kind::kDeviceLost);
    EXPECT_THAT(events[1].message, HasSubstr("resetting"));
    EXPECT_TRUE(backend->TakeEvents().empty());
  }
  EXPECT_EQ(fake_.state().event_stop_calls, 2);
}

// --- Variants of the library ---------------------------------------------------

TEST(RocmSmiVariantTest, MissingOptionalSymbolsLeaveTheirFeaturesUnknown) {
  FakeRocmSmi fake(FAKE_ROCM_SMI_NO_OPTIONAL_PATH);
  ASSERT_TRUE(fake.loaded()) << dlerror();
  fake.SetDevices(2);
  fake.state().processes[0] = {100, kGiB64, {0}, 1};
  fake.state().num_processes = 1;
  auto backend = fake.Backend();
  auto devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  // No rsmi_dev_unique_id_get: the serial number.
  EXPECT_EQ((*devices)[1].uuid, "amd-sn-sn0001");
  // No rsmi_topo_get_link_type: the agent asks hwloc.
  EXPECT_TRUE(backend->Links().empty());
  // No rsmi_compute_process_gpus_get: with two devices, nobody can tell where.
  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok());
  EXPECT_FALSE(sample->processes_known);
  // No rsmi_status_string: the name and the code, nothing after.
  fake.Fail("rsmi_dev_memory_total_get", 0, RSMI_STATUS_NOT_FOUND);
  auto lost = backend->Sample(0);
  EXPECT_THAT(lost.status().message(), HasSubstr("RSMI_STATUS_NOT_FOUND (10)"));
  EXPECT_THAT(lost.status().message(), Not(HasSubstr("searched")));
  fake.Fail("rsmi_dev_memory_total_get", 0, static_cast<rsmi_status_t>(4242));
  EXPECT_THAT(backend->Sample(0).status().message(), HasSubstr("unknown status (4242)"));
}

TEST(RocmSmiVariantTest, OneDeviceWithoutProcessGpusStillListsProcesses) {
  FakeRocmSmi fake(FAKE_ROCM_SMI_NO_OPTIONAL_PATH);
  ASSERT_TRUE(fake.loaded()) << dlerror();
  fake.SetDevices(1);
  fake.state().processes[0] = {100, kGiB64, {0}, 1};
  fake.state().num_processes = 1;
  auto backend = fake.Backend();
  ASSERT_TRUE(backend->Discover().ok());
  auto sample = backend->Sample(0);
  ASSERT_TRUE(sample.ok());
  ASSERT_TRUE(sample->processes_known);
  ASSERT_EQ(sample->processes.size(), 1u);
  EXPECT_EQ(sample->processes[0].pid, 100);
}

TEST(RocmSmiVariantTest, MissingRequiredSymbolIsUnavailableAndNamed) {
  FakeRocmSmi fake(FAKE_ROCM_SMI_NO_REQUIRED_PATH);
  ASSERT_TRUE(fake.loaded()) << dlerror();
  fake.SetDevices(1);
  auto backend = fake.Backend();
  EXPECT_TRUE(backend->IsAvailable());    // it loads ...
  Status status = backend->Initialize();  // ... but cannot be used
  EXPECT_EQ(status.code(), Code::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("'rsmi_num_monitor_devices'"));
  EXPECT_EQ(fake.state().init_calls, 0);
}

// --- The real library --------------------------------------------------------------

// Wherever librocm_smi64 is installed: on a machine without AMD GPUs (or
// without the amdgpu driver) Initialize fails with a clear error or Discover
// finds nothing; with GPUs, what it finds is sane. Never a crash.
TEST(RocmSmiRealLibraryTest, InitializesOrFailsCleanly) {
  auto backend = MakeRocmSmiBackend();
  if (!backend->IsAvailable()) GTEST_SKIP() << "librocm_smi64 is not installed";
  Status status = backend->Initialize();
  if (!status.ok()) {
    EXPECT_EQ(status.code(), Code::kUnavailable);
    EXPECT_THAT(status.message(), HasSubstr("rsmi_init: RSMI_STATUS_"));
    EXPECT_FALSE(backend->Discover().ok());
    return;
  }
  auto devices = backend->Discover();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  for (const GpuDevice& device : *devices) {
    EXPECT_EQ(device.vendor, "amd");
    EXPECT_GT(device.memory_bytes, 0);
    EXPECT_TRUE(backend->Sample(device.index).ok() ||
                backend->Sample(device.index).status().code() == Code::kUnavailable);
  }
  (void)backend->TakeEvents();
}

}  // namespace
}  // namespace drover::agent
