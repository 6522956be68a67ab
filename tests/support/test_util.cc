#include "support/test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef HIR_SOURCE_DIR
#error "HIR_SOURCE_DIR must be defined (the repository root), as tests/CMakeLists.txt does"
#endif

namespace hir::test {

namespace {

struct Pipe {
  int read = -1, write = -1;
};

Pipe makePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("runCommand: pipe2 failed: ") + std::strerror(errno));
  return {fds[0], fds[1]};
}

void closeFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// In the child: connect the pipes and exec; on failure report errno on
// `status` (close-on-exec, so a successful exec closes it silently).
[[noreturn]] void execChild(const std::vector<std::string>& argv, Pipe& out, Pipe& err,
                            Pipe& status) {
  // A group of its own, so that a timeout kills what it started too (mpirun
  // and its ranks).
  setpgid(0, 0);
  dup2(out.write, STDOUT_FILENO);
  dup2(err.write, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  int e = errno;
  ssize_t ignored = write(status.write, &e, sizeof(e));
  static_cast<void>(ignored);
  _exit(127);
}

// Reads both pipes until they close or the deadline passes. False on timeout.
bool drain(int out_fd, int err_fd, std::string& out, std::string& err,
           std::chrono::steady_clock::time_point deadline) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) return false;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;  // closed (poll ignores negative fds)
        --open_fds;
      }
    }
  }
  return true;
}

std::string definedPath(const char* value) { return value; }

}  // namespace

CommandResult runCommand(const std::vector<std::string>& argv, int timeout_s) {
  if (argv.empty()) throw std::invalid_argument("runCommand: empty argv");
  CommandResult result;
  Pipe out = makePipe(), err = makePipe(), status = makePipe();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pid_t pid = fork();
  if (pid < 0) {
    for (int* fd : {&out.read, &out.write, &err.read, &err.write, &status.read, &status.write})
      closeFd(*fd);
    result.err = std::string("runCommand: fork failed: ") + std::strerror(errno);
    return result;
  }
  if (pid == 0) execChild(argv, out, err, status);
  setpgid(pid, pid);  // also here, so the group exists before any kill below
  closeFd(out.write);
  closeFd(err.write);
  closeFd(status.write);

  bool finished = drain(out.read, err.read, result.out, result.err, deadline);
  if (!finished) kill(-pid, SIGKILL);
  int exec_errno = 0;
  bool exec_failed = read(status.read, &exec_errno, sizeof(exec_errno)) == sizeof(exec_errno);
  closeFd(out.read);
  closeFd(err.read);
  closeFd(status.read);

  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (exec_failed) {
    result.err += "runCommand: cannot run '" + argv[0] + "': " + std::strerror(exec_errno) + "\n";
    return result;  // exit_code -1: could not start
  }
  if (!finished) {
    result.err += "runCommand: killed after " + std::to_string(timeout_s) + " s\n";
    return result;
  }
  result.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  return result;
}

std::string sourceDir() { return definedPath(HIR_SOURCE_DIR); }

std::string examplesDir() { return sourceDir() + "/ir_examples"; }

std::string hirBinary() {
#ifdef HIR_BIN
  return definedPath(HIR_BIN);
#else
  throw std::runtime_error("hirBinary(): HIR_BIN is not defined in this build of the tests");
#endif
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("readFile: cannot open '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> listJson(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string testDevice() {
  const char* d = std::getenv("HIR_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "host";
}

}  // namespace hir::test
