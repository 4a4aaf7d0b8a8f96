#include "drover/auth/refusal_digest.h"

#include <fmt/format.h>

#include <optional>

namespace drover::auth {

std::string RefusalDigest::KeyOf(const Principal& who, const std::string& action, Code code) {
  // A token is one caller whatever its address; without one (a failed
  // login), the address without its port is.
  std::string caller = !who.token_id.empty() ? "t:" + who.token_id : "s:" + who.source.substr(0, who.source.rfind(':'));
  return fmt::format("{}|{}|{}", caller, action, static_cast<int>(code));
}

std::optional<RefusalDigest::Summary> RefusalDigest::Close(const Window& w) {
  if (w.left_out == 0) return std::nullopt;
  auto secs = std::chrono::duration_cast<std::chrono::seconds>(kWindow).count();
  return Summary{w.who, w.action,
                 Status(w.last.code(), fmt::format("{} more refusals like this in {}s (summarised); the last: {}",
                                                   w.left_out, secs, w.last.message()))};
}

bool RefusalDigest::Note(const Principal& who, const std::string& action, const Status& result,
                         std::vector<Summary>* due) {
  const int64_t now = ToUnixNanos(clock_->Now());
  std::string key = KeyOf(who, action, result.code());
  MutexLock lock(&mu_);
  auto it = windows_.find(key);
  if (it == windows_.end() && windows_.size() >= kMaxKeys) {
    for (auto w = windows_.begin(); w != windows_.end();) {
      if (now - w->second.start_ns < kWindow.count()) {
        ++w;
        continue;
      }
      if (auto s = Close(w->second)) due->push_back(std::move(*s));
      w = windows_.erase(w);
    }
    if (windows_.size() >= kMaxKeys) key = fmt::format("*|{}|{}", action, static_cast<int>(result.code()));
    it = windows_.find(key);
  }
  if (it != windows_.end() && now - it->second.start_ns >= kWindow.count()) {
    if (auto s = Close(it->second)) due->push_back(std::move(*s));
    windows_.erase(it);
    it = windows_.end();
  }
  if (it == windows_.end()) {
    Window w;
    w.start_ns = now;
    w.who = who;
    if (key.starts_with("*|")) {
      w.who = Principal();
      w.who.name = "many callers";
    }
    w.action = action;
    it = windows_.emplace(std::move(key), std::move(w)).first;
  }
  Window& w = it->second;
  w.last = result;
  if (w.written < kInFull) {
    ++w.written;
    return true;
  }
  ++w.left_out;
  return false;
}

std::vector<RefusalDigest::Summary> RefusalDigest::Flush(bool all) {
  const int64_t now = ToUnixNanos(clock_->Now());
  std::vector<Summary> out;
  MutexLock lock(&mu_);
  for (auto w = windows_.begin(); w != windows_.end();) {
    if (!all && now - w->second.start_ns < kWindow.count()) {
      ++w;
      continue;
    }
    if (auto s = Close(w->second)) out.push_back(std::move(*s));
    w = windows_.erase(w);
  }
  return out;
}

}  // namespace drover::auth
