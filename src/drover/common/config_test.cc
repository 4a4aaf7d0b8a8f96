#include "drover/common/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

namespace drover {
namespace {

struct Parsed {
  std::string listen = "127.0.0.1:8080";
  int simulate = 0;
};

// Parses argv into a fresh app that has --listen and --simulate.
std::string Parse(std::vector<std::string> args, Parsed* out) {
  CLI::App app("test");
  AddYamlConfig(app);
  app.add_option("--listen", out->listen);
  app.add_option("--simulate", out->simulate);
  BindEnvironment(app);
  std::vector<char*> argv;
  std::string prog = "drover";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/drover-config-test.yaml";
    unsetenv("DROVER_LISTEN");
    unsetenv("DROVER_SIMULATE");
  }
  void TearDown() override {
    unsetenv("DROVER_LISTEN");
    std::remove(path_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string path_;
};

TEST_F(ConfigTest, EnvName) { EXPECT_EQ(EnvNameFor("grpc-listen"), "DROVER_GRPC_LISTEN"); }

TEST_F(ConfigTest, PrecedenceFileThenEnvThenFlags) {
  Write("listen: 127.0.0.1:1\nsimulate: 4\n");
  Parsed p;
  ASSERT_EQ(Parse({"--config", path_}, &p), "");
  EXPECT_EQ(p.listen, "127.0.0.1:1");
  EXPECT_EQ(p.simulate, 4);

  setenv("DROVER_LISTEN", "127.0.0.1:2", 1);
  Parsed q;
  ASSERT_EQ(Parse({"--config", path_}, &q), "");
  EXPECT_EQ(q.listen, "127.0.0.1:2");  // env beats file

  Parsed r;
  ASSERT_EQ(Parse({"--config", path_, "--listen", "127.0.0.1:3"}, &r), "");
  EXPECT_EQ(r.listen, "127.0.0.1:3");  // flag beats env
  EXPECT_EQ(r.simulate, 4);
}

TEST_F(ConfigTest, UnknownKeyAndBadYamlAreErrors) {
  Write("lisen: 127.0.0.1:1\n");
  Parsed p;
  EXPECT_NE(Parse({"--config", path_}, &p), "");
  Write("listen: [unclosed\n");
  EXPECT_NE(Parse({"--config", path_}, &p), "");
  Write("simulate: many\n");
  EXPECT_NE(Parse({"--config", path_}, &p), "");
  // A key that is a list or a mapping is a usage error, not an exception
  // CLI11 lets through (tests/fuzz/regressions/config_yaml_fuzz).
  Write("[listen]: 127.0.0.1:1\n");
  EXPECT_NE(Parse({"--config", path_}, &p).find("line 1, column 1 is a list, not a name"), std::string::npos);
  Write("scheduler: {{queue: x}: fifo}\n");
  EXPECT_NE(Parse({"--config", path_}, &p).find("is a mapping, not a name"), std::string::npos);
}

// Parses argv into an app with the scheduler flags, like `drover server`.
std::string ParseScheduler(std::vector<std::string> args, SchedulerFlags* out) {
  CLI::App app("test");
  AddYamlConfig(app);
  AddSchedulerFlags(&app, out);
  BindEnvironment(app);
  std::vector<char*> argv;
  std::string prog = "drover";
  argv.push_back(prog.data());
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST_F(ConfigTest, SchedulerSectionSetsTheSchedulerFlags) {
  unsetenv("DROVER_QUEUE_POLICY");
  Write(
      "scheduler:\n  queue: fair-share\n  placement: spread\n  backfill: false\n  preemption: true\n"
      "  aging: 2m\n  preemption-grace: 5s\n  las-thresholds: 30m,5h\n"
      "tenants:\n  - name: a\n    weight: 2\n    guaranteed: {\"H100 80GB\": 8}\n    borrow-limit: 4\n  - name: b\n");
  SchedulerFlags f;
  ASSERT_EQ(ParseScheduler({"--config", path_}, &f), "");
  EXPECT_EQ(f.queue_policy, "fair-share");
  EXPECT_EQ(f.placement_policy, "spread");
  EXPECT_EQ(f.backfill, "false");
  EXPECT_EQ(f.preemption, "true");
  EXPECT_EQ(f.aging, "2m");
  EXPECT_EQ(f.preemption_grace, "5s");
  EXPECT_EQ(f.las_thresholds, "30m,5h");
  auto tenants = ParseTenants(f.tenants);
  ASSERT_TRUE(tenants.ok()) << tenants.status().ToString() << "\n" << f.tenants;
  ASSERT_EQ(tenants->size(), 2u);
  EXPECT_EQ((*tenants)[0].name, "a");
  EXPECT_EQ((*tenants)[0].weight, 2.0);
  EXPECT_EQ((*tenants)[0].guaranteed.at("H100 80GB"), 8);
  EXPECT_EQ((*tenants)[0].borrow_limit, 4);
  EXPECT_EQ((*tenants)[1].name, "b");
  EXPECT_EQ((*tenants)[1].weight, 1.0);
  EXPECT_EQ((*tenants)[1].borrow_limit, -1);

  // The environment beats the file, a flag beats both.
  setenv("DROVER_QUEUE_POLICY", "sjf", 1);
  SchedulerFlags g;
  ASSERT_EQ(ParseScheduler({"--config", path_}, &g), "");
  EXPECT_EQ(g.queue_policy, "sjf");
  SchedulerFlags h;
  ASSERT_EQ(ParseScheduler({"--config", path_, "--queue-policy", "las"}, &h), "");
  EXPECT_EQ(h.queue_policy, "las");
  unsetenv("DROVER_QUEUE_POLICY");
}

TEST_F(ConfigTest, UnknownSchedulerKeyIsAnErrorNamingIt) {
  Write("scheduler:\n  queue: fifo\n  quue: fifo\n");
  SchedulerFlags f;
  std::string err = ParseScheduler({"--config", path_}, &f);
  EXPECT_NE(err.find("scheduler.quue"), std::string::npos) << err;
  Write("scheduler: fifo\n");
  EXPECT_NE(ParseScheduler({"--config", path_}, &f).find("'scheduler' must be a mapping"), std::string::npos);
}

TEST_F(ConfigTest, BadTenantsNameTheKey) {
  struct Case {
    const char* yaml;
    const char* message_part;
  };
  const Case cases[] = {
      {"{name: a}", "tenants: must be a list"},
      {"[{weight: 2}]", "tenants[0].name: is missing"},
      {"[{name: A}]", "tenants[0].name"},
      {"[{name: a}, {name: a}]", "tenants[1].name: tenant 'a' is listed twice"},
      {"[{name: a, weight: heavy}]", "tenants[0].weight: 'heavy' is not a number"},
      {"[{name: a, weight: 0}]", "tenants[0].weight: 0 is outside"},
      {"[{name: a, guaranteed: 8}]", "tenants[0].guaranteed: must map GPU models"},
      {"[{name: a, guaranteed: {H100: -1}}]", "tenants[0].guaranteed[\"H100\"]: -1 is outside"},
      {"[{name: a, guaranteed: {H100: lots}}]", "is not a whole number"},
      {"[{name: a, borrow-limit: -2}]", "tenants[0].borrow-limit: -2 is outside"},
      {"[{name: a, colour: red}]", "tenants[0]: key 'colour' is unknown"},
      {"[unclosed", "tenants: not valid YAML"},
      {"[{[name]: a}]", "tenants[0]: a key is a list, not a name"},
      {"[{name: a, guaranteed: {{H100: 1}: 8}}]", "tenants[0].guaranteed: a key is a mapping"},
  };
  for (const Case& c : cases) {
    auto r = ParseTenants(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos) << c.yaml << ": " << r.status().message();
  }
  EXPECT_TRUE(ParseTenants("").ok());
}

TEST_F(ConfigTest, Durations) {
  EXPECT_EQ(ParseDurationMs("0").value(), 0);
  EXPECT_EQ(ParseDurationMs("500ms").value(), 500);
  EXPECT_EQ(ParseDurationMs("60s").value(), 60'000);
  EXPECT_EQ(ParseDurationMs("1h30m").value(), 5'400'000);
  EXPECT_EQ(ParseDurationMs("1.5h").value(), 5'400'000);
  EXPECT_EQ(ParseDurationMs("2d").value(), 172'800'000);
  for (const char* bad : {"", "5", "-5s", "5x", "s", "1h-2m", "99999d"}) {
    EXPECT_FALSE(ParseDurationMs(bad).ok()) << bad;
  }
  EXPECT_TRUE(ParseBool("yes").value());
  EXPECT_FALSE(ParseBool("off").value());
  EXPECT_FALSE(ParseBool("maybe").ok());
}

}  // namespace
}  // namespace drover
