// What gRPC peers send, in protobuf's binary form: an agent's
// RegisterRequest and session messages (AgentService), and a client's
// SubmitJobRequest (JobService.Submit). The first byte picks the message;
// the rest is its wire bytes.
//
// Properties: a registration rpc::ValidateRegister accepts is one the
// scheduler takes (ToNodeInfo, then Scheduler::UpsertNode) and whose GPUs
// render as metrics; a heartbeat ValidateHeartbeat accepts has at most the
// registered GPUs; a workload id ParseWorkloadId accepts reads back the same
// from WorkloadId; a submitted spec NormalizeJobSpec accepts is a fixed
// point of it.

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include "drover/common/metrics.h"
#include "drover/rpc/convert.h"
#include "drover/rpc/gpu_metrics.h"
#include "drover/sched/scheduler.h"
#include "fuzz_util.h"

namespace {

namespace rpc = drover::rpc;
namespace sched = drover::sched;
namespace v1 = drover::v1;

void Register(const uint8_t* data, size_t size) {
  v1::RegisterRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return;
  drover::Status s = rpc::ValidateRegister(req);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == drover::Code::kInvalidArgument);
    return;
  }
  // The control loop stores the registration as a Node (control_loop_nodes.cc).
  v1::Node node;
  node.set_name(req.node_name());
  *node.mutable_gpus() = req.gpus();
  node.set_cpu_millis(req.cpu_millis());
  node.set_memory_bytes(req.memory_bytes());
  *node.mutable_labels() = req.labels();
  *node.mutable_links() = req.links();
  *node.mutable_topology() = req.topology();
  sched::Scheduler scheduler;
  drover::Status upsert = scheduler.UpsertNode(rpc::ToNodeInfo(node, true));
  if (!upsert.ok()) {
    std::fprintf(stderr, "validated registration refused by the scheduler: %s\n", upsert.message().c_str());
    FUZZ_CHECK(upsert.ok());
  }
  drover::metrics::Exposition out;
  for (const v1::Gpu& gpu : node.gpus()) rpc::WriteGpuMetrics(node.name(), gpu, out);
  (void)out.Text();
}

void WorkloadIdRoundTrip(const std::string& id) {
  auto ref = rpc::ParseWorkloadId(id);
  if (!ref.ok()) return;
  FUZZ_CHECK(ref->replica >= 0 && ref->replica < rpc::kMaxReplicas);
  FUZZ_CHECK(rpc::WorkloadId(ref->job_id, ref->replica, ref->gang ? rpc::kMaxReplicas : 1, ref->attempt) == id);
}

void Session(const uint8_t* data, size_t size) {
  v1::AgentMessage msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return;
  if (msg.has_heartbeat()) {
    // The registered GPU count comes from the heartbeat's time, so that the
    // fuzzer can reach every count.
    const int gpus = static_cast<int>(static_cast<uint64_t>(msg.heartbeat().time_unix_nanos()) % 65);
    if (rpc::ValidateHeartbeat("node-1", gpus, msg.heartbeat()).ok()) {
      FUZZ_CHECK(msg.heartbeat().gpus_size() <= gpus);
    }
  } else if (msg.has_status()) {
    for (const v1::WorkloadStatus& w : msg.status().workloads()) {
      WorkloadIdRoundTrip(w.workload_id().empty() ? w.job_id() : w.workload_id());
    }
  }
}

void Submit(const uint8_t* data, size_t size) {
  v1::SubmitJobRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return;
  v1::JobSpec spec = req.spec();
  if (!rpc::NormalizeJobSpec(&spec).ok()) return;
  v1::JobSpec again = spec;
  FUZZ_CHECK(rpc::NormalizeJobSpec(&again).ok());
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(again, spec));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Strings that are not UTF-8 fail the parse, and protobuf logs each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0: Register(data + 1, size - 1); break;
    case 1: Session(data + 1, size - 1); break;
    default: Submit(data + 1, size - 1); break;
  }
  return 0;
}
