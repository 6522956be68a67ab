// The parts of the multi-rank GoogleTest harness (<hostir/testing.h>) that
// do not need a world: one rank's outcome and its wire form, the summary
// rank 0 prints, the per-rank name of a result file. Private to testing/ and
// its tests.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hir::test::harness {

// What one rank's run of the tests came to.
struct RankOutcome {
  int rank = 0;
  bool failed = false;                     // RUN_ALL_TESTS() was not 0
  std::vector<std::string> failed_tests;   // "Suite.Test", in the order run
  // Failures outside any test: a global or suite set-up or tear-down, or a
  // result file that could not be written.
  std::vector<std::string> other_failures;

  bool operator==(const RankOutcome&) const = default;
};

// The bytes a rank sends in the final allgather, and back. decode() throws
// InternalError on bytes that encode() did not make.
std::string encode(const RankOutcome& outcome);
RankOutcome decode(int rank, const std::string& bytes);

// What rank 0 prints once every rank's outcome is in, one line each, every
// line starting with "[hir] ": for each failed test the ranks it failed on
// ("[hir] FAILED on rank 1: Suite.Test", "[hir] FAILED on ranks 0, 2-3:
// Suite.Test"), then each rank's failures outside tests, then the verdict:
// "[hir] PASSED on all 2 ranks" or "[hir] FAILED on 1 of 2 ranks (1 failed
// test)". `outcomes` holds every rank's, in rank order.
std::string formatSummary(const std::vector<RankOutcome>& outcomes);

// Ranks as a short list: {0, 2, 3, 4, 7} -> "0, 2-4, 7" (sorted input).
std::string formatRanks(const std::vector<int>& ranks);

// The value of --gtest_output (or GTEST_OUTPUT) that rank `rank` uses, so that
// ranks write separate files: "FORMAT:PATH" with ".rank<r>" inserted before
// the extension of PATH's last component ("xml:out/report.xml" ->
// "xml:out/report.rank1.xml"; "xml:out/report" -> "xml:out/report.rank1");
// "FORMAT:DIR/" -> "FORMAT:DIR/<program>.rank<r>.FORMAT"; "FORMAT" alone ->
// "FORMAT:test_detail.rank<r>.FORMAT" (GoogleTest's default file). Empty
// stays empty (no result file).
std::string perRankOutput(const std::string& output, int rank, const std::string& program);

// HIR_TEST_END_TIMEOUT_S: how long a rank that ended a test, or all of
// them, waits for the others to end it too before it ends the job. Unset:
// 300 s. Anything but a whole number of seconds from 1 to 86400 is a
// UsageError naming the variable and the value.
std::chrono::seconds endTimeout(const char* value);

}  // namespace hir::test::harness
