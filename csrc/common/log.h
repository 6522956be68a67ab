// Internal: hostir's diagnostics log (docs/cli.md, "Logging"). Lines go to
// standard error through spdlog, one per message, prefixed with the rank
// and what they are about:
//   [hir rank 1] warn nccl: ncclCommAbort failed: unhandled system error
// What is printed is chosen by two variables, read once when the library
// is loaded (reloadLogConfigFromEnvironment() reads them again):
//   HIR_LOG         off|error|warn|info|debug|trace   (default warn)
//   HIR_LOG_SUBSYS  a comma list of subsystems, or all (default all)
// An unknown value is not an error: it prints one warning that lists the
// accepted values, and the default applies to it.
//
// HIR_LOG_WARN(Subsys::Nccl, "fmt {}", x) and its siblings cost one load
// and one branch when the line is not wanted: the arguments are neither
// evaluated nor formatted then. Thread-safe. Private: public headers never
// include it (it needs fmt).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace hir {

// In increasing verbosity: a level prints its own lines and those of the
// levels before it. Off prints nothing.
enum class LogLevel : int { Off = 0, Error, Warn, Info, Debug, Trace };
inline constexpr int kLogLevels = 6;

// What a line is about; HIR_LOG_SUBSYS names them in lower case.
enum class Subsys : int {
  Init,    // bootstraps, sessions, devices being set up
  Launch,  // hir run --np: the launcher and the command line it builds
  Nccl,    // the nccl backend
  Ipc,     // the ipc backend and its handle exchanges
  Mpi,     // the mpi backend
  Host,    // the host device
  Cuda,    // the cuda device
  Eval,    // the evaluator: load, runs, backends chosen
  Check,   // the cross-rank check and check nodes
};
inline constexpr int kSubsystems = 9;

std::string_view logLevelName(LogLevel level);
std::string_view subsysName(Subsys s);

// Parses HIR_LOG / HIR_LOG_SUBSYS text. Empty text is the default (warn;
// all). Unknown words are returned in `unknown` (the rest still applies).
LogLevel parseLogLevel(std::string_view text, std::string* unknown);
uint32_t parseSubsystems(std::string_view text, std::string* unknown);  // a bit per Subsys

namespace log_detail {
// enabled[level]: the subsystems whose lines of that level are printed.
extern std::atomic<uint32_t> g_enabled[kLogLevels];
void write(LogLevel level, Subsys s, std::string_view message);
}  // namespace log_detail

inline bool logEnabled(LogLevel level, Subsys s) {
  return (log_detail::g_enabled[static_cast<int>(level)].load(std::memory_order_relaxed) >>
          static_cast<int>(s)) & 1u;
}

template <typename... Args>
void logLine(LogLevel level, Subsys s, fmt::format_string<Args...> format, Args&&... args) {
  log_detail::write(level, s, fmt::format(format, std::forward<Args>(args)...));
}

// Applies a level and a subsystem list as HIR_LOG / HIR_LOG_SUBSYS would,
// printing the warnings for unknown values (through the log, which then
// uses the new settings).
void configureLog(std::string_view level, std::string_view subsystems);
// Reads HIR_LOG and HIR_LOG_SUBSYS again.
void reloadLogConfigFromEnvironment();

// The rank in the prefix. Until a bootstrap sets it, the rank a launcher
// gave this process (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, RANK), or
// none: `[hir] warn ...`. A negative rank removes it.
void setLogRank(int rank);

// Where lines go: each complete line, with its prefix, without the final
// newline. An empty function restores standard error. For tests.
using LogSink = std::function<void(std::string_view line)>;
void setLogSink(LogSink sink);

}  // namespace hir

#define HIR_LOG_AT(level, subsys, ...)                                  \
  do {                                                                  \
    if (::hir::logEnabled(level, subsys)) [[unlikely]]                  \
      ::hir::logLine(level, subsys, __VA_ARGS__);                       \
  } while (0)

#define HIR_LOG_ERROR(subsys, ...) HIR_LOG_AT(::hir::LogLevel::Error, subsys, __VA_ARGS__)
#define HIR_LOG_WARN(subsys, ...) HIR_LOG_AT(::hir::LogLevel::Warn, subsys, __VA_ARGS__)
#define HIR_LOG_INFO(subsys, ...) HIR_LOG_AT(::hir::LogLevel::Info, subsys, __VA_ARGS__)
#define HIR_LOG_DEBUG(subsys, ...) HIR_LOG_AT(::hir::LogLevel::Debug, subsys, __VA_ARGS__)
#define HIR_LOG_TRACE(subsys, ...) HIR_LOG_AT(::hir::LogLevel::Trace, subsys, __VA_ARGS__)
