// Private to ir/: the operator table and the printer, shared by expr.cc
// (parsing, printing) and expr_eval.cc (evaluation, error messages).
#pragma once

#include <string>
#include <string_view>

#include <hostir/expr.h>

namespace hir {

struct OpInfo {
  std::string_view symbol;
  int precedence;  // a larger number binds tighter
  int arity;
};

// The symbol, precedence and number of operands of `op`.
OpInfo opInfo(ExprOp op);

// The canonical text of the tree at `n`, as Expr::str() prints it.
std::string nodeText(const ExprNode& n);

}  // namespace hir
