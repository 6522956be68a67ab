// libFuzzer target: the expression parser and both evaluators (hostir/expr.h).
// The input is the text of one expression. Properties beyond "no crash, only
// user errors":
// - printing is canonical: parse(str()) is the same tree and prints the same;
// - Expr::evaluate (the tree) and CompiledExpr::eval (postfix, constant
//   folded, short-circuit jumps) agree: the same value, or both a
//   ProgramError. Every name gets a value from a table of edge cases
//   (0, -1, 63, 64, INT64_MIN, ...) chosen by a hash of the name, so the
//   fuzzer reaches overflow, shifts and division by zero by naming them.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <hostir/expr.h>

#include "fuzz_util.h"

namespace {

constexpr int64_t kValues[] = {0, 1, -1, 2, 3, 7, 8, 63, 64, -63, -64, 1000, int64_t{1} << 31,
                               int64_t{1} << 32, int64_t{1} << 62, INT64_MAX, INT64_MIN,
                               INT64_MIN + 1, INT64_MAX - 1, -(int64_t{1} << 62)};

int64_t valueOf(std::string_view name) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return kValues[h % std::size(kValues)];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hir;
  const std::string_view input = hir_fuzz::text(data, size);
  Expr e;
  if (!hir_fuzz::userErrorsAreFine([&] { e = Expr::parse(input, "/fuzz"); })) return 0;
  if (e.empty()) hir_fuzz::fail("parse returned an empty expression", input);

  // Canonical printing.
  const std::string printed = e.str();
  Expr reparsed;
  try {
    reparsed = Expr::parse(printed, "/printed");
  } catch (const std::exception& ex) {
    hir_fuzz::fail("the printed form does not parse",
                   fmt::format("input: {}\nprinted: {}\n{}", input, printed, ex.what()));
  }
  if (!(reparsed == e) || reparsed.str() != printed)
    hir_fuzz::fail("parse(str()) differs",
                   fmt::format("input: {}\nprinted: {}\nreprinted: {}", input, printed,
                               reparsed.str()));

  // The two evaluators agree.
  std::vector<std::string> names;
  e.names(names);
  std::vector<int64_t> slots;
  for (const std::string& n : names) slots.push_back(valueOf(n));
  auto lookup = [](std::string_view n) -> std::optional<int64_t> { return valueOf(n); };
  std::optional<int64_t> tree;
  std::string tree_error;
  try {
    tree = e.evaluate(lookup);
  } catch (const ProgramError& ex) {
    tree_error = ex.what();
  }
  hir_fuzz::userErrorsAreFine([&] {
    const CompiledExpr c = CompiledExpr::compile(e, [&](std::string_view n) -> int {
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == n) return static_cast<int>(i);
      return -1;
    });
    std::optional<int64_t> flat;
    std::string flat_error;
    try {
      flat = c.eval(slots.data());
    } catch (const ProgramError& ex) {
      flat_error = ex.what();
    }
    if (tree != flat)
      hir_fuzz::fail("Expr::evaluate and CompiledExpr::eval disagree",
                     fmt::format("expression: {}\ntree: {}\ncompiled: {}", printed,
                                 tree ? std::to_string(*tree) : "error: " + tree_error,
                                 flat ? std::to_string(*flat) : "error: " + flat_error));
  });
  return 0;
}
