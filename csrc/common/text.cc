#include "common/text.h"

#include <fmt/format.h>

namespace hir {
namespace {

// The code point of the UTF-8 sequence at s[i] and its length, or length 0
// where the bytes are not UTF-8 (overlong forms and surrogates included).
struct Decoded {
  char32_t cp = 0;
  std::size_t length = 0;
};

Decoded decode(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return {c, 1};
  std::size_t n = 0;
  char32_t cp = 0, min = 0;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07, min = 0x10000;
  else return {};
  if (i + n > s.size()) return {};
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {};
  return {cp, n};
}

bool unsafeCodePoint(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

// The escape of the character at s[i] (empty: print it as it is) and its
// length in bytes.
std::pair<std::string, std::size_t> escapeAt(std::string_view s, std::size_t i,
                                             bool keep_lines) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    switch (c) {
      case '\n': return {keep_lines ? "" : "\\n", 1};
      case '\t': return {keep_lines ? "" : "\\t", 1};
      case '\r': return {"\\r", 1};
      case '\0': return {"\\0", 1};
      case '\\': return {keep_lines ? "" : "\\\\", 1};
      default: break;
    }
    if (c < 0x20 || c == 0x7F) return {fmt::format("\\x{:02x}", c), 1};
    return {"", 1};
  }
  const Decoded d = decode(s, i);
  if (d.length == 0) return {fmt::format("\\x{:02x}", c), 1};
  if (unsafeCodePoint(d.cp)) return {fmt::format("\\u{:04x}", static_cast<uint32_t>(d.cp)), d.length};
  return {"", d.length};
}

// The byte offset of the first character printable() would escape, if any.
std::optional<std::size_t> firstUnprintable(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    auto [escape, length] = escapeAt(s, i, false);
    if (!escape.empty() && s[i] != '\\') return i;
    i += length;
  }
  return std::nullopt;
}

}  // namespace

std::string printable(std::string_view s, bool keep_lines) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    auto [escape, length] = escapeAt(s, i, keep_lines);
    if (escape.empty()) out.append(s.substr(i, length));
    else out += escape;
    i += length;
  }
  return out;
}

std::string quotedText(std::string_view s, std::size_t max_chars) {
  std::string out = "'";
  std::size_t chars = 0, i = 0;
  for (; i < s.size() && chars < max_chars; ++chars) {
    auto [escape, length] = escapeAt(s, i, false);
    if (escape.empty() && s[i] == '\'') escape = "\\'";
    if (escape.empty()) out.append(s.substr(i, length));
    else out += escape;
    i += length;
  }
  out += '\'';
  if (i < s.size()) out += "...";
  return out;
}

std::optional<std::string> textProblem(std::string_view s) {
  if (s.size() > kMaxTextBytes)
    return fmt::format("it is {} bytes long, more than {}", s.size(), kMaxTextBytes);
  if (const auto at = firstUnprintable(s)) {
    return fmt::format("it has {} at byte {}", escapeAt(s, *at, false).first, *at);
  }
  return std::nullopt;
}

std::optional<std::string> textError(std::string_view what, std::string_view s) {
  const std::optional<std::string> problem = textProblem(s);
  if (!problem) return std::nullopt;
  return fmt::format("{} is printable text of at most {} bytes, but {}", what, kMaxTextBytes,
                     *problem);
}

}  // namespace hir
