#pragma once
// Identifiers. Job ids are "j-" and a zero-padded sequence number, so that
// they sort in submission order and are short to type: j-000042.
// Node names follow DNS label rules (RFC 1123), like Kubernetes node names.

#include <cstdint>
#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover {

std::string FormatJobId(uint64_t sequence);
// "j-000042" -> 42. Anything else is an invalid argument.
Result<uint64_t> ParseJobId(std::string_view id);
// A job array is named by its first task's sequence number: "a-000042"
// holds j-000042, j-000043, ...
std::string FormatArrayId(uint64_t first_task_sequence);
Result<uint64_t> ParseArrayId(std::string_view id);

// Lower-case letters, digits, '-' and '.', 1-63 characters, starting and
// ending with a letter or digit.
Status ValidateNodeName(std::string_view name);
// Same rules as node names, used for tenants and job names (job names may be empty).
Status ValidateName(std::string_view what, std::string_view name);
// An image archive's load id (NodeService.LoadImage): base64url, 1-64
// characters, safe as a file name.
bool ValidLoadId(std::string_view id);

}  // namespace drover
