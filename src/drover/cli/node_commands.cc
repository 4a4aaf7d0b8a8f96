// The node verbs: nodes, gpus, images, drain, undrain and (admin) fault,
// images pull and images load.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "drover/cli/client.h"
#include "drover/cli/commands.h"
#include "drover/cli/node_view.h"
#include "drover/cli/terminal.h"
#include "drover/common/image_ref.h"
#include "drover/common/quantity.h"
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

struct LoadArgs {
  std::string file;
  std::vector<std::string> nodes;
  std::string name;
};

// An archive read as a plain tar: a gzip one is decompressed as it is read
// (zlib reads a file that is not gzip as it is).
class ArchiveFile {
 public:
  explicit ArchiveFile(const std::string& path) : in_(gzopen(path.c_str(), "rb")) {}
  ~ArchiveFile() {
    if (in_ != nullptr) gzclose(in_);
  }
  ArchiveFile(const ArchiveFile&) = delete;
  ArchiveFile& operator=(const ArchiveFile&) = delete;
  bool ok() const { return in_ != nullptr; }
  // The next bytes into `buf` (up to its size); 0 at the end, -1 on an error.
  int64_t Read(std::string* buf) {
    int n = gzread(in_, buf->data(), static_cast<unsigned>(buf->size()));
    return n;
  }
  std::string Error() {
    int code = 0;
    const char* m = gzerror(in_, &code);
    return code == Z_ERRNO ? std::strerror(errno) : m;
  }
  // Its bytes as the server will get them: a gzip archive is read through once.
  int64_t Size(const std::string& path, std::string* buf) {
    if (gzdirect(in_) == 1) {
      std::error_code ec;
      auto size = std::filesystem::file_size(path, ec);
      return ec ? -1 : static_cast<int64_t>(size);
    }
    int64_t total = 0;
    for (int64_t n; (n = Read(buf)) > 0;) total += n;
    if (gzrewind(in_) != 0) return -1;
    return total;
  }

 private:
  gzFile in_;
};

int Load(const LoadArgs& a, const Common& c, bool timeout_given) {
  if (a.nodes.empty()) return Usage("name the nodes to load it onto: --node NAME (repeatable)");
  if (!a.name.empty()) {
    if (auto ref = ParseImageRef(a.name); !ref.ok()) return Usage(ref.status().message());
  }
  ArchiveFile in(a.file);
  if (!in.ok()) {
    std::cerr << fmt::format("error: cannot open '{}': {}\n", EscapeTerminal(a.file), std::strerror(errno));
    return 1;
  }
  std::string buf(1 << 20, '\0');
  const int64_t size = in.Size(a.file, &buf);
  if (size < 0) {
    std::cerr << fmt::format("error: cannot read '{}': {}\n", EscapeTerminal(a.file), in.Error());
    return 1;
  }
  auto stub = v1::NodeService::NewStub(Channel(c));
  v1::LoadImageResponse resp;
  // An upload and the nodes' loads take longer than a call: an hour,
  // unless --timeout says otherwise.
  auto ctx = timeout_given ? Context(c) : std::make_unique<grpc::ClientContext>();
  if (!timeout_given) ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::hours(1));
  auto writer = stub->LoadImage(ctx.get(), &resp);
  v1::LoadImageChunk chunk;
  v1::LoadImageHeader* h = chunk.mutable_header();
  for (const std::string& n : a.nodes) h->add_nodes(n);
  h->set_name(a.name);
  h->set_size_bytes(size);
  bool open = writer->Write(chunk);
  int64_t sent = 0;
  while (open && sent < size) {
    int64_t n = in.Read(&buf);
    if (n < 0) {
      std::cerr << fmt::format("error: cannot read '{}': {}\n", EscapeTerminal(a.file), in.Error());
      ctx->TryCancel();
      return 1;
    }
    if (n == 0) break;
    n = std::min(n, size - sent);
    chunk.set_data(buf.data(), static_cast<size_t>(n));
    open = writer->Write(chunk);
    sent += n;
  }
  if (open) writer->WritesDone();
  grpc::Status st = writer->Finish();
  if (!st.ok()) return Fail(st, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
  } else {
    for (const v1::NodeImageLoad& l : resp.loads()) {
      if (!l.error().empty()) {
        std::cout << fmt::format("{}: not loaded: {}\n", EscapeTerminal(l.node()), EscapeTerminal(l.error()));
        continue;
      }
      std::cout << fmt::format("{}: loaded {} ({}, {})\n", EscapeTerminal(l.node()),
                               EscapeTerminal(fmt::format("{}", fmt::join(l.image().references(), ", "))),
                               EscapeTerminal(l.image().digest()), FormatBytes(l.image().size_bytes()));
    }
  }
  for (const v1::NodeImageLoad& l : resp.loads()) {
    if (!l.error().empty()) return 1;
  }
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
  auto la = std::make_shared<LoadArgs>();
  CLI::App* load = images->add_subcommand(
      "load",
      "admin: load an image from an archive (docker save, podman save; .tar or .tar.gz) into nodes' stores, "
      "for clusters without a registry: drover images load FILE --node N [--name REF]");
  AddCommon(load, common.get(), true);
  load->add_option("file", la->file, "the archive: docker-archive or oci-archive, plain or gzip")->required();
  load->add_option("--node", la->nodes, "a node to load it onto (repeatable; at least one)");
  load->add_option("--name", la->name,
                   "the reference to store it as (default: the one the archive names; needed when it names none, "
                   "or names several images)");
  // One callback for all: CLI11 runs the parent's after the subcommand's.
  images->callback(run([pa, pull, la, load, common] {
    if (pull->parsed()) return Pull(*pa, *common);
    if (load->parsed()) return Load(*la, *common, load->get_option("--timeout")->count() > 0);
    return Images(*common);
  }));

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
