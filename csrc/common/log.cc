// The diagnostics log (common/log.h) on spdlog: one logger of our own (not
// spdlog's registry, which an embedder may use for its own loggers) with one
// sink that writes each line to standard error, or to a test's function.
// Filtering happens before spdlog is reached, in logEnabled().
#include "common/log.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace hir {
namespace {

constexpr std::array<std::string_view, kLogLevels> kLevelNames = {"off",  "error", "warn",
                                                                  "info", "debug", "trace"};
constexpr std::array<std::string_view, kSubsystems> kSubsysNames = {
    "init", "launch", "nccl", "ipc", "mpi", "host", "cuda", "eval", "check"};
constexpr uint32_t kAllSubsystems = (1u << kSubsystems) - 1;

std::string joinNames(const auto& names, std::string_view last_sep) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? last_sep : std::string_view(", ");
    out += names[i];
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Writes each line to standard error, or hands it to the test's function.
class LineSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void setFunction(LogSink fn) {
    std::lock_guard lock(mutex_);
    fn_ = std::move(fn);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string_view line(msg.payload.data(), msg.payload.size());
    if (fn_) {
      fn_(line);
      return;
    }
    std::string text(line);
    text += '\n';
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  LogSink fn_;
};

struct Logger {
  std::shared_ptr<LineSink> sink = std::make_shared<LineSink>();
  spdlog::logger logger{"hostir", sink};
  Logger() {
    logger.set_level(spdlog::level::trace);  // hostir filters before calling it
    logger.flush_on(spdlog::level::trace);
  }
};

Logger& theLogger() {
  static Logger* l = new Logger();  // never destroyed: lines may come during exit
  return *l;
}

std::atomic<int> g_rank{-1};

int rankFromLauncher() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < (1L << 30)) return static_cast<int>(r);
  }
  return -1;
}

// A warning about the log's own settings: printed whatever they say.
void configWarning(const std::string& text) {
  log_detail::write(LogLevel::Warn, Subsys::Init, text);
}

struct LoadFromEnvironment {
  LoadFromEnvironment() {
    g_rank.store(rankFromLauncher(), std::memory_order_relaxed);
    reloadLogConfigFromEnvironment();
  }
} g_load_from_environment;

}  // namespace

namespace log_detail {

// Before the environment is read: warn and error, every subsystem.
std::atomic<uint32_t> g_enabled[kLogLevels] = {0, kAllSubsystems, kAllSubsystems, 0, 0, 0};

void write(LogLevel level, Subsys s, std::string_view message) {
  const int rank = g_rank.load(std::memory_order_relaxed);
  std::string line = rank >= 0 ? fmt::format("[hir rank {}] ", rank) : std::string("[hir] ");
  line += fmt::format("{} {}: {}", logLevelName(level), subsysName(s), message);
  // Level info for spdlog's own bookkeeping only; the text carries ours.
  theLogger().logger.log(spdlog::level::info, std::string_view(line));
}

}  // namespace log_detail

std::string_view logLevelName(LogLevel level) {
  return kLevelNames.at(static_cast<std::size_t>(level));
}

std::string_view subsysName(Subsys s) { return kSubsysNames.at(static_cast<std::size_t>(s)); }

LogLevel parseLogLevel(std::string_view text, std::string* unknown) {
  text = trim(text);
  if (text.empty()) return LogLevel::Warn;
  for (int i = 0; i < kLogLevels; ++i)
    if (kLevelNames[static_cast<std::size_t>(i)] == text) return static_cast<LogLevel>(i);
  if (unknown) *unknown = std::string(text);
  return LogLevel::Warn;
}

uint32_t parseSubsystems(std::string_view text, std::string* unknown) {
  text = trim(text);
  if (text.empty()) return kAllSubsystems;
  // "^a,b": every subsystem but a and b (as NCCL_DEBUG_SUBSYS).
  const bool except = text.front() == '^';
  if (except) text.remove_prefix(1);
  uint32_t mask = 0;
  std::string bad;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view word = trim(text.substr(0, comma));
    if (word == "all") {
      mask = kAllSubsystems;
    } else if (!word.empty()) {
      bool found = false;
      for (int i = 0; i < kSubsystems; ++i)
        if (kSubsysNames[static_cast<std::size_t>(i)] == word) {
          mask |= 1u << i;
          found = true;
        }
      if (!found) bad += fmt::format("{}{}", bad.empty() ? "" : ", ", word);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (unknown) *unknown = bad;
  return except ? kAllSubsystems & ~mask : mask;
}

void configureLog(std::string_view level_text, std::string_view subsys_text) {
  std::string bad_level, bad_subsys;
  const LogLevel level = parseLogLevel(level_text, &bad_level);
  const uint32_t mask = parseSubsystems(subsys_text, &bad_subsys);
  for (int l = 0; l < kLogLevels; ++l)
    log_detail::g_enabled[l].store(l != 0 && l <= static_cast<int>(level) ? mask : 0,
                                   std::memory_order_relaxed);
  if (!bad_level.empty())
    configWarning(fmt::format("HIR_LOG={} is not a log level; expected {} (using warn)",
                              bad_level, joinNames(kLevelNames, " or ")));
  if (!bad_subsys.empty())
    configWarning(fmt::format("HIR_LOG_SUBSYS names unknown subsystems ({}); expected a comma "
                              "list of {}, or all (^ in front: all but those); ignoring them",
                              bad_subsys, joinNames(kSubsysNames, ", ")));
}

void reloadLogConfigFromEnvironment() {
  const char* level = std::getenv("HIR_LOG");
  const char* subsys = std::getenv("HIR_LOG_SUBSYS");
  configureLog(level ? level : "", subsys ? subsys : "");
}

void setLogRank(int rank) { g_rank.store(rank < 0 ? -1 : rank, std::memory_order_relaxed); }

void setLogSink(LogSink sink) { theLogger().sink->setFunction(std::move(sink)); }

}  // namespace hir
