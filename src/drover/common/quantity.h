#pragma once
// Resource quantities as integers: bytes for memory, milli-GPU for fractions.

#include <cstdint>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover {

inline constexpr int64_t kKiB = 1024;
inline constexpr int64_t kMiB = 1024 * kKiB;
inline constexpr int64_t kGiB = 1024 * kMiB;
inline constexpr int64_t kTiB = 1024 * kGiB;

// Parses "10GiB", "512Mi", "1.5GB", "80G", "4096" (bytes). Binary suffixes
// (Ki, Mi, Gi, Ti, with or without a trailing B) are powers of 1024; decimal
// ones (K/KB, M/MB, G/GB, T/TB) powers of 1000, as kubectl reads them.
// Negative, empty, malformed and out-of-range values (over 1 PiB) are errors.
Result<int64_t> ParseBytes(std::string_view text);

// 85899345920 -> "80GiB"; 1536 -> "1.5KiB"; 0 -> "0B".
std::string FormatBytes(int64_t bytes);

// A GPU share in thousandths: 1000 is one whole GPU, 250 a quarter.
inline constexpr int64_t kMilliGpuPerGpu = 1000;

// Parses "2" (2000), "0.25" (250), "500m" (500).
Result<int64_t> ParseMilliGpu(std::string_view text);
std::string FormatMilliGpu(int64_t milli);

// Seconds in the largest unit that keeps it whole: 7200 -> "2h", 1800 ->
// "30m", 90 -> "90s", 86400 -> "1d".
std::string FormatSeconds(int64_t s);

// A job array's indices: FIRST-LAST[:STEP][%MAX], e.g. "1-100%10". step 0
// means 1; max_running 0 means no limit.
struct ArrayRange {
  int64_t first = 0;
  int64_t last = 0;
  int64_t step = 0;
  int32_t max_running = 0;
};
Result<ArrayRange> ParseArrayRange(std::string_view text);

}  // namespace drover
