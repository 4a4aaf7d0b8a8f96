// Hardware tests of the nvml backend against the real libnvidia-ml.so.1.
// Every test skips itself, saying why, where the library cannot be loaded or
// initialized or reports no GPU; run them on a GPU machine with
//   ctest -L hw --output-on-failure     (or ./nvidia_gpu_test)
// The discovered devices and one sample are printed, for docs/hardware.md.

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "drover/agent/devices/device_backend.h"

namespace drover::agent {
namespace {

const char* LinkName(DeviceLink link) {
  switch (link) {
    case DeviceLink::kCrossSocket: return "SYS";
    case DeviceLink::kSameNuma: return "NODE";
    case DeviceLink::kPcieSwitch: return "PIX";
    case DeviceLink::kFabric: return "NV";
  }
  return "?";
}

std::string Maybe(double value, const char* unit) {
  if (!Known(value)) return "unknown";
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f %s", value, unit);
  return text;
}

// One backend over the real library for the whole suite: NVML is slow to
// initialize on large machines, and the devices do not change between tests.
class NvidiaGpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = MakeNvmlBackend().release();
    if (!backend_->IsAvailable()) {
      skip_reason_ = "libnvidia-ml.so.1 cannot be loaded (no NVIDIA driver on this machine)";
      return;
    }
    Status init = backend_->Initialize();
    if (!init.ok()) {
      skip_reason_ = "NVML does not initialize: " + init.ToString();
      return;
    }
    Result<std::vector<GpuDevice>> found = backend_->Discover();
    if (!found.ok()) {
      discover_error_ = found.status().ToString();
      return;
    }
    devices_ = new std::vector<GpuDevice>(std::move(found).value());
    if (devices_->empty()) skip_reason_ = "NVML reports no GPU on this machine";
  }

  static void TearDownTestSuite() {
    delete devices_;
    devices_ = nullptr;
    delete backend_;
    backend_ = nullptr;
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_TRUE(discover_error_.empty()) << "Discover() failed: " << discover_error_;
  }

  static DeviceBackend* backend_;
  static std::vector<GpuDevice>* devices_;
  static std::string skip_reason_;
  static std::string discover_error_;
};

DeviceBackend* NvidiaGpuTest::backend_ = nullptr;
std::vector<GpuDevice>* NvidiaGpuTest::devices_ = nullptr;
std::string NvidiaGpuTest::skip_reason_;
std::string NvidiaGpuTest::discover_error_;

using NVIDIA_GPU = NvidiaGpuTest;  // the hw test prefix: NVIDIA_GPU.*

TEST_F(NVIDIA_GPU, DiscoversEveryDevice) {
  const std::vector<GpuDevice>& devices = *devices_;
  std::printf("nvml: %zu device(s), driver %s\n", devices.size(), devices[0].driver_version.c_str());
  const std::regex pci("^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]$");
  for (size_t i = 0; i < devices.size(); ++i) {
    const GpuDevice& d = devices[i];
    std::printf("  [%d] %s  %s  %.1f GiB  pci %s  %s  numa %d  mig %s (%zu instances)\n", d.index, d.model.c_str(),
                d.uuid.c_str(), static_cast<double>(d.memory_bytes) / (1ull << 30), d.pci_bus_id.c_str(),
                d.architecture.empty() ? "arch ?" : d.architecture.c_str(), d.numa_node, d.mig_enabled ? "on" : "off",
                d.mig_instances.size());
    for (const MigInstance& m : d.mig_instances) {
      std::printf("      %s  gi %d ci %d  %.1f GiB\n", m.uuid.c_str(), m.gpu_instance_id, m.compute_instance_id,
                  static_cast<double>(m.memory_bytes) / (1ull << 30));
    }
    EXPECT_EQ(d.index, static_cast<int>(i));
    EXPECT_EQ(d.vendor, "nvidia");
    EXPECT_EQ(d.backend, "nvml");
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0u) << d.uuid;
    EXPECT_FALSE(d.model.empty());
    EXPECT_GT(d.memory_bytes, 0);
    EXPECT_TRUE(std::regex_match(d.pci_bus_id, pci)) << d.pci_bus_id;
    EXPECT_FALSE(d.driver_version.empty());
    EXPECT_GE(d.numa_node, 0);
    for (const MigInstance& m : d.mig_instances) EXPECT_EQ(m.uuid.rfind("MIG-", 0), 0u) << m.uuid;
  }
  // Every uuid and bus id names one device.
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = i + 1; j < devices.size(); ++j) {
      EXPECT_NE(devices[i].uuid, devices[j].uuid);
      EXPECT_NE(devices[i].pci_bus_id, devices[j].pci_bus_id);
    }
  }
}

TEST_F(NVIDIA_GPU, DiscoverIsStable) {
  Result<std::vector<GpuDevice>> again = backend_->Discover();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->size(), devices_->size());
  for (size_t i = 0; i < again->size(); ++i) {
    EXPECT_EQ((*again)[i].uuid, (*devices_)[i].uuid);
    EXPECT_EQ((*again)[i].pci_bus_id, (*devices_)[i].pci_bus_id);
  }
}

TEST_F(NVIDIA_GPU, SamplesEveryDevice) {
  for (const GpuDevice& d : *devices_) {
    Result<GpuSample> sample = backend_->Sample(d.index);
    ASSERT_TRUE(sample.ok()) << "device " << d.index << ": " << sample.status().ToString();
    const GpuSample& s = *sample;
    std::printf(
        "  [%d] util %s  mem util %s  memory %.2f / %.2f GiB  temp %s  power %s / %s  clocks sm %d mem %d MHz"
        "  throttle 0x%x  ecc %lld/%lld  processes %s (%zu)\n",
        d.index, Maybe(s.utilization_pct, "%").c_str(), Maybe(s.memory_utilization_pct, "%").c_str(),
        static_cast<double>(s.memory_used_bytes) / (1ull << 30),
        static_cast<double>(s.memory_total_bytes) / (1ull << 30), Maybe(s.temperature_c, "C").c_str(),
        Maybe(s.power_w, "W").c_str(), Maybe(s.power_limit_w, "W").c_str(), s.sm_clock_mhz, s.memory_clock_mhz,
        s.throttle, static_cast<long long>(s.ecc_corrected), static_cast<long long>(s.ecc_uncorrected),
        s.processes_known ? "known" : "unknown", s.processes.size());
    EXPECT_TRUE(Known(s.temperature_c)) << "device " << d.index;
    EXPECT_GT(s.temperature_c, 0);
    EXPECT_LT(s.temperature_c, 120);
    EXPECT_TRUE(Known(s.power_w)) << "device " << d.index;
    EXPECT_GT(s.power_w, 0);
    ASSERT_GE(s.memory_total_bytes, 0) << "device " << d.index << ": memory unknown";
    EXPECT_GE(s.memory_used_bytes, 0);
    EXPECT_LE(s.memory_used_bytes, s.memory_total_bytes);
    EXPECT_EQ(s.memory_total_bytes, d.memory_bytes);
    if (Known(s.utilization_pct)) {
      EXPECT_GE(s.utilization_pct, 0);
      EXPECT_LE(s.utilization_pct, 100);
    }
  }
  EXPECT_EQ(backend_->Sample(static_cast<int>(devices_->size())).status().code(), Code::kNotFound);
}

TEST_F(NVIDIA_GPU, LinksCoverEveryPair) {
  std::vector<DeviceLink> links = backend_->Links();
  const size_t n = devices_->size();
  if (links.empty()) {
    std::printf("  links: unknown to NVML (the agent derives them from hwloc)\n");
    return;
  }
  ASSERT_EQ(links.size(), n * n);
  for (size_t i = 0; i < n; ++i) {
    std::printf("  GPU%zu", i);
    for (size_t j = 0; j < n; ++j) std::printf(" %5s", i == j ? "X" : LinkName(links[i * n + j]));
    std::printf("\n");
    EXPECT_EQ(links[i * n + i], DeviceLink::kFabric);
    for (size_t j = 0; j < n; ++j) EXPECT_EQ(links[i * n + j], links[j * n + i]) << i << "," << j;
  }
}

TEST_F(NVIDIA_GPU, TakeEventsDoesNotBlock) {
  // A healthy idle machine has nothing to report; what matters is that the
  // call returns (a blocking wait would hang the test) and names our devices.
  for (int round = 0; round < 3; ++round) {
    for (const HealthEvent& e : backend_->TakeEvents()) {
      std::printf("  event: device %d kind %d code %lld: %s\n", e.device, static_cast<int>(e.kind),
                  static_cast<long long>(e.code), e.message.c_str());
      EXPECT_GE(e.device, 0);
      EXPECT_LT(e.device, static_cast<int>(devices_->size()));
    }
  }
}

}  // namespace
}  // namespace drover::agent
