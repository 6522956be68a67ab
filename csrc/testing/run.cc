// runAllTests(): GoogleTest on every rank of an MPI world, with one verdict.
// Rank 0 prints GoogleTest's usual output; the other ranks print only their
// failures, each line prefixed "[rank R]". After the tests every rank sends
// its outcome to all (one allgather of the lengths, one of the outcomes),
// rank 0 prints the summary (harness.h) and every rank returns 1 when any
// rank failed. A watchdog bounds the final wait, so that a rank stuck in a
// test cannot keep the others waiting forever.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <hostir/error.h>
#include <hostir/testing.h>
#include "testing/harness.h"

namespace hir::test {

namespace {

// Not destroyed at exit: a rank that calls exit() inside a test must not
// finalize MPI, so that mpirun sees a rank end without MPI_Finalize and ends
// the job, instead of the other ranks waiting for it in the final exchange.
Bootstrap* g_world = nullptr;

// Prints the failures of a rank other than 0: "[rank R] file:line: Failure",
// the message, and "[rank R] FAILED Suite.Test" at the end of a failed test.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::string where = result.file_name() ? result.file_name() : "unknown file";
    if (result.line_number() >= 0) where += ":" + std::to_string(result.line_number());
    printLines(where + ": Failure\n" + result.message());
  }

  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      printLines(std::string("FAILED ") + info.test_suite_name() + "." + info.name());
  }

 private:
  void printLines(const std::string& text) const {
    const std::string prefix = "[rank " + std::to_string(rank_) + "] ";
    std::string out;
    std::size_t start = 0;
    while (start <= text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      out += prefix + text.substr(start, end - start) + "\n";
      start = end + 1;
    }
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
  }

  int rank_;
};

// This rank's outcome, from GoogleTest's record of the run.
harness::RankOutcome localOutcome(int rank, int run_result) {
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  harness::RankOutcome outcome;
  outcome.rank = rank;
  outcome.failed = run_result != 0;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    if (suite.ad_hoc_test_result().Failed())
      outcome.other_failures.push_back(std::string(suite.name()) +
                                       " (its SetUpTestSuite or TearDownTestSuite)");
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& info = *suite.GetTestInfo(t);
      if (info.should_run() && info.result()->Failed())
        outcome.failed_tests.push_back(std::string(suite.name()) + "." + info.name());
    }
  }
  if (unit.ad_hoc_test_result().Failed())
    outcome.other_failures.push_back("outside any test (a global set-up or tear-down)");
  if (outcome.failed && outcome.failed_tests.empty() && outcome.other_failures.empty())
    outcome.other_failures.push_back("GoogleTest returned " + std::to_string(run_result) +
                                     " with no failed test (a result file not written?)");
  return outcome;
}

// Ends the job when the final exchange is not over within `timeout`: a rank
// still inside a test (stuck, or waiting for a rank that gave up on it)
// would otherwise keep this one waiting forever.
class EndWatchdog {
 public:
  EndWatchdog(Bootstrap& world, std::chrono::seconds timeout)
      : thread_([this, &world, timeout] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (cv_.wait_for(lock, timeout, [this] { return done_; })) return;
          std::fprintf(stderr,
                       "[hir] rank %d: not every rank finished its tests within %lld s of this one "
                       "(HIR_TEST_END_TIMEOUT_S); ending the job\n",
                       world.rank(), static_cast<long long>(timeout.count()));
          std::fflush(stderr);
          world.abort(1);
        }) {}

  ~EndWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// Every rank's outcome, in rank order (collective).
std::vector<harness::RankOutcome> gatherOutcomes(Bootstrap& world,
                                                 const harness::RankOutcome& mine) {
  const std::string bytes = harness::encode(mine);
  const auto n = static_cast<std::size_t>(world.world());
  uint64_t size = bytes.size();
  std::vector<uint64_t> sizes(n);
  world.allgather(&size, sizes.data(), sizeof(size));
  uint64_t longest = 0;
  for (uint64_t s : sizes) longest = std::max(longest, s);
  std::string padded = bytes;
  padded.resize(longest);
  std::string all(longest * n, '\0');
  world.allgather(padded.data(), all.data(), longest);
  std::vector<harness::RankOutcome> outcomes;
  for (std::size_t r = 0; r < n; ++r)
    outcomes.push_back(harness::decode(static_cast<int>(r), all.substr(r * longest, sizes[r])));
  return outcomes;
}

std::string programName(const char* argv0) {
  std::string name = argv0 != nullptr ? argv0 : "test";
  const std::size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// Gives this rank its own result file (harness::perRankOutput). GoogleTest
// sets up its result file inside InitGoogleTest, so this runs before it and
// rewrites both sources of the value: GTEST_OUTPUT (already read into the
// flag) and every --gtest_output=... argument (the last one wins there).
void perRankOutputs(int rank, int argc, char** argv) {
  const std::string program = programName(argv[0]);
  const std::string from_env = GTEST_FLAG_GET(output);
  if (!from_env.empty()) GTEST_FLAG_SET(output, harness::perRankOutput(from_env, rank, program));
  static std::vector<std::string> rewritten;  // argv points into it until exit
  rewritten.reserve(static_cast<std::size_t>(argc));
  const std::string flag = "--gtest_output=";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(flag, 0) != 0) continue;
    rewritten.push_back(flag + harness::perRankOutput(arg.substr(flag.size()), rank, program));
    argv[i] = rewritten.back().data();
  }
}

}  // namespace

Bootstrap& world() {
  if (g_world == nullptr)
    throw UsageError(
        "hir::test::world(): expected a test program whose main is hostir::gtest_main's (or calls "
        "hir::test::runAllTests), found none: link hostir::gtest_main");
  return *g_world;
}

int runAllTests(int* argc, char*** argv) {
  static bool started = false;
  if (started) throw UsageError("hir::test::runAllTests: expected one call, found a second");
  started = true;
  std::chrono::seconds end_timeout{};
  try {
    end_timeout = harness::endTimeout(std::getenv("HIR_TEST_END_TIMEOUT_S"));
    g_world = createMpiBootstrap(argc, argv).release();
  } catch (const Error& e) {
    std::fprintf(stderr, "[hir] cannot start the tests: %s\n", e.what());
    return e.exitCode();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[hir] cannot start the tests: %s\n", e.what());
    return kExitRuntimeFailure;
  }
  const int rank = g_world->rank();
  perRankOutputs(rank, *argc, *argv);
  testing::InitGoogleTest(argc, *argv);
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  int combined = 1;
  try {
    EndWatchdog watchdog(*g_world, end_timeout);
    const std::vector<harness::RankOutcome> all =
        gatherOutcomes(*g_world, localOutcome(rank, result));
    combined = 0;
    for (const harness::RankOutcome& o : all)
      if (o.failed) combined = 1;
    if (rank == 0 && !GTEST_FLAG_GET(list_tests)) {
      std::fputs(harness::formatSummary(all).c_str(), stdout);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[hir] rank %d: cannot combine the test results of the ranks: %s\n", rank,
                 e.what());
  }
  delete g_world;  // MPI_Finalize
  g_world = nullptr;
  return combined;
}

}  // namespace hir::test
