// The supervisor, spawned (`drover supervise`, `drover-supervise
// supervise`) and pooled (SupervisorPool), running real jobs.
#include "drover/agent/supervisor.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "drover/agent/agent_test_support.h"
#include "drover/agent/cgroup.h"
#include "drover/agent/devices/topology/host_topology.h"
#include "drover/agent/job_dir.h"

#if !defined(DROVER_BINARY) || !defined(DROVER_SUPERVISE_BINARY)
#error "DROVER_BINARY and DROVER_SUPERVISE_BINARY must name the programs (see src/drover/agent/CMakeLists.txt)"
#endif

namespace drover::agent {
namespace {

using namespace test_support;  // NOLINT: the agent tests' helpers

class SupervisorTest : public TempDirTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void TearDown() override {
    // Leave nothing running, even when a test failed half way.
    for (auto& [pid, dir] : spawned_) {
      if (auto started = JobDir(dir).ReadStarted()) ::kill(-started->pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
    TempDirTest::TearDown();
  }

  // Writes the spec of `command` and spawns its supervisor.
  pid_t Start(const std::string& dir, std::vector<std::string> command, std::map<std::string, std::string> env = {},
              std::string working_dir = "", std::string lease_file = "", std::string output_dir = "") {
    JobSpecFile spec{fs::path(dir).filename().string(),
                     std::move(command),
                     std::move(env),
                     std::move(working_dir),
                     10,
                     std::move(lease_file),
                     std::move(output_dir),
                     std::nullopt};
    EXPECT_TRUE(JobDir(dir).WriteSpec(spec).ok());
    return Spawn(dir);
  }
  pid_t Spawn(const std::string& dir) {
    auto pid = SpawnSupervisor(GetParam(), dir);
    EXPECT_TRUE(pid.ok()) << pid.status().ToString();
    if (!pid.ok()) return -1;
    spawned_.emplace_back(*pid, dir);
    return *pid;
  }

  // Waits for the job's exit record. The supervisor writes it before it
  // exits, so reaping the supervisor is the event to wait on.
  std::optional<ExitFile> WaitExit(const std::string& dir) {
    auto it = std::find_if(spawned_.begin(), spawned_.end(), [&](const auto& p) { return p.second == dir; });
    if (it != spawned_.end()) {
      int status = 0;
      if (::waitpid(it->first, &status, 0) == it->first) reaped_[it->first] = status;
      spawned_.erase(it);
    }
    std::optional<ExitFile> e = JobDir(dir).ReadExit();
    EXPECT_TRUE(e) << "no exit.json in " << dir << "; supervisor.log: " << Slurp(dir + "/supervisor.log");
    return e;
  }
  std::optional<StartedFile> WaitStarted(const std::string& dir) {
    JobDir job(dir);
    std::optional<StartedFile> s;
    EXPECT_TRUE(PollUntil([&] { return (s = job.ReadStarted()).has_value(); })) << "no started.json in " << dir;
    return s;
  }
  bool WaitOutput(const std::string& dir, const std::string& text) {
    return PollUntil([&] { return Slurp(dir + "/output.log").find(text) != std::string::npos; });
  }
  // Reaps the supervisor (if WaitExit has not); its wait status.
  std::optional<int> Reap(pid_t pid) {
    if (auto it = reaped_.find(pid); it != reaped_.end()) return it->second;
    int status = 0;
    bool done = ::waitpid(pid, &status, 0) == pid;
    EXPECT_TRUE(done) << "supervisor " << pid << " could not be reaped";
    std::erase_if(spawned_, [&](const auto& p) { return p.first == pid; });
    if (!done) return std::nullopt;
    return status;
  }

  std::vector<std::pair<pid_t, std::string>> spawned_;  // not yet reaped
  std::map<pid_t, int> reaped_;                         // wait status by pid
};

TEST_P(SupervisorTest, RecordsStartExitCodeAndOutput) {
  std::string dir = MakeDir("j-000010");
  pid_t sup = Start(dir, {"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_EQ(e->signal, 0);
  EXPECT_FALSE(e->failed_to_start);
  auto started = JobDir(dir).ReadStarted();
  ASSERT_TRUE(started);
  EXPECT_GT(started->pid, 1);
  EXPECT_NE(started->pid, sup);
  EXPECT_GT(started->start_unix_nanos, 0);
  EXPECT_LE(started->start_unix_nanos, e->end_unix_nanos);
  std::string out = Slurp(dir + "/output.log");
  EXPECT_NE(out.find("out\n"), std::string::npos) << out;
  EXPECT_NE(out.find("err\n"), std::string::npos) << out;

  auto status = Reap(sup);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_FALSE(fs::exists(dir + "/exit.json.tmp"));
}

int64_t MonoNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST_P(SupervisorTest, LeaseThatRunsOutFencesTheJobEvenIfItIgnoresSigterm) {
  std::string lease = MakeDir("lease") + "/lease";
  ASSERT_TRUE(WriteNodeLease(lease, NodeLease{MonoNow() + 60'000'000'000, 300}).ok());
  std::string dir = MakeDir("j-000011@2");
  // It ignores SIGTERM: only the fence's SIGKILL ends it.
  pid_t sup = Start(dir, {"sh", "-c", "trap '' TERM; echo up; while true; do sleep 0.05; done"}, {}, "", lease);
  ASSERT_GT(sup, 0);
  ASSERT_TRUE(WaitOutput(dir, "up"));
  // The agent renews its lease; then it stops hearing from the server.
  ASSERT_TRUE(WriteNodeLease(lease, NodeLease{MonoNow() + 200'000'000, 300}).ok());
  int64_t fence_at = MonoNow() + 200'000'000;
  auto e = WaitExit(dir);
  int64_t ended = MonoNow();
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->fenced);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_NE(e->message.find("fenced"), std::string::npos) << e->message;
  // Not before the lease ran out, and SIGKILL only after the grace.
  EXPECT_GE(ended, fence_at + 300'000'000);
}

TEST_P(SupervisorTest, JobWithARenewedLeaseRunsToItsEnd) {
  std::string lease = MakeDir("lease") + "/lease";
  ASSERT_TRUE(WriteNodeLease(lease, NodeLease{MonoNow() + 60'000'000'000, 300}).ok());
  std::string dir = MakeDir("j-000012@1");
  pid_t sup = Start(dir, {"sh", "-c", "sleep 0.3; exit 4"}, {}, "", lease);
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->fenced);
  EXPECT_EQ(e->exit_code, 4);
}

TEST_P(SupervisorTest, MissingLeaseFileFencesTheJob) {
  std::string dir = MakeDir("j-000013@1");
  pid_t sup = Start(dir, {"sleep", "30"}, {}, "", dir + "/no-such-lease");
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->fenced);
  EXPECT_EQ(e->signal, SIGTERM);
}

TEST_P(SupervisorTest, JobGetsExactlyTheSpecEnvironment) {
  // The supervisor inherits this (as it inherits the agent's environment);
  // the job must not see it.
  ::setenv("DROVER_SUPERVISOR_TEST_SECRET", "leaked", 1);
  std::string dir = MakeDir("j-000011");
  pid_t sup = Start(dir, {"env"}, {{"GREETING", "hello world"}, {"HOME", "/nowhere"}});
  ::unsetenv("DROVER_SUPERVISOR_TEST_SECRET");
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(Slurp(dir + "/output.log"), "GREETING=hello world\nHOME=/nowhere\n");
  Reap(sup);
}

TEST_P(SupervisorTest, JobIsPinnedToItsCpus) {
  std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  std::string dir = MakeDir("j-000030");
  JobIsolation iso;
  iso.cpus = {allowed.back()};
  ASSERT_TRUE(JobDir(dir).WriteIsolation(iso).ok());
  pid_t sup = Start(dir, {"grep", "Cpus_allowed_list", "/proc/self/status"});
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0) << e->message;
  EXPECT_EQ(Slurp(dir + "/output.log"), "Cpus_allowed_list:\t" + std::to_string(allowed.back()) + "\n");
  Reap(sup);
}

TEST_P(SupervisorTest, JobRunsInItsCgroupWhichGoesWithIt) {
  const CgroupHome& home = ProcessCgroupHome();
  if (home.dir.empty()) GTEST_SKIP() << "jobs get no cgroup on this machine: " << home.problem;
  std::string dir = MakeDir("j-000031");
  std::string parent = home.dir + "/drover-supervisor-test-" + std::to_string(::getpid());
  JobIsolation iso;
  iso.cgroup = JobCgroup{parent, parent + "/j-000031", {}, 0, 0, {}};
  if (home.cpu && home.memory) {
    iso.cgroup->controllers = {"cpu", "memory"};
    iso.cgroup->cpu_millis = 250;
    iso.cgroup->memory_bytes = 256 << 20;
  }
  ASSERT_TRUE(JobDir(dir).WriteIsolation(iso).ok());
  // A background process the job leaves behind is killed with the group.
  std::map<std::string, std::string> env;
  if (home.cpu && home.memory) env["LIMITS"] = iso.cgroup->dir + "/cpu.max " + iso.cgroup->dir + "/memory.max";
  pid_t sup = Start(dir, {"sh", "-c", "sleep 600 & cat /proc/self/cgroup $LIMITS"}, env);
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0) << e->message;
  std::string out = Slurp(dir + "/output.log");
  EXPECT_NE(out.find("0::" + CgroupPath(home.mount, iso.cgroup->dir) + "\n"), std::string::npos) << out;
  if (home.cpu && home.memory) {
    EXPECT_NE(out.find("\n25000 100000\n268435456\n"), std::string::npos) << out;
  }
  EXPECT_FALSE(fs::exists(iso.cgroup->dir)) << "the job's group outlived it";
  EXPECT_FALSE(fs::exists(parent)) << "the agent's group stays only while it has jobs";
  Reap(sup);
}

TEST_P(SupervisorTest, JobThatCannotJoinItsCgroupFailsToStart) {
  // A plain directory is no cgroup: there is no cgroup.procs to join.
  std::string dir = MakeDir("j-000032");
  JobIsolation iso;
  iso.cgroup = JobCgroup{root_ + "/not-a-cgroup", root_ + "/not-a-cgroup/j-000032", {}, 0, 0, {}};
  ASSERT_TRUE(JobDir(dir).WriteIsolation(iso).ok());
  pid_t sup = Start(dir, {"true"});
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->failed_to_start);
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_NE(e->message.find("cannot join its cgroup"), std::string::npos) << e->message;
  EXPECT_FALSE(JobDir(dir).ReadStarted());
  EXPECT_FALSE(fs::exists(root_ + "/not-a-cgroup")) << "removed after the failure";
  Reap(sup);
}

TEST_P(SupervisorTest, UnreadableIsolationFailsToStart) {
  std::string dir = MakeDir("j-000033");
  Spit(dir + "/isolation.json", "{");
  pid_t sup = Start(dir, {"true"});
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->failed_to_start);
  EXPECT_NE(e->message.find("isolation.json"), std::string::npos) << e->message;
  Reap(sup);
}

TEST_P(SupervisorTest, JobRunsInItsWorkingDirectory) {
  std::string custom = MakeDir("elsewhere");
  std::string dir = MakeDir("j-000012");
  pid_t sup = Start(dir, {"sh", "-c", "pwd -P; touch made-here"}, {}, custom);
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(Slurp(dir + "/output.log"), fs::canonical(custom).string() + "\n");
  EXPECT_TRUE(fs::exists(custom + "/made-here"));
  Reap(sup);

  // Without one, the job's own work/ directory, created for it.
  std::string dflt = MakeDir("j-000013");
  sup = Start(dflt, {"sh", "-c", "pwd -P; touch made-here"});
  ASSERT_GT(sup, 0);
  e = WaitExit(dflt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0);
  ASSERT_TRUE(fs::is_directory(dflt + "/work"));
  EXPECT_EQ(Slurp(dflt + "/output.log"), fs::canonical(dflt + "/work").string() + "\n");
  EXPECT_TRUE(fs::exists(dflt + "/work/made-here"));
  Reap(sup);

  // With an output directory (the agent's, on disk), output.log and work/
  // go there, the state stays in the job's directory.
  std::string state = MakeDir("j-000015");
  std::string out = MakeDir("out-j-000015");
  sup = Start(state, {"sh", "-c", "pwd -P"}, {}, "", "", out);
  ASSERT_GT(sup, 0);
  e = WaitExit(state);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(Slurp(out + "/output.log"), fs::canonical(out + "/work").string() + "\n");
  EXPECT_FALSE(fs::exists(state + "/output.log"));
  EXPECT_FALSE(fs::exists(state + "/work"));
  EXPECT_TRUE(fs::exists(state + "/started.json"));
  EXPECT_FALSE(fs::exists(out + "/exit.json"));
  Reap(sup);
}

TEST_P(SupervisorTest, MissingCommandFailsToStart) {
  std::string dir = MakeDir("j-000014");
  pid_t sup = Start(dir, {"/nonexistent/cmd", "--flag"});
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->failed_to_start);
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_NE(e->message.find("/nonexistent/cmd"), std::string::npos) << e->message;
  EXPECT_FALSE(JobDir(dir).ReadStarted());
  EXPECT_NE(Slurp(dir + "/output.log").find("/nonexistent/cmd"), std::string::npos);
  auto status = Reap(sup);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status));
}

TEST_P(SupervisorTest, MissingWorkingDirectoryFailsToStart) {
  std::string dir = MakeDir("j-000020");
  pid_t sup = Start(dir, {"sh", "-c", "true"}, {}, root_ + "/no-such-dir");
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->failed_to_start);
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_FALSE(JobDir(dir).ReadStarted());
  EXPECT_FALSE(fs::exists(root_ + "/no-such-dir")) << "only the default directory is created";
  Reap(sup);
}

TEST_P(SupervisorTest, MissingWorkingDirectoryIsNamedInTheMessage) {
  std::string dir = MakeDir("j-000021");
  pid_t sup = Start(dir, {"sh", "-c", "true"}, {}, root_ + "/no-such-dir");
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("no-such-dir"), std::string::npos) << e->message;
  Reap(sup);
}

TEST_P(SupervisorTest, JobStdinIsEmpty) {
  std::string dir = MakeDir("j-000022");
  pid_t sup = Start(dir, {"cat"});  // would block forever on an inherited terminal or pipe
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 0);
  EXPECT_EQ(Slurp(dir + "/output.log"), "");
  Reap(sup);
}

TEST_P(SupervisorTest, MissingSpecIsRecordedAsFailedToStart) {
  std::string dir = MakeDir("j-000015");
  pid_t sup = Spawn(dir);
  ASSERT_GT(sup, 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->failed_to_start);
  EXPECT_NE(e->message.find("spec.json"), std::string::npos) << e->message;
  auto status = Reap(sup);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
}

TEST_P(SupervisorTest, SigtermToTheSupervisorReachesTheJob) {
  std::string dir = MakeDir("j-000016");
  pid_t sup = Start(dir, {"sh", "-c", "trap 'exit 42' TERM; echo ready; sleep 60 & wait"});
  ASSERT_GT(sup, 0);
  auto started = WaitStarted(dir);
  ASSERT_TRUE(started);
  ASSERT_TRUE(WaitOutput(dir, "ready\n"));  // the trap is set
  // The job leads its own process group; the supervisor its own session.
  EXPECT_EQ(::getpgid(started->pid), started->pid);
  EXPECT_EQ(::getsid(sup), sup);
  EXPECT_TRUE(SupervisorAlive(sup, dir));
  EXPECT_FALSE(JobDir(dir).ReadExit());

  ASSERT_EQ(::kill(sup, SIGTERM), 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 42);
  EXPECT_EQ(e->signal, 0);
  auto status = Reap(sup);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status)) << "the supervisor itself must survive the SIGTERM";
  EXPECT_FALSE(SupervisorAlive(sup, dir));
}

TEST_P(SupervisorTest, JobKilledBySigkillRecordsTheSignal) {
  std::string dir = MakeDir("j-000017");
  pid_t sup = Start(dir, {"sh", "-c", "echo ready; sleep 60; echo not reached"});
  ASSERT_GT(sup, 0);
  auto started = WaitStarted(dir);
  ASSERT_TRUE(started);
  ASSERT_TRUE(WaitOutput(dir, "ready\n"));
  ASSERT_EQ(::kill(-started->pid, SIGKILL), 0);
  auto e = WaitExit(dir);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, -1);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_FALSE(e->failed_to_start);
  EXPECT_EQ(Slurp(dir + "/output.log").find("not reached"), std::string::npos);
  Reap(sup);
}

TEST_P(SupervisorTest, AliveOnlyWhileRunningAndOnlyForItsDirectory) {
  std::string dir = MakeDir("j-000018");
  std::string other = MakeDir("j-000019");
  pid_t sup = Start(dir, {"sleep", "60"});
  ASSERT_GT(sup, 0);
  auto started = WaitStarted(dir);
  ASSERT_TRUE(started);
  EXPECT_TRUE(SupervisorAlive(sup, dir));
  EXPECT_FALSE(SupervisorAlive(sup, other));
  EXPECT_FALSE(SupervisorAlive(started->pid, dir)) << "the job is not its supervisor";
  EXPECT_FALSE(SupervisorAlive(::getpid(), dir));

  ASSERT_EQ(::kill(-started->pid, SIGKILL), 0);
  ASSERT_TRUE(WaitExit(dir));
  ASSERT_TRUE(Reap(sup));
  EXPECT_FALSE(SupervisorAlive(sup, dir));
}

TEST_P(SupervisorTest, AliveDoesNotMatchADirectoryThatIsOnlyAPrefix) {
  std::string dir = MakeDir("j-10");
  pid_t sup = Start(dir, {"sleep", "60"});
  ASSERT_GT(sup, 0);
  auto started = WaitStarted(dir);
  ASSERT_TRUE(started);
  EXPECT_TRUE(SupervisorAlive(sup, dir));
  EXPECT_FALSE(SupervisorAlive(sup, root_ + "/j-1"));
  ::kill(-started->pid, SIGKILL);
  WaitExit(dir);
  Reap(sup);
}

// ---- SupervisorPool: a spare drover-supervise handed its job ----

class SupervisorPoolTest : public TempDirTest {
 protected:
  std::string Prepare(const std::string& name, std::vector<std::string> command) {
    std::string dir = MakeDir(name);
    EXPECT_TRUE(
        JobDir(dir)
            .WriteSpec(JobSpecFile{name, std::move(command), {{"PATH", "/usr/bin:/bin"}}, "", 10, "", "", std::nullopt})
            .ok());
    return dir;
  }
  static std::optional<int> Reap(pid_t pid) {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return std::nullopt;
    return status;
  }
};

// Waits until a pooled supervisor's socket has something to say.
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 10'000) == 1;
}

// What the pool hears once the job has ended (its start, heard first or
// not at all when both came at once, passed over).
SupervisorPool::Heard HearEnd(SupervisorPool& pool, const SupervisorPool::Launched& sup) {
  for (int i = 0; i < 100; ++i) {
    if (!Readable(sup.done_fd)) return SupervisorPool::Heard::kNothing;
    SupervisorPool::Heard h = pool.Hear(sup.pid);
    if (h != SupervisorPool::Heard::kStarted) return h;
  }
  return SupervisorPool::Heard::kStarted;
}

TEST_F(SupervisorPoolTest, SparesRunJobsOneAfterAnotherAndAreRecognisedAsTheirSupervisors) {
  SupervisorPool pool(DROVER_SUPERVISE_BINARY);
  pool.Refill();
  std::string dir = Prepare("j-000030", {"sh", "-c", "echo ready; sleep 60"});
  auto sup = pool.Launch(dir);
  ASSERT_TRUE(sup.ok()) << sup.status().ToString();
  ASSERT_GE(sup->done_fd, 0) << "a pooled supervisor";
  JobDir job(dir);
  std::optional<StartedFile> started;
  ASSERT_TRUE(PollUntil([&] { return (started = job.ReadStarted()).has_value(); }));
  EXPECT_EQ(::getsid(sup->pid), sup->pid) << "a session of its own, as a spawned supervisor";
  EXPECT_TRUE(SupervisorAlive(sup->pid, dir));
  EXPECT_TRUE(SupervisorAlive(sup->pid, dir + "/work/.."));
  EXPECT_FALSE(SupervisorAlive(sup->pid, MakeDir("j-000031")));
  EXPECT_TRUE(fs::exists(dir + "/supervisor.log"));
  ASSERT_TRUE(PollUntil([&] { return Slurp(dir + "/output.log").find("ready\n") != std::string::npos; }));
  // It said so once the start was on record, then nothing while the job runs.
  ASSERT_TRUE(Readable(sup->done_fd));
  EXPECT_EQ(pool.Hear(sup->pid), SupervisorPool::Heard::kStarted);
  EXPECT_EQ(pool.Hear(sup->pid), SupervisorPool::Heard::kNothing);
  ASSERT_EQ(::kill(-started->pid, SIGKILL), 0);
  ASSERT_TRUE(Readable(sup->done_fd));
  EXPECT_EQ(pool.Hear(sup->pid), SupervisorPool::Heard::kDone);
  auto e = job.ReadExit();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGKILL);
  // Done with it: no longer its job's supervisor, and alive, waiting.
  EXPECT_FALSE(SupervisorAlive(sup->pid, dir));
  EXPECT_EQ(::waitpid(sup->pid, nullptr, WNOHANG), 0);

  // The next job gets the same process, with its own output, log and
  // exit; nothing of the first job's leaks into it.
  std::string second = Prepare("j-000032", {"sh", "-c", "echo second; ls /proc/self/fd | wc -l; exit 3"});
  auto next = pool.Launch(second);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->pid, sup->pid);
  EXPECT_EQ(HearEnd(pool, *next), SupervisorPool::Heard::kDone);
  e = JobDir(second).ReadExit();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 3);
  EXPECT_FALSE(e->failed_to_start);
  // stdin, stdout, stderr and the directory listing's own: no socket of the pool's.
  EXPECT_EQ(Slurp(second + "/output.log"), "second\n4\n");
  EXPECT_EQ(Slurp(dir + "/output.log"), "ready\n");
  EXPECT_TRUE(fs::exists(second + "/supervisor.log"));

  // A pooled supervisor that dies is heard as gone, and is ours to reap.
  std::string third = Prepare("j-000033", {"sleep", "60"});
  auto killed = pool.Launch(third);
  ASSERT_TRUE(killed.ok());
  ASSERT_TRUE(PollUntil([&] { return JobDir(third).ReadStarted().has_value(); }));
  ASSERT_EQ(::kill(killed->pid, SIGKILL), 0);
  EXPECT_EQ(HearEnd(pool, *killed), SupervisorPool::Heard::kGone);
  ASSERT_TRUE(Reap(killed->pid));
  ::kill(-JobDir(third).ReadStarted()->pid, SIGKILL);

  // With no supervisor idle, Launch starts a new pooled one for the job,
  // kept after it.
  std::string fourth = Prepare("j-000034", {"sh", "-c", "exit 4"});
  auto spawned = pool.Launch(fourth);
  ASSERT_TRUE(spawned.ok()) << spawned.status().ToString();
  ASSERT_GE(spawned->done_fd, 0);
  EXPECT_EQ(HearEnd(pool, *spawned), SupervisorPool::Heard::kDone);
  e = JobDir(fourth).ReadExit();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 4);
  EXPECT_EQ(::waitpid(spawned->pid, nullptr, WNOHANG), 0) << "idle, waiting";
}

// More supervisors finish than the pool keeps: the others are let go.
TEST_F(SupervisorPoolTest, KeepsAtMostItsIdleLimit) {
  SupervisorPool pool(DROVER_SUPERVISE_BINARY, 1);
  std::string a = Prepare("j-000040", {"sh", "-c", "exit 0"});
  std::string b = Prepare("j-000041", {"sh", "-c", "exit 1"});
  auto first = pool.Launch(a);  // nothing idle: both started for their job
  auto second = pool.Launch(b);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_GE(first->done_fd, 0);
  ASSERT_GE(second->done_fd, 0);
  EXPECT_NE(first->pid, second->pid);
  EXPECT_EQ(HearEnd(pool, *first), SupervisorPool::Heard::kDone);      // kept: none was idle
  EXPECT_EQ(HearEnd(pool, *second), SupervisorPool::Heard::kRetired);  // one is idle already
  ASSERT_TRUE(Reap(second->pid));
  EXPECT_EQ(JobDir(b).ReadExit()->exit_code, 1);
  pool.Refill();  // one is idle: nothing to start
  std::string c = Prepare("j-000042", {"true"});
  auto again = pool.Launch(c);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pid, first->pid);
  EXPECT_EQ(HearEnd(pool, *again), SupervisorPool::Heard::kDone);
  EXPECT_EQ(JobDir(c).ReadExit()->exit_code, 0);
}

TEST_F(SupervisorPoolTest, UnusedSpareGoesWithItsPool) {
  { SupervisorPool(DROVER_SUPERVISE_BINARY).Refill(); }
  // The destructor reaped it: this process has no child left.
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(SupervisorPoolTest, PoolOfDroverSpawnsAsSpawnSupervisor) {
  SupervisorPool pool(DROVER_BINARY);
  std::string dir = Prepare("j-000035", {"sleep", "60"});
  auto launched = pool.Launch(dir);
  ASSERT_TRUE(launched.ok()) << launched.status().ToString();
  EXPECT_EQ(launched->done_fd, -1);
  auto sup = Result<pid_t>(launched->pid);
  JobDir job(dir);
  std::optional<StartedFile> started;
  ASSERT_TRUE(PollUntil([&] { return (started = job.ReadStarted()).has_value(); }));
  std::string cmdline = Slurp("/proc/" + std::to_string(*sup) + "/cmdline");
  EXPECT_EQ(cmdline, std::string(DROVER_BINARY) + '\0' + "supervise" + '\0' + "--dir" + '\0' + dir + '\0');
  EXPECT_TRUE(SupervisorAlive(*sup, dir));
  ::kill(-started->pid, SIGKILL);
  ASSERT_TRUE(Reap(*sup));
  EXPECT_TRUE(job.ReadExit());
}

INSTANTIATE_TEST_SUITE_P(Programs, SupervisorTest, ::testing::Values(DROVER_BINARY, DROVER_SUPERVISE_BINARY),
                         [](const ::testing::TestParamInfo<std::string>& program) {
                           return program.param == DROVER_BINARY ? std::string("Drover")
                                                                 : std::string("DroverSupervise");
                         });

}  // namespace
}  // namespace drover::agent
