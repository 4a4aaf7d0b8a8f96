#include "drover/cli/fast_submit.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "drover/cli/flags.h"
#include "drover/cli/submit_flags.h"
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

// "JOB_STATE_FAILED" -> "Failed", as rpc::JobStateDisplay prints it.
std::string StateDisplay(std::string name) {
  constexpr std::string_view kPrefix = "JOB_STATE_";
  if (name.starts_with(kPrefix)) name = name.substr(kPrefix.size());
  for (size_t i = 1; i < name.size(); ++i) name[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  return name.empty() ? "Unknown" : name;
}

struct Ended {
  bool succeeded = false;
  int signal = 0;
  int exit_code = 0;
};

// Reads the watch stream's events ("job", then "end") until it closes;
// returns the exit code `submit --wait` gives.
int Wait(const http::ClientTls* tls, const std::string& http_addr, const std::string& query,
         const std::map<std::string, std::string>& headers, const Common& c) {
  std::map<std::string, Ended> ended;
  std::string pending;
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
    if (name != "job") return;
    auto job = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (!job.is_object()) return;
    const Json& st = job.value("status", Json::object());
    std::string state = st.value("state", "");
    if (state != "JOB_STATE_SUCCEEDED" && state != "JOB_STATE_FAILED" && state != "JOB_STATE_CANCELLED") return;
    std::string id = job.value("id", "");
    Ended e{state == "JOB_STATE_SUCCEEDED", st.value("signal", 0), st.value("exitCode", 0)};
    if (!ended.emplace(id, e).second) return;
    if (!e.succeeded) std::cerr << fmt::format("job {} {}: {}\n", id, StateDisplay(state), st.value("message", ""));
  };
  auto r = http::HttpsStream(tls, http_addr, "GET", "/api/v1/watch?" + query, headers, [&](std::string_view piece) {
    pending.append(piece);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      on_event(std::string_view(pending).substr(0, end));
      pending.erase(0, end + 2);
    }
    return true;
  });
  if (!r.ok()) return Fail(r.status().code(), r.status().message(), c);
  if (r->status / 100 != 2) return FailResponse(*r, c);
  int code = 0;
  for (const auto& [id, e] : ended) code = std::max(code, ExitCodeOfJob(e.succeeded, e.signal, e.exit_code));
  return ended.empty() ? kExitFailure : code;
}

// The answers are the server's JSON; one of an unexpected shape is an
// error, not a crash.
int Run(const SubmitArgs& a, const Common& c, const std::string& http_addr);

}  // namespace

std::optional<int> FastSubmit(int argc, char** argv) {
  CLI::App app("drover");
  CLI::App* submit = app.add_subcommand("submit");
  Common c;
  SubmitArgs a;
  AddCommon(submit, &c, true);
  AddSubmitFlags(submit, &a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError&) {
    return std::nullopt;  // help, or a usage error: the full program prints it as it always does
  }
  if (CheckOutput(c) != 0) return std::nullopt;
  std::string http_addr = ResolveHttpAddr(c);
  if (http_addr.empty()) return std::nullopt;

  try {
    return Run(a, c, http_addr);
  } catch (const nlohmann::json::exception& e) {
    return Fail(Code::kInternal, std::string("the server's answer is not what a drover server sends: ") + e.what(), c);
  }
}

namespace {

int Run(const SubmitArgs& a, const Common& c, const std::string& http_addr) {
  auto body = SubmitRequestJson(a);
  if (!body.ok()) return Usage(body.status().message());
  std::unique_ptr<http::ClientTls> tls;
  if (std::string ca = ResolveCaFile(c); !ca.empty()) {
    std::ifstream in(ca);
    tls = std::make_unique<http::ClientTls>();
    tls->ca_pem.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (!in || tls->ca_pem.empty()) return Fail(Code::kInvalidArgument, "cannot read the CA file '" + ca + "'", c);
  }
  std::map<std::string, std::string> headers;
  if (std::string token = ResolveToken(c); !token.empty()) headers["Authorization"] = "Bearer " + token;

  auto r = http::HttpsRequest(tls.get(), http_addr, "POST", "/api/v1/jobs", body->dump(), "application/json", headers);
  if (!r.ok()) return Fail(r.status().code(), r.status().message(), c);
  if (r->status / 100 != 2) return FailResponse(*r, c);
  auto resp = Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (!resp.is_object()) return Fail(Code::kInternal, "the server's answer is not JSON: " + r->body.substr(0, 200), c);
  std::string array_id = resp.value("arrayId", "");
  std::string job_id = resp.value("job", Json::object()).value("id", "");
  if (c.output == "json") {
    // One job prints as the job; an array as the answer with its id and size.
    std::cout << (array_id.empty() ? resp["job"] : resp).dump(2) << "\n";
  } else {
    std::cout << (array_id.empty() ? job_id : array_id) << "\n";
  }
  std::cout.flush();
  if (!a.wait) return 0;
  return Wait(tls.get(), http_addr, array_id.empty() ? "ids=" + job_id : "array=" + array_id, headers, c);
}

}  // namespace

}  // namespace drover::cli
