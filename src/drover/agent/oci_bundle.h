#pragma once
// The OCI runtime configuration (config.json of a bundle) of a container
// workload, made by the agent and run by runc under the job's supervisor
// (docs/containers.md). Pure: inputs in, JSON out, so that tests read what
// a container would get without starting one.
//
// What a container gets, beside its image's root file system (an overlay
// the supervisor mounts: the image read-only below, the job's writable
// layer above, nodev and nosuid so that a device node or a setuid file in
// a layer is inert):
//   - its own mount, PID, IPC and UTS namespaces; the node's network unless
//     it asked for none (then a namespace with only loopback);
//   - the user of the job sandbox (sandbox.h): a tenant's own uid with no
//     capabilities and no_new_privs, or for a tenant that may run as root,
//     the image's user with the capabilities docker gives by default;
//   - the system-call filter of the sandbox (seccomp_profile.h) in OCI form;
//   - /proc with runc's masked and read-only paths, a read-only /sys, a
//     /dev of its own with only the standard devices and its GPUs' nodes,
//     a /dev/shm of the size asked (not 64 MB), the node's resolv.conf and
//     hosts on the host network;
//   - its binds: the job's checkpoint directory, the memory-limit shim and
//     its report directory, the user's mounts;
//   - its cgroup: the job's (cgroupsPath), its memory and CPU limits where
//     the node has the controllers, its CPUs, and a device list that allows
//     only its own devices;
//   - rlimits at the node's hard limits for open files and locked memory
//     (RDMA libraries lock their buffers), not podman's defaults that fail
//     on these hosts.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "drover/agent/image_store.h"
#include "drover/common/status.h"

namespace drover::agent {

struct BindMount {
  std::string source;
  std::string target;
  bool read_only = false;
};

struct DeviceNode {
  std::string path;  // in the container
  char type = 'c';
  uint32_t major = 0, minor = 0;
  uint32_t file_mode = 0666;
};

struct ContainerInputs {
  std::vector<std::string> args;  // the process: entrypoint and command resolved
  std::vector<std::string> env;   // "K=V", the whole environment
  std::string cwd = "/";
  bool as_root = false;  // the image's user with docker's default capabilities
  uint32_t uid = 0, gid = 0;
  std::string seccomp_json;  // the OCI "seccomp" object; empty: none
  std::string hostname;
  bool network_none = false;
  int64_t shm_bytes = 0;
  int64_t memory_bytes = 0;  // 0: no limit
  int64_t cpu_millis = 0;    // 0: no limit
  std::vector<int> cpus;     // empty: not pinned
  std::string cgroups_path;  // empty: runc's default
  std::vector<BindMount> binds;
  std::vector<DeviceNode> devices;
  uint64_t nofile = 1024;  // soft = hard
  uint64_t memlock = 64 << 10;
};

// The process of a container: the image's entrypoint followed by the job's
// command, or by the image's command when the job gives none (docker run's
// rule); kInvalidArgument when nothing is left to run.
Result<std::vector<std::string>> ContainerArgs(const ImageConfig& image, const std::vector<std::string>& command);

// The environment: the image's, then `job` over it (the job's own and
// Drover's variables win).
std::vector<std::string> ContainerEnv(const ImageConfig& image, const std::map<std::string, std::string>& job);

// /dev/shm's size: asked, else half the job's memory, else 1 GiB.
int64_t ShmBytes(int64_t asked, int64_t memory_bytes);

// config.json for `in`, its root file system at "rootfs" in the bundle.
std::string RuntimeSpecJson(const ContainerInputs& in);

// A runc container id for workload `key` ([A-Za-z0-9_.-], unique per key).
std::string ContainerId(const std::string& key);

}  // namespace drover::agent
