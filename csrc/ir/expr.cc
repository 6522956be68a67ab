// Expressions: the Expr tree, parsing, printing (str()), names() and equality.
// Evaluation (evaluate(), applyExprOp, CompiledExpr) is in expr_eval.cc.
#include <hostir/expr.h>

#include <fmt/format.h>

#include <climits>

#include "common/check.h"
#include "ir/expr_internal.h"

namespace hir {

namespace {

// Deepest nesting of parentheses, calls and unary operators the parser takes;
// beyond it, a hostile input could exhaust the C++ stack. A parenthesis right
// after a unary operator counts with it, so that every expression the parser
// takes prints as text it takes too: `--x` prints as `-(-x)`, both two levels.
constexpr int kMaxParseDepth = 100;
// Most nodes in one expression: trees are walked recursively, and a long
// chain like 1 + 1 + ... builds a deep tree without any nesting in the text.
constexpr int kMaxParseNodes = 1000;

// Precedence: a larger number binds tighter. Unary operators sit above every
// binary one; literals, names and calls are primaries.
constexpr int kUnaryPrecedence = 12;
constexpr int kPrimaryPrecedence = 13;

}  // namespace

OpInfo opInfo(ExprOp op) {
  switch (op) {
    case ExprOp::Const: return {"", kPrimaryPrecedence, 0};
    case ExprOp::Var: return {"", kPrimaryPrecedence, 0};
    case ExprOp::Neg: return {"-", kUnaryPrecedence, 1};
    case ExprOp::Not: return {"!", kUnaryPrecedence, 1};
    case ExprOp::BitNot: return {"~", kUnaryPrecedence, 1};
    case ExprOp::Mul: return {"*", 11, 2};
    case ExprOp::Div: return {"/", 11, 2};
    case ExprOp::Mod: return {"%", 11, 2};
    case ExprOp::Add: return {"+", 10, 2};
    case ExprOp::Sub: return {"-", 10, 2};
    case ExprOp::Shl: return {"<<", 9, 2};
    case ExprOp::Shr: return {">>", 9, 2};
    case ExprOp::Lt: return {"<", 8, 2};
    case ExprOp::Le: return {"<=", 8, 2};
    case ExprOp::Gt: return {">", 8, 2};
    case ExprOp::Ge: return {">=", 8, 2};
    case ExprOp::Eq: return {"==", 7, 2};
    case ExprOp::Ne: return {"!=", 7, 2};
    case ExprOp::BitAnd: return {"&", 6, 2};
    case ExprOp::BitXor: return {"^", 5, 2};
    case ExprOp::BitOr: return {"|", 4, 2};
    case ExprOp::LogAnd: return {"&&", 3, 2};
    case ExprOp::LogOr: return {"||", 2, 2};
    case ExprOp::Min: return {"min", kPrimaryPrecedence, 2};
    case ExprOp::Max: return {"max", kPrimaryPrecedence, 2};
  }
  HIR_INTERNAL_ASSERT(false, "unknown ExprOp {}", static_cast<int>(op));
  return {};
}

namespace {

bool isCall(ExprOp op) { return op == ExprOp::Min || op == ExprOp::Max; }
bool isIdentStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool isIdentChar(char c) { return isIdentStart(c) || (c >= '0' && c <= '9'); }
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// ------------------------------------------------------------------ printing

void printNode(const ExprNode& n, std::string& out);

void printOperand(const ExprNode& child, bool parens, std::string& out) {
  if (parens) out += '(';
  printNode(child, out);
  if (parens) out += ')';
}

// Minimal parentheses under left associativity: a left operand needs them
// when it binds more loosely than the operator, a right operand also when it
// binds equally (a - (b - c)). "-3" is a literal to the parser, so negating a
// literal prints as -(3); a double negation prints as -(-x) for readability.
void printNode(const ExprNode& n, std::string& out) {
  const OpInfo info = opInfo(n.op);
  switch (info.arity) {
    case 0:
      out += n.op == ExprOp::Const ? std::to_string(n.value) : n.name;
      return;
    case 1: {
      const ExprNode& a = *n.args[0];
      bool parens = opInfo(a.op).precedence < kUnaryPrecedence ||
                    (n.op == ExprOp::Neg && (a.op == ExprOp::Const || a.op == ExprOp::Neg));
      out += info.symbol;
      printOperand(a, parens, out);
      return;
    }
    default:
      break;
  }
  const ExprNode& a = *n.args[0];
  const ExprNode& b = *n.args[1];
  if (isCall(n.op)) {
    out += info.symbol;
    out += '(';
    printNode(a, out);
    out += ", ";
    printNode(b, out);
    out += ')';
    return;
  }
  printOperand(a, opInfo(a.op).precedence < info.precedence, out);
  out += ' ';
  out += info.symbol;
  out += ' ';
  printOperand(b, opInfo(b.op).precedence <= info.precedence, out);
}

}  // namespace

std::string nodeText(const ExprNode& n) {
  std::string out;
  printNode(n, out);
  return out;
}

namespace {

// ------------------------------------------------------------------- parsing

struct Token {
  enum Kind { End, Int, Ident, Punct, Invalid } kind = End;
  std::string_view text;
  int column = 1;  // 1-based
};

// Recursive descent, one function per precedence level of the binary
// operators (table kBinaryLevels, loosest first).
class Parser {
 public:
  Parser(std::string_view text, std::string_view pointer) : text_(text), pointer_(pointer) {
    advance();
  }

  std::shared_ptr<const ExprNode> parseAll() {
    auto e = parseExpr();
    if (tok_.kind != Token::End) fail("an operator or end of expression");
    return e;
  }

 private:
  static constexpr std::string_view kPuncts[] = {"||", "&&", "==", "!=", "<=", ">=", "<<", ">>",
                                                 "|",  "^",  "&",  "<",  ">",  "+",  "-",  "*",
                                                 "/",  "%",  "!",  "~",  "(",  ")",  ","};
  static constexpr int kLevels = 10;
  static constexpr ExprOp kBinaryLevels[kLevels][4] = {
      {ExprOp::LogOr},  {ExprOp::LogAnd}, {ExprOp::BitOr}, {ExprOp::BitXor},
      {ExprOp::BitAnd}, {ExprOp::Eq, ExprOp::Ne},
      {ExprOp::Lt, ExprOp::Le, ExprOp::Gt, ExprOp::Ge},
      {ExprOp::Shl, ExprOp::Shr}, {ExprOp::Add, ExprOp::Sub},
      {ExprOp::Mul, ExprOp::Div, ExprOp::Mod}};
  static constexpr int kLevelSizes[kLevels] = {1, 1, 1, 1, 1, 2, 4, 2, 2, 3};

  void advance() {
    while (pos_ < text_.size() && isSpace(text_[pos_])) ++pos_;
    tok_.column = static_cast<int>(pos_) + 1;
    if (pos_ >= text_.size()) {
      tok_ = {Token::End, {}, tok_.column};
      return;
    }
    std::size_t start = pos_;
    char c = text_[pos_];
    if (isDigit(c)) {
      while (pos_ < text_.size() && isDigit(text_[pos_])) ++pos_;
      tok_.kind = Token::Int;
    } else if (isIdentStart(c)) {
      while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
      tok_.kind = Token::Ident;
    } else {
      tok_.kind = Token::Invalid;
      pos_ += 1;
      for (std::string_view p : kPuncts) {
        if (text_.substr(start, p.size()) == p) {
          tok_.kind = Token::Punct;
          pos_ = start + p.size();
          break;
        }
      }
    }
    tok_.text = text_.substr(start, pos_ - start);
  }

  bool isPunct(std::string_view p) const { return tok_.kind == Token::Punct && tok_.text == p; }

  [[noreturn]] void failAt(int column, const std::string& message) const {
    throw ParseError(std::string(pointer_),
                     fmt::format("expression '{}': column {}: {}", text_, column, message));
  }
  [[noreturn]] void fail(std::string_view expected) const {
    std::string found = tok_.kind == Token::End ? std::string("end of expression")
                                                : fmt::format("'{}'", tok_.text);
    failAt(tok_.column, fmt::format("expected {}, found {}", expected, found));
  }

  void expect(std::string_view punct) {
    if (!isPunct(punct)) fail(fmt::format("'{}'", punct));
    advance();
  }

  // Guards recursion (parentheses, calls, unary chains) against stack overflow.
  // `counts` false: a level that an enclosing one already counted.
  struct DepthGuard {
    Parser& p;
    const int step;
    explicit DepthGuard(Parser& parser, bool counts = true) : p(parser), step(counts ? 1 : 0) {
      p.depth_ += step;
      if (p.depth_ > kMaxParseDepth)
        p.failAt(p.tok_.column, fmt::format("nested more than {} levels deep", kMaxParseDepth));
    }
    ~DepthGuard() { p.depth_ -= step; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  std::shared_ptr<ExprNode> node(ExprOp op, std::vector<std::shared_ptr<const ExprNode>> args = {}) {
    if (++nodes_ > kMaxParseNodes)
      failAt(tok_.column, fmt::format("more than {} operators and operands", kMaxParseNodes));
    return std::make_shared<ExprNode>(ExprNode{op, 0, {}, std::move(args)});
  }

  // Levels are counted where they open: a parenthesis, a call, a unary operator.
  std::shared_ptr<const ExprNode> parseExpr() { return parseLevel(0); }

  std::shared_ptr<const ExprNode> parseLevel(int level) {
    if (level == kLevels) return parseUnary();
    auto lhs = parseLevel(level + 1);
    for (;;) {
      std::optional<ExprOp> op = binaryOpAt(level);
      if (!op) return lhs;
      advance();
      auto rhs = parseLevel(level + 1);
      lhs = node(*op, {std::move(lhs), std::move(rhs)});
    }
  }

  std::optional<ExprOp> binaryOpAt(int level) const {
    if (tok_.kind != Token::Punct) return std::nullopt;
    for (int i = 0; i < kLevelSizes[level]; ++i)
      if (opInfo(kBinaryLevels[level][i]).symbol == tok_.text) return kBinaryLevels[level][i];
    return std::nullopt;
  }

  // '-' directly before a literal folds into a negative literal, so that
  // every Const (INT64_MIN included) prints as text that parses back to it.
  // `after_unary`: the operand of a unary operator, whose parenthesis (if it
  // is one) the operator's level already counts.
  std::shared_ptr<const ExprNode> parseUnary(bool after_unary = false) {
    ExprOp op;
    if (isPunct("-"))
      op = ExprOp::Neg;
    else if (isPunct("!"))
      op = ExprOp::Not;
    else if (isPunct("~"))
      op = ExprOp::BitNot;
    else
      return parsePrimary(after_unary);
    DepthGuard guard(*this);
    advance();
    if (op == ExprOp::Neg && tok_.kind == Token::Int) return parseLiteral(true);
    return node(op, {parseUnary(true)});
  }

  std::shared_ptr<const ExprNode> parseLiteral(bool negative) {
    // Magnitudes up to 2^63 fit when negated.
    const uint64_t limit = negative ? uint64_t{1} << 63 : uint64_t{INT64_MAX};
    uint64_t magnitude = 0;
    for (char c : tok_.text) {
      uint64_t digit = static_cast<uint64_t>(c - '0');
      if (magnitude > (limit - digit) / 10)
        failAt(tok_.column, fmt::format("integer literal '{}{}' does not fit in 64 bits",
                                        negative ? "-" : "", tok_.text));
      magnitude = magnitude * 10 + digit;
    }
    advance();
    auto n = node(ExprOp::Const);
    n->value = negative ? static_cast<int64_t>(uint64_t{0} - magnitude)
                        : static_cast<int64_t>(magnitude);
    return n;
  }

  std::shared_ptr<const ExprNode> parsePrimary(bool after_unary) {
    if (tok_.kind == Token::Int) return parseLiteral(false);
    if (isPunct("(")) {
      DepthGuard guard(*this, !after_unary);
      advance();
      auto e = parseExpr();
      expect(")");
      return e;
    }
    if (tok_.kind != Token::Ident) fail("an operand");
    if (tok_.text == "min" || tok_.text == "max") return parseCall();
    auto n = node(ExprOp::Var);
    n->name = std::string(tok_.text);
    advance();
    return n;
  }

  std::shared_ptr<const ExprNode> parseCall() {
    DepthGuard guard(*this);
    ExprOp op = tok_.text == "min" ? ExprOp::Min : ExprOp::Max;
    std::string_view name = tok_.text;
    advance();
    if (!isPunct("(")) fail(fmt::format("'(' after '{}' (a call: {}(a, b))", name, name));
    advance();
    auto a = parseExpr();
    expect(",");
    auto b = parseExpr();
    expect(")");
    return node(op, {std::move(a), std::move(b)});
  }

  std::string_view text_;
  std::string_view pointer_;
  std::size_t pos_ = 0;
  Token tok_;
  int depth_ = 0;
  int nodes_ = 0;
};

// --------------------------------------------------------------------- trees

bool sameTree(const ExprNode& a, const ExprNode& b) {
  if (&a == &b) return true;
  if (a.op != b.op || a.value != b.value || a.name != b.name || a.args.size() != b.args.size())
    return false;
  for (std::size_t i = 0; i < a.args.size(); ++i)
    if (!sameTree(*a.args[i], *b.args[i])) return false;
  return true;
}

void collectNames(const ExprNode& n, std::vector<std::string>& out) {
  if (n.op == ExprOp::Var) out.push_back(n.name);
  for (const auto& a : n.args) collectNames(*a, out);
}

}  // namespace

// ------------------------------------------------------------------- Expr

bool isIdentifier(std::string_view s) {
  if (s.empty() || !isIdentStart(s[0])) return false;
  for (char c : s)
    if (!isIdentChar(c)) return false;
  return true;
}


Expr::Expr(int64_t v) {
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Const;
  n->value = v;
  node_ = std::move(n);
}

Expr::Expr(const char* text) : Expr(parse(text, "")) {}
Expr::Expr(const std::string& text) : Expr(parse(text, "")) {}

Expr Expr::parse(std::string_view text, std::string_view pointer) {
  return Expr(Parser(text, pointer).parseAll());
}

Expr Expr::var(std::string name) {
  HIR_CHECK(isIdentifier(name) && name != "min" && name != "max",
            "'{}' cannot be a name in an expression: expected [A-Za-z_][A-Za-z0-9_]*, "
            "not min or max",
            name);
  auto n = std::make_shared<ExprNode>();
  n->op = ExprOp::Var;
  n->name = std::move(name);
  return Expr(std::move(n));
}

Expr Expr::make(ExprOp op, std::vector<Expr> args) {
  const int arity = opInfo(op).arity;
  HIR_INTERNAL_ASSERT(arity > 0, "Expr::make takes an operator; use Expr(int64_t) or Expr::var");
  HIR_INTERNAL_ASSERT(static_cast<int>(args.size()) == arity, "'{}' takes {} operands, got {}",
                      opInfo(op).symbol, arity, args.size());
  auto n = std::make_shared<ExprNode>();
  n->op = op;
  for (auto& a : args) {
    HIR_INTERNAL_ASSERT(!a.empty(), "empty operand of '{}'", opInfo(op).symbol);
    n->args.push_back(std::move(a.node_));
  }
  return Expr(std::move(n));
}

std::optional<int64_t> Expr::constant() const {
  if (node_ && node_->op == ExprOp::Const) return node_->value;
  return std::nullopt;
}

std::string Expr::str() const { return node_ ? nodeText(*node_) : std::string(); }

void Expr::names(std::vector<std::string>& out) const {
  if (node_) collectNames(*node_, out);
}

bool operator==(const Expr& a, const Expr& b) {
  if (!a.node_ || !b.node_) return a.node_ == b.node_;
  return sameTree(*a.node_, *b.node_);
}

}  // namespace hir
