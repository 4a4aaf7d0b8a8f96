// `drover top`: nodes and GPUs, refreshed every --interval, full screen.
//
// The terminal is the one piece of state here: while the view runs, stdout
// shows the alternate screen with the cursor hidden and stdin reads keys
// one at a time without echo. Terminal restores all of it on every way out
// (q, Ctrl-C, SIGTERM, SIGHUP, an error). Signals only write a byte to a
// self-pipe, which the loop polls beside stdin. Not thread-safe: runs on
// the CLI's one thread.

#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <iostream>

#include "drover/cli/client.h"
#include "drover/cli/commands.h"
#include "drover/cli/top_view.h"
#include "drover/common/config.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::cli {
namespace {

constexpr int64_t kMinIntervalMs = 100;
constexpr int64_t kMaxIntervalMs = 3600 * 1000;

// Written by the signal handler: the self-pipe and what arrived.
int g_wake_fd = -1;
volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_resized = 0;

void OnSignal(int sig) {
  int saved = errno;
  if (sig == SIGWINCH) {
    g_resized = 1;
  } else {
    g_stop = 1;
  }
  char byte = 0;
  if (g_wake_fd >= 0) (void)!write(g_wake_fd, &byte, 1);
  errno = saved;
}

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone; nothing left to show it on
    done += static_cast<size_t>(n);
  }
}

// The terminal while the live view runs (see the file comment).
class Terminal {
 public:
  Terminal() {
    if (pipe2(wake_, O_NONBLOCK | O_CLOEXEC) == 0) g_wake_fd = wake_[1];
    g_stop = 0;
    g_resized = 0;
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: poll() returns on a signal
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &old_[i]);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: Ctrl-C is SIGINT
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      restore_termios_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    WriteAll(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");  // alternate screen, hide cursor, clear
  }
  ~Terminal() {
    WriteAll(STDOUT_FILENO, "\x1b[0m\x1b[?25h\x1b[?1049l");  // show cursor, main screen
    if (restore_termios_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_fd = -1;
    for (int fd : wake_) {
      if (fd >= 0) close(fd);
    }
  }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  int wake_fd() const { return wake_[0]; }

  // Rows and columns; 0 when unknown.
  static std::pair<size_t, size_t> Size() {
    winsize ws = {};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) return {0, 0};
    return {ws.ws_row, ws.ws_col};
  }

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
  int wake_[2] = {-1, -1};
  std::array<struct sigaction, kSignals.size()> old_{};
  termios saved_{};
  bool restore_termios_ = false;
};

const char* StyleOf(TopLine::Kind k) {
  switch (k) {
    case TopLine::Kind::kTitle:
    case TopLine::Kind::kNode: return "\x1b[1m";
    case TopLine::Kind::kColumns: return "\x1b[7m";
    case TopLine::Kind::kError: return "\x1b[1;31m";
    case TopLine::Kind::kUnhealthyGpu: return "\x1b[31m";
    default: return "";
  }
}

// A frame for the terminal: cursor home, each line with its colour and
// the rest of its row erased, then everything below erased.
std::string Escaped(const std::vector<TopLine>& lines) {
  std::string out = "\x1b[H";
  for (size_t i = 0; i < lines.size(); ++i) {
    const char* style = StyleOf(lines[i].kind);
    out += *style ? std::string(style) + lines[i].text + "\x1b[0m" : lines[i].text;
    out += "\x1b[K";
    if (i + 1 < lines.size()) out += "\n";
  }
  return out + "\x1b[J";
}

// Lists nodes into `s` (keeping the previous nodes when that fails) and
// counts running and pending jobs. Returns the status of the node list.
grpc::Status Refresh(const Common& c, v1::NodeService::Stub* nodes, v1::JobService::Stub* jobs,
                     std::chrono::milliseconds cap, TopSnapshot* s) {
  v1::ListNodesResponse resp;
  auto ctx = Context(c, cap);
  grpc::Status st = nodes->List(ctx.get(), v1::ListNodesRequest(), &resp);
  if (st.ok()) {
    s->nodes = std::move(resp);
    s->error.clear();
  } else {
    s->error = st.error_code() == grpc::StatusCode::UNAVAILABLE
                   ? fmt::format("cannot reach the drover server at {} ({})", c.addr, st.error_message())
                   : st.error_message();
  }
  auto count = [&](v1::JobState state) -> std::optional<int> {
    v1::ListJobsRequest req;
    req.set_state(state);
    v1::ListJobsResponse list;
    auto jctx = Context(c, cap);
    if (!jobs->List(jctx.get(), req, &list).ok()) return std::nullopt;
    return list.jobs_size();
  };
  s->jobs_running = st.ok() ? count(v1::JOB_STATE_RUNNING) : std::nullopt;
  s->jobs_pending = st.ok() ? count(v1::JOB_STATE_PENDING) : std::nullopt;
  return st;
}

struct TopArgs {
  std::string interval = "2s";
  bool once = false;
};

int Top(const TopArgs& a, const Common& c) {
  auto interval_ms = ParseDurationMs(a.interval);
  if (!interval_ms.ok()) return Usage("--interval: " + interval_ms.status().message());
  if (*interval_ms < kMinIntervalMs || *interval_ms > kMaxIntervalMs) {
    return Usage(fmt::format("--interval {} is outside 100ms..1h", a.interval));
  }
  auto channel = Channel(c);
  auto nodes = v1::NodeService::NewStub(channel);
  auto jobs = v1::JobService::NewStub(channel);
  TopFrameOptions o;
  o.addr = c.addr;
  o.interval_ms = *interval_ms;
  TopSnapshot snap;

  const bool tty = isatty(STDOUT_FILENO) == 1;
  if (a.once || !tty) {
    grpc::Status st = Refresh(c, nodes.get(), jobs.get(), std::chrono::milliseconds::max(), &snap);
    if (!st.ok()) return Fail(st, c);
    if (tty) o.width = Terminal::Size().second;
    std::cout << RenderTop(snap, o);
    return 0;
  }

  // Each call waits at most an interval (but 1s at least), so that q and
  // Ctrl-C are answered soon even when the server hangs.
  const auto cap = std::max(std::chrono::milliseconds(*interval_ms), std::chrono::milliseconds(1000));
  Terminal term;
  o.interactive = true;
  bool read_keys = isatty(STDIN_FILENO) == 1;
  auto draw = [&] {
    auto [rows, cols] = Terminal::Size();
    o.height = rows;
    o.width = cols;
    WriteAll(STDOUT_FILENO, Escaped(RenderTopLines(snap, o)));
  };
  for (;;) {
    (void)Refresh(c, nodes.get(), jobs.get(), cap, &snap);
    if (g_stop) return 0;
    draw();
    auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(*interval_ms);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      std::array<pollfd, 2> fds = {pollfd{term.wake_fd(), POLLIN, 0}, pollfd{read_keys ? STDIN_FILENO : -1, POLLIN, 0}};
      int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count(), 60'000)));
      if (n < 0 && errno != EINTR) return kExitFailure;
      if (fds[0].revents & POLLIN) {
        char buf[64];
        while (read(term.wake_fd(), buf, sizeof buf) > 0) {
        }
      }
      if (g_stop) return 0;
      if (g_resized) {
        g_resized = 0;
        WriteAll(STDOUT_FILENO, "\x1b[2J");
        draw();
      }
      if (n > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[64];
        ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
        if (got <= 0) {
          if (got == 0 || errno != EINTR) read_keys = false;  // stdin closed: Ctrl-C still quits
          continue;
        }
        for (ssize_t i = 0; i < got; ++i) {
          if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == '\x03') return 0;
        }
      }
    }
  }
}

}  // namespace

void AddTopCommand(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common) {
  auto args = std::make_shared<TopArgs>();
  CLI::App* top = app.add_subcommand("top", "live view of nodes and GPUs (q or Ctrl-C quits)");
  AddCommon(top, common.get(), false);
  top->add_option("--interval", args->interval, "time between refreshes, e.g. 2s or 500ms")->capture_default_str();
  top->add_flag("--once", args->once, "print one frame without escapes and exit (also when stdout is not a terminal)");
  top->callback(run([args, common] { return Top(*args, *common); }));
}

}  // namespace drover::cli
