#include "drover/agent/job_dir.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "drover/agent/agent_test_support.h"
#include "drover/agent/cgroup.h"

namespace drover::agent {
namespace {

using namespace test_support;  // NOLINT: the agent tests' helpers

// ---- JobDir files ----

using JobDirTest = TempDirTest;

TEST_F(JobDirTest, SpecRoundTrips) {
  JobDir dir(MakeDir("j-000001"));
  EXPECT_EQ(dir.File("spec.json"), dir.path() + "/spec.json");
  JobSpecFile spec;
  spec.job_id = "j-000001";
  spec.command = {"python3", "-c", "print(\"hi there\")", "", "ünïcode 'quoted'"};
  spec.env = {{"A", "1"}, {"EMPTY", ""}, {"MULTI", "line\nbreak"}};
  spec.working_dir = "/srv/work dir";
  spec.grace_seconds = 37;
  ASSERT_TRUE(dir.WriteSpec(spec).ok());
  EXPECT_EQ(dir.OutputDir(spec), dir.path());  // no output_dir: the job's own directory
  spec.output_dir = root_ + "/out/j-000001";
  ASSERT_TRUE(dir.WriteSpec(spec).ok());

  auto back = dir.ReadSpec();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job_id, spec.job_id);
  EXPECT_EQ(back->command, spec.command);
  EXPECT_EQ(back->env, spec.env);
  EXPECT_EQ(back->working_dir, spec.working_dir);
  EXPECT_EQ(back->grace_seconds, 37);
  EXPECT_EQ(back->output_dir, spec.output_dir);
  EXPECT_EQ(dir.OutputDir(*back), spec.output_dir);
}

TEST_F(JobDirTest, MissingCorruptOrIncompleteSpecIsAnError) {
  JobDir dir(MakeDir("j-000002"));
  auto missing = dir.ReadSpec();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.path()), std::string::npos);

  for (const char* corrupt : {"", "{\"job_id\": \"j-000002\", \"command\": [", "[\"a\"]", "null", "\x01\x02"}) {
    SCOPED_TRACE(corrupt);
    Spit(dir.File("spec.json"), corrupt);
    auto r = dir.ReadSpec();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kNotFound);
  }
  for (const char* incomplete :
       {"{}", R"({"job_id": "j-000002"})", R"({"command": ["true"]})", R"({"job_id": "j-000002", "command": []})",
        R"({"job_id": 7, "command": ["true"]})", R"({"job_id": "j-000002", "command": "true"})"}) {
    SCOPED_TRACE(incomplete);
    Spit(dir.File("spec.json"), incomplete);
    auto r = dir.ReadSpec();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  }
  // Optional fields fall back to their defaults.
  Spit(dir.File("spec.json"), R"({"job_id": "j-000002", "command": ["true"], "grace_seconds": "soon"})");
  auto minimal = dir.ReadSpec();
  ASSERT_TRUE(minimal.ok()) << minimal.status().ToString();
  EXPECT_EQ(minimal->grace_seconds, 10);
  EXPECT_TRUE(minimal->env.empty());
  EXPECT_EQ(minimal->working_dir, "");
}

TEST_F(JobDirTest, IsolationRoundTripsAndIsOptional) {
  JobDir dir(MakeDir("j-000008"));
  auto absent = dir.ReadIsolation();
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->cpus.empty());
  EXPECT_FALSE(absent->cgroup);

  JobIsolation iso;
  iso.cpus = {0, 2, 3};
  iso.cgroup = JobCgroup{
      "/sys/fs/cgroup/drover-n-1", "/sys/fs/cgroup/drover-n-1/j-000008.1", {"cpu", "memory"}, 1500, int64_t{3} << 30,
      {{'c', 195, 1}, {'b', 8, 0}}};
  ASSERT_TRUE(dir.WriteIsolation(iso).ok());
  auto back = dir.ReadIsolation();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cpus, iso.cpus);
  ASSERT_TRUE(back->cgroup);
  EXPECT_EQ(back->cgroup->parent, iso.cgroup->parent);
  EXPECT_EQ(back->cgroup->dir, iso.cgroup->dir);
  EXPECT_EQ(back->cgroup->controllers, iso.cgroup->controllers);
  EXPECT_EQ(back->cgroup->cpu_millis, 1500);
  EXPECT_EQ(back->cgroup->memory_bytes, int64_t{3} << 30);
  EXPECT_EQ(back->cgroup->deny_devices, iso.cgroup->deny_devices);
  EXPECT_FALSE(back->sandbox);
  // A sandbox with the launch contract's names (docs/distributed.md).
  JobSandbox sb;
  sb.as_root = true;
  sb.hosts_file = "/data/jobs/j-000008.1@1/hosts";
  sb.hostname = "gpu-07";
  iso.sandbox = sb;
  ASSERT_TRUE(dir.WriteIsolation(iso).ok());
  back = dir.ReadIsolation();
  ASSERT_TRUE(back.ok() && back->sandbox) << back.status().ToString();
  EXPECT_EQ(back->sandbox->hosts_file, sb.hosts_file);
  EXPECT_EQ(back->sandbox->hostname, "gpu-07");

  for (const char* bad : {"{", "[]", R"({"cpus": "all"})", R"({"cgroup": {"dir": "/x"}})",
                          R"({"cgroup": {"parent": "/p", "dir": "/p/j", "deny_devices": [["c", -1]]}})"}) {
    SCOPED_TRACE(bad);
    Spit(dir.File("isolation.json"), bad);
    EXPECT_EQ(dir.ReadIsolation().status().code(), Code::kInvalidArgument);
  }
}

TEST_F(JobDirTest, StartedRoundTripsAndRejectsBadPids) {
  JobDir dir(MakeDir("j-000003"));
  EXPECT_FALSE(dir.ReadStarted());
  ASSERT_TRUE(dir.WriteStarted(StartedFile{4242, 1'700'000'000'123'456'789}).ok());
  auto s = dir.ReadStarted();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pid, 4242);
  EXPECT_EQ(s->start_unix_nanos, 1'700'000'000'123'456'789);

  // pid 0 or 1 would make a kill(-pid) hit everything: never trusted.
  ASSERT_TRUE(dir.WriteStarted(StartedFile{1, 5}).ok());
  EXPECT_FALSE(dir.ReadStarted());
  ASSERT_TRUE(dir.WriteStarted(StartedFile{0, 5}).ok());
  EXPECT_FALSE(dir.ReadStarted());
  for (const char* bad : {"{", "{}", R"({"pid": -5})", R"({"pid": "12"})", "42"}) {
    SCOPED_TRACE(bad);
    Spit(dir.File("started.json"), bad);
    EXPECT_FALSE(dir.ReadStarted());
  }
}

TEST_F(JobDirTest, ExitRoundTripsAndFillsDefaults) {
  JobDir dir(MakeDir("j-000004"));
  EXPECT_FALSE(dir.ReadExit());
  ASSERT_TRUE(dir.WriteExit(ExitFile{-1, 9, 1'700'000'000'000'000'001, "killed \"hard\"\n", false}).ok());
  auto e = dir.ReadExit();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, -1);
  EXPECT_EQ(e->signal, 9);
  EXPECT_EQ(e->end_unix_nanos, 1'700'000'000'000'000'001);
  EXPECT_EQ(e->message, "killed \"hard\"\n");
  EXPECT_FALSE(e->failed_to_start);

  ASSERT_TRUE(dir.WriteExit(ExitFile{127, 0, 7, "cannot start 'x'", true}).ok());
  e = dir.ReadExit();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, 127);
  EXPECT_TRUE(e->failed_to_start);

  // A record without an exit code does not read as success.
  Spit(dir.File("exit.json"), "{}");
  e = dir.ReadExit();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->exit_code, -1);
  EXPECT_EQ(e->signal, 0);
  EXPECT_FALSE(e->failed_to_start);
  for (const char* bad : {"", "{\"exit_code\": 0", "[0]", "0"}) {
    SCOPED_TRACE(bad);
    Spit(dir.File("exit.json"), bad);
    EXPECT_FALSE(dir.ReadExit());
  }
}

TEST_F(JobDirTest, StopRoundTrips) {
  JobDir dir(MakeDir("j-000005"));
  EXPECT_FALSE(dir.ReadStop());
  ASSERT_TRUE(dir.WriteStop(1'700'000'000'999'999'999).ok());
  EXPECT_EQ(dir.ReadStop(), std::optional<int64_t>(1'700'000'000'999'999'999));
  Spit(dir.File("stop.json"), "{\"sigterm_unix_nanos\": ");
  EXPECT_FALSE(dir.ReadStop());
}

TEST_F(JobDirTest, SupervisorPidRoundTripsAndRejectsBadPids) {
  JobDir dir(MakeDir("j-000006"));
  EXPECT_FALSE(dir.ReadSupervisorPid());
  ASSERT_TRUE(dir.WriteSupervisorPid(31337).ok());
  EXPECT_EQ(Slurp(dir.File("supervisor.pid")), "31337");
  EXPECT_EQ(dir.ReadSupervisorPid(), std::optional<pid_t>(31337));
  for (const char* bad : {"", "abc", "1", "0", "-12"}) {
    SCOPED_TRACE(bad);
    Spit(dir.File("supervisor.pid"), bad);
    EXPECT_FALSE(dir.ReadSupervisorPid());
  }
}

TEST_F(JobDirTest, WriteFileAtomicReplacesWholeAndLeavesNoTemporary) {
  std::string path = root_ + "/file.json";
  ASSERT_TRUE(WriteFileAtomic(path, "first, and longer").ok());
  EXPECT_EQ(Slurp(path), "first, and longer");
  ASSERT_TRUE(WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(Slurp(path), "second");
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(Slurp(path), "");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root_)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"file.json"});

  JobDir dir(MakeDir("j-000007"));
  ASSERT_TRUE(dir.WriteSpec(JobSpecFile{"j-000007", {"true"}, {}, "", 10, "", "", std::nullopt}).ok());
  ASSERT_TRUE(dir.WriteStarted(StartedFile{99, 1}).ok());
  ASSERT_TRUE(dir.WriteStop(2).ok());
  ASSERT_TRUE(dir.WriteExit(ExitFile{}).ok());
  ASSERT_TRUE(dir.WriteSupervisorPid(98).ok());
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
}

TEST_F(JobDirTest, WritesIntoAMissingDirectoryFail) {
  std::string missing = root_ + "/no/such/dir";
  Status s = WriteFileAtomic(missing + "/x.json", "{}");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
  JobDir dir(missing);
  EXPECT_FALSE(dir.WriteExit(ExitFile{}).ok());
  EXPECT_FALSE(dir.WriteSupervisorPid(5).ok());
  EXPECT_FALSE(fs::exists(root_ + "/no"));
}

// ---- where the state lives ----

TEST_F(JobDirTest, StateRootIsPrivateInMemoryAndTheSameForTheSameDataDirectory) {
  // A base of this test's own, in /dev/shm (a tmpfs) like the default.
  std::string base = fmt::format("/dev/shm/drover-test-{}-{}", ::getpid(), fs::path(root_).filename().string());
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{base};
  fs::create_directories(root_ + "/a");
  fs::create_directories(root_ + "/b");
  std::string a = JobStateRoot(root_ + "/a", {base});
  ASSERT_TRUE(a.starts_with(base + "/")) << a;
  EXPECT_EQ(JobStateRoot(root_ + "/a/", {base}), a);  // one directory, one place
  EXPECT_EQ(JobStateRoot(root_ + "/b/../a", {base}), a);
  std::string b = JobStateRoot(root_ + "/b", {base});
  EXPECT_NE(b, a);
  for (const std::string& d : {base, a}) {
    struct stat st {};
    ASSERT_EQ(::lstat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
  // Not in memory: the data directory's own run/.
  EXPECT_EQ(JobStateRoot(root_ + "/a", {root_ + "/disk/base"}), root_ + "/a/run");
  // A base someone else may enter, or a link to elsewhere, is refused.
  ASSERT_EQ(::chmod(base.c_str(), 0777), 0);
  EXPECT_EQ(JobStateRoot(root_ + "/a", {base}), root_ + "/a/run");
  ASSERT_EQ(::chmod(base.c_str(), 0700), 0);
  std::string link = base + "-link";
  ASSERT_EQ(::symlink(base.c_str(), link.c_str()), 0);
  EXPECT_EQ(JobStateRoot(root_ + "/a", {link}), root_ + "/a/run");
  ::unlink(link.c_str());
  // The next base when the first will not do.
  EXPECT_EQ(JobStateRoot(root_ + "/a", {root_ + "/disk/base", base}), a);

  // The state of a data directory that is gone goes too; a live one's stays.
  ASSERT_TRUE(fs::exists(b));
  fs::create_directories(b + "/jobs/j-000001@1");
  fs::create_directories(root_ + "/c");
  std::string c = JobStateRoot(root_ + "/c", {base});
  SweepJobStateRoots(c, {base});
  EXPECT_TRUE(fs::exists(b + "/jobs/j-000001@1"));
  fs::remove_all(root_ + "/b");
  EXPECT_EQ(JobStateRoot(root_ + "/c", {base}), c);
  SweepJobStateRoots(c, {base});
  EXPECT_FALSE(fs::exists(b));
  EXPECT_TRUE(fs::exists(c));
  EXPECT_EQ(Slurp(c + "/owner"), fs::canonical(root_ + "/c").string());
  // A data directory not made yet is made first, its root kept.
  std::string d = JobStateRoot(root_ + "/d/agent", {base});
  EXPECT_TRUE(fs::is_directory(root_ + "/d/agent"));
  EXPECT_TRUE(fs::exists(d));
}

TEST_F(JobDirTest, SpareDirsAreMadeAheadAndRenamedIntoPlace) {
  std::string root = MakeDir("outputs");
  int fills = 0;
  auto fill = [&](const std::string& d) {
    ++fills;
    Spit(d + "/made-ahead", "yes");
  };
  SpareDirs spares(root, ".spare-", 2, fill);
  // None yet: made on the spot, filled as a spare would have been.
  ASSERT_FALSE(spares.Take(root + "/j-000001@1"));
  EXPECT_EQ(Slurp(root + "/j-000001@1/made-ahead"), "yes");
  spares.Refill();
  EXPECT_EQ(fills, 3);
  EXPECT_TRUE(fs::is_directory(root + "/.spare-0"));
  EXPECT_TRUE(fs::is_directory(root + "/.spare-1"));
  spares.Refill();  // already full
  EXPECT_EQ(fills, 3);
  // A spare goes into place whole, with what was made in it.
  ASSERT_FALSE(spares.Take(root + "/j-000002@1"));
  EXPECT_EQ(Slurp(root + "/j-000002@1/made-ahead"), "yes");
  EXPECT_EQ(fills, 3);
  // A directory already there (a retry's checkpoints) is left as it is.
  fs::create_directories(root + "/j-000003");
  Spit(root + "/j-000003/kept", "1");
  ASSERT_FALSE(spares.Take(root + "/j-000003"));
  EXPECT_EQ(Slurp(root + "/j-000003/kept"), "1");
  EXPECT_FALSE(fs::exists(root + "/j-000003/made-ahead"));
  // A new set (a restarted agent) takes the spares left; new names follow theirs.
  SpareDirs again(root, ".spare-", 2, fill);
  ASSERT_FALSE(again.Take(root + "/j-000004@1"));
  EXPECT_EQ(fills, 3);
  again.Refill();
  EXPECT_EQ(fills, 5);  // the one it took and the one never made
  int left = 0;
  for (const auto& e : fs::directory_iterator(root)) left += e.path().filename().string().starts_with(".spare-");
  EXPECT_EQ(left, 2);
  // Nowhere to make it (under a file): the error says so.
  SpareDirs none(root + "/missing", ".spare-", 1);
  EXPECT_TRUE(none.Take(root + "/j-000001@1/made-ahead/x"));
}

// ---- the supervisor, as the real programs run it ----

// Every supervisor test runs against both programs that carry the
// supervisor: `drover supervise` (what older agents spawned, and what a
// restarted agent re-adopts) and the small `drover-supervise`.

}  // namespace
}  // namespace drover::agent
