// Internal: `hir run --np N` outside an MPI job starts its N ranks through
// mpirun (docs/cli.md, "Launching ranks").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hir {

// This process's executable (/proc/self/exe), "hir" if it cannot be read.
std::string selfPath();

// Splits `text` into words as a POSIX shell does, without expanding
// anything: blanks separate words; 'single quotes' keep everything;
// "double quotes" keep everything but \\, \", \$ and \` (a backslash
// there escapes them); outside quotes a backslash keeps the next character.
// `a"b c"'d'` is one word. An unbalanced quote or a trailing backslash
// throws UsageError naming `what` (the flag or variable the text came from).
std::vector<std::string> splitShellWords(std::string_view text, std::string_view what);

// Throws UsageError unless `path` names a readable regular file (--hostfile).
void checkHostfile(const std::string& path);

// How `hir run --np N` starts its ranks (docs/cli.md, "Launching ranks").
struct LaunchOptions {
  int np = 1;
  std::vector<std::string> mpirun_args;  // --mpirun-args, split into words
  std::string hostfile;                  // --hostfile; empty: none
};

// The launcher's command line: the words of HIR_MPIRUN (default mpirun),
// -np N --oversubscribe --bind-to none, -q unless HIR_MPIRUN_QUIET=0,
// --allow-run-as-root as root, --hostfile FILE, -x NAME for every HIR_*
// variable of this environment (sorted; not HIR_MPIRUN and
// HIR_MPIRUN_QUIET) so that ranks on other nodes get them too, the words of
// --mpirun-args, then `executable` and `args`. Throws UsageError when
// HIR_MPIRUN has no words or unbalanced quotes.
std::vector<std::string> launcherCommand(const LaunchOptions& opts, const std::string& executable,
                                         const std::vector<std::string>& args);

// Runs launcherCommand(opts, selfPath(), args) with HIR_LAUNCHED_NP and
// HIR_RANK_REPORTS set, waits for it and returns hir's exit code, having
// printed a `hir: error:` line when the ranks did not say what happened
// themselves (launch_report.h):
// - the ranks' own code (0-4) when they ended the job;
// - 3 when a rank was killed by a signal, mpirun was interrupted, killed or
//   failed, or the launcher was sent TERM, INT or HUP (passed on to mpirun,
//   which ends the ranks).
// mpirun's own messages are silenced (-q) unless HIR_MPIRUN_QUIET=0. mpirun
// ends when this process does, even by SIGKILL, and the ranks when mpirun
// does. Throws UsageError when mpirun cannot be started.
int launchRanksOfThisCommand(const LaunchOptions& opts, const std::vector<std::string>& args);

}  // namespace hir
