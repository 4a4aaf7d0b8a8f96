#include "drover/server/loop_board.h"

namespace drover::server {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
constexpr int64_t kQueueEveryNs = 5 * kSecondNs;
constexpr size_t kQueuePoints = 720;     // an hour at one every 5 s
constexpr size_t kDecisionSamples = 11;  // the last 10 s, one a second
// Ten minutes of readings, one every 2 s at most, per GPU.
constexpr size_t kGpuHistoryPoints = 300;
constexpr int64_t kGpuHistoryStepNs = 2 * kSecondNs;

}  // namespace

void LoopBoard::SetReasonEpoch(uint64_t epoch) {
  MutexLock lock(&reasons_mu_);  // not between a reader's check and its copy
  reason_epoch_.store(epoch, std::memory_order_release);
}

void LoopBoard::PutReasons(uint64_t epoch, std::vector<std::pair<uint64_t, std::string>> reasons) {
  MutexLock lock(&reasons_mu_);
  for (auto& [seq, text] : reasons) reasons_[seq] = Rendered{epoch, std::move(text)};
}

std::optional<std::string> LoopBoard::Reason(uint64_t seq) const {
  MutexLock lock(&reasons_mu_);
  auto it = reasons_.find(seq);
  if (it == reasons_.end() || it->second.epoch != reason_epoch_.load(std::memory_order_acquire)) return std::nullopt;
  return it->second.text;
}

void LoopBoard::ClearReasons() {
  MutexLock lock(&reasons_mu_);
  reasons_.clear();
}

void LoopBoard::DropReasons(const std::vector<uint64_t>& seqs) {
  MutexLock lock(&reasons_mu_);
  for (uint64_t seq : seqs) reasons_.erase(seq);
}

void LoopBoard::SetCounts(int64_t decisions, int64_t preemptions, int64_t queue_depth, int64_t bound) {
  decisions_.store(decisions, std::memory_order_relaxed);
  bound_.store(bound, std::memory_order_relaxed);
  preemptions_.store(preemptions, std::memory_order_relaxed);
  queue_depth_.store(queue_depth, std::memory_order_relaxed);
}

void LoopBoard::Sample(int64_t now_ns) {
  MutexLock lock(&stats_mu_);
  if (decision_samples_.empty() || now_ns - decision_samples_.back().first >= kSecondNs) {
    decision_samples_.emplace_back(now_ns, decisions_.load(std::memory_order_relaxed));
    while (decision_samples_.size() > kDecisionSamples) decision_samples_.pop_front();
  }
  if (queue_history_.empty() || now_ns - queue_history_.back().time_unix_nanos() >= kQueueEveryNs) {
    v1::QueuePoint p;
    p.set_time_unix_nanos(now_ns);
    p.set_depth(queue_depth_.load(std::memory_order_relaxed));
    p.set_running(bound_.load(std::memory_order_relaxed));
    queue_history_.push_back(std::move(p));
    while (queue_history_.size() > kQueuePoints) queue_history_.pop_front();
  }
}

void LoopBoard::SetCounters(const LoopStats& counters) {
  MutexLock lock(&stats_mu_);
  counters_ = counters;
}

LoopStats LoopBoard::Counters() const {
  MutexLock lock(&stats_mu_);
  return counters_;
}

v1::SchedulerStats LoopBoard::Stats(int64_t now_ns) const {
  v1::SchedulerStats out;
  const int64_t decisions = decisions_.load(std::memory_order_relaxed);
  out.set_decisions_total(decisions);
  out.set_preemptions_total(preemptions_.load(std::memory_order_relaxed));
  out.set_queue_depth(queue_depth_.load(std::memory_order_relaxed));
  MutexLock lock(&stats_mu_);
  // The rate from the oldest sample of the last ten seconds or so to now
  // (the loop samples only when it passes: an idle scheduler's count
  // stands until now); with none that recent, from the newest.
  constexpr int64_t kWindowNs = kSecondNs * static_cast<int64_t>(kDecisionSamples);
  if (!decision_samples_.empty()) {
    auto [t0, d0] = decision_samples_.back();
    for (const auto& [t, d] : decision_samples_) {
      if (now_ns - t > kWindowNs) continue;
      t0 = t;
      d0 = d;
      break;
    }
    if (now_ns > t0) {
      out.set_decisions_per_second(static_cast<double>(decisions - d0) * 1e9 / static_cast<double>(now_ns - t0));
    }
  }
  for (const v1::QueuePoint& p : queue_history_) *out.add_queue_history() = p;
  if (queue_history_.empty() || now_ns - queue_history_.back().time_unix_nanos() >= kQueueEveryNs) {
    v1::QueuePoint* p = out.add_queue_history();  // the loop has not passed since: the queue as it is now
    p->set_time_unix_nanos(now_ns);
    p->set_depth(out.queue_depth());
    p->set_running(bound_.load(std::memory_order_relaxed));
  }
  return out;
}

void LoopBoard::SetTenants(std::map<std::string, Tenant> tenants) {
  MutexLock lock(&tenants_mu_);
  tenants_ = std::move(tenants);
}

void LoopBoard::SetUsage(const std::vector<std::pair<std::string, sched::Scheduler::TenantUsage>>& usage) {
  MutexLock lock(&tenants_mu_);
  for (const auto& [name, u] : usage) {
    auto it = tenants_.find(name);
    if (it == tenants_.end()) {
      if (u.milli_gpus == 0 && u.memory_bytes == 0) continue;
      it = tenants_.emplace(name, Tenant{}).first;
      it->second.info.name = name;
    }
    it->second.usage = u;
    // A tenant known only by its jobs leaves once it holds nothing.
    if (!it->second.configured && u.milli_gpus == 0 && u.memory_bytes == 0) tenants_.erase(it);
  }
}

std::map<std::string, LoopBoard::Tenant> LoopBoard::Tenants() const {
  MutexLock lock(&tenants_mu_);
  return tenants_;
}

void LoopBoard::AppendHistory(const std::string& node, int gpus, const v1::Heartbeat& hb) {
  MutexLock lock(&history_mu_);
  std::vector<std::deque<v1::GpuPoint>>& per_gpu = history_[node];
  per_gpu.resize(static_cast<size_t>(gpus));
  for (const v1::GpuReport& r : hb.gpus()) {
    const v1::GpuTelemetry& t = r.telemetry();
    if (t.time_unix_nanos() == 0 || r.index() < 0 || r.index() >= gpus) continue;  // no reading of it this time
    std::deque<v1::GpuPoint>& history = per_gpu[static_cast<size_t>(r.index())];
    if (!history.empty() && t.time_unix_nanos() - history.back().time_unix_nanos() < kGpuHistoryStepNs) continue;
    v1::GpuPoint& p = history.emplace_back();
    p.set_time_unix_nanos(t.time_unix_nanos());
    p.set_utilization_pct(t.has_utilization_pct() ? static_cast<float>(t.utilization_pct()) : -1);
    p.set_memory_used_bytes(t.has_memory_used_bytes() ? t.memory_used_bytes() : -1);
    p.set_temperature_c(t.has_temperature_c() ? static_cast<float>(t.temperature_c()) : -1);
    p.set_power_w(t.has_power_w() ? static_cast<float>(t.power_w()) : -1);
    while (history.size() > kGpuHistoryPoints) history.pop_front();
  }
}

void LoopBoard::DropHistory(const std::string& node) {
  MutexLock lock(&history_mu_);
  history_.erase(node);
}

std::vector<v1::GpuPoint> LoopBoard::History(const std::string& node, int gpu) const {
  MutexLock lock(&history_mu_);
  auto it = history_.find(node);
  if (it == history_.end() || gpu < 0 || static_cast<size_t>(gpu) >= it->second.size()) return {};
  const std::deque<v1::GpuPoint>& h = it->second[static_cast<size_t>(gpu)];
  return {h.begin(), h.end()};
}

}  // namespace drover::server
