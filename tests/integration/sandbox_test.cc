// The job sandbox end to end (docs/security.md, "The job sandbox"): on
// `drover up`, a job of an ordinary `user` token of one tenant tries, from
// inside, what an attacker would: the admin token, the store, another
// tenant's job's spec, log and environment, the node's state, the server's
// process. None of it works; it is not root and holds no capability. The
// same job as the admin, in the tenant the cluster lets run as root, still
// runs as root. What the sandbox's system-call filter stops (ptrace, mount,
// unshare, raw sockets, kernel modules) ends the process that tries it, and
// a job stopped that way says so.

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

constexpr const char* kAliceSecret = "alice-secret-9c1e";

class SandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    up_ = new DroverUp(dir_->path() + "/data", {"--devices", "none", "--simulate", "1", "--simulate-gpus", "4"});
    ASSERT_TRUE(up_->Start());
    ASSERT_TRUE(up_->WaitForReadyNodes(2));
  }
  static void TearDownTestSuite() {
    if (up_ != nullptr && up_->jobs() != nullptr) CancelAllJobs(up_->jobs());
    delete up_;
    delete dir_;
  }

  static std::string Token(const std::string& name, const std::string& tenant) {
    CommandResult r = RunCli(up_->grpc_address(), {"tokens", "create", name, "--tenant", tenant, "--role", "user"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
  }
  // Submits `script` with `token` (sh -c), waits for its end; its output.
  static std::string RunAs(const std::string& token, const std::string& script,
                           const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"submit", "--gpus", "1", "--wait"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "sh", "-c", script});
    CommandResult r = RunCli(up_->grpc_address(), args, {"DROVER_TOKEN=" + token});
    std::string id = r.out.substr(0, r.out.find('\n'));
    EXPECT_TRUE(id.starts_with("j-")) << r.out << r.err;
    CommandResult logs = RunCli(up_->grpc_address(), {"logs", id}, {"DROVER_TOKEN=" + token});
    return logs.out;
  }

  static inline TempDir* dir_ = nullptr;
  static inline DroverUp* up_ = nullptr;
};

TEST_F(SandboxTest, AnotherTenantsJobCannotReachTheClusterOrOtherJobs) {
  // Alice's job: a secret in its environment and in its output.
  const std::string alice = Token("alice", "team-a");
  CommandResult a = RunCli(up_->grpc_address(),
                           {"submit", "--gpus", "1", "--env", std::string("ALICE_SECRET=") + kAliceSecret, "--", "sh",
                            "-c", std::string("echo ") + kAliceSecret + "; sleep 600"},
                           {"DROVER_TOKEN=" + alice});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const std::string alice_job = a.out.substr(0, a.out.find('\n'));
  ASSERT_TRUE(WaitUntil([&] {
    return RunCli(up_->grpc_address(), {"logs", alice_job}).out.find(kAliceSecret) != std::string::npos;
  }));

  const std::string data = up_->data_dir();
  const std::string server = std::to_string(up_->pid());
  const std::string script =
      "echo uid=$(id -u); grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status;"
      "cat " +
      data +
      "/admin.token 2>/dev/null && echo READ-ADMIN-TOKEN;"
      "head -c 16 " +
      data +
      "/drover.db 2>/dev/null | grep -q SQLite && echo READ-STORE;"
      "grep -rl " +
      kAliceSecret + " " + data +
      " /run/drover /dev/shm 2>/dev/null | head -3 | sed 's/^/FOUND-SECRET /';"
      "ls " +
      data +
      "/agents 2>/dev/null | sed 's/^/AGENT-DIR /';"
      "kill -0 " +
      server +
      " 2>/dev/null && echo SIGNALLED-SERVER;"
      "echo procs=$(ls /proc | grep -c '^[0-9]');"
      "echo end";
  const std::string out = RunAs(Token("bob", "team-b"), script);
  ASSERT_NE(out.find("end"), std::string::npos) << out;
  EXPECT_EQ(out.find("uid=0"), std::string::npos) << out;
  EXPECT_NE(out.find("uid="), std::string::npos) << out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  for (const char* leak : {"READ-ADMIN-TOKEN", "READ-STORE", "FOUND-SECRET", "SIGNALLED-SERVER", "drv_"}) {
    EXPECT_EQ(out.find(leak), std::string::npos) << leak << " in:\n" << out;
  }
  // Of the agents' directories, at most the way to its own.
  size_t agents = 0;
  for (size_t at = out.find("AGENT-DIR"); at != std::string::npos; at = out.find("AGENT-DIR", at + 1)) ++agents;
  EXPECT_LE(agents, 1u) << out;
  EXPECT_LE(std::stoi(out.substr(out.find("procs=") + 6)), 6) << out;
  RunCli(up_->grpc_address(), {"cancel", alice_job});
}

TEST_F(SandboxTest, AWorkingDirectoryInTheServersDataIsRefused) {
  CommandResult r =
      RunCli(up_->grpc_address(), {"submit", "--gpus", "1", "--wait", "--workdir", up_->data_dir(), "--", "true"},
             {"DROVER_TOKEN=" + Token("carol", "team-c")});
  EXPECT_NE(r.exit_code, 0) << r.out;
  std::string id = r.out.substr(0, r.out.find('\n'));
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.status().message().find("jobs do not see"), std::string::npos) << job.status().message();
}

// The bad input of the issue: what an attacker's job tries next. Each try
// runs in a process of its own under the job's shell, which says how it
// ended: 159 is 128 + SIGSYS, the sandbox's filter ending it.
TEST_F(SandboxTest, PtraceMountUnshareRawSocketsAndModulesEndTheProcessThatTriesThem) {
  const std::string py = "python3 -c 'import ctypes, socket; libc = ctypes.CDLL(None); ";
  const std::string script =
      py + "libc.ptrace(0, 0, 0, 0)'; echo ptrace=$?;" +                                // PTRACE_TRACEME
      py + "libc.mount(b\"tmpfs\", b\"/tmp\", b\"tmpfs\", 0, None)'; echo mount=$?;" +  //
      "unshare --net true; echo unshare=$?;" +                                          // util-linux
      py + "socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'; echo raw=$?;" + py +
      "libc.delete_module(b\"drover_none\", 0)'; echo module=$?;" +
      "echo 1 > /proc/sys/vm/drop_caches; echo procsys=$?;"
      // What programs do all the time still works: threads and children
      // (glibc's clone3, refused as absent, gives way to clone).
      "python3 -c 'import subprocess, threading; t = threading.Thread(target=print); t.start(); t.join(); "
      "print(\"child\", subprocess.run([\"true\"]).returncode)'; echo normal=$?;"
      "echo end";
  const std::string out = RunAs(Token("mallory", "team-m"), script);
  ASSERT_NE(out.find("end"), std::string::npos) << out;
  for (const char* tried : {"ptrace=159", "mount=159", "unshare=159", "raw=159", "module=159"}) {
    EXPECT_NE(out.find(tried), std::string::npos) << tried << " not in:\n" << out;
  }
  EXPECT_EQ(out.find("procsys=0"), std::string::npos) << out;
  EXPECT_NE(out.find("child 0\nnormal=0"), std::string::npos) << out;
}

TEST_F(SandboxTest, AJobStoppedByTheSandboxSaysSo) {
  CommandResult r = RunCli(
      up_->grpc_address(),
      {"submit", "--gpus", "1", "--wait", "--", "python3", "-c", "import ctypes; ctypes.CDLL(None).ptrace(0, 0, 0, 0)"},
      {"DROVER_TOKEN=" + Token("trudy", "team-t")});
  EXPECT_NE(r.exit_code, 0) << r.out;
  std::string id = r.out.substr(0, r.out.find('\n'));
  v1::Job job = GetJob(up_->jobs(), id);
  EXPECT_EQ(job.status().state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.status().message().find("stopped by the sandbox"), std::string::npos) << job.status().message();
  CommandResult shown = RunCli(up_->grpc_address(), {"job", id});
  EXPECT_NE(shown.out.find("stopped by the sandbox"), std::string::npos) << shown.out;
}

TEST_F(SandboxTest, TheAdminsJobInARootTenantStillRunsAsRoot) {
  const std::string out = RunAs(up_->token(),
                                "echo uid=$(id -u); echo procs=$(ls /proc | grep -c '^[0-9]');"
                                // Root, but the kernel's knobs are read-only (the value it has, written back).
                                "cat /proc/sys/kernel/printk_ratelimit > /proc/sys/kernel/printk_ratelimit;"
                                "echo procsys=$?; python3 -c 'import threading; print(\"threads\", 1)'");
  EXPECT_NE(out.find("uid=0\n"), std::string::npos) << out;
  EXPECT_LE(std::stoi(out.substr(out.find("procs=") + 6)), 6) << out;
  EXPECT_EQ(out.find("procsys=0"), std::string::npos) << out;
  EXPECT_NE(out.find("threads 1"), std::string::npos) << out;
}

}  // namespace
}  // namespace drover::testing
