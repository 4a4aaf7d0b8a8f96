#pragma once
// The system calls a sandboxed job may not make (docs/security.md, "The
// job sandbox"): a default profile like the container runtimes', built
// with Debian's libseccomp and loaded as the last step before the job's
// exec (job_exec.h), after its user and no_new_privs.
//
// What a job has no business doing on a shared node ends its process with
// SIGSYS, so that its end says the sandbox stopped it (DescribeSeccompEnd):
// ptrace and reading other processes' memory, mounting, new namespaces
// (unshare, setns, clone with a namespace flag), raw IP and packet sockets,
// kernel modules, kexec, eBPF, reboot, swap, port I/O and open_by_handle_at.
// What programs probe and do without gets an error instead: the kernel's
// keyrings, userfaultfd, perf events, accounting, quotas, the kernel log
// (EPERM); clone3 and io_uring (ENOSYS, which glibc and the libraries take
// as an older kernel: clone3's flags are behind a pointer, which a filter
// cannot read, so clone3 gives way to clone, whose flags it can).
//
// A tenant an admin lets run as root gets the root profile: only modules,
// kexec, reboot and swap end it (it may mount, trace and use raw sockets,
// as its capabilities allow).
//
// Built once per process (the supervisor runs one job); loading is one
// system call with no allocation, safe between fork and exec.

#include <linux/filter.h>

#include <string>
#include <vector>

#include "drover/common/status.h"

namespace drover::agent {

// A filter program, ready to load.
struct SeccompFilter {
  std::vector<sock_filter> code;
  sock_fprog prog{};  // points into `code`
};

// The profile for a job that runs as its tenant's user, or as root.
// Answers the same object for the life of the process.
Result<const SeccompFilter*> SeccompProfile(bool as_root);

// The same profile as an OCI runtime spec "seccomp" object (JSON), for a
// container runtime to load (oci_bundle.h).
std::string SeccompOciJson(bool as_root);

// Loads `f` on the calling thread (after no_new_privs, or as root); false
// with errno set when the kernel refuses it. Only the system call: safe in
// a vfork or clone child.
bool LoadSeccomp(const SeccompFilter& f);

// Whether this machine can filter a job's system calls: empty, or why not.
// Probed once per process, in a child that loads the profile. Safe in a
// threaded process.
std::string ProbeSeccomp();

// What a job's end says when the sandbox stopped it: killed by SIGSYS, or
// a shell's exit code for a child that was (128 + SIGSYS); empty otherwise.
std::string DescribeSeccompEnd(int exit_code, int signal);

}  // namespace drover::agent
