// A REST job submission: POST /api/v1/jobs parses the body with protobuf's
// JSON mapping into a SubmitJobRequest (server/rest.cc FromJson, unknown
// fields refused), then checks and fills in the spec with
// rpc::NormalizeJobSpec. Both steps see the body as sent.
//
// Properties: a spec NormalizeJobSpec accepts is a fixed point of it (the
// control loop and recovery normalize again), survives the JSON round trip
// the REST replies make, and converts to a scheduler request within the
// limits of convert.h.

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "drover/rpc/convert.h"
#include "fuzz_util.h"

namespace {

namespace pbutil = google::protobuf::util;
using drover::fuzz::AsText;
namespace rpc = drover::rpc;
namespace v1 = drover::v1;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(AsText(data, size));
  v1::SubmitJobRequest request;
  pbutil::JsonParseOptions parse;
  parse.ignore_unknown_fields = false;  // as FromJson
  if (!pbutil::JsonStringToMessage(body, &request, parse).ok()) return 0;

  v1::JobSpec spec = request.spec();
  drover::Status status = rpc::NormalizeJobSpec(&spec);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == drover::Code::kInvalidArgument);
    FUZZ_CHECK(!status.message().empty());
    return 0;
  }

  v1::JobSpec again = spec;
  FUZZ_CHECK(rpc::NormalizeJobSpec(&again).ok());
  FUZZ_CHECK(pbutil::MessageDifferencer::Equals(again, spec));

  // What GET /api/v1/jobs/{id} prints must parse back to the same spec.
  std::string json;
  pbutil::JsonPrintOptions print;
  print.always_print_primitive_fields = true;
  FUZZ_CHECK(pbutil::MessageToJsonString(spec, &json, print).ok());
  v1::JobSpec back;
  FUZZ_CHECK(pbutil::JsonStringToMessage(json, &back, parse).ok());
  FUZZ_CHECK(pbutil::MessageDifferencer::Equals(back, spec));

  drover::sched::JobRequest r = rpc::ToJobRequest("j-000001", spec);
  FUZZ_CHECK(r.gpus >= 0 && r.gpus <= rpc::kMaxGpusPerJob);  // 0: CPU-only
  FUZZ_CHECK(r.replicas >= 1 && r.replicas <= rpc::kMaxReplicas);
  FUZZ_CHECK(r.gpu_milli >= 1 && r.gpu_milli <= drover::sched::kWholeGpu);
  FUZZ_CHECK(r.gpu_milli == drover::sched::kWholeGpu || (r.gpus == 1 && r.replicas == 1 && r.gpu_memory_bytes > 0));
  FUZZ_CHECK(r.priority >= 0 && r.priority <= rpc::kMaxPriority);
  FUZZ_CHECK(r.runtime_estimate_ms >= 0 && r.runtime_estimate_ms <= rpc::kMaxEstimateSeconds * 1000);
  FUZZ_CHECK(static_cast<int>(r.node_selector.size()) <= rpc::kMaxSelectorLabels);
  return 0;
}
