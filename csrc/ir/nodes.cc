#include <hostir/program.h>

#include <fmt/format.h>

namespace hir {

namespace {

// RFC 6901: '~' and '/' inside a reference token are escaped as ~0 and ~1.
std::string escapePointerToken(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char c : token) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::string childPath(std::string_view parent, std::string_view field, std::size_t i) {
  return fmt::format("{}/{}/{}", parent, escapePointerToken(field), i);
}

}  // namespace hir
