#pragma once
// The node's GPUs as a Container Device Interface spec (CDI,
// github.com/cncf-tags/container-device-interface): how GPUs get into
// containers today (podman >= 4.1, containerd, Docker 25 read it; the GPU
// Operator writes it). The agent describes the devices it found, one CDI
// device per GPU index, kind "drover.dev/gpu": each GPU's own device nodes
// (or, for a GPU without any, a simulated one, the stand-in
// /dev/drover-gpu<index> on /dev/null's numbers) and the vendors' shared
// control files it needs. The agent writes the spec where podman looks
// (--cdi-dir), and, since runc applies no CDI itself, applies the edits of
// a container's own GPUs to its bundle (CdiEditsFor, oci_bundle.h).
//
// cdiVersion 0.5.0: the newest podman 4.3 (Debian 12) reads (it ignores a
// 0.6.0 spec as unresolvable).
//
// Pure; not thread-safe (owned by the node inventory).

#include <string>
#include <vector>

#include "drover/agent/oci_bundle.h"

namespace drover::agent {

inline constexpr const char* kCdiKind = "drover.dev/gpu";
inline constexpr const char* kCdiVersion = "0.5.0";

struct CdiDeviceNode {
  std::string path;       // in the container
  std::string host_path;  // on the node (empty: `path`)
  DeviceNode node;        // type and numbers, read from host_path
};

struct CdiDevice {
  std::string name;  // the GPU's index on the node: "0", "1" ...
  std::vector<CdiDeviceNode> nodes;
};

struct CdiSpec {
  std::vector<CdiDevice> devices;
};

// The spec as JSON (the CDI schema's field names).
std::string CdiSpecJson(const CdiSpec& spec);

// The device nodes of `names` (each once, in order), as a bundle takes them.
std::vector<DeviceNode> CdiEditsFor(const CdiSpec& spec, const std::vector<std::string>& names);

}  // namespace drover::agent
