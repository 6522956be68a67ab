// What a program or command line writes, as hostir prints it
// (common/text.h): nothing it prints can move the cursor, clear a line, hide
// text or end a message early.
#include "common/text.h"

#include <gtest/gtest.h>

#include <string>

#include <hostir/error.h>

namespace hir {
namespace {

using namespace std::string_literals;

TEST(Text, ControlCharactersAndBadBytesPrintAsEscapes) {
  EXPECT_EQ(printable("a\x1b[2K\rb"), "a\\x1b[2K\\rb");
  EXPECT_EQ(printable("x\0y"s), "x\\0y");
  EXPECT_EQ(printable("l1\nl2\tz\\"), "l1\\nl2\\tz\\\\");
  EXPECT_EQ(printable("\x7f\xff\xc3"), "\\x7f\\xff\\xc3");      // DEL, not UTF-8, cut short
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                // overlong '/'
  EXPECT_EQ(printable("\xc2\x85"), "\\u0085");                  // C1 next-line
  EXPECT_EQ(printable("abc\xe2\x80\xae" "cba"), "abc\\u202ecba");  // right-to-left override
  EXPECT_EQ(printable("gr\xc3\xbc\xc3\x9f \xe2\x86\x92 \xf0\x9f\x99\x82"),
            "gr\xc3\xbc\xc3\x9f \xe2\x86\x92 \xf0\x9f\x99\x82");  // text stays text
  // A message of several lines keeps its lines, tabs and backslashes.
  EXPECT_EQ(printable("a\n\tb\\c\x1b", true), "a\n\tb\\c\\x1b");
}

TEST(Text, QuotedEscapesItsQuoteAndCutsLongText) {
  EXPECT_EQ(quotedText("it's"), "'it\\'s'");
  EXPECT_EQ(quotedText("ok\nhir: ok"), "'ok\\nhir: ok'");
  EXPECT_EQ(quotedText(std::string(100, 'x'), 8), "'xxxxxxxx'...");
  EXPECT_EQ(quotedText("\xe2\x86\x92\xe2\x86\x92\xe2\x86\x92", 2), "'\xe2\x86\x92\xe2\x86\x92'...");
}

TEST(Text, FreeTextIsPrintableAndBounded) {
  EXPECT_EQ(textProblem("allreduce (bench) \xe2\x86\x92 v2"), std::nullopt);
  EXPECT_EQ(textProblem("ok\x1b[2K"), "it has \\x1b at byte 2");
  EXPECT_EQ(textProblem("a\nb"), "it has \\n at byte 1");
  EXPECT_EQ(textProblem(std::string(257, 'n')), "it is 257 bytes long, more than 256");
  EXPECT_EQ(textProblem("back\\slash"), std::nullopt);
}

// Every error message is printable: the ones that quote a user's text
// whole, and any other through the Error base.
TEST(Text, AnErrorMessageCannotHoldControlCharactersOrANul) {
  const UsageError e("unknown thing 'a\x1b]0;title\x07' here\0 and the reason"s);
  EXPECT_EQ(std::string(e.what()), "unknown thing 'a\\x1b]0;title\\x07' here\\0 and the reason");
  const ParseError p("/body/a\r", "bad\nsecond line");
  EXPECT_EQ(std::string(p.what()), "/body/a\\r: bad\nsecond line");
}

}  // namespace
}  // namespace hir
