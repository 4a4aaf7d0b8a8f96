// The job sandbox (sandbox.h): the mount plan, the uid of a tenant, and real
// jobs under the real supervisor (drover-supervise) in their namespaces.
#include "drover/agent/sandbox.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "drover/agent/agent_test_support.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/supervisor.h"

#if !defined(DROVER_SUPERVISE_BINARY)
#error "DROVER_SUPERVISE_BINARY must name the program (see src/drover/agent/CMakeLists.txt)"
#endif

namespace drover::agent {
namespace {

using namespace test_support;  // NOLINT: the agent tests' helpers

std::vector<std::string> Describe(const std::vector<SandboxMount>& plan) {
  std::vector<std::string> out;
  for (const SandboxMount& m : plan) {
    const char* kind[] = {"tmpfs", "keep", "ro", "null"};
    out.push_back(std::string(kind[m.kind]) + " " + m.target);
  }
  return out;
}

TEST(SandboxPlanTest, EachHiddenDirectoryOnceWithItsKeptDirectoriesBoundBack) {
  JobSandbox s;
  s.hide = {"/data/agent/", "/data/agent/jobs", "/run/drover/x", "/etc/node.token", "/", "relative"};
  s.keep = {"/data/agent/jobs/j-1", "/data/agent/checkpoints/j-1", "/run/drover/x/jobs/j-1"};
  EXPECT_EQ(Describe(PlanSandboxMounts(s, {"/etc/node.token"})),
            (std::vector<std::string>{"tmpfs /data/agent", "keep /data/agent/jobs/j-1",
                                      "keep /data/agent/checkpoints/j-1", "ro /data/agent", "null /etc/node.token",
                                      "tmpfs /run/drover/x", "keep /run/drover/x/jobs/j-1", "ro /run/drover/x"}));
}

TEST(SandboxPlanTest, AHiddenPathInsideAKeptOneStays) {
  JobSandbox s;
  s.hide = {"/data/agent/jobs/j-1/work"};
  s.keep = {"/data/agent/jobs/j-1"};
  EXPECT_TRUE(PlanSandboxMounts(s).empty());
  EXPECT_TRUE(PathWithin("/a/b/", "/a"));
  EXPECT_TRUE(PathWithin("/a", "/a"));
  EXPECT_FALSE(PathWithin("/ab", "/a"));
}

TEST(SandboxPlanTest, ATenantsUidIsTheSameEverywhereAndInTheRange) {
  SandboxPolicy p;
  p.uid_base = 5'000'000;
  p.uid_count = 1000;
  for (const char* t : {"other", "team-a", "default", ""}) {
    uid_t uid = SandboxUid(p, t);
    EXPECT_GE(uid, 5'000'000u);
    EXPECT_LT(uid, 5'001'000u);
    EXPECT_EQ(uid, SandboxUid(p, t));
  }
  EXPECT_NE(SandboxUid(p, "team-a"), SandboxUid(p, "team-b"));
  JobSandbox other = MakeJobSandbox(p, "other", {}, {}, {});
  EXPECT_FALSE(other.as_root);
  EXPECT_EQ(other.user.uid, SandboxUid(p, "other"));
  EXPECT_EQ(other.user.gid, other.user.uid);
  EXPECT_TRUE(MakeJobSandbox(p, "default", {}, {}, {}).as_root);
}

class SandboxedJobTest : public TempDirTest {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "the sandbox needs root";
    if (std::string why = ProbeSandbox(); !why.empty()) GTEST_SKIP() << why;
    TempDirTest::SetUp();
    ::chmod(root_.c_str(), 0700);  // as mkdtemp makes it: the job must not need to enter it
    policy_.uid_base = 3'000'000'000u;
    policy_.uid_count = 1'000;
    secret_ = MakeDir("agent");
    std::ofstream(secret_ + "/node.token") << "drv_secret\n";
    ::chmod((secret_ + "/node.token").c_str(), 0644);  // readable: only the sandbox keeps it from the job
  }
  void TearDown() override {
    if (sup_ > 0) {
      ::kill(sup_, SIGKILL);
      ::waitpid(sup_, nullptr, 0);
    }
    if (!root_.empty()) TempDirTest::TearDown();
  }

  // Runs `command` for `tenant` under drover-supervise; its exit record.
  std::optional<ExitFile> Run(const std::string& tenant, std::vector<std::string> command,
                              const std::string& name = "j-1") {
    dir_ = MakeDir("agent/jobs/" + name);
    std::string work = dir_ + "/work";
    fs::create_directories(work);
    JobSpecFile spec{name, std::move(command), {{"PATH", "/usr/bin:/bin"}}, "", 10, "", "", std::nullopt};
    JobDir job(dir_);
    EXPECT_TRUE(job.WriteSpec(spec).ok());
    JobIsolation iso;
    iso.sandbox = MakeJobSandbox(policy_, tenant, {secret_}, {dir_}, {work});
    EXPECT_TRUE(job.WriteIsolation(iso).ok());
    auto pid = SpawnSupervisor(DROVER_SUPERVISE_BINARY, dir_);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (!pid.ok()) return std::nullopt;
    sup_ = *pid;
    return Wait();
  }
  std::optional<ExitFile> Wait() {
    ::waitpid(sup_, nullptr, 0);
    sup_ = -1;
    auto e = JobDir(dir_).ReadExit();
    EXPECT_TRUE(e) << "supervisor.log: " << Slurp(dir_ + "/supervisor.log");
    return e;
  }
  std::string Output() { return Slurp(dir_ + "/output.log"); }

  SandboxPolicy policy_;
  std::string secret_, dir_;
  pid_t sup_ = -1;
};

TEST_F(SandboxedJobTest, RunsAsItsTenantsUserWithoutCapabilitiesOrNewPrivileges) {
  auto e = Run("other", {"sh", "-c", "id -u; id -g; id -G; grep -E '^(Cap|NoNewPrivs)' /proc/self/status"});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0) << Output();
  const std::string uid = std::to_string(SandboxUid(policy_, "other"));
  std::string out = Output();
  EXPECT_EQ(out.substr(0, out.find("CapInh")), uid + "\n" + uid + "\n" + uid + "\n");
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_NE(out.find(std::string(set) + ":\t0000000000000000"), std::string::npos) << set << " in " << out;
  }
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
}

TEST_F(SandboxedJobTest, HiddenDirectoriesAreEmptyButItsOwnAreThereAndWritable) {
  auto e = Run("other", {"sh", "-c",
                         "cat " + root_ + "/agent/node.token; ls -A " + root_ + "/agent; ls -A " + root_ +
                             "; echo made > file; cat file"});
  ASSERT_TRUE(e);
  std::string out = Output();
  EXPECT_EQ(out.find("drv_secret"), std::string::npos) << out;
  EXPECT_NE(out.find("No such file"), std::string::npos) << out;
  // Of the test's 0700 directory, only the way to the job's own is there.
  EXPECT_NE(out.find("jobs\nagent\nmade\n"), std::string::npos) << out;
  EXPECT_EQ(Slurp(dir_ + "/work/file"), "made\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/work/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, SandboxUid(policy_, "other"));
  // Nothing of the job's view reached the host.
  EXPECT_EQ(Slurp(secret_ + "/node.token"), "drv_secret\n");
}

TEST_F(SandboxedJobTest, SeesOnlyItsOwnProcessesAndCannotSignalAnyOther) {
  const std::string outside = std::to_string(::getpid());
  auto e = Run("other", {"sh", "-c",
                         "ls /proc | grep -c '^[0-9]'; kill -0 " + outside +
                             " 2>/dev/null && echo signalled-outside; kill -0 1 2>/dev/null && echo signalled-init; "
                             "echo done"});
  ASSERT_TRUE(e);
  std::string out = Output();
  // The init, the shell, ls and grep at most.
  EXPECT_LE(std::stoi(out), 4) << out;
  EXPECT_EQ(out.find("signalled"), std::string::npos) << out;
  EXPECT_NE(out.find("done"), std::string::npos) << out;
}

TEST_F(SandboxedJobTest, CannotMountOrMakeNamespaces) {
  auto e = Run("other", {"sh", "-c",
                         "mount -t tmpfs none /tmp 2>/dev/null && echo mounted; unshare -m true 2>/dev/null && echo "
                         "unshared; echo done"});
  ASSERT_TRUE(e);
  std::string out = Output();
  EXPECT_EQ(out.find("mounted"), std::string::npos) << out;
  EXPECT_EQ(out.find("unshared"), std::string::npos) << out;
}

TEST_F(SandboxedJobTest, ExitCodesAndSignalsAreTheJobsAndAStopReachesIt) {
  auto e = Run("other", {"sh", "-c", "exit 7"});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 7);
  e = Run("other", {"sh", "-c", "kill -USR1 $$"}, "j-4");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGUSR1);
  // A stop goes to the job's process group: the job ends by it (the
  // namespace's init ignores it, as the kernel has an init do).
  dir_ = MakeDir("agent/jobs/j-2");
  fs::create_directories(dir_ + "/work");
  JobDir job(dir_);
  ASSERT_TRUE(
      job.WriteSpec(JobSpecFile{"j-2", {"sleep", "600"}, {{"PATH", "/usr/bin:/bin"}}, "", 10, "", "", std::nullopt})
          .ok());
  JobIsolation iso;
  iso.sandbox = MakeJobSandbox(policy_, "other", {secret_}, {dir_}, {dir_ + "/work"});
  ASSERT_TRUE(job.WriteIsolation(iso).ok());
  auto pid = SpawnSupervisor(DROVER_SUPERVISE_BINARY, dir_);
  ASSERT_TRUE(pid.ok());
  sup_ = *pid;
  std::optional<StartedFile> started;
  ASSERT_TRUE(PollUntil([&] { return (started = job.ReadStarted()).has_value(); }));
  ASSERT_EQ(::kill(-started->pid, SIGTERM), 0);
  e = Wait();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGTERM);
}

TEST_F(SandboxedJobTest, ARootTenantRunsAsRootInItsNamespaces) {
  auto e = Run("default", {"sh", "-c", "id -u; ls /proc | grep -c '^[0-9]'; cat " + root_ + "/agent/node.token"});
  ASSERT_TRUE(e);
  std::string out = Output();
  EXPECT_EQ(out.substr(0, 2), "0\n") << out;
  EXPECT_LE(std::stoi(out.substr(2)), 4) << out;
  EXPECT_EQ(out.find("drv_secret"), std::string::npos) << out;
}

TEST_F(SandboxedJobTest, AnIsolationFileThatSaysUidZeroWithoutRootIsRefused) {
  dir_ = MakeDir("agent/jobs/j-3");
  std::ofstream(dir_ + "/isolation.json") << R"({"cpus": [], "sandbox": {"as_root": false, "uid": 0, "gid": 0}})";
  EXPECT_FALSE(JobDir(dir_).ReadIsolation().ok());
}

}  // namespace
}  // namespace drover::agent
