#include "drover/agent/telemetry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace drover::agent {
namespace {

using ::testing::HasSubstr;

// Tells the test each time the sampler finishes a round of samples: the
// simulated backend, with TakeEvents (called once per tick, after every
// Sample) announcing the tick.
class TickingBackend final : public DeviceBackend {
 public:
  TickingBackend(std::unique_ptr<DeviceBackend> inner, std::function<void()> on_tick)
      : inner_(std::move(inner)), on_tick_(std::move(on_tick)) {}
  std::string_view Name() const override { return inner_->Name(); }
  bool IsAvailable() override { return inner_->IsAvailable(); }
  Status Initialize() override { return inner_->Initialize(); }
  Result<std::vector<GpuDevice>> Discover() override { return inner_->Discover(); }
  Result<GpuSample> Sample(int device) override { return inner_->Sample(device); }
  std::vector<HealthEvent> TakeEvents() override {
    std::vector<HealthEvent> events = inner_->TakeEvents();
    on_tick_();
    return events;
  }
  void SetLoad(int device, double load) override { inner_->SetLoad(device, load); }
  Status InjectFault(int device, const Fault& fault) override { return inner_->InjectFault(device, fault); }

 private:
  std::unique_ptr<DeviceBackend> inner_;
  std::function<void()> on_tick_;
};

struct Rig {
  explicit Rig(TelemetryOptions options, int gpus = 2) {
    auto b = MakeSimulatedBackend({.count = gpus, .model = "H100 80GB", .node_name = "n", .step_seconds = 1});
    EXPECT_TRUE(b.ok());
    EXPECT_TRUE((*b)->Discover().ok());
    auto ticking = std::make_unique<TickingBackend>(std::move(*b), [this] { Notify(); });
    std::vector<DeviceSlot> slots;
    for (int i = 0; i < gpus; ++i) slots.push_back({ticking.get(), i});
    std::vector<std::unique_ptr<DeviceBackend>> backends;
    backends.push_back(std::move(ticking));
    telemetry = std::make_unique<Telemetry>(std::move(backends), std::move(slots), options, [this] {
      changes.fetch_add(1);
      Notify();
    });
    telemetry->Start();
  }
  ~Rig() { telemetry->Stop(); }

  // Waits for `pred`, checking it after every sampling tick and health
  // change (the sampler runs on its own thread); false after 20 s.
  bool Eventually(const std::function<bool()>& pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), pred);
  }
  void Notify() {
    std::lock_guard lock(mu);
    cv.notify_all();
  }

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> changes{0};
  std::unique_ptr<Telemetry> telemetry;
};

TelemetryOptions Fast() {
  TelemetryOptions o;
  o.period = std::chrono::milliseconds(10);
  o.health_interval = std::chrono::milliseconds(10);
  o.health.clean_checks = 3;
  o.history = 16;
  return o;
}

TEST(TelemetryTest, OptionsAreValidated) {
  TelemetryOptions o;
  EXPECT_TRUE(ValidateTelemetryOptions(o).ok());
  o.period = std::chrono::milliseconds(5);
  EXPECT_THAT(ValidateTelemetryOptions(o).message(), HasSubstr("outside 10ms..1s"));
  o.period = std::chrono::seconds(2);
  EXPECT_EQ(ValidateTelemetryOptions(o).code(), Code::kInvalidArgument);
  o = TelemetryOptions();
  o.health_interval = std::chrono::milliseconds(500);  // faster than sampling
  EXPECT_EQ(ValidateTelemetryOptions(o).code(), Code::kInvalidArgument);
  o = TelemetryOptions();
  o.health.clean_checks = 0;
  EXPECT_EQ(ValidateTelemetryOptions(o).code(), Code::kInvalidArgument);
}

TEST(TelemetryTest, RingBufferKeepsTheLatestSamplesInOrder) {
  Rig rig(Fast());
  ASSERT_TRUE(rig.Eventually([&] { return rig.telemetry->History(0, 100).size() == 16; }));
  std::vector<GpuSample> h = rig.telemetry->History(0, 100);
  for (size_t i = 1; i < h.size(); ++i) EXPECT_LT(h[i - 1].time_ns, h[i].time_ns);
  EXPECT_EQ(rig.telemetry->History(0, 4).size(), 4u);
  EXPECT_EQ(rig.telemetry->History(0, 4).back().time_ns, rig.telemetry->History(0, 100).back().time_ns);
  EXPECT_TRUE(rig.telemetry->History(5, 10).empty());
}

TEST(TelemetryTest, LoadShowsInReadingsAndSummariesRestart) {
  Rig rig(Fast());
  rig.telemetry->SetLoad(1, 1.0);
  // Each sample advances the model one simulated second.
  ASSERT_TRUE(rig.Eventually([&] {
    auto r = rig.telemetry->TakeReadings(false);
    return r[1].have_sample && r[1].latest.utilization_pct > 90;
  }));
  auto readings = rig.telemetry->TakeReadings(/*summarise=*/true);
  EXPECT_GT(readings[1].samples, 0);
  EXPECT_GT(readings[1].utilization_max, 90);
  EXPECT_LT(readings[0].latest.utilization_pct, 1);
  EXPECT_GT(readings[1].latest_wall_ns, 0);
  auto after = rig.telemetry->TakeReadings(false);
  EXPECT_LT(after[1].samples, readings[1].samples + 1000);  // restarted, not accumulated forever
}

TEST(TelemetryTest, FaultTakesTheGpuOutAndCleanChecksBringItBack) {
  Rig rig(Fast());
  ASSERT_TRUE(rig.telemetry->InjectFault(0, {Fault::Kind::kLost, 0}).ok());
  ASSERT_TRUE(rig.Eventually([&] { return !rig.telemetry->TakeReadings(false)[0].healthy; }));
  // The callback runs after the reading is published: wait for it too.
  EXPECT_TRUE(rig.Eventually([&] { return rig.changes.load() > 0; }));
  EXPECT_THAT(rig.telemetry->TakeReadings(false)[0].reason, HasSubstr("device lost"));
  EXPECT_FALSE(rig.telemetry->TakeReadings(false)[0].have_sample);  // no stale reading passed off as current
  EXPECT_TRUE(rig.telemetry->TakeReadings(false)[1].healthy);
  ASSERT_TRUE(rig.telemetry->InjectFault(0, {Fault::Kind::kClear, 0}).ok());
  ASSERT_TRUE(rig.Eventually([&] { return rig.telemetry->TakeReadings(false)[0].healthy; }));
  EXPECT_EQ(rig.telemetry->TakeReadings(false)[0].reason, "");
  EXPECT_EQ(rig.telemetry->InjectFault(9, {Fault::Kind::kXid, 79}).code(), Code::kInvalidArgument);
}

TEST(TelemetryTest, XidsAreCountedPerGpu) {
  Rig rig(Fast());
  ASSERT_TRUE(rig.telemetry->InjectFault(1, {Fault::Kind::kXid, 13}).ok());
  ASSERT_TRUE(rig.Eventually([&] { return rig.telemetry->TakeReadings(false)[1].xid_errors == 1; }));
  auto r = rig.telemetry->TakeReadings(false);
  EXPECT_EQ(r[1].last_xid, 13);
  EXPECT_TRUE(r[1].healthy);  // an application error
  EXPECT_EQ(r[0].xid_errors, 0);
}

}  // namespace
}  // namespace drover::agent
