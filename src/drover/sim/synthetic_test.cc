#include "drover/sim/synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "drover/sim/loaders.h"

namespace drover::sim {
namespace {

using ::testing::HasSubstr;

const std::string kData = DROVER_SIM_TESTDATA_DIR;

bool SameJobs(const Workload& a, const Workload& b) {
  if (a.jobs.size() != b.jobs.size()) return false;
  for (size_t i = 0; i < a.jobs.size(); ++i) {
    const SimJob& x = a.jobs[i];
    const SimJob& y = b.jobs[i];
    if (x.submit_ms != y.submit_ms || x.duration_ms != y.duration_ms || x.req.id != y.req.id ||
        x.req.tenant != y.req.tenant || x.req.priority != y.req.priority || x.req.replicas != y.req.replicas ||
        x.req.gpus != y.req.gpus || x.req.gpu_milli != y.req.gpu_milli || x.req.preemptible != y.req.preemptible ||
        x.req.runtime_estimate_ms != y.req.runtime_estimate_ms || x.req.cpu_milli != y.req.cpu_milli ||
        x.req.memory_bytes != y.req.memory_bytes) {
      return false;
    }
  }
  return true;
}

SyntheticConfig Mixed(int64_t count) {
  SyntheticConfig c;
  c.rate_per_hour = 3600;  // one a second
  c.count = count;
  c.shapes.clear();
  for (const auto& [label, weight] :
       std::vector<std::pair<std::string, double>>{{"0", 1}, {"0.25", 2}, {"1", 4}, {"8", 2}, {"4x8", 1}}) {
    auto s = ParseJobShape(label);
    EXPECT_TRUE(s.ok()) << label;
    s->weight = weight;
    c.shapes.push_back(*s);
  }
  c.tenants = {{"research", 3}, {"prod", 1}};
  c.priorities = {{0, 9}, {100, 1}};
  c.preemptible = 0.3;
  c.median_ms = 1'800'000;
  c.sigma = 1.0;
  c.max_ms = 365LL * 86'400'000;
  c.min_ms = 1;
  return c;
}

TEST(SyntheticTest, ParsesJobShapes) {
  auto s = [](std::string_view t) { return ParseJobShape(t); };
  EXPECT_EQ(s("1")->gpus, 1);
  EXPECT_EQ(s("8")->gpus, 8);
  EXPECT_EQ(s("0.25")->gpu_milli, 250);
  EXPECT_EQ(s("250m")->gpu_milli, 250);
  EXPECT_EQ(s("0")->gpus, 0);
  EXPECT_EQ(s("4x8")->replicas, 4);
  EXPECT_EQ(s("4x8")->gpus, 8);
  for (const char* bad : {"", "1.5", "x8", "4x", "0x8", "4x0", "4x65", "-1", "abc", "65"}) {
    EXPECT_FALSE(s(bad).ok()) << bad;
  }
}

TEST(SyntheticTest, SameSeedSameJobsOtherSeedOtherJobs) {
  SyntheticConfig c = Mixed(2000);
  c.estimates = EstimateMode::kNoisy;
  auto a = GenerateSynthetic(c, 7);
  auto b = GenerateSynthetic(c, 7);
  auto d = GenerateSynthetic(c, 8);
  ASSERT_TRUE(a.ok() && b.ok() && d.ok());
  EXPECT_TRUE(SameJobs(*a, *b));
  EXPECT_FALSE(SameJobs(*a, *d));
  EXPECT_EQ(a->jobs.front().req.id, "j-000001");
  EXPECT_EQ(a->jobs.back().req.id, "j-002000");
}

TEST(SyntheticTest, MixMatchesTheWeights) {
  const int64_t n = 200'000;
  auto w = GenerateSynthetic(Mixed(n), 1);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(static_cast<int64_t>(w->jobs.size()), n);
  std::map<std::string, double> shapes, tenants;
  std::map<int, double> prios;
  double preemptible = 0;
  std::vector<int64_t> durations;
  for (const auto& j : w->jobs) {
    std::string shape = j.req.gpus == 0      ? "0"
                        : j.req.fractional() ? "0.25"
                        : j.req.replicas > 1 ? "4x8"
                                             : std::to_string(j.req.gpus);
    shapes[shape] += 1.0 / n;
    tenants[j.req.tenant] += 1.0 / n;
    prios[j.req.priority] += 1.0 / n;
    preemptible += j.req.preemptible ? 1.0 / n : 0;
    durations.push_back(j.duration_ms);
    EXPECT_EQ(j.req.runtime_estimate_ms, 0);
  }
  const double tol = 0.01;  // ~4 standard deviations at n = 200,000
  EXPECT_NEAR(shapes["0"], 0.1, tol);
  EXPECT_NEAR(shapes["0.25"], 0.2, tol);
  EXPECT_NEAR(shapes["1"], 0.4, tol);
  EXPECT_NEAR(shapes["8"], 0.2, tol);
  EXPECT_NEAR(shapes["4x8"], 0.1, tol);
  EXPECT_NEAR(tenants["research"], 0.75, tol);
  EXPECT_NEAR(tenants["prod"], 0.25, tol);
  EXPECT_NEAR(prios[100], 0.1, tol);
  EXPECT_NEAR(preemptible, 0.3, tol);
  // Log-normal around a 30-minute median.
  std::nth_element(durations.begin(), durations.begin() + n / 2, durations.end());
  EXPECT_NEAR(static_cast<double>(durations[n / 2]), 1'800'000.0, 1'800'000.0 * 0.02);
  // Poisson at one a second: the last arrival near n seconds.
  EXPECT_NEAR(static_cast<double>(w->jobs.back().submit_ms), n * 1000.0, n * 1000.0 * 0.02);
  EXPECT_TRUE(std::is_sorted(w->jobs.begin(), w->jobs.end(),
                             [](const SimJob& a, const SimJob& b) { return a.submit_ms < b.submit_ms; }));
}

TEST(SyntheticTest, ClampsEstimatesAndHostRequests) {
  SyntheticConfig c = Mixed(5000);
  c.duration = DurationDist::kExponential;
  c.mean_ms = 600'000;
  c.min_ms = 60'000;
  c.max_ms = 900'000;
  c.estimates = EstimateMode::kExact;
  c.cpu_milli_per_gpu = 8000;
  c.memory_bytes_per_gpu = int64_t{64} << 30;
  auto w = GenerateSynthetic(c, 3);
  ASSERT_TRUE(w.ok());
  for (const auto& j : w->jobs) {
    ASSERT_GE(j.duration_ms, 60'000);
    ASSERT_LE(j.duration_ms, 900'000);
    ASSERT_EQ(j.req.runtime_estimate_ms, j.duration_ms);
    const double gpus = j.req.gpus == 0 ? 1.0 : j.req.gpus * j.req.gpu_milli / 1000.0;
    ASSERT_EQ(j.req.cpu_milli, std::llround(8000 * gpus)) << j.req.id;
    ASSERT_EQ(j.req.memory_bytes, std::llround(static_cast<double>(int64_t{64} << 30) * gpus)) << j.req.id;
  }
}

TEST(SyntheticTest, WindowsAndUniformArrivals) {
  SyntheticConfig c = Mixed(0);
  c.window_ms = 3'600'000;  // one hour at one a second: about 3,600 jobs
  c.start_ms = 10'000;
  auto w = GenerateSynthetic(c, 5);
  ASSERT_TRUE(w.ok());
  EXPECT_NEAR(static_cast<double>(w->jobs.size()), 3600, 250);
  for (const auto& j : w->jobs) ASSERT_TRUE(j.submit_ms >= 10'000 && j.submit_ms < 3'610'000);

  c.arrivals = ArrivalProcess::kUniform;
  c.count = 1000;
  w = GenerateSynthetic(c, 5);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->jobs.size(), 1000u);
  EXPECT_GE(w->jobs.front().submit_ms, 10'000);
  EXPECT_LT(w->jobs.back().submit_ms, 3'610'000);

  c.window_ms = 0;
  EXPECT_THAT(GenerateSynthetic(c, 5).status().message(), HasSubstr("needs both count and window"));
  c.arrivals = ArrivalProcess::kPoisson;
  c.count = 0;
  EXPECT_THAT(GenerateSynthetic(c, 5).status().message(), HasSubstr("give count, window or both"));
}

TEST(SyntheticTest, AMillionJobs) {
  SyntheticConfig c = Mixed(1'000'000);
  auto w = GenerateSynthetic(c, 11);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->jobs.size(), 1'000'000u);
  EXPECT_EQ(w->jobs.back().req.id, "j-1000000");
}

TEST(SyntheticTest, LoadsTheYamlForm) {
  auto w = LoadWorkload(kData + "/synthetic.yaml");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->name, "mixed");
  ASSERT_EQ(w->jobs.size(), 5000u);
  int gangs = 0, shares = 0, cpu_only = 0, with_estimate = 0;
  for (const auto& j : w->jobs) {
    gangs += j.req.replicas == 4 && j.req.gpus == 8;
    shares += j.req.fractional();
    cpu_only += j.req.gpus == 0;
    with_estimate += j.req.runtime_estimate_ms > 0;
    ASSERT_TRUE(j.req.tenant == "research" || j.req.tenant == "prod");
    ASSERT_GE(j.duration_ms, 60'000);
    ASSERT_LE(j.duration_ms, 3 * 86'400'000);
  }
  EXPECT_GT(gangs, 0);
  EXPECT_GT(shares, 0);
  EXPECT_GT(cpu_only, 0);
  EXPECT_EQ(with_estimate, 5000);

  auto again = LoadWorkload(kData + "/synthetic.yaml");
  auto reseeded = LoadWorkload(kData + "/synthetic.yaml", 43);
  ASSERT_TRUE(again.ok() && reseeded.ok());
  EXPECT_TRUE(SameJobs(*w, *again));
  EXPECT_FALSE(SameJobs(*w, *reseeded));

  auto u = LoadWorkload(kData + "/synthetic_uniform.yaml");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->name, "synthetic_uniform");
  ASSERT_EQ(u->jobs.size(), 1000u);
  EXPECT_GE(u->jobs.front().submit_ms, 3'600'000);
  EXPECT_EQ(u->jobs[0].req.runtime_estimate_ms, u->jobs[0].duration_ms);

  EXPECT_THAT(LoadWorkload(kData + "/synthetic_bad_shape.yaml").status().message(),
              HasSubstr("synthetic_bad_shape.yaml: gpus: '3x' is not a job shape"));
}

TEST(SyntheticTest, ParseErrorsNameTheKey) {
  auto err = [](const std::string& yaml) { return ParseSyntheticConfig(yaml, "t.yaml").status().message(); };
  const std::string base = "kind: synthetic\narrivals: {rate_per_hour: 60, count: 10}\n";
  EXPECT_TRUE(ParseSyntheticConfig(base, "t.yaml").ok());
  EXPECT_THAT(err(base + "colour: red\n"), HasSubstr("t.yaml: colour: key is unknown"));
  EXPECT_THAT(err(base + "duration: {sigma: lots}\n"), HasSubstr("duration.sigma: 'lots' is not a number"));
  EXPECT_THAT(err(base + "duration: {median: 5 minutes}\n"),
              HasSubstr("duration.median: '5 minutes' is not a duration"));
  EXPECT_THAT(err(base + "tenants: {Research: 1}\n"), HasSubstr("lower-case"));
  EXPECT_THAT(err(base + "priorities: {high: 1}\n"), HasSubstr("'high' is not an integer priority"));
  EXPECT_THAT(err(base + "preemptible: 2\n"), HasSubstr("preemptible: 2 is outside 0..1"));
  EXPECT_THAT(err(base + "gpus: {\"1\": 0}\n"), HasSubstr("positive weight"));
  EXPECT_THAT(err(base + "estimates: maybe\n"), HasSubstr("estimates: 'maybe' is unknown"));
  EXPECT_THAT(err("kind: synthetic\narrivals: {process: bursty}\n"),
              HasSubstr("arrivals.process: 'bursty' is unknown"));
  EXPECT_THAT(err("arrivals: {count: 1}\n"), HasSubstr("kind: synthetic is missing"));
  EXPECT_FALSE(ParseSyntheticConfig(base + "[a, b]: 1\n", "t.yaml").ok());  // a key that is a list
  EXPECT_FALSE(ParseSyntheticConfig(base + "gpus: {[1]: 1}\n", "t.yaml").ok());
  auto seeded = ParseSyntheticConfig(base + "seed: 99\n", "t.yaml");
  ASSERT_TRUE(seeded.ok());
  EXPECT_EQ(seeded->seed, 99u);
}

}  // namespace
}  // namespace drover::sim
