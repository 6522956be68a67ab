// An integer from the command line or a setting's text (hostir/settings.h).
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <hostir/error.h>

namespace hir {

// An integer in [min, max], parsed as 64 bits: out of range is a UsageError
// that names the flag, never a truncation.
inline int64_t parseInteger(const std::string& flag, const std::string& text, int64_t min,
                            int64_t max = INT64_MAX) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0')
    throw UsageError(fmt::format("{} expects an integer, got '{}'", flag, text));
  if (errno == ERANGE || v < min || v > max)
    throw UsageError(fmt::format("{} must be in [{}, {}], got {}", flag, min, max, text));
  return v;
}

}  // namespace hir
