#pragma once
// `logs -f` for one client without a thread of its own (gRPC and REST).
//
// A follower is woken by each write to the job's log (LogStore::Watch) and
// each committed change of the job (JobWatch: its end, a new attempt); it
// then reads what is new on a pump loop that every follower shares and hands
// one chunk at a time to the client. The next chunk waits for Sent() (the
// gRPC reactor's write completed; an HTTP sink that queued it says so at
// once), so a slow client slows its follower instead of filling memory. It
// finishes once the job ended and everything it wrote was sent.
//
// Thread-safety: thread-safe. The callbacks run on the pump loop, never two
// at once for one follower; `send` must not block.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "drover/common/mutex.h"
#include "drover/common/status.h"
#include "drover/runtime/event_loop.h"
#include "drover/server/job_watch.h"
#include "drover/server/log_store.h"
#include "drover/v1/api.pb.h"

namespace drover::server {

// The most one chunk of a job's output holds.
inline constexpr int64_t kLogChunkBytes = 64 * 1024;

class LogFollow : public std::enable_shared_from_this<LogFollow> {
 public:
  // Hands one chunk to the client and, once it went out, calls self->Sent();
  // false when the client is gone.
  using Send = std::function<bool(const std::shared_ptr<LogFollow>& self, v1::LogChunk)>;
  // Called once at the end: Ok when the job ended and all was sent (or the
  // client went away), else why reading failed.
  using Done = std::function<void(const Status&)>;

  // Reads `job`'s output from `offset` of its current attempt; with
  // `follow`, until the job ended, else until the end of what is there.
  // Start subscribes before it reads; a caller that read `job` before
  // calling gives the state read again after it to Update, so that no
  // change is missed.
  // `replica`: which replica of a gang's log (LogStore::LogId).
  static std::shared_ptr<LogFollow> Start(LogStore* logs, JobWatch* watch, runtime::EventLoop* pump, v1::Job job,
                                          int64_t offset, bool follow, Send send, Done done, int replica = 0);
  ~LogFollow();

  // A newer state of the job (an older one is ignored).
  void Update(const v1::Job& job);
  // The last chunk went out: the next may follow.
  void Sent();
  // The client went away: stop, unsubscribe, no more callbacks.
  void Cancel();

 private:
  LogFollow(LogStore* logs, JobWatch* watch, runtime::EventLoop* pump, v1::Job job, int64_t offset, bool follow,
            Send send, Done done, int replica);
  void Wake(const v1::Job* changed);
  void ScheduleLocked() DROVER_REQUIRES(mu_);
  void Pump();
  void Finish(const Status& s);
  void Unsubscribe();

  LogStore* const logs_;
  JobWatch* const watch_;
  runtime::EventLoop* const pump_;
  const Send send_;
  const Done done_;
  const std::string id_;
  const int replica_;
  const bool follow_;

  Mutex mu_;
  v1::Job job_ DROVER_GUARDED_BY(mu_);  // newest known state
  int attempt_ DROVER_GUARDED_BY(mu_);
  int64_t offset_ DROVER_GUARDED_BY(mu_);
  bool woken_ DROVER_GUARDED_BY(mu_) = true;       // something may be new
  bool scheduled_ DROVER_GUARDED_BY(mu_) = false;  // a Pump is posted or running
  bool in_flight_ DROVER_GUARDED_BY(mu_) = false;  // a chunk awaits Sent()
  bool finished_ DROVER_GUARDED_BY(mu_) = false;
  uint64_t log_watch_ DROVER_GUARDED_BY(mu_) = 0;
  uint64_t job_watch_ DROVER_GUARDED_BY(mu_) = 0;
};

}  // namespace drover::server
