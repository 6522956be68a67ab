// runAllTests(): GoogleTest on every rank of an MPI world, with one verdict.
// Rank 0 prints GoogleTest's usual output; the other ranks print only their
// failures, each line prefixed "[rank R]". After the tests every rank sends
// its outcome to all (one allgather of the lengths, one of the outcomes),
// rank 0 prints the summary (harness.h) and every rank returns 1 when any
// rank failed. A watchdog bounds the final wait, so that a rank stuck in a
// test cannot keep the others waiting forever. At the end of every test
// the ranks also agree, on a communicator of their own, that they all ended
// the same test: a rank that left a test early (a failure before one of
// its collectives) or ran another test ends the job then, saying so,
// instead of meeting the other ranks' collectives in the wrong test.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
// The harness's own communicator (LockstepListener), kept apart from the
// tests' world.
Bootstrap* g_lockstep = nullptr;

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

// Ends the job, saying `what` (after "[hir] rank R: "), unless it is
// destroyed within `timeout`: a rank still inside a test (stuck, or waiting
// for a rank that gave up on it) would otherwise keep this one waiting
// forever.
class Watchdog {
 public:
  Watchdog(Bootstrap& world, std::chrono::seconds timeout, std::string what)
      : what_(std::move(what)), thread_([this, &world, timeout] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (cv_.wait_for(lock, timeout, [this] { return done_; })) return;
          std::fprintf(stderr, "[hir] rank %d: %s; ending the job\n", world.rank(), what_.c_str());
          std::fflush(stderr);
          world.abort(1);
        }) {}

  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// At the end of every test, every rank sends which test it ended (its
// number and name) to all, on `lockstep` (a communicator apart from the
// tests' world, so that it never meets a test's collective), within the
// timeout; a rank that ended another test ends the job.
class LockstepListener : public testing::EmptyTestEventListener {
 public:
  LockstepListener(Bootstrap& lockstep, std::chrono::seconds timeout)
      : lockstep_(lockstep), timeout_(timeout) {}

  void OnTestEnd(const testing::TestInfo& info) override {
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    Ended mine{};
    mine.number = ++ended_;
    std::strncpy(mine.name, name.c_str(), sizeof(mine.name) - 1);
    std::vector<Ended> all(static_cast<std::size_t>(lockstep_.world()));
    {
      Watchdog watchdog(
          lockstep_, timeout_,
          "ended " + name + ", and not every rank ended it within " +
              std::to_string(timeout_.count()) +
              " s of this one (HIR_TEST_END_TIMEOUT_S): a rank is still inside it, stuck, or "
              "waiting in a collective of it that this rank left (a failure before it?)");
      lockstep_.allgather(&mine, all.data(), sizeof(Ended));
    }
    for (std::size_t r = 0; r < all.size(); ++r) {
      const Ended& e = all[r];
      if (e.number == mine.number && std::strncmp(e.name, mine.name, sizeof(mine.name)) == 0)
        continue;
      std::fprintf(stderr,
                   "[hir] rank %d: ended test #%llu, %s, while rank %zu ended test #%llu, %.*s: "
                   "the ranks do not run the same tests (a --gtest_filter, a sharding or a "
                   "GTEST_ environment variable that differs across ranks?); ending the job\n",
                   lockstep_.rank(), static_cast<unsigned long long>(mine.number), mine.name, r,
                   static_cast<unsigned long long>(e.number), static_cast<int>(sizeof(e.name)),
                   e.name);
      std::fflush(stderr);
      lockstep_.abort(1);
    }
  }

 private:
  struct Ended {
    uint64_t number;
    char name[248];
  };
  Bootstrap& lockstep_;
  std::chrono::seconds timeout_;
  uint64_t ended_ = 0;
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
    g_lockstep = createMpiBootstrap(argc, argv).release();
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
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  // GoogleTest calls OnTestEnd in the reverse order of the listeners: the
  // lockstep goes first in the list, so that a test's verdict is printed
  // before a rank that finds the ranks out of step ends the job.
  testing::TestEventListener* printer = listeners.Release(listeners.default_result_printer());
  if (g_lockstep->world() > 1) listeners.Append(new LockstepListener(*g_lockstep, end_timeout));
  if (rank == 0) {
    listeners.Append(printer);
  } else {
    delete printer;
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  int combined = 1;
  try {
    Watchdog watchdog(*g_world, end_timeout,
                      "not every rank finished its tests within " +
                          std::to_string(end_timeout.count()) +
                          " s of this one (HIR_TEST_END_TIMEOUT_S)");
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
  delete g_lockstep;
  g_lockstep = nullptr;
  delete g_world;  // MPI_Finalize
  g_world = nullptr;
  return combined;
}

}  // namespace hir::test
