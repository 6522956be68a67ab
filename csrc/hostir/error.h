// Errors. Every error hostir reports is one of three kinds, each with its
// exit code of the `hir` command:
// - the user's program or input is wrong (exit 2): ParseError,
//   ValidationError, ProgramError, UsageError;
// - the run failed although the program is valid (exit 3): RuntimeError and
//   its subclasses BackendError and TimeoutError;
// - hostir has a bug (exit 4): InternalError, which is not an Error; a bad
//   program can never raise it.
// Every message says what was expected, what was found and where (JSON
// pointer, node path, rank). The macros that raise them are private
// (common/check.h).
#pragma once

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

namespace detail {
// `what` with control characters, bidirectional controls and bytes that
// are not UTF-8 escaped; newlines and tabs kept. Whatever a program or a
// command line puts in a message then prints as text.
std::string printableMessage(const std::string& what);
}  // namespace detail

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = kExitBadInput)
      : std::runtime_error(detail::printableMessage(what)), exit_code_(exit_code) {}
  int exitCode() const { return exit_code_; }

 private:
  int exit_code_;
};

// Malformed JSON, unknown key or op, wrong type, bad expression syntax.
// pointer() is the RFC 6901 JSON pointer of the offending value.
class ParseError : public Error {
 public:
  ParseError(std::string pointer, const std::string& message);
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

// Bad command line, or an embedder's misuse of the API (binding an unknown
// name, registering a backend name twice).
class UsageError : public Error {
 public:
  using Error::Error;
};

// The run failed although the program is valid: the environment, a peer or
// the hardware did not do its part (a failed exchange between ranks, memory
// that cannot be had). Exit 3.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& what) : Error(what, kExitRuntimeFailure) {}
};

// A library call (CUDA, NCCL, MPI) failed, or a device reported an error.
class BackendError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// A host-side wait ran past its timeout.
class TimeoutError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// A bug in hostir itself, never the user's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace hir

