// Bounded ending as a user sees it: `hir run --np 2 --device host --timeout
// 2` on the fault programs of tests/tools/data/faults/ (the ones
// scripts/gpu-faults.sh runs on GPUs) exits 3 within the timeout + 5 s —
// counted after the launch, whose own time is measured on a program that
// completes — and every rank's report names what it waited for. The killed
// rank case is in the script (it kills a process by pid).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/test_util.h"

namespace hir {
namespace {

using test::CommandResult;
using Clock = std::chrono::steady_clock;

constexpr double kTimeoutS = 2.0;

struct Timed {
  CommandResult result;
  double seconds = 0;
};

Timed hirRun(const std::string& program, std::vector<std::string> flags) {
  std::vector<std::string> argv = {test::hirBinary(), "run", program, "--np", "2", "--device",
                                   "host"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const auto t0 = Clock::now();
  Timed t{test::runCommand(argv, 120), 0};
  t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return t;
}

std::string fault(const std::string& name) {
  return test::sourceDir() + "/tests/tools/data/faults/" + name;
}

// How long launching two ranks and ending them takes here, with a program
// that completes at once.
double launchSeconds() {
  static const double seconds = [] {
    Timed t = hirRun(test::examplesDir() + "/allreduce.json", {});
    EXPECT_EQ(t.result.exit_code, 0) << t.result.out << t.result.err;
    return t.seconds;
  }();
  return seconds;
}

// Each entry of `in_report` lists alternatives, one of which the output must
// contain: when several ranks fail at once, the first to end the job may
// end the others before they print.
void expectBoundedTimeout(const std::string& program, std::vector<std::string> flags,
                          const std::vector<std::vector<std::string>>& in_report) {
  flags.push_back("--timeout=2");
  const double launch = launchSeconds();
  Timed t = hirRun(fault(program), flags);
  const std::string& err = t.result.err;
  EXPECT_EQ(t.result.exit_code, 3) << t.result.out << err;
  EXPECT_LT(t.seconds, launch + kTimeoutS + 5.0)
      << program << " ended after " << t.seconds << " s (launch: " << launch << " s)\n" << err;
  EXPECT_GE(t.seconds, kTimeoutS) << err;
  for (const std::vector<std::string>& any : in_report) {
    bool found = false;
    for (const std::string& text : any) found = found || err.find(text) != std::string::npos;
    EXPECT_TRUE(found) << "missing: " << any.front() << "\n" << err;
  }
}

// Both ranks time out; either may be the one that reports.
std::vector<std::string> eitherRank(const std::string& format) {
  return {fmt::format(fmt::runtime(format), 0, 1), fmt::format(fmt::runtime(format), 1, 0)};
}

TEST(FaultPrograms, AHostWaitCycleThroughMpi) {
  expectBoundedTimeout(
      "wait_cycle.json", {"--no-schedule-check"},
      {eitherRank("hir: rank {0}: error: /body/3/then/1: on rank {0}: host wait timed out after "
                  "2000 ms"),
       eitherRank("hir: rank {0}: error:   #1 PENDING 'r' recv #1 from rank {1} at /body/3/then/0 "
                  "on mpi, run 1, stream 0")});
}

TEST(FaultPrograms, AHostWaitCycleThroughIpc) {
  expectBoundedTimeout(
      "wait_cycle_ipc.json", {"--no-schedule-check"},
      {eitherRank("hir: rank {0}: error:   'r' (recv) at /body/3/then/0"),
       eitherRank("hir: rank {0}: error:   #1 PENDING 'r' recv #1 from rank {1} at /body/3/then/0 "
                  "on ipc, run 1, stream 0")});
}

TEST(FaultPrograms, ASkippedCollective) {
  expectBoundedTimeout(
      "skipped_collective.json", {"--no-schedule-check"},
      {{"hir: rank 0: error: synchronize after run 1: on rank 0: host wait timed out after 2000 "
        "ms"},
       {"hir: rank 0: error:   'ar' (allreduce) at /body/2/body/0/then/0 (i=7)"},
       {"hir: rank 0: error:   #7 done    'ar' allreduce #7 of team 0 (the world) at "
        "/body/2/body/0/then/0 (i=6) on mpi"},
       {"hir: rank 0: error:   #8 PENDING 'ar' allreduce #8 of team 0 (the world) at "
        "/body/2/body/0/then/0 (i=7) on mpi"}});
}

TEST(FaultPrograms, ASkippedIpcCollective) {
  expectBoundedTimeout(
      "skipped_collective_ipc.json", {"--no-schedule-check"},
      {{"hir: rank 0: error: synchronize after run 1: on rank 0: host wait timed out after 2000 "
        "ms"},
       {"hir: rank 0: error:   'ar' (allreduce) at /body/3/body/0/then/0 (i=7)"},
       {"hir: rank 0: error:   #8 queued  'ar' allreduce #8 of team 0 (the world) at "
        "/body/3/body/0/then/0 (i=7) on ipc"}});
}

TEST(FaultPrograms, AnIpcPeerThatNeverAnswers) {
  expectBoundedTimeout(
      "ipc_silent_peer.json", {"--no-schedule-check"},
      {{"hir: rank 0: error:   'r' (recv) at /body/4/body/0/then/0 (i=1), on stream 0, which has "
        "not finished"},
       {"hir: rank 0: error:   #2 queued  'r' recv #2 from rank 1 at /body/4/body/0/then/0 (i=1) "
        "on ipc"}});
}

// Every rank is stuck (rank 0 behind its recv, rank 1 in the allreduce rank
// 0 never starts) with a full queue: the watchdog ends the runs.
TEST(FaultPrograms, ALongLoopQueuedBehindAStuckRecv) {
  expectBoundedTimeout("late_loop.json", {"--no-schedule-check"},
                       {eitherRank("hir: rank {0}: error: /body/4/body/0: on rank {0} (i="),
                        {"): no progress for 3"},
                        // Then what the abort made the blocked call, or the next post, throw.
                        {"(the timeout is 2000 ms): the watchdog aborted the communications; "
                         "then: "},
                        eitherRank("hir: rank {0}: error:   'ar' (allreduce) at /body/4/body/0 (i="),
                        {"PENDING 'ar' allreduce #"}});
}

}  // namespace
}  // namespace hir
