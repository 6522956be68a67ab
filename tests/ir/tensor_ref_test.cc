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

TEST(ResolveRef, WholeTensor) {
  RefSpan s = resolveRef("buf", {4, 6}, {}, std::nullopt);
  EXPECT_EQ(s.offset, 0);
  EXPECT_EQ(s.count, 24);
}

TEST(ResolveRef, SelectsAreRowMajor) {
  RefSpan row = resolveRef("buf[2]", {4, 6}, {2}, std::nullopt);
  EXPECT_EQ(row.offset, 12);
  EXPECT_EQ(row.count, 6);
  RefSpan element = resolveRef("buf[2][3]", {4, 6}, {2, 3}, std::nullopt);
  EXPECT_EQ(element.offset, 15);
  EXPECT_EQ(element.count, 1);
  RefSpan inner = resolveRef("t[1][2]", {2, 3, 5}, {1, 2}, std::nullopt);
  EXPECT_EQ(inner.offset, 1 * 15 + 2 * 5);
  EXPECT_EQ(inner.count, 5);
}

TEST(ResolveRef, RangesCoverWholeRowsOfTheNextDim) {
  RefSpan rows = resolveRef("buf[1:3]", {4, 6}, {}, std::make_pair(int64_t{1}, int64_t{3}));
  EXPECT_EQ(rows.offset, 6);
  EXPECT_EQ(rows.count, 12);
  RefSpan part = resolveRef("buf[1][2:5]", {4, 6}, {1}, std::make_pair(int64_t{2}, int64_t{5}));
  EXPECT_EQ(part.offset, 8);
  EXPECT_EQ(part.count, 3);
  RefSpan empty = resolveRef("buf[6:6]", {6}, {}, std::make_pair(int64_t{6}, int64_t{6}));
  EXPECT_EQ(empty.offset, 6);
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(resolveRef("z", {0, 5}, {}, std::nullopt).count, 0);
}

std::string programError(std::string_view text, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& select,
                         std::optional<std::pair<int64_t, int64_t>> range) {
  try {
    resolveRef(text, shape, select, range);
  } catch (const ProgramError& e) {
    return e.what();
  }
  ADD_FAILURE() << text << " resolved";
  return "";
}

TEST(ResolveRef, OutOfRangeIndexNamesIndexValueAndBound) {
  EXPECT_EQ(programError("buf[i]", {4, 6}, {4}, std::nullopt),
            "index 0 of 'buf[i]' is 4, outside [0, 4)");
  EXPECT_EQ(programError("buf[0][j]", {4, 6}, {0, -1}, std::nullopt),
            "index 1 of 'buf[0][j]' is -1, outside [0, 6)");
}

TEST(ResolveRef, TooManyIndicesAreRejected) {
  EXPECT_EQ(programError("v[0][0]", {4}, {0, 0}, std::nullopt),
            "'v[0][0]' has 2 indices but its tensor has 1 dimensions");
  EXPECT_TRUE(contains(programError("v[0][0:1]", {4}, {0}, std::make_pair(int64_t{0}, int64_t{1})),
                       "has 2 indices"));
}

TEST(ResolveRef, BadRangeNamesBothBoundsAndTheExtent) {
  std::string msg = programError("buf[a:b]", {4, 6}, {}, std::make_pair(int64_t{2}, int64_t{5}));
  EXPECT_TRUE(contains(msg, "range [2:5] of 'buf[a:b]' is outside [0, 4]")) << msg;
  EXPECT_TRUE(contains(programError("buf[a:b]", {4}, {}, std::make_pair(int64_t{3}, int64_t{1})),
                       "range [3:1]"));
  EXPECT_TRUE(contains(programError("buf[a:b]", {4}, {}, std::make_pair(int64_t{-1}, int64_t{1})),
                       "range [-1:1]"));
}

}  // namespace
}  // namespace hir
