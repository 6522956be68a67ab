#include "transport/launch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/ranges.h>

#include "common/check.h"
#include "common/log.h"
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

std::vector<std::string> splitShellWords(std::string_view text, std::string_view what) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;  // a word was started (also by "" or '')
  std::size_t i = 0;
  auto unbalanced = [&](char quote, std::size_t at) {
    return UsageError(fmt::format("{}: unbalanced {} quote at character {} of '{}'", what,
                                  quote == '\'' ? "single" : "double", at + 1, text));
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      ++i;
    } else if (c == '\\') {
      if (i + 1 == text.size())
        throw UsageError(fmt::format("{}: a backslash ends '{}'; nothing follows it to escape",
                                     what, text));
      word += text[i + 1];
      in_word = true;
      i += 2;
    } else if (c == '\'') {
      const std::size_t close = text.find('\'', i + 1);
      if (close == std::string_view::npos) throw unbalanced(c, i);
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close + 1;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (;; ++j) {
        if (j >= text.size()) throw unbalanced(c, i);
        if (text[j] == '"') break;
        if (text[j] == '\\' && j + 1 < text.size() &&
            std::string_view("\\\"$`").find(text[j + 1]) != std::string_view::npos)
          ++j;
        word += text[j];
      }
      in_word = true;
      i = j + 1;
    } else {
      word += c;
      in_word = true;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

void checkHostfile(const std::string& path) {
  struct stat st {};
  if (path.empty()) throw UsageError("--hostfile expects a file name");
  if (stat(path.c_str(), &st) != 0)
    throw UsageError(fmt::format("--hostfile '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    throw UsageError(fmt::format("--hostfile '{}' is not a file", path));
  if (access(path.c_str(), R_OK) != 0)
    throw UsageError(fmt::format("--hostfile '{}': {}", path, std::strerror(errno)));
}

std::vector<std::string> launcherCommand(const LaunchOptions& opts, const std::string& executable,
                                         const std::vector<std::string>& args) {
  const char* mpirun = std::getenv("HIR_MPIRUN");
  const char* quiet = std::getenv("HIR_MPIRUN_QUIET");
  std::vector<std::string> cmd =
      mpirun ? splitShellWords(mpirun, "HIR_MPIRUN") : std::vector<std::string>{"mpirun"};
  if (cmd.empty())
    throw UsageError(fmt::format("HIR_MPIRUN is '{}': expected a launcher command, such as "
                                 "'mpirun' or 'mpirun --mca btl self,tcp'",
                                 mpirun));
  cmd.insert(cmd.end(), {"-np", std::to_string(opts.np), "--oversubscribe", "--bind-to", "none"});
  if (!quiet || std::string_view(quiet) != "0") cmd.push_back("-q");
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  if (!opts.hostfile.empty()) {
    cmd.push_back("--hostfile");
    cmd.push_back(opts.hostfile);
  }
  // mpirun passes its environment to the ranks on its own node only.
  std::vector<std::string> exported;
  for (char** env = environ; *env != nullptr; ++env) {
    std::string_view entry(*env);
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || entry.substr(0, 4) != "HIR_") continue;
    const std::string_view name = entry.substr(0, eq);
    if (name == "HIR_MPIRUN" || name == "HIR_MPIRUN_QUIET") continue;
    exported.emplace_back(name);
  }
  std::sort(exported.begin(), exported.end());
  for (const std::string& name : exported) {
    cmd.push_back("-x");
    cmd.push_back(name);
  }
  cmd.insert(cmd.end(), opts.mpirun_args.begin(), opts.mpirun_args.end());
  cmd.push_back(executable);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

int launchRanksOfThisCommand(const LaunchOptions& opts, const std::vector<std::string>& args) {
  const int np = opts.np;
  const std::string self = selfPath();
  RankReportFolder reports(np);
  // Shared memory between local ranks; no single-copy (ptrace) mechanism,
  // which containers often forbid.
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  // Each launch on one node keeps Open MPI's session directory in its own
  // folder (removed with it): two mpiruns that start at the same moment
  // otherwise race to create the same one under /tmp and one fails
  // (session_dir.c). Not across nodes, where the folder does not exist.
  if (opts.hostfile.empty()) {
    setenv("OMPI_MCA_orte_tmpdir_base", reports.path().c_str(), 0);  // Open MPI 4
    setenv("PRTE_MCA_prte_tmpdir_base", reports.path().c_str(), 0);  // Open MPI 5
  }
  setenv("HIR_LAUNCHED_NP", std::to_string(np).c_str(), 1);
  setenv(kRankReportsVariable, reports.path().c_str(), 1);
  std::vector<std::string> cmd = launcherCommand(opts, self, args);
  const std::string launcher = cmd.front();
  HIR_LOG_INFO(Subsys::Launch, "starting {} ranks: {}", np, fmt::join(cmd, " "));
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
