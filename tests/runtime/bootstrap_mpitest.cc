// The MPI bootstrap at any world size, the one-rank bootstrap, and the fake
// node split of HIR_FAKE_NODES.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/check.h"
#include <hostir/bootstrap.h>
#include "transport/fake_nodes.h"
#include "support/mpi_test.h"

namespace hir {
namespace {

using ::testing::HasSubstr;

// What every rank sends in the allgather tests: distinct per rank and slot.
int32_t slotValue(int rank, int slot) { return rank * 1000 + slot * 7 + 1; }

TEST(MpiBootstrap, RankAndWorldMatchTheLauncher) {
  Bootstrap& w = test::world();
  EXPECT_GE(w.rank(), 0);
  EXPECT_LT(w.rank(), w.world());
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(w.world(), std::atoi(size));
    EXPECT_EQ(w.rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  }
}

TEST(MpiBootstrap, AllgatherPlacesEachRanksBytesAtItsRank) {
  Bootstrap& w = test::world();
  constexpr int kSlots = 3;
  int32_t mine[kSlots];
  for (int s = 0; s < kSlots; ++s) mine[s] = slotValue(w.rank(), s);
  std::vector<int32_t> all(static_cast<std::size_t>(kSlots * w.world()), -1);
  w.allgather(mine, all.data(), sizeof(mine));
  for (int r = 0; r < w.world(); ++r)
    for (int s = 0; s < kSlots; ++s)
      EXPECT_EQ(all[r * kSlots + s], slotValue(r, s)) << "rank " << r << " slot " << s;
}

TEST(MpiBootstrap, AllgatherCanRunRepeatedlyWithDifferentSizes) {
  Bootstrap& w = test::world();
  for (std::size_t bytes : {1u, 5u, 4096u, 100000u}) {
    std::vector<uint8_t> mine(bytes, static_cast<uint8_t>(w.rank() + 1));
    std::vector<uint8_t> all(bytes * w.world(), 0);
    w.allgather(mine.data(), all.data(), bytes);
    for (int r = 0; r < w.world(); ++r) {
      EXPECT_EQ(all[r * bytes], r + 1) << bytes << " bytes, rank " << r;
      EXPECT_EQ(all[r * bytes + bytes - 1], r + 1) << bytes << " bytes, rank " << r;
    }
  }
}

TEST(MpiBootstrap, BroadcastFromEveryRootReachesEveryRank) {
  Bootstrap& w = test::world();
  for (int root = 0; root < w.world(); ++root) {
    std::vector<int32_t> buf(17, -5);
    if (w.rank() == root)
      for (int k = 0; k < 17; ++k) buf[k] = slotValue(root, k);
    w.broadcast(buf.data(), buf.size() * sizeof(int32_t), root);
    for (int k = 0; k < 17; ++k) EXPECT_EQ(buf[k], slotValue(root, k)) << "root " << root;
  }
}

TEST(MpiBootstrap, BroadcastFromARootOutsideTheWorldIsRejected) {
  Bootstrap& w = test::world();
  int32_t value = 0;
  try {
    w.broadcast(&value, sizeof(value), w.world());
    ADD_FAILURE() << "a root outside the world was accepted";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("root {} is not a rank", w.world())));
  }
}

TEST(MpiBootstrap, BarrierHoldsEveryRankUntilTheLastArrives) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Bootstrap& w = test::world();
  constexpr auto kDelay = std::chrono::milliseconds(200);
  w.barrier();  // start together
  auto start = std::chrono::steady_clock::now();
  if (w.rank() == 0) std::this_thread::sleep_for(kDelay);
  w.barrier();
  auto waited = std::chrono::steady_clock::now() - start;
  // Rank 0 arrives 200 ms late; nobody may leave before (less scheduling slack).
  EXPECT_GE(waited, kDelay - std::chrono::milliseconds(20));
}

TEST(MpiBootstrap, NodesAgreeOnEveryRankAndMatchTheLocalSplit) {
  Bootstrap& w = test::world();
  const std::vector<std::string>& nodes = w.nodes();
  ASSERT_EQ(static_cast<int>(nodes.size()), w.world());
  EXPECT_EQ(nodes[w.rank()], w.node());
  EXPECT_EQ(&w.nodes(), &nodes) << "nodes() is cached";
  // Rank 0's list, broadcast, equals every rank's.
  std::string joined;
  for (const std::string& n : nodes) joined += n + '\n';
  uint64_t size = joined.size();
  w.broadcast(&size, sizeof(size), 0);
  std::string from_root = joined;
  from_root.resize(size);
  w.broadcast(from_root.data(), size, 0);
  EXPECT_EQ(from_root, joined);
  // Local rank and size follow the node identities, in world rank order.
  int same_node = 0, before_me = 0;
  for (int r = 0; r < w.world(); ++r) {
    if (nodes[r] != w.node()) continue;
    ++same_node;
    if (r < w.rank()) ++before_me;
  }
  EXPECT_EQ(w.localSize(), same_node);
  EXPECT_EQ(w.localRank(), before_me);
}

TEST(MpiBootstrap, NodeIsTheHostNameOrTheFakeNodeOfHirFakeNodes) {
  Bootstrap& w = test::world();
  int fake = parseFakeNodes(std::getenv("HIR_FAKE_NODES"));
  if (fake > 0) {
    NodeAssignment expected = fakeNodeAssignment(w.rank(), w.world(), fake);
    EXPECT_EQ(w.node(), expected.node);
    EXPECT_EQ(w.localRank(), expected.local_rank);
    EXPECT_EQ(w.localSize(), expected.local_size);
  } else {
    char host[256] = {};
    ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
    EXPECT_EQ(w.node(), host);
  }
}

TEST(MpiBootstrap, ASecondBootstrapSharesMpiAndDoesNotFinalizeIt) {
  Bootstrap& w = test::world();
  {
    std::unique_ptr<Bootstrap> second = createMpiBootstrap();
    EXPECT_EQ(second->rank(), w.rank());
    EXPECT_EQ(second->world(), w.world());
    int32_t mine = w.rank() + 10;
    std::vector<int32_t> all(w.world());
    second->allgather(&mine, all.data(), sizeof(mine));
    for (int r = 0; r < w.world(); ++r) EXPECT_EQ(all[r], r + 10);
  }
  // MPI still works after the second bootstrap is gone.
  int32_t mine = w.rank() + 20;
  std::vector<int32_t> all(w.world());
  w.allgather(&mine, all.data(), sizeof(mine));
  for (int r = 0; r < w.world(); ++r) EXPECT_EQ(all[r], r + 20);
}

// ------------------------------------------------------------ fake nodes

TEST(FakeNodes, FourRanksOnTwoNodesFillTheNodesInRankOrder) {
  const char* expected_node[] = {"node0", "node0", "node1", "node1"};
  for (int r = 0; r < 4; ++r) {
    NodeAssignment a = fakeNodeAssignment(r, 4, 2);
    EXPECT_EQ(a.node, expected_node[r]) << "rank " << r;
    EXPECT_EQ(a.local_rank, r % 2) << "rank " << r;
    EXPECT_EQ(a.local_size, 2) << "rank " << r;
  }
}

TEST(FakeNodes, AnUnevenSplitLeavesTheRemainderOnTheLastNode) {
  // 3 ranks, 2 nodes: ceil(3/2) = 2 per node.
  EXPECT_EQ(fakeNodeAssignment(1, 3, 2).node, "node0");
  EXPECT_EQ(fakeNodeAssignment(1, 3, 2).local_size, 2);
  NodeAssignment last = fakeNodeAssignment(2, 3, 2);
  EXPECT_EQ(last.node, "node1");
  EXPECT_EQ(last.local_rank, 0);
  EXPECT_EQ(last.local_size, 1);
}

TEST(FakeNodes, MoreNodesThanRanksPutsEachRankOnItsOwnNode) {
  for (int r = 0; r < 3; ++r) {
    NodeAssignment a = fakeNodeAssignment(r, 3, 8);
    EXPECT_EQ(a.node, fmt::format("node{}", r));
    EXPECT_EQ(a.local_rank, 0);
    EXPECT_EQ(a.local_size, 1);
  }
}

TEST(FakeNodes, OneNodeHoldsEveryRank) {
  NodeAssignment a = fakeNodeAssignment(3, 4, 1);
  EXPECT_EQ(a.node, "node0");
  EXPECT_EQ(a.local_rank, 3);
  EXPECT_EQ(a.local_size, 4);
}

TEST(FakeNodes, UnsetOrEmptyMeansRealNodes) {
  EXPECT_EQ(parseFakeNodes(nullptr), 0);
  EXPECT_EQ(parseFakeNodes(""), 0);
  EXPECT_EQ(parseFakeNodes("3"), 3);
}

TEST(FakeNodes, AnythingButAPositiveIntegerIsRejected) {
  for (const char* bad : {"0", "-2", "two", "2x", " "}) {
    try {
      parseFakeNodes(bad);
      ADD_FAILURE() << "accepted HIR_FAKE_NODES='" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("HIR_FAKE_NODES must be a positive integer"));
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("'{}'", bad)));
    }
  }
}

// --------------------------------------------------------- self, launcher

TEST(SelfBootstrap, IsAWorldOfOneOnThisHost) {
  std::unique_ptr<Bootstrap> self = createSelfBootstrap();
  EXPECT_EQ(self->rank(), 0);
  EXPECT_EQ(self->world(), 1);
  EXPECT_EQ(self->localRank(), 0);
  EXPECT_EQ(self->localSize(), 1);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(self->node(), host);
  EXPECT_EQ(self->nodes(), std::vector<std::string>{host});
}

TEST(SelfBootstrap, AllgatherCopiesAndBroadcastAcceptsOnlyRootZero) {
  std::unique_ptr<Bootstrap> self = createSelfBootstrap();
  int64_t in = 42, out = 0;
  self->allgather(&in, &out, sizeof(in));
  EXPECT_EQ(out, 42);
  self->broadcast(&in, sizeof(in), 0);
  EXPECT_EQ(in, 42);
  EXPECT_THROW(self->broadcast(&in, sizeof(in), 1), UsageError);
}

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(LaunchedByMpi, FollowsTheLauncherVariables) {
  ScopedEnv a("OMPI_COMM_WORLD_SIZE", nullptr), b("PMI_SIZE", nullptr), c("PMIX_RANK", nullptr);
  EXPECT_FALSE(launchedByMpi());
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    ScopedEnv set(var, "2");
    EXPECT_TRUE(launchedByMpi()) << var;
  }
  EXPECT_FALSE(launchedByMpi());
}

}  // namespace
}  // namespace hir
