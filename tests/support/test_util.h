// Helpers shared by the tests.
#pragma once

#include <string>
#include <vector>

// 1 when this build runs under AddressSanitizer or ThreadSanitizer (GCC
// defines __SANITIZE_*__; clang answers __has_feature), else 0.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HIR_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HIR_TEST_SANITIZED 1
#endif
#endif
#ifndef HIR_TEST_SANITIZED
#define HIR_TEST_SANITIZED 0
#endif

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
