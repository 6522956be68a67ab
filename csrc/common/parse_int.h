// An integer from the command line or the environment, and a 0/1 switch
// from the environment.
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

// An integer in [min, max] from the environment variable `name`
// (parseInteger, naming the variable): unset or empty is `unset`.
inline int64_t envInteger(const char* name, int64_t unset, int64_t min,
                          int64_t max = INT64_MAX) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  return parseInteger(name, v, min, max);
}

// A 0/1 switch from the environment: "0" is false, "1" is true, unset or
// empty is `unset` (false unless given), anything else a UsageError naming
// the variable, what it does and the value.
inline bool envSwitch(const char* name, std::string_view what, bool unset = false) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return unset;
  if (std::string_view(v) == "0") return false;
  if (std::string_view(v) != "1")
    throw UsageError(fmt::format("{} must be 0 or 1 (1: {}), got '{}'", name, what, v));
  return true;
}

}  // namespace hir
