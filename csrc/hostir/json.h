// Reading and writing programs in the JSON format hostir/1 (docs/ir.md).
// Reading is strict: every key must be known, every field has the right type,
// enum strings come from their tables; each error is a ParseError naming the
// JSON pointer. Writing then reading gives an equal Program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
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
// The most bytes a program's text may have: longer input (a device file
// such as /dev/zero, a runaway generator) is refused as it is read, before
// it fills the memory.
inline constexpr std::size_t kMaxProgramBytes = std::size_t{256} << 20;
// All of `in` (a file's or standard input's text, named `source` in
// errors); a ParseError past `max` bytes or when reading fails.
std::string readProgramText(std::istream& in, std::string_view source,
                            std::size_t max = kMaxProgramBytes);
// Serializes; `indent` < 0 gives one line.
std::string saveProgram(const Program& program, int indent = 2);

// Replaces param values: each override must name a declared param, else a
// ParseError ("unknown param 'x'; declared: a, b").
void applyParamOverrides(Program& program,
                         const std::vector<std::pair<std::string, int64_t>>& overrides);

}  // namespace hir
