// The node verbs: nodes, gpus, images, drain, undrain and (admin) fault and
// images pull.

#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "drover/cli/client.h"
#include "drover/cli/commands.h"
#include "drover/cli/node_view.h"
#include "drover/cli/terminal.h"
#include "drover/common/image_ref.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::cli {
namespace {

// `drover gpus -o json`: one flat list, each GPU with its node's name.
void PrintGpusJson(const v1::ListNodesResponse& resp) {
  std::string out = "[";
  bool first = true;
  for (const auto& n : resp.nodes()) {
    for (const auto& g : n.gpus()) {
      std::string one = Json(g);
      // The name as a JSON string (quotes, backslashes and controls escaped).
      std::string name = nlohmann::json(n.name()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      one.insert(1, fmt::format("\n  \"node\": {},", name));
      out += (first ? "\n" : ",\n") + one;
      first = false;
    }
  }
  std::cout << EscapeJsonForTerminal(out) << "]\n";
}

int Nodes(const Common& c, bool gpus_view) {
  auto stub = v1::NodeService::NewStub(Channel(c));
  v1::ListNodesResponse resp;
  auto ctx = Context(c);
  grpc::Status st = stub->List(ctx.get(), v1::ListNodesRequest(), &resp);
  if (!st.ok()) return Fail(st, c);
  bool wide = c.output == "wide";
  if (c.output == "json") {
    if (gpus_view) {
      PrintGpusJson(resp);
    } else {
      std::cout << Json(resp) << "\n";
    }
    return 0;
  }
  if (gpus_view) {
    PrintGpuTable(resp, wide, std::cout);
  } else {
    PrintNodeTable(resp, wide, NowNanos(), std::cout);
  }
  return 0;
}

int NodeAction(const std::string& name, bool drain, bool requeue, const Common& c) {
  auto stub = v1::NodeService::NewStub(Channel(c));
  v1::DrainNodeRequest req;
  req.set_name(name);
  req.set_requeue(requeue);
  v1::Node node;
  auto ctx = Context(c);
  grpc::Status st = drain ? stub->Drain(ctx.get(), req, &node) : stub->Undrain(ctx.get(), req, &node);
  if (!st.ok()) return Fail(st, c);
  std::cout << fmt::format("node/{} {}{}\n", EscapeTerminal(name), drain ? "drained" : "undrained",
                           requeue ? "; its jobs are checkpointed, stopped and queued again" : "");
  return 0;
}

struct FaultArgs {
  std::string node;
  int gpu = 0;
  std::string fault;
};

// The server checks the fault text (it knows which faults the simulated
// backend can play) and that the GPU is simulated: an unknown fault or a
// real GPU is a usage error (2), an unknown node not found (3).
int Fault(const FaultArgs& a, const Common& c) {
  auto stub = v1::NodeService::NewStub(Channel(c));
  v1::InjectFaultRequest req;
  req.set_node(a.node);
  req.set_gpu_index(a.gpu);
  req.set_fault(a.fault);
  v1::InjectFaultResponse resp;
  auto ctx = Context(c);
  grpc::Status st = stub->InjectFault(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(st, c);
  std::cout << fmt::format("fault '{}' sent to gpu {} of node '{}'\n", EscapeTerminal(a.fault), a.gpu,
                           EscapeTerminal(a.node));
  return 0;
}

int Images(const Common& c) {
  auto stub = v1::NodeService::NewStub(Channel(c));
  v1::ListNodesResponse resp;
  auto ctx = Context(c);
  grpc::Status st = stub->List(ctx.get(), v1::ListNodesRequest(), &resp);
  if (!st.ok()) return Fail(st, c);
  if (c.output == "json") {
    // One flat list, each image with its node's name.
    nlohmann::json out = nlohmann::json::array();
    for (const v1::Node& n : resp.nodes()) {
      for (const v1::NodeImage& im : n.images()) {
        out.push_back({{"node", n.name()},
                       {"references", std::vector<std::string>(im.references().begin(), im.references().end())},
                       {"digest", im.digest()},
                       {"sizeBytes", im.size_bytes()},
                       {"inUse", im.in_use()},
                       {"lastUsedUnixNanos", im.last_used_unix_nanos()}});
      }
    }
    std::cout << EscapeJsonForTerminal(out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) << "\n";
    return 0;
  }
  PrintImageTable(resp, c.output == "wide", NowNanos(), std::cout);
  return 0;
}

struct PullArgs {
  std::string reference;
  std::vector<std::string> nodes;
  std::string pull;
};

int Pull(const PullArgs& a, const Common& c) {
  // The server checks the reference and the policy too; a typo is caught here first.
  if (auto ref = ParseImageRef(a.reference); !ref.ok()) return Usage(ref.status().message());
  if (!a.pull.empty() && a.pull != "if-not-present" && a.pull != "always") {
    return Usage(fmt::format("--pull '{}' is unknown (use if-not-present or always)", a.pull));
  }
  auto stub = v1::NodeService::NewStub(Channel(c));
  v1::PullImageRequest req;
  req.set_reference(a.reference);
  for (const std::string& n : a.nodes) req.add_nodes(n);
  req.set_pull_policy(a.pull);
  v1::PullImageResponse resp;
  auto ctx = Context(c);
  grpc::Status st = stub->PullImage(ctx.get(), req, &resp);
  if (!st.ok()) return Fail(st, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  std::cout << fmt::format("image '{}' is being pulled by {} node{}: {}\n", EscapeTerminal(a.reference),
                           resp.nodes_size(), resp.nodes_size() == 1 ? "" : "s",
                           EscapeTerminal(fmt::format("{}", fmt::join(resp.nodes(), ", "))));
  std::cout << "`drover images` shows it once in a node's store\n";
  return 0;
}

}  // namespace

void AddNodeCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common) {
  CLI::App* nodes = app.add_subcommand("nodes", "list nodes: GPU health, conditions and host topology");
  AddCommon(nodes, common.get(), true);
  nodes->callback(run([common] { return Nodes(*common, false); }));

  CLI::App* gpus = app.add_subcommand("gpus", "list every GPU of every node (-o wide: live telemetry)");
  AddCommon(gpus, common.get(), true);
  gpus->callback(run([common] { return Nodes(*common, true); }));

  CLI::App* images = app.add_subcommand("images", "every node's image store (-o wide: whole digests); images pull");
  AddCommon(images, common.get(), true);
  auto pa = std::make_shared<PullArgs>();
  CLI::App* pull = images->add_subcommand(
      "pull", "admin: pull an image into nodes' stores ahead of jobs: drover images pull REF [--node N]...");
  AddCommon(pull, common.get(), false);
  pull->add_option("reference", pa->reference, "the image: busybox, vllm/vllm-openai:v0.6.3, ...")->required();
  pull->add_option("--node", pa->nodes, "a node to pull it (repeatable; default: every ready node)");
  pull->add_option("--pull", pa->pull, "if-not-present (the default) or always (resolve the tag again)");
  // One callback for both: CLI11 runs the parent's after the subcommand's.
  images->callback(run([pa, pull, common] { return pull->parsed() ? Pull(*pa, *common) : Images(*common); }));

  auto node = std::make_shared<std::string>();
  auto requeue = std::make_shared<bool>(false);
  for (bool drain : {true, false}) {
    CLI::App* cmd = app.add_subcommand(drain ? "drain" : "undrain",
                                       drain ? "stop placing new jobs on a node" : "let a node take new jobs again");
    AddCommon(cmd, common.get(), false);
    cmd->add_option("node", *node, "node name")->required();
    if (drain) {
      cmd->add_flag("--requeue", *requeue,
                    "also move its jobs away: checkpoint signal, stop, queue again (not counted as a restart)");
    }
    cmd->callback(run([node, drain, requeue, common] { return NodeAction(*node, drain, *requeue, *common); }));
  }

  auto fa = std::make_shared<FaultArgs>();
  CLI::App* fault = app.add_subcommand(
      "fault", "admin: inject a fault into a simulated GPU: drover fault NODE GPU xid:79|xid|ecc|lost|overheat|clear");
  AddCommon(fault, common.get(), false);
  fault->add_option("node", fa->node, "node name")->required();
  fault->add_option("gpu", fa->gpu, "GPU index on the node")->required();  // the server names the GPUs it has
  fault->add_option("fault", fa->fault, "xid:CODE, xid (79), ecc, lost, overheat or clear")->required();
  fault->callback(run([fa, common] { return Fault(*fa, *common); }));
}

}  // namespace drover::cli
