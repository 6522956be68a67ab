// How the ranks that `hir run --np` starts report how they ended, and how
// the launcher turns mpirun's status and those reports into hir's exit code
// and line (transport/launch_report.h).
#include "transport/launch_report.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "transport/launch.h"

namespace hir {
namespace {

int exitStatus(int code) { return W_EXITCODE(code, 0); }
int signalStatus(int sig) { return W_EXITCODE(0, sig); }

RankReport started(int rank, long pid) {
  RankReport r;
  r.rank = rank;
  r.pid = pid;
  return r;
}
RankReport exited(int rank, long pid, int code) {
  RankReport r = started(rank, pid);
  r.exited = true;
  r.exit_code = code;
  return r;
}
RankReport signalled(int rank, long pid, int sig, int64_t ns) {
  RankReport r = started(rank, pid);
  r.signal = sig;
  r.signal_ns = ns;
  return r;
}

TEST(RankReport, ParsesPidExitAndTheFirstSignal) {
  RankReport r = parseRankReport(2, "pid 1234\nsignal 11 500\nsignal 11 900\nnonsense\n");
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.pid, 1234);
  EXPECT_FALSE(r.exited);
  EXPECT_EQ(r.signal, 11);
  EXPECT_EQ(r.signal_ns, 500);
  RankReport e = parseRankReport(0, "pid 7\nexit 3\n");
  EXPECT_TRUE(e.exited);
  EXPECT_EQ(e.exit_code, 3);
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(parseRankReport(1, "").pid, 0);  // never started
}

// mpirun's exit 0 is success only when every rank started: a launcher that
// starts nothing (HIR_MPIRUN=true) exits 0 too, and hir said "ok".
TEST(LaunchOutcome, MpirunsZeroWithoutEveryRankIsAFailure) {
  LaunchOutcome none = launchOutcome(exitStatus(0), {started(0, 0), started(1, 0)});
  EXPECT_EQ(none.exit_code, 3);
  EXPECT_NE(none.message.find("mpirun ended (mpirun exit 0) before any rank started"),
            std::string::npos)
      << none.message;
  LaunchOutcome one = launchOutcome(exitStatus(0), {exited(0, 10, 0), started(1, 0)});
  EXPECT_EQ(one.exit_code, 3);
  EXPECT_EQ(one.message,
            "the job failed: mpirun ended without starting every rank (mpirun exit 0); rank 1 "
            "never started");
}

TEST(LaunchOutcome, TheRanksOwnCodesPassThroughSilently) {
  EXPECT_EQ(launchOutcome(exitStatus(0), {exited(0, 10, 0), exited(1, 11, 0)}).exit_code, 0);
  // A failed check: every rank exits 1.
  LaunchOutcome check = launchOutcome(exitStatus(1), {exited(0, 10, 1), exited(1, 11, 1)});
  EXPECT_EQ(check.exit_code, 1);
  EXPECT_EQ(check.message, "");
  // A rank's runtime error ends the job (MPI_Abort): mpirun terminates the
  // others, whose reports say so.
  LaunchOutcome abort =
      launchOutcome(exitStatus(3), {signalled(0, 10, SIGTERM, 900), exited(1, 11, 3)});
  EXPECT_EQ(abort.exit_code, 3);
  EXPECT_EQ(abort.message, "");
}

TEST(LaunchOutcome, ARankKilledBySigkillIsNamed) {
  LaunchOutcome o =
      launchOutcome(exitStatus(128 + SIGKILL), {signalled(0, 10, SIGTERM, 900), started(1, 11)});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message,
            "the job failed: rank 1 (pid 11) was killed by signal 9 (Killed): by kill -9 or the "
            "kernel's out-of-memory killer (mpirun exit 137); mpirun ended the other ranks");
}

TEST(LaunchOutcome, ACrashIsNamedWithItsSignalAndTheFirstCrashWins) {
  LaunchOutcome o = launchOutcome(
      exitStatus(128 + SIGSEGV),
      {signalled(0, 10, SIGTERM, 50), signalled(1, 11, SIGBUS, 700), signalled(2, 12, SIGSEGV, 600)});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.message.find("rank 2 (pid 12) was killed by signal 11 (Segmentation fault) "
                           "(mpirun exit 139); mpirun ended the other ranks"),
            std::string::npos)
      << o.message;
}

// mpirun, sent TERM, ends the ranks and exits 1: the code of a failed check,
// which hir must not pass on.
TEST(LaunchOutcome, MpirunTerminatedIsARuntimeFailureNotAFailedCheck) {
  LaunchOutcome o =
      launchOutcome(exitStatus(1), {signalled(0, 10, SIGTERM, 5), signalled(1, 11, SIGTERM, 6)});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message,
            "the job failed: every rank was ended by signal 15 (Terminated), sent by mpirun "
            "(when it is interrupted, or after a rank ended) or from outside hir (mpirun exit 1)");
}

TEST(LaunchOutcome, MpirunKilledIsSaid) {
  LaunchOutcome o = launchOutcome(signalStatus(SIGKILL),
                                  {signalled(0, 10, SIGTERM, 5), signalled(1, 11, SIGTERM, 6)});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message,
            "the job failed: the ranks ended with mpirun (mpirun was killed by signal 9 "
            "(Killed))");
}

// A TERM sent to one rank: mpirun passes it on as 128 + 15 and ends the
// others, which report the same signal later.
TEST(LaunchOutcome, ARankTerminatedFromOutsideIsTheOneSignalledFirst) {
  LaunchOutcome o = launchOutcome(
      exitStatus(128 + SIGTERM), {signalled(0, 10, SIGTERM, 900), signalled(1, 11, SIGTERM, 400)});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message,
            "the job failed: rank 1 (pid 11) was ended by signal 15 (Terminated) from outside hir "
            "(mpirun exit 143); mpirun ended the other ranks");
}

TEST(LaunchOutcome, MpirunFailingBeforeAnyRankStartedIsSaid) {
  LaunchOutcome o = launchOutcome(exitStatus(132), {RankReport{}, RankReport{}});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message,
            "mpirun ended (mpirun exit 132) before any rank started; HIR_MPIRUN_QUIET=0 shows "
            "mpirun's own messages");
  // A code in 0-4 that no rank reported is mpirun's, not a rank's.
  EXPECT_EQ(launchOutcome(exitStatus(1), {RankReport{}}).exit_code, 3);
  EXPECT_EQ(launchOutcome(exitStatus(2), {exited(0, 10, 0)}).exit_code, 3);
}

TEST(LaunchOutcome, ACodeOutsideHirsIsAlwaysThree) {
  // MPI_ERRORS_ARE_FATAL exits with an MPI error class; a rank's own exit(5).
  LaunchOutcome o = launchOutcome(exitStatus(16), {exited(0, 10, 0), started(1, 11)});
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_NE(o.message.find("rank 1 (pid 11) ended abnormally, without reporting how (mpirun "
                           "exit 16)"),
            std::string::npos)
      << o.message;
  LaunchOutcome missing = launchOutcome(exitStatus(1), {exited(0, 10, 0), RankReport{1}});
  EXPECT_NE(missing.message.find("rank 1 never started"), std::string::npos) << missing.message;
}

// ------------------------------------------------- the rank side, for real

// Runs `body` in a child process whose reports go to `folder`; returns its
// wait status. A child still running after 60 s is killed (SIGKILL), which
// the tests' expectations then report.
template <class F>
int inChild(const std::string& folder, F body) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv(kRankReportsVariable, folder.c_str(), 1);
    body();
    _exit(0);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

TEST(RankReportFolder, IsMadeInTmpdirAndRemovedWithItsReports) {
  std::string path;
  {
    RankReportFolder folder(2);
    path = folder.path();
    EXPECT_TRUE(std::filesystem::is_directory(path));
    std::ofstream(path + "/rank-1") << "pid 42\nexit 0\n";
    std::vector<RankReport> reports = folder.read();
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_EQ(reports[0].pid, 0);
    EXPECT_EQ(reports[1].pid, 42);
    EXPECT_TRUE(reports[1].exited);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(RankReportSignals, ATerminatedRankSaysSoAndStillEndsByTheSignal) {
  RankReportFolder folder(1);
  int status = inChild(folder.path(), [] {
    startRankReport(0);
    raise(SIGTERM);
    _exit(99);  // not reached: the signal still ends the process
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  RankReport r = folder.read()[0];
  EXPECT_GT(r.pid, 0);
  EXPECT_EQ(r.signal, SIGTERM);
  EXPECT_GT(r.signal_ns, 0);
  EXPECT_FALSE(r.exited);
}

TEST(RankReportSignals, ACrashSaysSoAndStillCrashes) {
  RankReportFolder folder(1);
  int status = inChild(folder.path(), [] {
    startRankReport(0);
    volatile int* null = nullptr;
    *null = 1;  // a real fault: the handler lets it recur
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  EXPECT_EQ(folder.read()[0].signal, SIGSEGV);
}

TEST(RankReportSignals, AFaultWhoseEarlierHandlerNeverReturnsStillEndsTheRank) {
  // As Open MPI's handler does when its backtrace waits for a lock that
  // the interrupted thread holds: the rank must end anyway, in seconds.
  RankReportFolder folder(1);
  const auto start = std::chrono::steady_clock::now();
  int status = inChild(folder.path(), [] {
    signal(SIGSEGV, [](int) {
      for (;;) pause();
    });
    startRankReport(0);
    raise(SIGSEGV);  // as `kill -SEGV` from outside
    _exit(99);
  });
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGALRM);
  EXPECT_LT(took, std::chrono::seconds(30));
  EXPECT_EQ(folder.read()[0].signal, SIGSEGV) << "the report names the fault, not the alarm";
}

TEST(RankReportSignals, AnExitCodeIsReportedAndAnIgnoredSignalStaysIgnored) {
  RankReportFolder folder(1);
  int status = inChild(folder.path(), [] {
    signal(SIGHUP, SIG_IGN);  // nohup
    startRankReport(0);
    raise(SIGHUP);
    reportRankExit(2);
    _exit(2);
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  RankReport r = folder.read()[0];
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.signal, 0);
}

TEST(RankReportFolder, EndLeftoverRanksKillsOnlyWhatStillRuns) {
  RankReportFolder folder(2);
  pid_t sleeper = fork();
  if (sleeper == 0) {
    setenv(kRankReportsVariable, folder.path().c_str(), 1);
    startRankReport(1);
    signal(SIGTERM, SIG_IGN);  // a rank that does not end by itself
    for (;;) pause();
  }
  for (int i = 0; i < 200 && folder.read()[1].pid == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(folder.read()[1].pid, sleeper);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(folder.endLeftoverRanks(selfPath(), 200), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  int status = 0;
  ASSERT_EQ(waitpid(sleeper, &status, 0), sleeper);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(folder.endLeftoverRanks(selfPath(), 200), 0);
}

}  // namespace
}  // namespace hir
