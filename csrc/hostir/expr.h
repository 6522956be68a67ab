// Scalar expressions: int64 arithmetic over integers and names (rank, world,
// params, loop indices). Grammar and precedence as in C:
//   ||  &&  |  ^  &  == !=  < <= > >=  << >>  + -  * / %  unary - ! ~
// plus min(a, b), max(a, b) and parentheses. `/` is floor division and `%`
// the matching modulo, never negative for a positive divisor (so
// (rank - 1) % world is world - 1 on rank 0). Comparisons and logic yield 0/1.
//
// An Expr is an immutable tree shared by value. Expr::str() prints the
// canonical form (minimal parentheses), and parse(str()) == the same tree, so
// saving and loading a program gives an equal program.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hir {

enum class ExprOp : uint8_t {
  Const, Var,
  Neg, Not, BitNot,                                  // unary
  Mul, Div, Mod, Add, Sub, Shl, Shr, Lt, Le, Gt, Ge,  // binary
  Eq, Ne, BitAnd, BitXor, BitOr, LogAnd, LogOr,
  Min, Max,                                          // calls
};

struct ExprNode {
  ExprOp op;
  int64_t value = 0;                            // Const
  std::string name;                             // Var
  std::vector<std::shared_ptr<const ExprNode>> args;
};

class Expr {
 public:
  Expr() = default;                       // empty: no expression
  Expr(int64_t v);                        // NOLINT: a constant
  Expr(int v) : Expr(int64_t{v}) {}       // NOLINT
  // Parses text; a syntax error throws ParseError at `pointer` naming the
  // column and what was expected.
  Expr(const char* text);                 // NOLINT: parse, pointer "" (builder use)
  Expr(const std::string& text);          // NOLINT
  static Expr parse(std::string_view text, std::string_view pointer);
  static Expr var(std::string name);
  static Expr make(ExprOp op, std::vector<Expr> args);

  bool empty() const { return node_ == nullptr; }
  const ExprNode& node() const { return *node_; }
  std::optional<int64_t> constant() const;  // value if the tree is a literal
  std::string str() const;                  // canonical text
  void names(std::vector<std::string>& out) const;  // every Var, in order, with repeats
  // Evaluates with `lookup` giving each name's value; throws ProgramError on
  // division by zero or an undefined name (lookup returns nullopt).
  int64_t evaluate(const std::function<std::optional<int64_t>(std::string_view)>& lookup) const;

  friend bool operator==(const Expr& a, const Expr& b);

 private:
  explicit Expr(std::shared_ptr<const ExprNode> n) : node_(std::move(n)) {}
  std::shared_ptr<const ExprNode> node_;
};

// Is `s` a name as expressions and tensor references spell it:
// [A-Za-z_][A-Za-z0-9_]*?
bool isIdentifier(std::string_view s);

// Applies one operator; the shared semantics of evaluate() and CompiledExpr.
// Throws ProgramError for division or modulo by zero and shifts outside
// [0, 63], naming the operator.
int64_t applyExprOp(ExprOp op, int64_t a, int64_t b);

// An expression compiled against slots: names become indices into an array of
// int64 scalars. Evaluation is a loop over a flat postfix program with no
// string handling, no allocation and no map look-up.
class CompiledExpr {
 public:
  CompiledExpr() = default;
  // `slot_of` maps a name to its slot, or -1 if the name is unknown (then
  // compile throws ProgramError naming it).
  static CompiledExpr compile(const Expr& e,
                              const std::function<int(std::string_view)>& slot_of);
  bool isConstant() const { return code_.size() == 1 && code_[0].op == ExprOp::Const; }
  int64_t eval(const int64_t* slots) const;
  // The slots it reads, in program order (a slot may repeat).
  std::vector<int> slots() const;
  const std::string& text() const { return text_; }

 private:
  struct Step {
    ExprOp op;
    int64_t arg;  // constant value, or slot index for Var
  };
  std::vector<Step> code_;
  std::string text_;
};

}  // namespace hir
