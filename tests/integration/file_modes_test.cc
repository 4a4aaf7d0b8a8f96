// The data directories are their owner's only (docs/security.md, "Files"):
// `drover up`'s and a `drover agent`'s, directories 0700 and files 0600,
// the store with its WAL, the archive, the admin token, the job logs, the
// node's credentials and the jobs' state included. A directory an older
// version (or an operator's cp) left 0755 with 0644 files in it is fixed
// at start, with a warning naming each path it changed; what a job keeps
// in its own directory is the job's, and stays as it was.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "support/drover_process.h"

namespace drover::testing {
namespace {

namespace fs = std::filesystem;

// An entry's permission bits (-1: it does not exist).
int ModeOf(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

void MakeDir(const std::string& path, mode_t mode) {
  fs::create_directories(path);
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

void MakeFile(const std::string& path, mode_t mode) {
  std::ofstream(path) << "left by an older version\n";
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

std::vector<std::string> Parts(const fs::path& p) {
  std::vector<std::string> out;
  for (const fs::path& part : p) out.push_back(part.string());
  return out;
}

// Whether `rel` is in (or is) a directory one of `patterns` names ('*': any
// one path component).
bool JobOwned(const std::vector<std::string>& rel, const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    std::vector<std::string> p = Parts(pattern);
    if (rel.size() < p.size()) continue;
    bool match = true;
    for (size_t i = 0; match && i < p.size(); ++i) match = p[i] == "*" || p[i] == rel[i];
    if (match) return true;
  }
  return false;
}

// Every path at or under `dir` open to the group or others ("PATH 0644"),
// but those a job owns.
std::vector<std::string> OpenPaths(const std::string& dir, const std::vector<std::string>& job_owned = {}) {
  std::vector<std::string> open;
  if ((ModeOf(dir) & 077) != 0) open.push_back(fmt::format("{} {:04o}", dir, ModeOf(dir)));
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_symlink() || JobOwned(Parts(fs::relative(it->path(), dir)), job_owned)) continue;
    const int mode = ModeOf(it->path().string());
    if ((mode & 077) != 0) open.push_back(fmt::format("{} {:04o}", it->path().string(), mode));
  }
  return open;
}

std::string Submit(v1::JobService::Stub* jobs, const std::vector<std::string>& command) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->set_gpus(1);
  for (const std::string& a : command) req.mutable_spec()->add_command(a);
  (*req.mutable_spec()->mutable_env())["API_KEY"] = "a-tenant-secret";  // what spec.json and the store hold
  v1::SubmitJobResponse resp;
  auto ctx = Ctx();
  grpc::Status s = jobs->Submit(ctx.get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.job().id();
}

TEST(FileModesTest, UpMakesItsDataDirectoryItsOwnersOnlyAndFixesAnOpenOne) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  // What an older version left: all of it readable by anyone.
  MakeDir(data, 0755);
  MakeDir(data + "/logs", 0755);
  MakeFile(data + "/logs/j-999999.log", 0644);
  MakeFile(data + "/notes", 0644);
  // A job's own directory: left as the job made it.
  MakeDir(data + "/agents/sim-1/jobs/leftover/work", 0755);
  MakeFile(data + "/agents/sim-1/jobs/leftover/work/result.txt", 0644);

  DroverUp up(data, {"--devices", "none", "--simulate", "1", "--simulate-gpus", "1"});
  ASSERT_TRUE(up.Start());
  ASSERT_TRUE(up.WaitForReadyNodes(2));
  // A running job (its directories and state exist), whose output reached
  // the server's log.
  const std::string id = Submit(up.jobs(), {"sh", "-c", "echo hello; echo mine > mine.txt; exec sleep 600"});
  ASSERT_TRUE(WaitUntil([&] { return ReadAll(data + "/logs/" + id + ".log") == "hello\n"; }));

  EXPECT_EQ(OpenPaths(data, {"agents/*/jobs/*", "agents/*/checkpoints/*"}), std::vector<std::string>{});
  EXPECT_EQ(ModeOf(data), 0700);
  for (const char* dir : {"/logs", "/agents", "/agents/sim-1", "/agents/sim-1/jobs"}) {
    EXPECT_EQ(ModeOf(data + dir), 0700) << dir;
  }
  // Each file the server keeps, its SQLite WAL and shared memory included.
  for (const std::string& file : std::vector<std::string>{
           "/drover.db", "/drover.db-wal", "/drover.db-shm", "/archive.db", "/admin.token", "/endpoints.json",
           "/dashboard-url", "/notes", "/logs/j-999999.log", "/logs/" + id + ".log"}) {
    EXPECT_EQ(ModeOf(data + file), 0600) << file;
  }
  for (const char* file : {"/archive.db-wal", "/archive.db-shm"}) {
    if (ModeOf(data + file) != -1) {
      EXPECT_EQ(ModeOf(data + file), 0600) << file;
    }
  }
  // The job's own directory, made private by its parents: its output and
  // work directory are the job's to use (the job wrote mine.txt there).
  bool found = false;
  for (const auto& e : fs::directory_iterator(data + "/agents/sim-1/jobs")) {
    if (!fs::exists(e.path() / "work" / "mine.txt")) continue;
    found = true;
    EXPECT_EQ(ReadAll((e.path() / "work" / "mine.txt").string()), "mine\n");
    // The job's own files get the usual umask (022), not the agent's 077.
    EXPECT_EQ(ModeOf((e.path() / "work" / "mine.txt").string()), 0644);
    EXPECT_EQ(ReadAll((e.path() / "output.log").string()), "hello\n");
  }
  EXPECT_TRUE(found) << "no job directory with work/mine.txt";
  // What the job owned before is as it was.
  EXPECT_EQ(ModeOf(data + "/agents/sim-1/jobs/leftover/work"), 0755);
  EXPECT_EQ(ModeOf(data + "/agents/sim-1/jobs/leftover/work/result.txt"), 0644);
  // One warning per path it fixed, naming it.
  const std::string err = ReadAll(data + "/up.err");
  EXPECT_NE(err.find(fmt::format("'{}' was mode 0755", data)), std::string::npos) << err;
  EXPECT_NE(err.find(fmt::format("'{}/notes' was mode 0644", data)), std::string::npos) << err;
  EXPECT_NE(err.find(fmt::format("'{}/logs/j-999999.log' was mode 0644", data)), std::string::npos) << err;
  CancelAllJobs(up.jobs());
}

TEST(FileModesTest, AgentMakesItsDataAndStateDirectoriesItsOwnersOnly) {
  TempDir tmp;
  const std::string agent_data = tmp.path() + "/agent";
  const std::string state = tmp.path() + "/state";
  MakeDir(agent_data, 0755);
  MakeFile(agent_data + "/notes", 0644);
  MakeDir(state, 0777);
  DroverUp server(tmp.path() + "/server", {}, "server");
  ASSERT_TRUE(server.Start());
  CommandResult join = RunCli(server.grpc_address(), {"join-token", "--node", "gpu-01"});
  ASSERT_EQ(join.exit_code, 0) << join.err;
  const std::string join_token = join.out.substr(0, join.out.find('\n'));
  pid_t agent = SpawnDrover({"agent", "--server", server.grpc_address(), "--data-dir", agent_data, "--state-dir", state,
                             "--node-name", "gpu-01", "--devices", "simulated", "--simulate-gpus", "1", "--log-level",
                             "warn", "--metrics-listen", "127.0.0.1:0", "--join-token", join_token},
                            tmp.path() + "/agent.out", tmp.path() + "/agent.err");
  ASSERT_GT(agent, 0);
  ASSERT_TRUE(server.WaitForReadyNodes(1));
  const std::string id = Submit(server.jobs(), {"sh", "-c", "echo hello; exec sleep 600"});
  ASSERT_TRUE(WaitUntil([&] { return GetJob(server.jobs(), id).status().state() == v1::JOB_STATE_RUNNING; }));

  EXPECT_EQ(OpenPaths(agent_data, {"jobs/*", "checkpoints/*"}), std::vector<std::string>{});
  EXPECT_EQ(OpenPaths(state), std::vector<std::string>{});  // every job's spec.json, exit.json, ...
  EXPECT_EQ(ModeOf(agent_data), 0700);
  EXPECT_EQ(ModeOf(state), 0700);
  EXPECT_EQ(ModeOf(agent_data + "/notes"), 0600);
  EXPECT_EQ(ModeOf(agent_data + "/node.token"), 0600);
  EXPECT_EQ(ModeOf(agent_data + "/jobs"), 0700);
  int specs = 0;
  for (const auto& e : fs::recursive_directory_iterator(state)) {
    if (e.path().filename() != "spec.json") continue;
    ++specs;
    EXPECT_EQ(ModeOf(e.path().string()), 0600) << e.path();
    EXPECT_NE(ReadAll(e.path().string()).find("a-tenant-secret"), std::string::npos);  // why it matters
  }
  EXPECT_EQ(specs, 1);
  const std::string err = ReadAll(tmp.path() + "/agent.err");
  EXPECT_NE(err.find(fmt::format("'{}' was mode 0777", state)), std::string::npos) << err;
  EXPECT_NE(err.find(fmt::format("'{}/notes' was mode 0644", agent_data)), std::string::npos) << err;
  CancelAllJobs(server.jobs());
  ::kill(agent, SIGTERM);
  ::waitpid(agent, nullptr, 0);
}

}  // namespace
}  // namespace drover::testing
