#include "drover/agent/devices/topology/host_topology.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace drover::agent {
namespace {

const std::string kTestData = DROVER_TOPOLOGY_TESTDATA;

using L = DeviceLink;
constexpr L F = L::kFabric;
constexpr L P = L::kPcieSwitch;
constexpr L N = L::kSameNuma;
constexpr L C = L::kCrossSocket;

HostTopology LoadTwoSocket() {
  auto host = DiscoverHostTopology(kTestData + "/two_socket_4gpu.xml");
  EXPECT_TRUE(host.ok()) << host.status().ToString();
  return host.ok() ? std::move(host).value() : HostTopology{};
}

GpuDevice Gpu(int index, std::string bus_id, int numa_node = 0) {
  GpuDevice device;
  device.index = index;
  device.pci_bus_id = std::move(bus_id);
  device.numa_node = numa_node;
  return device;
}

// The four GPUs of two_socket_4gpu.xml, spelled as different vendors do.
std::vector<GpuDevice> FourGpus() {
  return {Gpu(0, "0000:19:00.0"), Gpu(1, "00000000:1A:00.0"), Gpu(2, "99:00.0"), Gpu(3, "0000:9A:00.0")};
}

bool ShareBridge(const PciLocation& a, const PciLocation& b) {
  for (const auto& x : a.bridges) {
    for (const auto& y : b.bridges) {
      if (x == y) return true;
    }
  }
  return false;
}

TEST(HostTopologyTest, TwoSocketCounts) {
  HostTopology host = LoadTwoSocket();
  EXPECT_EQ(host.sockets, 2);
  EXPECT_EQ(host.numa_nodes, 2);
  EXPECT_EQ(host.cores, 8);
  // 4 GPUs and the NIC; bridges are not PCI devices here.
  EXPECT_EQ(host.pci.size(), 5u);
  EXPECT_EQ(host.Summary(), "2 sockets, 2 NUMA nodes, 8 cores, 1 NIC");
}

TEST(HostTopologyTest, GpuBusIdsNumaNodesAndBridges) {
  HostTopology host = LoadTwoSocket();
  const std::vector<std::string> ids = {"0000:19:00.0", "0000:1a:00.0", "0000:99:00.0", "0000:9a:00.0"};
  const std::vector<int> numa = {0, 0, 1, 1};
  std::vector<const PciLocation*> gpus;
  for (size_t i = 0; i < ids.size(); ++i) {
    const PciLocation* location = host.Find(ids[i]);
    ASSERT_NE(location, nullptr) << ids[i];
    EXPECT_EQ(location->bus_id, ids[i]);
    EXPECT_EQ(location->numa_node, numa[i]) << ids[i];
    gpus.push_back(location);
  }
  EXPECT_EQ(gpus[0]->bridges, (std::vector<std::string>{"0000:17:00.0", "0000:18:00.0"}));
  EXPECT_EQ(gpus[1]->bridges, (std::vector<std::string>{"0000:17:00.0", "0000:18:01.0"}));
  EXPECT_EQ(gpus[2]->bridges, (std::vector<std::string>{"0000:97:00.0", "0000:98:00.0"}));
  EXPECT_EQ(gpus[3]->bridges, (std::vector<std::string>{"0000:97:00.0", "0000:98:01.0"}));
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      const bool same_switch = (i == 0 && j == 1) || (i == 2 && j == 3);
      EXPECT_EQ(ShareBridge(*gpus[i], *gpus[j]), same_switch) << i << "-" << j;
    }
  }
  // The NIC hangs directly off a host bridge: no PCI bridge above it.
  const PciLocation* nic = host.Find("0000:30:00.0");
  ASSERT_NE(nic, nullptr);
  EXPECT_TRUE(nic->bridges.empty());
  EXPECT_EQ(nic->numa_node, 0);
}

TEST(HostTopologyTest, NicLocality) {
  HostTopology host = LoadTwoSocket();
  ASSERT_EQ(host.nics.size(), 1u);
  EXPECT_EQ(host.nics[0].name, "eth0");
  EXPECT_EQ(host.nics[0].pci_bus_id, "0000:30:00.0");
  EXPECT_EQ(host.nics[0].numa_node, 0);
}

TEST(HostTopologyTest, FindAcceptsEverySpelling) {
  HostTopology host = LoadTwoSocket();
  const PciLocation* gpu1 = host.Find("0000:1a:00.0");
  ASSERT_NE(gpu1, nullptr);
  EXPECT_EQ(host.Find("1a:00.0"), gpu1);
  EXPECT_EQ(host.Find("1A:00.0"), gpu1);
  EXPECT_EQ(host.Find("0000:1A:00.0"), gpu1);
  EXPECT_EQ(host.Find("00000000:1A:00.0"), gpu1);
  EXPECT_EQ(host.Find("0:1a:0.0"), gpu1);
  // Known spellings of addresses that are not there.
  EXPECT_EQ(host.Find("0000:1a:00.1"), nullptr);
  EXPECT_EQ(host.Find("0001:1a:00.0"), nullptr);
  EXPECT_EQ(host.Find("0000:55:00.0"), nullptr);
  // Bridges are not PCI devices.
  EXPECT_EQ(host.Find("0000:17:00.0"), nullptr);
  // Not PCI addresses at all.
  for (const char* bad : {"", "garbage", "0000:1a:00", "1a.00.0", "0000:1a:00.8", "0000:1a:20.0", "0000:11a:00.0",
                          "000000000:1a:00.0", "0000:1a:00.0 ", "x:1a:00.0", ":1a:00.0", "0000::00.0"}) {
    EXPECT_EQ(host.Find(bad), nullptr) << "'" << bad << "'";
  }
}

TEST(HostTopologyTest, NormalizePciBusId) {
  EXPECT_EQ(NormalizePciBusId("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("3b:00.0"), "0000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("0000:3b:1f.7"), "0000:3b:1f.7");
  EXPECT_EQ(NormalizePciBusId("10000:3b:00.0"), "10000:3b:00.0");
  EXPECT_EQ(NormalizePciBusId("0000:3b:00"), "");
  EXPECT_EQ(NormalizePciBusId("0000:3b:00.0.0"), "");
}

TEST(HostTopologyTest, AssignNumaNodes) {
  HostTopology host = LoadTwoSocket();
  std::vector<GpuDevice> devices = FourGpus();
  devices.push_back(Gpu(4, "0000:55:00.0", 3));  // hwloc does not know it: the vendor's answer stays
  devices.push_back(Gpu(5, "", 2));              // no bus id: the vendor's answer stays
  for (auto& device : devices) {
    if (device.index < 4) device.numa_node = 7;  // a wrong vendor answer hwloc corrects
  }
  AssignNumaNodes(host, &devices);
  std::vector<int> numa;
  for (const auto& device : devices) numa.push_back(device.numa_node);
  EXPECT_EQ(numa, (std::vector<int>{0, 0, 1, 1, 3, 2}));
  AssignNumaNodes(host, nullptr);  // tolerated
}

TEST(HostTopologyTest, MergeLinksFromHwloc) {
  HostTopology host = LoadTwoSocket();
  std::vector<GpuDevice> devices = FourGpus();
  // A fifth "device" at the NIC's address: NUMA 0, no switch shared with GPU 0/1.
  devices.push_back(Gpu(4, "0000:30:00.0"));
  const std::vector<L> expected = {
      F, P, C, C, N,  //
      P, F, C, C, N,  //
      C, C, F, P, C,  //
      C, C, P, F, C,  //
      N, N, C, C, F,  //
  };
  EXPECT_EQ(MergeLinks(host, devices, {}), expected);
}

TEST(HostTopologyTest, MergeLinksVendorFabricWins) {
  HostTopology host = LoadTwoSocket();
  const std::vector<GpuDevice> devices = FourGpus();
  // NVLink between 0 and 2 (across sockets), one direction only; a vendor
  // kPcieSwitch 1-2 is taken; a vendor kSameNuma 1-3 is overruled by hwloc,
  // which knows they are on different sockets.
  std::vector<L> vendor(16, C);
  for (int i = 0; i < 4; ++i) vendor[i * 4 + i] = F;
  vendor[0 * 4 + 2] = F;
  vendor[1 * 4 + 2] = P;
  vendor[2 * 4 + 1] = P;
  vendor[1 * 4 + 3] = N;
  vendor[3 * 4 + 1] = N;
  const std::vector<L> expected = {
      F, P, F, C,  //
      P, F, P, C,  //
      F, P, F, P,  //
      C, C, P, F,  //
  };
  EXPECT_EQ(MergeLinks(host, devices, vendor), expected);

  const std::vector<L> all_fabric(16, F);
  EXPECT_EQ(MergeLinks(host, devices, all_fabric), all_fabric);
}

TEST(HostTopologyTest, MergeLinksIgnoresWrongSizeOrInvalidVendorMatrix) {
  HostTopology host = LoadTwoSocket();
  const std::vector<GpuDevice> devices = FourGpus();
  const std::vector<L> from_hwloc = MergeLinks(host, devices, {});
  ASSERT_EQ(from_hwloc.size(), 16u);
  EXPECT_EQ(MergeLinks(host, devices, std::vector<L>(9, F)), from_hwloc);
  EXPECT_EQ(MergeLinks(host, devices, std::vector<L>(25, F)), from_hwloc);
  EXPECT_EQ(MergeLinks(host, devices, std::vector<L>(16, static_cast<L>(42))), from_hwloc);
  EXPECT_TRUE(MergeLinks(host, {}, {}).empty());
  EXPECT_TRUE(MergeLinks(host, {}, std::vector<L>(4, F)).empty());
}

TEST(HostTopologyTest, MergeLinksFallsBackForDevicesHwlocDoesNotKnow) {
  HostTopology host = LoadTwoSocket();
  // Device 0 is known; 1 has no bus id; 2 has one hwloc never saw.
  const std::vector<GpuDevice> devices = {Gpu(0, "0000:19:00.0", 5), Gpu(1, "", 0), Gpu(2, "0000:55:00.0", 1)};
  // No vendor links: NUMA nodes decide (hwloc's for device 0).
  EXPECT_EQ(MergeLinks(host, devices, {}), (std::vector<L>{F, N, C, N, F, C, C, C, F}));
  // A vendor's kCrossSocket between devices 0 and 1 is taken as is: hwloc
  // cannot tell.
  std::vector<L> vendor = {F, C, N, C, F, N, N, N, F};
  EXPECT_EQ(MergeLinks(host, devices, vendor), (std::vector<L>{F, C, N, C, F, N, N, N, F}));
  // Unknown NUMA nodes never count as the same node.
  const std::vector<GpuDevice> unknown = {Gpu(0, "", -1), Gpu(1, "", -1)};
  EXPECT_EQ(MergeLinks(host, unknown, {}), (std::vector<L>{F, C, C, F}));
}

TEST(HostTopologyTest, NumaCpusFromHwloc) {
  HostTopology host = LoadTwoSocket();
  EXPECT_EQ(host.numa_cpus, (std::map<int, std::vector<int>>{{0, {0, 1, 2, 3}}, {1, {4, 5, 6, 7}}}));
  auto one = DiscoverHostTopology(kTestData + "/one_socket_no_pci.xml");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->numa_cpus, (std::map<int, std::vector<int>>{{0, {0, 1, 2, 3, 4, 5, 6, 7}}}));
}

TEST(HostTopologyTest, CpuLists) {
  EXPECT_EQ(*ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*ParseCpuList("5"), std::vector<int>{5});
  EXPECT_EQ(*ParseCpuList("3,1,1-2"), (std::vector<int>{1, 2, 3}));  // sorted, no repeats
  EXPECT_TRUE(ParseCpuList("")->empty());
  for (const char* bad : {"a", "1-", "-1", "3-1", "1,,2", "1,", "0-99999999", "1 2"}) {
    EXPECT_FALSE(ParseCpuList(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({7}), "7");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList(*ParseCpuList("0-63")), "0-63");
}

TEST(HostTopologyTest, SplitCpus) {
  using V = std::vector<std::vector<int>>;
  EXPECT_EQ(SplitCpus({0, 1, 2, 3, 4, 5, 6, 7}, 2), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(SplitCpus({0, 1, 2}, 2), (V{{0}, {1, 2}}));
  EXPECT_EQ(SplitCpus({0, 1}, 2), (V{{0}, {1}}));
  EXPECT_EQ(SplitCpus({0, 1}, 3), (V{{0}, {1}, {0}}));
  EXPECT_EQ(SplitCpus({4}, 2), (V{{4}, {4}}));
  EXPECT_EQ(SplitCpus({}, 2), (V{{}, {}}));
}

TEST(HostTopologyTest, SysfsNumaCpus) {
  const std::string root = ::testing::TempDir() + "/sysfs-node-" + std::to_string(::getpid());
  std::filesystem::create_directories(root + "/node0");
  std::filesystem::create_directories(root + "/node2");
  std::filesystem::create_directories(root + "/power");
  std::ofstream(root + "/node0/cpulist") << "0-3\n";
  std::ofstream(root + "/node2/cpulist") << "4-5,8\n";
  std::ofstream(root + "/possible") << "0,2\n";
  EXPECT_EQ(ReadSysfsNumaCpus(root), (std::map<int, std::vector<int>>{{0, {0, 1, 2, 3}}, {2, {4, 5, 8}}}));
  EXPECT_TRUE(ReadSysfsNumaCpus(root + "/missing").empty());
  std::filesystem::remove_all(root);
}

TEST(HostTopologyTest, OneSocketWithoutPci) {
  auto host = DiscoverHostTopology(kTestData + "/one_socket_no_pci.xml");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->sockets, 1);
  EXPECT_EQ(host->numa_nodes, 1);
  EXPECT_EQ(host->cores, 4);  // 8 PUs, 2 per core
  EXPECT_TRUE(host->pci.empty());
  EXPECT_TRUE(host->nics.empty());
  EXPECT_EQ(host->Summary(), "1 socket, 1 NUMA node, 4 cores, 0 NICs");
  EXPECT_EQ(host->Find("0000:19:00.0"), nullptr);
  // Everything falls back to the devices' own NUMA nodes.
  const std::vector<GpuDevice> devices = {Gpu(0, "0000:19:00.0", 0), Gpu(1, "0000:1a:00.0", 0),
                                          Gpu(2, "0000:99:00.0", 1)};
  EXPECT_EQ(MergeLinks(*host, devices, {}), (std::vector<L>{F, N, C, N, F, C, C, C, F}));
}

TEST(HostTopologyTest, SummarySingularAndPlural) {
  HostTopology host;
  host.sockets = 1;
  host.numa_nodes = 1;
  host.cores = 1;
  host.nics.push_back(NicInfo{"mlx5_0", "0000:30:00.0", 0});
  EXPECT_EQ(host.Summary(), "1 socket, 1 NUMA node, 1 core, 1 NIC");
  host.sockets = 2;
  host.numa_nodes = 4;
  host.cores = 64;
  host.nics.push_back(NicInfo{"eth0", "", -1});
  EXPECT_EQ(host.Summary(), "2 sockets, 4 NUMA nodes, 64 cores, 2 NICs");
}

TEST(HostTopologyTest, MissingXmlIsUnavailable) {
  const std::string path = kTestData + "/does_not_exist.xml";
  auto host = DiscoverHostTopology(path);
  ASSERT_FALSE(host.ok());
  EXPECT_EQ(host.status().code(), Code::kUnavailable);
  EXPECT_NE(host.status().message().find(path), std::string::npos) << host.status().message();
}

TEST(HostTopologyTest, ThisMachine) {
  auto host = DiscoverHostTopology();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_GE(host->sockets, 1);
  EXPECT_GE(host->numa_nodes, 1);
  EXPECT_GE(host->cores, 1);
  for (const PciLocation& location : host->pci) {
    EXPECT_EQ(NormalizePciBusId(location.bus_id), location.bus_id);
    EXPECT_EQ(host->Find(location.bus_id), &location);
    EXPECT_GE(location.numa_node, -1);
    EXPECT_LT(location.numa_node, 1024);
  }
  // Every NUMA node of a live machine has CPUs (hwloc's, or sysfs's).
  EXPECT_FALSE(host->numa_cpus.empty());
  for (const auto& [node, cpus] : host->numa_cpus) EXPECT_FALSE(cpus.empty()) << "NUMA node " << node;
  for (const NicInfo& nic : host->nics) {
    EXPECT_FALSE(nic.name.empty());
    if (!nic.pci_bus_id.empty()) {
      EXPECT_NE(host->Find(nic.pci_bus_id), nullptr) << nic.name;
    }
  }
}

}  // namespace
}  // namespace drover::agent
