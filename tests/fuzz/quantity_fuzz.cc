// The small text parsers of common/ that read flags, config values, REST
// paths and CLI arguments: sizes (ParseBytes), GPU shares (ParseMilliGpu),
// durations (ParseDurationMs), booleans (ParseBool), job ids (ParseJobId),
// names (ValidateName) and image references (ParseImageRef). Each sees the
// whole input.
//
// Properties: results lie within the documented bounds, and formatting a
// parsed value reads back as the same value (FormatMilliGpu, FormatJobId,
// FormatBytes of whole units).

#include "drover/common/config.h"
#include "drover/common/ids.h"
#include "drover/common/image_ref.h"
#include "drover/common/quantity.h"
#include "fuzz_util.h"

namespace {

using drover::fuzz::AsText;

constexpr int64_t kPiB = 1024 * drover::kTiB;
constexpr int64_t kTenYearsMs = int64_t{10} * 366 * 86'400'000;

void Bytes(std::string_view text) {
  auto b = drover::ParseBytes(text);
  if (!b.ok()) return;
  FUZZ_CHECK(*b >= 0 && *b <= kPiB);
  // FormatBytes rounds to a tenth of its unit ("1.3KiB" is 1331 bytes and
  // does not parse back), and writes 1 PiB as "1PiB", a unit ParseBytes does
  // not take; a whole number of KiB ... TiB reads back exactly.
  std::string formatted = drover::FormatBytes(*b);
  if (formatted.find('.') == std::string::npos && *b < kPiB) {
    auto back = drover::ParseBytes(formatted);
    FUZZ_CHECK(back.ok() && *back == *b);
  }
}

void MilliGpu(std::string_view text) {
  auto m = drover::ParseMilliGpu(text);
  if (!m.ok()) return;
  FUZZ_CHECK(*m >= 0 && *m <= 1'000'000'000);
  auto back = drover::ParseMilliGpu(drover::FormatMilliGpu(*m));
  FUZZ_CHECK(back.ok() && *back == *m);
}

void Duration(std::string_view text) {
  auto d = drover::ParseDurationMs(text);
  if (!d.ok()) return;
  FUZZ_CHECK(*d >= 0 && *d <= kTenYearsMs);
  auto back = drover::ParseDurationMs(std::to_string(*d) + "ms");
  FUZZ_CHECK(*d == 0 || (back.ok() && *back == *d));
}

void Bool(std::string_view text) {
  auto b = drover::ParseBool(text);
  if (!b.ok()) return;
  FUZZ_CHECK(text.size() <= 5);
  auto back = drover::ParseBool(*b ? "true" : "false");
  FUZZ_CHECK(back.ok() && *back == *b);
}

void JobId(std::string_view text) {
  auto id = drover::ParseJobId(text);
  if (!id.ok()) return;
  FUZZ_CHECK(*id > 0);
  auto back = drover::ParseJobId(drover::FormatJobId(*id));
  FUZZ_CHECK(back.ok() && *back == *id);
}

// A reference that parses has a normal form that parses to itself.
void Image(std::string_view text) {
  auto r = drover::ParseImageRef(text);
  if (!r.ok()) return;
  const std::string normal = r->String();
  FUZZ_CHECK(normal.size() <= drover::kMaxImageRefLength && !r->registry.empty() && !r->repository.empty());
  auto again = drover::ParseImageRef(normal);
  FUZZ_CHECK(again.ok() && again->String() == normal);
}

void Name(std::string_view text) {
  if (!drover::ValidateName("name", text).ok()) return;
  FUZZ_CHECK(!text.empty() && text.size() <= 63);
  for (char c : text) FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.');
  FUZZ_CHECK(drover::ValidateNodeName(text).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = AsText(data, size);
  Bytes(text);
  MilliGpu(text);
  Duration(text);
  Bool(text);
  JobId(text);
  Name(text);
  Image(text);
  (void)drover::EnvNameFor(text);
  return 0;
}
