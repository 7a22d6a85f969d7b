#include "common/text.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(Text, Utf8IsCheckedByTheStandardsRules) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("gr\xC3\xBC\xC3\x9F e \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF\xFE"));          // the red team's path
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("ab\xE2\x82"));        // cut short
  EXPECT_FALSE(IsValidUtf8("\x80"));              // a lone continuation byte
}

TEST(Text, ControlCharactersAreFoundC0DelAndC1) {
  EXPECT_FALSE(HasControlCharacters("node-1 \xC3\xA9"));
  EXPECT_TRUE(HasControlCharacters(std::string("a\0b", 3)));
  EXPECT_TRUE(HasControlCharacters("\x1b[31mred"));
  EXPECT_TRUE(HasControlCharacters("a\x7f"));
  EXPECT_TRUE(
      HasControlCharacters("\xC2\x9B"
                           "31m"));  // CSI as a C1 control
  EXPECT_FALSE(IsCleanText("x\ny"));
  EXPECT_TRUE(IsCleanText("x y"));
}

// The bidirectional formatting characters reorder what a terminal shows ("Trojan source"): a job
// named "a\u202eb" printed raw turned the rest of `tessera jobs`'s line around. They count as
// control characters, and are shown escaped.
TEST(Text, BidiFormattingCharactersAreControlsAndShownEscaped) {
  for (const char* bidi : {"\xD8\x9C", "\xE2\x80\x8E", "\xE2\x80\x8F", "\xE2\x80\xAA",
                           "\xE2\x80\xAE", "\xE2\x81\xA6", "\xE2\x81\xA9"}) {
    EXPECT_TRUE(HasControlCharacters(std::string("a") + bidi + "b")) << bidi;
    EXPECT_FALSE(IsCleanText(std::string("a") + bidi + "b")) << bidi;
  }
  EXPECT_EQ(EscapeForTerminal("a\xE2\x80\xAE"
                              "b"),
            "a\\u202eb");
  EXPECT_EQ(EscapeForTerminal("\xE2\x81\xA6x\xE2\x81\xA9"), "\\u2066x\\u2069");
  EXPECT_EQ(EscapeForTerminal("\xD8\x9C"), "\\u061c");
  // Their neighbours are text: an en dash (U+2013), a euro sign (U+20AC), Arabic letters.
  EXPECT_FALSE(
      HasControlCharacters("a\xE2\x80\x93"
                           "b \xE2\x82\xAC \xD8\xA8"));
  EXPECT_EQ(EscapeForTerminal("a\xE2\x80\x93"
                              "b"),
            "a\xE2\x80\x93"
            "b");
}

TEST(Text, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(ToValidUtf8("/v1/jobs/\xFF\xFE"), "/v1/jobs/\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ToValidUtf8("\xE2\x82\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(ToValidUtf8("a\xE2\x82"), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(ToValidUtf8("\xF0\x9F\x98")));
}

TEST(Text, TerminalEscapesAreMadeVisible) {
  EXPECT_EQ(EscapeForTerminal("n1\x1b]0;owned\x07"), "n1\\x1b]0;owned\\x07");
  EXPECT_EQ(EscapeForTerminal("a\xC2\x9B"
                              "2J"),
            "a\\u009b2J");
  EXPECT_EQ(EscapeForTerminal("\xFF"), "\xEF\xBF\xBD");
  EXPECT_EQ(EscapeForTerminal("caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(Text, EscapeCharsWritesEachNamedCharacterAsItsEscape) {
  EXPECT_EQ(EscapeChars("a<b>&\"c\"", {{'<', "&lt;"}, {'>', "&gt;"}, {'&', "&amp;"}}),
            "a&lt;b&gt;&amp;\"c\"");
  EXPECT_EQ(EscapeChars("x\\y\"z\n", {{'\\', "\\\\"}, {'"', "\\\""}, {'\n', "\\n"}}),
            "x\\\\y\\\"z\\n");
  EXPECT_EQ(EscapeChars("", {{'<', "&lt;"}}), "");
  EXPECT_EQ(EscapeChars("plain", {}), "plain");
}

// What anyone may send is recorded cut: whole up to the limit, then its first bytes (never half
// a UTF-8 sequence) and its length.
TEST(CutForRecord, KeepsShortTextAndCutsLongTextSayingItsLength) {
  EXPECT_EQ(CutForRecord("/v1/jobs/j-1"), "/v1/jobs/j-1");
  EXPECT_EQ(CutForRecord(std::string(256, 'a')), std::string(256, 'a'));
  EXPECT_EQ(CutForRecord(std::string(300, 'a')), std::string(256, 'a') + "...(300 bytes)");
  // "é" is two bytes: a cut at 3 would split the second one.
  EXPECT_EQ(CutForRecord("a\u00e9\u00e9b", 4), "a\u00e9...(6 bytes)");
}

// The red team: a job's output reached the terminal of whoever read it with `tessera job`
// as it was, escapes and all (an OSC 52 clipboard write, a screen clear). On a terminal its
// controls are shown escaped, its lines and tabs kept, and a character cut between two ranges
// of output is whole once the next one comes.
TEST(Text, AJobsOutputReachesATerminalWithItsControlsEscapedAndItsLinesKept) {
  std::string carry;
  EXPECT_EQ(EscapeOutputForTerminal("hello\033]52;c;ZWNobw==\007\033[2Jworld\n\tnext\r\n", &carry),
            "hello\\x1b]52;c;ZWNobw==\\x07\\x1b[2Jworld\n\tnext\\x0d\n");
  EXPECT_EQ(carry, "");
  EXPECT_EQ(EscapeOutputForTerminal("caf\xC3", &carry), "caf");
  EXPECT_EQ(carry, "\xC3");
  EXPECT_EQ(EscapeOutputForTerminal("\xA9 \xE2\x80", &carry), "\xC3\xA9 ");
  EXPECT_EQ(EscapeOutputForTerminal("\xAE!", &carry), "\\u202e!");  // a bidi override, escaped
  EXPECT_EQ(EscapeOutputForTerminal("\xC3", &carry), "");
  EXPECT_EQ(EscapeOutputForTerminal("", &carry), "\xEF\xBF\xBD");  // flushed: not UTF-8
}

}  // namespace
}  // namespace tessera
