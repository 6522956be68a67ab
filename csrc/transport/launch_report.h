// Internal: how the ranks that `hir run --np` starts tell the launcher how
// they ended, so that hir's exit code and its one `hir:` line come from the
// ranks rather than from mpirun's exit status, which says too little (mpirun
// exits 1, the code of a failed check, when it is terminated; 128 + N for a
// rank killed by signal N; anything for its own failures), and from mpirun's
// messages, which the launcher silences (mpirun -q).
//
// The launcher makes a folder (RankReportFolder) and passes it to the ranks
// in HIR_RANK_REPORTS. Rank R writes <folder>/rank-R, one line per event:
//   pid P            when it starts (startRankReport)
//   exit C           the exit code it returns or aborts the job with
//   signal S T       a terminating or fatal signal S arrived at
//                    CLOCK_MONOTONIC time T (ns); written by a handler that
//                    then lets the signal do what it did before
// A rank killed by SIGKILL (kill -9, the out-of-memory killer) writes
// nothing more than its pid. launchOutcome() reads mpirun's status and the
// reports into hir's exit code (0-4) and line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hir {

inline constexpr const char* kRankReportsVariable = "HIR_RANK_REPORTS";

// ------------------------------------------------------------- rank side

// Under the launcher (HIR_RANK_REPORTS set): this process ends, by SIGTERM,
// when its parent (mpirun, or its daemon on another machine) does, so that
// a launcher or mpirun killed by SIGKILL leaves no rank behind. Call first.
void endWithParent();
// Under the launcher: opens this rank's report, writes its pid and installs
// the signal handlers. Never throws: a report that cannot be written only
// makes the launcher's line less precise.
void startRankReport(int rank);
// Writes "exit C" (no-op without a report).
void reportRankExit(int code);

// --------------------------------------------------------- launcher side

struct RankReport {
  int rank = 0;
  long pid = 0;  // 0: no report, the rank never started
  bool exited = false;
  int exit_code = 0;
  int signal = 0;         // 0: none arrived
  int64_t signal_ns = 0;  // when (CLOCK_MONOTONIC)
};

// One report's text (unknown lines are ignored).
RankReport parseRankReport(int rank, std::string_view text);

// A folder for the reports of `world` ranks, in $TMPDIR (else /tmp),
// removed with its files when destroyed. Throws RuntimeError when it cannot
// be made.
class RankReportFolder {
 public:
  explicit RankReportFolder(int world);
  ~RankReportFolder();
  RankReportFolder(const RankReportFolder&) = delete;
  RankReportFolder& operator=(const RankReportFolder&) = delete;

  const std::string& path() const { return path_; }
  std::vector<RankReport> read() const;
  // After mpirun itself died: waits up to `grace_ms` for the ranks that
  // have not ended (their pid still runs `executable`) and kills those left
  // with SIGKILL. Returns how many it killed.
  int endLeftoverRanks(const std::string& executable, int grace_ms) const;

 private:
  std::string path_;
  int world_;
};

struct LaunchOutcome {
  int exit_code = 0;
  std::string message;  // hir's line after "hir: error: "; empty when a rank said it
};

// mpirun's wait status (waitpid) and the ranks' reports -> hir's exit code
// and line:
// - mpirun exit 0: 0.
// - mpirun exit C in 1..4 that a rank reported as its own: C, no line (the
//   rank printed its error, or the failed checks).
// - anything else (a rank killed by a signal, mpirun terminated or killed,
//   mpirun failing before the ranks started): 3, with a line that names the
//   rank that ended first and how, as far as the reports tell, and mpirun's
//   status.
LaunchOutcome launchOutcome(int wait_status, const std::vector<RankReport>& reports);

}  // namespace hir
