#pragma once
// Messages as proto3 JSON, the way the REST API and the CLI print them:
// what google::protobuf::util::MessageToJsonString writes with
// always_print_primitive_fields (every scalar, empty lists and maps; a field
// with presence, a message or a oneof member only when set), compact.
//
// Why not MessageToJsonString itself: in the protobuf of Debian 12 (3.21)
// that option runs through DefaultValueObjectWriter, which builds a tree of
// nodes for every field of every message and frees it again; a page of 500
// jobs took ~70 ms of server time (perf: malloc/free and that writer), a
// reflection walk writing into one string takes a few (docs/performance.md).
// rpc's json_test checks the two agree, value for value, on every message
// of the API.
//
// Well-known types (google.protobuf.*) are not handled (the API has none):
// a message of one is printed as MessageToJsonString prints it.

#include <google/protobuf/message.h>

#include <string>
#include <string_view>

#include "drover/common/status.h"

namespace drover::rpc {

std::string ToJson(const google::protobuf::Message& m);
void AppendJson(const google::protobuf::Message& m, std::string* out);

}  // namespace drover::rpc
