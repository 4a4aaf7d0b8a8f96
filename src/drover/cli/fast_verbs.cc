#include "drover/cli/fast_verbs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <string>
#include <variant>
#include <vector>

#include "drover/cli/flags.h"
#include "drover/cli/job_table.h"
#include "drover/cli/submit_flags.h"
#include "drover/cli/terminal.h"
#include "drover/http/client.h"

namespace drover::cli {
namespace {

using Json = nlohmann::ordered_json;  // keeps the server's field order when printed

// The server's error body {"code", "status", "message"} as a code and a
// message; a body that is not one (a proxy's page) keeps the HTTP status.
int FailResponse(const http::ClientResponse& r, const Common& c) {
  auto body = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("code") && body["code"].is_number_integer()) {
    return Fail(static_cast<Code>(body["code"].get<int>()), body.value("message", ""), c);
  }
  return Fail(r.status == 404 ? Code::kNotFound : Code::kInternal, fmt::format("HTTP {}: {}", r.status, r.body), c);
}

struct Ended {
  bool succeeded = false;
  int signal = 0;
  int exit_code = 0;
};

// Where and how to send: the HTTP address, TLS when a CA is found, the
// token. Fails (with the exit code already printed) for an unreadable CA.
struct Target {
  std::vector<std::string> http_addrs;  // the servers, in order
  std::unique_ptr<http::ClientTls> tls;
  std::map<std::string, std::string> headers;
  mutable size_t current = 0;  // the one that answered last
};

// Sends with `send(address)` to the server that answered last. A server
// that cannot be reached before anything was sent, or that answers 503 (a
// standby; X-Drover-Leader names the leader), passes the request on: to the
// leader it names when that is one of t's addresses and not tried yet, else
// to the next untried. The first other answer, or the last failure.
Result<http::ClientResponse> Exchange(const Target& t,
                                      const std::function<Result<http::ClientResponse>(const std::string&)>& send) {
  const size_t n = t.http_addrs.size();
  std::vector<bool> tried(n, false);
  size_t i = t.current < n ? t.current : 0;
  Result<http::ClientResponse> r = Unavailable("no server address");
  while (true) {
    tried[i] = true;
    r = send(t.http_addrs[i]);
    if (!r.ok() ? http::MayHaveArrived(r.status()) : r->status != 503) {
      t.current = i;
      return r;
    }
    size_t next = n;
    if (r.ok()) {
      if (auto h = r->headers.find("x-drover-leader"); h != r->headers.end()) {
        auto it = std::find(t.http_addrs.begin(), t.http_addrs.end(), h->second);
        if (it != t.http_addrs.end() && !tried[static_cast<size_t>(it - t.http_addrs.begin())]) {
          next = static_cast<size_t>(it - t.http_addrs.begin());
        }
      }
    }
    for (size_t k = 1; next == n && k < n; ++k) {
      if (!tried[(i + k) % n]) next = (i + k) % n;
    }
    if (next == n) return r;
    i = next;
  }
}

std::optional<int> Connect(const Common& c, Target* t) {
  if (std::string ca = ResolveCaFile(c); !ca.empty()) {
    std::ifstream in(ca);
    t->tls = std::make_unique<http::ClientTls>();
    t->tls->ca_pem.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in || t->tls->ca_pem.empty()) return Fail(Code::kInvalidArgument, "cannot read the CA file '" + ca + "'", c);
  }
  if (std::string token = ResolveToken(c); !token.empty()) t->headers["Authorization"] = "Bearer " + token;
  return std::nullopt;
}

// Sends one request; the answer's JSON object, or the exit code (printed).
// `filter`, when given, drops keys while the answer is parsed.
std::variant<Json, int> Call(const Target& t, const std::string& method, const std::string& target,
                             const std::string& body, const Common& c, Json::parser_callback_t filter = nullptr) {
  auto r = Exchange(t, [&](const std::string& addr) {
    return http::HttpsRequest(t.tls.get(), addr, method, target, body, "application/json", t.headers);
  });
  if (!r.ok()) return Fail(r.status().code(), r.status().message(), c);
  if (r->status / 100 != 2) return FailResponse(*r, c);
  auto resp = Json::parse(r->body, filter, /*allow_exceptions=*/false);
  if (!resp.is_object()) return Fail(Code::kInternal, "the server's answer is not JSON: " + r->body.substr(0, 200), c);
  return resp;
}

// POSTs `body` to `target`, a submit that goes on as the jobs' event stream,
// and reads it until it closes: "submitted" (the submit's answer, handed to
// `on_submitted`), "job" (a job's change; its end is what counts) and
// "end". Returns the exit code `submit --wait` gives.
int SubmitAndWait(const Target& t, const std::string& target, const std::string& body, const Common& c,
                  const std::function<void(const Json&)>& on_submitted) {
  std::map<std::string, Ended> ended;
  std::string pending;
  std::optional<std::string> error;
  auto on_event = [&](std::string_view event) {
    std::string name, data;
    size_t i = 0;
    while (i < event.size()) {
      size_t eol = std::min(event.find('\n', i), event.size());
      std::string_view line = event.substr(i, eol - i);
      if (line.starts_with("event: ")) name = line.substr(7);
      if (line.starts_with("data: ")) data += line.substr(6);
      i = eol + 1;
    }
    if (name == "error") error = data;
    if (name != "job" && name != "submitted") return;
    auto parsed = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return;
    if (name == "submitted") return on_submitted(parsed);
    const Json& st = parsed.value("status", Json::object());
    std::string state = st.value("state", "");
    if (state != "JOB_STATE_SUCCEEDED" && state != "JOB_STATE_FAILED" && state != "JOB_STATE_CANCELLED") return;
    std::string id = parsed.value("id", "");
    Ended e{state == "JOB_STATE_SUCCEEDED", st.value("signal", 0), st.value("exitCode", 0)};
    if (!ended.emplace(id, e).second) return;
    if (!e.succeeded) {
      std::cerr << fmt::format("job {} {}: {}\n", EscapeTerminal(id), EscapeTerminal(StateDisplay(state)),
                               EscapeTerminal(st.value("message", "")));
    }
  };
  auto on_body = [&](std::string_view piece) {
    pending.append(piece);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      on_event(std::string_view(pending).substr(0, end));
      pending.erase(0, end + 2);
    }
    return true;
  };
  auto r = Exchange(t, [&](const std::string& addr) {
    return http::HttpsStream(t.tls.get(), addr, "POST", target, body, "application/json", t.headers, on_body);
  });
  if (!r.ok()) return Fail(r.status().code(), r.status().message(), c);
  if (r->status / 100 != 2) return FailResponse(*r, c);
  if (error) return Fail(Code::kUnavailable, "the server stopped watching: " + *error, c);
  int code = 0;
  for (const auto& [id, e] : ended) code = std::max(code, ExitCodeOfJob(e.succeeded, e.signal, e.exit_code));
  return ended.empty() ? kExitFailure : code;
}

// What both verbs do around their work: parse the flags (nullopt, for the
// full program to run it, on help, a usage error or no HTTP address), then
// run, an answer of an unexpected shape being an error, not a crash.
template <typename Args>
std::optional<int> RunFast(int argc, char** argv, const char* verb, void (*add_flags)(CLI::App*, Args*),
                           int (*run)(const Args&, const Common&, const Target&)) {
  CLI::App app("drover");
  CLI::App* cmd = app.add_subcommand(verb);
  Common c;
  Args a;
  AddCommon(cmd, &c, true);
  add_flags(cmd, &a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    return std::nullopt;  // help, or a usage error: the full program prints it as it always does
  }
  if (CheckOutput(c) != 0) return std::nullopt;
  if constexpr (std::is_same_v<Args, SubmitArgs>) {
    if (a.follow) return std::nullopt;  // the output streams over gRPC
  }
  Target t;
  const std::string addrs = ResolveHttpAddr(c);
  for (size_t begin = 0; begin < addrs.size();) {
    size_t comma = std::min(addrs.find(',', begin), addrs.size());
    if (comma > begin) t.http_addrs.push_back(addrs.substr(begin, comma - begin));
    begin = comma + 1;
  }
  if (t.http_addrs.empty()) return std::nullopt;
  if (auto failed = Connect(c, &t)) return failed;
  try {
    return run(a, c, t);
  } catch (const nlohmann::json::exception& e) {
    return Fail(Code::kInternal, std::string("the server's answer is not what a drover server sends: ") + e.what(), c);
  }
}

int Submit(const SubmitArgs& a, const Common& c, const Target& t) {
  auto body = SubmitRequestJson(a);
  if (!body.ok()) return Usage(body.status().message());
  auto print = [&](const Json& resp) {
    std::string array_id = resp.value("arrayId", "");
    std::string job_id = resp.value("job", Json::object()).value("id", "");
    if (c.output == "json") {
      // One job prints as the job; an array as the answer with its id and size.
      std::cout << EscapeJsonForTerminal((array_id.empty() ? resp.at("job") : resp).dump(2)) << "\n";
    } else {
      std::cout << EscapeTerminal(array_id.empty() ? job_id : array_id) << "\n";
    }
    std::cout.flush();
  };
  // With --wait, one connection: the submit's answer goes on as the jobs'
  // event stream, their ends only (docs/dashboard.md, the API table).
  if (a.wait) return SubmitAndWait(t, "/api/v1/jobs?watch=ended", body->dump(), c, print);
  auto answer = Call(t, "POST", "/api/v1/jobs", body->dump(), c);
  if (const int* code = std::get_if<int>(&answer)) return *code;
  print(std::get<Json>(answer));
  return 0;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += fmt::format("%{:02X}", ch);
    }
  }
  return out;
}

int Jobs(const JobsArgs& a, const Common& c, const Target& t) {
  const int64_t now = NowNanos();
  auto ended_after = EndedAfter(a, now);
  if (!ended_after.ok()) return Usage(ended_after.status().message());
  // `query` with name=value added (nothing for an empty value).
  auto with = [](const std::string& query, const char* name, const std::string& value) {
    return value.empty() ? query : fmt::format("{}{}{}={}", query, query.empty() ? "?" : "&", name, Escape(value));
  };
  std::string query;
  auto add = [&](const char* name, const std::string& value) { query = with(query, name, value); };
  add("state", a.state);
  add("tenant", a.tenant);
  add("array", a.array);
  add("node", a.node);
  if (a.page_size > 0) add("page_size", std::to_string(a.page_size));
  if (*ended_after > 0) add("ended_after", std::to_string(*ended_after));
  std::string token = a.page_token;
  Json list = {{"jobs", Json::array()}, {"nextPageToken", ""}};
  while (true) {  // one page, or with --all every page
    auto answer = Call(t, "GET", "/api/v1/jobs" + with(query, "page_token", token), "", c,
                       c.output == "json" ? nullptr : JobTableFilter());
    if (const int* code = std::get_if<int>(&answer)) return *code;
    Json& page = std::get<Json>(answer);
    if (auto jobs = page.find("jobs"); jobs != page.end()) {
      for (Json& j : jobs->get_ref<Json::array_t&>()) list["jobs"].push_back(std::move(j));
    }
    token = page.value("nextPageToken", "");
    list["nextPageToken"] = token;
    if (!a.all || token.empty()) break;
  }
  if (c.output == "json") {
    std::cout << EscapeJsonForTerminal(list.dump(2)) << "\n";
    return 0;
  }
  PrintJobList(list, a, c.output == "wide", now, std::cout, std::cerr);
  return 0;
}

}  // namespace

std::optional<int> FastSubmit(int argc, char** argv) {
  return RunFast<SubmitArgs>(argc, argv, "submit", AddSubmitFlags, Submit);
}

std::optional<int> FastJobs(int argc, char** argv) { return RunFast<JobsArgs>(argc, argv, "jobs", AddJobsFlags, Jobs); }

}  // namespace drover::cli
