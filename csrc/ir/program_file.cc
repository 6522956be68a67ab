// Programs from files and streams, and params from the command line
// (<hostir/json.h>); the JSON itself is ir/json.cc's.
#include <hostir/json.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <hostir/error.h>

#include "common/text.h"

namespace hir {

Program loadProgram(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ParseError("", fmt::format("cannot read '{}': it is a directory, not a program file",
                                     path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ParseError("", fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  return parseProgram(readProgramText(in, path), path);
}

std::string readProgramText(std::istream& in, std::string_view source, std::size_t max) {
  std::string text;
  std::vector<char> chunk(std::min(max + 1, std::size_t{1} << 20));
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > max)
      throw ParseError("", fmt::format("cannot read '{}': it is longer than {} bytes, the most a "
                                       "program may have",
                                       source, max));
  }
  if (in.bad())
    throw ParseError("", fmt::format("cannot read '{}': {}", source, std::strerror(errno)));
  return text;
}

void applyParamOverrides(Program& program,
                         const std::vector<std::pair<std::string, int64_t>>& overrides) {
  for (const auto& override : overrides) {
    const std::string& name = override.first;
    auto it = std::find_if(program.params.begin(), program.params.end(),
                           [&](const Param& p) { return p.name == name; });
    if (it != program.params.end()) {
      it->value = override.second;
      continue;
    }
    std::string declared;
    for (const Param& p : program.params) declared += (declared.empty() ? "" : ", ") + p.name;
    throw ParseError("/params", fmt::format("unknown param {} given on the command line; {}",
                                            quotedText(name),
                                            declared.empty() ? "the program declares none"
                                                             : "declared: " + declared));
  }
}

}  // namespace hir
