#include "drover/runtime/dynamic_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace drover::runtime {
namespace {

using ::testing::HasSubstr;

TEST(DynamicLibraryTest, OpensLibmAndCallsCos) {
  auto library = DynamicLibrary::Open({"libm.so.6"});
  ASSERT_TRUE(library.ok()) << library.status().ToString();
  EXPECT_EQ((*library)->name(), "libm.so.6");
  auto cos = (*library)->Symbol<double(double)>("cos");
  ASSERT_TRUE(cos.ok()) << cos.status().ToString();
  EXPECT_DOUBLE_EQ((*cos)(0.0), 1.0);
}

TEST(DynamicLibraryTest, FallsBackToTheNextCandidate) {
  auto library = DynamicLibrary::Open({"libdrover-does-not-exist.so.1", "libm.so.6"});
  ASSERT_TRUE(library.ok()) << library.status().ToString();
  EXPECT_EQ((*library)->name(), "libm.so.6");
}

TEST(DynamicLibraryTest, MissingLibraryNamesEveryCandidate) {
  auto library = DynamicLibrary::Open({"libdrover-missing-a.so.1", "libdrover-missing-b.so"});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), Code::kUnavailable);
  EXPECT_THAT(library.status().message(), HasSubstr("'libdrover-missing-a.so.1'"));
  EXPECT_THAT(library.status().message(), HasSubstr("'libdrover-missing-b.so'"));
  // The dlerror text of the last attempt says why.
  EXPECT_THAT(library.status().message(), HasSubstr("libdrover-missing-b.so"));
}

TEST(DynamicLibraryTest, NoCandidatesIsAnError) {
  auto library = DynamicLibrary::Open({});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), Code::kInvalidArgument);
}

TEST(DynamicLibraryTest, MissingSymbolNamesTheSymbol) {
  auto library = DynamicLibrary::Open({"libm.so.6"});
  ASSERT_TRUE(library.ok()) << library.status().ToString();
  auto missing = (*library)->Symbol<void()>("drover_no_such_symbol");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("drover_no_such_symbol"));
  EXPECT_THAT(missing.status().message(), HasSubstr("libm.so.6"));
}

}  // namespace
}  // namespace drover::runtime
