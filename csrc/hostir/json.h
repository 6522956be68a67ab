// Reading and writing programs in the JSON format hostir/1 (docs/ir.md).
// Reading is strict: every key must be known, every field has the right type,
// enum strings come from their tables; each error is a ParseError naming the
// JSON pointer. Writing then reading gives an equal Program.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <hostir/program.h>

namespace hir {

inline constexpr std::string_view kFormatName = "hostir/1";

// Parses a whole document. `source` names it in errors (a file name).
Program parseProgram(std::string_view text, std::string_view source = "<program>");
// Reads and parses a file; an unreadable file is a ParseError too.
Program loadProgram(const std::string& path);
// Serializes; `indent` < 0 gives one line.
std::string saveProgram(const Program& program, int indent = 2);

// Replaces param values: each override must name a declared param, else a
// ParseError ("unknown param 'x'; declared: a, b").
void applyParamOverrides(Program& program,
                         const std::vector<std::pair<std::string, int64_t>>& overrides);

}  // namespace hir
