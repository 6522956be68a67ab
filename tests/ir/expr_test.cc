#include <hostir/expr.h>

#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <random>

#include "common/check.h"

namespace hir {
namespace {

using Vars = std::map<std::string, int64_t, std::less<>>;

int64_t eval(std::string_view text, const Vars& vars = {}) {
  return Expr::parse(text, "/test").evaluate([&](std::string_view name) -> std::optional<int64_t> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

Expr var(const char* name) { return Expr::var(name); }
Expr bin(ExprOp op, Expr a, Expr b) { return Expr::make(op, {std::move(a), std::move(b)}); }
Expr un(ExprOp op, Expr a) { return Expr::make(op, {std::move(a)}); }

// The ParseError of parsing `text` at pointer /p.
ParseError parseError(std::string_view text) {
  try {
    Expr::parse(text, "/p");
  } catch (const ParseError& e) {
    return e;
  }
  ADD_FAILURE() << "'" << text << "' parsed";
  return ParseError("", "");
}

std::string programError(std::string_view text, const Vars& vars = {}) {
  try {
    eval(text, vars);
  } catch (const ProgramError& e) {
    return e.what();
  }
  ADD_FAILURE() << "'" << text << "' evaluated";
  return "";
}

TEST(Expr, PrecedenceFollowsC) {
  EXPECT_EQ(Expr("1 + 2 * 3"), bin(ExprOp::Add, 1, bin(ExprOp::Mul, 2, 3)));
  EXPECT_EQ(Expr("a - b - c"), bin(ExprOp::Sub, bin(ExprOp::Sub, var("a"), var("b")), var("c")));
  EXPECT_EQ(eval("1 + 2 * 3"), 7);
  EXPECT_EQ(eval("(1 + 2) * 3"), 9);
  EXPECT_EQ(eval("1 << 2 + 1"), 8);          // + binds tighter than <<
  EXPECT_EQ(eval("1 < 2 == 1"), 1);          // < binds tighter than ==
  EXPECT_EQ(eval("6 & 3 ^ 1"), 3);           // (6 & 3) ^ 1
  EXPECT_EQ(eval("4 | 6 ^ 3"), 5 | 4);       // 4 | (6 ^ 3) = 4 | 5
  EXPECT_EQ(eval("1 || 0 && 0"), 1);         // && binds tighter than ||
  EXPECT_EQ(eval("2 == 2 & 1"), 1);          // (2 == 2) & 1
  EXPECT_EQ(eval("-2 * -3"), 6);
  EXPECT_EQ(eval("10 - 4 - 3"), 3);          // left-associative
  EXPECT_EQ(eval("64 / 4 / 2"), 8);
  EXPECT_EQ(eval("7 % 4 * 2"), 6);
  EXPECT_EQ(eval("!0 + ~0"), 0);             // 1 + -1
}

TEST(Expr, DivisionFloorsAndModuloTakesTheDivisorsSign) {
  EXPECT_EQ(eval("7 / 2"), 3);
  EXPECT_EQ(eval("-7 / 2"), -4);
  EXPECT_EQ(eval("7 / -2"), -4);
  EXPECT_EQ(eval("-7 / -2"), 3);
  EXPECT_EQ(eval("-8 / 2"), -4);
  EXPECT_EQ(eval("7 % 3"), 1);
  EXPECT_EQ(eval("-7 % 3"), 2);
  EXPECT_EQ(eval("7 % -3"), -2);
  EXPECT_EQ(eval("-7 % -3"), -1);
  EXPECT_EQ(eval("-6 % 3"), 0);
  // The ring's left neighbour on rank 0.
  EXPECT_EQ(eval("(rank - 1) % world", {{"rank", 0}, {"world", 4}}), 3);
  for (int64_t a = -9; a <= 9; ++a)
    for (int64_t b : {-4, -3, -1, 1, 2, 5}) {
      int64_t q = applyExprOp(ExprOp::Div, a, b), r = applyExprOp(ExprOp::Mod, a, b);
      EXPECT_EQ(q * b + r, a) << a << " / " << b;
      EXPECT_TRUE(b > 0 ? (r >= 0 && r < b) : (r <= 0 && r > b)) << a << " % " << b;
    }
}

TEST(Expr, Int64ExtremesDoNotCrash) {
  EXPECT_EQ(eval("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(eval("9223372036854775807"), INT64_MAX);
  EXPECT_NE(programError("-9223372036854775808 / -1").find("integer overflow"), std::string::npos);
  EXPECT_EQ(eval("-9223372036854775808 % -1"), 0);
  EXPECT_NE(programError("9223372036854775807 + 1").find("integer overflow"), std::string::npos);
  EXPECT_NE(programError("-(-9223372036854775808)").find("integer overflow"), std::string::npos);
  EXPECT_NE(programError("4294967296 * 4294967296").find("integer overflow"), std::string::npos);
}

TEST(Expr, MinAndMax) {
  EXPECT_EQ(eval("min(3, -4)"), -4);
  EXPECT_EQ(eval("max(3, -4)"), 3);
  EXPECT_EQ(eval("max(min(a, 10), 0) + 1", {{"a", 42}}), 11);
  EXPECT_EQ(Expr("min(a, b + 1)").str(), "min(a, b + 1)");
}

TEST(Expr, BitwiseOperatorsGiveRecursiveDoublingPartners) {
  for (int64_t rank = 0; rank < 8; ++rank)
    for (int64_t k = 0; k < 3; ++k)
      EXPECT_EQ(eval("rank ^ (1 << k)", {{"rank", rank}, {"k", k}}), rank ^ (int64_t{1} << k));
  EXPECT_EQ(eval("12 & 10"), 8);
  EXPECT_EQ(eval("12 | 3"), 15);
  EXPECT_EQ(eval("~5"), -6);
  EXPECT_EQ(eval("-16 >> 2"), -4);  // arithmetic shift
  EXPECT_EQ(eval("1 << 63"), INT64_MIN);
}

TEST(Expr, ComparisonsAndLogicGiveZeroOrOne) {
  EXPECT_EQ(eval("3 < 4"), 1);
  EXPECT_EQ(eval("3 <= 3"), 1);
  EXPECT_EQ(eval("3 > 4"), 0);
  EXPECT_EQ(eval("4 >= 5"), 0);
  EXPECT_EQ(eval("2 == 2"), 1);
  EXPECT_EQ(eval("2 != 2"), 0);
  EXPECT_EQ(eval("5 && 7"), 1);
  EXPECT_EQ(eval("5 && 0"), 0);
  EXPECT_EQ(eval("0 || -3"), 1);
  EXPECT_EQ(eval("!7"), 0);
  EXPECT_EQ(eval("!0"), 1);
}

TEST(Expr, LogicShortCircuitsAsInC) {
  Vars vars{{"i", 0}, {"n", 8}};
  EXPECT_EQ(eval("i > 0 && n / i > 1", vars), 0);
  EXPECT_EQ(eval("i == 0 || n / i > 1", vars), 1);
  auto slot = [](std::string_view name) { return name == "i" ? 0 : name == "n" ? 1 : -1; };
  int64_t slots[] = {0, 8};
  EXPECT_EQ(CompiledExpr::compile(Expr("i > 0 && n / i > 1"), slot).eval(slots), 0);
  EXPECT_EQ(CompiledExpr::compile(Expr("i == 0 || n / i > 1"), slot).eval(slots), 1);
  slots[0] = 2;
  EXPECT_EQ(CompiledExpr::compile(Expr("i > 0 && n / i"), slot).eval(slots), 1);  // 0/1
}

TEST(Expr, SyntaxErrorsNameTheColumnAndWhatWasExpected) {
  ParseError e = parseError("rank +");
  EXPECT_EQ(e.pointer(), "/p");
  EXPECT_STREQ(e.what(),
               "/p: expression 'rank +': column 7: expected an operand, found end of expression");
  EXPECT_NE(std::string(parseError("(rank + 1").what())
                .find("column 10: expected ')', found end of expression"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("rank $ 1").what()).find("column 6: expected an operator or end "
                                                            "of expression, found '$'"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("min(1)").what()).find("column 6: expected ',', found ')'"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("min + 1").what()).find("column 5: expected '(' after 'min'"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("").what()).find("column 1: expected an operand"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("a b").what()).find("column 3: expected an operator"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("2 * )").what()).find("column 5: expected an operand, found ')'"),
            std::string::npos);
}

TEST(Expr, LiteralsOutsideInt64AreRejected) {
  EXPECT_NE(std::string(parseError("9223372036854775808").what())
                .find("column 1: integer literal '9223372036854775808' does not fit in 64 bits"),
            std::string::npos);
  EXPECT_NE(std::string(parseError("1 + -9223372036854775809").what()).find("does not fit"),
            std::string::npos);
}

TEST(Expr, DeepNestingIsAParseErrorNotACrash) {
  std::string deep = std::string(1000, '(') + "1" + std::string(1000, ')');
  EXPECT_NE(std::string(parseError(deep).what()).find("nested more than"), std::string::npos);
  EXPECT_NE(std::string(parseError(std::string(1000, '-') + "x").what()).find("nested more than"),
            std::string::npos);
  std::string chain = "1";
  for (int i = 0; i < 2000; ++i) chain += " + 1";
  EXPECT_NE(std::string(parseError(chain).what()).find("more than 1000 operators and operands"),
            std::string::npos);
}

// Found by fuzz_expr: a chain of unary minus at the depth limit printed as
// `-(-(...))`, whose parentheses counted again and made the printed form
// unparsable. A parenthesis right after a unary operator now counts with it.
TEST(Expr, EveryExpressionAtTheDepthLimitPrintsAsTextThatParses) {
  for (const char* op : {"-", "~", "!"}) {
    std::string text;
    for (int i = 0; i < 100; ++i) text += op;
    text += "x";
    Expr e = Expr::parse(text, "/t");
    Expr again = Expr::parse(e.str(), "/printed");
    EXPECT_EQ(again.str(), e.str()) << op;
    EXPECT_NE(std::string(parseError(std::string(101, op[0]) + "x").what()).find("nested more than 100"),
              std::string::npos)
        << op;
  }
  std::string calls = "x";
  for (int i = 0; i < 100; ++i) calls = "min(" + calls + ", 1)";
  EXPECT_EQ(Expr::parse(Expr::parse(calls, "/t").str(), "/printed").str(),
            Expr::parse(calls, "/t").str());
  EXPECT_NE(std::string(parseError("min(" + calls + ", 1)").what()).find("nested more than 100"),
            std::string::npos);
}

TEST(Expr, DivisionByZeroNamesTheOperation) {
  std::string msg = programError("x + a / b", {{"x", 1}, {"a", 7}, {"b", 0}});
  EXPECT_EQ(msg, "division by zero (7 / 0) in 'a / b'");
  EXPECT_NE(programError("a % (b - b)", {{"a", 7}, {"b", 3}}).find("modulo by zero (7 % 0) in 'a % (b - b)'"),
            std::string::npos);
  EXPECT_NE(programError("1 << k", {{"k", 64}}).find("shift count 64 outside [0, 63]"),
            std::string::npos);
  EXPECT_NE(programError("1 >> -1").find("shift count -1 outside [0, 63]"), std::string::npos);
}

TEST(Expr, UnknownNameIsAProgramError) {
  EXPECT_EQ(programError("rank + nope", {{"rank", 1}}), "unknown name 'nope' in expression 'rank + nope'");
}

TEST(Expr, NamesListsEveryVariableInOrder) {
  std::vector<std::string> names;
  Expr("(rank - i + world) % world").names(names);
  EXPECT_EQ(names, (std::vector<std::string>{"rank", "i", "world", "world"}));
}

TEST(Expr, ConstantIsOnlyForLiterals) {
  EXPECT_EQ(Expr("42").constant(), 42);
  EXPECT_EQ(Expr("-42").constant(), -42);
  EXPECT_EQ(Expr(int64_t{-5}).constant(), -5);
  EXPECT_FALSE(Expr("1 + 1").constant().has_value());
  EXPECT_FALSE(Expr("n").constant().has_value());
  EXPECT_TRUE(Expr().empty());
}

TEST(Expr, VarRejectsNamesTheParserCannotRead) {
  EXPECT_THROW(Expr::var("min"), ProgramError);
  EXPECT_THROW(Expr::var("2x"), ProgramError);
  EXPECT_EQ(Expr::var("rank"), Expr("rank"));
}

TEST(Expr, StrUsesMinimalParentheses) {
  EXPECT_EQ(Expr("(a + b) * c").str(), "(a + b) * c");
  EXPECT_EQ(Expr("a + (b * c)").str(), "a + b * c");
  EXPECT_EQ(Expr("a - (b - c)").str(), "a - (b - c)");
  EXPECT_EQ(Expr("(a - b) - c").str(), "a - b - c");
  EXPECT_EQ(Expr("((rank))+1").str(), "rank + 1");
  EXPECT_EQ(Expr("-(a+b)").str(), "-(a + b)");
  EXPECT_EQ(Expr("!(rank&1)").str(), "!(rank & 1)");
  EXPECT_EQ(Expr("rank ^ (1 << k)").str(), "rank ^ 1 << k");
  EXPECT_EQ(Expr("(rank ^ 1) << k").str(), "(rank ^ 1) << k");
  EXPECT_EQ(Expr(int64_t{-3}).str(), "-3");
  EXPECT_EQ(un(ExprOp::Neg, 3).str(), "-(3)");
  EXPECT_EQ(un(ExprOp::Neg, un(ExprOp::Neg, var("x"))).str(), "-(-x)");
}

// Every tree prints as text that parses back to the same tree.
void expectRoundTrip(const Expr& e) {
  std::string text = e.str();
  Expr back = Expr::parse(text, "/rt");
  EXPECT_EQ(back, e) << text << " came back as " << back.str();
  EXPECT_EQ(back.str(), text);
}

TEST(Expr, StrRoundTripsWrittenExpressions) {
  for (const char* text :
       {"0", "-1", "rank", "a - (b - c)", "a - b - c", "a / (b / c)", "a / b * c", "a * (b / c)",
        "-x", "- 5", "-(5)", "--x", "-(-5)", "- -5", "!-3", "~~x", "!(a < b)", "a < b == c > d",
        "a << (b << c)", "(a || b) && c", "a || b && c", "min(a, max(b, -c)) * 2",
        "(rank - i - 1 + world) % world", "rank ^ (1 << k)", "1 - -9223372036854775808",
        "a % b % c", "a % (b % c)", "((a & b) | c) ^ d", "a & (b | c ^ d)", "a == (b == c)",
        "-min(a, b)", "-(a * b)", "x - -3 * y"})
    expectRoundTrip(Expr::parse(text, "/rt"));
}

TEST(Expr, StrRoundTripsBuiltTrees) {
  expectRoundTrip(un(ExprOp::Neg, 3));
  expectRoundTrip(un(ExprOp::Neg, int64_t{-3}));
  expectRoundTrip(un(ExprOp::Neg, un(ExprOp::Neg, var("x"))));
  expectRoundTrip(un(ExprOp::Not, int64_t{-3}));
  expectRoundTrip(Expr(int64_t{INT64_MIN}));
  expectRoundTrip(bin(ExprOp::Sub, var("a"), int64_t{-3}));
  expectRoundTrip(bin(ExprOp::Mul, int64_t{-3}, var("a")));
  expectRoundTrip(bin(ExprOp::Sub, var("a"), bin(ExprOp::Add, var("b"), var("c"))));
}

// Random trees over every operator, printed and parsed back.
Expr randomTree(std::mt19937& rng, int depth) {
  static const ExprOp kOps[] = {
      ExprOp::Neg, ExprOp::Not, ExprOp::BitNot, ExprOp::Mul, ExprOp::Div, ExprOp::Mod,
      ExprOp::Add, ExprOp::Sub, ExprOp::Shl, ExprOp::Shr, ExprOp::Lt, ExprOp::Le,
      ExprOp::Gt, ExprOp::Ge, ExprOp::Eq, ExprOp::Ne, ExprOp::BitAnd, ExprOp::BitXor,
      ExprOp::BitOr, ExprOp::LogAnd, ExprOp::LogOr, ExprOp::Min, ExprOp::Max};
  std::uniform_int_distribution<int> pick(0, 9);
  if (depth == 0 || pick(rng) < 2) {
    if (pick(rng) < 5) return Expr(int64_t{pick(rng) - 5});
    return Expr::var(std::string(1, static_cast<char>('a' + pick(rng) % 3)));
  }
  ExprOp op = kOps[std::uniform_int_distribution<std::size_t>(0, std::size(kOps) - 1)(rng)];
  if (op == ExprOp::Neg || op == ExprOp::Not || op == ExprOp::BitNot)
    return un(op, randomTree(rng, depth - 1));
  return bin(op, randomTree(rng, depth - 1), randomTree(rng, depth - 1));
}

TEST(Expr, StrRoundTripsRandomTrees) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 400; ++i) expectRoundTrip(randomTree(rng, 5));
}

// The outcome of one evaluation: a value or the error text.
struct Outcome {
  std::optional<int64_t> value;
  std::string error;
};

TEST(CompiledExpr, AgreesWithEvaluateOnAGridOfValues) {
  std::vector<Expr> exprs;
  for (const char* text :
       {"a + b * c", "(a - b) % c", "a / c - b", "a % (b - c)", "min(a, b) - max(b, c)",
        "a ^ (1 << (b & 3))", "a >> (c & 7)", "-a * -b", "!a || b && c", "a < b == b < c",
        "~a & b | c", "a != b && c / a > 0", "(a + 7) % (b + 6) * 3 - c", "a << c"}) {
    exprs.push_back(Expr(text));
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 30; ++i) exprs.push_back(randomTree(rng, 4));
  auto slot = [](std::string_view n) { return n.size() == 1 ? n[0] - 'a' : -1; };
  for (const Expr& e : exprs) {
    CompiledExpr c = CompiledExpr::compile(e, slot);
    EXPECT_EQ(c.text(), e.str());
    for (int64_t a = -4; a <= 4; ++a)
      for (int64_t b = -4; b <= 4; ++b)
        for (int64_t cv = -4; cv <= 4; ++cv) {
          const int64_t slots[] = {a, b, cv};
          Outcome tree, compiled;
          try {
            tree.value = e.evaluate([&](std::string_view n) -> std::optional<int64_t> {
              return slots[slot(n)];
            });
          } catch (const ProgramError& err) {
            tree.error = err.what();
          }
          try {
            compiled.value = c.eval(slots);
          } catch (const ProgramError& err) {
            compiled.error = err.what();
          }
          ASSERT_EQ(tree.value, compiled.value) << e.str() << " at " << a << "," << b << "," << cv;
          ASSERT_EQ(tree.error.empty(), compiled.error.empty()) << e.str();
        }
  }
}

TEST(CompiledExpr, FoldsConstantSubtrees) {
  auto none = [](std::string_view) { return -1; };
  CompiledExpr c = CompiledExpr::compile(Expr("2 * 3 + (1 << 4)"), none);
  EXPECT_TRUE(c.isConstant());
  EXPECT_EQ(c.eval(nullptr), 22);
  EXPECT_TRUE(CompiledExpr::compile(Expr("0 && 1 / 0"), none).isConstant());
  EXPECT_TRUE(CompiledExpr::compile(Expr("1 || 1 / 0"), none).isConstant());
  EXPECT_EQ(CompiledExpr::compile(Expr("1 && 7"), none).eval(nullptr), 1);
  // A failing constant operator is left to fail when (if) it runs.
  CompiledExpr zero = CompiledExpr::compile(Expr("1 / 0"), none);
  EXPECT_FALSE(zero.isConstant());
  try {
    zero.eval(nullptr);
    ADD_FAILURE() << "1 / 0 evaluated";
  } catch (const ProgramError& e) {
    EXPECT_STREQ(e.what(), "division by zero (1 / 0) in '1 / 0'");
  }
}

TEST(CompiledExpr, UnknownNameIsRejectedAtCompileTime) {
  auto slot = [](std::string_view n) { return n == "rank" ? 0 : -1; };
  try {
    CompiledExpr::compile(Expr("0 && rank + world"), slot);
    ADD_FAILURE() << "compiled";
  } catch (const ProgramError& e) {
    EXPECT_STREQ(e.what(), "unknown name 'world' in expression '0 && rank + world'");
  }
}

TEST(CompiledExpr, TooDeepForTheStackIsRejectedAtCompileTime) {
  Expr e = var("a");
  for (int i = 0; i < 70; ++i) e = bin(ExprOp::Sub, var("a"), e);  // right-deep
  auto slot = [](std::string_view) { return 0; };
  try {
    CompiledExpr::compile(e, slot);
    ADD_FAILURE() << "compiled";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos);
  }
  // A long left-deep chain needs only two stack entries.
  Expr chain = var("a");
  for (int i = 0; i < 500; ++i) chain = bin(ExprOp::Add, chain, 1);
  int64_t a = 5;
  EXPECT_EQ(CompiledExpr::compile(chain, slot).eval(&a), 505);
}

}  // namespace
}  // namespace hir
