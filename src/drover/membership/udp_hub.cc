#include "drover/membership/udp_hub.h"
#include "drover/common/mutex.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace drover::membership {
namespace {

// epoll data of the hub's own descriptors; attachments are numbered after.
constexpr uint64_t kWakeId = 1;
constexpr uint64_t kTimerId = 2;
constexpr uint64_t kFirstAttachmentId = 3;
// Ready sockets taken per epoll_wait; the rest stay ready (level-triggered)
// and come first in the next one.
constexpr int kMaxEvents = 256;

}  // namespace

// Shared by the hub and its attachments, so that an attachment may detach
// after the hub is gone (it then finds nothing to do).
//
// Invariants:
//   While the hub lives, epoll_fd, wake_fd and timer_fd are open; once it
//   is destroyed entries is empty and they are closed (both under mu).
//   Every key of entries is registered in epoll_fd with its fd.
//   serving is 0 or the id whose serve function runs now on the hub's
//   thread; a detach from another thread waits until it is not its id.
struct UdpHub::Core {
  struct Entry {
    int fd;
    ServeFn serve;
  };

  ~Core() { CloseFds(); }
  void CloseFds() {
    for (int* fd : {&epoll_fd, &wake_fd, &timer_fd}) {
      if (*fd >= 0) ::close(*fd);
      *fd = -1;
    }
  }

  Mutex mu;
  CondVar served;     // serving changed
  int epoll_fd = -1;  // read unlocked by the hub's thread only while it runs
  int wake_fd = -1;
  int timer_fd = -1;
  std::thread::id hub_thread DROVER_GUARDED_BY(mu);
  uint64_t next_id DROVER_GUARDED_BY(mu) = kFirstAttachmentId;
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries DROVER_GUARDED_BY(mu);
  uint64_t serving DROVER_GUARDED_BY(mu) = 0;

  std::atomic<uint64_t> sweeps{0};
  std::atomic<uint64_t> missed_ticks{0};
  std::atomic<uint64_t> readable_serves{0};
};

UdpHub::Attachment::~Attachment() { Detach(); }

void UdpHub::Attachment::Detach() {
  std::shared_ptr<Core::Entry> entry;  // released after the lock
  MutexLock lock(&core_->mu);
  auto it = core_->entries.find(id_);
  if (it == core_->entries.end()) return;  // detached already, or the hub is gone
  ::epoll_ctl(core_->epoll_fd, EPOLL_CTL_DEL, it->second->fd, nullptr);
  entry = std::move(it->second);
  core_->entries.erase(it);
  // On the hub's thread the serve function of this id may be what called
  // us: waiting for it to return would never end.
  if (std::this_thread::get_id() != core_->hub_thread) {
    core_->served.Wait(&core_->mu, [&]() DROVER_REQUIRES(core_->mu) { return core_->serving != id_; });
  }
}

Result<std::unique_ptr<UdpHub>> UdpHub::Start(UdpHubOptions options) {
  if (options.tick_interval_ns <= 0) return InvalidArgument("udp hub tick interval must be positive");
  auto core = std::make_shared<Core>();
  core->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  core->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  core->timer_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (core->epoll_fd < 0 || core->wake_fd < 0 || core->timer_fd < 0) {
    return Unavailable(fmt::format("udp hub descriptors: {}", std::strerror(errno)));
  }
  itimerspec period{};
  period.it_interval.tv_sec = options.tick_interval_ns / 1'000'000'000;
  period.it_interval.tv_nsec = options.tick_interval_ns % 1'000'000'000;
  period.it_value = period.it_interval;
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u64 = kWakeId;
  epoll_event timer{};
  timer.events = EPOLLIN;
  timer.data.u64 = kTimerId;
  if (::timerfd_settime(core->timer_fd, 0, &period, nullptr) != 0 ||
      ::epoll_ctl(core->epoll_fd, EPOLL_CTL_ADD, core->wake_fd, &wake) != 0 ||
      ::epoll_ctl(core->epoll_fd, EPOLL_CTL_ADD, core->timer_fd, &timer) != 0) {
    return Unavailable(fmt::format("udp hub timer: {}", std::strerror(errno)));
  }
  std::unique_ptr<UdpHub> hub(new UdpHub(core, options.tick_interval_ns));
  hub->thread_ = std::thread([h = hub.get()] { h->Run(); });
  MutexLock lock(&core->mu);
  core->hub_thread = hub->thread_.get_id();
  return hub;
}

UdpHub::UdpHub(std::shared_ptr<Core> core, int64_t tick_interval_ns)
    : core_(std::move(core)), tick_interval_ns_(tick_interval_ns) {}

UdpHub::~UdpHub() {
  stop_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(core_->wake_fd, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  std::unordered_map<uint64_t, std::shared_ptr<Core::Entry>> left;  // released after the lock
  MutexLock lock(&core_->mu);
  left.swap(core_->entries);
  core_->CloseFds();
}

Result<std::unique_ptr<UdpHub::Attachment>> UdpHub::Attach(int fd, ServeFn serve) {
  MutexLock lock(&core_->mu);
  const uint64_t id = core_->next_id++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = id;
  if (::epoll_ctl(core_->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return Unavailable(fmt::format("udp hub cannot watch socket {}: {}", fd, std::strerror(errno)));
  }
  core_->entries.emplace(id, std::make_shared<Core::Entry>(Core::Entry{fd, std::move(serve)}));
  return std::unique_ptr<Attachment>(new Attachment(core_, id));
}

UdpHubStats UdpHub::Stats() const {
  UdpHubStats s;
  {
    MutexLock lock(&core_->mu);
    s.attached = core_->entries.size();
  }
  s.sweeps = core_->sweeps.load(std::memory_order_relaxed);
  s.missed_ticks = core_->missed_ticks.load(std::memory_order_relaxed);
  s.readable_serves = core_->readable_serves.load(std::memory_order_relaxed);
  return s;
}

void UdpHub::Run() {
  std::vector<epoll_event> events(kMaxEvents);
  std::vector<uint64_t> ids;
  while (!stop_.load()) {
    const int n = ::epoll_wait(core_->epoll_fd, events.data(), kMaxEvents, -1);
    bool sweep = false;
    for (int i = 0; i < n && !stop_.load(); ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kWakeId) {
        uint64_t count = 0;
        [[maybe_unused]] const ssize_t r = ::read(core_->wake_fd, &count, sizeof(count));
      } else if (id == kTimerId) {
        uint64_t expirations = 0;
        if (::read(core_->timer_fd, &expirations, sizeof(expirations)) == sizeof(expirations) && expirations > 0) {
          core_->missed_ticks.fetch_add(expirations - 1, std::memory_order_relaxed);
          sweep = true;
        }
      } else {
        core_->readable_serves.fetch_add(1, std::memory_order_relaxed);
        Serve(id, /*readable=*/true);
      }
    }
    if (!sweep || stop_.load()) continue;
    {
      MutexLock lock(&core_->mu);
      ids.clear();
      for (const auto& [id, entry] : core_->entries) ids.push_back(id);
    }
    for (uint64_t id : ids) Serve(id, /*readable=*/false);
    core_->sweeps.fetch_add(1, std::memory_order_relaxed);
  }
}

void UdpHub::Serve(uint64_t id, bool readable) {
  std::shared_ptr<Core::Entry> entry;
  {
    MutexLock lock(&core_->mu);
    auto it = core_->entries.find(id);
    if (it == core_->entries.end()) return;  // detached since epoll_wait or the sweep's snapshot
    entry = it->second;
    core_->serving = id;
  }
  entry->serve(readable);
  entry.reset();  // the last reference may be ours, when detached meanwhile: drop it before saying so
  {
    MutexLock lock(&core_->mu);
    core_->serving = 0;
  }
  core_->served.SignalAll();
}

}  // namespace drover::membership
