// The in-process bootstrap (createThreadBootstraps, createSelfBootstrap):
// ranks as threads of one process meet in allgather, broadcast and barrier;
// a rank that never arrives ends the call with a TimeoutError naming it,
// ranks that call different collectives get a UsageError, and either breaks
// the world for later calls.
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hostir/bootstrap.h>
#include <hostir/error.h>

namespace hir {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Runs fn(rank) on one thread per bootstrap of `world` and joins them.
void onEveryRank(std::vector<std::unique_ptr<Bootstrap>>& world,
                 const std::function<void(Bootstrap&)>& fn) {
  std::vector<std::thread> threads;
  for (auto& b : world) threads.emplace_back([&fn, &b] { fn(*b); });
  for (std::thread& t : threads) t.join();
}

TEST(ThreadBootstrap, RanksOfOneProcessAllgatherBroadcastAndBarrier) {
  constexpr int kWorld = 4;
  auto world = createThreadBootstraps(kWorld, std::chrono::seconds(10));
  ASSERT_EQ(world.size(), 4u);
  std::vector<std::vector<int>> gathered(kWorld);
  std::vector<int> broadcast(kWorld);
  onEveryRank(world, [&](Bootstrap& b) {
    const int r = b.rank();
    // In place: a rank's value already at its own slot of the result.
    std::vector<int> all(kWorld * 2, -1);
    all[r * 2] = r * 10;
    all[r * 2 + 1] = r * 10 + 1;
    for (int round = 0; round < 3; ++round) b.allgather(&all[r * 2], all.data(), 2 * sizeof(int));
    gathered[r] = all;
    int value = r == 2 ? 77 : -1;
    b.broadcast(&value, sizeof(value), 2);
    broadcast[r] = value;
    b.barrier();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_THAT(gathered[r], ::testing::ElementsAre(0, 1, 10, 11, 20, 21, 30, 31)) << "rank " << r;
    EXPECT_EQ(broadcast[r], 77) << "rank " << r;
    EXPECT_EQ(world[r]->rank(), r);
    EXPECT_EQ(world[r]->world(), kWorld);
    EXPECT_EQ(world[r]->localRank(), r);
    EXPECT_EQ(world[r]->localSize(), kWorld);
    EXPECT_EQ(world[r]->rankSpace(), RankSpace::Threads);
  }
  EXPECT_EQ(world[0]->node(), world[3]->node());
}

TEST(ThreadBootstrap, NodesAreOneMachine) {
  auto world = createThreadBootstraps(3, std::chrono::seconds(10));
  std::vector<std::vector<std::string>> nodes(3);
  onEveryRank(world, [&](Bootstrap& b) { nodes[b.rank()] = b.nodes(); });
  for (const auto& n : nodes)
    EXPECT_THAT(n, ::testing::ElementsAre(world[0]->node(), world[0]->node(), world[0]->node()));
}

TEST(ThreadBootstrap, SelfBootstrapIsAWorldOfOneThatNeverWaits) {
  std::unique_ptr<Bootstrap> self = createSelfBootstrap();
  EXPECT_EQ(self->world(), 1);
  EXPECT_EQ(self->rankSpace(), RankSpace::Threads);
  int send = 5, recv = 0;
  self->allgather(&send, &recv, sizeof(int));
  EXPECT_EQ(recv, 5);
  self->barrier();
  EXPECT_THROW(self->broadcast(&send, sizeof(int), 1), UsageError);
}

TEST(ThreadBootstrap, ARankThatNeverArrivesTimesOutNamingIt) {
  auto world = createThreadBootstraps(3, std::chrono::milliseconds(200));
  std::vector<std::string> errors(3);
  const Clock::time_point start = Clock::now();
  // Rank 1 never calls.
  std::thread r0([&] {
    try {
      world[0]->barrier();
    } catch (const TimeoutError& e) {
      errors[0] = e.what();
    }
  });
  std::thread r2([&] {
    try {
      world[2]->barrier();
    } catch (const TimeoutError& e) {
      errors[2] = e.what();
    }
  });
  r0.join();
  r2.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  for (int r : {0, 2}) {
    EXPECT_THAT(errors[r], HasSubstr("bootstrap barrier")) << "rank " << r;
    EXPECT_THAT(errors[r], HasSubstr("rank(s) 1 of a world of 3 did not arrive within 200 ms"))
        << "rank " << r;
  }
  // The world is broken: rank 1's late call fails at once with the same error.
  try {
    world[1]->barrier();
    ADD_FAILURE() << "a late barrier in a broken world returned";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank(s) 1 of a world of 3 did not arrive"));
  }
}

TEST(ThreadBootstrap, RanksCallingDifferentCollectivesGetAUsageErrorNamingEach) {
  auto world = createThreadBootstraps(2, std::chrono::seconds(10));
  std::vector<std::string> errors(2);
  onEveryRank(world, [&](Bootstrap& b) {
    try {
      if (b.rank() == 0) {
        b.barrier();
      } else {
        int x = 0, all[2];
        b.allgather(&x, all, sizeof(x));
      }
    } catch (const UsageError& e) {
      errors[b.rank()] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_THAT(e, HasSubstr("the ranks' calls differ"));
    EXPECT_THAT(e, HasSubstr("rank 0: barrier"));
    EXPECT_THAT(e, HasSubstr("rank 1: allgather of 4 bytes"));
  }
}

TEST(ThreadBootstrap, BadArgumentsAreUsageErrors) {
  EXPECT_THROW(createThreadBootstraps(0), UsageError);
  // Refused before anything is allocated for it (was std::bad_alloc).
  try {
    createThreadBootstraps(1 << 30);
    ADD_FAILURE() << "a world of 2^30 threads was made";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 1 to 4096 ranks, got 1073741824"));
  }
  EXPECT_THROW(createThreadBootstraps(2, std::chrono::milliseconds(0)), UsageError);
  auto world = createThreadBootstraps(2, std::chrono::seconds(1));
  int x = 0;
  try {
    world[0]->broadcast(&x, sizeof(x), 2);
    ADD_FAILURE() << "a broadcast from root 2 in a world of 2 returned";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("root 2 is not a rank of a world of 2"));
  }
}

}  // namespace
}  // namespace hir
