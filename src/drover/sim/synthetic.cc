#include "drover/sim/synthetic.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "drover/common/config.h"
#include "drover/common/ids.h"
#include "drover/common/quantity.h"
#include "drover/common/rng.h"
#include "drover/sim/cluster_yaml.h"

namespace drover::sim {
namespace {

constexpr int kMaxReplicas = 4096;  // the scheduler refuses larger gangs
constexpr double kMsPerHour = 3'600'000.0;

// ---- YAML scalars (errors name the key path: "duration.sigma: ...") ----

using detail::Scalar;
using detail::Show;
using detail::YInt;
using detail::YReal;

Result<int64_t> Duration(const YAML::Node& n, const std::string& where) {
  auto d = ParseDurationMs(Scalar(n));
  if (!d.ok()) return InvalidArgument(fmt::format("{}: {} is not a duration (e.g. 90s, 30m, 2h, 1d)", where, Show(n)));
  return *d;
}
Result<double> Weight(const YAML::Node& n, const std::string& where) { return YReal(n, where, 0, 1e12); }

// Calls f(key, value, "section.key") for each entry; an error names the key.
template <typename F>
Status ForEach(const YAML::Node& map, const std::string& section, F f) {
  if (!map.IsMap()) return InvalidArgument(fmt::format("{}: must be a mapping", section));
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    DROVER_RETURN_IF_ERROR(f(key, kv.second, section + "." + key));
  }
  return Status::Ok();
}
Status Unknown(const std::string& where, std::string_view known) {
  return InvalidArgument(fmt::format("{}: key is unknown (use {})", where, known));
}

Status ParseArrivals(const YAML::Node& y, SyntheticConfig* c) {
  return ForEach(y, "arrivals", [&](const std::string& key, const YAML::Node& v, const std::string& where) -> Status {
    if (key == "process") {
      std::string p = Scalar(v);
      if (p != "poisson" && p != "uniform") {
        return InvalidArgument(fmt::format("{}: {} is unknown (use poisson or uniform)", where, Show(v)));
      }
      c->arrivals = p == "poisson" ? ArrivalProcess::kPoisson : ArrivalProcess::kUniform;
    } else if (key == "rate_per_hour") {
      DROVER_ASSIGN_OR_RETURN(c->rate_per_hour, YReal(v, where, 0, 1e9));
    } else if (key == "count") {
      DROVER_ASSIGN_OR_RETURN(c->count, YInt(v, where, 0, kMaxSyntheticJobs));
    } else if (key == "window") {
      DROVER_ASSIGN_OR_RETURN(c->window_ms, Duration(v, where));
    } else if (key == "start") {
      DROVER_ASSIGN_OR_RETURN(c->start_ms, Duration(v, where));
    } else {
      return Unknown(where, "process, rate_per_hour, count, window, start");
    }
    return Status::Ok();
  });
}

Status ParseDuration(const YAML::Node& y, SyntheticConfig* c) {
  return ForEach(y, "duration", [&](const std::string& key, const YAML::Node& v, const std::string& where) -> Status {
    if (key == "distribution") {
      std::string d = Scalar(v);
      if (d == "lognormal") {
        c->duration = DurationDist::kLognormal;
      } else if (d == "exponential") {
        c->duration = DurationDist::kExponential;
      } else if (d == "fixed") {
        c->duration = DurationDist::kFixed;
      } else {
        return InvalidArgument(fmt::format("{}: {} is unknown (use lognormal, exponential or fixed)", where, Show(v)));
      }
    } else if (key == "median") {
      DROVER_ASSIGN_OR_RETURN(c->median_ms, Duration(v, where));
    } else if (key == "sigma") {
      DROVER_ASSIGN_OR_RETURN(c->sigma, YReal(v, where, 0, 10));
    } else if (key == "mean" || key == "value") {
      DROVER_ASSIGN_OR_RETURN(c->mean_ms, Duration(v, where));
    } else if (key == "min") {
      DROVER_ASSIGN_OR_RETURN(c->min_ms, Duration(v, where));
    } else if (key == "max") {
      DROVER_ASSIGN_OR_RETURN(c->max_ms, Duration(v, where));
    } else {
      return Unknown(where, "distribution, median, sigma, mean, value, min, max");
    }
    return Status::Ok();
  });
}

Status ParseEstimates(const YAML::Node& y, SyntheticConfig* c) {
  auto mode = [&](const YAML::Node& v, const std::string& where) -> Status {
    std::string m = Scalar(v);
    if (m == "none") {
      c->estimates = EstimateMode::kNone;
    } else if (m == "exact") {
      c->estimates = EstimateMode::kExact;
    } else if (m == "noisy") {
      c->estimates = EstimateMode::kNoisy;
    } else {
      return InvalidArgument(fmt::format("{}: {} is unknown (use none, exact or noisy)", where, Show(v)));
    }
    return Status::Ok();
  };
  if (y.IsScalar()) return mode(y, "estimates");
  return ForEach(y, "estimates", [&](const std::string& key, const YAML::Node& v, const std::string& where) -> Status {
    if (key == "mode") return mode(v, where);
    if (key != "sigma") return Unknown(where, "mode, sigma");
    DROVER_ASSIGN_OR_RETURN(c->estimate_sigma, YReal(v, where, 0, 10));
    return Status::Ok();
  });
}

Status ParseRoot(const YAML::Node& root, SyntheticConfig* c) {
  return ForEach(root, "", [&](const std::string& key, const YAML::Node& v, const std::string& dotted) -> Status {
    const std::string where = dotted.substr(1);
    if (key == "kind") {
      if (Scalar(v) != "synthetic") return InvalidArgument(fmt::format("kind: {} is not synthetic", Show(v)));
    } else if (key == "name") {
      c->name = Scalar(v);
      if (c->name.empty()) return InvalidArgument("name: is empty");
    } else if (key == "seed") {
      std::string s = Scalar(v);
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), c->seed);
      if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
        return InvalidArgument(fmt::format("seed: {} is not an unsigned integer", Show(v)));
      }
    } else if (key == "arrivals") {
      return ParseArrivals(v, c);
    } else if (key == "duration") {
      return ParseDuration(v, c);
    } else if (key == "estimates") {
      return ParseEstimates(v, c);
    } else if (key == "gpus") {
      c->shapes.clear();
      return ForEach(v, "gpus", [&](const std::string& k, const YAML::Node& w, const std::string& at) -> Status {
        auto shape = ParseJobShape(k);
        if (!shape.ok()) return InvalidArgument(fmt::format("gpus: {}", shape.status().message()));
        DROVER_ASSIGN_OR_RETURN(shape->weight, Weight(w, at));
        c->shapes.push_back(*shape);
        return Status::Ok();
      });
    } else if (key == "tenants") {
      c->tenants.clear();
      return ForEach(v, "tenants", [&](const std::string& k, const YAML::Node& w, const std::string& at) -> Status {
        DROVER_RETURN_IF_ERROR(ValidateName("tenants: tenant", k));
        DROVER_ASSIGN_OR_RETURN(double weight, Weight(w, at));
        c->tenants.push_back({k, weight});
        return Status::Ok();
      });
    } else if (key == "priorities") {
      c->priorities.clear();
      return ForEach(v, "priorities", [&](const std::string& k, const YAML::Node& w, const std::string& at) -> Status {
        int p = 0;
        auto [e, ec] = std::from_chars(k.data(), k.data() + k.size(), p);
        if (k.empty() || ec != std::errc() || e != k.data() + k.size()) {
          return InvalidArgument(fmt::format("priorities: '{}' is not an integer priority", k));
        }
        DROVER_ASSIGN_OR_RETURN(double weight, Weight(w, at));
        c->priorities.push_back({p, weight});
        return Status::Ok();
      });
    } else if (key == "preemptible") {
      DROVER_ASSIGN_OR_RETURN(c->preemptible, YReal(v, where, 0, 1));
    } else if (key == "cpu_per_gpu") {
      DROVER_ASSIGN_OR_RETURN(double cores, YReal(v, where, 0, 1e6));
      c->cpu_milli_per_gpu = std::llround(cores * 1000);
    } else if (key == "memory_per_gpu") {
      auto b = ParseBytes(Scalar(v));
      if (!b.ok()) return InvalidArgument(fmt::format("{}: {} is not a size (e.g. 64GiB)", where, Show(v)));
      c->memory_bytes_per_gpu = *b;
    } else {
      return Unknown(where,
                     "kind, name, seed, arrivals, gpus, duration, tenants, priorities, preemptible, estimates, "
                     "cpu_per_gpu, memory_per_gpu");
    }
    return Status::Ok();
  });
}

// ---- sampling ----

// Picks an index with probability weight / total: O(log n).
class Picker {
 public:
  template <typename T>
  explicit Picker(const std::vector<T>& items) {
    double sum = 0;
    for (const auto& it : items) cumulative_.push_back(sum += it.weight);
  }
  size_t Pick(Rng& rng) const {
    double u = rng.UniformReal() * cumulative_.back();
    auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    return std::min(static_cast<size_t>(it - cumulative_.begin()), cumulative_.size() - 1);
  }

 private:
  std::vector<double> cumulative_;
};

// Standard normal by Box-Muller (one of the pair; simple and deterministic).
double Normal(Rng& rng) {
  double u1 = 1.0 - rng.UniformReal();  // (0, 1]
  double u2 = rng.UniformReal();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}
double Exponential(Rng& rng) { return -std::log(1.0 - rng.UniformReal()); }

int64_t DrawDuration(const SyntheticConfig& c, Rng& rng) {
  double ms = 0;
  switch (c.duration) {
    case DurationDist::kLognormal: ms = static_cast<double>(c.median_ms) * std::exp(c.sigma * Normal(rng)); break;
    case DurationDist::kExponential: ms = static_cast<double>(c.mean_ms) * Exponential(rng); break;
    case DurationDist::kFixed: ms = static_cast<double>(c.mean_ms); break;
  }
  ms = std::clamp(ms, static_cast<double>(c.min_ms), static_cast<double>(c.max_ms));
  return std::llround(ms);
}

Status Validate(const SyntheticConfig& c) {
  auto positive = [](const auto& items) {
    double sum = 0;
    for (const auto& it : items) {
      if (!(it.weight >= 0)) return false;
      sum += it.weight;
    }
    return sum > 0;
  };
  if (!positive(c.shapes)) return InvalidArgument("gpus: needs at least one shape with a positive weight");
  if (!positive(c.tenants)) return InvalidArgument("tenants: needs at least one tenant with a positive weight");
  if (!positive(c.priorities)) return InvalidArgument("priorities: needs at least one priority with a positive weight");
  for (const auto& s : c.shapes) {
    if (s.replicas < 1 || s.replicas > kMaxReplicas || s.gpus < 0 || s.gpus > sched::kMaxGpusPerNode ||
        s.gpu_milli < 1 || s.gpu_milli > sched::kWholeGpu || (s.gpu_milli < sched::kWholeGpu && s.gpus != 1) ||
        (s.gpus == 0 && s.replicas != 1)) {
      return InvalidArgument(fmt::format("gpus: shape '{}' is not a valid job shape", s.label));
    }
  }
  if (c.count < 0 || c.count > kMaxSyntheticJobs) {
    return InvalidArgument(fmt::format("arrivals.count: {} is outside 0..{}", c.count, kMaxSyntheticJobs));
  }
  if (c.window_ms < 0 || c.start_ms < 0) return InvalidArgument("arrivals: window and start must not be negative");
  if (c.arrivals == ArrivalProcess::kPoisson) {
    if (!(c.rate_per_hour > 0))
      return InvalidArgument("arrivals.rate_per_hour: a poisson process needs a rate above 0");
    if (c.count == 0 && c.window_ms == 0) return InvalidArgument("arrivals: give count, window or both");
  } else if (c.count == 0 || c.window_ms == 0) {
    return InvalidArgument("arrivals: a uniform process needs both count and window");
  }
  if (c.min_ms < 1 || c.max_ms < c.min_ms) {
    return InvalidArgument(fmt::format("duration: min {}ms and max {}ms need 1ms <= min <= max", c.min_ms, c.max_ms));
  }
  if (c.duration == DurationDist::kLognormal && c.median_ms < 1)
    return InvalidArgument("duration.median: must be above 0");
  if (c.duration != DurationDist::kLognormal && c.mean_ms < 1) return InvalidArgument("duration.mean: must be above 0");
  if (!(c.preemptible >= 0 && c.preemptible <= 1)) return InvalidArgument("preemptible: must be in 0..1");
  if (c.cpu_milli_per_gpu < 0 || c.memory_bytes_per_gpu < 0)
    return InvalidArgument("host requests must not be negative");
  return Status::Ok();
}

}  // namespace

Result<JobShape> ParseJobShape(std::string_view text) {
  JobShape s;
  s.label = std::string(text);
  auto integer = [](std::string_view t, int* out) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), *out);
    return !t.empty() && ec == std::errc() && p == t.data() + t.size();
  };
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("'{}' is not a job shape: {} (use e.g. 0, 0.25, 250m, 1, 8, 4x8)", text, why));
  };
  if (size_t x = text.find('x'); x != std::string_view::npos) {
    if (!integer(text.substr(0, x), &s.replicas) || !integer(text.substr(x + 1), &s.gpus)) {
      return bad("a gang is REPLICASxGPUS");
    }
    if (s.replicas < 1 || s.replicas > kMaxReplicas) return bad(fmt::format("replicas outside 1..{}", kMaxReplicas));
    if (s.gpus < 1 || s.gpus > sched::kMaxGpusPerNode) {
      return bad(fmt::format("GPUs per replica outside 1..{}", sched::kMaxGpusPerNode));
    }
    return s;
  }
  auto milli = ParseMilliGpu(text);
  if (!milli.ok()) return bad("not a GPU quantity");
  if (*milli == 0) {
    s.gpus = 0;  // CPU-only
  } else if (*milli < sched::kWholeGpu) {
    s.gpu_milli = static_cast<int>(*milli);
  } else if (*milli % sched::kWholeGpu != 0 || *milli / sched::kWholeGpu > sched::kMaxGpusPerNode) {
    return bad(fmt::format("above one GPU only whole GPUs, at most {} on one node", sched::kMaxGpusPerNode));
  } else {
    s.gpus = static_cast<int>(*milli / sched::kWholeGpu);
  }
  return s;
}

Result<SyntheticConfig> ParseSyntheticConfig(std::string_view yaml_text, std::string_view source) {
  SyntheticConfig c;
  std::string name(source);
  if (size_t dot = name.find_last_of('.'); dot != std::string::npos && dot > 0) name.resize(dot);
  if (!name.empty()) c.name = name;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(fmt::format("{}: not valid YAML: {}", source, e.what()));
  }
  if (!root.IsMap()) return InvalidArgument(fmt::format("{}: must be a YAML mapping", source));
  if (Scalar(root["kind"]) != "synthetic")
    return InvalidArgument(fmt::format("{}: kind: synthetic is missing", source));
  Status s;
  try {
    s = ParseRoot(root, &c);
  } catch (const YAML::Exception& e) {  // a key that is not a scalar, say
    s = InvalidArgument(e.what());
  }
  if (s.ok()) s = Validate(c);
  if (!s.ok()) return InvalidArgument(fmt::format("{}: {}", source, s.message()));
  return c;
}

Result<Workload> GenerateSynthetic(const SyntheticConfig& c, uint64_t seed) {
  DROVER_RETURN_IF_ERROR(Validate(c));
  Rng rng(seed);
  // Arrival times first (one pass), then every job's attributes in order,
  // so that each job's draws depend only on the seed and its position.
  std::vector<int64_t> times;
  const double end = c.window_ms > 0 ? static_cast<double>(c.start_ms + c.window_ms) : HUGE_VAL;
  if (c.arrivals == ArrivalProcess::kPoisson) {
    const double mean_gap_ms = kMsPerHour / c.rate_per_hour;
    if (c.count > 0) {
      times.reserve(static_cast<size_t>(c.count));
    } else if (double expect = static_cast<double>(c.window_ms) / mean_gap_ms; expect < kMaxSyntheticJobs) {
      times.reserve(static_cast<size_t>(expect * 1.1) + 16);
    }
    double t = static_cast<double>(c.start_ms);
    while (c.count == 0 || static_cast<int64_t>(times.size()) < c.count) {
      t += mean_gap_ms * Exponential(rng);
      if (t >= end) break;
      if (static_cast<int64_t>(times.size()) >= kMaxSyntheticJobs) {
        return InvalidArgument(fmt::format("arrivals: the rate and window give more than {} jobs", kMaxSyntheticJobs));
      }
      times.push_back(std::llround(t));
    }
  } else {
    times.resize(static_cast<size_t>(c.count));
    for (auto& t : times) t = rng.Uniform(c.start_ms, c.start_ms + c.window_ms - 1);
    std::sort(times.begin(), times.end());
  }

  const Picker shapes(c.shapes), tenants(c.tenants), priorities(c.priorities);
  Workload w;
  w.name = c.name;
  w.seed = seed;
  w.jobs.resize(times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    SimJob& j = w.jobs[i];
    j.submit_ms = times[i];
    j.req.id = FormatJobId(i + 1);
    const JobShape& s = c.shapes[shapes.Pick(rng)];
    j.req.replicas = s.replicas;
    j.req.gpus = s.gpus;
    j.req.gpu_milli = s.gpu_milli;
    j.duration_ms = DrawDuration(c, rng);
    j.req.tenant = c.tenants[tenants.Pick(rng)].value;
    j.req.priority = c.priorities[priorities.Pick(rng)].value;
    j.req.preemptible = c.preemptible > 0 && rng.Bernoulli(c.preemptible);
    if (c.estimates == EstimateMode::kExact) {
      j.req.runtime_estimate_ms = j.duration_ms;
    } else if (c.estimates == EstimateMode::kNoisy) {
      double e = static_cast<double>(j.duration_ms) * std::exp(c.estimate_sigma * Normal(rng));
      j.req.runtime_estimate_ms = std::max<int64_t>(1, std::llround(e));
    }
    // Host requests scale with the GPUs of one replica (a share: its part).
    const double per_replica = s.gpus == 0 ? 1.0 : s.gpus * (s.gpu_milli / 1000.0);
    j.req.cpu_milli = std::llround(static_cast<double>(c.cpu_milli_per_gpu) * per_replica);
    j.req.memory_bytes = std::llround(static_cast<double>(c.memory_bytes_per_gpu) * per_replica);
  }
  return w;
}

}  // namespace drover::sim
