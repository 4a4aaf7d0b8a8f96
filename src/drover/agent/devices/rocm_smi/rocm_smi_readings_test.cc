// The pure parts of the rocm-smi backend: PCI address decoding, string
// cleaning and error messages, without any library.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "drover/agent/devices/rocm_smi/rocm_smi_api.h"
#include "drover/agent/devices/rocm_smi/rocm_smi_readings.h"

namespace drover::agent::rocm_smi {
namespace {

TEST(FormatPciBusIdTest, DecodesTheBdfidLayoutOfTheHeader) {
  EXPECT_EQ(FormatPciBusId(0), "0000:00:00.0");
  // Bus 0x3b, device 0, function 0.
  EXPECT_EQ(FormatPciBusId(0x3b00), "0000:3b:00.0");
  // Domain 1, bus 0xff, device 0x1f, function 7.
  EXPECT_EQ(FormatPciBusId((1ULL << 32) | (0xffULL << 8) | (0x1fULL << 3) | 7), "0001:ff:1f.7");
  // Device 2 function 1 share the low byte: 2 << 3 | 1 = 0x11.
  EXPECT_EQ(FormatPciBusId(0xc111), "0000:c1:02.1");
  // Reserved bits 31..16 (a partition id in newer ROCm) are ignored.
  EXPECT_EQ(FormatPciBusId(0xF0FF0300ULL), "0000:03:00.0");
  // A 32-bit domain (VMD) keeps all its digits.
  EXPECT_EQ(FormatPciBusId(0x10000ULL << 32), "10000:00:00.0");
}

TEST(ReadStringTest, TrimsWhiteSpaceAndReplacesControlCharacters) {
  auto read = [](const char* value, rsmi_status_t status) {
    return ReadString([&](char* buffer, uint32_t length) {
      std::snprintf(buffer, length, "%s", value);
      return status;
    });
  };
  EXPECT_EQ(read(" \t MI300X \r\n", RSMI_STATUS_SUCCESS), "MI300X");
  EXPECT_EQ(read("a\tb", RSMI_STATUS_SUCCESS), "a?b");
  EXPECT_EQ(read("   ", RSMI_STATUS_SUCCESS), "");
  EXPECT_EQ(read("truncated", RSMI_STATUS_INSUFFICIENT_SIZE), "truncated");
  EXPECT_EQ(read("ignored", RSMI_STATUS_NOT_SUPPORTED), "");
  // A library that fills the whole buffer without a terminator.
  std::string unterminated = ReadString([](char* buffer, uint32_t length) {
    for (uint32_t i = 0; i < length; ++i) buffer[i] = 'x';
    return RSMI_STATUS_SUCCESS;
  });
  EXPECT_EQ(unterminated.size(), 256u);
}

TEST(RsmiErrorTest, NamesTheCallTheDeviceAndTheStatus) {
  RocmSmiApi none;  // no rsmi_status_string
  EXPECT_EQ(RsmiError(none, "rsmi_dev_power_ave_get", RSMI_STATUS_NOT_FOUND, 3),
            "rsmi_dev_power_ave_get on device 3: RSMI_STATUS_NOT_FOUND (10)");
  EXPECT_EQ(RsmiError(none, "rsmi_init", RSMI_STATUS_INIT_ERROR), "rsmi_init: RSMI_STATUS_INIT_ERROR (8)");
  EXPECT_EQ(RsmiError(none, "rsmi_init", RSMI_STATUS_UNKNOWN_ERROR),
            "rsmi_init: RSMI_STATUS_UNKNOWN_ERROR (4294967295)");
  EXPECT_EQ(RsmiError(none, "rsmi_init", static_cast<rsmi_status_t>(77)), "rsmi_init: unknown status (77)");
}

TEST(RsmiErrorTest, AddsTheLibrarysTextWithoutRepeatingTheName) {
  RocmSmiApi api;
  api.rsmi_status_string = [](rsmi_status_t status, const char** text) {
    *text = status == RSMI_STATUS_NOT_FOUND ? "RSMI_STATUS_NOT_FOUND: An item was not found\n" : "Something else";
    return RSMI_STATUS_SUCCESS;
  };
  EXPECT_EQ(RsmiError(api, "rsmi_dev_busy_percent_get", RSMI_STATUS_NOT_FOUND, 0),
            "rsmi_dev_busy_percent_get on device 0: RSMI_STATUS_NOT_FOUND (10): An item was not "
            "found");
  EXPECT_EQ(RsmiError(api, "rsmi_init", RSMI_STATUS_BUSY), "rsmi_init: RSMI_STATUS_BUSY (16): Something else");
  api.rsmi_status_string = [](rsmi_status_t, const char** text) {
    *text = nullptr;
    return RSMI_STATUS_SUCCESS;
  };
  EXPECT_EQ(RsmiError(api, "rsmi_init", RSMI_STATUS_BUSY), "rsmi_init: RSMI_STATUS_BUSY (16)");
}

}  // namespace
}  // namespace drover::agent::rocm_smi
