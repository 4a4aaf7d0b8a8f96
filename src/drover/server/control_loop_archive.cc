// The archive in the control loop: the archiver's (archiver.h) way onto the
// loop, its one-second timer and ArchiveDueNow. The move itself, and the
// reads of the archive, are the archiver's.

#include "drover/server/control_loop.h"

namespace drover::server {

Archiver::Hooks ControlLoop::ArchiverHooks() {
  Archiver::Hooks h;
  h.on_loop = [this](std::function<void()> task, std::function<void(const Status&)> refused) {
    CallThen<Done>(
        [task = std::move(task)]() -> Result<Done> {
          task();
          return Done{};
        },
        [refused = std::move(refused)](Result<Done> r) {
          if (!r.ok() && refused) refused(r.status());
        },
        Needs::kAnyState);
  };
  h.readable = [this] { return EnsureRecovered(); };
  return h;
}

void ControlLoop::ScheduleArchiving() {
  loop_.PostAfter(std::chrono::seconds(1), [this] {
    archiver_.Tick();
    ScheduleArchiving();
  });
}

std::future<Result<int64_t>> ControlLoop::ArchiveDueNow() {
  auto promise = std::make_shared<std::promise<Result<int64_t>>>();
  auto future = promise->get_future();
  auto done = [promise](Result<int64_t> r) { promise->set_value(std::move(r)); };
  // DueNow answers `done` itself once the state is readable; only a
  // stopped loop answers here.
  CallThen<Done>(
      [this, done]() -> Result<Done> {
        archiver_.DueNow(done);
        return Done{};
      },
      [done](Result<Done> r) {
        if (!r.ok()) done(r.status());
      },
      Needs::kAnyState);
  return future;
}

}  // namespace drover::server
