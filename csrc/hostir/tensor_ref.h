// Tensor references: `name`, `name[e]` (select along dim 0), `name[e][f]`
// (select along dims 0 and 1), `name[a:b]` (rows a..b-1 of the next dim).
// Any number of selects may be followed by at most one range, which is last:
// such a reference is always a contiguous span of its allocation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/expr.h>

namespace hir {

struct TensorRef {
  std::string name;
  std::vector<Expr> select;  // one index per leading dimension
  std::optional<std::pair<Expr, Expr>> range;  // [begin, end) of the next dim

  // Parses `text`; errors throw ParseError at `pointer`.
  static TensorRef parse(std::string_view text, std::string_view pointer);
  std::string str() const;
  bool empty() const { return name.empty(); }
  friend bool operator==(const TensorRef&, const TensorRef&) = default;
};

}  // namespace hir
