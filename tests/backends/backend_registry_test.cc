// What the registry's caps answer as data for tools that know no backend
// by name: the eager slots a backend makes (`hir check` reports them).
#include <gtest/gtest.h>

#include <hostir/backend.h>

namespace hir {
namespace {

TEST(BackendRegistry, EagerSlotsAreAnsweredByTheBackendsThatMakeThem) {
  int answering = 0;
  for (const BackendInfo& b : registeredBackends()) {
    if (b.caps.eager_slots == nullptr) continue;
    ++answering;
    // Only a backend that maps peer memory receives into slots of its own.
    EXPECT_TRUE(b.caps.maps_peer_memory) << b.caps.name;
  }
  EXPECT_GE(answering, 1);
  const BackendInfo* ipc = findBackend("ipc");
  ASSERT_NE(ipc, nullptr);
  ASSERT_NE(ipc->caps.eager_slots, nullptr);
  // The defaults: 8 slots per sender, as large as the largest eager send.
  const EagerSlots slots = ipc->caps.eager_slots(Settings{}, int64_t{64} << 10);
  EXPECT_EQ(slots.bytes, std::size_t{64} << 10);
  EXPECT_EQ(slots.count, 8u);
  EXPECT_EQ(findBackend("mpi")->caps.eager_slots, nullptr);
}

}  // namespace
}  // namespace hir
