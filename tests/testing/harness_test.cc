// The parts of the multi-rank GoogleTest harness that need no world
// (csrc/testing/harness.h): the summary rank 0 prints, the per-rank result
// file names, the skip messages, the outcome's wire form. run_harness.cmake
// checks the same under mpirun.
#include <chrono>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hostir/error.h>
#include <hostir/testing.h>
#include "testing/harness.h"

namespace hir::test::harness {
namespace {

using ::testing::HasSubstr;

RankOutcome passed(int rank) { return RankOutcome{rank, false, {}, {}}; }
RankOutcome failing(int rank, std::vector<std::string> tests) {
  return RankOutcome{rank, true, std::move(tests), {}};
}

TEST(HarnessSummary, AllRanksPassedIsOneVerdictLine) {
  EXPECT_EQ(formatSummary({passed(0), passed(1)}), "[hir] PASSED on all 2 ranks\n");
  EXPECT_EQ(formatSummary({passed(0)}), "[hir] PASSED on all 1 rank\n");
}

TEST(HarnessSummary, NamesTheRankATestFailedOnThenTheVerdict) {
  EXPECT_EQ(formatSummary({passed(0), failing(1, {"Suite.Test"})}),
            "[hir] FAILED on rank 1: Suite.Test\n"
            "[hir] FAILED on 1 of 2 ranks (1 failed test)\n");
}

TEST(HarnessSummary, GroupsRanksOfOneTestAsRangesInFirstFailureOrder) {
  std::vector<RankOutcome> all = {failing(0, {"B.Two"}), passed(1), failing(2, {"A.One", "B.Two"}),
                                  failing(3, {"B.Two"}), failing(4, {"B.Two"})};
  EXPECT_EQ(formatSummary(all),
            "[hir] FAILED on ranks 0, 2-4: B.Two\n"
            "[hir] FAILED on rank 2: A.One\n"
            "[hir] FAILED on 4 of 5 ranks (2 failed tests)\n");
}

TEST(HarnessSummary, FailuresOutsideTestsNameTheirRank) {
  RankOutcome r1{1, true, {}, {"outside any test (a global set-up or tear-down)"}};
  EXPECT_EQ(formatSummary({passed(0), r1}),
            "[hir] FAILED on rank 1: outside any test (a global set-up or tear-down)\n"
            "[hir] FAILED on 1 of 2 ranks\n");
}

TEST(HarnessSummary, RanksListCompressesRuns) {
  EXPECT_EQ(formatRanks({}), "");
  EXPECT_EQ(formatRanks({3}), "3");
  EXPECT_EQ(formatRanks({0, 1}), "0-1");
  EXPECT_EQ(formatRanks({0, 2, 3, 4, 7}), "0, 2-4, 7");
}

TEST(HarnessOutcome, EncodeDecodeRoundTrips) {
  RankOutcome o{3, true, {"A.One", "B/Param.Two/0"}, {"outside any test"}};
  EXPECT_EQ(decode(3, encode(o)), o);
  EXPECT_EQ(decode(0, encode(passed(0))), passed(0));
}

TEST(HarnessOutcome, DecodeRejectsForeignBytesNamingTheRank) {
  try {
    decode(2, "garbage");
    ADD_FAILURE() << "decoded bytes that encode() did not make";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2"));
    EXPECT_THAT(e.what(), HasSubstr("failed=0 or failed=1"));
  }
}

TEST(HarnessOutput, PathWithExtensionGetsTheRankBeforeIt) {
  EXPECT_EQ(perRankOutput("xml:out/report.xml", 1, "t"), "xml:out/report.rank1.xml");
  EXPECT_EQ(perRankOutput("xml:report.xml", 0, "t"), "xml:report.rank0.xml");
  EXPECT_EQ(perRankOutput("json:a.b/c.d.json", 12, "t"), "json:a.b/c.d.rank12.json");
}

TEST(HarnessOutput, PathWithoutExtensionGetsTheRankAtTheEnd) {
  EXPECT_EQ(perRankOutput("xml:out.d/report", 2, "t"), "xml:out.d/report.rank2");
  EXPECT_EQ(perRankOutput("xml:out/.hidden", 2, "t"), "xml:out/.hidden.rank2");
}

TEST(HarnessOutput, DirectoryGetsOneFilePerRankNamedForTheProgram) {
  EXPECT_EQ(perRankOutput("xml:results/", 3, "my_tests"), "xml:results/my_tests.rank3.xml");
}

TEST(HarnessOutput, FormatAloneGetsGoogleTestsDefaultFilePerRank) {
  EXPECT_EQ(perRankOutput("xml", 1, "t"), "xml:test_detail.rank1.xml");
  EXPECT_EQ(perRankOutput("xml:", 1, "t"), "xml:test_detail.rank1.xml");
}

TEST(HarnessOutput, NoOutputStaysNone) { EXPECT_EQ(perRankOutput("", 1, "t"), ""); }

TEST(HarnessWorldRequirement, SkipMessageNamesNeededAndActualSize) {
  EXPECT_EQ(worldRequirementProblem(WorldRequirement::Exactly, 2, 3),
            "needs exactly 2 ranks, the world has 3");
  EXPECT_EQ(worldRequirementProblem(WorldRequirement::AtLeast, 4, 2),
            "needs at least 4 ranks, the world has 2");
  EXPECT_EQ(worldRequirementProblem(WorldRequirement::Exactly, 1, 2),
            "needs exactly 1 rank, the world has 2");
}

TEST(HarnessWorldRequirement, MetRequirementIsNoProblem) {
  EXPECT_EQ(worldRequirementProblem(WorldRequirement::Exactly, 2, 2), "");
  EXPECT_EQ(worldRequirementProblem(WorldRequirement::AtLeast, 2, 2), "");
  EXPECT_EQ(worldRequirementProblem(WorldRequirement::AtLeast, 2, 5), "");
}

TEST(HarnessWorldRequirement, SizeBelowOneIsAUsageErrorNamingTheMacro) {
  try {
    worldRequirementProblem(WorldRequirement::AtLeast, 0, 2);
    ADD_FAILURE() << "a requirement of 0 ranks was accepted";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("HIR_REQUIRE_WORLD_AT_LEAST(0)"));
  }
}

TEST(HarnessWorld, OutsideTheHarnessMainIsAUsageErrorNamingTheTarget) {
  try {
    world();
    ADD_FAILURE() << "world() answered without the harness's main";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("hostir::gtest_main"));
  }
}

TEST(HarnessEndTimeout, UnsetIsFiveMinutesAndAValueIsSeconds) {
  EXPECT_EQ(endTimeout(nullptr), std::chrono::seconds(300));
  EXPECT_EQ(endTimeout("7"), std::chrono::seconds(7));
}

TEST(HarnessEndTimeout, MalformedValueIsAUsageErrorNamingVariableAndValue) {
  for (const char* bad : {"", "0", "-3", "5s", "1.5", "999999"}) {
    try {
      endTimeout(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("HIR_TEST_END_TIMEOUT_S"));
      EXPECT_THAT(e.what(), HasSubstr(std::string("found '") + bad + "'"));
    }
  }
}

}  // namespace
}  // namespace hir::test::harness
