// A test program for tests/testing/run_harness.cmake, which runs it under
// mpirun at 2 ranks, one scenario per --gtest_filter, and checks what the
// harness (hostir::gtest_main) makes of it: the verdict, the summary, the
// result files, the skips, a rank that exits or hangs inside a test.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <hostir/testing.h>

namespace {

using hir::test::world;

TEST(Fixture, AllgatherSeesEveryRank) {
  const int32_t mine = world().rank() + 1;
  std::vector<int32_t> all(static_cast<std::size_t>(world().world()));
  world().allgather(&mine, all.data(), sizeof(mine));
  for (int r = 0; r < world().world(); ++r) EXPECT_EQ(all[r], r + 1) << "rank " << r;
}

TEST(Fixture, FailsOnRankOne) { EXPECT_NE(world().rank(), 1) << "rank 1 fails on purpose"; }

TEST(Fixture, FailsOnEveryRank) { ADD_FAILURE() << "every rank fails on purpose"; }

TEST(Fixture, RunsWithExactlyTwoRanks) {
  HIR_REQUIRE_WORLD(2);
  EXPECT_EQ(world().world(), 2);
}

TEST(Fixture, NeedsExactlyThreeRanks) {
  HIR_REQUIRE_WORLD(3);
  ADD_FAILURE() << "ran with " << world().world() << " ranks";
}

TEST(Fixture, NeedsAtLeastFiveRanks) {
  HIR_REQUIRE_WORLD_AT_LEAST(5);
  ADD_FAILURE() << "ran with " << world().world() << " ranks";
}

TEST(Fixture, RankOneExits) {
  if (world().rank() == 1) std::exit(7);
}

TEST(Fixture, RankOneExitsWithZero) {
  if (world().rank() == 1) std::exit(0);
}

TEST(Fixture, RankOneCrashes) {
  if (world().rank() == 1) std::abort();
}

// Rank 1 gives up before a collective that rank 0 enters (a failed
// ASSERT, say): rank 0 waits in it, rank 1 waits for rank 0 to end the test.
TEST(Fixture, RankOneLeavesBeforeACollective) {
  if (world().rank() == 1) GTEST_FAIL() << "rank 1 leaves on purpose";
  int32_t mine = 1;
  std::vector<int32_t> all(static_cast<std::size_t>(world().world()));
  world().allgather(&mine, all.data(), sizeof(mine));
}

TEST(Fixture, RankOneHangs) {
  if (world().rank() == 1) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace
