// Helpers shared by the tests.
#pragma once

#include <string>
#include <vector>

namespace hir::test {

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal or could not start
  std::string out;     // stdout
  std::string err;     // stderr
};

// Runs `argv` (no shell) with a timeout in seconds; captures both streams.
CommandResult runCommand(const std::vector<std::string>& argv, int timeout_s = 120);

std::string sourceDir();    // the repository root
std::string examplesDir();  // ir_examples/
std::string hirBinary();    // path of the built `hir`
std::string readFile(const std::string& path);
// Sorted paths of *.json directly in `dir`.
std::vector<std::string> listJson(const std::string& dir);
// The device of the tests that run on either: HIR_TEST_DEVICE
// (scripts/gpu-check.sh runs them with "cuda"), host by default (CI).
std::string testDevice();

}  // namespace hir::test
