#include "drover/agent/device_filter.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "drover/agent/devices/topology/host_topology.h"
#include "drover/common/files.h"

namespace drover::agent {
namespace {

// One BPF instruction (struct bpf_insn has bit-fields for the registers).
bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// The program, for struct bpf_cgroup_dev_ctx { u32 access_type (access <<
// 16 | type); u32 major; u32 minor; } in r1:
//
//   r2 = ctx->access_type & 0xffff; r3 = ctx->major; r4 = ctx->minor
//   for each rule: if (r2 == type && r3 == major && r4 == minor) return 0
//   return 1
//
// 0 refuses the access, 1 allows it.
std::vector<bpf_insn> DenyProgram(const std::vector<DeviceRule>& deny) {
  std::vector<bpf_insn> p;
  p.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0));
  p.push_back(Insn(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff));
  p.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0));
  p.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0));
  for (const DeviceRule& r : deny) {
    int32_t type = r.type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR;
    // Each jump skips to the next rule: past the remaining compares and the
    // two instructions of "return 0".
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 4, type));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 3, static_cast<int32_t>(r.major)));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 2, static_cast<int32_t>(r.minor)));
    p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));
    p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1));
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

long Bpf(int cmd, bpf_attr* attr) { return ::syscall(SYS_bpf, cmd, attr, sizeof(*attr)); }

// Loads `deny`'s program; returns its fd.
Result<int> Load(const std::vector<DeviceRule>& deny) {
  std::vector<bpf_insn> program = DenyProgram(deny);
  static const char kLicense[] = "Apache-2.0";
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<uint64_t>(program.data());
  attr.insn_cnt = static_cast<uint32_t>(program.size());
  attr.license = reinterpret_cast<uint64_t>(kLicense);
  long fd = Bpf(BPF_PROG_LOAD, &attr);
  if (fd < 0) return Unavailable(fmt::format("cannot load a cgroup device program: {}", std::strerror(errno)));
  return static_cast<int>(fd);
}

Status Attach(const std::string& cgroup_dir, const std::vector<DeviceRule>& deny, bool detach_after) {
  auto prog = Load(deny);
  if (!prog.ok()) return prog.status();
  ScopedFd prog_fd(*prog);
  ScopedFd group(::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (group.get() < 0) return Unavailable(fmt::format("cannot open cgroup '{}': {}", cgroup_dir, std::strerror(errno)));
  bpf_attr attr{};
  attr.target_fd = static_cast<uint32_t>(group.get());
  attr.attach_bpf_fd = static_cast<uint32_t>(prog_fd.get());
  attr.attach_type = BPF_CGROUP_DEVICE;
  attr.attach_flags = BPF_F_ALLOW_MULTI;
  if (Bpf(BPF_PROG_ATTACH, &attr) != 0) {
    return Unavailable(
        fmt::format("cannot attach a device program to cgroup '{}': {}", cgroup_dir, std::strerror(errno)));
  }
  if (detach_after) {
    attr.attach_flags = 0;
    (void)Bpf(BPF_PROG_DETACH, &attr);
  }
  return Status::Ok();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<DeviceRule> DeviceRuleOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) return std::nullopt;
  return DeviceRule{S_ISBLK(st.st_mode) ? 'b' : 'c', major(st.st_rdev), minor(st.st_rdev)};
}

Status AttachDeviceFilter(const std::string& cgroup_dir, const std::vector<DeviceRule>& deny) {
  return Attach(cgroup_dir, deny, /*detach_after=*/false);
}

Status ProbeDeviceFilter(const std::string& cgroup_dir) { return Attach(cgroup_dir, {}, /*detach_after=*/true); }

int NvidiaDeviceMinor(std::string_view information) {
  constexpr std::string_view kKey = "Device Minor:";
  size_t at = information.find(kKey);
  if (at == std::string_view::npos) return -1;
  std::string_view rest = information.substr(at + kKey.size());
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  int minor = -1;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), minor);
  if (ec != std::errc() || minor < 0) return -1;
  (void)end;
  return minor;
}

std::vector<std::string> GpuDeviceFiles(const std::string& pci_bus_id, const std::string& proc,
                                        const std::string& sys) {
  std::vector<std::string> out;
  const std::string bus = NormalizePciBusId(pci_bus_id);
  if (bus.empty()) return out;
  int minor = NvidiaDeviceMinor(Slurp(proc + "/driver/nvidia/gpus/" + bus + "/information"));
  if (minor >= 0) out.push_back("/dev/nvidia" + std::to_string(minor));
  std::error_code ec;
  std::vector<std::string> drm;
  for (const auto& entry : std::filesystem::directory_iterator(sys + "/bus/pci/devices/" + bus + "/drm", ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with("card") || name.starts_with("renderD")) drm.push_back("/dev/dri/" + name);
  }
  std::sort(drm.begin(), drm.end());
  out.insert(out.end(), drm.begin(), drm.end());
  return out;
}

}  // namespace drover::agent
