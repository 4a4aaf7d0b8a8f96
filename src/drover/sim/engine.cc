#include "drover/sim/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <queue>
#include <random>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "drover/common/config.h"
#include "drover/sched/scheduler.h"

namespace drover::sim {

std::string_view ModeName(Mode m) { return m == Mode::kPacking ? "packing" : "time"; }

Result<Mode> ParseMode(std::string_view s) {
  if (s == "time") return Mode::kTime;
  if (s == "packing") return Mode::kPacking;
  return InvalidArgument(fmt::format("mode '{}' is unknown (use time or packing)", s));
}

// ------------------------------------------------------------------- policy --

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::string Duration(int64_t ms) {
  if (ms % 3'600'000 == 0 && ms != 0) return fmt::format("{}h", ms / 3'600'000);
  if (ms % 60'000 == 0 && ms != 0) return fmt::format("{}m", ms / 60'000);
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  return fmt::format("{}ms", ms);
}

Status SetKey(sched::Config& c, std::string_view key, std::string_view value) {
  auto named = [&](const Status& s) { return InvalidArgument(fmt::format("policy {}: {}", key, s.message())); };
  if (key == "queue") {
    auto q = sched::ParseQueuePolicy(value);
    if (!q.ok()) return named(q.status());
    c.queue = *q;
  } else if (key == "placement") {
    auto p = sched::ParsePlacementPolicy(value);
    if (!p.ok()) return named(p.status());
    c.placement = *p;
  } else if (key == "backfill" || key == "preemption") {
    auto b = ParseBool(value);
    if (!b.ok()) return named(b.status());
    (key == "backfill" ? c.backfill : c.preemption) = *b;
  } else if (key == "aging" || key == "preemption-grace") {
    auto d = ParseDurationMs(value);
    if (!d.ok()) return named(d.status());
    (key == "aging" ? c.aging_ms : c.preemption_grace_ms) = *d;
  } else if (key == "frag-coverage") {
    char* end = nullptr;
    std::string v(value);
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !(x > 0 && x <= 1)) {
      return InvalidArgument(fmt::format("policy frag-coverage: '{}' is not a share in (0, 1]", value));
    }
    c.frag_coverage = x;
  } else if (key == "las-thresholds") {
    // Commas separate the settings: thresholds are joined with ':' here (las-thresholds=1h:10h).
    std::string list(value);
    std::replace(list.begin(), list.end(), ':', ',');
    auto t = sched::ParseLasThresholds(list);
    if (!t.ok()) return named(t.status());
    c.las_thresholds = *t;
  } else if (key == "las-starvation") {
    auto k = sched::ParseStarvationFactor(value);
    if (!k.ok()) return named(k.status());
    c.las_starvation_factor = *k;
  } else {
    return InvalidArgument(
        fmt::format("policy key '{}' is unknown (use queue, placement, backfill, preemption, aging, preemption-grace, "
                    "las-thresholds, las-starvation, frag-coverage)",
                    key));
  }
  return Status::Ok();
}

}  // namespace

Result<sched::Config> ParsePolicy(std::string_view spec) {
  sched::Config c;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = Trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    if (size_t eq = item.find('='); eq != std::string_view::npos) {
      DROVER_RETURN_IF_ERROR(SetKey(c, Trim(item.substr(0, eq)), Trim(item.substr(eq + 1))));
    } else if (item == "backfill" || item == "preemption") {
      DROVER_RETURN_IF_ERROR(SetKey(c, item, "on"));
    } else if (item == "no-backfill" || item == "no-preemption") {
      DROVER_RETURN_IF_ERROR(SetKey(c, item.substr(3), "off"));
    } else if (sched::ParseQueuePolicy(item).ok()) {
      c.queue = *sched::ParseQueuePolicy(item);
    } else if (sched::ParsePlacementPolicy(item).ok()) {
      c.placement = *sched::ParsePlacementPolicy(item);
    } else {
      return InvalidArgument(fmt::format(
          "policy '{}' is unknown: use a queue policy (fifo, priority, fair-share, las, sjf), a placement policy "
          "(binpack, spread, best-fit, random, frag), [no-]backfill, [no-]preemption or key=value",
          item));
    }
  }
  return c;
}

std::string PolicyString(const sched::Config& c) {
  std::string s =
      fmt::format("queue={},placement={},backfill={},preemption={},aging={},preemption-grace={}",
                  sched::QueuePolicyName(c.queue), sched::PlacementPolicyName(c.placement), c.backfill ? "on" : "off",
                  c.preemption ? "on" : "off", Duration(c.aging_ms), Duration(c.preemption_grace_ms));
  if (c.queue == sched::QueuePolicy::kLas) {
    std::vector<std::string> t;
    for (int64_t ms : c.las_thresholds) t.push_back(Duration(ms));
    s += ",las-thresholds=" + (t.empty() ? std::string("none") : fmt::format("{}", fmt::join(t, ":")));
    s += fmt::format(",las-starvation={}", c.las_starvation_factor);
  }
  if (c.placement == sched::PlacementPolicy::kFrag) s += fmt::format(",frag-coverage={}", c.frag_coverage);
  return s;
}

// ------------------------------------------------------------------ inflate --

namespace {

// Uniform in [0, n) from the raw 64-bit engine, by rejection (exact, and the
// same with every standard library, unlike std::uniform_int_distribution).
uint64_t Below(std::mt19937_64& rng, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % n;
}

int64_t GpuMilli(const SimJob& j) { return j.req.gpus == 0 ? 0 : j.req.milli(); }

}  // namespace

Result<std::vector<SimJob>> Inflate(const std::vector<SimJob>& jobs, int64_t cluster_milli, double factor,
                                    uint64_t seed, bool keep_time) {
  std::mt19937_64 rng(seed);
  std::vector<SimJob> out = jobs;
  int64_t total = 0;
  for (const SimJob& j : jobs) total += GpuMilli(j);
  auto goal = static_cast<int64_t>(std::ceil(factor * static_cast<double>(cluster_milli)));
  if (total < goal && total == 0) return InvalidArgument("cannot inflate a workload in which no job asks for a GPU");
  int64_t first = jobs.empty() ? 0 : jobs.front().submit_ms, last = first;
  for (const SimJob& j : jobs) {
    first = std::min(first, j.submit_ms);
    last = std::max(last, j.submit_ms);
  }
  for (int64_t copy = 1; total < goal; ++copy) {
    SimJob j = jobs[Below(rng, jobs.size())];
    j.req.id += "~" + std::to_string(copy);
    if (keep_time) j.submit_ms = first + static_cast<int64_t>(Below(rng, static_cast<uint64_t>(last - first) + 1));
    total += GpuMilli(j);
    out.push_back(std::move(j));
  }
  for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[Below(rng, i)]);  // Fisher-Yates
  if (keep_time) {
    std::stable_sort(out.begin(), out.end(),
                     [](const SimJob& a, const SimJob& b) { return a.submit_ms < b.submit_ms; });
  }
  return out;
}

// ------------------------------------------------------------------- engine --

namespace {

// The run's --seed also seeds the scheduler's own random choices.
sched::Config SeededConfig(sched::Config c, uint64_t seed) {
  c.seed = seed;
  return c;
}

using Clock = std::chrono::steady_clock;

class Engine {
 public:
  Engine(const Cluster& cluster, std::vector<SimJob> jobs, const EngineOptions& o)
      : o_(o),
        cluster_(cluster),
        jobs_(std::move(jobs)),
        sched_(SeededConfig(o.config, o.seed)),
        rec_(cluster, jobs_, o.mode),
        live_(jobs_.size()) {}

  Result<RunResult> Run() {
    DROVER_RETURN_IF_ERROR(Setup());
    auto t0 = Clock::now();
    if (o_.mode == Mode::kPacking) {
      DROVER_RETURN_IF_ERROR(RunPacking());
    } else {
      DROVER_RETURN_IF_ERROR(RunTime());
    }
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    RunResult r;
    r.summary = rec_.Finish(last_pass_ms_, wall);
    r.samples = rec_.samples();
    r.records = rec_.records();
    r.calls = std::move(calls_);
    r.decisions = std::move(decisions_);
    r.jobs = std::move(jobs_);
    return r;
  }

 private:
  enum class Kind : uint8_t { kArrive, kFinish, kStop, kTick };
  struct Event {
    int64_t time;
    uint64_t seq;  // insertion order breaks ties
    Kind kind;
    size_t job;
    uint64_t epoch;  // kFinish / kStop: stale if the job was (re)started since
    bool operator>(const Event& e) const { return std::tie(time, seq) > std::tie(e.time, e.seq); }
  };
  enum class State : uint8_t { kFuture, kPending, kRunning, kStopping, kGone };
  struct Live {
    State state = State::kFuture;
    uint64_t epoch = 0;
    int64_t started_ms = 0;  // of the current run
    int64_t done_ms = 0;     // work kept from earlier runs (resume)
  };

  Status Setup() {
    for (const sched::NodeInfo& n : cluster_.nodes) {
      sched::NodeInfo node = n;
      node.schedulable = true;
      DROVER_RETURN_IF_ERROR(sched_.UpsertNode(node));
    }
    for (const sched::TenantInfo& t : cluster_.tenants) DROVER_RETURN_IF_ERROR(sched_.SetTenant(t));
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (!index_.emplace(jobs_[i].req.id, i).second) {
        return InvalidArgument(fmt::format("job id '{}' appears twice in the workload", jobs_[i].req.id));
      }
    }
    return Status::Ok();
  }

  void Push(int64_t time, Kind kind, size_t job = 0, uint64_t epoch = 0) {
    events_.push(Event{time, next_seq_++, kind, job, epoch});
  }

  void Record(SchedCall::Kind kind, int64_t now, const sched::JobRequest& req) {
    if (!o_.record_calls) return;
    SchedCall c;
    c.kind = kind;
    c.now_ms = now;
    if (kind == SchedCall::Kind::kEnqueue) {
      c.job = req;
    } else {
      c.job.id = req.id;
    }
    calls_.push_back(std::move(c));
  }

  // Arrival: rejected like the server's Submit when it can never fit.
  Status Arrive(size_t j, int64_t now) {
    rec_.Arrived(j);
    const sched::JobRequest& req = jobs_[j].req;
    if (sched_.NeverFits(req)) {
      live_[j].state = State::kGone;
      rec_.Rejected(j, now);
      return Status::Ok();
    }
    Record(SchedCall::Kind::kEnqueue, now, req);
    if (Status s = sched_.Enqueue(req, now); !s.ok()) {
      return Status(s.code(), fmt::format("job '{}': {}", req.id, s.message()));
    }
    live_[j].state = State::kPending;
    return Status::Ok();
  }

  void Release(size_t j, int64_t now, JobEnd end, bool requeue) {
    const sched::JobRequest& req = jobs_[j].req;
    if (requeue && o_.resume && live_[j].state == State::kStopping) {
      live_[j].done_ms = std::min(jobs_[j].duration_ms, live_[j].done_ms + (now - live_[j].started_ms));
    }
    if (requeue) {
      Record(SchedCall::Kind::kRequeue, now, req);
      if (Status s = sched_.Requeue(req.id, now); !s.ok()) deferred_ = s;
      live_[j].state = State::kPending;
    } else {
      Record(SchedCall::Kind::kRemove, now, req);
      sched_.Remove(req.id, now);
      live_[j].state = State::kGone;
    }
    ++live_[j].epoch;
    rec_.Stopped(j, now, end);
  }

  // One pass; applies bindings and schedules the stops of preempted jobs.
  Status Pass(int64_t now) {
    Record(SchedCall::Kind::kSchedule, now, {});
    auto t0 = Clock::now();
    sched::Decisions d = sched_.Schedule(now);
    rec_.Pass(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    last_pass_ms_ = now;
    for (const sched::Binding& b : d.bindings) {
      auto it = index_.find(b.job_id);
      if (it == index_.end()) return Internal(fmt::format("scheduler bound unknown job '{}'", b.job_id));
      size_t j = it->second;
      Live& l = live_[j];
      l.state = State::kRunning;
      l.started_ms = now;
      ++l.epoch;
      rec_.Started(j, b, now);
      if (o_.mode == Mode::kTime && jobs_[j].duration_ms > 0)
        Push(now + jobs_[j].duration_ms - l.done_ms, Kind::kFinish, j, l.epoch);
    }
    for (const sched::Preemption& p : d.preemptions) {
      auto it = index_.find(p.job_id);
      if (it == index_.end()) return Internal(fmt::format("scheduler preempted unknown job '{}'", p.job_id));
      size_t j = it->second;
      if (live_[j].state != State::kRunning) continue;  // already stopping
      rec_.Preempted(j);
      if (o_.mode == Mode::kPacking) {
        Release(j, now, JobEnd::kNone, /*requeue=*/true);
        packing_pending_.push_back(j);
      } else {
        live_[j].state = State::kStopping;
        Push(now + o_.stop_delay_ms, Kind::kStop, j, live_[j].epoch);
      }
    }
    if (o_.record_calls) decisions_.push_back(std::move(d));
    if (!deferred_.ok()) return Internal("requeue failed: " + deferred_.message());
    return o_.check ? Check() : Status::Ok();
  }

  Status Check() const {
    if (Status s = sched_.CheckInvariants(); !s.ok()) return Internal("scheduler invariant: " + s.message());
    for (const sched::NodeInfo& n : cluster_.nodes) {
      uint64_t mine = rec_.usage().HeldMask(n.name), theirs = sched_.HeldMask(n.name);
      if (mine != theirs) {
        return Internal(fmt::format("node '{}': the simulator accounts GPUs {:#x} held, the scheduler {:#x}", n.name,
                                    mine, theirs));
      }
    }
    return Status::Ok();
  }

  void Sample(int64_t now, int64_t t) {
    rec_.Sample(now, t, static_cast<int64_t>(sched_.pending()), static_cast<int64_t>(sched_.bound()));
  }

  Status RunTime() {
    for (size_t j = 0; j < jobs_.size(); ++j) Push(jobs_[j].submit_ms, Kind::kArrive, j);
    bool tick_queued = false;
    while (!events_.empty()) {
      int64_t now = events_.top().time;
      bool changed = false;  // a batch of only stale events needs no pass
      while (!events_.empty() && events_.top().time == now) {
        Event e = events_.top();
        events_.pop();
        Live& l = live_[e.job];
        switch (e.kind) {
          case Kind::kArrive:
            DROVER_RETURN_IF_ERROR(Arrive(e.job, now));
            changed = true;
            break;
          case Kind::kFinish:
            if (e.epoch != l.epoch || (l.state != State::kRunning && l.state != State::kStopping)) break;
            rec_.Event();
            Release(e.job, now, JobEnd::kCompleted, /*requeue=*/false);
            changed = true;
            break;
          case Kind::kStop:
            if (e.epoch != l.epoch || l.state != State::kStopping) break;
            rec_.Event();
            Release(e.job, now, JobEnd::kNone, /*requeue=*/true);
            changed = true;
            break;
          case Kind::kTick:
            tick_queued = false;
            changed = true;
            break;
        }
      }
      if (!changed) continue;
      DROVER_RETURN_IF_ERROR(Pass(now));
      Sample(now, now);
      if (o_.tick_ms > 0 && !tick_queued && sched_.pending() > 0 && !events_.empty()) {
        Push(now + o_.tick_ms, Kind::kTick);
        tick_queued = true;
      }
    }
    return Status::Ok();
  }

  Status RunPacking() {
    constexpr int kMaxRounds = 8;
    Sample(0, 0);
    for (size_t j = 0; j < jobs_.size(); ++j) {
      DROVER_RETURN_IF_ERROR(Arrive(j, 0));
      if (live_[j].state == State::kPending) {
        packing_pending_.assign(1, j);
        for (int round = 0; round < kMaxRounds; ++round) {
          size_t before = packing_pending_.size();
          DROVER_RETURN_IF_ERROR(Pass(0));
          if (packing_pending_.size() == before) break;  // no victims: nothing changes in another pass
        }
        for (size_t p : packing_pending_) {
          if (live_[p].state != State::kPending) continue;
          Release(p, 0, JobEnd::kFailed, /*requeue=*/false);
        }
      }
      Sample(0, static_cast<int64_t>(j) + 1);
    }
    return Status::Ok();
  }

  const EngineOptions& o_;
  const Cluster& cluster_;
  std::vector<SimJob> jobs_;
  sched::Scheduler sched_;
  Recorder rec_;
  std::vector<Live> live_;
  std::unordered_map<std::string, size_t> index_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t next_seq_ = 0;
  int64_t last_pass_ms_ = 0;
  std::vector<size_t> packing_pending_;
  Status deferred_;
  std::vector<SchedCall> calls_;
  std::vector<sched::Decisions> decisions_;
};

}  // namespace

Result<RunResult> Simulate(const Cluster& cluster, const Workload& workload, const EngineOptions& options) {
  std::vector<SimJob> jobs = workload.jobs;
  if (options.all_preemptible) {
    for (SimJob& j : jobs) j.req.preemptible = true;
  }
  if (options.inflate > 0) {
    DROVER_ASSIGN_OR_RETURN(jobs, Inflate(jobs, cluster.gpus() * sched::kWholeGpu, options.inflate, options.seed,
                                          options.mode == Mode::kTime));
  } else if (options.mode == Mode::kTime) {
    std::stable_sort(jobs.begin(), jobs.end(),
                     [](const SimJob& a, const SimJob& b) { return a.submit_ms < b.submit_ms; });
  }
  Engine engine(cluster, std::move(jobs), options);
  return engine.Run();
}

}  // namespace drover::sim
