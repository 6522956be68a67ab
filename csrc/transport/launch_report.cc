#include "transport/launch_report.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/check.h"

namespace hir {

// ------------------------------------------------------------- rank side

namespace {

int g_report_fd = -1;
struct sigaction g_previous[NSIG];

// What ends a rank and can be caught: the launcher's and mpirun's TERM, a
// user's INT, HUP or QUIT, and the faults of a crash.
constexpr int kReportedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV,
                                    SIGBUS,  SIGFPE, SIGILL, SIGABRT};

// Async-signal-safe: decimal digits of v at p, returns the end.
char* putNumber(char* p, uint64_t v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

void writeAll(int fd, const char* text, std::size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, text, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    size -= static_cast<std::size_t>(n);
  }
}

// How long what handled a signal before may take before the rank ends
// anyway: Open MPI's handler prints a backtrace, which takes locks (the
// allocator's, the loader's) that the interrupted thread may hold, and then
// never returns (a rank killed by SIGSEGV hung so for 120 s, session 31).
constexpr unsigned kPassOnSeconds = 5;

// Notes the signal, then gives it back to what handled it before (mpirun's
// library may print a backtrace; by default the rank ends); for a fault,
// an alarm bounds that (SIGALRM ends the rank by default). A fault the
// process caused itself recurs when this returns; any other signal is
// raised again, and arrives once this returns.
void onSignal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  char line[80] = "signal ";
  char* p = line + 7;
  p = putNumber(p, static_cast<uint64_t>(sig));
  *p++ = ' ';
  p = putNumber(p, static_cast<uint64_t>(now.tv_sec) * 1000000000ull +
                       static_cast<uint64_t>(now.tv_nsec));
  *p++ = '\n';
  if (g_report_fd >= 0) writeAll(g_report_fd, line, static_cast<std::size_t>(p - line));
  sigaction(sig, &g_previous[sig], nullptr);
  const bool fault = sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
  if (fault) alarm(kPassOnSeconds);  // the rank ends either way
  if (!fault || info == nullptr || info->si_code <= 0) raise(sig);
  errno = saved_errno;
}

}  // namespace

void endWithParent() {
  if (std::getenv(kRankReportsVariable) == nullptr) return;
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) raise(SIGTERM);  // the parent died before prctl
}

void startRankReport(int rank) {
  const char* folder = std::getenv(kRankReportsVariable);
  if (folder == nullptr || *folder == '\0' || g_report_fd >= 0) return;
  const std::string path = std::string(folder) + "/rank-" + std::to_string(rank);
  g_report_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (g_report_fd < 0) return;
  const std::string line = "pid " + std::to_string(getpid()) + "\n";
  writeAll(g_report_fd, line.data(), line.size());
  for (int sig : kReportedSignals) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler == SIG_IGN) continue;
    struct sigaction mine {};
    mine.sa_sigaction = onSignal;
    mine.sa_flags = SA_SIGINFO;
    sigemptyset(&mine.sa_mask);
    sigaction(sig, &mine, &g_previous[sig]);
  }
}

void reportRankExit(int code) {
  if (g_report_fd < 0) return;
  const std::string line = "exit " + std::to_string(code) + "\n";
  writeAll(g_report_fd, line.data(), line.size());
}

// --------------------------------------------------------- launcher side

RankReport parseRankReport(int rank, std::string_view text) {
  RankReport r;
  r.rank = rank;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "pid") {
      words >> r.pid;
    } else if (key == "exit") {
      if (words >> r.exit_code) r.exited = true;
    } else if (key == "signal") {
      int sig = 0;
      int64_t ns = 0;
      if (!(words >> sig >> ns)) continue;
      if (r.signal == 0) {  // the first one ended it; a re-raise adds none
        r.signal = sig;
        r.signal_ns = ns;
      }
    }
  }
  return r;
}

RankReportFolder::RankReportFolder(int world) : world_(world) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hir-ranks-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    throw RuntimeError(fmt::format("cannot create a folder for the ranks' reports ({}): {}",
                                   pattern, std::strerror(errno)));
  path_ = pattern;
}

RankReportFolder::~RankReportFolder() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::vector<RankReport> RankReportFolder::read() const {
  std::vector<RankReport> out;
  for (int r = 0; r < world_; ++r) {
    std::ifstream in(path_ + "/rank-" + std::to_string(r));
    std::ostringstream text;
    if (in) text << in.rdbuf();
    out.push_back(parseRankReport(r, text.str()));
  }
  return out;
}

namespace {
// The pid still runs `executable` (not a reused pid).
bool runs(long pid, const std::string& executable) {
  char target[4096];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return executable == target;
}
}  // namespace

int RankReportFolder::endLeftoverRanks(const std::string& executable, int grace_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (;;) {
    std::vector<long> left;
    for (const RankReport& r : read())
      if (r.pid > 0 && runs(r.pid, executable)) left.push_back(r.pid);
    if (left.empty()) return 0;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (long pid : left) kill(static_cast<pid_t>(pid), SIGKILL);
      return static_cast<int>(left.size());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

namespace {

std::string signalName(int sig) {
  const char* name = strsignal(sig);
  return fmt::format("signal {} ({})", sig, name ? name : "unknown");
}

bool isInterruption(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP; }

std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < 8; ++i)
    out += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  if (ranks.size() > 8) out += fmt::format(" and {} more", ranks.size() - 8);
  return out;
}

}  // namespace

LaunchOutcome launchOutcome(int wait_status, const std::vector<RankReport>& reports) {
  const bool mpirun_exited = WIFEXITED(wait_status);
  const int code = mpirun_exited ? WEXITSTATUS(wait_status) : -1;
  // mpirun's 0 counts when every rank started: a launcher that ran nothing
  // (HIR_MPIRUN=true) exits 0 too.
  if (mpirun_exited && code == 0 &&
      std::all_of(reports.begin(), reports.end(), [](const RankReport& r) { return r.pid != 0; }))
    return {kExitOk, ""};
  if (mpirun_exited && code >= 1 && code <= kExitInternal)
    for (const RankReport& r : reports)
      if (r.exited && r.exit_code == code && r.signal == 0) return {code, ""};

  const std::string mpirun =
      mpirun_exited ? fmt::format("mpirun exit {}", code)
                    : fmt::format("mpirun was killed by {}", signalName(WTERMSIG(wait_status)));
  std::vector<int> never_started;
  const RankReport* fault = nullptr;        // the first to die of a fault
  const RankReport* silent = nullptr;       // ended without a word (SIGKILL)
  const RankReport* interrupted = nullptr;  // the first ended by TERM, INT or HUP
  int started = 0, interrupted_count = 0;
  const RankReport* failed = nullptr;  // a rank that returned an error code of its own
  for (const RankReport& r : reports) {
    if (r.pid == 0) {
      never_started.push_back(r.rank);
      continue;
    }
    ++started;
    if (r.signal != 0 && !isInterruption(r.signal)) {
      if (!fault || r.signal_ns < fault->signal_ns) fault = &r;
    } else if (r.signal != 0) {
      ++interrupted_count;
      if (!interrupted || r.signal_ns < interrupted->signal_ns) interrupted = &r;
    } else if (!r.exited) {
      if (!silent) silent = &r;
    } else if (r.exit_code != 0 && !failed) {
      failed = &r;
    }
  }

  std::string what;
  bool interrupted_named = false;  // `interrupted` is the rank the line names
  if (started == 0) {
    what = fmt::format(
        "mpirun ended ({}) before any rank started; HIR_MPIRUN_QUIET=0 shows mpirun's own "
        "messages",
        mpirun);
  } else if (fault) {
    what = fmt::format("rank {} (pid {}) was killed by {}", fault->rank, fault->pid,
                       signalName(fault->signal));
  } else if (silent) {
    const int sig = code > 128 && code < 128 + NSIG ? code - 128 : 0;
    if (sig == SIGKILL)
      what = fmt::format("rank {} (pid {}) was killed by {}: by kill -9 or the kernel's "
                         "out-of-memory killer",
                         silent->rank, silent->pid, signalName(SIGKILL));
    else if (sig != 0)
      what = fmt::format("rank {} (pid {}) ended abnormally (mpirun saw a rank end by {})",
                         silent->rank, silent->pid, signalName(sig));
    else
      what = fmt::format("rank {} (pid {}) ended abnormally, without reporting how",
                         silent->rank, silent->pid);
  } else if (failed) {
    what = fmt::format("rank {} (pid {}) exited with {}", failed->rank, failed->pid,
                       failed->exit_code);
  } else if (!mpirun_exited) {
    what = "the ranks ended with mpirun";
  } else if (code == 0) {
    what = "mpirun ended without starting every rank";
  } else if (interrupted && interrupted_count == started && !(code > 128 && code < 128 + NSIG)) {
    // mpirun passes on a rank's signal as 128 + N; any other status: mpirun
    // ended every rank, interrupted itself (not through hir, which says so
    // before it gets here) or after a rank it lost (one stopped, one that
    // ended as the signal came): which, the reports cannot tell.
    what = fmt::format("every rank was ended by {}, sent by mpirun (when it is interrupted, or "
                       "after a rank ended) or from outside hir",
                       signalName(interrupted->signal));
  } else if (interrupted) {
    interrupted_named = true;
    what = fmt::format("rank {} (pid {}) was ended by {} from outside hir", interrupted->rank,
                       interrupted->pid, signalName(interrupted->signal));
  } else {
    what = "mpirun failed although every rank that started finished";
  }
  if (started == 0) return {kExitRuntimeFailure, what};
  std::string line = fmt::format("the job failed: {} ({})", what, mpirun);
  if (!never_started.empty())
    line += fmt::format("; rank{} {} never started", never_started.size() == 1 ? "" : "s",
                        rankList(never_started));
  // One rank named, and mpirun terminated the others after it.
  const int others_interrupted = interrupted_count - (interrupted_named ? 1 : 0);
  if (mpirun_exited && (fault || silent || failed || interrupted_named) && others_interrupted > 0)
    line += "; mpirun ended the other ranks";
  return {kExitRuntimeFailure, line};
}

}  // namespace hir
