// The diagnostics log (common/log.h): HIR_LOG levels, HIR_LOG_SUBSYS lists,
// the rank prefix, filtering, and the warnings for unknown values. Lines are
// captured through setLogSink.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"

namespace hir {
namespace {

// Captures every line while alive; restores stderr, the rank and the
// environment's settings afterwards.
class LogCapture {
 public:
  LogCapture() {
    setLogSink([this](std::string_view line) {
      std::lock_guard lock(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() {
    setLogSink(nullptr);
    setLogRank(-1);
    reloadLogConfigFromEnvironment();
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

uint32_t bit(Subsys s) { return 1u << static_cast<int>(s); }

TEST(Log, LevelNamesParseToTheirLevel) {
  const std::pair<const char*, LogLevel> cases[] = {
      {"off", LogLevel::Off},     {"error", LogLevel::Error}, {"warn", LogLevel::Warn},
      {"info", LogLevel::Info},   {"debug", LogLevel::Debug}, {"trace", LogLevel::Trace},
      {" info ", LogLevel::Info}, {"", LogLevel::Warn}};
  for (const auto& [text, level] : cases) {
    std::string unknown;
    EXPECT_EQ(parseLogLevel(text, &unknown), level) << text;
    EXPECT_EQ(unknown, "") << text;
  }
  std::string unknown;
  EXPECT_EQ(parseLogLevel("loud", &unknown), LogLevel::Warn);
  EXPECT_EQ(unknown, "loud");
  EXPECT_EQ(parseLogLevel("INFO", &unknown), LogLevel::Warn) << "names are lower case";
}

TEST(Log, SubsystemListsParseToTheirBits) {
  std::string unknown;
  EXPECT_EQ(parseSubsystems("nccl", &unknown), bit(Subsys::Nccl));
  EXPECT_EQ(parseSubsystems("nccl, ipc,launch", &unknown),
            bit(Subsys::Nccl) | bit(Subsys::Ipc) | bit(Subsys::Launch));
  EXPECT_EQ(unknown, "");
  const uint32_t all = parseSubsystems("all", &unknown);
  for (Subsys s : {Subsys::Init, Subsys::Launch, Subsys::Nccl, Subsys::Ipc, Subsys::Mpi,
                   Subsys::Host, Subsys::Cuda, Subsys::Eval, Subsys::Check})
    EXPECT_TRUE(all & bit(s)) << subsysName(s);
  EXPECT_EQ(parseSubsystems("", &unknown), all);
  EXPECT_EQ(parseSubsystems("^nccl,mpi", &unknown), all & ~(bit(Subsys::Nccl) | bit(Subsys::Mpi)));
  EXPECT_EQ(parseSubsystems("nccl,gpu,net", &unknown), bit(Subsys::Nccl));
  EXPECT_EQ(unknown, "gpu, net");
}

TEST(Log, LinesCarryTheRankTheLevelAndTheSubsystem) {
  LogCapture capture;
  configureLog("info", "all");
  setLogRank(1);
  HIR_LOG_WARN(Subsys::Nccl, "ncclCommAbort failed: {}", "unhandled system error");
  setLogRank(-1);
  HIR_LOG_INFO(Subsys::Launch, "starting {} ranks", 2);
  EXPECT_EQ(capture.lines(),
            (std::vector<std::string>{"[hir rank 1] warn nccl: ncclCommAbort failed: unhandled "
                                      "system error",
                                      "[hir] info launch: starting 2 ranks"}));
}

// A line above the level or of a subsystem not listed prints nothing, and
// its arguments are not even evaluated.
TEST(Log, DisabledLinesPrintNothingAndEvaluateNothing) {
  LogCapture capture;
  configureLog("info", "nccl,ipc");
  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  HIR_LOG_INFO(Subsys::Mpi, "mpi {}", count());     // subsystem not listed
  HIR_LOG_DEBUG(Subsys::Nccl, "nccl {}", count());  // above the level
  HIR_LOG_INFO(Subsys::Ipc, "ipc {}", count());     // printed
  HIR_LOG_ERROR(Subsys::Nccl, "nccl {}", count());  // printed
  EXPECT_EQ(evaluated, 2);
  EXPECT_EQ(capture.lines(),
            (std::vector<std::string>{"[hir] info ipc: ipc 1", "[hir] error nccl: nccl 2"}));
  EXPECT_TRUE(logEnabled(LogLevel::Info, Subsys::Nccl));
  EXPECT_FALSE(logEnabled(LogLevel::Info, Subsys::Eval));

  configureLog("off", "all");
  HIR_LOG_ERROR(Subsys::Nccl, "not shown");
  EXPECT_EQ(capture.lines().size(), 2u);
}

TEST(Log, TheDefaultIsWarnForEverySubsystem) {
  LogCapture capture;
  configureLog("", "");
  EXPECT_TRUE(logEnabled(LogLevel::Warn, Subsys::Eval));
  EXPECT_TRUE(logEnabled(LogLevel::Error, Subsys::Check));
  EXPECT_FALSE(logEnabled(LogLevel::Info, Subsys::Eval));
  EXPECT_TRUE(capture.lines().empty());
}

TEST(Log, UnknownValuesWarnOnceListingTheAcceptedOnes) {
  LogCapture capture;
  configureLog("loud", "nccl,gpu");
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "[hir] warn init: HIR_LOG=loud is not a log level; expected off, error, warn, info, "
            "debug or trace (using warn)");
  EXPECT_EQ(lines[1],
            "[hir] warn init: HIR_LOG_SUBSYS names unknown subsystems (gpu); expected a comma "
            "list of init, launch, nccl, ipc, mpi, host, cuda, eval, check, or all (^ in front: "
            "all but those); ignoring them");
  // The rest still applies: warn, nccl only.
  EXPECT_TRUE(logEnabled(LogLevel::Warn, Subsys::Nccl));
  EXPECT_FALSE(logEnabled(LogLevel::Warn, Subsys::Mpi));
  EXPECT_FALSE(logEnabled(LogLevel::Info, Subsys::Nccl));
}

// Lines from many threads arrive whole.
TEST(Log, LinesFromManyThreadsStayWhole) {
  LogCapture capture;
  configureLog("info", "all");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 100; ++i) HIR_LOG_INFO(Subsys::Eval, "thread {} line {}", t, i);
    });
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = capture.lines();
  ASSERT_EQ(lines.size(), 400u);
  for (const std::string& line : lines)
    EXPECT_EQ(line.rfind("[hir] info eval: thread ", 0), 0u) << line;
}

}  // namespace
}  // namespace hir
