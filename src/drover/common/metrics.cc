#include "drover/common/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace drover::metrics {
namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!IsAsciiLetter(c) && c != '_' && c != ':' && (i == 0 || !IsAsciiDigit(c))) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!IsAsciiLetter(c) && c != '_' && (i == 0 || !IsAsciiDigit(c))) return false;
  }
  return true;
}

// Sorted by name; nullopt when a name is invalid, repeated or (histograms) "le".
std::optional<Labels> CanonicalLabels(const Labels& labels, bool reserve_le) {
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const std::string& name = sorted[i].first;
    if (!IsValidLabelName(name) || (reserve_le && name == "le")) return std::nullopt;
    if (i > 0 && name == sorted[i - 1].first) return std::nullopt;
  }
  return sorted;
}

// The length of the well-formed UTF-8 sequence starting at s[i] (no overlong
// forms, surrogates or code points past U+10FFFF, as Go's utf8.ValidString),
// or 0 if there is none.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// Escapes backslash, newline and (label values) double quote; bytes that are
// not UTF-8 become U+FFFD, since Prometheus refuses such a scrape.
void AppendEscaped(std::string& out, std::string_view s, bool quote) {
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
        n = 1;
      } else {
        out.append(s.substr(i, n));
      }
      i += n;
      continue;
    }
    ++i;
  }
}

void AppendLabels(std::string& out, const Labels& labels, const std::string& le) {
  if (labels.empty() && le.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    AppendEscaped(out, value, /*quote=*/true);
    out += '"';
  }
  if (!le.empty()) {
    if (!first) out += ',';
    out += "le=\"";
    out += le;
    out += '"';
  }
  out += '}';
}

Status ValidateBounds(std::string_view name, const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) {
      return InvalidArgument(
          fmt::format("histogram '{}': bucket bound {} is not finite", name, FormatValue(bounds[i])));
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return InvalidArgument(fmt::format("histogram '{}': bucket bounds are not strictly increasing ({} after {})",
                                         name, FormatValue(bounds[i]), FormatValue(bounds[i - 1])));
    }
  }
  return Status::Ok();
}

constexpr const char* kInvalidLabels = "invalid_labels";

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

Status ValidateMetricName(std::string_view name) {
  if (IsValidMetricName(name)) return Status::Ok();
  return InvalidArgument(fmt::format("metric name '{}' is invalid: want [a-zA-Z_:][a-zA-Z0-9_:]*", name));
}

Status ValidateLabelName(std::string_view name) {
  if (IsValidLabelName(name)) return Status::Ok();
  if (name.starts_with("__")) {
    return InvalidArgument(fmt::format("label name '{}' is reserved: it starts with \"__\"", name));
  }
  return InvalidArgument(fmt::format("label name '{}' is invalid: want [a-zA-Z_][a-zA-Z0-9_]*", name));
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);  // shortest representation that round-trips
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  AppendEscaped(out, value, /*quote=*/true);
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  AppendEscaped(out, help, /*quote=*/false);
  return out;
}

Result<std::vector<double>> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0.0) || !std::isfinite(start)) {
    return InvalidArgument(fmt::format("exponential buckets: start {} is not positive and finite", FormatValue(start)));
  }
  if (!(factor > 1.0) || !std::isfinite(factor)) {
    return InvalidArgument(
        fmt::format("exponential buckets: factor {} is not finite and greater than 1", FormatValue(factor)));
  }
  if (count < 1 || count > 1000) {
    return InvalidArgument(fmt::format("exponential buckets: count {} is not between 1 and 1000", count));
  }
  std::vector<double> bounds;
  bounds.reserve(static_cast<size_t>(count));
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) bounds.push_back(v);
  DROVER_RETURN_IF_ERROR(ValidateBounds("exponential buckets", bounds));
  return bounds;
}

// ---- Histogram ----

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds->size() + 1)) {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // Bucket i counts bounds[i-1] < v <= bounds[i]; the last one is +Inf.
  auto it = std::lower_bound(bounds_->begin(), bounds_->end(), v);
  counts_[static_cast<size_t>(it - bounds_->begin())].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.cumulative.resize(bounds_->size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

// ---- Families ----

std::optional<Labels> internal::Family::Canonical(const Labels& labels) const {
  std::optional<Labels> canonical = CanonicalLabels(labels, type_ == MetricType::kHistogram);
  if (!canonical) invalid_.fetch_add(1, std::memory_order_relaxed);
  return canonical;
}

Counter* CounterFamily::With(const Labels& labels) {
  std::optional<Labels> key = Canonical(labels);
  if (!key) return &discarded_;
  MutexLock lock(&mu_);
  std::unique_ptr<Counter>& slot = series_[std::move(*key)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

void CounterFamily::Collect(Exposition& out) const {
  out.Open(name(), help(), type());
  MutexLock lock(&mu_);
  for (const auto& [labels, counter] : series_) {
    out.AddSeries(name(), labels, {Exposition::Line{"", {}, counter->Value()}});
  }
}

const std::shared_ptr<Gauge>& GaugeFamily::Slot(Labels canonical) {
  std::shared_ptr<Gauge>& slot = series_[std::move(canonical)];
  if (!slot) slot = std::make_shared<Gauge>();
  return slot;
}

std::shared_ptr<Gauge> GaugeFamily::With(const Labels& labels) {
  std::optional<Labels> key = Canonical(labels);
  if (!key) return discarded_;
  MutexLock lock(&mu_);
  return Slot(std::move(*key));
}

void GaugeFamily::Set(const Labels& labels, double v) {
  std::optional<Labels> key = Canonical(labels);
  if (!key) return;
  MutexLock lock(&mu_);
  Slot(std::move(*key))->Set(v);
}

void GaugeFamily::Add(const Labels& labels, double delta) {
  std::optional<Labels> key = Canonical(labels);
  if (!key) return;
  MutexLock lock(&mu_);
  Slot(std::move(*key))->Add(delta);
}

void GaugeFamily::Remove(const Labels& labels) {
  std::optional<Labels> key = Canonical(labels);
  if (!key) return;
  MutexLock lock(&mu_);
  series_.erase(*key);
}

void GaugeFamily::Clear() {
  MutexLock lock(&mu_);
  series_.clear();
}

void GaugeFamily::Collect(Exposition& out) const {
  out.Open(name(), help(), type());
  MutexLock lock(&mu_);
  for (const auto& [labels, gauge] : series_) {
    out.AddSeries(name(), labels, {Exposition::Line{"", {}, gauge->Value()}});
  }
}

Histogram* HistogramFamily::With(const Labels& labels) {
  std::optional<Labels> key = Canonical(labels);
  if (!key) return &discarded_;
  MutexLock lock(&mu_);
  std::unique_ptr<Histogram>& slot = series_[std::move(*key)];
  if (!slot) slot = std::make_unique<Histogram>(&bounds_);
  return slot.get();
}

void HistogramFamily::Collect(Exposition& out) const {
  out.Open(name(), help(), type());
  std::vector<std::string> les;
  les.reserve(bounds_.size() + 1);
  for (double b : bounds_) les.push_back(FormatValue(b));
  les.emplace_back("+Inf");
  MutexLock lock(&mu_);
  for (const auto& [labels, histogram] : series_) {
    Histogram::Snapshot s = histogram->Read();
    std::vector<Exposition::Line> lines;
    lines.reserve(les.size() + 2);
    for (size_t i = 0; i < les.size(); ++i) {
      lines.push_back({"_bucket", les[i], static_cast<double>(s.cumulative[i])});
    }
    lines.push_back({"_sum", {}, s.sum});
    lines.push_back({"_count", {}, static_cast<double>(s.count)});
    out.AddSeries(name(), labels, std::move(lines));
  }
}

// ---- Exposition ----

Exposition::Writer& Exposition::Writer::Add(const Labels& labels, double value) {
  if (refused_ != nullptr) {
    out_->Drop(name_, refused_);
    return *this;
  }
  std::optional<Labels> canonical = CanonicalLabels(labels, /*reserve_le=*/false);
  if (!canonical) {
    out_->Drop(name_, kInvalidLabels);
    return *this;
  }
  out_->AddSeries(name_, std::move(*canonical), {Line{"", {}, value}});
  return *this;
}

Exposition::Writer Exposition::Counter(std::string_view name, std::string_view help) {
  return Open(name, help, MetricType::kCounter);
}

Exposition::Writer Exposition::Gauge(std::string_view name, std::string_view help) {
  return Open(name, help, MetricType::kGauge);
}

Exposition::Writer Exposition::Open(std::string_view name, std::string_view help, MetricType type) {
  if (!IsValidMetricName(name)) return Writer(this, std::string(name), "invalid_name");
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), FamilyData{type, std::string(help), {}}).first;
  } else if (it->second.type != type) {
    return Writer(this, std::string(name), "type_conflict");
  } else if (it->second.help.empty()) {
    it->second.help = std::string(help);
  }
  return Writer(this, std::string(name), nullptr);
}

void Exposition::AddSeries(std::string_view name, Labels labels, std::vector<Line> lines) {
  auto it = families_.find(name);
  if (it == families_.end()) return;  // callers Open() first
  if (!it->second.series.try_emplace(std::move(labels), std::move(lines)).second) {
    Drop(name, "duplicate_series");
  }
}

void Exposition::Drop(std::string_view family, const char* reason, uint64_t n) {
  dropped_[{std::string(family), reason}] += n;
}

std::string Exposition::Text(const LabelMask& mask) const {
  std::string text;
  for (const auto& [name, family_data] : families_) {
    if (family_data.series.empty()) continue;
    // Masked: the series again under the values the reader may see, those
    // that became one summed (the lines of one family have one shape).
    std::optional<FamilyData> masked;
    if (mask) {
      masked.emplace(FamilyData{family_data.type, family_data.help, {}});
      for (const auto& [labels, lines] : family_data.series) {
        Labels seen = labels;
        for (auto& [label, value] : seen) value = mask(label, value);
        auto [it, fresh] = masked->series.try_emplace(std::move(seen), lines);
        if (fresh) continue;
        for (size_t i = 0; i < lines.size() && i < it->second.size(); ++i) it->second[i].value += lines[i].value;
      }
    }
    const FamilyData& family = masked ? *masked : family_data;
    if (!family.help.empty()) {
      text += fmt::format("# HELP {} ", name);
      AppendEscaped(text, family.help, /*quote=*/false);
      text += '\n';
    }
    text += fmt::format("# TYPE {} {}\n", name, MetricTypeName(family.type));
    for (const auto& [labels, lines] : family.series) {
      for (const Line& line : lines) {
        text += name;
        text += line.suffix;
        AppendLabels(text, labels, line.le);
        text += ' ';
        text += FormatValue(line.value);
        text += '\n';
      }
    }
  }
  return text;
}

// ---- Registry ----

Result<internal::Family*> Registry::Existing(std::string_view name, std::string_view help, MetricType type) const {
  DROVER_RETURN_IF_ERROR(ValidateMetricName(name));
  if (help.empty()) return InvalidArgument(fmt::format("metric '{}' has no help text", name));
  auto it = families_.find(name);
  if (it == families_.end()) return static_cast<internal::Family*>(nullptr);
  if (it->second->type() != type) {
    return AlreadyExists(fmt::format("metric '{}' is already registered as a {}, not a {}", name,
                                     MetricTypeName(it->second->type()), MetricTypeName(type)));
  }
  return it->second.get();
}

Result<CounterFamily*> Registry::AddCounter(std::string_view name, std::string_view help) {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(internal::Family * existing, Existing(name, help, MetricType::kCounter));
  if (existing != nullptr) return static_cast<CounterFamily*>(existing);
  auto* family = new CounterFamily(std::string(name), std::string(help));
  families_.emplace(std::string(name), std::unique_ptr<internal::Family>(family));
  return family;
}

Result<GaugeFamily*> Registry::AddGauge(std::string_view name, std::string_view help) {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(internal::Family * existing, Existing(name, help, MetricType::kGauge));
  if (existing != nullptr) return static_cast<GaugeFamily*>(existing);
  auto* family = new GaugeFamily(std::string(name), std::string(help));
  families_.emplace(std::string(name), std::unique_ptr<internal::Family>(family));
  return family;
}

Result<HistogramFamily*> Registry::AddHistogram(std::string_view name, std::string_view help,
                                                std::vector<double> bounds) {
  MutexLock lock(&mu_);
  DROVER_ASSIGN_OR_RETURN(internal::Family * existing, Existing(name, help, MetricType::kHistogram));
  DROVER_RETURN_IF_ERROR(ValidateBounds(name, bounds));
  if (existing != nullptr) {
    auto* family = static_cast<HistogramFamily*>(existing);
    if (family->bounds() != bounds) {
      return AlreadyExists(fmt::format("histogram '{}' is already registered with other bucket bounds", name));
    }
    return family;
  }
  auto* family = new HistogramFamily(std::string(name), std::string(help), std::move(bounds));
  families_.emplace(std::string(name), std::unique_ptr<internal::Family>(family));
  return family;
}

void Registry::AddCollector(Collector collector) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render(const LabelMask& mask) const {
  MutexLock render_lock(&render_mu_);
  std::vector<const internal::Family*> families;
  std::vector<Collector> collectors;
  {
    MutexLock lock(&mu_);
    families.reserve(families_.size());
    for (const auto& [name, family] : families_) families.push_back(family.get());
    collectors = collectors_;
  }
  // Families are never removed, so the pointers outlive the lock.
  Exposition out;
  for (const internal::Family* family : families) family->Collect(out);
  // The registry's own families cannot collide, so every drop is a collector's.
  for (const Collector& collector : collectors) collector(out);
  for (const auto& [key, n] : out.dropped()) collector_dropped_[key] += n;

  std::map<std::pair<std::string, std::string>, uint64_t> dropped = collector_dropped_;
  for (const internal::Family* family : families) {
    if (uint64_t n = family->invalid_label_sets(); n > 0) {
      dropped[{family->name(), kInvalidLabels}] += n;
    }
  }
  if (!dropped.empty()) {
    Exposition::Writer writer =
        out.Counter(kDroppedMetricName, "Metric samples and updates dropped, by family and reason.");
    for (const auto& [key, n] : dropped) {
      writer.Add({{"family", key.first}, {"reason", key.second}}, static_cast<double>(n));
    }
  }
  return out.Text(mask);
}

}  // namespace drover::metrics
