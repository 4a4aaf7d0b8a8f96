#include "drover/common/metrics.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <thread>

namespace drover::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
T* Must(Result<T*> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : nullptr;
}

TEST(MetricsFormatTest, Values) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatValue(1e16), "1e+16");
  EXPECT_EQ(FormatValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatValue(kInf), "+Inf");
  EXPECT_EQ(FormatValue(-kInf), "-Inf");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  double third = 1.0 / 3;
  EXPECT_EQ(std::stod(FormatValue(third)), third);
}

TEST(MetricsFormatTest, Escaping) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("caf\xC3\xA9 \xF0\x9F\x9A\x80"), "caf\xC3\xA9 \xF0\x9F\x9A\x80");
  // Bytes that are not UTF-8 (a lone continuation byte, a truncated sequence,
  // an overlong '/', a surrogate) become U+FFFD.
  EXPECT_EQ(EscapeLabelValue("a\x80z"), "a\xEF\xBF\xBDz");
  EXPECT_EQ(EscapeLabelValue("a\xE2\x82"), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(EscapeLabelValue("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(EscapeLabelValue("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(MetricsRegistryTest, CounterExposition) {
  Registry registry;
  CounterFamily* jobs = Must(registry.AddCounter("drover_jobs_submitted_total", "Jobs submitted."));
  ASSERT_NE(jobs, nullptr);
  jobs->With({{"tenant", "ml"}})->Inc();
  jobs->Inc({{"tenant", "cv"}}, 2.5);
  jobs->Inc({{"tenant", "cv"}}, -7);  // ignored: a counter only goes up
  jobs->Inc({{"tenant", "cv"}}, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(registry.Render(),
            "# HELP drover_jobs_submitted_total Jobs submitted.\n"
            "# TYPE drover_jobs_submitted_total counter\n"
            "drover_jobs_submitted_total{tenant=\"cv\"} 2.5\n"
            "drover_jobs_submitted_total{tenant=\"ml\"} 1\n");
}

TEST(MetricsRegistryTest, GaugeExpositionAndRemoval) {
  Registry registry;
  GaugeFamily* temp = Must(registry.AddGauge("drover_gpu_temperature_celsius", "GPU temperature."));
  ASSERT_NE(temp, nullptr);
  EXPECT_EQ(registry.Render(), "");  // no series yet
  temp->Set({{"node", "n1"}, {"gpu", "0"}}, 61.5);
  temp->With({{"gpu", "1"}, {"node", "n1"}})->Set(70);
  temp->Add({{"node", "n1"}, {"gpu", "1"}}, -1.25);  // same series: labels are sorted
  std::shared_ptr<Gauge> gone = temp->With({{"gpu", "2"}, {"node", "n1"}});
  gone->Set(-3);
  EXPECT_EQ(registry.Render(),
            "# HELP drover_gpu_temperature_celsius GPU temperature.\n"
            "# TYPE drover_gpu_temperature_celsius gauge\n"
            "drover_gpu_temperature_celsius{gpu=\"0\",node=\"n1\"} 61.5\n"
            "drover_gpu_temperature_celsius{gpu=\"1\",node=\"n1\"} 68.75\n"
            "drover_gpu_temperature_celsius{gpu=\"2\",node=\"n1\"} -3\n");

  temp->Remove({{"node", "n1"}, {"gpu", "2"}});
  gone->Set(99);                   // a handle kept after Remove() is valid but exports nothing
  temp->Remove({{"node", "n9"}});  // no such series: no-op
  EXPECT_EQ(registry.Render(),
            "# HELP drover_gpu_temperature_celsius GPU temperature.\n"
            "# TYPE drover_gpu_temperature_celsius gauge\n"
            "drover_gpu_temperature_celsius{gpu=\"0\",node=\"n1\"} 61.5\n"
            "drover_gpu_temperature_celsius{gpu=\"1\",node=\"n1\"} 68.75\n");
  EXPECT_EQ(temp->With({{"node", "n1"}, {"gpu", "2"}})->Value(), 0);  // a new series

  temp->Clear();
  temp->Set({}, kInf);
  EXPECT_EQ(registry.Render(),
            "# HELP drover_gpu_temperature_celsius GPU temperature.\n"
            "# TYPE drover_gpu_temperature_celsius gauge\n"
            "drover_gpu_temperature_celsius +Inf\n");
}

TEST(MetricsRegistryTest, HistogramExposition) {
  Registry registry;
  HistogramFamily* latency =
      Must(registry.AddHistogram("drover_schedule_duration_seconds", "Time to schedule a job.", {0.5, 1, 4}));
  ASSERT_NE(latency, nullptr);
  Histogram* fifo = latency->With({{"queue", "fifo"}});
  for (double v : {0.25, 0.5, 2.0, 8.0}) fifo->Observe(v);  // 0.5 falls in le="0.5"
  fifo->Observe(std::numeric_limits<double>::quiet_NaN());  // ignored
  latency->Observe({{"queue", "fair"}}, 1);
  EXPECT_EQ(registry.Render(),
            "# HELP drover_schedule_duration_seconds Time to schedule a job.\n"
            "# TYPE drover_schedule_duration_seconds histogram\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fair\",le=\"0.5\"} 0\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fair\",le=\"1\"} 1\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fair\",le=\"4\"} 1\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fair\",le=\"+Inf\"} 1\n"
            "drover_schedule_duration_seconds_sum{queue=\"fair\"} 1\n"
            "drover_schedule_duration_seconds_count{queue=\"fair\"} 1\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fifo\",le=\"0.5\"} 2\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fifo\",le=\"1\"} 2\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fifo\",le=\"4\"} 3\n"
            "drover_schedule_duration_seconds_bucket{queue=\"fifo\",le=\"+Inf\"} 4\n"
            "drover_schedule_duration_seconds_sum{queue=\"fifo\"} 10.75\n"
            "drover_schedule_duration_seconds_count{queue=\"fifo\"} 4\n");
}

TEST(MetricsRegistryTest, AMaskRewritesLabelValuesAndSumsTheSeriesItMerges) {
  Registry registry;
  HistogramFamily* latency = Must(registry.AddHistogram("drover_call_duration_seconds", "Call time.", {1}));
  ASSERT_NE(latency, nullptr);
  latency->Observe({{"tenant", "a"}}, 0.5);
  latency->Observe({{"tenant", "b"}}, 0.5);
  latency->Observe({{"tenant", "c"}}, 2);
  registry.AddCollector([](Exposition& out) {
    out.Gauge("drover_jobs_on_gpu", "Jobs, by GPU.")
        .Add({{"gpu", "0"}, {"tenant", "b"}}, 1)
        .Add({{"gpu", "1"}, {"tenant", "c"}}, 1);
  });
  LabelMask mask = [](std::string_view label, const std::string& value) {
    return label == "tenant" && value != "a" ? std::string("other") : value;
  };
  EXPECT_EQ(registry.Render(mask),
            "# HELP drover_call_duration_seconds Call time.\n"
            "# TYPE drover_call_duration_seconds histogram\n"
            "drover_call_duration_seconds_bucket{tenant=\"a\",le=\"1\"} 1\n"
            "drover_call_duration_seconds_bucket{tenant=\"a\",le=\"+Inf\"} 1\n"
            "drover_call_duration_seconds_sum{tenant=\"a\"} 0.5\n"
            "drover_call_duration_seconds_count{tenant=\"a\"} 1\n"
            "drover_call_duration_seconds_bucket{tenant=\"other\",le=\"1\"} 1\n"
            "drover_call_duration_seconds_bucket{tenant=\"other\",le=\"+Inf\"} 2\n"
            "drover_call_duration_seconds_sum{tenant=\"other\"} 2.5\n"
            "drover_call_duration_seconds_count{tenant=\"other\"} 2\n"
            "# HELP drover_jobs_on_gpu Jobs, by GPU.\n"
            "# TYPE drover_jobs_on_gpu gauge\n"
            "drover_jobs_on_gpu{gpu=\"0\",tenant=\"other\"} 1\n"
            "drover_jobs_on_gpu{gpu=\"1\",tenant=\"other\"} 1\n");
  // Without a mask, as it was.
  EXPECT_NE(registry.Render().find("drover_call_duration_seconds_count{tenant=\"c\"} 1\n"), std::string::npos);
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulative) {
  std::vector<double> bounds = {1, 2, 3};
  Histogram h(&bounds);
  for (double v : {-kInf, 0.0, 1.0, 1.5, 3.0, 3.5, kInf, 1e300}) h.Observe(v);
  Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{3, 4, 5, 8}));
  EXPECT_EQ(s.count, 8u);

  Histogram only_inf(&bounds);
  only_inf.Observe(10);
  EXPECT_EQ(only_inf.Read().cumulative, (std::vector<uint64_t>{0, 0, 0, 1}));
  EXPECT_EQ(only_inf.Read().sum, 10);

  Registry registry;
  HistogramFamily* empty = Must(registry.AddHistogram("x_seconds", "No bounds.", {}));
  ASSERT_NE(empty, nullptr);
  empty->Observe({}, 3);
  EXPECT_EQ(registry.Render(),
            "# HELP x_seconds No bounds.\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"+Inf\"} 1\nx_seconds_sum 3\nx_seconds_count 1\n");
}

TEST(MetricsRegistryTest, HistogramBoundsAreValidated) {
  Registry registry;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const std::vector<double>& bad :
       std::vector<std::vector<double>>{{1, 1}, {2, 1}, {1, kInf}, {-kInf, 0}, {nan}, {0, nan, 1}}) {
    Result<HistogramFamily*> r = registry.AddHistogram("h_seconds", "Help.", bad);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  }

  Result<std::vector<double>> exp = ExponentialBuckets(0.001, 10, 4);
  ASSERT_TRUE(exp.ok()) << exp.status().ToString();
  ASSERT_EQ(exp->size(), 4u);
  EXPECT_EQ((*exp)[0], 0.001);
  EXPECT_DOUBLE_EQ((*exp)[3], 1);
  EXPECT_EQ(*ExponentialBuckets(1, 2, 3), (std::vector<double>{1, 2, 4}));
  EXPECT_FALSE(ExponentialBuckets(0, 2, 3).ok());
  EXPECT_FALSE(ExponentialBuckets(-1, 2, 3).ok());
  EXPECT_FALSE(ExponentialBuckets(1, 1, 3).ok());
  EXPECT_FALSE(ExponentialBuckets(1, nan, 3).ok());
  EXPECT_FALSE(ExponentialBuckets(1, 2, 0).ok());
  EXPECT_FALSE(ExponentialBuckets(1, 2, 1001).ok());
  EXPECT_FALSE(ExponentialBuckets(1e300, 10, 10).ok());         // overflows to +Inf
  EXPECT_FALSE(ExponentialBuckets(5e-324, 1.0000001, 2).ok());  // not increasing
}

TEST(MetricsRegistryTest, NameValidation) {
  for (const char* good : {"a", "_x", "a:b_c9", "drover_jobs_total", "A"}) {
    EXPECT_TRUE(ValidateMetricName(good).ok()) << good;
  }
  for (const char* bad : {"", "9a", "a-b", "a b", "é", "a.b"}) {
    EXPECT_EQ(ValidateMetricName(bad).code(), Code::kInvalidArgument) << bad;
  }
  for (const char* good : {"a", "_x", "gpu_0", "A9"}) {
    EXPECT_TRUE(ValidateLabelName(good).ok()) << good;
  }
  for (const char* bad : {"", "9a", "a:b", "a-b", "__name__", "__x"}) {
    EXPECT_EQ(ValidateLabelName(bad).code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_NE(ValidateLabelName("__x").message().find("reserved"), std::string::npos);

  Registry registry;
  Result<CounterFamily*> bad = registry.AddCounter("jobs-total", "Help.");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'jobs-total'"), std::string::npos);
  EXPECT_EQ(registry.AddGauge("g", "").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(registry.Render(), "");
}

TEST(MetricsRegistryTest, InvalidLabelSetsAreDroppedAndCounted) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter("c_total", "C."));
  HistogramFamily* h = Must(registry.AddHistogram("h_seconds", "H.", {1}));
  ASSERT_NE(c, nullptr);
  ASSERT_NE(h, nullptr);
  Counter* bad = c->With({{"a-b", "x"}});
  ASSERT_NE(bad, nullptr);
  bad->Inc();
  c->Inc({{"a", "1"}, {"a", "2"}});  // repeated name
  c->Inc({{"__name__", "x"}});       // reserved
  h->Observe({{"le", "1"}}, 0.5);    // le belongs to the buckets
  EXPECT_EQ(c->invalid_label_sets(), 3u);
  EXPECT_EQ(registry.Render(),
            "# HELP drover_metrics_dropped_total Metric samples and updates dropped, by family "
            "and reason.\n"
            "# TYPE drover_metrics_dropped_total counter\n"
            "drover_metrics_dropped_total{family=\"c_total\",reason=\"invalid_labels\"} 3\n"
            "drover_metrics_dropped_total{family=\"h_seconds\",reason=\"invalid_labels\"} 1\n");
}

TEST(MetricsRegistryTest, DuplicateRegistration) {
  Registry registry;
  CounterFamily* a = Must(registry.AddCounter("x_total", "First."));
  EXPECT_EQ(Must(registry.AddCounter("x_total", "Other help is ignored.")), a);
  Result<GaugeFamily*> as_gauge = registry.AddGauge("x_total", "G.");
  EXPECT_EQ(as_gauge.status().code(), Code::kAlreadyExists);
  EXPECT_NE(as_gauge.status().message().find("already registered as a counter"), std::string::npos);
  EXPECT_EQ(registry.AddHistogram("x_total", "H.", {1}).status().code(), Code::kAlreadyExists);

  HistogramFamily* h = Must(registry.AddHistogram("h_seconds", "H.", {1, 2}));
  EXPECT_EQ(Must(registry.AddHistogram("h_seconds", "H.", {1, 2})), h);
  EXPECT_EQ(registry.AddHistogram("h_seconds", "H.", {1, 3}).status().code(), Code::kAlreadyExists);
  GaugeFamily* g = Must(registry.AddGauge("g", "G."));
  EXPECT_EQ(Must(registry.AddGauge("g", "G.")), g);
  EXPECT_EQ(registry.AddCounter("g", "C.").status().code(), Code::kAlreadyExists);
}

TEST(MetricsRegistryTest, FamiliesAreSortedByName) {
  Registry registry;
  Must(registry.AddGauge("zeta", "Z."))->Set({}, 1);
  Must(registry.AddCounter("alpha_total", "A."))->Inc({});
  Must(registry.AddGauge("mid", "M."))->Set({}, 2);
  registry.AddCollector([](Exposition& out) { out.Gauge("beta", "B.").Add({}, 3); });
  std::string text = registry.Render();
  size_t alpha = text.find("# HELP alpha_total");
  size_t beta = text.find("# HELP beta");
  size_t mid = text.find("# HELP mid");
  size_t zeta = text.find("# HELP zeta");
  ASSERT_NE(zeta, std::string::npos) << text;
  EXPECT_LT(alpha, beta);
  EXPECT_LT(beta, mid);
  EXPECT_LT(mid, zeta);
  EXPECT_EQ(registry.Render(), text);  // stable
}

TEST(MetricsRegistryTest, CollectorsMergeIntoOneFamily) {
  Registry registry;
  GaugeFamily* util = Must(registry.AddGauge("drover_gpu_utilization_ratio", "GPU busy ratio."));
  util->Set({{"node", "b"}}, 0.5);
  registry.AddCollector([](Exposition& out) {
    out.Gauge("drover_gpu_utilization_ratio", "").Add({{"node", "c"}}, 0.25);
    out.Counter("drover_gpu_resets_total", "GPU resets.").Add({{"node", "c"}}, 1);
  });
  registry.AddCollector([](Exposition& out) {
    out.Gauge("drover_gpu_utilization_ratio", "Help from a collector is not used.")
        .Add({{"node", "a"}}, 1)
        .Add({{"node", "b"}}, 0.75);  // duplicate of the registry's series: dropped
    out.Counter("drover_gpu_resets_total", "").Add({{"node", "a"}}, 2);
    out.Counter("drover_gpu_utilization_ratio", "Wrong type.").Add({}, 1);  // dropped
    out.Gauge("bad-name", "Bad.").Add({}, 1);                               // dropped
    out.Gauge("drover_queue_jobs", "Jobs.").Add({{"a-b", "x"}}, 1);         // dropped
  });
  const std::string expected =
      "# HELP drover_gpu_resets_total GPU resets.\n"
      "# TYPE drover_gpu_resets_total counter\n"
      "drover_gpu_resets_total{node=\"a\"} 2\n"
      "drover_gpu_resets_total{node=\"c\"} 1\n"
      "# HELP drover_gpu_utilization_ratio GPU busy ratio.\n"
      "# TYPE drover_gpu_utilization_ratio gauge\n"
      "drover_gpu_utilization_ratio{node=\"a\"} 1\n"
      "drover_gpu_utilization_ratio{node=\"b\"} 0.5\n"
      "drover_gpu_utilization_ratio{node=\"c\"} 0.25\n"
      "# HELP drover_metrics_dropped_total Metric samples and updates dropped, by family and "
      "reason.\n"
      "# TYPE drover_metrics_dropped_total counter\n";
  auto dropped = [](int n) {
    return fmt::format(
        "drover_metrics_dropped_total{{family=\"bad-name\",reason=\"invalid_name\"}} {0}\n"
        "drover_metrics_dropped_total{{family=\"drover_gpu_utilization_ratio\","
        "reason=\"duplicate_series\"}} {0}\n"
        "drover_metrics_dropped_total{{family=\"drover_gpu_utilization_ratio\","
        "reason=\"type_conflict\"}} {0}\n"
        "drover_metrics_dropped_total{{family=\"drover_queue_jobs\","
        "reason=\"invalid_labels\"}} {0}\n",
        n);
  };
  EXPECT_EQ(registry.Render(), expected + dropped(1));
  // The dropped counter keeps counting across scrapes.
  EXPECT_EQ(registry.Render(), expected + dropped(2));
}

TEST(MetricsRegistryTest, LabelValuesAndHelpAreEscaped) {
  Registry registry;
  Must(registry.AddGauge("g", "Line one\\\nline \"two\"."))->Set({{"path", "C:\\x \"y\"\nz"}}, 1);
  EXPECT_EQ(registry.Render(),
            "# HELP g Line one\\\\\\nline \"two\".\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\x \\\"y\\\"\\nz\"} 1\n");
}

TEST(MetricsRegistryTest, ConcurrentUpdatesSumExactly) {
  Registry registry;
  CounterFamily* c = Must(registry.AddCounter("ops_total", "Ops."));
  GaugeFamily* g = Must(registry.AddGauge("level", "Level."));
  HistogramFamily* h = Must(registry.AddHistogram("op_seconds", "Op time.", {1, 2}));
  ASSERT_TRUE(c != nullptr && g != nullptr && h != nullptr);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter* handle = c->With({{"kind", "handle"}});
      Histogram* hist = h->With({});
      std::shared_ptr<Gauge> level = g->With({});
      for (int i = 0; i < kPerThread; ++i) {
        handle->Inc();
        c->Inc({{"kind", "lookup"}}, 3);
        level->Add(1);
        hist->Observe(static_cast<double>(i % 3));             // 0, 1, 2: sums are integers
        if (t == 0 && i % 5000 == 0) (void)registry.Render();  // scrapes race the updates
      }
    });
  }
  for (std::thread& th : threads) th.join();
  constexpr double kTotal = double{kThreads} * kPerThread;
  EXPECT_EQ(c->With({{"kind", "handle"}})->Value(), kTotal);
  EXPECT_EQ(c->With({{"kind", "lookup"}})->Value(), 3 * kTotal);
  EXPECT_EQ(g->With({})->Value(), kTotal);
  Histogram::Snapshot s = h->With({})->Read();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kTotal));
  // Of i in [0, 20000), 6667 have i % 3 == 0, 6667 have 1 and 6666 have 2.
  EXPECT_EQ(s.cumulative[0], uint64_t{kThreads} * (6667 + 6667));  // le="1"
  EXPECT_EQ(s.cumulative[1], s.count);
  EXPECT_EQ(s.sum, 0 * 6667.0 * kThreads + 1 * 6667.0 * kThreads + 2 * 6666.0 * kThreads);
  std::string text = registry.Render();
  EXPECT_NE(text.find("ops_total{kind=\"lookup\"} 480000\n"), std::string::npos) << text;
}

// promtool parses the exposition and lints it (counter names end in _total,
// base units, help text, no camelCase, ...).
TEST(MetricsRegistryTest, PromtoolAcceptsExposition) {
  constexpr const char* kPromtool = "/usr/bin/promtool";
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " is not installed";
  Registry registry;
  CounterFamily* jobs = Must(registry.AddCounter("drover_jobs_submitted_total", "Jobs \\ submitted.\nPer tenant."));
  GaugeFamily* mem = Must(registry.AddGauge("drover_gpu_memory_used_bytes", "GPU memory in use."));
  HistogramFamily* wait = Must(registry.AddHistogram("drover_job_wait_seconds", "Time from submission to start.",
                                                     *ExponentialBuckets(0.01, 4, 6)));
  ASSERT_TRUE(jobs != nullptr && mem != nullptr && wait != nullptr);
  jobs->Inc({{"tenant", "ml \"vision\"\nteam\\a"}}, 3);
  jobs->Inc({{"tenant", "caf\xC3\xA9 \xFF"}});
  mem->Set({{"gpu", "0"}, {"model", "NVIDIA H100 80GB HBM3"}}, 123456789012.0);
  mem->Set({{"gpu", "1"}, {"model", "a\\b"}}, 0);
  wait->Observe({{"queue", "fair-share"}}, 0.05);
  wait->Observe({{"queue", "fair-share"}}, 1e9);
  wait->Observe({{"queue", "x\"y"}}, 0.01);
  registry.AddCollector([](Exposition& out) {
    out.Gauge("drover_gpu_memory_used_bytes", "").Add({{"gpu", "2"}, {"model", "l\nf"}}, 1);
    out.Gauge("drover_queue_jobs", "Jobs waiting.").Add({}, 4);
  });
  std::string text = registry.Render();
  ASSERT_NE(text.find("drover_job_wait_seconds_bucket"), std::string::npos);

  signal(SIGPIPE, SIG_IGN);  // a promtool that exits early must fail the test, not kill it
  FILE* pipe = popen("/usr/bin/promtool check metrics", "w");
  ASSERT_NE(pipe, nullptr);
  size_t written = fwrite(text.data(), 1, text.size(), pipe);
  int status = pclose(pipe);
  EXPECT_EQ(written, text.size());
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "promtool rejected:\n" << text;

  // The check can fail: a counter without _total is a lint problem.
  pipe = popen("/usr/bin/promtool check metrics >/dev/null 2>&1", "w");
  ASSERT_NE(pipe, nullptr);
  const std::string bad = "# HELP jobs Jobs.\n# TYPE jobs counter\njobs 1\n";
  fwrite(bad.data(), 1, bad.size(), pipe);
  status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

}  // namespace
}  // namespace drover::metrics
