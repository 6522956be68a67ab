#include "transport/launch.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/check.h"
#include "transport/launch_report.h"

namespace hir {

std::string selfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "hir";
  buf[n] = '\0';
  return buf;
}

namespace {

// The launcher's child (mpirun) and the signal that ended the launcher's
// wait, for the handler below.
volatile sig_atomic_t g_launched = 0;
volatile sig_atomic_t g_signal = 0;

// A TERM, INT or HUP to the launcher goes to mpirun, which ends the ranks.
void forwardSignal(int sig) {
  g_signal = sig;
  if (g_launched > 0) kill(static_cast<pid_t>(g_launched), sig);
}

}  // namespace

int launchRanksOfThisCommand(int np, const std::vector<std::string>& args) {
  const char* mpirun = std::getenv("HIR_MPIRUN");
  const char* quiet = std::getenv("HIR_MPIRUN_QUIET");
  std::string launcher = mpirun ? mpirun : "mpirun";
  std::vector<std::string> cmd = {launcher, "-np", std::to_string(np), "--oversubscribe",
                                  "--bind-to", "none"};
  if (!quiet || std::string_view(quiet) != "0") cmd.push_back("-q");
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  const std::string self = selfPath();
  cmd.push_back(self);
  cmd.insert(cmd.end(), args.begin(), args.end());
  RankReportFolder reports(np);
  // Shared memory between local ranks; no single-copy (ptrace) mechanism,
  // which containers often forbid.
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  setenv("HIR_LAUNCHED_NP", std::to_string(np).c_str(), 1);
  setenv(kRankReportsVariable, reports.path().c_str(), 1);
  std::vector<char*> argv;
  for (std::string& arg : cmd) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The child writes errno here when it cannot start mpirun; a successful
  // exec closes the pipe empty.
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0)
    throw RuntimeError(fmt::format("pipe failed: {}", std::strerror(errno)));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    throw RuntimeError(fmt::format("fork failed: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    // A launcher that dies, even by KILL, takes mpirun (and so the ranks)
    // with it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(kExitRuntimeFailure);
    execvp(argv[0], argv.data());
    int err = errno;
    (void)!write(exec_pipe[1], &err, sizeof err);
    _exit(127);
  }
  close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  while ((got = read(exec_pipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw UsageError(fmt::format("--np {} needs mpirun (OpenMPI) on PATH or in HIR_MPIRUN: "
                                 "cannot run '{}': {}",
                                 np, launcher, std::strerror(exec_errno)));
  }
  g_launched = pid;
  struct sigaction forward {};
  forward.sa_handler = forwardSignal;
  sigemptyset(&forward.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &forward, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_launched = 0;
  // mpirun reaps its ranks before it exits; one that was killed may have
  // left them behind (they end with it, endWithParent): wait, then make sure.
  if (!WIFEXITED(status)) reports.endLeftoverRanks(self, 3000);
  if (g_signal != 0) {
    std::fprintf(stderr, "hir: error: interrupted by signal %d (%s); the ranks were ended\n",
                 static_cast<int>(g_signal), strsignal(g_signal));
    return kExitRuntimeFailure;
  }
  const LaunchOutcome outcome = launchOutcome(status, reports.read());
  if (!outcome.message.empty())
    std::fprintf(stderr, "hir: error: %s\n", outcome.message.c_str());
  return outcome.exit_code;
}

}  // namespace hir
