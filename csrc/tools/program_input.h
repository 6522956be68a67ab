// Where `hir` reads a program from: a file, or standard input (PROG "-"),
// which only the launcher, or rank 0 of an MPI job, can read
// (docs/cli.md, "Command line").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <hostir/bootstrap.h>
#include <hostir/program.h>

namespace hir {

// The program's text from standard input, which can be read only once
// (each command reads it at most once). A terminal is refused (UsageError).
std::string readStandardInput();

// Loads the plugins (validation checks kernel nodes against the registry),
// then the program from `path`, or with path "-" from `text` when it was
// read already, else from standard input; then applies `params`.
Program loadProgramWithParams(const std::string& path, const std::vector<std::string>& plugins,
                              const std::vector<std::pair<std::string, int64_t>>& params,
                              const std::optional<std::string>& text = std::nullopt);

// PROG "-" with --np: the ranks cannot read the launcher's standard input,
// so they read the text from a temporary file (in $TMPDIR, else /tmp),
// removed when this object is destroyed.
class TempProgramFile {
 public:
  explicit TempProgramFile(const std::string& text);
  ~TempProgramFile();
  TempProgramFile(const TempProgramFile&) = delete;
  TempProgramFile& operator=(const TempProgramFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// PROG "-" in an MPI job: rank 0 reads standard input (mpirun gives it to
// rank 0 alone) and broadcasts the text. Collective.
std::string programTextOnEveryRank(Bootstrap& boot);

}  // namespace hir
