#include "sim_role.h"

#include <iostream>

#include "drover/cli/commands.h"
#include "drover/common/config.h"
#include "drover/common/status.h"
#include "drover/sim/engine.h"
#include "drover/sim/loaders.h"
#include "drover/sim/report.h"
#include "role_common.h"

namespace drover::app {

int RunSim(const SimFlags& f, const std::vector<std::string>& args) {
  sim::EngineOptions o;
  o.seed = f.seed;
  o.inflate = f.inflate;
  o.check = f.check;
  o.resume = f.resume;
  o.all_preemptible = f.all_preemptible;
  auto mode = sim::ParseMode(f.mode);
  if (!mode.ok()) return BadConfig(mode.status());
  o.mode = *mode;
  auto policy = sim::ParsePolicy(f.policy);
  if (!policy.ok()) return BadConfig(policy.status());
  o.config = *policy;
  auto stop = ParseDurationMs(f.stop_delay);
  if (!stop.ok()) return BadConfig(InvalidArgument("--stop-delay: " + stop.status().message()));
  o.stop_delay_ms = *stop;
  auto tick = ParseDurationMs(f.tick);
  if (!tick.ok()) return BadConfig(InvalidArgument("--tick: " + tick.status().message()));
  o.tick_ms = *tick;
  auto cluster = sim::LoadCluster(f.cluster);
  if (!cluster.ok()) return BadConfig(cluster.status());
  // --seed also replaces a synthetic workload's own seed, but only when given.
  auto workload = f.seed_given ? sim::LoadWorkload(f.workload, f.seed) : sim::LoadWorkload(f.workload);
  if (!workload.ok()) return BadConfig(workload.status());
  // Without --seed a synthetic workload keeps its file's seed: report that
  // one, and let --inflate and the scheduler draw from it too.
  if (!f.seed_given && workload->seed) o.seed = *workload->seed;
  auto run = sim::Simulate(*cluster, *workload, o);
  if (!run.ok()) {
    std::cerr << "error: " << run.status().message() << "\n";
    return cli::kExitFailure;
  }
  sim::RunInfo info;
  for (size_t i = 0; i < args.size(); ++i) info.command += (i ? " " : "") + args[i];
  info.cluster = cluster->name;
  info.workload = workload->name;
  info.cluster_spec = f.cluster;
  info.workload_spec = f.workload;
  info.nodes = static_cast<int64_t>(cluster->nodes.size());
  info.gpus = cluster->gpus();
  info.options = o;
  std::cout << sim::HumanSummary(info, *run);
  if (!f.out.empty()) {
    if (Status s = sim::WriteReport(f.out, info, *run, {f.gnuplot}); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      return cli::kExitFailure;
    }
    std::cout << "report: " << f.out << "/report.html\n";
  }
  return 0;
}

CLI::App* AddSimCommand(CLI::App& app, SimFlags* f, const std::vector<std::string>* args, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("sim", "replay a cluster trace through the scheduler on a virtual clock");
  cmd->add_option("--cluster", f->cluster, "cluster: FORMAT:PATH (itp, pai2023, pai2020, philly-vc) or a YAML file")
      ->required();
  cmd->add_option("--workload", f->workload, "workload: FORMAT:PATH or a YAML file (kind: synthetic)")->required();
  cmd->add_option("--mode", f->mode, "time (jobs run and finish) or packing (FGD: jobs never finish)")
      ->capture_default_str();
  cmd->add_option("--policy", f->policy,
                  "scheduler policies, e.g. fair-share,spread or queue=las,backfill=off (default: the server's)");
  cmd->add_option("--seed", f->seed, "seed of every random choice (synthetic workloads, --inflate)")
      ->capture_default_str();
  cmd->add_option("--inflate", f->inflate, "extend the jobs to X x cluster GPU capacity, then shuffle (FGD: 1.3)")
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_flag("--resume", f->resume,
                "a preempted job keeps its progress (checkpoints) and runs only the rest; default: from scratch");
  cmd->add_flag("--preemptible", f->all_preemptible, "make every job preemptible (traces do not say)");
  cmd->add_option("--stop-delay", f->stop_delay, "how long a preempted job takes to stop")->capture_default_str();
  cmd->add_option("--tick", f->tick, "an extra scheduling pass this often while jobs wait (0: only after events)")
      ->capture_default_str();
  cmd->add_option("--out", f->out, "write summary.json, timeseries.csv, jobs.csv and report.html here");
  cmd->add_option("--gnuplot", f->gnuplot, "gnuplot to draw the report's charts (empty: none)")->capture_default_str();
  cmd->add_flag("--check", f->check, "check the scheduler's invariants after every pass (slow)");
  cmd->callback([cmd, f, args, exit_code] {
    f->seed_given = cmd->count("--seed") > 0;
    *exit_code = RunSim(*f, *args);
  });
  return cmd;
}

}  // namespace drover::app
