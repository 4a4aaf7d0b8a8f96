#pragma once
// Server-sent event streams of the REST API on the HTTP server's async
// streams: no thread per stream, however many dashboards and waiters are
// open.
//
//   GET /api/v1/events    "fleet" and "scheduler" at once and then every
//                         tick (2 s, the agents' heartbeat period): one
//                         ticker thread computes them once per tenant view
//                         and writes to every stream.
//   GET /api/v1/watch?ids=j-1,j-2&array=a-3
//                         "job" with each committed change of the named jobs
//                         (or the array's tasks), pushed by the control loop;
//                         then "end" once all of them ended. With neither,
//                         every job the caller may see, until it goes away.
//
// Thread-safety: thread-safe.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "drover/auth/authority.h"
#include "drover/common/mutex.h"
#include "drover/http/server.h"
#include "drover/server/api_service.h"

namespace drover::server {

class RestStreams {
 public:
  explicit RestStreams(ApiService* api, std::chrono::milliseconds tick = std::chrono::seconds(2));
  ~RestStreams();  // ends every events stream

  http::Response Events(const auth::Principal& who);
  http::Response Watch(const auth::Principal& who, const http::Request& req);
  // The answer to `POST /api/v1/jobs?watch=all|ended` once the jobs are in:
  // 201, an event stream of "submitted" (the submit's answer), then "job"
  // for each change of the submitted jobs (`only_ended`: for each end),
  // then "end" once all have ended. One connection for `submit --wait`.
  http::Response SubmitWatch(const auth::Principal& who, const v1::SubmitJobResponse& submitted, bool only_ended);

  // One "fleet" + "scheduler" event pair as the stream sends it.
  static std::string FleetEvent(ApiService* api, const auth::Principal& who);

 private:
  struct Subscriber {
    auth::Principal who;
    std::shared_ptr<http::StreamSink> sink;
    std::shared_ptr<std::atomic<bool>> closed;
  };
  void Run();
  http::Response WatchStream(const auth::Principal& who, const v1::WatchJobsRequest& wr, bool only_ended,
                             std::string first, int status);

  ApiService* api_;
  const std::chrono::milliseconds tick_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ = false;
  std::vector<Subscriber> subscribers_ DROVER_GUARDED_BY(mu_);
  std::thread ticker_;  // runs while there are subscribers
};

}  // namespace drover::server
