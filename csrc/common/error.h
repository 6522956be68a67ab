// Errors. Every error a user can cause is a hir::Error subclass that says what
// was expected, what was found and where (JSON pointer, node path, rank).
// Internal bugs use HIR_INTERNAL_ASSERT and hir::InternalError, which is not
// an Error: a user can never trigger it with a bad program.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace hir {

// Process exit codes of the `hir` command (documented in docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,    // a `check` node found wrong data
  kExitBadInput = 2,       // bad usage, bad JSON, invalid program
  kExitRuntimeFailure = 3, // a timeout, a device or library failure
  kExitInternal = 4,       // a bug in hostir
};

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kExitBadInput)
      : std::runtime_error(what), exit_code_(exit_code) {}
  int exitCode() const { return exit_code_; }

 private:
  int exit_code_;
};

// Malformed JSON, unknown key or op, wrong type, bad expression syntax.
// pointer() is the RFC 6901 JSON pointer of the offending value.
class ParseError : public Error {
 public:
  ParseError(std::string pointer, const std::string& message)
      : Error(fmt::format("{}: {}", pointer.empty() ? "/" : pointer, message)),
        pointer_(std::move(pointer)) {}
  const std::string& pointer() const { return pointer_; }

 private:
  std::string pointer_;
};

// One or more problems found by validation or the cross-rank check. Each
// issue names the node path (the JSON pointer of the node, e.g. /body/2).
class ValidationError : public Error {
 public:
  struct Issue {
    std::string path;
    std::string message;
  };
  explicit ValidationError(std::vector<Issue> issues);
  const std::vector<Issue>& issues() const { return issues_; }

 private:
  std::vector<Issue> issues_;
};

// A program that is wrong only at run time on some rank (a peer outside the
// team, an index out of range under some loop values). Bad input: exit 2.
class ProgramError : public Error {
 public:
  using Error::Error;
};

// Bad command line.
class UsageError : public Error {
 public:
  using Error::Error;
};

// A library call (CUDA, NCCL, MPI) failed, or a device reported an error.
class BackendError : public Error {
 public:
  explicit BackendError(const std::string& what) : Error(what, kExitRuntimeFailure) {}
};

// A host-side wait ran past its timeout.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(what, kExitRuntimeFailure) {}
};

// A bug in hostir itself, never the user's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace hir

// User error: the program or the input is wrong. Throws hir::ProgramError.
#define HIR_CHECK(cond, ...)                                          \
  do {                                                                \
    if (!(cond)) throw ::hir::ProgramError(fmt::format(__VA_ARGS__)); \
  } while (0)

// Same, with an explicit hir::Error subclass taking one string.
#define HIR_CHECK_AS(ErrorType, cond, ...)                    \
  do {                                                        \
    if (!(cond)) throw ErrorType(fmt::format(__VA_ARGS__));   \
  } while (0)

// Internal invariant: a failure is a bug in hostir.
#define HIR_INTERNAL_ASSERT(cond, ...)                                          \
  do {                                                                          \
    if (!(cond))                                                                \
      throw ::hir::InternalError(fmt::format("internal error at {}:{}: {} ({})", \
                                             __FILE__, __LINE__,                \
                                             fmt::format(__VA_ARGS__), #cond)); \
  } while (0)
