#pragma once
// Prometheus metrics: a registry of counter, gauge and histogram families and
// collectors read at scrape time, rendered in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
//   metrics::Registry registry;                          // at startup
//   DROVER_ASSIGN_OR_RETURN(metrics::CounterFamily* submitted,
//       registry.AddCounter("drover_jobs_submitted_total", "Jobs submitted."));
//   metrics::Counter* ml = submitted->With({{"tenant", "ml"}});
//   ml->Inc();                                           // any thread, lock-free
//   registry.AddCollector([&](metrics::Exposition& out) {
//     out.Gauge("drover_queue_jobs", "Jobs waiting.").Add({}, depth.load());
//   });
//   std::string body = registry.Render();                // GET /metrics
//
// Naming, as `promtool check metrics` lints it: counters end in _total; names
// carry a base unit (_seconds, _bytes, _ratio), not _ms or _milliseconds; no
// camelCase; no ':' (reserved for recording rules); only histograms end in
// _bucket, _sum or _count; every family has help text.
//
// Label sets are canonical: sorted by label name, so {a,b} and {b,a} are the
// same series, and rendered in that order. Label names must be valid, unique
// in the set and not start with "__"; histograms reserve "le". A series is
// created on first use: a family renders nothing until it has one (call
// With() at startup for series that should read 0 from the start).
//
// Samples that cannot be exported (an invalid label set, a collector writing
// a family under a bad name, as another type, or a series twice) are dropped,
// not fatal, and counted in drover_metrics_dropped_total{family, reason}.
//
// Not supported: summaries, timestamps, exemplars, the OpenMetrics and
// protobuf formats, unregistering families. A histogram "x" also owns the
// names x_bucket, x_sum and x_count; registering those as well is not caught.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drover/common/mutex.h"
#include "drover/common/status.h"

namespace drover::metrics {

// (name, value) pairs. Values are arbitrary UTF-8 (invalid bytes are rendered
// as U+FFFD).
using Labels = std::vector<std::pair<std::string, std::string>>;

// What one reader of an exposition may see of label values: the value to
// render for (label name, value). A server's /metrics for a tenant's token
// renders other tenants' job ids and names as "other", as /fleet shows
// them. Series whose labels become equal under the mask are summed, each
// line (a counter, a gauge, a histogram's buckets, sum and count) with its
// peer: "other" reads as the total of what it stands for. Called on the
// rendering thread; it must not call Render().
using LabelMask = std::function<std::string(std::string_view name, const std::string& value)>;

enum class MetricType { kCounter, kGauge, kHistogram };
// "counter", "gauge", "histogram": the word of the # TYPE line.
const char* MetricTypeName(MetricType type);

// [a-zA-Z_:][a-zA-Z0-9_:]*
Status ValidateMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
Status ValidateLabelName(std::string_view name);

// Shortest text that parses back to v; "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);
// Backslash, double quote and newline as \\, \" and \n.
std::string EscapeLabelValue(std::string_view value);
// Backslash and newline as \\ and \n.
std::string EscapeHelp(std::string_view help);

// count upper bounds start, start*factor, ...: start > 0, factor > 1,
// 1 <= count <= 1000, every bound finite. (0.001, 10, 4) -> 0.001 0.01 0.1 1.
Result<std::vector<double>> ExponentialBuckets(double start, double factor, int count);

// One counter series. Thread-safe and lock-free. Negative, NaN and infinite
// increments are ignored: a counter only goes up.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  void Inc(double delta = 1.0) {
    if (!(delta >= 0.0) || std::isinf(delta)) return;
    value_.fetch_add(delta, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// One gauge series. Thread-safe and lock-free.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// One histogram series: an atomic count per bucket and an atomic sum.
// Thread-safe and lock-free. NaN observations are ignored.
//
// The count is the sum of the bucket counts, so a scrape always has
// _count == the +Inf bucket; _sum may lag or lead them by the observations
// made during the scrape.
class Histogram {
 public:
  // `bounds` (finite, strictly increasing) must outlive the histogram.
  explicit Histogram(const std::vector<double>* bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (== count)
    uint64_t count = 0;
    double sum = 0.0;
  };
  Snapshot Read() const;

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_->size() + 1, not cumulative
  std::atomic<double> sum_{0.0};
};

class Exposition;
class Registry;

namespace internal {

// What the three family types share: name, help, the lock over the series map.
class Family {
 public:
  virtual ~Family() = default;
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  // Lookups with an invalid label set so far.
  uint64_t invalid_label_sets() const { return invalid_.load(std::memory_order_relaxed); }
  // Writes every series into `out`.
  virtual void Collect(Exposition& out) const = 0;

 protected:
  Family(std::string name, std::string help, MetricType type)
      : name_(std::move(name)), help_(std::move(help)), type_(type) {}
  // Sorted by name; nullopt (counted) when the set is invalid for this family.
  std::optional<Labels> Canonical(const Labels& labels) const;

  mutable Mutex mu_;  // guards each subclass's series map

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  mutable std::atomic<uint64_t> invalid_{0};
};

}  // namespace internal

// A counter family: one Counter per label set. Thread-safe: With() and Inc()
// take the family lock to find or create the series; updates through a handle
// do not lock.
class CounterFamily final : public internal::Family {
 public:
  // The series for `labels`, created on first use. Never null; valid as long
  // as the registry. An invalid label set returns a series never exported.
  Counter* With(const Labels& labels);
  void Inc(const Labels& labels, double delta = 1.0) { With(labels)->Inc(delta); }
  void Collect(Exposition& out) const override;

 private:
  friend class Registry;
  CounterFamily(std::string name, std::string help) : Family(std::move(name), std::move(help), MetricType::kCounter) {}

  std::map<Labels, std::unique_ptr<Counter>> series_ DROVER_GUARDED_BY(mu_);
  Counter discarded_;
};

// A gauge family: one Gauge per label set; series can be removed (a GPU that
// left the node). Thread-safe like CounterFamily.
//
// With() returns shared ownership: a handle kept after Remove()/Clear() stays
// valid, but its updates go nowhere; the next With()/Set() of those labels
// starts a new series at 0.
class GaugeFamily final : public internal::Family {
 public:
  // Never null. An invalid label set returns a series never exported.
  std::shared_ptr<Gauge> With(const Labels& labels);
  void Set(const Labels& labels, double v);
  void Add(const Labels& labels, double delta);
  // Stops exporting the series; no-op if there is none.
  void Remove(const Labels& labels);
  void Clear();
  void Collect(Exposition& out) const override;

 private:
  friend class Registry;
  GaugeFamily(std::string name, std::string help) : Family(std::move(name), std::move(help), MetricType::kGauge) {}
  const std::shared_ptr<Gauge>& Slot(Labels canonical) DROVER_REQUIRES(mu_);

  std::map<Labels, std::shared_ptr<Gauge>> series_ DROVER_GUARDED_BY(mu_);
  const std::shared_ptr<Gauge> discarded_ = std::make_shared<Gauge>();
};

// A histogram family with fixed bucket upper bounds. Thread-safe like
// CounterFamily.
class HistogramFamily final : public internal::Family {
 public:
  // Never null; valid as long as the registry. An invalid label set (or one
  // using "le") returns a series never exported.
  Histogram* With(const Labels& labels);
  void Observe(const Labels& labels, double v) { With(labels)->Observe(v); }
  const std::vector<double>& bounds() const { return bounds_; }
  void Collect(Exposition& out) const override;

 private:
  friend class Registry;
  HistogramFamily(std::string name, std::string help, std::vector<double> bounds)
      : Family(std::move(name), std::move(help), MetricType::kHistogram), bounds_(std::move(bounds)) {}

  const std::vector<double> bounds_;
  std::map<Labels, std::unique_ptr<Histogram>> series_ DROVER_GUARDED_BY(mu_);
  Histogram discarded_{&bounds_};
};

// The samples of one scrape, grouped by family: what families and collectors
// write into and what Render() turns into text. Families come out sorted by
// name, each once with one HELP and one TYPE line (the first non-empty help
// wins), its series sorted by labels. Not thread-safe: one per Render().
class Exposition {
 public:
  // Adds samples to one family. Cheap to copy; valid while the Exposition is.
  class Writer {
   public:
    // Drops the sample (and counts it) if the writer was refused, the label
    // set is invalid, or the family already has a series with these labels.
    Writer& Add(const Labels& labels, double value);

   private:
    friend class Exposition;
    Writer(Exposition* out, std::string name, const char* refused)
        : out_(out), name_(std::move(name)), refused_(refused) {}
    Exposition* out_;
    std::string name_;
    const char* refused_;  // the drop reason, or nullptr if accepted
  };

  // A writer for the counter (or gauge) family `name`. A bad name, or a name
  // already written as another type, gives a writer that drops its samples.
  Writer Counter(std::string_view name, std::string_view help);
  Writer Gauge(std::string_view name, std::string_view help);

  // The exposition text; families without samples are left out. With a
  // mask, its label values (LabelMask).
  std::string Text(const LabelMask& mask = nullptr) const;

  // Samples dropped so far, by (family, reason).
  const std::map<std::pair<std::string, std::string>, uint64_t>& dropped() const { return dropped_; }

 private:
  friend class CounterFamily;
  friend class GaugeFamily;
  friend class HistogramFamily;
  friend class Registry;

  struct Line {
    const char* suffix;  // "", "_bucket", "_sum", "_count"
    std::string le;      // the le label of a bucket, else empty
    double value;
  };
  struct FamilyData {
    MetricType type;
    std::string help;
    std::map<Labels, std::vector<Line>> series;  // canonical labels
  };

  Writer Open(std::string_view name, std::string_view help, MetricType type);
  // `labels` must be canonical. Drops a series the family already has.
  void AddSeries(std::string_view name, Labels labels, std::vector<Line> lines);
  void Drop(std::string_view family, const char* reason, uint64_t n = 1);

  std::map<std::string, FamilyData, std::less<>> families_;
  std::map<std::pair<std::string, std::string>, uint64_t> dropped_;
};

// Owns metric families and collectors. Families are created once (at
// startup) and then updated from any thread.
//
// Thread-safe: family creation and AddCollector take the registry lock;
// series creation takes the family's lock; updates through Counter, Gauge and
// Histogram handles are lock-free. Render() takes the locks in turn and reads
// the atomics; Renders run one at a time, and collectors run on the rendering
// thread without the registry lock held (so a collector may read other
// state under its own lock, but must not call Render()).
class Registry {
 public:
  using Collector = std::function<void(Exposition&)>;

  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The family named `name`, created on the first call. Errors: an invalid
  // name, empty help, a name registered as another type, or (histograms)
  // other bounds than the family has. Help differing from the first
  // registration is ignored. The pointer is valid as long as the registry.
  Result<CounterFamily*> AddCounter(std::string_view name, std::string_view help);
  Result<GaugeFamily*> AddGauge(std::string_view name, std::string_view help);
  // `bounds`: finite, strictly increasing upper bounds (+Inf is implied).
  Result<HistogramFamily*> AddHistogram(std::string_view name, std::string_view help, std::vector<double> bounds);

  // Runs at every Render(), after the registry's families are written.
  void AddCollector(Collector collector);

  std::string Render() const { return Render(nullptr); }
  // The same as `mask` lets its reader see it (null: everything).
  std::string Render(const LabelMask& mask) const;

 private:
  // The existing family `name` if it has `type`; nullptr if there is none.
  Result<internal::Family*> Existing(std::string_view name, std::string_view help, MetricType type) const
      DROVER_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<internal::Family>, std::less<>> families_ DROVER_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ DROVER_GUARDED_BY(mu_);

  mutable Mutex render_mu_ DROVER_ACQUIRED_BEFORE(mu_);  // one Render at a time
  // Samples collectors had dropped in past renders, so the count only grows.
  mutable std::map<std::pair<std::string, std::string>, uint64_t> collector_dropped_ DROVER_GUARDED_BY(render_mu_);
};

// Self-metric counting dropped samples and updates, by family and reason
// ("invalid_labels", "invalid_name", "type_conflict", "duplicate_series").
inline constexpr std::string_view kDroppedMetricName = "drover_metrics_dropped_total";

}  // namespace drover::metrics
