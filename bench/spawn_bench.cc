// What the per-job supervisor adds between "bind" and "job started": the
// time from SpawnSupervisor() to the job's start (started.json's
// start_unix_nanos, taken just before the supervisor forks the job), to its
// end (exit.json's end_unix_nanos) and to the supervisor's end of it (its
// exit, or for a pooled one its "done"), for the job `true`, p50 and p99
// over many runs, for each way of starting a supervisor: an exec of drover,
// of the small drover-supervise, and the handover to a SupervisorPool's
// idle supervisor (the same process run after run, as the agent keeps it).
// Each run uses a fresh job directory written with JobDir as the agent
// writes it (spec.json, isolation.json), one run at a time; the pooled
// supervisor runs the job once without a cgroup and, where this process may
// make cgroup v2 groups, once in a group of its own, as the agent asks for.
//
//   spawn_bench [--runs N] [--gap-ms MS] [--root DIR] [--drover PATH] [--supervise PATH]
//   spawn_bench --floor N   (the machine's own cost: N posix_spawn + wait of
//                            /bin/true and of `sh -c true`, one loop and two
//                            side by side; no supervisor, no Drover)
//
// Not a Google Benchmark: a run is a process tree and a few fsyncs, and what
// matters is the spread. Results: docs/performance.md.

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

#include "drover/agent/cgroup.h"
#include "drover/agent/job_dir.h"
#include "drover/agent/supervisor.h"

namespace {

namespace fs = std::filesystem;
using drover::agent::JobDir;

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return static_cast<double>(v[std::min(i, v.size() - 1)]) / 1e6;
}

struct Samples {
  std::vector<int64_t> to_start, to_exit, to_reaped;  // ns after the spawn call
};

using drover::agent::SupervisorPool;

// `launch` starts the supervisor of a prepared job directory (a child of
// this process; pid -1 when it could not); `pool`, for a pooled one, hears
// it say the job is done.
using Launch = std::function<SupervisorPool::Launched(const std::string& dir)>;

// `cgroup_parent`: where the job's group goes (the agent's group); empty:
// the job gets none.
bool RunOnce(const Launch& launch, SupervisorPool* pool, const std::string& dir, const std::string& cgroup_parent,
             Samples& out) {
  fs::create_directories(dir);
  JobDir job(dir);
  const std::string name = fs::path(dir).filename().string();
  drover::agent::JobSpecFile spec{name, {"true"}, {{"PATH", "/usr/bin:/bin"}}, "", 10, "", "", std::nullopt};
  drover::agent::JobIsolation iso;
  if (!cgroup_parent.empty())
    iso.cgroup = drover::agent::JobCgroup{cgroup_parent, cgroup_parent + "/" + name, {}, 0, 0, {}};
  if (!job.WriteSpec(spec).ok() || !job.WriteIsolation(iso).ok()) return false;
  const int64_t t0 = UnixNanos();
  SupervisorPool::Launched l = launch(dir);
  if (l.pid <= 0) return false;
  if (l.done_fd >= 0) {
    // A pooled supervisor says "started", then "done", and waits for its
    // next job.
    auto heard = SupervisorPool::Heard::kNothing;
    while (heard == SupervisorPool::Heard::kNothing || heard == SupervisorPool::Heard::kStarted) {
      pollfd p{l.done_fd, POLLIN, 0};
      if (::poll(&p, 1, 10'000) != 1) return false;
      heard = pool->Hear(l.pid);
    }
    if (heard == SupervisorPool::Heard::kRetired || heard == SupervisorPool::Heard::kGone) {
      ::waitpid(l.pid, nullptr, 0);
    } else if (heard != SupervisorPool::Heard::kDone) {
      return false;
    }
  } else {
    int status = 0;
    if (::waitpid(l.pid, &status, 0) != l.pid) return false;
  }
  const int64_t reaped = UnixNanos();
  auto started = job.ReadStarted();
  auto exited = job.ReadExit();
  if (!started || !exited || exited->failed_to_start) {
    std::fprintf(stderr, "run in %s: the job did not run\n", dir.c_str());
    return false;
  }
  out.to_start.push_back(started->start_unix_nanos - t0);
  out.to_exit.push_back(exited->end_unix_nanos - t0);
  out.to_reaped.push_back(reaped - t0);
  return true;
}

void Report(const std::string& name, const Samples& s) {
  std::printf("%-34s %5zu   %7.2f %7.2f   %7.2f %7.2f   %7.2f %7.2f\n", name.c_str(), s.to_start.size(),
              Percentile(s.to_start, 0.5), Percentile(s.to_start, 0.99), Percentile(s.to_exit, 0.5),
              Percentile(s.to_exit, 0.99), Percentile(s.to_reaped, 0.5), Percentile(s.to_reaped, 0.99));
  std::fflush(stdout);
}

}  // namespace

// Processes started and waited for per second, by `loops` loops side by side.
double SpawnRate(std::vector<std::string> argv_s, int n, int loops) {
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto loop = [&] {
    for (int i = 0; i < n; ++i) {
      pid_t pid = 0;
      if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return;
      ::waitpid(pid, nullptr, 0);
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int l = 0; l < loops; ++l) threads.emplace_back(loop);
  for (auto& t : threads) t.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return n * loops / s;
}

int Floor(int n) {
  for (const auto& [name, argv] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"/bin/true", {"/bin/true"}}, {"sh -c true", {"/bin/sh", "-c", "true"}}}) {
    for (int loops : {1, 2}) {
      std::printf("%-12s %d loop%s: %6.0f processes/s\n", name.c_str(), loops, loops == 1 ? " " : "s",
                  SpawnRate(argv, n, loops));
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "--floor") return Floor(std::atoi(argv[2]));
  int runs = 200;
  int gap_ms = 0;
  std::string root = fs::temp_directory_path().string();
  std::string drover = DROVER_BINARY;
  std::string supervise = DROVER_SUPERVISE_BINARY;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string_view flag = argv[i];
    if (flag == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (flag == "--gap-ms")
      gap_ms = std::atoi(argv[i + 1]);
    else if (flag == "--root")
      root = argv[i + 1];
    else if (flag == "--drover")
      drover = argv[i + 1];
    else if (flag == "--supervise")
      supervise = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: spawn_bench [--runs N] [--gap-ms MS] [--root DIR] [--drover PATH] [--supervise PATH]\n");
      return 2;
    }
  }
  std::string base = root + "/drover-spawn-bench-XXXXXX";
  if (::mkdtemp(base.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }

  auto spawn = [](std::string exe) {
    return Launch([exe](const std::string& dir) {
      auto pid = drover::agent::SpawnSupervisor(exe, dir);
      return SupervisorPool::Launched{pid.ok() ? *pid : -1, -1};
    });
  };
  SupervisorPool pool(supervise);
  pool.Refill();
  auto pooled = [&pool](const std::string& dir) {
    auto l = pool.Launch(dir);
    return l.ok() ? *l : SupervisorPool::Launched{};
  };
  struct Variant {
    std::string name;
    Launch launch;
    std::string cgroup_parent;
  };
  std::vector<Variant> variants = {
      {"drover supervise", spawn(drover), ""},
      {"drover-supervise", spawn(supervise), ""},
      {"drover-supervise, SupervisorPool", pooled, ""},
  };
  if (const auto& home = drover::agent::ProcessCgroupHome(); !home.dir.empty()) {
    variants.push_back(
        {"pooled, job in a cgroup", pooled, home.dir + "/drover-spawn-bench-" + std::to_string(::getpid())});
  } else {
    std::printf("(no cgroup variant: %s)\n", home.problem.c_str());
  }

  std::printf("%d runs of `true`, one at a time, %d ms apart, in %s; ms after SpawnSupervisor()\n", runs, gap_ms,
              base.c_str());
  std::printf("%-34s %5s   %7s %7s   %7s %7s   %7s %7s\n", "supervisor", "runs", "start", "p99", "exit", "p99", "ended",
              "p99");
  std::printf("%-34s %5s   %7s %7s   %7s %7s   %7s %7s\n", "", "", "p50", "", "p50", "", "p50", "");
  // Interleaved (run i of every variant, then run i+1), so that whatever
  // else the machine does falls on every variant alike; a few runs first
  // warm the page cache and dentries.
  int failures = 0;
  std::vector<Samples> samples(variants.size());
  for (int i = -5; i < runs; ++i) {
    for (size_t v = 0; v < variants.size(); ++v) {
      Samples warmup;
      std::string dir = base + "/v" + std::to_string(v) + "-" + std::to_string(i + 5);
      if (!RunOnce(variants[v].launch, &pool, dir, variants[v].cgroup_parent, i < 0 ? warmup : samples[v])) ++failures;
      if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
    }
    pool.Refill();  // as the agent does, once the job has had its start (a no-op while one is idle)
  }
  for (size_t v = 0; v < variants.size(); ++v) Report(variants[v].name, samples[v]);
  std::error_code ec;
  fs::remove_all(base, ec);
  return failures == 0 ? 0 : 1;
}
