// gateway_bench: the gateway's own cost (issue 18), against a fast engine.
//
//   gateway_bench [--duration-s 3] [--rates 1000,10000] [--io-threads 1]
//                 [--connections 64] [--engine PATH] [--nginx /usr/sbin/nginx]
//                 [--no-nginx] [--floor PATH] [--no-floor] [--no-search]
//                 [--p99-goal-us 1000] [--search-repeats 3] [--search-duration-s 1]
//                 [--rounds 2] [--per-round] [--gateway-process]
//                 [--latencies FILE] [--pin G,E,P]
//
// --rates "" skips part 1. CPU per request (user + system time of the
// gateway's io threads, of nginx's workers, of the floor proxy, of the
// engine, from /proc) is printed with part 1: unlike latency, it says
// little about the machine's other load.
//
// One drover-test-engine process (non-streamed chat completions, 1 token);
// in front of it the gateway (in this process, its own io threads),
// Debian's nginx (a config generated into a temp dir: upstream keepalive,
// as many workers as the gateway has io threads) and the floor, hop_proxy
// (one thread that forwards bytes and finds message ends by Content-Length:
// the least any proxy adds on this machine). An open-loop generator
// (one thread, epoll, keep-alive connections) sends requests at a fixed
// rate; latency runs from each request's scheduled send time, so a
// stalled server is charged for the requests queued behind it (no
// coordinated omission).
//
// --gateway-process runs the gateway in a child process of its own (as
// nginx and the engine are) instead of beside the generator's thread.
//
// --pin G,E,P pins the generator's thread to CPU G, every thread of the
// engine to CPU E and every proxy's serving threads (the gateway's io
// threads, nginx's workers, the floor) to CPU P, to see what sharing the
// CPUs costs.
//
// 1. Added latency: at each rate, direct to the engine, then through the
//    floor, the gateway and nginx, each for --duration-s, --rounds times in
//    turn (--per-round prints each round's p99);
//    added = via - direct (p50, p99).
// 2. Throughput at a p99 goal: the highest rate (searched) at which the
//    p99 stays within --p99-goal-us, for each of them: the searches' steps
//    interleaved, each step --search-repeats runs of --search-duration-s
//    per target in turn, judged on the median of their p99s.
//
// Results: docs/gateway.md ("Performance").

#include <dirent.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "drover/gateway/gateway.h"
#include "gateway/engine_process.h"

namespace {

using drover::gateway::testing::ChildProcess;

int64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// --latencies FILE: every request as "port scheduled_ns latency_ns", the
// scheduled time from the run's start (to see when the slow ones happen).
FILE* g_latencies = nullptr;

struct Result {
  std::vector<int64_t> lat_ns;  // sorted
  int64_t unfinished = 0;
  int64_t errors = 0;
  double achieved_rps = 0;
  int64_t P(double q) const {
    if (lat_ns.empty()) return -1;
    size_t i = std::min(lat_ns.size() - 1, static_cast<size_t>(q * static_cast<double>(lat_ns.size())));
    return lat_ns[i];
  }
};

struct Client {
  int fd = -1;
  bool busy = false;
  int64_t sched = 0;
  std::string in;
};

// Whether `b` holds a whole response; its length in *n, status ok in *ok.
bool WholeResponse(const std::string& b, size_t* n, bool* ok) {
  size_t he = b.find("\r\n\r\n");
  if (he == std::string::npos) return false;
  *ok = b.compare(9, 3, "200") == 0;
  // Content-Length, case-insensitively.
  size_t pos = 0;
  while (pos < he) {
    size_t le = b.find("\r\n", pos);
    if (le - pos > 15 && strncasecmp(b.data() + pos, "content-length:", 15) == 0) {
      size_t len = std::strtoull(b.c_str() + pos + 15, nullptr, 10);
      if (b.size() < he + 4 + len) return false;
      *n = he + 4 + len;
      return true;
    }
    if (le - pos > 18 && strncasecmp(b.data() + pos, "transfer-encoding:", 18) == 0) {
      size_t end = b.find("\r\n0\r\n\r\n", he);
      if (end == std::string::npos) return false;
      *n = end + 7;
      return true;
    }
    pos = le + 2;
  }
  *n = he + 4;
  return true;
}

// Sends `rate` requests a second for `seconds` over `conns` keep-alive
// connections to 127.0.0.1:port.
Result Run(int port, double rate, double seconds, int conns, const std::string& request) {
  Result res;
  int ep = epoll_create1(0);
  std::vector<Client> clients(static_cast<size_t>(conns));
  std::vector<Client*> idle;
  for (auto& c : clients) {
    drover::gateway::testing::Conn tmp(port);
    if (!tmp.ok()) {
      std::fprintf(stderr, "gateway_bench: cannot connect to port %d\n", port);
      std::exit(1);
    }
    c.fd = ::dup(tmp.fd());
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &c;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    idle.push_back(&c);
  }
  std::deque<int64_t> pending;
  const int64_t t0 = Now() + 1'000'000;
  const int64_t interval = static_cast<int64_t>(1e9 / rate);
  const int64_t total = static_cast<int64_t>(rate * seconds);
  const int64_t end_by = t0 + static_cast<int64_t>(seconds * 1e9) + 2'000'000'000;  // drain 2 s at most
  int64_t issued = 0, done = 0;
  res.lat_ns.reserve(static_cast<size_t>(total));
  epoll_event events[256];
  while (done + res.errors < total) {
    int64_t now = Now();
    if (now > end_by) break;
    while (issued < total && t0 + issued * interval <= now) pending.push_back(t0 + issued++ * interval);
    while (!pending.empty() && !idle.empty()) {
      Client* c = idle.back();
      idle.pop_back();
      c->busy = true;
      c->sched = pending.front();
      pending.pop_front();
      if (::send(c->fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
        ++res.errors;
      }
    }
    int64_t next = issued < total ? t0 + issued * interval : now + 1'000'000;
    int64_t wait = std::max<int64_t>(0, next - Now());
    timespec ts{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
    int n = epoll_pwait2(ep, events, 256, &ts, nullptr);
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Client*>(events[i].data.ptr);
      char tmp[65536];
      ssize_t r = ::recv(c->fd, tmp, sizeof tmp, 0);
      if (r <= 0) {
        std::fprintf(stderr, "gateway_bench: the server closed a connection\n");
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
        ++res.errors;
        continue;
      }
      c->in.append(tmp, static_cast<size_t>(r));
      size_t len;
      bool ok;
      if (c->busy && WholeResponse(c->in, &len, &ok)) {
        int64_t t = Now();
        c->in.erase(0, len);
        c->busy = false;
        ++done;
        if (ok)
          res.lat_ns.push_back(t - c->sched);
        else
          ++res.errors;
        if (g_latencies)
          std::fprintf(g_latencies, "%d %lld %lld\n", port, static_cast<long long>(c->sched - t0),
                       static_cast<long long>(t - c->sched));
        idle.push_back(c);
      }
    }
  }
  res.unfinished = total - done - res.errors;
  res.achieved_rps = static_cast<double>(done) / ((static_cast<double>(Now() - t0)) / 1e9);
  for (auto& c : clients) ::close(c.fd);
  ::close(ep);
  std::sort(res.lat_ns.begin(), res.lat_ns.end());
  return res;
}

// CPU seconds (user + system) of the threads of `pid` whose name starts
// with `prefix` (all threads when empty), from /proc.
double CpuSeconds(pid_t pid, const std::string& prefix = {}) {
  double total = 0;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return 0;
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    std::ifstream stat(dir + "/" + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::string comm = line.substr(open + 1, close - open - 1);
    if (!prefix.empty() && comm.rfind(prefix, 0) != 0) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string f;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> f; ++i) {
      if (i == 14) utime = std::stod(f);
      if (i == 15) stime = std::stod(f);
    }
    total += (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }
  return total;
}

// The pids of the children of `parent` (nginx's workers).
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir("/proc"), ::closedir);
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  }
  return out;
}

// Pins the threads of `pid` whose name starts with `prefix` (all when
// empty) to `cpu`; how many it pinned.
int Pin(pid_t pid, int cpu, const std::string& prefix = {}) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int pinned = 0;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return 0;
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(dir + "/" + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (!prefix.empty() && name.rfind(prefix, 0) != 0) continue;
    if (::sched_setaffinity(static_cast<pid_t>(std::atoi(e->d_name)), sizeof set, &set) == 0) ++pinned;
  }
  return pinned;
}

struct Nginx {
  std::string dir;
  std::unique_ptr<ChildProcess> proc;
  int port = 0;
};

std::optional<Nginx> StartNginx(const std::string& binary, int workers, int engine_port) {
  Nginx n;
  char tmpl[] = "/tmp/gateway_bench_nginx.XXXXXX";
  if (!::mkdtemp(tmpl)) return std::nullopt;
  n.dir = tmpl;
  n.port = drover::gateway::testing::FreePort();
  std::ofstream conf(n.dir + "/nginx.conf");
  conf << "daemon off;\nmaster_process on;\nuser root root;\nworker_processes " << workers << ";\n"
       << "pid " << n.dir << "/nginx.pid;\nerror_log " << n.dir << "/error.log warn;\n"
       << "events { worker_connections 4096; }\n"
       << "http {\n  access_log off;\n  client_body_temp_path " << n.dir << "/body;\n"
       << "  proxy_temp_path " << n.dir << "/proxy;\n  fastcgi_temp_path " << n.dir << "/fcgi;\n"
       << "  uwsgi_temp_path " << n.dir << "/uwsgi;\n  scgi_temp_path " << n.dir << "/scgi;\n"
       << "  keepalive_requests 1000000;\n"
       << "  upstream engine { server 127.0.0.1:" << engine_port << "; keepalive 256; }\n"
       << "  server {\n    listen 127.0.0.1:" << n.port << " reuseport;\n"
       << "    location / {\n      proxy_pass http://engine;\n      proxy_http_version 1.1;\n"
       << "      proxy_set_header Connection \"\";\n      proxy_buffering on;\n    }\n  }\n}\n";
  conf.close();
  // nginx prints nothing when it starts: a shell prints the line once the port answers.
  std::string script = "'" + binary + "' -p '" + n.dir + "' -c '" + n.dir + "/nginx.conf' & pid=$!; " +
                       "for i in $(seq 500); do (exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(n.port) +
                       ") 2>/dev/null && break; sleep 0.01; done; echo \"listening on " + std::to_string(n.port) +
                       "\"; wait $pid";
  n.proc = std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/bash", "-c", script});
  if (n.proc->port() != n.port) return std::nullopt;
  return n;
}

// The gateway's drover_gateway_overhead_seconds buckets from its /metrics:
// (upper bound in seconds, cumulative count); +Inf last.
std::vector<std::pair<double, double>> Overhead(int gateway_port) {
  std::vector<std::pair<double, double>> out;
  const std::string page = drover::gateway::testing::Http(gateway_port, "GET", "/metrics").body;
  const std::string name = "drover_gateway_overhead_seconds_bucket{le=\"";
  for (size_t at = page.find(name); at != std::string::npos; at = page.find(name, at + 1)) {
    size_t le = at + name.size();
    size_t q = page.find('"', le);
    size_t sp = page.find(' ', q);
    if (q == std::string::npos || sp == std::string::npos) break;
    std::string bound = page.substr(le, q - le);
    out.emplace_back(bound == "+Inf" ? 1e300 : std::strtod(bound.c_str(), nullptr),
                     std::strtod(page.c_str() + sp + 1, nullptr));
  }
  return out;
}

// The bucket bound (us) below which a fraction `p` of the calls between two
// Overhead() readings fell; -1 if none.
double OverheadBoundUs(const std::vector<std::pair<double, double>>& before,
                       const std::vector<std::pair<double, double>>& after, double p) {
  if (after.empty() || after.size() != before.size()) return -1;
  const double total = after.back().second - before.back().second;
  if (total <= 0) return -1;
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i].second - before[i].second >= p * total) return after[i].first * 1e6;
  }
  return -1;
}

void Print(const char* what, double rate, const Result& r) {
  std::printf("  %-8s %7.0f req/s offered, %7.0f done: p50 %7.1f us  p99 %8.1f us  p99.9 %8.1f us  errors %" PRId64
              " unfinished %" PRId64 "\n",
              what, rate, r.achieved_rps, static_cast<double>(r.P(0.5)) / 1e3, static_cast<double>(r.P(0.99)) / 1e3,
              static_cast<double>(r.P(0.999)) / 1e3, r.errors, r.unfinished);
  std::fflush(stdout);
}

Result Merge(const Result& a, const Result& b) {
  Result m = a;
  m.lat_ns.insert(m.lat_ns.end(), b.lat_ns.begin(), b.lat_ns.end());
  std::sort(m.lat_ns.begin(), m.lat_ns.end());
  m.errors += b.errors;
  m.unfinished += b.unfinished;
  m.achieved_rps = (a.achieved_rps + b.achieved_rps) / 2;
  return m;
}

// The highest rate with p99 <= goal (and nothing unfinished), by doubling then bisecting.
// The highest rate at which each target's p99 stays within goal_ns: one
// bisection per target, their steps interleaved in time (each step runs
// every target still searching `repeats` times in turn, seconds each), and
// a step passes on the median of its runs' p99s, so that one stall of the
// shared machine fails neither one target alone nor a whole step.
std::vector<double> Search(const std::vector<std::pair<const char*, int>>& targets, double seconds, int conns,
                           const std::string& req, int64_t goal_ns, int repeats) {
  struct State {
    double good = 0, bad = 0, rate = 2000;
    bool done = false;
  };
  std::vector<State> st(targets.size());
  for (int step = 0; step < 14; ++step) {
    std::vector<std::vector<int64_t>> p99(targets.size());
    std::vector<bool> failed(targets.size(), false);
    bool any = false;
    for (int k = 0; k < repeats; ++k) {
      for (size_t i = 0; i < targets.size(); ++i) {
        if (st[i].done) continue;
        any = true;
        Result r = Run(targets[i].second, st[i].rate, seconds, conns, req);
        if (r.unfinished != 0 || r.errors != 0 || r.P(0.99) < 0) failed[i] = true;
        p99[i].push_back(r.P(0.99));
      }
    }
    if (!any) break;
    for (size_t i = 0; i < targets.size(); ++i) {
      State& t = st[i];
      if (t.done) continue;
      std::sort(p99[i].begin(), p99[i].end());
      const int64_t median = p99[i][p99[i].size() / 2];
      const bool ok = !failed[i] && median <= goal_ns;
      std::printf("  %-8s %7.0f req/s: median p99 %8.1f us of %d runs (%.1f-%.1f)%s\n", targets[i].first, t.rate,
                  static_cast<double>(median) / 1e3, repeats, static_cast<double>(p99[i].front()) / 1e3,
                  static_cast<double>(p99[i].back()) / 1e3, ok ? "" : "  over");
      if (ok)
        t.good = t.rate;
      else
        t.bad = t.rate;
      if (t.bad == 0)
        t.rate *= 2;
      else if (t.bad - t.good <= std::max(250.0, t.good * 0.05))
        t.done = true;
      else
        t.rate = (t.good + t.bad) / 2;
      if (t.rate < 250) t.done = true;
    }
    std::fflush(stdout);
  }
  std::vector<double> best;
  for (const State& t : st) best.push_back(t.good);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  std::vector<double> rates = {1000, 10000};
  int io_threads = 1, conns = 64, rounds = 2, search_repeats = 3;
  double search_seconds = 1;
  int64_t goal_us = 1000;
  std::string engine = TEST_ENGINE_BINARY, nginx = "/usr/sbin/nginx";
  std::string floor_binary = HOP_PROXY_BINARY;
  bool use_nginx = true, use_floor = true, search = true, gateway_process = false, per_round = false;
  std::vector<int> pin;  // CPUs of the generator, the engine, the proxies
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gateway_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--duration-s")
      seconds = std::stod(next());
    else if (a == "--io-threads")
      io_threads = std::stoi(next());
    else if (a == "--connections")
      conns = std::stoi(next());
    else if (a == "--engine")
      engine = next();
    else if (a == "--nginx")
      nginx = next();
    else if (a == "--no-nginx")
      use_nginx = false;
    else if (a == "--floor")
      floor_binary = next();
    else if (a == "--no-floor")
      use_floor = false;
    else if (a == "--pin") {
      std::string v = next();
      for (size_t p = 0; p < v.size();) {
        size_t c = v.find(',', p);
        pin.push_back(std::stoi(v.substr(p, c - p)));
        p = c == std::string::npos ? v.size() : c + 1;
      }
      if (pin.size() != 3) {
        std::fprintf(stderr, "gateway_bench: --pin needs three CPUs: generator,engine,proxies\n");
        return 2;
      }
    } else if (a == "--no-search")
      search = false;
    else if (a == "--rounds")
      rounds = std::max(1, std::stoi(next()));
    else if (a == "--gateway-process")
      gateway_process = true;
    else if (a == "--per-round")
      per_round = true;
    else if (a == "--latencies") {
      g_latencies = std::fopen(next().c_str(), "w");
      if (!g_latencies) {
        std::fprintf(stderr, "gateway_bench: cannot write %s\n", argv[i]);
        return 2;
      }
    } else if (a == "--p99-goal-us")
      goal_us = std::stoll(next());
    else if (a == "--search-repeats")
      search_repeats = std::max(1, std::stoi(next()));
    else if (a == "--search-duration-s")
      search_seconds = std::stod(next());
    else if (a == "--rates") {
      rates.clear();
      std::string s = next();
      for (size_t p = 0; p < s.size();) {
        size_t c = s.find(',', p);
        rates.push_back(std::stod(s.substr(p, c - p)));
        p = c == std::string::npos ? s.size() : c + 1;
      }
    } else {
      std::fprintf(stderr, "gateway_bench: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  ChildProcess eng({engine, "--port", "0", "--model", "bench", "--default-max-tokens", "1"});
  if (eng.port() == 0) {
    std::fprintf(stderr, "gateway_bench: the engine did not start\n");
    return 1;
  }
  drover::gateway::GatewayOptions o;
  o.io_threads = io_threads;
  o.metrics_public = true;  // for the overhead histogram below
  auto start_gateway = [&]() -> std::unique_ptr<drover::gateway::Gateway> {
    auto gw = drover::gateway::StartGateway(
        o,
        [](std::string_view) -> drover::Result<drover::gateway::KeyInfo> {
          return drover::gateway::KeyInfo{"k", "bench", "t"};
        },
        nullptr);
    if (!gw.ok()) {
      std::fprintf(stderr, "gateway_bench: %s\n", gw.status().ToString().c_str());
      std::exit(1);
    }
    (*gw)->SetRoutes({{"bench", "bench", "", false, {{"j-1", eng.address()}}}});
    return std::move(*gw);
  };
  // The gateway in this process (its io threads beside the generator), or
  // in a child of its own, as nginx and the engine are (--gateway-process).
  std::unique_ptr<drover::gateway::Gateway> gw;
  pid_t gw_pid = ::getpid();
  int gw_port = 0;
  if (gateway_process) {
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    gw_pid = ::fork();
    if (gw_pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // gone with the bench, however it ends
      ::close(fds[0]);
      auto child = start_gateway();
      int port = child->port();
      if (::write(fds[1], &port, sizeof port) != sizeof port) ::_exit(1);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    if (::read(fds[0], &gw_port, sizeof gw_port) != sizeof gw_port) {
      std::fprintf(stderr, "gateway_bench: the gateway process did not start\n");
      return 1;
    }
    ::close(fds[0]);
  } else {
    gw = start_gateway();
    gw_port = gw->port();
  }
  std::optional<Nginx> ngx;
  if (use_nginx) {
    ngx = StartNginx(nginx, io_threads, eng.port());
    if (!ngx) {
      std::fprintf(stderr, "gateway_bench: nginx (%s) did not start; --no-nginx to skip it\n", nginx.c_str());
      return 1;
    }
  }
  std::unique_ptr<ChildProcess> floor_proxy;
  if (use_floor) {
    floor_proxy = std::make_unique<ChildProcess>(
        std::vector<std::string>{floor_binary, "--upstream-port", std::to_string(eng.port())});
    if (floor_proxy->port() == 0) {
      std::fprintf(stderr, "gateway_bench: the floor proxy (%s) did not start; --no-floor to skip it\n",
                   floor_binary.c_str());
      return 1;
    }
  }
  const std::string body = R"({"model":"bench","max_tokens":1,"messages":[{"role":"user","content":"hi"}]})";
  const std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer sk-bench\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  std::printf("gateway_bench: engine :%d, gateway :%d (%d io threads)%s%s, %d connections, %.1f s a run\n", eng.port(),
              gw_port, io_threads, ngx ? (", nginx :" + std::to_string(ngx->port)).c_str() : "",
              floor_proxy ? (", floor :" + std::to_string(floor_proxy->port())).c_str() : "", conns, seconds);

  pid_t nginx_master = 0;
  if (ngx) {
    std::ifstream pidf(ngx->dir + "/nginx.pid");
    pidf >> nginx_master;
  }
  // What each target's CPU time is: the serving process's or threads'.
  struct Target {
    const char* name;
    int port;
    std::function<double()> cpu;
  };
  std::vector<Target> targets = {{"direct", eng.port(), [&] { return CpuSeconds(eng.pid()); }}};
  if (floor_proxy) targets.push_back({"floor", floor_proxy->port(), [&] { return CpuSeconds(floor_proxy->pid()); }});
  targets.push_back({"gateway", gw_port, [&] { return CpuSeconds(gw_pid, "drover-gw-"); }});
  if (ngx) {
    targets.push_back({"nginx", ngx->port, [&] {
                         double c = 0;
                         for (pid_t p : Children(nginx_master)) c += CpuSeconds(p);
                         return c;
                       }});
  }
  if (!pin.empty()) {
    int n = Pin(eng.pid(), pin[1]);
    int p = Pin(gw_pid, pin[2], "drover-gw-");
    if (floor_proxy) p += Pin(floor_proxy->pid(), pin[2]);
    if (nginx_master > 0) {
      for (pid_t w : Children(nginx_master)) p += Pin(w, pin[2]);
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pin[0], &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0) {
      std::fprintf(stderr, "gateway_bench: cannot pin the generator to CPU %d\n", pin[0]);
      return 1;
    }
    std::printf("pinned: generator to CPU %d, %d engine threads to CPU %d, %d proxy threads to CPU %d\n", pin[0], n,
                pin[1], p, pin[2]);
  }
  // Warm up every path (connections, pools, caches).
  for (const Target& t : targets) Run(t.port, 2000, 0.5, conns, req);

  std::printf("\n1. added latency (open loop, --rounds rounds each)\n");
  for (double rate : rates) {
    std::vector<Result> merged(targets.size());
    std::vector<double> cpu(targets.size(), 0);
    std::vector<int64_t> served(targets.size(), 0);
    const auto own_before = Overhead(gw_port);
    for (int round = 0; round < rounds; ++round) {
      std::vector<int64_t> p99(targets.size());
      for (size_t i = 0; i < targets.size(); ++i) {
        double c0 = targets[i].cpu();
        Result r = Run(targets[i].port, rate, seconds, conns, req);
        cpu[i] += targets[i].cpu() - c0;
        served[i] += static_cast<int64_t>(r.lat_ns.size());
        p99[i] = r.P(0.99);
        merged[i] = round ? Merge(merged[i], r) : r;
      }
      if (per_round) {
        std::printf("    round %d p99:", round);
        for (size_t i = 0; i < targets.size(); ++i) {
          std::printf("%s %s %.0f us", i ? "," : "", targets[i].name, static_cast<double>(p99[i]) / 1e3);
        }
        std::printf("\n");
      }
    }
    std::printf("  CPU per request:");
    for (size_t i = 0; i < targets.size(); ++i) {
      std::printf("%s %s %.1f us", i ? ";" : "", i ? targets[i].name : "engine",
                  cpu[i] / static_cast<double>(std::max<int64_t>(1, served[i])) * 1e6);
    }
    std::printf("\n");
    const auto own_after = Overhead(gw_port);
    std::printf(
        "  gateway's own time (drover_gateway_overhead_seconds): p50 <= %.1f us, p99 <= %.1f us (bucket bounds)\n",
        OverheadBoundUs(own_before, own_after, 0.5), OverheadBoundUs(own_before, own_after, 0.99));
    for (size_t i = 0; i < targets.size(); ++i) Print(targets[i].name, rate, merged[i]);
    const Result& d = merged[0];
    std::printf("  =>");
    for (size_t i = 1; i < targets.size(); ++i) {
      std::printf("%s %s adds p50 %+.1f us, p99 %+.1f us", i > 1 ? ";" : "", targets[i].name,
                  static_cast<double>(merged[i].P(0.5) - d.P(0.5)) / 1e3,
                  static_cast<double>(merged[i].P(0.99) - d.P(0.99)) / 1e3);
    }
    std::printf("\n");
  }
  if (search) {
    std::printf("\n2. highest rate with p99 <= %" PRId64 " us\n", goal_us);
    std::printf("  (%d runs of %.1f s per step, the targets in turn; a step passes on the median p99)\n",
                search_repeats, search_seconds);
    std::vector<std::pair<const char*, int>> ports;
    for (const Target& t : targets) ports.emplace_back(t.name, t.port);
    std::vector<double> best = Search(ports, search_seconds, conns, req, goal_us * 1000, search_repeats);
    std::printf("  =>");
    for (size_t i = 0; i < targets.size(); ++i) std::printf("%s %s %.0f req/s", i ? "," : "", targets[i].name, best[i]);
    std::printf("\n");
  }
  if (gw) gw->Stop();
  if (gateway_process && gw_pid > 0) {
    ::kill(gw_pid, SIGKILL);
    ::waitpid(gw_pid, nullptr, 0);
  }
  if (ngx) {
    ngx->proc->Kill();
    // The master's workers exit with it; the pid file names the master.
    std::ifstream pidf(ngx->dir + "/nginx.pid");
    pid_t pid = 0;
    if (pidf >> pid && pid > 0) ::kill(pid, SIGTERM);
    std::string rm = "rm -rf '" + ngx->dir + "'";
    if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "gateway_bench: could not remove %s\n", ngx->dir.c_str());
  }
  return 0;
}
