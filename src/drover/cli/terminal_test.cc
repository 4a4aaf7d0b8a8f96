#include "drover/cli/terminal.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace drover::cli {
namespace {

TEST(TerminalTest, EscapesC0AndDelLikeGoQuote) {
  EXPECT_EQ(EscapeTerminal("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(EscapeTerminal("\x1b]52;c;aGk=\x07"), "\\x1b]52;c;aGk=\\a");
  EXPECT_EQ(EscapeTerminal("row\rforged\b\b"), "row\\rforged\\b\\b");
  EXPECT_EQ(EscapeTerminal("a\nb\tc\v\f"), "a\\nb\\tc\\v\\f");
  EXPECT_EQ(EscapeTerminal(std::string("\0\x01\x7f", 3)), "\\x00\\x01\\x7f");
}

TEST(TerminalTest, EscapesC1AsCodePointsAndInvalidUtf8AsBytes) {
  EXPECT_EQ(EscapeTerminal("\xc2\x9b"
                           "31m"),
            "\\u009b31m");  // C1 CSI, as UTF-8
  EXPECT_EQ(EscapeTerminal("\x9b"
                           "31m"),
            "\\x9b31m");  // a raw 0x9b byte is not UTF-8
  EXPECT_EQ(EscapeTerminal("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(EscapeTerminal("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(EscapeTerminal("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(EscapeTerminal("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(EscapeTerminal("\xe2\x82"), "\\xe2\\x82");                    // cut short
  EXPECT_EQ(EscapeTerminal("abc\xe2\x80\xae"
                           "cba"),
            "abc\\u202ecba");                            // right-to-left override
  EXPECT_EQ(EscapeTerminal("\xe2\x80\xa8"), "\\u2028");  // line separator
}

TEST(TerminalTest, LeavesPrintableTextAlone) {
  for (const char* s : {"j-000001", "python train.py --lr=3e-4", "café ünïcode 日本語 🚀", "back\\slash \\x1b"}) {
    EXPECT_EQ(EscapeTerminal(s), s);
    EXPECT_EQ(EscapeTerminal(EscapeTerminal(s)), s);
  }
  // Idempotent on what it escaped: the output is printable.
  std::string once = EscapeTerminal("\x1b\xc2\x9b\xff\n");
  EXPECT_EQ(EscapeTerminal(once), once);
}

TEST(TerminalTest, LogEscaperKeepsCarriageReturnsAndJoinsSequencesCutBetweenChunks) {
  LogEscaper e;
  std::string out = e.Feed("epoch 1 10%\repoch 1 20%\n\x1b[31mred\x1b[0m caf\xc3");
  out += e.Feed("\xa9 \xe2\x80");
  out += e.Feed("\xae!");
  out += e.Feed("\xc2");
  out += e.Finish();  // a sequence the stream ended inside
  EXPECT_EQ(out, "epoch 1 10%\repoch 1 20%\n\\x1b[31mred\\x1b[0m café \\u202e!\\xc2");
}

TEST(TerminalTest, JsonForTerminalEscapesWhatJsonAllowsRaw) {
  nlohmann::json j = {{"command",
                       "a\x7f"
                       "b\xc2\x9b"
                       "c\xe2\x80\xae"
                       "d\x1b"
                       "é"}};
  std::string dumped = EscapeJsonForTerminal(j.dump());
  EXPECT_EQ(dumped, "{\"command\":\"a\\u007fb\\u009bc\\u202ed\\u001bé\"}");
  EXPECT_EQ(nlohmann::json::parse(dumped), j);  // the same document
}

TEST(TerminalTest, CutNeverSplitsAUtf8Sequence) {
  EXPECT_EQ(Cut("abcdef", 0), "abcdef");
  EXPECT_EQ(Cut("abcdef", 6), "abcdef");
  EXPECT_EQ(Cut("abcdefgh", 6), "abc...");
  EXPECT_EQ(Cut("ab\xc3\xa9"
                "defgh",
                6),
            "ab...");  // "é" would be cut in half
  EXPECT_EQ(Cut("abcdef", 2), "ab");
}

}  // namespace
}  // namespace drover::cli
