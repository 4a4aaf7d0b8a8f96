#include "drover/server/log_follow.h"

#include <utility>

#include "drover/rpc/convert.h"

namespace drover::server {
LogFollow::LogFollow(LogStore* logs, JobWatch* watch, runtime::EventLoop* pump, v1::Job job, int64_t offset,
                     bool follow, Send send, Done done, int replica)
    : logs_(logs),
      watch_(watch),
      pump_(pump),
      send_(std::move(send)),
      done_(std::move(done)),
      id_(job.id()),
      replica_(replica),
      follow_(follow),
      job_(std::move(job)),
      attempt_(job_.status().attempt()),
      offset_(offset) {}

LogFollow::~LogFollow() { Unsubscribe(); }

std::shared_ptr<LogFollow> LogFollow::Start(LogStore* logs, JobWatch* watch, runtime::EventLoop* pump, v1::Job job,
                                            int64_t offset, bool follow, Send send, Done done, int replica) {
  std::shared_ptr<LogFollow> f(
      new LogFollow(logs, watch, pump, std::move(job), offset, follow, std::move(send), std::move(done), replica));
  uint64_t log_watch = 0, job_watch = 0;
  if (follow) {
    std::weak_ptr<LogFollow> weak = f;
    log_watch = logs->Watch(f->id_, [weak] {
      if (auto self = weak.lock()) self->Wake(nullptr);
    });
    if (watch != nullptr) {
      JobWatch::Filter filter;
      filter.ids = {f->id_};
      job_watch = watch->Add(filter, [weak](const v1::Job& j) {
        if (auto self = weak.lock()) self->Wake(&j);
      });
    }
  }
  MutexLock lock(&f->mu_);
  f->log_watch_ = log_watch;
  f->job_watch_ = job_watch;
  // Subscribed before the first read: nothing written in between is missed.
  f->ScheduleLocked();
  return f;
}

void LogFollow::Update(const v1::Job& job) { Wake(&job); }

void LogFollow::Wake(const v1::Job* changed) {
  MutexLock lock(&mu_);
  if (finished_) return;
  if (changed != nullptr) {
    // A late read never goes back to an older attempt, nor undoes an end.
    const v1::JobStatus& now = job_.status();
    const v1::JobStatus& next = changed->status();
    bool older = next.attempt() < now.attempt() ||
                 (next.attempt() == now.attempt() && rpc::IsTerminal(now.state()) && !rpc::IsTerminal(next.state()));
    if (!older) job_ = *changed;
  }
  woken_ = true;
  ScheduleLocked();
}

void LogFollow::Sent() {
  MutexLock lock(&mu_);
  in_flight_ = false;
  woken_ = true;  // the chunk may not have been the last one
  ScheduleLocked();
}

void LogFollow::Cancel() {
  {
    MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Unsubscribe();
}

void LogFollow::ScheduleLocked() {
  if (finished_ || scheduled_ || in_flight_ || !woken_) return;
  scheduled_ = true;
  if (!pump_->Post([self = shared_from_this()] { self->Pump(); })) {
    scheduled_ = false;  // the server is stopping
  }
}

void LogFollow::Pump() {
  for (;;) {
    MutexLock lock(&mu_);
    if (finished_) return;
    woken_ = false;
    // The state before the bytes: output a job wrote before it ended reached
    // the log store before its end did.
    bool ended = rpc::IsTerminal(job_.status().state());
    if (job_.status().attempt() != attempt_) {
      // Followed into a new attempt: its output, from its start.
      attempt_ = job_.status().attempt();
      offset_ = 0;
    }
    std::string log_id = LogStore::LogId(id_, attempt_, replica_);
    int64_t offset = offset_;
    lock.Unlock();

    auto data = logs_->Read(log_id, offset, kLogChunkBytes);
    if (!data.ok()) return Finish(data.status());
    if (!data->empty()) {
      v1::LogChunk chunk;
      chunk.set_offset(offset);
      chunk.set_data(std::move(*data));
      lock.Lock();
      if (finished_) return;
      offset_ = offset + static_cast<int64_t>(chunk.data().size());
      in_flight_ = true;
      scheduled_ = false;
      lock.Unlock();
      if (!send_(shared_from_this(), std::move(chunk))) Finish(Status::Ok());  // the client is gone
      return;
    }
    if (ended || !follow_) return Finish(Status::Ok());
    lock.Lock();
    if (!woken_) {
      scheduled_ = false;  // the next write or change of the job wakes it
      return;
    }
  }
}

void LogFollow::Finish(const Status& s) {
  {
    MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  Unsubscribe();
  done_(s);
}

void LogFollow::Unsubscribe() {
  uint64_t log_watch = 0, job_watch = 0;
  {
    MutexLock lock(&mu_);
    std::swap(log_watch, log_watch_);
    std::swap(job_watch, job_watch_);
  }
  if (log_watch != 0) logs_->Unwatch(log_watch);
  if (job_watch != 0 && watch_ != nullptr) watch_->Remove(job_watch);
}

}  // namespace drover::server
