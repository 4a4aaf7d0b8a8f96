#pragma once
// RefusalDigest: which refusals go into the audit log one by one, and how
// many are summed up instead. A flood of refused calls (a wrong token
// retried, a viewer's script posting in a loop) must not fill the log with
// the same line: per key (who, by token or else by source address; the
// action; the status code) and per window of kWindow, the first kInFull
// refusals are written as they come, the rest are counted, and one summary
// entry with the count and the last message is written once the window
// has passed (at the key's next refusal, or at Flush, which the server
// runs every minute).
//
// Example, kInFull = 10: 500 refused submits by token t1 in one minute are
// 10 entries "jobs.submit  permission denied: ..." and, after the minute,
// one "jobs.submit  permission denied: 490 more refusals like this in 60s
// (summarised); the last: ...".
//
// Thread-safety: thread-safe (one mutex). Memory is bounded: past kMaxKeys
// open windows, a new key's refusals are counted under one key per action
// and code ("many callers").

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "drover/auth/token.h"
#include "drover/common/clock.h"
#include "drover/common/mutex.h"
#include "drover/common/status.h"

namespace drover::auth {

class RefusalDigest {
 public:
  static constexpr Duration kWindow = std::chrono::minutes(1);
  static constexpr int64_t kInFull = 10;
  static constexpr size_t kMaxKeys = 10'000;

  // One summary entry to write: `result` carries the count.
  struct Summary {
    Principal who;
    std::string action;
    Status result;
  };

  explicit RefusalDigest(const Clock* clock) : clock_(clock) {}

  // Whether this refusal is to be written in full. The summaries of this
  // key's window, when it had ended, are appended to `due`.
  bool Note(const Principal& who, const std::string& action, const Status& result, std::vector<Summary>* due)
      DROVER_EXCLUDES(mu_);
  // The summaries of every window that has ended (with `all`, of every
  // window), which are closed.
  std::vector<Summary> Flush(bool all = false) DROVER_EXCLUDES(mu_);

 private:
  struct Window {
    int64_t start_ns = 0;
    int64_t written = 0;
    int64_t left_out = 0;
    Principal who;
    std::string action;
    Status last;
  };
  static std::string KeyOf(const Principal& who, const std::string& action, Code code);
  static std::optional<Summary> Close(const Window& w);

  const Clock* clock_;
  Mutex mu_;
  std::unordered_map<std::string, Window> windows_ DROVER_GUARDED_BY(mu_);
};

}  // namespace drover::auth
