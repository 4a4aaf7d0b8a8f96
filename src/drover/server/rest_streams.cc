#include "drover/server/rest_streams.h"
#include "drover/common/mutex.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include "drover/rpc/convert.h"
#include "drover/rpc/json.h"

namespace drover::server {
namespace {

std::string Json(const google::protobuf::Message& m) { return rpc::ToJson(m); }

http::Response EventStream() {
  return http::Response{200, "text/event-stream", {}, {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}}};
}

// What one watch stream owes its client. The control loop may push before
// the HTTP server hands over the sink: events wait here until it does.
class WatchState : public std::enable_shared_from_this<WatchState> {
 public:
  // `only_ended`: a job's event only once it has ended. `first`: sent
  // before any (the answer to the submit that began the watch).
  WatchState(ApiService* api, bool bounded, bool only_ended, std::string first)
      : api_(api), bounded_(bounded), only_ended_(only_ended) {
    if (!first.empty()) backlog_.push_back(std::move(first));
  }

  void set_subscription(uint64_t id) {
    MutexLock lock(&mu_);
    subscription_ = id;
  }
  // The jobs' state when the watch began: what the stream waits to end.
  void Begin(const std::vector<v1::Job>& current) {
    bool finished = false;
    {
      MutexLock lock(&mu_);
      for (const v1::Job& j : current) {
        if (!ended_.contains(j.id())) remaining_.insert(j.id());
      }
      ready_ = true;
      for (const v1::Job& j : current) finished = EmitLocked(j) || finished;
    }
    if (finished) Unsubscribe();
  }
  void Push(const v1::Job& job) {
    bool finished = false;
    {
      MutexLock lock(&mu_);
      finished = EmitLocked(job);
    }
    if (finished) Unsubscribe();
  }
  void Attach(std::shared_ptr<http::StreamSink> sink) {
    MutexLock lock(&mu_);
    sink_ = std::move(sink);
    for (std::string& chunk : backlog_) {
      if (!sink_->Write(std::move(chunk))) done_ = true;
    }
    backlog_.clear();
    if (done_) {
      sink_->Close();
      lock.Unlock();
      Unsubscribe();
      return;
    }
    lock.Unlock();
    sink_->OnClosed([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->Unsubscribe();
    });
  }
  // The watch could not begin: the stream says why and ends.
  void Fail(std::string why) {
    std::replace(why.begin(), why.end(), '\n', ' ');  // one data line
    MutexLock lock(&mu_);
    backlog_.push_back("event: error\ndata: " + why + "\n\n");
    done_ = true;
  }
  // The stream will never be sent (the client left first): stop the pushes.
  void Abandon() {
    {
      MutexLock lock(&mu_);
      if (sink_) return;
      done_ = true;
    }
    Unsubscribe();
  }
  void Unsubscribe() {
    uint64_t id = 0;
    {
      MutexLock lock(&mu_);
      std::swap(id, subscription_);
    }
    api_->Unwatch(id);
  }

 private:
  // Sends (or keeps) the job's event; true when the stream just finished,
  // so that the caller ends the subscription (outside the lock).
  bool EmitLocked(const v1::Job& job) {
    if (done_) return false;
    bool ended = rpc::IsTerminal(job.status().state());
    if (!ended && (only_ended_ || ended_.contains(job.id()))) return false;  // a late read never undoes an end
    std::string chunk = "event: job\ndata: " + Json(job) + "\n\n";
    if (ended && ended_.insert(job.id()).second) remaining_.erase(job.id());
    bool finished = bounded_ && ready_ && remaining_.empty();
    if (finished) {
      chunk += "event: end\ndata: {}\n\n";
      done_ = true;
    }
    if (!sink_) {
      backlog_.push_back(std::move(chunk));
      return finished;
    }
    if (!sink_->Write(std::move(chunk))) done_ = true;  // OnClosed unsubscribes
    if (finished) sink_->Close();
    return finished;
  }

  ApiService* api_;
  const bool bounded_;
  const bool only_ended_;
  Mutex mu_;
  uint64_t subscription_ = 0;
  bool ready_ = false, done_ = false;
  std::set<std::string> remaining_, ended_;
  std::vector<std::string> backlog_;
  std::shared_ptr<http::StreamSink> sink_;
};

}  // namespace

RestStreams::RestStreams(ApiService* api, std::chrono::milliseconds tick) : api_(api), tick_(tick) {
  ticker_ = std::thread([this] { Run(); });
}

RestStreams::~RestStreams() {
  std::vector<Subscriber> subs;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    subs.swap(subscribers_);
  }
  cv_.SignalAll();
  ticker_.join();
  for (Subscriber& s : subs) s.sink->Close();
}

std::string RestStreams::FleetEvent(ApiService* api, const auth::Principal& who) {
  auto fleet = api->Fleet(who);
  auto stats = api->SchedulerStats(who);
  if (!fleet.ok() || !stats.ok()) {
    return "event: error\ndata: " + (fleet.ok() ? stats.status() : fleet.status()).message() + "\n\n";
  }
  return "event: fleet\ndata: " + Json(*fleet) + "\n\nevent: scheduler\ndata: " + Json(*stats) + "\n\n";
}

http::Response RestStreams::Events(const auth::Principal& who) {
  http::Response r = EventStream();
  r.async_stream = [this, who](std::shared_ptr<http::StreamSink> sink) {
    auto closed = std::make_shared<std::atomic<bool>>(false);
    sink->OnClosed([closed] { closed->store(true); });
    // The first pair at once, on this handler thread; then the ticker's.
    if (!sink->Write(FleetEvent(api_, who))) return;
    MutexLock lock(&mu_);
    if (stopping_) {
      sink->Close();
      return;
    }
    subscribers_.push_back({who, std::move(sink), std::move(closed)});
    cv_.SignalAll();
  };
  return r;
}

void RestStreams::Run() {
  MutexLock lock(&mu_);
  for (;;) {
    cv_.Wait(&mu_, [&]() DROVER_REQUIRES(mu_) { return stopping_ || !subscribers_.empty(); });
    if (stopping_) return;
    cv_.WaitFor(&mu_, tick_, [&]() DROVER_REQUIRES(mu_) { return stopping_; });
    if (stopping_) return;
    std::vector<Subscriber> subs = subscribers_;
    lock.Unlock();
    // Computed once per view (an admin sees every tenant's jobs, a tenant its
    // own), however many streams share it.
    std::map<std::string, std::string> by_view;
    std::set<const http::StreamSink*> gone;
    for (const Subscriber& s : subs) {
      std::string view = s.who.IsAdmin() ? "" : "tenant:" + s.who.tenant;
      auto it = by_view.find(view);
      if (it == by_view.end()) it = by_view.emplace(view, FleetEvent(api_, s.who)).first;
      if (s.closed->load() || !s.sink->Write(it->second)) gone.insert(s.sink.get());
    }
    lock.Lock();
    std::erase_if(subscribers_, [&](const Subscriber& s) { return gone.contains(s.sink.get()); });
  }
}

http::Response RestStreams::Watch(const auth::Principal& who, const http::Request& req) {
  v1::WatchJobsRequest wr;
  if (auto it = req.query.find("ids"); it != req.query.end()) {
    std::string_view ids = it->second;
    size_t i = 0;
    while (i <= ids.size()) {
      size_t j = std::min(ids.find(',', i), ids.size());
      if (j > i) wr.add_ids(std::string(ids.substr(i, j - i)));
      i = j + 1;
    }
  }
  if (auto it = req.query.find("array"); it != req.query.end()) wr.set_array_id(it->second);
  return WatchStream(who, wr, /*only_ended=*/false, "", 200);
}

http::Response RestStreams::SubmitWatch(const auth::Principal& who, const v1::SubmitJobResponse& submitted,
                                        bool only_ended) {
  v1::WatchJobsRequest wr;
  if (submitted.array_id().empty()) {
    wr.add_ids(submitted.job().id());
  } else {
    wr.set_array_id(submitted.array_id());
  }
  return WatchStream(who, wr, only_ended, "event: submitted\ndata: " + Json(submitted) + "\n\n", 201);
}

http::Response RestStreams::WatchStream(const auth::Principal& who, const v1::WatchJobsRequest& wr, bool only_ended,
                                        std::string first, int status) {
  bool bounded = wr.ids_size() > 0 || !wr.array_id().empty();
  const bool submitted = !first.empty();
  auto state = std::make_shared<WatchState>(api_, bounded, only_ended, std::move(first));
  uint64_t subscription = 0;
  // Subscribed here, before the 200 goes out, so that a bad id is a 404.
  auto current = api_->Watch(
      who, wr, [state](const v1::Job& job) { state->Push(job); }, &subscription);
  if (!current.ok() && !submitted) return http::ErrorResponse(current.status());
  if (current.ok()) {
    state->set_subscription(subscription);
    state->Begin(*current);
  } else {
    state->Fail(current.status().message());  // the jobs are in: the answer says so, then why it cannot watch
  }
  // Abandons the watch if the server never hands over the sink.
  struct Guard {
    std::shared_ptr<WatchState> state;
    bool attached = false;
    ~Guard() {
      if (!attached && state) state->Abandon();
    }
  };
  auto guard = std::make_shared<Guard>();  // made in place: a moved-from temporary would abandon it
  guard->state = state;
  http::Response r = EventStream();
  r.status = status;
  r.async_stream = [guard](std::shared_ptr<http::StreamSink> sink) {
    guard->attached = true;
    guard->state->Attach(std::move(sink));
  };
  return r;
}

}  // namespace drover::server
