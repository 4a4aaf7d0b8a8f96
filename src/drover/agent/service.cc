#include "drover/agent/service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "drover/common/files.h"
#include "drover/common/mutex.h"
#include "drover/rpc/convert.h"

namespace drover::agent {
namespace {

using std::chrono::milliseconds;

// Defaults of common.proto.
constexpr milliseconds kReadinessPeriod{1000};
constexpr milliseconds kLivenessPeriod{5000};
constexpr milliseconds kProbeTimeout{1000};
constexpr int kFailureThreshold = 3;
constexpr milliseconds kRestartBackoff{1000};
constexpr milliseconds kMaxRestartBackoff{60000};
constexpr milliseconds kReadyTimeout{600000};
// The longest a probe may wait or be apart: a day (a larger value is a typo).
constexpr int64_t kMaxProbeMs = 24 * 3600 * 1000;
constexpr int kMaxFailureThreshold = 1000;
// What of an HTTP answer a probe reads: the status line is all it needs.
constexpr size_t kMaxProbeRead = 4096;

Result<milliseconds> Ms(const char* field, int32_t value, milliseconds fallback) {
  if (value < 0) return InvalidArgument(fmt::format("service: {} is {}; it must not be negative", field, value));
  if (value > kMaxProbeMs) {
    return InvalidArgument(fmt::format("service: {} is {} ms; at most {} (a day)", field, value, kMaxProbeMs));
  }
  return value == 0 ? fallback : milliseconds(value);
}

Result<ProbeSettings> ProbeOf(const char* which, const v1::Probe& p, milliseconds period) {
  ProbeSettings s;
  const std::string& path = p.http_path();
  if (!path.empty()) {
    if (p.tcp()) {
      return InvalidArgument(fmt::format("service: the {} probe has both http_path and tcp; choose one", which));
    }
    if (path.size() > kMaxProbePath) {
      return InvalidArgument(
          fmt::format("service: the {} probe's http_path is {} bytes; at most {}", which, path.size(), kMaxProbePath));
    }
    if (path[0] != '/') {
      return InvalidArgument(fmt::format("service: the {} probe's http_path '{}' must start with '/'", which, path));
    }
    for (unsigned char c : path) {
      if (c <= 0x20 || c >= 0x7f) {
        return InvalidArgument(fmt::format(
            "service: the {} probe's http_path must be printable ASCII without spaces (byte 0x{:02x})", which, c));
      }
    }
  }
  s.http_path = path;
  s.tcp = p.tcp();
  std::string f = fmt::format("{}.initial_delay_ms", which);
  DROVER_ASSIGN_OR_RETURN(s.initial_delay, Ms(f.c_str(), p.initial_delay_ms(), milliseconds(0)));
  f = fmt::format("{}.period_ms", which);
  DROVER_ASSIGN_OR_RETURN(s.period, Ms(f.c_str(), p.period_ms(), period));
  f = fmt::format("{}.timeout_ms", which);
  DROVER_ASSIGN_OR_RETURN(s.timeout, Ms(f.c_str(), p.timeout_ms(), kProbeTimeout));
  if (p.failure_threshold() < 0 || p.failure_threshold() > kMaxFailureThreshold) {
    return InvalidArgument(fmt::format("service: {}.failure_threshold is {}; it must be between 0 (default {}) and {}",
                                       which, p.failure_threshold(), kFailureThreshold, kMaxFailureThreshold));
  }
  s.failure_threshold = p.failure_threshold() == 0 ? kFailureThreshold : p.failure_threshold();
  return s;
}

std::string ErrnoText(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

// An fd closed when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, kMaxProbeMs));
}

// Waits for `events` on `fd` until `deadline`; false on a timeout.
bool WaitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    struct pollfd p {
      fd, events, 0
    };
    int r = ::poll(&p, 1, RemainingMs(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // the next call says what is wrong
  }
}

}  // namespace

Result<ServiceSettings> ServiceSettingsOf(const v1::ServiceSpec& spec) {
  ServiceSettings s;
  DROVER_ASSIGN_OR_RETURN(s.readiness, ProbeOf("readiness", spec.readiness(), kReadinessPeriod));
  DROVER_ASSIGN_OR_RETURN(s.liveness, ProbeOf("liveness", spec.liveness(), kLivenessPeriod));
  s.model = spec.model();
  for (unsigned char c : s.model) {
    if (c < 0x20 || c == 0x7f) return InvalidArgument("service: the model name has a control character");
  }
  DROVER_ASSIGN_OR_RETURN(s.restart_backoff, Ms("restart_backoff_ms", spec.restart_backoff_ms(), kRestartBackoff));
  DROVER_ASSIGN_OR_RETURN(s.max_restart_backoff,
                          Ms("max_restart_backoff_ms", spec.max_restart_backoff_ms(), kMaxRestartBackoff));
  if (spec.max_restart_backoff_ms() == 0) s.max_restart_backoff = std::max(s.max_restart_backoff, s.restart_backoff);
  if (s.max_restart_backoff < s.restart_backoff) {
    return InvalidArgument(fmt::format("service: max_restart_backoff_ms ({}) is below restart_backoff_ms ({})",
                                       s.max_restart_backoff.count(), s.restart_backoff.count()));
  }
  DROVER_ASSIGN_OR_RETURN(s.ready_timeout, Ms("ready_timeout_ms", spec.ready_timeout_ms(), kReadyTimeout));
  DROVER_RETURN_IF_ERROR(rpc::ValidateEngineKey(spec.api_key()));
  s.api_key = spec.api_key();
  s.readiness.bearer = s.api_key;
  s.liveness.bearer = s.api_key;
  return s;
}

milliseconds RestartDelay(const ServiceSettings& s, int consecutive) {
  milliseconds d = s.restart_backoff;
  for (int i = 1; i < consecutive && d < s.max_restart_backoff; ++i) d *= 2;
  return std::min(d, s.max_restart_backoff);
}

std::string FormatDelay(milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{}s", d.count() / 1000);
  std::string s = fmt::format("{:.3f}", static_cast<double>(d.count()) / 1000.0);
  while (s.back() == '0') s.pop_back();
  return s + "s";
}

Status CheckProbe(const ProbeSettings& probe, int port) {
  if (!probe.Checks()) return Status::Ok();
  const auto deadline = std::chrono::steady_clock::now() + probe.timeout;
  const std::string timed_out = fmt::format("timed out after {} ms", probe.timeout.count());
  Fd s{::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return Unavailable("cannot make a socket: " + ErrnoText(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return Unavailable(ErrnoText(errno));
    if (!WaitFor(s.fd, POLLOUT, deadline)) return Unavailable(timed_out);
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return Unavailable(ErrnoText(err));
  }
  if (probe.tcp) return Status::Ok();
  const std::string auth = probe.bearer.empty() ? "" : "Authorization: Bearer " + probe.bearer + "\r\n";
  const std::string req = fmt::format(
      "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUser-Agent: drover-probe\r\nAccept: */*\r\n{}Connection: "
      "close\r\n\r\n",
      probe.http_path, port, auth);
  size_t sent = 0;
  while (sent < req.size()) {
    ssize_t n = ::send(s.fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFor(s.fd, POLLOUT, deadline)) return Unavailable(timed_out);
    } else {
      return Unavailable("cannot send the request: " + ErrnoText(errno));
    }
  }
  std::string got;
  while (got.find("\r\n") == std::string::npos && got.size() < kMaxProbeRead) {
    char buf[1024];
    ssize_t n = ::recv(s.fd, buf, sizeof buf, 0);
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!WaitFor(s.fd, POLLIN, deadline)) return Unavailable(timed_out);
    } else {
      return Unavailable("cannot read the answer: " + ErrnoText(errno));
    }
  }
  if (got.empty()) return Unavailable("the connection closed before an answer");
  // "HTTP/1.1 200 OK"
  int code = 0;
  if (got.starts_with("HTTP/1.") && got.size() >= 12 && got[8] == ' ') {
    auto [ptr, ec] = std::from_chars(got.data() + 9, got.data() + 12, code);
    if (ec != std::errc() || ptr != got.data() + 12) code = 0;
  }
  if (code < 100 || code > 599) return Unavailable("not an HTTP answer");
  if (code >= 200 && code < 400) return Status::Ok();
  return Unavailable(fmt::format("http {}", code));
}

Result<std::pair<int, int>> ParsePortRange(std::string_view range) {
  auto dash = range.find('-');
  auto num = [](std::string_view s, int* out) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return !s.empty() && ec == std::errc() && ptr == s.data() + s.size();
  };
  int first = 0, last = 0;
  if (dash == std::string_view::npos || !num(range.substr(0, dash), &first) || !num(range.substr(dash + 1), &last) ||
      first < 1 || last > 65535 || first > last) {
    return InvalidArgument(fmt::format("port range '{}' must be FIRST-LAST with 1 <= FIRST <= LAST <= 65535", range));
  }
  return std::pair{first, last};
}

bool PortBindable(int port) {
  Fd s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return false;
  int one = 1;
  (void)::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  return ::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

namespace {

// The ports every PortAllocator of this process holds.
struct ProcessPorts {
  Mutex mu;
  std::set<int> held DROVER_GUARDED_BY(mu);
};
ProcessPorts& Ports() {
  static ProcessPorts* p = new ProcessPorts;  // never destroyed: allocators may outlive statics
  return *p;
}

}  // namespace

PortAllocator::~PortAllocator() {
  ProcessPorts& ports = Ports();
  MutexLock lock(&ports.mu);
  for (int p : held_) ports.held.erase(p);
}

void PortAllocator::SetRange(int first, int last) {
  first_ = first;
  last_ = last;
  next_ = first;
}

void PortAllocator::Hold(int port) {
  held_.insert(port);
  ProcessPorts& ports = Ports();
  MutexLock lock(&ports.mu);
  ports.held.insert(port);
}

void PortAllocator::Release(int port) {
  if (held_.erase(port) == 0) return;
  ProcessPorts& ports = Ports();
  MutexLock lock(&ports.mu);
  ports.held.erase(port);
}

bool PortAllocator::TryTake(int port) {
  if (held_.contains(port)) return false;
  ProcessPorts& ports = Ports();
  {
    MutexLock lock(&ports.mu);
    if (!ports.held.insert(port).second) return false;  // another agent of this process has it
  }
  if (!PortBindable(port)) {
    MutexLock lock(&ports.mu);
    ports.held.erase(port);
    return false;
  }
  held_.insert(port);
  return true;
}

Result<int> PortAllocator::Allocate() {
  if (first_ > 0) {
    const int n = last_ - first_ + 1;
    for (int i = 0; i < n; ++i) {
      int port = next_;
      next_ = next_ >= last_ ? first_ : next_ + 1;
      if (TryTake(port)) return port;
    }
    return ResourceExhausted(
        fmt::format("no free service port in {}-{} ({} held by this node's replicas)", first_, last_, held_.size()));
  }
  // The kernel's pick: a free ephemeral port, checked again once released.
  for (int attempt = 0; attempt < 16; ++attempt) {
    Fd s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (s.fd < 0) return Unavailable("cannot make a socket: " + ErrnoText(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof addr;
    if (::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return Unavailable("cannot find a free port: " + ErrnoText(errno));
    }
    int port = ntohs(addr.sin_port);
    ::close(s.fd);
    s.fd = -1;
    if (TryTake(port)) return port;
  }
  return ResourceExhausted("no free service port: the kernel's picks were all taken");
}

std::string DefaultAdvertiseHost(const std::string& gossip_listen) {
  auto colon = gossip_listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return "127.0.0.1";
  std::string host = gossip_listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "*") return "127.0.0.1";
  return host;
}

std::string EndpointOf(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

Status WriteServiceFile(const std::string& job_dir, const ServiceFile& f) {
  std::string spec;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(f.spec, &spec, o); !s.ok()) {
    return Internal(fmt::format("cannot encode the service spec: {}", s.ToString()));
  }
  nlohmann::json j = {{"port", f.port}, {"restarts", f.restarts}, {"spec", nlohmann::json::parse(spec)}};
  // 0600: the spec holds the replica's secret (api_key).
  return WriteFileAtomic(job_dir + "/service.json", j.dump() + "\n", 0600, /*durable=*/false);
}

Result<std::optional<ServiceFile>> ReadServiceFile(const std::string& job_dir) {
  const std::string path = job_dir + "/service.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<ServiceFile>();
  DROVER_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("port") || !j["port"].is_number_integer() || !j.contains("restarts") ||
      !j["restarts"].is_number_integer() || !j.contains("spec") || !j["spec"].is_object()) {
    return InvalidArgument(fmt::format("'{}' is not a service record", path));
  }
  ServiceFile f;
  f.port = j["port"].get<int>();
  f.restarts = j["restarts"].get<int>();
  if (f.port < 1 || f.port > 65535 || f.restarts < 0) {
    return InvalidArgument(fmt::format("'{}' names port {} and {} restarts", path, f.port, f.restarts));
  }
  if (auto s = google::protobuf::util::JsonStringToMessage(j["spec"].dump(), &f.spec); !s.ok()) {
    return InvalidArgument(fmt::format("'{}': {}", path, s.ToString()));
  }
  return std::optional<ServiceFile>(std::move(f));
}

// ---- ServiceReplica -----------------------------------------------------

ServiceReplica::ServiceReplica(ServiceSettings settings, int port, std::string endpoint, int restarts)
    : settings_(std::move(settings)), port_(port), endpoint_(std::move(endpoint)), restarts_(restarts) {}

void ServiceReplica::Started(ServiceTime now) {
  ++generation_;
  running_ = true;
  ready_ = false;
  been_ready_ = false;
  ready_since_.reset();
  started_at_ = now;
  readiness_failures_ = 0;
  liveness_failures_ = 0;
  kill_reason_.clear();
  reason_ = NotReadyYet("waiting for the readiness probe", now);
}

std::string ServiceReplica::NotReadyYet(const std::string& why, ServiceTime now) const {
  if (now - started_at_ >= settings_.ready_timeout) {
    return fmt::format("not ready {} after its start (ready timeout): {}", FormatDelay(settings_.ready_timeout), why);
  }
  return why;
}

void ServiceReplica::Readiness(const Status& result, ServiceTime now) {
  if (!running_ || stopping_) return;
  if (result.ok()) {
    readiness_failures_ = 0;
    if (!ready_) ready_since_ = now;
    ready_ = true;
    been_ready_ = true;
    reason_.clear();
    return;
  }
  ++readiness_failures_;
  const std::string why = "readiness probe: " + result.message();
  if (!ready_) {
    reason_ = NotReadyYet(why, now);
    return;
  }
  if (readiness_failures_ < settings_.readiness.failure_threshold) return;
  ready_ = false;
  ready_since_.reset();
  reason_ = fmt::format("readiness probe failed {} times: {}", readiness_failures_, result.message());
}

bool ServiceReplica::Liveness(const Status& result, ServiceTime now) {
  (void)now;
  // Before its first readiness the process may still be loading (a model's
  // weights): its ready timeout, not liveness, speaks for it then.
  if (!running_ || stopping_ || !kill_reason_.empty() || !been_ready_) return false;
  if (result.ok()) {
    liveness_failures_ = 0;
    return false;
  }
  if (++liveness_failures_ < settings_.liveness.failure_threshold) return false;
  kill_reason_ = fmt::format("liveness probe failed {} times: {}", liveness_failures_, result.message());
  ready_ = false;
  ready_since_.reset();
  reason_ = "killing it: " + kill_reason_;
  return true;
}

void ServiceReplica::CheckReadyTimeout(ServiceTime now) {
  if (!running_ || stopping_ || ready_ || !kill_reason_.empty() || reason_.starts_with("not ready ")) return;
  if (now - started_at_ < settings_.ready_timeout) return;
  reason_ = NotReadyYet(reason_, now);
}

milliseconds ServiceReplica::Exited(const std::string& how, ServiceTime now) {
  ++generation_;
  // Ready long enough: this exit starts a new run of restarts.
  if (ready_since_ && now - *ready_since_ >= kBackoffResetAfter) consecutive_restarts_ = 0;
  ++consecutive_restarts_;
  const milliseconds delay = RestartDelay(settings_, consecutive_restarts_);
  reason_ = fmt::format("restarting in {}: {}", FormatDelay(delay), kill_reason_.empty() ? how : kill_reason_);
  running_ = false;
  ready_ = false;
  ready_since_.reset();
  kill_reason_.clear();
  return delay;
}

void ServiceReplica::Stopping() {
  stopping_ = true;
  ready_ = false;
  ready_since_.reset();
  reason_ = "stopping";
}

void ServiceReplica::Restarting() {
  ++restarts_;
  reason_ = "restarting";
}

}  // namespace drover::agent
