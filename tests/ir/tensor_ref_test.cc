#include <hostir/tensor_ref.h>

#include <gtest/gtest.h>

#include "common/check.h"

namespace hir {
namespace {

TensorRef parse(std::string_view text) { return TensorRef::parse(text, "/body/0/tensor"); }

std::string parseError(std::string_view text) {
  try {
    parse(text);
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pointer(), "/body/0/tensor") << text;
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' parsed";
  return "";
}

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

TEST(TensorRef, ParsesAPlainName) {
  TensorRef r = parse("buf");
  EXPECT_EQ(r.name, "buf");
  EXPECT_TRUE(r.select.empty());
  EXPECT_FALSE(r.range.has_value());
  EXPECT_EQ(r.str(), "buf");
}

TEST(TensorRef, ParsesSelectsAlongLeadingDims) {
  TensorRef r = parse("buf[(rank - i + world) % world][j]");
  EXPECT_EQ(r.name, "buf");
  ASSERT_EQ(r.select.size(), 2u);
  EXPECT_EQ(r.select[0], Expr("(rank - i + world) % world"));
  EXPECT_EQ(r.select[1], Expr("j"));
  EXPECT_FALSE(r.range.has_value());
}

TEST(TensorRef, ParsesARangeAfterSelects) {
  TensorRef r = parse(" x_1 [ rank ] [0 : n / 2] ");
  EXPECT_EQ(r.name, "x_1");
  ASSERT_EQ(r.select.size(), 1u);
  EXPECT_EQ(r.select[0], Expr("rank"));
  ASSERT_TRUE(r.range.has_value());
  EXPECT_EQ(r.range->first, Expr(0));
  EXPECT_EQ(r.range->second, Expr("n / 2"));
  EXPECT_EQ(r.str(), "x_1[rank][0:n / 2]");
}

TEST(TensorRef, ColonInsideParenthesesIsNotARange) {
  // Expressions have no ':' themselves, but parentheses guard the split.
  TensorRef r = parse("buf[(a + 1) % 2:min(b, c)]");
  ASSERT_TRUE(r.range.has_value());
  EXPECT_EQ(r.range->first, Expr("(a + 1) % 2"));
  EXPECT_EQ(r.range->second, Expr("min(b, c)"));
}

TEST(TensorRef, StrRoundTrips) {
  for (const char* text : {"a", "a[0]", "a[-1]", "a[i][j][k]", "a[0:n]", "a[r][i * 2:(i + 1) * 2]",
                           "a[(r - 1) % w]", "a[1 - (2 - 3)]"}) {
    TensorRef r = parse(text);
    EXPECT_EQ(r.str(), text);
    EXPECT_EQ(parse(r.str()), r) << text;
  }
}

TEST(TensorRef, RejectsARangeThatIsNotLast) {
  EXPECT_EQ(parseError("buf[0:2][1]"),
            "/body/0/tensor: tensor reference 'buf[0:2][1]': a range must be the last index: "
            "'buf[0:2][1]' is not contiguous");
  EXPECT_TRUE(contains(parseError("buf[0:2][0:1]"), "a range must be the last index"));
}

TEST(TensorRef, RejectsMalformedReferences) {
  EXPECT_TRUE(contains(parseError(""), "column 1: expected a tensor name ([A-Za-z_][A-Za-z0-9_]*), found the end"));
  EXPECT_TRUE(contains(parseError("1buf[0]"),
                       "column 1: expected a tensor name ([A-Za-z_][A-Za-z0-9_]*), found '1buf'"));
  EXPECT_TRUE(contains(parseError("b-c[0]"), "found 'b-c'"));
  EXPECT_TRUE(contains(parseError("buf["), "column 4: '[' is never closed"));
  EXPECT_TRUE(contains(parseError("buf[]"), "column 5: expected an index expression, found ']'"));
  EXPECT_TRUE(contains(parseError("buf[:2]"), "column 5: expected an index expression, found ':'"));
  EXPECT_TRUE(contains(parseError("buf[1:]"), "column 7: expected an index expression, found ']'"));
  EXPECT_TRUE(contains(parseError("buf[1:2:3]"), "a range has one ':'"));
  EXPECT_TRUE(contains(parseError("buf x"), "column 5: expected '[' or the end of the reference, found 'x'"));
  EXPECT_TRUE(contains(parseError("buf[0]]"), "found ']'"));
}

TEST(TensorRef, BadIndexExpressionIsAParseErrorAtTheSamePointer) {
  std::string msg = parseError("buf[rank +]");
  EXPECT_TRUE(contains(msg, "expression 'rank +': column 7: expected an operand")) << msg;
}

}  // namespace
}  // namespace hir
