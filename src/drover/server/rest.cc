#include "drover/server/rest.h"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <limits>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "drover/common/json_depth.h"
#include "drover/rpc/convert.h"
#include "drover/rpc/json.h"
#include "drover/web/ui.h"

namespace drover::server {
namespace {

namespace pbutil = google::protobuf::util;

// Every default printed (rpc/json.h: protobuf's own printer with that
// option took ~70 ms for a page of 500 jobs).
std::string ToJson(const google::protobuf::Message& m) { return rpc::ToJson(m); }

// The {index} of /api/v1/nodes/{name}/gpus/{index}/...; its range is the
// node's to check.
Result<int> GpuIndex(std::string_view text) {
  int index = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgument(fmt::format("gpu index '{}' is not a number", text));
  }
  return index;
}

template <typename T>
http::Response JsonReply(const Result<T>& r) {
  if (!r.ok()) return http::ErrorResponse(r.status());
  return http::Response{200, "application/json", ToJson(*r), {}, {}};
}

// Every REST body goes through here (and the session's through
// HandleSession): the depth scan runs before the parser sees a byte, so a
// body of nested brackets costs a pass over it, not a tree of it.
Status FromJson(const std::string& body, google::protobuf::Message* m) {
  if (body.empty()) return InvalidArgument("request body is empty; expected a JSON object");
  DROVER_RETURN_IF_ERROR(CheckJsonDepth(body));
  pbutil::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = pbutil::JsonStringToMessage(body, m, opts);
  if (!st.ok())
    return InvalidArgument(
        fmt::format("request body is not a valid {}: {}", m->GetTypeName(), st.message().as_string()));
  return Status::Ok();
}

// The role a route needs, checked before its body is parsed: a caller that
// may not make the call pays nothing for its body. Audited as the call
// would have been (ApiService audits the calls it refuses).
Status RoleFirst(ApiService* api, const auth::Principal& who, auth::Role needed, std::string_view what,
                 std::string action) {
  Status s = RequireRole(who, needed, what);
  if (!s.ok()) api->Audit(who, std::move(action), "", s);
  return s;
}

std::vector<std::string_view> Split(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return parts;
}

http::Response MethodNotAllowed(const http::Request& req) {
  http::Response r = http::ErrorResponse(
      Status(Code::kUnimplemented, fmt::format("method {} is not allowed on {}", req.method, req.path)));
  r.status = 405;
  return r;
}

Result<bool> BoolParam(const http::Request& req, const std::string& name) {
  auto it = req.query.find(name);
  if (it == req.query.end() || it->second.empty() || it->second == "false" || it->second == "0") return false;
  if (it->second == "true" || it->second == "1") return true;
  return InvalidArgument(fmt::format("query parameter {}='{}' is not true or false", name, it->second));
}

// A non-negative integer up to `max`; 0 when absent.
Result<int64_t> IntParam(const http::Request& req, const std::string& name,
                         int64_t max = std::numeric_limits<int64_t>::max()) {
  auto it = req.query.find(name);
  if (it == req.query.end()) return int64_t{0};
  int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || p != it->second.data() + it->second.size() || v < 0 || v > max) {
    return InvalidArgument(
        fmt::format("query parameter {}='{}' is not an integer from 0 to {}", name, it->second.substr(0, 32), max));
  }
  return v;
}

http::Response LogsResponse(ApiService* api, const auth::Principal& who, const http::Request& req, std::string id) {
  v1::LogsRequest lr;
  lr.set_id(std::move(id));
  auto follow = BoolParam(req, "follow");
  if (!follow.ok()) return http::ErrorResponse(follow.status());
  lr.set_follow(*follow);
  auto offset = IntParam(req, "offset");
  if (!offset.ok()) return http::ErrorResponse(offset.status());
  lr.set_offset(*offset);
  auto replica = IntParam(req, "replica", rpc::kMaxReplicas);
  if (!replica.ok()) return http::ErrorResponse(replica.status());
  lr.set_replica(static_cast<int32_t>(*replica));
  // Validate before committing to a 200 stream.
  v1::GetJobRequest gr;
  gr.set_id(lr.id());
  auto j = api->GetJob(who, gr);
  if (!j.ok()) return http::ErrorResponse(j.status());
  if (Status s = CheckLogReplica(*j, lr.replica()); !s.ok()) return http::ErrorResponse(s);
  http::Response r{200, "text/plain; charset=utf-8", {}, {}, {}};
  // A LogFollow writes the output (what is there, or with follow until the
  // job ended), each chunk after the last went out (WriteThen): no thread
  // per reader, and a slow reader slows its follower instead of filling the
  // server's memory. The stream owns the follower (OnClosed) until it ends.
  r.async_stream = [api, who, lr](std::shared_ptr<http::StreamSink> sink) {
    auto follower = api->FollowLogs(
        who, lr,
        [sink](const std::shared_ptr<LogFollow>& self, v1::LogChunk c) {
          std::weak_ptr<LogFollow> weak = self;
          return sink->WriteThen(std::move(*c.mutable_data()), [weak] {
            if (auto f = weak.lock()) f->Sent();
          });
        },
        [sink](const Status&) { sink->Close(); });
    if (!follower.ok()) return sink->Close();
    sink->OnClosed([f = *follower] { f->Cancel(); });
  };
  return r;
}

http::Response HandleJobs(ApiService* api, RestStreams* streams, const auth::Principal& who, const http::Request& req,
                          const std::vector<std::string_view>& p) {
  // p[0..2] = api, v1, jobs
  if (p.size() == 3) {
    if (req.method == "POST") {
      if (Status s = RoleFirst(api, who, auth::Role::kUser, "submit jobs", "jobs.submit"); !s.ok())
        return http::ErrorResponse(s);
      v1::SubmitJobRequest sr;
      if (Status s = FromJson(req.body, &sr); !s.ok()) return http::ErrorResponse(s);
      // ?watch=all|ended: the answer goes on as the jobs' event stream.
      auto watch = req.query.find("watch");
      if (watch != req.query.end() && watch->second != "all" && watch->second != "ended") {
        return http::ErrorResponse(
            InvalidArgument(fmt::format("watch must be 'all' or 'ended', not '{}'", watch->second.substr(0, 64))));
      }
      auto r = api->Submit(who, std::move(sr));
      if (r.ok() && watch != req.query.end()) return streams->SubmitWatch(who, *r, watch->second == "ended");
      http::Response resp = JsonReply(r);
      if (r.ok()) resp.status = 201;
      return resp;
    }
    if (req.method != "GET") return MethodNotAllowed(req);
    v1::ListJobsRequest lr;
    if (auto it = req.query.find("state"); it != req.query.end() && !it->second.empty()) {
      auto st = rpc::ParseJobState(it->second);
      if (!st.ok()) return http::ErrorResponse(st.status());
      lr.set_state(*st);
    }
    if (auto it = req.query.find("tenant"); it != req.query.end()) lr.set_tenant(it->second);
    if (auto it = req.query.find("array"); it != req.query.end()) lr.set_array_id(it->second);
    if (auto it = req.query.find("node"); it != req.query.end()) lr.set_node(it->second);
    if (auto it = req.query.find("page_token"); it != req.query.end()) lr.set_page_token(it->second);
    auto page_size = IntParam(req, "page_size", std::numeric_limits<int32_t>::max());
    auto ended_after = IntParam(req, "ended_after");  // unix nanoseconds
    auto ended_before = IntParam(req, "ended_before");
    for (const auto* r : {&page_size, &ended_after, &ended_before}) {
      if (!r->ok()) return http::ErrorResponse(r->status());
    }
    lr.set_page_size(static_cast<int32_t>(*page_size));
    lr.set_ended_after_unix_nanos(*ended_after);
    lr.set_ended_before_unix_nanos(*ended_before);
    return JsonReply(api->ListJobs(who, lr));
  }
  std::string id(p[3]);
  if (p.size() == 4 && id == "batch") {
    // POST /api/v1/jobs/batch {"specs": [...]}: all stored, or none.
    if (req.method != "POST") return MethodNotAllowed(req);
    if (Status s = RoleFirst(api, who, auth::Role::kUser, "submit jobs", "jobs.submit_batch"); !s.ok())
      return http::ErrorResponse(s);
    v1::SubmitJobsRequest br;
    if (Status s = FromJson(req.body, &br); !s.ok()) return http::ErrorResponse(s);
    auto r = api->SubmitBatch(who, std::move(br));
    http::Response resp = JsonReply(r);
    if (r.ok()) resp.status = 201;
    return resp;
  }
  if (p.size() == 5 && p[4] == "cancel" && id.starts_with("a-")) {
    // A job array's id cancels every unfinished task of it.
    if (req.method != "POST") return MethodNotAllowed(req);
    v1::CancelArrayRequest cr;
    cr.set_array_id(id);
    return JsonReply(api->CancelArray(who, cr));
  }
  if (p.size() == 4) {
    if (req.method != "GET") return MethodNotAllowed(req);
    v1::GetJobRequest gr;
    gr.set_id(id);
    return JsonReply(api->GetJob(who, gr));
  }
  if (p.size() == 5 && p[4] == "cancel") {
    if (req.method != "POST") return MethodNotAllowed(req);
    v1::CancelJobRequest cr;
    cr.set_id(id);
    return JsonReply(api->CancelJob(who, cr));
  }
  if (p.size() == 5 && p[4] == "logs") {
    if (req.method != "GET") return MethodNotAllowed(req);
    return LogsResponse(api, who, req, id);
  }
  return http::ErrorResponse(NotFound(fmt::format("no such resource: {}", req.path)));
}

http::Response HandleNodes(ApiService* api, const auth::Principal& who, const http::Request& req,
                           const std::vector<std::string_view>& p) {
  if (p.size() == 3) {
    if (req.method != "GET") return MethodNotAllowed(req);
    return JsonReply(api->ListNodes(who, v1::ListNodesRequest()));
  }
  std::string name(p[3]);
  if (p.size() == 4) {
    if (req.method != "GET") return MethodNotAllowed(req);
    v1::GetNodeRequest gr;
    gr.set_name(name);
    return JsonReply(api->GetNode(who, gr));
  }
  if (p.size() == 7 && p[4] == "gpus" && p[6] == "history") {
    if (req.method != "GET") return MethodNotAllowed(req);
    v1::GpuHistoryRequest hr;
    hr.set_node(name);
    auto index = GpuIndex(p[5]);
    if (!index.ok()) return http::ErrorResponse(index.status());
    hr.set_gpu_index(*index);
    return JsonReply(api->GpuHistory(who, hr));
  }
  if (p.size() == 7 && p[4] == "gpus" && p[6] == "fault") {
    // POST /api/v1/nodes/{name}/gpus/{index}/fault  {"fault": "xid:79"}
    if (req.method != "POST") return MethodNotAllowed(req);
    auto index = GpuIndex(p[5]);
    if (!index.ok()) return http::ErrorResponse(index.status());
    if (Status s = RoleFirst(api, who, auth::Role::kAdmin, "inject faults", "nodes.fault"); !s.ok())
      return http::ErrorResponse(s);
    v1::InjectFaultRequest fr;
    if (Status s = FromJson(req.body, &fr); !s.ok()) return http::ErrorResponse(s);
    fr.set_node(name);
    fr.set_gpu_index(*index);
    return JsonReply(api->InjectFault(who, fr));
  }
  if (p.size() == 5 && (p[4] == "drain" || p[4] == "undrain")) {
    if (req.method != "POST") return MethodNotAllowed(req);
    v1::DrainNodeRequest dr;
    // An optional body: {"requeue": true} moves the node's jobs away too.
    if (!req.body.empty()) {
      if (Status s = FromJson(req.body, &dr); !s.ok()) return http::ErrorResponse(s);
    }
    dr.set_name(name);
    return JsonReply(api->Drain(who, dr, p[4] == "drain"));
  }
  return http::ErrorResponse(NotFound(fmt::format("no such resource: {}", req.path)));
}

// /api/v1/deployments[/{name}[/scale]][?tenant=T] (docs/deployments.md).
http::Response HandleDeployments(ApiService* api, const auth::Principal& who, const http::Request& req,
                                 const std::vector<std::string_view>& p) {
  if (p.size() == 3) {
    if (req.method == "GET") return JsonReply(api->ListDeployments(who));
    if (req.method != "POST") return MethodNotAllowed(req);
    if (Status s = RoleFirst(api, who, auth::Role::kUser, "apply deployments", "deployments.apply"); !s.ok())
      return http::ErrorResponse(s);
    v1::ApplyDeploymentRequest ar;
    if (Status s = FromJson(req.body, &ar); !s.ok()) return http::ErrorResponse(s);
    const bool create = !ar.replace();
    auto r = api->ApplyDeployment(who, std::move(ar));
    http::Response resp = JsonReply(r);
    if (r.ok() && create) resp.status = 201;
    return resp;
  }
  std::string name(p[3]);
  // ?tenant=T: an admin names another tenant's deployment (names are per
  // tenant); anyone else finds only its own tenant's.
  std::string tenant;
  if (auto t = req.query.find("tenant"); t != req.query.end()) tenant = t->second;
  if (p.size() == 4) {
    if (req.method == "GET") {
      v1::GetDeploymentRequest gr;
      gr.set_name(name);
      gr.set_tenant(tenant);
      return JsonReply(api->GetDeployment(who, gr));
    }
    if (req.method == "DELETE") {
      v1::DeleteDeploymentRequest dr;
      dr.set_name(name);
      dr.set_tenant(tenant);
      return JsonReply(api->DeleteDeployment(who, dr));
    }
    return MethodNotAllowed(req);
  }
  if (p.size() == 5 && p[4] == "scale") {
    // POST /api/v1/deployments/{name}/scale {"replicas": N}
    if (req.method != "POST") return MethodNotAllowed(req);
    if (Status s = RoleFirst(api, who, auth::Role::kUser, "scale deployments", "deployments.scale"); !s.ok())
      return http::ErrorResponse(s);
    v1::ScaleDeploymentRequest sr;
    if (Status s = FromJson(req.body, &sr); !s.ok()) return http::ErrorResponse(s);
    if (!sr.name().empty() && sr.name() != name) {
      return http::ErrorResponse(InvalidArgument("the body names another deployment than the path"));
    }
    if (!sr.tenant().empty() && !tenant.empty() && sr.tenant() != tenant) {
      return http::ErrorResponse(InvalidArgument("the body names another tenant than the query"));
    }
    sr.set_name(name);
    if (!tenant.empty()) sr.set_tenant(tenant);
    return JsonReply(api->ScaleDeployment(who, sr));
  }
  return http::ErrorResponse(NotFound(fmt::format("no such resource: {}", req.path)));
}

// /api/v1/serving/{endpoints,load,keys:resolve}: for gateways; /usage for the dashboard.
http::Response HandleServing(ApiService* api, const auth::Principal& who, const http::Request& req,
                             const std::vector<std::string_view>& p) {
  if (p.size() == 4 && p[3] == "endpoints") {
    if (req.method != "GET") return MethodNotAllowed(req);
    return JsonReply(api->Endpoints(who));
  }
  if (p.size() == 4 && p[3] == "usage") {
    // The usage the gateways report (the dashboard's Models tab).
    if (req.method != "GET") return MethodNotAllowed(req);
    auto usage = api->ServingUsage(who);
    if (!usage.ok()) return http::ErrorResponse(usage.status());
    return http::Response{200, "application/json", std::move(*usage), {{"Cache-Control", "no-store"}}, {}};
  }
  if (p.size() == 4 && p[3] == "load") {
    if (req.method != "POST") return MethodNotAllowed(req);
    v1::ReportLoadRequest lr;
    if (Status s = FromJson(req.body, &lr); !s.ok()) return http::ErrorResponse(s);
    return JsonReply(api->ReportLoad(who, lr));
  }
  if (p.size() == 4 && p[3] == "keys:resolve") {
    if (req.method != "POST") return MethodNotAllowed(req);
    v1::ResolveKeyRequest kr;
    if (Status s = FromJson(req.body, &kr); !s.ok()) return http::ErrorResponse(s);
    return JsonReply(api->ResolveKey(who, kr));
  }
  return http::ErrorResponse(NotFound(fmt::format("no such resource: {}", req.path)));
}

// /api/v1/tokens[/{id}/revoke], /api/v1/whoami, /api/v1/login-codes,
// /api/v1/join-tokens, /api/v1/audit[/verify].
std::optional<http::Response> HandleIdentity(ApiService* api, const auth::Principal& who, const http::Request& req,
                                             const std::vector<std::string_view>& p) {
  if (p.size() == 3 && p[2] == "whoami") {
    if (req.method != "GET") return MethodNotAllowed(req);
    return http::Response{200, "application/json", ToJson(api->WhoAmI(who)), {}, {}};
  }
  if (p[2] == "tokens") {
    if (p.size() == 3 && req.method == "GET") return JsonReply(api->ListTokens(who));
    if (p.size() == 3 && req.method == "POST") {
      if (Status s = RoleFirst(api, who, auth::Role::kTenantAdmin, "create tokens", "tokens.create"); !s.ok())
        return http::ErrorResponse(s);
      v1::CreateTokenRequest cr;
      if (Status s = FromJson(req.body, &cr); !s.ok()) return http::ErrorResponse(s);
      auto r = api->CreateToken(who, cr);
      http::Response resp = JsonReply(r);
      if (r.ok()) resp.status = 201;
      return resp;
    }
    if (p.size() == 5 && p[4] == "revoke" && req.method == "POST") {
      v1::RevokeTokenRequest rr;
      rr.set_id(std::string(p[3]));
      return JsonReply(api->RevokeToken(who, rr));
    }
    return MethodNotAllowed(req);
  }
  if (p[2] == "tenants" && (p.size() == 4 || (p.size() == 3 && req.method == "POST"))) {
    // POST /api/v1/tenants (create), PUT|DELETE /api/v1/tenants/{name}
    if (p.size() == 4 && req.method == "DELETE") {
      v1::DeleteTenantRequest dr;
      dr.set_name(std::string(p[3]));
      return JsonReply(api->DeleteTenant(who, dr));
    }
    if (req.method != "POST" && req.method != "PUT") return MethodNotAllowed(req);
    if (Status s = RoleFirst(api, who, auth::Role::kAdmin, "change tenants",
                             req.method == "POST" ? "tenants.create" : "tenants.set");
        !s.ok())
      return http::ErrorResponse(s);
    v1::SetTenantRequest sr;
    if (Status s = FromJson(req.body, sr.mutable_tenant()); !s.ok()) return http::ErrorResponse(s);
    if (p.size() == 4) {
      if (!sr.tenant().name().empty() && sr.tenant().name() != p[3]) {
        return http::ErrorResponse(InvalidArgument("the body names another tenant than the path"));
      }
      sr.mutable_tenant()->set_name(std::string(p[3]));
    }
    sr.set_create(req.method == "POST");
    auto r = api->SetTenant(who, sr);
    http::Response resp = JsonReply(r);
    if (r.ok() && sr.create()) resp.status = 201;
    return resp;
  }
  if (p.size() == 3 && p[2] == "login-codes") {
    if (req.method != "POST") return MethodNotAllowed(req);
    return JsonReply(api->CreateLoginCode(who));
  }
  if (p.size() == 3 && p[2] == "join-tokens") {
    if (req.method != "POST") return MethodNotAllowed(req);
    if (Status s = RoleFirst(api, who, auth::Role::kAdmin, "create join tokens", "nodes.join-token"); !s.ok())
      return http::ErrorResponse(s);
    v1::CreateJoinTokenRequest jr;
    if (!req.body.empty()) {
      if (Status s = FromJson(req.body, &jr); !s.ok()) return http::ErrorResponse(s);
    }
    return JsonReply(api->CreateJoinToken(who, jr));
  }
  if (p[2] == "audit") {
    if (req.method != "GET") return MethodNotAllowed(req);
    if (p.size() == 4 && p[3] == "verify") return JsonReply(api->VerifyAudit(who));
    if (p.size() != 3) return std::nullopt;
    v1::ListAuditRequest lr;
    for (const char* name : {"since", "limit"}) {
      auto it = req.query.find(name);
      if (it == req.query.end()) continue;
      int64_t v = 0;
      auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
      if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 0) {
        return http::ErrorResponse(
            InvalidArgument(fmt::format("{} '{}' is not a non-negative integer", name, it->second)));
      }
      if (std::string_view(name) == "since")
        lr.set_since_unix_nanos(v);
      else
        lr.set_limit(v);
    }
    return JsonReply(api->ListAudit(who, lr));
  }
  return std::nullopt;
}

// /api/v1/session: the dashboard's login (POST {"token"} or {"code"}),
// who it is (GET) and logout (DELETE). The cookie is HttpOnly and
// SameSite=Strict; the body carries the CSRF token the dashboard echoes.
http::Response HandleSession(const RestContext& c, const http::Request& req) {
  auto session_body = [](const auth::DashboardSession& s) {
    nlohmann::json j{{"principal",
                      {{"name", s.principal.name},
                       {"tenant", s.principal.tenant},
                       {"role", std::string(auth::RoleName(s.principal.role))}}},
                     {"csrfToken", s.csrf_token}};
    return j.dump();
  };
  std::string cookie = Edge::CookieValue(req.headers.count("cookie") ? req.headers.at("cookie") : "", kSessionCookie);
  if (req.method == "GET") {
    auto s = c.authority->FindSession(cookie);
    if (!s.ok()) return Refusal(s.status());
    return http::Response{200, "application/json", session_body(*s), {{"Cache-Control", "no-store"}}, {}};
  }
  if (req.method == "DELETE") {
    auto who = c.edge->Authenticate(req);  // the CSRF check for cookie sessions
    if (!who.ok()) return Refusal(who.status());
    c.authority->CloseSession(cookie);
    c.api->Audit(*who, "session.close", "", Status::Ok());
    http::Response r{200, "application/json", "{}", {}, {}};
    r.headers["Set-Cookie"] = std::string(kSessionCookie) + "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0";
    return r;
  }
  if (req.method != "POST") return MethodNotAllowed(req);
  // {"token": ...} or {"code": ...} is a few dozen bytes: nothing larger or
  // nested reaches the parser.
  constexpr size_t kMaxSessionBody = 4096;
  Status shape = req.body.size() > kMaxSessionBody
                     ? InvalidArgument(fmt::format("session body is larger than {} bytes", kMaxSessionBody))
                     : CheckJsonDepth(req.body, 2);
  nlohmann::json body = shape.ok() ? nlohmann::json::parse(req.body, nullptr, false) : nlohmann::json();
  if (shape.ok() && (body.is_discarded() || !body.is_object())) {
    shape = InvalidArgument("session body must be a JSON object {\"token\": ...} or {\"code\": ...}");
  }
  if (!shape.ok()) return http::ErrorResponse(shape);
  Result<auth::DashboardSession> s = Unauthenticated("session body needs a \"token\" or a \"code\"");
  auth::Principal anonymous;
  anonymous.source = req.remote;
  // A login is a state-changing call of the token it names: the same
  // per-token and per-tenant limits as every other (a flood of logins with
  // one token is refused with 429 like a flood of submits).
  Duration retry{0};
  if (body.contains("token") && body["token"].is_string()) {
    auto p = c.authority->Authenticate(body["token"].get<std::string>());
    if (p.ok()) p->source = req.remote;
    if (p.ok()) {
      if (Status admitted = c.edge->Admit(*p, true, &retry); !admitted.ok()) return Refusal(admitted, retry);
    }
    s = p.ok() ? c.authority->OpenSession(*p) : Result<auth::DashboardSession>(p.status());
  } else if (body.contains("code") && body["code"].is_string()) {
    s = c.authority->OpenSessionWithCode(body["code"].get<std::string>());
    // The code's principal is known once the code is used: over the limit,
    // the session it opened is closed again (codes are bounded at creation).
    if (s.ok()) {
      auth::Principal as = s->principal;
      as.source = req.remote;
      if (Status admitted = c.edge->Admit(as, true, &retry); !admitted.ok()) {
        c.authority->CloseSession(s->cookie);
        return Refusal(admitted, retry);
      }
    }
  }
  if (!s.ok()) {
    if (!c.edge->NoteFailure(req.remote, &retry)) return Refusal(ResourceExhausted("too many failed logins"), retry);
    c.api->Audit(anonymous, "session.open", "", s.status());
    return Refusal(s.status());
  }
  auth::Principal who = s->principal;
  who.source = req.remote;
  c.api->Audit(who, "session.open", "", Status::Ok());
  http::Response r{200, "application/json", session_body(*s), {{"Cache-Control", "no-store"}}, {}};
  r.headers["Set-Cookie"] = Edge::SessionCookie(s->cookie, req.tls);
  return r;
}

http::Response Route(const RestContext& c, const http::Request& req) {
  ApiService* api = c.api;
  if (req.path == "/healthz") return http::Response{200, "text/plain", "ok\n", {}, {}};
  if (req.path == "/readyz") {
    Status s = c.ready();
    if (!s.ok()) return http::Response{503, "text/plain", "not ready: " + s.message() + "\n", {}, {}};
    return http::Response{200, "text/plain", "ok\n", {}, {}};
  }
  if (auto refused = c.edge->BrowserRules(req)) return *std::move(refused);
  // The dashboard's files hold no data: served to anyone who passed the rules.
  if (auto ui = web::ServeUi(req)) return *std::move(ui);
  std::vector<std::string_view> p = Split(req.path);
  if (p.size() == 3 && p[0] == "api" && p[1] == "v1" && p[2] == "session") return HandleSession(c, req);

  const bool is_metrics = req.path == "/metrics";
  // --metrics-public serves a reader without a token; one that sends a
  // token is who it says, so that Prometheus with the admin's sees every
  // tenant's series while the anonymous reader sees its own (none).
  const bool anonymous_metrics =
      is_metrics && c.edge->options().metrics_public && req.headers.count("authorization") == 0;
  auth::Principal who;
  if (!anonymous_metrics) {
    auto authn = c.edge->Authenticate(req);
    if (!authn.ok()) {
      Duration retry{0};
      if (!c.edge->NoteFailure(req.remote, &retry))
        return Refusal(ResourceExhausted("too many failed authentications"), retry);
      if (Edge::StateChanging(req.method)) {
        auth::Principal anonymous;
        anonymous.source = req.remote;
        api->Audit(anonymous, "http " + req.method, req.path.substr(0, 128), authn.status());
      }
      return Refusal(authn.status());
    }
    who = std::move(*authn);
    Duration retry{0};
    if (Status s = c.edge->Admit(who, Edge::StateChanging(req.method), &retry); !s.ok()) return Refusal(s, retry);
  }
  if (is_metrics) {
    if (req.method != "GET") return MethodNotAllowed(req);
    if (!anonymous_metrics) {
      if (Status s = RequireRole(who, auth::Role::kViewer, "read metrics"); !s.ok()) return http::ErrorResponse(s);
    }
    // Other tenants' job ids and names read "other" unless an admin asks
    // (docs/security.md, "Names per tenant"). The content type Prometheus's
    // text format 0.0.4 asks for.
    return http::Response{
        200, "text/plain; version=0.0.4; charset=utf-8", c.metrics->Render(api->MetricsMask(who)), {}, {}};
  }
  if (p.size() >= 3 && p[0] == "api" && p[1] == "v1") {
    if (p[2] == "jobs") return HandleJobs(api, c.streams, who, req, p);
    if (p[2] == "nodes") return HandleNodes(api, who, req, p);
    if (p[2] == "deployments") return HandleDeployments(api, who, req, p);
    if (p[2] == "serving") return HandleServing(api, who, req, p);
    if (p[2] == "images" && p.size() == 4 && p[3] == "pull") {
      // POST /api/v1/images/pull {"reference": "busybox", "nodes": [...], "pullPolicy": "always"}
      if (req.method != "POST") return MethodNotAllowed(req);
      if (Status s = RoleFirst(api, who, auth::Role::kAdmin, "pull images", "images.pull"); !s.ok())
        return http::ErrorResponse(s);
      v1::PullImageRequest pr;
      if (Status s = FromJson(req.body, &pr); !s.ok()) return http::ErrorResponse(s);
      return JsonReply(api->PullImage(who, pr));
    }
    if (auto r = HandleIdentity(api, who, req, p)) return *std::move(r);
    if (p.size() == 3 &&
        (p[2] == "fleet" || p[2] == "scheduler" || p[2] == "tenants" || p[2] == "events" || p[2] == "watch")) {
      if (req.method != "GET") return MethodNotAllowed(req);
      if (p[2] == "fleet") return JsonReply(api->Fleet(who));
      if (p[2] == "scheduler") return JsonReply(api->SchedulerStats(who));
      if (p[2] == "tenants") return JsonReply(api->ListTenants(who));
      if (p[2] == "watch") return c.streams->Watch(who, req);  // ApiService::Watch checks the role
      if (Status s = RequireRole(who, auth::Role::kViewer, "watch events"); !s.ok()) return http::ErrorResponse(s);
      return c.streams->Events(who);
    }
    if (p[2] == "version" && p.size() == 3) {
      if (req.method != "GET") return MethodNotAllowed(req);
      return http::Response{200, "application/json", ToJson(api->Version()), {}, {}};
    }
  }
  return http::ErrorResponse(NotFound(fmt::format("no such resource: {}", req.path)));
}

}  // namespace

http::Handler MakeRestHandler(RestContext context) {
  auto requests =
      context.metrics->AddCounter("drover_http_requests_total", "HTTP requests served, by method and status code.");
  metrics::CounterFamily* counter = requests.ok() ? *requests : nullptr;
  return [c = std::move(context), counter](const http::Request& req) -> http::Response {
    http::Response r = Route(c, req);
    // Methods outside the known set are counted as "other": a client cannot
    // create series at will.
    static constexpr std::string_view kMethods[] = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"};
    bool known = std::find(std::begin(kMethods), std::end(kMethods), req.method) != std::end(kMethods);
    if (counter != nullptr)
      counter->Inc({{"method", known ? req.method : "other"}, {"code", std::to_string(r.status)}});
    return r;
  };
}

}  // namespace drover::server
