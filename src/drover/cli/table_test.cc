#include "drover/cli/table.h"

#include <gtest/gtest.h>

#include <sstream>

namespace drover::cli {
namespace {

TEST(TableTest, PadsColumnsLikeKubectl) {
  Table t({"ID", "STATE", "NODE"});
  t.AddRow({"j-000001", "Running", "sim-1"});
  t.AddRow({"j-000002", "Pending", "<none>"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            "ID         STATE     NODE\n"
            "j-000001   Running   sim-1\n"
            "j-000002   Pending   <none>\n");
}

TEST(TableTest, AgeUnits) {
  const int64_t s = 1'000'000'000;
  EXPECT_EQ(Age(0, 100 * s), "<none>");
  EXPECT_EQ(Age(100 * s, 105 * s), "5s");
  EXPECT_EQ(Age(0 + s, 600 * s + s), "10m");
  EXPECT_EQ(Age(s, 3 * 3600 * s + s), "3h");
  EXPECT_EQ(Age(s, 3 * 86400 * s + s), "3d");
}

}  // namespace
}  // namespace drover::cli
