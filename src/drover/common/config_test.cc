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
}

}  // namespace
}  // namespace drover
