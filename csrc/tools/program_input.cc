#include "tools/program_input.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>

#include <hostir/error.h>
#include <hostir/json.h>
#include <hostir/kernel.h>

namespace hir {

std::string readStandardInput() {
  if (isatty(STDIN_FILENO))
    throw UsageError("PROG is - but standard input is a terminal; pipe the program in "
                     "(hir check - --world 2 < prog.json)");
  return readProgramText(std::cin, "<stdin>");
}

Program loadProgramWithParams(const std::string& path, const std::vector<std::string>& plugins,
                              const std::vector<std::pair<std::string, int64_t>>& params,
                              const std::optional<std::string>& text) {
  for (const std::string& lib : plugins) loadKernelPlugin(lib);
  Program p = path != "-" ? loadProgram(path)
                          : parseProgram(text ? *text : readStandardInput(), "<stdin>");
  applyParamOverrides(p, params);
  return p;
}

TempProgramFile::TempProgramFile(const std::string& text) {
  const char* tmp = std::getenv("TMPDIR");
  path_ = fmt::format("{}/hir-stdin-XXXXXX.json", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemps(path_.data(), 5);
  if (fd < 0)
    throw RuntimeError(fmt::format("cannot create a temporary file for the program from "
                                   "standard input ({}): {}", path_, std::strerror(errno)));
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      close(fd);
      unlink(path_.c_str());
      throw RuntimeError(fmt::format("cannot write the program from standard input to {}: {}",
                                     path_, std::strerror(e)));
    }
    done += static_cast<std::size_t>(n);
  }
  close(fd);
}

TempProgramFile::~TempProgramFile() { unlink(path_.c_str()); }

std::string programTextOnEveryRank(Bootstrap& boot) {
  constexpr uint64_t kUnreadable = UINT64_MAX;
  std::string text;
  uint64_t size = 0;
  std::exception_ptr failure;
  if (boot.rank() == 0) {
    try {
      text = readStandardInput();
      size = text.size();
    } catch (const Error&) {
      failure = std::current_exception();
      size = kUnreadable;
    }
  }
  if (boot.world() > 1) {
    boot.broadcast(&size, sizeof size, 0);
    if (size != kUnreadable) {
      text.resize(size);
      if (size > 0) boot.broadcast(text.data(), size, 0);
    }
  }
  if (failure) std::rethrow_exception(failure);
  if (size == kUnreadable)
    throw UsageError("rank 0 could not read the program from standard input");
  return text;
}

}  // namespace hir
