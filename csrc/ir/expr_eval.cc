// Expression evaluation: Expr::evaluate over the tree, applyExprOp (the shared
// semantics of the operators) and CompiledExpr (compile to postfix, eval).
#include <hostir/expr.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "common/check.h"
#include "ir/expr_internal.h"

namespace hir {

namespace {

// Operand stack of CompiledExpr::eval; deeper expressions are rejected at
// compile time.
constexpr int kEvalStackSize = 64;

using Lookup = std::function<std::optional<int64_t>(std::string_view)>;

// Re-throws an operator failure naming the expression text it happened in.
[[noreturn]] void rethrowIn(const ProgramError& e, std::string_view text) {
  throw ProgramError(fmt::format("{} in '{}'", e.what(), text));
}

int64_t evalNode(const ExprNode& n, const Lookup& lookup, const ExprNode& root) {
  switch (n.op) {
    case ExprOp::Const:
      return n.value;
    case ExprOp::Var: {
      std::optional<int64_t> v = lookup(n.name);
      HIR_CHECK(v.has_value(), "unknown name '{}' in expression '{}'", n.name, nodeText(root));
      return *v;
    }
    case ExprOp::LogAnd:  // short-circuit, as in C: `i > 0 && n / i > 1` is safe
      return evalNode(*n.args[0], lookup, root) != 0 && evalNode(*n.args[1], lookup, root) != 0;
    case ExprOp::LogOr:
      return evalNode(*n.args[0], lookup, root) != 0 || evalNode(*n.args[1], lookup, root) != 0;
    default:
      break;
  }
  int64_t a = evalNode(*n.args[0], lookup, root);
  int64_t b = n.args.size() > 1 ? evalNode(*n.args[1], lookup, root) : 0;
  try {
    return applyExprOp(n.op, a, b);
  } catch (const ProgramError& e) {
    rethrowIn(e, nodeText(n));
  }
}

std::string appliedText(ExprOp op, int64_t a, int64_t b) {
  const OpInfo info = opInfo(op);
  if (info.arity == 1) return fmt::format("{}{}", info.symbol, a);
  return fmt::format("{} {} {}", a, info.symbol, b);
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

// Takes the sign of the divisor (never negative for a positive divisor).
int64_t floorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 is undefined in C++
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

int64_t Expr::evaluate(const Lookup& lookup) const {
  HIR_INTERNAL_ASSERT(node_ != nullptr, "evaluating an empty expression");
  return evalNode(*node_, lookup, *node_);
}

int64_t applyExprOp(ExprOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  auto overflow = [&]() -> int64_t {
    throw ProgramError(fmt::format("integer overflow ({})", appliedText(op, a, b)));
  };
  switch (op) {
    case ExprOp::Neg: return __builtin_sub_overflow(int64_t{0}, a, &r) ? overflow() : r;
    case ExprOp::Not: return a == 0;
    case ExprOp::BitNot: return ~a;
    case ExprOp::Mul: return __builtin_mul_overflow(a, b, &r) ? overflow() : r;
    case ExprOp::Add: return __builtin_add_overflow(a, b, &r) ? overflow() : r;
    case ExprOp::Sub: return __builtin_sub_overflow(a, b, &r) ? overflow() : r;
    case ExprOp::Div:
    case ExprOp::Mod:
      HIR_CHECK(b != 0, "{} by zero ({})", op == ExprOp::Div ? "division" : "modulo",
                appliedText(op, a, b));
      if (op == ExprOp::Mod) return floorMod(a, b);
      return (a == INT64_MIN && b == -1) ? overflow() : floorDiv(a, b);
    case ExprOp::Shl:
    case ExprOp::Shr:
      HIR_CHECK(b >= 0 && b <= 63, "shift count {} outside [0, 63] ({})", b, appliedText(op, a, b));
      // C++20: << wraps modulo 2^64 and >> is arithmetic.
      return op == ExprOp::Shl ? static_cast<int64_t>(static_cast<uint64_t>(a) << b) : a >> b;
    case ExprOp::Lt: return a < b;
    case ExprOp::Le: return a <= b;
    case ExprOp::Gt: return a > b;
    case ExprOp::Ge: return a >= b;
    case ExprOp::Eq: return a == b;
    case ExprOp::Ne: return a != b;
    case ExprOp::BitAnd: return a & b;
    case ExprOp::BitXor: return a ^ b;
    case ExprOp::BitOr: return a | b;
    case ExprOp::LogAnd: return a != 0 && b != 0;
    case ExprOp::LogOr: return a != 0 || b != 0;
    case ExprOp::Min: return std::min(a, b);
    case ExprOp::Max: return std::max(a, b);
    case ExprOp::Const:
    case ExprOp::Var:
      break;
  }
  HIR_INTERNAL_ASSERT(false, "applyExprOp on a leaf ({})", static_cast<int>(op));
  return 0;
}

// ------------------------------------------------------------- CompiledExpr
//
// Postfix code. Const pushes arg; Var pushes slots[arg]; unary operators
// replace the top; binary operators pop one and replace the top. LogAnd and
// LogOr are jumps that short-circuit as in C: `a && b` compiles to
//   a, LogAnd(n), b, Not, Not
// where LogAnd keeps a 0 on top and skips the n following steps, or pops and
// falls through to b (normalized to 0/1 by the double Not). LogOr likewise
// keeps a 1 and skips when its operand is non-zero.

namespace {

// A template on Step only because CompiledExpr::Step is private: compile()
// names it, and this helper just uses its public fields.
template <class Step>
class Compiler {
 public:
  Compiler(std::vector<Step>& code, const std::function<int(std::string_view)>& slot_of,
           const std::string& text)
      : code_(code), slot_of_(slot_of), text_(text) {}

  void emit(const ExprNode& n) {
    switch (n.op) {
      case ExprOp::Const:
        code_.push_back({ExprOp::Const, n.value});
        return;
      case ExprOp::Var: {
        int slot = slot_of_(n.name);
        HIR_CHECK(slot >= 0, "unknown name '{}' in expression '{}'", n.name, text_);
        code_.push_back({ExprOp::Var, slot});
        return;
      }
      case ExprOp::LogAnd:
      case ExprOp::LogOr:
        emitLogic(n);
        return;
      default:
        break;
    }
    const std::size_t start = code_.size();
    for (const auto& a : n.args) emit(*a);
    code_.push_back({n.op, 0});
    foldIfConstant(start);
  }

 private:
  // Is code_[at..] a single constant?
  bool constantAt(std::size_t at) const {
    return code_.size() == at + 1 && code_[at].op == ExprOp::Const;
  }

  // Folds [start, end) = const, (const,) op into one constant. An operator
  // that fails (1 / 0) is left to fail at run time: its branch may never run.
  void foldIfConstant(std::size_t start) {
    const std::size_t n = code_.size() - start;
    if (n < 2 || n > 3) return;
    for (std::size_t i = start; i + 1 < code_.size(); ++i)
      if (code_[i].op != ExprOp::Const) return;
    const ExprOp op = code_.back().op;
    const int64_t a = code_[start].arg;
    const int64_t b = n == 3 ? code_[start + 1].arg : 0;
    try {
      const int64_t v = applyExprOp(op, a, b);
      code_.resize(start);
      code_.push_back({ExprOp::Const, v});
    } catch (const ProgramError&) {
    }
  }

  void emitLogic(const ExprNode& n) {
    const std::size_t start = code_.size();
    emit(*n.args[0]);
    const bool a_constant = constantAt(start);
    const int64_t a = code_[start].arg;
    const std::size_t jump = code_.size();
    code_.push_back({n.op, 0});
    const std::size_t b_start = code_.size();
    emit(*n.args[1]);  // always compiled, so that unknown names are reported
    const bool b_constant = constantAt(b_start);
    const int64_t b = code_[b_start].arg;
    code_.push_back({ExprOp::Not, 0});
    code_.push_back({ExprOp::Not, 0});
    code_[jump].arg = static_cast<int64_t>(code_.size() - jump - 1);
    if (!a_constant) return;
    const bool decided = n.op == ExprOp::LogAnd ? a == 0 : a != 0;
    if (!decided && !b_constant) return;
    const int64_t v = decided ? (n.op == ExprOp::LogOr) : (b != 0);
    code_.resize(start);
    code_.push_back({ExprOp::Const, v});
  }

  std::vector<Step>& code_;
  const std::function<int(std::string_view)>& slot_of_;
  const std::string& text_;
};

}  // namespace

CompiledExpr CompiledExpr::compile(const Expr& e,
                                   const std::function<int(std::string_view)>& slot_of) {
  HIR_INTERNAL_ASSERT(!e.empty(), "compiling an empty expression");
  CompiledExpr c;
  c.text_ = e.str();
  Compiler<Step>(c.code_, slot_of, c.text_).emit(e.node());
  // Stack height along the fall-through path, the deepest one: a taken jump
  // lands with the same height the skipped steps would have left.
  int height = 0, deepest = 0;
  for (const Step& s : c.code_) {
    switch (opInfo(s.op).arity) {
      case 0: ++height; break;
      case 1: break;
      default: --height; break;
    }
    deepest = std::max(deepest, height);
  }
  HIR_CHECK(deepest <= kEvalStackSize,
            "expression '{}' is nested too deeply: it needs {} operand stack entries, at most {}",
            c.text_, deepest, kEvalStackSize);
  return c;
}

std::vector<int> CompiledExpr::slots() const {
  std::vector<int> out;
  for (const Step& s : code_)
    if (s.op == ExprOp::Var) out.push_back(static_cast<int>(s.arg));
  return out;
}

int64_t CompiledExpr::eval(const int64_t* slots) const {
  HIR_INTERNAL_ASSERT(!code_.empty(), "evaluating an empty CompiledExpr");
  int64_t stack[kEvalStackSize];
  int sp = 0;
  const std::size_t n = code_.size();
  try {
    for (std::size_t pc = 0; pc < n; ++pc) {
      const Step& s = code_[pc];
      switch (s.op) {
        case ExprOp::Const: stack[sp++] = s.arg; break;
        case ExprOp::Var: stack[sp++] = slots[s.arg]; break;
        case ExprOp::Neg:
        case ExprOp::Not:
        case ExprOp::BitNot: stack[sp - 1] = applyExprOp(s.op, stack[sp - 1], 0); break;
        case ExprOp::LogAnd:
          if (stack[sp - 1] == 0)
            pc += static_cast<std::size_t>(s.arg);
          else
            --sp;
          break;
        case ExprOp::LogOr:
          if (stack[sp - 1] != 0) {
            stack[sp - 1] = 1;
            pc += static_cast<std::size_t>(s.arg);
          } else {
            --sp;
          }
          break;
        default:
          --sp;
          stack[sp - 1] = applyExprOp(s.op, stack[sp - 1], stack[sp]);
          break;
      }
    }
  } catch (const ProgramError& e) {
    rethrowIn(e, text_);
  }
  return stack[0];
}

}  // namespace hir
