#pragma once
// The fixture of the control-loop tests: a real SQLite store, a manual
// clock, fake agent sessions and a store whose writes can be made to fail.
// Test-only; included by control_loop_test.cc, control_loop_scheduling_test.cc
// and tests/sim_server/sim_server_test.cc.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "drover/common/clock.h"
#include "drover/common/mutex.h"
#include "drover/rpc/convert.h"
#include "drover/server/control_loop.h"
#include "drover/store/sqlite/sqlite_store.h"
#include "support/forwarding_store.h"

namespace drover::server::testing {

// A heartbeat with a reading of every GPU at `time_ns`.
inline v1::Heartbeat Reading(int gpus, double temperature, int64_t time_ns) {
  v1::Heartbeat hb;
  for (int i = 0; i < gpus; ++i) {
    v1::GpuReport* r = hb.add_gpus();
    r->set_index(i);
    r->set_health(v1::GPU_HEALTH_HEALTHY);
    r->mutable_telemetry()->set_time_unix_nanos(time_ns);
    r->mutable_telemetry()->set_temperature_c(temperature + i);
    r->mutable_telemetry()->set_utilization_pct(50);
  }
  return hb;
}

using std::chrono::seconds;

// Generous: a loaded 2-core machine fsyncs slowly. Reached only when broken.
constexpr auto kDeadline = seconds(20);

template <typename T>
T Await(std::future<T> f) {
  if (f.wait_for(kDeadline) != std::future_status::ready) {
    std::fprintf(stderr, "the control loop did not answer within %lld s\n", static_cast<long long>(kDeadline.count()));
    std::abort();  // a hung future would hang the whole binary
  }
  return f.get();
}

// The value of an answer that must succeed.
template <typename T>
T Must(std::future<Result<T>> f) {
  Result<T> r = Await(std::move(f));
  if (!r.ok()) {
    ADD_FAILURE() << "unexpected error: " << r.status().ToString();
    return T{};
  }
  return std::move(r).value();
}

// The status of an answer that must fail.
template <typename T>
Status Fails(std::future<Result<T>> f) {
  Result<T> r = Await(std::move(f));
  if (r.ok()) {
    ADD_FAILURE() << "unexpected success";
    return Status::Ok();
  }
  return r.status();
}

inline bool Contains(const v1::DesiredWorkloads& d, const std::string& job_id) {
  return std::any_of(d.workloads().begin(), d.workloads().end(),
                     [&](const v1::Workload& w) { return w.job_id() == job_id; });
}

inline std::vector<int> Gpus(const v1::Job& job) {
  const auto& g = job.status().allocation().gpu_indices();
  return {g.begin(), g.end()};
}

// Records every desired set the loop sends to one node's session.
class FakeSink : public AgentSink {
 public:
  std::atomic<int> resets_{0};

  void SendDesired(const v1::DesiredWorkloads& desired) override {
    MutexLock lock(&mu_);
    sets_.push_back(desired);
    cv_.SignalAll();
  }
  void Reset() override { resets_.fetch_add(1); }
  void SendHeartbeatAck(const v1::HeartbeatAck& ack) override {
    MutexLock lock(&mu_);
    last_ack_ = ack;
  }
  v1::HeartbeatAck last_ack() const {
    MutexLock lock(&mu_);
    return last_ack_;
  }
  void SendInjectFault(const v1::InjectFault& fault) override {
    MutexLock lock(&mu_);
    faults_.push_back(fault);
  }
  std::vector<v1::InjectFault> faults() const {
    MutexLock lock(&mu_);
    return faults_;
  }
  void SendPullImage(const v1::PullImage& pull) override {
    MutexLock lock(&mu_);
    pulls_.push_back(pull);
    cv_.SignalAll();
  }
  std::vector<v1::PullImage> pulls() const {
    MutexLock lock(&mu_);
    return pulls_;
  }
  // Waits until `n` pulls (or loads) came; false after kDeadline.
  bool WaitForPulls(size_t n) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, kDeadline, [&]() DROVER_REQUIRES(mu_) { return pulls_.size() >= n; });
  }
  int resets() const { return resets_.load(); }

  size_t count() const {
    MutexLock lock(&mu_);
    return sets_.size();
  }
  std::vector<v1::DesiredWorkloads> sets() const {
    MutexLock lock(&mu_);
    return sets_;
  }

  // Waits for a set, the `from`-th or later, that satisfies `pred`.
  std::optional<v1::DesiredWorkloads> WaitFor(size_t from,
                                              const std::function<bool(const v1::DesiredWorkloads&)>& pred) {
    MutexLock lock(&mu_);
    std::optional<v1::DesiredWorkloads> found;
    bool ok = cv_.WaitFor(&mu_, kDeadline, [&]() DROVER_REQUIRES(mu_) {
      for (size_t i = from; i < sets_.size(); ++i) {
        if (pred(sets_[i])) {
          found = sets_[i];
          return true;
        }
      }
      return false;
    });
    if (!ok) ADD_FAILURE() << "no matching desired set among the " << sets_.size() << " received";
    return found;
  }
  std::optional<v1::DesiredWorkloads> WaitForJob(size_t from, const std::string& job_id) {
    return WaitFor(from, [&](const v1::DesiredWorkloads& d) { return Contains(d, job_id); });
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<v1::DesiredWorkloads> sets_ DROVER_GUARDED_BY(mu_);
  std::vector<v1::InjectFault> faults_;
  std::vector<v1::PullImage> pulls_ DROVER_GUARDED_BY(mu_);
  v1::HeartbeatAck last_ack_ DROVER_GUARDED_BY(mu_);
};

// A Store whose writes (and, separately, reads) can be made to fail.
class FlakyStore : public store::ForwardingStore {
 public:
  explicit FlakyStore(store::Store* inner) : ForwardingStore(inner) {}

  std::atomic<bool> fail_txn{false};
  std::atomic<bool> fail_range{false};
  // `hook` runs at the start of every Txn, on the loop's thread.
  void SetBeforeTxn(std::function<void()> hook) {
    MutexLock lock(&mu_);
    before_txn_ = std::move(hook);
  }

  // The next Txn waits on the loop's thread until `release` is set;
  // `entered` is ready once it waits (a slow disk, mid-commit).
  struct Hold {
    std::promise<void> entered, release;
    std::shared_future<void> go = release.get_future().share();
    std::atomic<bool> armed{true};
  };
  std::shared_ptr<Hold> HoldNextTxn() {
    auto hold = std::make_shared<Hold>();
    SetBeforeTxn([hold] {
      if (!hold->armed.exchange(false)) return;
      hold->entered.set_value();
      hold->go.wait();
    });
    return hold;
  }

  Result<store::TxnResult> Txn(const std::vector<store::Compare>& c, const std::vector<store::Op>& s,
                               const std::vector<store::Op>& f) override {
    std::function<void()> hook;
    {
      MutexLock lock(&mu_);
      hook = before_txn_;
    }
    if (hook) hook();
    if (fail_txn) return Unavailable("injected: the disk is gone");
    return ForwardingStore::Txn(c, s, f);
  }
  Result<store::RangeResult> Range(const std::string& prefix, int64_t limit, const std::string& start) override {
    if (fail_range) return Unavailable("injected: the disk is gone");
    return ForwardingStore::Range(prefix, limit, start);
  }

 private:
  Mutex mu_;
  std::function<void()> before_txn_ DROVER_GUARDED_BY(mu_);
};

class ControlLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "drover-control-loop-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_NO_FATAL_FAILURE(StartLoop(store_.get()));
  }
  void TearDown() override {
    loop_.reset();
    flaky_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void OpenStore() {
    auto s = store::OpenSqliteStore(dir_ + "/state.db", &clock_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void StartLoop(store::Store* s) {
    // Leases move only when a test advances lease_clock_.
    if (options_.lease_clock == nullptr) options_.lease_clock = &lease_clock_;
    loop_ = std::make_unique<ControlLoop>(s, &clock_, options_);
    Status started = loop_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }
  // Stops the loop and reopens the store: a server restart.
  void Restart() {
    loop_->Stop();
    loop_.reset();
    flaky_.reset();
    store_.reset();
    ASSERT_NO_FATAL_FAILURE(OpenStore());
    ASSERT_NO_FATAL_FAILURE(StartLoop(store_.get()));
  }
  // Restarts the loop on a FlakyStore over the same SQLite store.
  void UseFlakyStore() {
    loop_->Stop();
    loop_.reset();
    flaky_ = std::make_unique<FlakyStore>(store_.get());
    ASSERT_NO_FATAL_FAILURE(StartLoop(flaky_.get()));
  }

  static v1::RegisterRequest Inventory(const std::string& node, int gpus) {
    v1::RegisterRequest req;
    req.set_node_name(node);
    req.set_cpu_millis(64000);
    req.set_memory_bytes(int64_t{512} << 30);
    req.set_agent_version("test");
    for (int i = 0; i < gpus; ++i) {
      v1::Gpu* g = req.add_gpus();
      g->set_index(i);
      g->set_uuid(node + "-gpu-" + std::to_string(i));
      g->set_vendor("nvidia");
      g->set_model("H100 80GB");
      g->set_memory_bytes(int64_t{80} << 30);
      g->set_health(v1::GPU_HEALTH_HEALTHY);
      g->set_backend("simulated");
    }
    EXPECT_TRUE(rpc::ValidateRegister(req).ok());
    return req;
  }
  void Register(const std::string& node, int gpus) { Must(loop_->RegisterNode(Inventory(node, gpus))); }
  // Registers the node and opens its session; returns the session's sink.
  std::shared_ptr<FakeSink> Connect(const std::string& node, int gpus) {
    Register(node, gpus);
    auto sink = std::make_shared<FakeSink>();
    Open(node, sink);
    return sink;
  }
  // Opens a session; with `full`, reports it as the agent's first (full)
  // status report, as a node back from Lost must before it takes work.
  void Open(const std::string& node, std::shared_ptr<FakeSink> sink, std::optional<v1::StatusReport> full = {}) {
    Must(loop_->SessionOpened(node, sink));
    if (!full) return;
    full->set_full(true);
    loop_->HandleStatus(node, *full);
    Must(loop_->Barrier());
  }
  // The workload id of the job's current attempt (of `replica` for a gang).
  std::string WorkloadOf(const std::string& job_id, int replica = -1) {
    v1::Job job = Get(job_id);
    return rpc::WorkloadId(job_id, std::max(replica, 0), replica < 0 ? 1 : job.spec().replicas(),
                           job.status().attempt());
  }

  static v1::JobSpec Spec(int gpus) {
    v1::JobSpec spec;
    spec.set_gpus(gpus);
    spec.add_command("sh");
    spec.add_command("-c");
    spec.add_command("echo hi");
    (*spec.mutable_env())["STEPS"] = "10";
    Status normalized = rpc::NormalizeJobSpec(&spec);
    EXPECT_TRUE(normalized.ok()) << normalized.ToString();
    return spec;
  }
  v1::Job Submit(int gpus) { return Must(loop_->Submit(Spec(gpus))); }
  v1::Job Get(const std::string& id) { return Must(loop_->GetJob(id)); }
  v1::JobState StateOf(const std::string& id) { return Get(id).status().state(); }
  // As the loop left the node once everything posted before was applied
  // (reads are served from what the last commit published).
  v1::Node Node(const std::string& name) {
    Must(loop_->Barrier());
    return Must(loop_->GetNode(name));
  }
  std::vector<v1::Job> Jobs() { return Must(loop_->ListJobs(v1::ListJobsRequest())); }

  // Sends one workload status as `node`'s agent and waits until it is applied.
  void Report(const std::string& node, const std::string& job_id, v1::WorkloadState state, int exit_code = 0,
              int signal = 0, const std::string& message = "") {
    v1::StatusReport report;
    v1::WorkloadStatus* ws = report.add_workloads();
    ws->set_job_id(job_id);
    ws->set_workload_id(WorkloadOf(job_id));
    ws->set_state(state);
    ws->set_exit_code(exit_code);
    ws->set_signal(signal);
    ws->set_start_time_unix_nanos(ToUnixNanos(clock_.Now()));
    if (state != v1::WORKLOAD_STATE_RUNNING) ws->set_end_time_unix_nanos(ToUnixNanos(clock_.Now()) + 5);
    ws->set_message(message);
    loop_->HandleStatus(node, report);
    Must(loop_->Barrier());
  }

  // Reports one replica of a gang ("<job>.<replica>") and waits until it is applied.
  void ReportReplica(const std::string& node, const std::string& job_id, int replica, v1::WorkloadState state,
                     int exit_code = 0, int signal = 0) {
    v1::StatusReport report;
    v1::WorkloadStatus* ws = report.add_workloads();
    ws->set_job_id(job_id);
    ws->set_workload_id(WorkloadOf(job_id, replica));
    ws->set_state(state);
    ws->set_exit_code(exit_code);
    ws->set_signal(signal);
    ws->set_start_time_unix_nanos(ToUnixNanos(clock_.Now()));
    if (state != v1::WORKLOAD_STATE_RUNNING) ws->set_end_time_unix_nanos(ToUnixNanos(clock_.Now()) + 5);
    loop_->HandleStatus(node, report);
    Must(loop_->Barrier());
  }

  // The jobs as the store holds them.
  std::vector<v1::Job> StoredJobs() {
    std::vector<v1::Job> out;
    auto r = store_->Range("/jobs/");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return out;
    for (const store::KeyValue& kv : r->kvs) {
      v1::Job job;
      EXPECT_TRUE(job.ParseFromString(kv.value)) << kv.key;
      out.push_back(job);
    }
    return out;
  }

  // Strict FIFO without backfill unless a test says otherwise: the order
  // tests below are about the loop, not about the policies.
  static ControlLoopOptions StrictFifo() {
    ControlLoopOptions o;
    o.scheduler.queue = sched::QueuePolicy::kFifo;
    o.scheduler.backfill = false;
    o.scheduler.preemption = false;
    return o;
  }

  ControlLoopOptions options_ = StrictFifo();
  ManualClock clock_;
  ManualClock lease_clock_;
  std::string dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<FlakyStore> flaky_;
  std::unique_ptr<ControlLoop> loop_;
};

}  // namespace drover::server::testing
