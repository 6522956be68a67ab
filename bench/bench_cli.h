// The command line of the MPI benchmarks (hir_p2p_bench, hir_comm_bench),
// on CLI11: parsed before MPI starts, on every rank alike, so that --help
// and bad usage end every rank cleanly and the message is printed once.
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <hostir/error.h>

#include "common/parse_int.h"

namespace hir::bench {

inline constexpr int64_t kMaxBytes = int64_t{1} << 40;  // 1 TiB: sizes times a factor never overflow

using hir::parseInteger;  // common/parse_int.h

// Bytes: a number with an optional suffix K, M, G (or KiB, MiB, GiB; B), in
// [min, max].
inline int64_t parseBytes(const std::string& flag, const std::string& text, int64_t min,
                          int64_t max = kMaxBytes) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? end : "";
  const double mult = unit == "K" || unit == "k" || unit == "KiB" ? 1024.0
                      : unit == "M" || unit == "MiB"               ? 1024.0 * 1024
                      : unit == "G" || unit == "GiB"               ? 1024.0 * 1024 * 1024
                      : unit.empty() || unit == "B"                ? 1.0
                                                                   : 0.0;
  if (text.empty() || end == text.c_str() || mult == 0 || !std::isfinite(v) ||
      std::isspace(static_cast<unsigned char>(text[0])))
    throw UsageError(fmt::format(
        "{} expects a number of bytes with an optional K, M or G suffix, got '{}'", flag, text));
  const double bytes = v * mult;
  if (!(bytes >= static_cast<double>(min) && bytes <= static_cast<double>(max)))
    throw UsageError(fmt::format("{} must be in [{}, {}] bytes, got {}", flag, min, max, text));
  return static_cast<int64_t>(bytes);
}

// Errors before MPI starts are said once, by the process that will be rank 0
// (or the only one), not by every rank of the job.
inline bool firstRank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char* v = std::getenv(var)) return std::string_view(v) == "0";
  return true;
}

// An option that takes one value and may be given once (checked by parse()).
inline void singleOption(CLI::App& app, const char* name, std::string& into, const char* type,
                         const char* help) {
  app.add_option(name, into, help)
      ->type_name(type)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// Parses argv into `app`'s options, then lets `convert` turn the texts into
// values (throwing UsageError naming the flag). Returns -1 to go on, or the
// exit code: 0 after --help, 2 after bad usage, said once as
// "PROGRAM: error: ...".
inline int parse(CLI::App& app, int argc, char** argv, const char* program,
                 const std::function<void()>& convert) {
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::Success& e) {  // --help
      return firstRank() ? app.exit(e) : 0;
    } catch (const CLI::ArgumentMismatch& e) {
      const std::string what = e.what();  // "--min: 1 required BYTES missing"
      throw UsageError(what.find("missing") != std::string::npos
                           ? what.substr(0, what.find(':')) + " needs a value"
                           : what);
    } catch (const CLI::ParseError& e) {
      throw UsageError(e.what());
    }
    for (const std::string& extra : app.remaining())
      throw UsageError(fmt::format("unknown {} '{}'",
                                   extra.size() > 1 && extra[0] == '-' ? "option" : "argument",
                                   extra));
    for (const CLI::Option* opt : app.get_options())
      if (opt->get_multi_option_policy() == CLI::MultiOptionPolicy::TakeLast && opt->count() > 1)
        throw UsageError(fmt::format("{} given twice", opt->get_name()));
    convert();
    return -1;
  } catch (const Error& e) {
    if (firstRank())
      std::fprintf(stderr, "%s: error: %s\n%s: see `%s --help`\n", program, e.what(), program,
                   program);
    return kExitBadInput;
  }
}

// The median of repeated timings (the mean of the middle two for an even
// count); `v` is not empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace hir::bench
