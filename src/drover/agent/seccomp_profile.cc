#include "drover/agent/seccomp_profile.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

namespace drover::agent {
namespace {

// What ends a job's process (the attack surface a tenant has no use for).
constexpr const char* kKillAlways[] = {
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
};
constexpr const char* kKillUser[] = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "bpf",
    "iopl",
    "ioperm",
    "open_by_handle_at",
    "chroot",
};
// What fails with EPERM: programs try these and carry on without.
constexpr const char* kDenyUser[] = {
    "keyctl", "add_key",        "request_key", "userfaultfd", "perf_event_open", "acct",          "quotactl",
    "syslog", "lookup_dcookie", "kcmp",        "vhangup",     "quotactl_fd",     "fanotify_init",
};
// What fails with ENOSYS, as on a kernel without it: callers fall back.
constexpr const char* kAbsentUser[] = {"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"};

constexpr unsigned long kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                                             CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP};

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Status Add(scmp_filter_ctx ctx, uint32_t action, const char* name) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return Status::Ok();  // this libseccomp does not know it: nor do its callers' headers
  int rc = seccomp_rule_add(ctx, action, nr, 0);
  // -EDOM: not a system call of this architecture (an older name).
  if (rc != 0 && rc != -EDOM) return Internal(fmt::format("seccomp rule for {}: {}", name, std::strerror(-rc)));
  return Status::Ok();
}

Result<SeccompFilter> Build(bool as_root) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Internal("cannot make a seccomp filter (libseccomp)");
  // A 32-bit or x32 system call would go round every rule below.
  if (int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc != 0) {
    return Internal(fmt::format("seccomp filter: {}", std::strerror(-rc)));
  }
  for (const char* name : kKillAlways) DROVER_RETURN_IF_ERROR(Add(ctx.get(), SCMP_ACT_KILL_PROCESS, name));
  if (!as_root) {
    for (const char* name : kKillUser) DROVER_RETURN_IF_ERROR(Add(ctx.get(), SCMP_ACT_KILL_PROCESS, name));
    for (const char* name : kDenyUser) DROVER_RETURN_IF_ERROR(Add(ctx.get(), SCMP_ACT_ERRNO(EPERM), name));
    for (const char* name : kAbsentUser) DROVER_RETURN_IF_ERROR(Add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), name));
    // clone with any namespace flag (its flags are its first argument);
    // threads and fork stay as they are.
    for (unsigned long flag : kNamespaceFlags) {
      if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_KILL_PROCESS, SCMP_SYS(clone), 1,
                                    SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
          rc != 0) {
        return Internal(fmt::format("seccomp rule for clone: {}", std::strerror(-rc)));
      }
    }
    // Raw IP sockets (the type's low bits; SOCK_CLOEXEC and SOCK_NONBLOCK
    // ride above them) and packet sockets: forging traffic on the node's
    // network. Ping sockets (SOCK_DGRAM, IPPROTO_ICMP) stay.
    for (int family : {AF_INET, AF_INET6}) {
      if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_KILL_PROCESS, SCMP_SYS(socket), 2,
                                    SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
                                    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW));
          rc != 0) {
        return Internal(fmt::format("seccomp rule for socket: {}", std::strerror(-rc)));
      }
    }
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_KILL_PROCESS, SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(AF_PACKET)));
        rc != 0) {
      return Internal(fmt::format("seccomp rule for socket: {}", std::strerror(-rc)));
    }
  }
  // The program, exported to memory (libseccomp 2.5 writes it to a file).
  int fd = ::memfd_create("drover-seccomp", MFD_CLOEXEC);
  if (fd < 0) return Internal(fmt::format("memfd_create: {}", std::strerror(errno)));
  if (int rc = seccomp_export_bpf(ctx.get(), fd); rc != 0) {
    ::close(fd);
    return Internal(fmt::format("cannot export the seccomp filter: {}", std::strerror(-rc)));
  }
  off_t size = ::lseek(fd, 0, SEEK_END);
  SeccompFilter f;
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0) {
    ::close(fd);
    return Internal("the exported seccomp filter is malformed");
  }
  f.code.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t n = ::pread(fd, f.code.data(), static_cast<size_t>(size), 0);
  ::close(fd);
  if (n != size) return Internal("cannot read back the seccomp filter");
  return f;
}

std::string ProbeOnce() {
  auto profile = SeccompProfile(false);
  if (!profile.ok()) return profile.status().message();
  pid_t pid = ::fork();
  if (pid < 0) return fmt::format("cannot probe seccomp: fork: {}", std::strerror(errno));
  if (pid == 0) {
    // Only system calls here: the parent may have threads.
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(2);
    ::_exit(LoadSeccomp(**profile) ? 0 : 3);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "the kernel refuses a seccomp filter";
  return "";
}

}  // namespace

Result<const SeccompFilter*> SeccompProfile(bool as_root) {
  // Built once, on the heap, where the programs' pointers stay put.
  struct Profiles {
    Result<SeccompFilter> user = Build(false);
    Result<SeccompFilter> root = Build(true);
  };
  static const Profiles* const kProfiles = [] {
    auto* p = new Profiles();
    for (Result<SeccompFilter>* r : {&p->user, &p->root}) {
      if (!r->ok()) continue;
      (*r)->prog.len = static_cast<unsigned short>((*r)->code.size());
      (*r)->prog.filter = (*r)->code.data();
    }
    return p;
  }();
  const Result<SeccompFilter>& r = as_root ? kProfiles->root : kProfiles->user;
  if (!r.ok()) return r.status();
  return &*r;
}

bool LoadSeccomp(const SeccompFilter& f) { return ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &f.prog) == 0; }

std::string ProbeSeccomp() {
  static const std::string kProblem = ProbeOnce();
  return kProblem;
}

std::string DescribeSeccompEnd(int exit_code, int signal) {
  constexpr const char* kWhat =
      "a system call jobs may not make (ptrace, mount, unshare, setns, a raw socket, a kernel module, bpf, "
      "kexec; docs/security.md)";
  if (signal == SIGSYS) return fmt::format("stopped by the sandbox: it made {}", kWhat);
  if (exit_code == 128 + SIGSYS) {
    return fmt::format("exit code {}: a process it started was stopped by the sandbox (SIGSYS) for {}", exit_code,
                       kWhat);
  }
  return "";
}

std::string SeccompOciJson(bool as_root) {
  // Hand-written JSON: the supervisor's program links no JSON writer for this.
  std::string out = R"({"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64"],"syscalls":[)";
  bool first = true;
  auto rule = [&](const char* action, const std::string& names, const std::string& extra) {
    out += first ? "" : ",";
    first = false;
    out += fmt::format(R"({{"names":[{}],"action":"{}"{}}})", names, action, extra);
  };
  auto names = [](auto begin, auto end) {
    std::string s;
    for (auto it = begin; it != end; ++it) s += fmt::format("{}\"{}\"", s.empty() ? "" : ",", *it);
    return s;
  };
  rule("SCMP_ACT_KILL_PROCESS", names(std::begin(kKillAlways), std::end(kKillAlways)), "");
  if (!as_root) {
    rule("SCMP_ACT_KILL_PROCESS", names(std::begin(kKillUser), std::end(kKillUser)), "");
    rule("SCMP_ACT_ERRNO", names(std::begin(kDenyUser), std::end(kDenyUser)), fmt::format(R"(,"errnoRet":{})", EPERM));
    rule("SCMP_ACT_ERRNO", names(std::begin(kAbsentUser), std::end(kAbsentUser)),
         fmt::format(R"(,"errnoRet":{})", ENOSYS));
    for (unsigned long flag : kNamespaceFlags) {
      rule("SCMP_ACT_KILL_PROCESS", R"("clone")",
           fmt::format(R"(,"args":[{{"index":0,"value":{},"valueTwo":{},"op":"SCMP_CMP_MASKED_EQ"}}])", flag, flag));
    }
    for (int family : {AF_INET, AF_INET6}) {
      rule("SCMP_ACT_KILL_PROCESS", R"("socket")",
           fmt::format(R"(,"args":[{{"index":0,"value":{},"op":"SCMP_CMP_EQ"}},)"
                       R"({{"index":1,"value":{},"valueTwo":{},"op":"SCMP_CMP_MASKED_EQ"}}])",
                       family, 0xf, SOCK_RAW));
    }
    rule("SCMP_ACT_KILL_PROCESS", R"("socket")",
         fmt::format(R"(,"args":[{{"index":0,"value":{},"op":"SCMP_CMP_EQ"}}])", AF_PACKET));
  }
  out += "]}";
  return out;
}

}  // namespace drover::agent
