// Internal: `hir run --np N` outside an MPI job starts its N ranks through
// mpirun (docs/cli.md, "Launching ranks").
#pragma once

#include <string>
#include <vector>

namespace hir {

// This process's executable (/proc/self/exe), "hir" if it cannot be read.
std::string selfPath();

// Runs `HIR_MPIRUN` (default mpirun) -np N --oversubscribe --bind-to none -q
// [--allow-run-as-root] <this executable> <args>, waits for it and returns
// hir's exit code, having printed a `hir: error:` line when the ranks did
// not say what happened themselves (launch_report.h):
// - the ranks' own code (0-4) when they ended the job;
// - 3 when a rank was killed by a signal, mpirun was interrupted, killed or
//   failed, or the launcher was sent TERM, INT or HUP (passed on to mpirun,
//   which ends the ranks).
// mpirun's own messages are silenced (-q) unless HIR_MPIRUN_QUIET=0. mpirun
// ends when this process does, even by SIGKILL, and the ranks when mpirun
// does. Throws UsageError when mpirun cannot be started.
int launchRanksOfThisCommand(int np, const std::vector<std::string>& args);

}  // namespace hir
