// Text from a program or a command line, made safe to print: control
// characters, bidirectional overrides and bytes that are not UTF-8 are
// written as escapes, so that nothing a user writes can move the cursor,
// clear a line, hide text or cut a message short (a NUL).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace hir {

// `s` with every unsafe character escaped: \n \r \t \0 \\, \xNN for other
// C0 controls, DEL and bytes that are not UTF-8, \uNNNN for C1 controls and
// the bidirectional controls (U+061C, U+200E-U+200F, U+202A-U+202E,
// U+2066-U+2069). With `keep_lines`, newlines and tabs stay as they are (a
// message of several lines) and backslashes are not doubled.
std::string printable(std::string_view s, bool keep_lines = false);

// printable(s) in single quotes, a quote inside escaped as \', cut after
// `max_chars` characters with "..." after the closing quote.
std::string quotedText(std::string_view s, std::size_t max_chars = 64);

// Free text a program gives (its name, a kernel's name): at most this many
// bytes, and nothing printable() would escape.
constexpr std::size_t kMaxTextBytes = 256;
// Why `s` is not such text ("it has \x1b at byte 3", "it is 5000 bytes
// long"), or nullopt.
std::optional<std::string> textProblem(std::string_view s);
// The message for free text `s` that is not such text, `what` naming the
// field ("a program name is printable text of at most 256 bytes, but it has
// \x1b at byte 3"), or nullopt: the parser's and validation's alike.
std::optional<std::string> textError(std::string_view what, std::string_view s);

}  // namespace hir
