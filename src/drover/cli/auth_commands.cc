// login, whoami, tokens create|list|revoke, audit [verify], ui, join-token.

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <iostream>

#include "drover/cli/client.h"
#include "drover/cli/commands.h"
#include "drover/cli/printers.h"
#include "drover/cli/table.h"
#include "drover/cli/terminal.h"
#include "drover/common/config.h"
#include "drover/common/files.h"
#include "drover/v1/api.grpc.pb.h"

namespace drover::cli {
namespace {

std::string Time(int64_t unix_nanos) {
  if (unix_nanos == 0) return "never";
  std::time_t t = static_cast<std::time_t>(unix_nanos / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int WhoAmI(const Common& c) {
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::Principal p;
  auto ctx = Context(c);
  if (grpc::Status s = stub->WhoAmI(ctx.get(), v1::WhoAmIRequest(), &p); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(p) << "\n";
    return 0;
  }
  std::cout << fmt::format("name: {}\ntenant: {}\nrole: {}\ntoken: {}\n", EscapeTerminal(p.name()),
                           EscapeTerminal(p.tenant()), EscapeTerminal(p.role()), EscapeTerminal(p.token_id()));
  return 0;
}

// Reads a token from the terminal or a pipe, checks it with the server and
// keeps it (mode 0600) where the CLI looks.
int Login(const Common& c) {
  std::string token;
  if (::isatty(0)) std::cerr << "paste a drover API token (drv_...): ";
  std::getline(std::cin, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) return Usage("no token given on standard input");
  ::setenv("DROVER_TOKEN", token.c_str(), 1);
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::Principal p;
  auto ctx = Context(c);
  if (grpc::Status s = stub->WhoAmI(ctx.get(), v1::WhoAmIRequest(), &p); !s.ok()) return Fail(s, c);
  std::string path = LoginTokenPath();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (Status w = WriteFileAtomic(path, token + "\n", 0600); !w.ok()) {
    std::cerr << "error: " << EscapeTerminal(w.message()) << "\n";
    return kExitFailure;
  }
  std::cout << fmt::format("logged in as {} ({} of tenant {}); token kept in {}\n", EscapeTerminal(p.name()),
                           EscapeTerminal(p.role()), EscapeTerminal(p.tenant()), EscapeTerminal(path));
  return 0;
}

struct TokenArgs {
  std::string name, tenant, role = "user", ttl, id;
  int64_t rpm = 0, tpm = 0;  // the gateway's limits for the key
};

int TokensCreate(const TokenArgs& a, const Common& c) {
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::CreateTokenRequest req;
  req.set_name(a.name);
  req.set_tenant(a.tenant);
  req.set_role(a.role);
  req.set_ttl(a.ttl);
  req.set_requests_per_minute(a.rpm);
  req.set_tokens_per_minute(a.tpm);
  v1::CreateTokenResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->CreateToken(ctx.get(), req, &resp); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  // The token alone on stdout (scripts capture it); the rest on stderr.
  std::cerr << fmt::format("token {} ({} of tenant {}, expires {}); shown once, keep it safe:\n",
                           EscapeTerminal(resp.info().id()), EscapeTerminal(resp.info().role()),
                           EscapeTerminal(resp.info().tenant()), Time(resp.info().expires_unix_nanos()));
  std::cout << EscapeTerminal(resp.token()) << "\n";
  return 0;
}

int TokensList(const Common& c) {
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::ListTokensResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->ListTokens(ctx.get(), v1::ListTokensRequest(), &resp); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  Table t({"ID", "NAME", "TENANT", "ROLE", "CREATED", "EXPIRES", "STATE"});
  for (const v1::TokenInfo& i : resp.tokens()) {
    bool expired = i.expires_unix_nanos() != 0 && i.expires_unix_nanos() <= NowNanos();
    t.AddRow({i.id(), i.name(), i.tenant(), i.role() + (i.node().empty() ? "" : ":" + i.node()),
              Time(i.created_unix_nanos()), Time(i.expires_unix_nanos()),
              i.revoked() ? "revoked"
              : expired   ? "expired"
                          : "active"});
  }
  t.Print(std::cout);
  return 0;
}

int TokensRevoke(const std::string& id, const Common& c) {
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::RevokeTokenRequest req;
  req.set_id(id);
  v1::TokenInfo resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->RevokeToken(ctx.get(), req, &resp); !s.ok()) return Fail(s, c);
  std::cout << fmt::format("revoked token {} ({})\n", EscapeTerminal(resp.id()), EscapeTerminal(resp.name()));
  return 0;
}

int Audit(const std::string& since, const Common& c) {
  auto stub = v1::AuditService::NewStub(Channel(c));
  v1::ListAuditRequest req;
  if (!since.empty()) {
    auto ms = ParseDurationMs(since);
    if (!ms.ok()) return Usage("--since: " + ms.status().message());
    req.set_since_unix_nanos(NowNanos() - *ms * 1'000'000);
  }
  v1::ListAuditResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->List(ctx.get(), req, &resp); !s.ok()) return Fail(s, c);
  if (c.output == "json") {
    std::cout << Json(resp) << "\n";
    return 0;
  }
  PrintAuditTable(resp, std::cout);
  return 0;
}

int AuditVerify(const std::string& expect_head, const Common& c) {
  auto stub = v1::AuditService::NewStub(Channel(c));
  v1::VerifyAuditResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->Verify(ctx.get(), v1::VerifyAuditRequest(), &resp); !s.ok()) return Fail(s, c);
  if (!resp.ok()) {
    std::cout << fmt::format("audit log BROKEN at entry {}: {}\n", resp.bad_seq(), EscapeTerminal(resp.reason()));
    return kExitFailure;
  }
  if (!expect_head.empty() && expect_head != resp.head_hash()) {
    std::cout << fmt::format("audit log chain is intact ({} entries) but its head {} is not the expected {}\n",
                             resp.entries(), EscapeTerminal(resp.head_hash()), EscapeTerminal(expect_head));
    return kExitFailure;
  }
  std::cout << fmt::format("audit log intact: {} entries, head {}\n", resp.entries(),
                           EscapeTerminal(Or(resp.head_hash())));
  return 0;
}

int Ui(const Common& c) {
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::CreateLoginCodeResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->CreateLoginCode(ctx.get(), v1::CreateLoginCodeRequest(), &resp); !s.ok())
    return Fail(s, c);
  std::cout << EscapeTerminal(resp.url()) << "\n";
  return 0;
}

int JoinToken(const std::string& node, const std::string& ttl, const Common& c) {
  auto stub = v1::AuthService::NewStub(Channel(c));
  v1::CreateJoinTokenRequest req;
  req.set_node(node);
  req.set_ttl(ttl);
  v1::CreateJoinTokenResponse resp;
  auto ctx = Context(c);
  if (grpc::Status s = stub->CreateJoinToken(ctx.get(), req, &resp); !s.ok()) return Fail(s, c);
  std::cout << EscapeTerminal(resp.join_token()) << "\n";
  return 0;
}

}  // namespace

void PrintAuditTable(const v1::ListAuditResponse& resp, std::ostream& out) {
  Table t({"SEQ", "TIME", "WHO", "TENANT", "ROLE", "ACTION", "TARGET", "RESULT", "SOURCE"});
  for (const v1::AuditEntry& e : resp.entries()) {
    t.AddRow({std::to_string(e.seq()), Time(e.time_unix_nanos()), e.who(), Or(e.tenant()), Or(e.role()), e.action(),
              Or(e.target()), e.result(), e.source()});
  }
  t.Print(out);
}

void AddAuthCommands(CLI::App& app, const Runner& run, const std::shared_ptr<Common>& common) {
  CLI::App* login = app.add_subcommand("login", "check a token read from standard input and keep it for the CLI");
  AddCommon(login, common.get(), false);
  login->callback(run([common] { return Login(*common); }));

  CLI::App* whoami = app.add_subcommand("whoami", "the name, tenant and role of the CLI's token");
  AddCommon(whoami, common.get(), true);
  whoami->callback(run([common] { return WhoAmI(*common); }));

  auto ta = std::make_shared<TokenArgs>();
  CLI::App* tokens = app.add_subcommand("tokens", "API tokens: create, list, revoke");
  tokens->require_subcommand(1);
  CLI::App* create = tokens->add_subcommand("create", "create a token (printed once)");
  AddCommon(create, common.get(), true);
  create->add_option("name", ta->name, "what the token is for (a person, a pipeline)")->required();
  create->add_option("--tenant", ta->tenant, "tenant it acts for (default: yours)");
  create
      ->add_option("--role", ta->role,
                   "admin, tenant-admin, user, viewer or gateway (an OpenAI gateway apart from the servers)")
      ->capture_default_str();
  create->add_option("--ttl", ta->ttl, "lifetime, e.g. 30d or 12h (default: until revoked)");
  create->add_option("--requests-per-minute", ta->rpm, "gateway: requests per minute with this key (0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  create
      ->add_option("--tokens-per-minute", ta->tpm,
                   "gateway: prompt and completion tokens per minute with this key (0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  create->callback(run([ta, common] { return TokensCreate(*ta, *common); }));
  CLI::App* list = tokens->add_subcommand("list", "tokens you may see");
  AddCommon(list, common.get(), true);
  list->callback(run([common] { return TokensList(*common); }));
  CLI::App* revoke = tokens->add_subcommand("revoke", "revoke a token by id");
  AddCommon(revoke, common.get(), false);
  revoke->add_option("id", ta->id, "token id (16 hex digits)")->required();
  revoke->callback(run([ta, common] { return TokensRevoke(ta->id, *common); }));

  auto since = std::make_shared<std::string>();
  auto head = std::make_shared<std::string>();
  CLI::App* audit = app.add_subcommand("audit", "admin: the audit log of state-changing calls");
  AddCommon(audit, common.get(), true);
  audit->add_option("--since", *since, "only entries newer than this, e.g. 1h");
  CLI::App* verify =
      audit->add_subcommand("verify", "check the hash chain: exit 1 when an entry was edited, dropped or reordered");
  AddCommon(verify, common.get(), false);
  verify->add_option("--expect-head", *head, "the head hash recorded earlier (detects a rewritten chain)");
  // One callback for both: CLI11 runs the parent's after the subcommand's.
  audit->callback(run([since, head, common, verify] {
    return verify->parsed() ? AuditVerify(*head, *common) : Audit(*since, *common);
  }));

  CLI::App* ui = app.add_subcommand("ui", "print a one-time dashboard login link");
  AddCommon(ui, common.get(), false);
  ui->callback(run([common] { return Ui(*common); }));

  auto node = std::make_shared<std::string>();
  auto ttl = std::make_shared<std::string>("1h");
  CLI::App* join = app.add_subcommand("join-token", "admin: a one-time token for `drover agent --join-token`");
  AddCommon(join, common.get(), false);
  join->add_option("--node", *node, "only this node name may join with it");
  join->add_option("--ttl", *ttl, "how long it may be used")->capture_default_str();
  join->callback(run([node, ttl, common] { return JoinToken(*node, *ttl, *common); }));
}

}  // namespace drover::cli
