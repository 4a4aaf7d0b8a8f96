// The server's edge (server/edge.cc): what it makes of a request's headers
// before any handler runs. Edge::BrowserRules (Host, Origin,
// Sec-Fetch-Site, Content-Type) and Edge::Authenticate (an Authorization
// bearer token through auth::Authority, or the dashboard session cookie and
// its X-CSRF-Token), on requests parsed from the input by Beast as the
// server parses them (http_request_fuzz), over a store in memory that holds
// one real token and one open session.
//
// The first byte: bit 0 sets Request::tls. In the rest, @TOKEN@, @COOKIE@
// and @CSRF@ are replaced by the real token, session cookie and CSRF token,
// which the fuzzer could not guess.
//
// Properties: cross-site and same-site fetches, foreign origins and
// non-JSON bodies of state-changing requests never pass the rules; a
// request authenticates only with the real token (after "Bearer ", any
// case, trimmed) or the real cookie (and, when it changes state, the real
// CSRF token); every refusal is kUnauthenticated or kPermissionDenied with
// a JSON body, whatever bytes the request holds.

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <map>

#include "beast_input.h"
#include "drover/auth/authority.h"
#include "drover/server/edge.h"
#include "drover/store/store.h"
#include "fuzz_util.h"

namespace {

namespace auth = drover::auth;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace store = drover::store;
using drover::Code;
using drover::Result;
using drover::Status;

// The least of a Store that Authority uses: transactions of puts, deletes
// and gets with version and mod-revision compares, and prefix ranges.
class MemoryStore final : public store::Store {
 public:
  Result<store::TxnResult> Txn(const std::vector<store::Compare>& compares, const std::vector<store::Op>& success,
                               const std::vector<store::Op>& failure) override {
    bool held = true;
    for (const store::Compare& c : compares) {
      auto it = kvs_.find(c.key);
      int64_t have = 0;
      if (c.target == store::Compare::Target::kVersion) have = it == kvs_.end() ? 0 : it->second.version;
      if (c.target == store::Compare::Target::kModRevision) have = it == kvs_.end() ? 0 : it->second.mod_revision;
      if (c.target == store::Compare::Target::kCreateRevision) have = it == kvs_.end() ? 0 : it->second.create_revision;
      bool ok = c.op == store::Compare::Op::kEqual      ? have == c.number
                : c.op == store::Compare::Op::kNotEqual ? have != c.number
                : c.op == store::Compare::Op::kLess     ? have < c.number
                                                        : have > c.number;
      if (c.target == store::Compare::Target::kValue) ok = it != kvs_.end() && it->second.value == c.value;
      held = held && ok;
    }
    store::TxnResult r;
    r.succeeded = held;
    bool wrote = false;
    for (const store::Op& op : held ? success : failure) {
      if (op.kind == store::Op::Kind::kGet) {
        auto it = kvs_.find(op.key);
        r.gets.push_back(it == kvs_.end() ? std::nullopt : std::optional<store::KeyValue>(it->second));
      } else if (op.kind == store::Op::Kind::kPut) {
        if (!wrote) ++revision_;
        wrote = true;
        store::KeyValue& kv = kvs_[op.key];
        if (kv.version == 0) kv.create_revision = revision_;
        kv.key = op.key;
        kv.value = op.value;
        kv.mod_revision = revision_;
        ++kv.version;
      } else {
        if (!wrote) ++revision_;
        wrote = true;
        if (op.kind == store::Op::Kind::kDelete) {
          kvs_.erase(op.key);
        } else {
          std::erase_if(kvs_, [&](const auto& kv) { return kv.first.starts_with(op.key); });
        }
      }
    }
    r.revision = revision_;
    return r;
  }
  Result<store::RangeResult> Range(const std::string& prefix, int64_t limit, const std::string& start) override {
    store::RangeResult r;
    for (const auto& [k, kv] : kvs_) {
      if (!k.starts_with(prefix) || k < start) continue;
      if (limit > 0 && static_cast<int64_t>(r.kvs.size()) == limit) {
        r.more = true;
        break;
      }
      r.kvs.push_back(kv);
    }
    r.revision = revision_;
    return r;
  }
  Result<std::unique_ptr<store::WatchHandle>> Watch(const std::string&, int64_t, store::WatchCallback) override {
    return drover::Unimplemented("no watches in the fuzz store");
  }
  Status Compact(int64_t) override { return Status::Ok(); }
  Result<store::LeaseId> GrantLease(drover::Duration) override { return drover::Unimplemented("no leases"); }
  Status KeepAlive(store::LeaseId) override { return drover::Unimplemented("no leases"); }
  Status RevokeLease(store::LeaseId) override { return drover::Unimplemented("no leases"); }
  Result<int64_t> CurrentRevision() override { return revision_; }

 private:
  std::map<std::string, store::KeyValue> kvs_;
  int64_t revision_ = 0;
};

struct World {
  drover::ManualClock clock;
  MemoryStore store;
  auth::Authority authority{&store, &clock};
  drover::server::Edge edge{&authority, &clock, drover::server::SecurityOptions{{"drover.example.com"}}};
  std::string token, cookie, csrf;
};

World& TheWorld() {
  static World* w = [] {
    auto* w = new World;
    auto token = w->authority.MintInternal({"fuzz", "default", auth::Role::kUser, "", drover::Duration(0)});
    FUZZ_CHECK(token.ok());
    w->token = *token;
    auto who = w->authority.Authenticate(w->token);
    FUZZ_CHECK(who.ok());
    auto session = w->authority.OpenSession(*who);
    FUZZ_CHECK(session.ok());
    w->cookie = session->cookie;
    w->csrf = session->csrf_token;
    return w;
  }();
  return *w;
}

std::string Replace(std::string s, std::string_view from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

std::string ToString(beast::string_view text) { return std::string(text.data(), text.size()); }
std::string Lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
  return s;
}
std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}
std::string Header(const drover::http::Request& req, const std::string& name) {
  auto it = req.headers.find(name);
  return it == req.headers.end() ? "" : it->second;
}

// The request as the server hands it to the REST handler (server.cc Dispatch).
std::optional<drover::http::Request> Parse(const std::string& bytes, bool tls) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.body_limit(1 << 20);
  parser.header_limit(64 << 10);
  drover::fuzz::InputStream stream(bytes, 64 << 10);
  beast::flat_buffer buffer;
  beast::error_code ec;
  bhttp::read(stream, buffer, parser, ec);
  if (ec || !parser.is_done()) return std::nullopt;
  const auto& m = parser.get();
  drover::http::Request req;
  req.method = ToString(m.method_string());
  const std::string target = ToString(m.target());
  req.path = target.substr(0, target.find('?'));
  for (const auto& field : m) {
    std::string value = ToString(field.value());
    auto [it, inserted] = req.headers.emplace(Lower(ToString(field.name_string())), value);
    if (!inserted) it->second += ", " + value;
  }
  req.body = m.body();
  req.remote = "10.0.0.1:40000";
  req.tls = tls;
  return req;
}

void CheckRefusal(const Status& s) {
  drover::http::Response r = drover::server::Refusal(s);
  FUZZ_CHECK(r.status >= 400 && r.status < 500);
  FUZZ_CHECK(nlohmann::json::accept(r.body));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)TheWorld();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  World& w = TheWorld();
  std::string bytes(drover::fuzz::AsText(data + 1, size - 1));
  bytes = Replace(Replace(Replace(std::move(bytes), "@TOKEN@", w.token), "@COOKIE@", w.cookie), "@CSRF@", w.csrf);
  auto parsed = Parse(bytes, (data[0] & 1) != 0);
  if (!parsed) return 0;
  const drover::http::Request& req = *parsed;
  using drover::server::Edge;

  const std::string host = Header(req, "host"), origin = Header(req, "origin");
  const std::string site = Lower(Trim(Header(req, "sec-fetch-site")));
  auto refusal = w.edge.BrowserRules(req);
  if (refusal) {
    FUZZ_CHECK(refusal->status == 403 || refusal->status == 415);
    FUZZ_CHECK(nlohmann::json::accept(refusal->body));
  } else {
    FUZZ_CHECK(site != "cross-site" && site != "same-site");
    if (!origin.empty()) {
      FUZZ_CHECK(!host.empty() && Lower(Trim(origin)) == (req.tls ? "https://" : "http://") + Lower(Trim(host)));
    }
    if (Edge::StateChanging(req.method) && !(req.method == "DELETE" && req.body.empty())) {
      const std::string type = Header(req, "content-type");
      FUZZ_CHECK(Lower(Trim(type.substr(0, type.find(';')))) == "application/json");
    }
  }

  const std::string cookie_header = Header(req, "cookie");
  const std::string cookie = Edge::CookieValue(cookie_header, drover::server::kSessionCookie);
  FUZZ_CHECK(cookie.find(';') == std::string::npos && cookie.size() <= cookie_header.size());

  auto who = w.edge.Authenticate(req);
  const std::string authorization = Header(req, "authorization");
  if (who.ok()) {
    if (!authorization.empty()) {
      const std::string value = Trim(authorization);
      FUZZ_CHECK(Lower(value.substr(0, 7)) == "bearer " && Trim(value.substr(7)) == w.token);
    } else {
      FUZZ_CHECK(cookie == w.cookie);
      if (Edge::StateChanging(req.method)) FUZZ_CHECK(Header(req, "x-csrf-token") == w.csrf);
    }
    FUZZ_CHECK(who->name == "fuzz" && who->tenant == "default" && who->source == req.remote);
  } else {
    FUZZ_CHECK(who.status().code() == Code::kUnauthenticated || who.status().code() == Code::kPermissionDenied);
    CheckRefusal(who.status());
  }
  return 0;
}
