// The MPI backend on the host device, at any world size: every communication
// type, dtype and reduce op against the host reference of
// support/collective_reference.h (data seeded by (rank, iteration)); in-place
// forms; teams that are not the world; send/recv posted in opposite orders;
// posts that return before the communication can complete. Also the backend
// registry and the defaults of Backend.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/gate.h"

#include <hostir/backend.h>
#include "backends/ipc/ipc_backend.h"
#include "backends/mpi_backend.h"
#include "common/elements.h"
#include "common/check.h"
#include "device/host_device.h"
#include "support/collective_reference.h"
#include "support/mpi_test.h"

namespace hir {
namespace {

using ::testing::HasSubstr;
using test::AvgRule;
using test::Case;
using test::fillWith;
using test::poison;
using test::pointToPoint;
using test::sentData;
using Clock = std::chrono::steady_clock;

Duration testTimeout() {
  const char* s = std::getenv("HIR_TEST_TIMEOUT_S");
  return std::chrono::seconds(s != nullptr ? std::atoi(s) : 60);
}

// A host device and an MPI backend set up on it (collective).
struct Harness {
  explicit Harness(Duration timeout = testTimeout()) : device(timeout) {
    const BackendInfo* info = findBackend("mpi");
    HIR_INTERNAL_ASSERT(info != nullptr, "the mpi backend is not registered");
    backend = info->create();
    BackendContext ctx;
    ctx.device = &device;
    ctx.bootstrap = &test::world();
    ctx.teams = test::testTeams(test::world().world());
    ctx.timeout = timeout;
    teams = ctx.teams;
    backend->setup(ctx);
  }
  HostDevice device;
  std::unique_ptr<Backend> backend;  // destroyed before the device
  std::vector<std::vector<int>> teams;

  ~Harness() { backend.reset(); }
};

// Device memory that frees itself.
class Buffer {
 public:
  Buffer(Device& d, std::size_t bytes) : device_(d), p_(d.allocate(bytes)) {}
  ~Buffer() { device_.deallocate(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(p_); }

 private:
  Device& device_;
  void* p_;
};

// The MPI backend averages in the dtype's arithmetic, exactly.
constexpr AvgRule kAvg = AvgRule::DivideInDType;

// Runs `iterations` posts of one case on `h`, reusing the buffers, and
// checks every output element. Non-members of the team skip it, as the
// evaluator does.
void runCase(Harness& h, const Case& c, std::size_t count, int iterations) {
  const std::vector<int>& team = h.teams[c.team];
  const int rank = test::world().rank();
  const std::optional<test::Participation> part = test::participation(c, team, rank, count);
  if (!part) return;
  const auto [me, in_n, out_n, layout] = *part;
  const std::size_t el = dtypeSize(c.dtype);

  // In place: one buffer holding both; else two.
  Buffer main(h.device, std::max(in_n, out_n) * el);
  std::optional<Buffer> separate;
  std::byte* input = main.data();
  std::byte* output = main.data();
  if (c.in_place) {
    if (layout.input_inside_output)
      input = output + layout.offset * el;
    else
      output = input + layout.offset * el;
  } else {
    separate.emplace(h.device, out_n * el);
    output = separate->data();
  }
  Stream& stream = h.device.defaultStream();
  std::unique_ptr<Event> done = h.device.createEvent();

  for (int it = 0; it < iterations; ++it) {
    const int root = it % static_cast<int>(team.size());
    h.device.synchronize(stream, testTimeout());
    // Poison the output, then write the input (which may lie inside it).
    fillWith(output, c.dtype, out_n, poison(c.dtype));
    const bool has_input = c.type != CommType::Broadcast || me == root;
    if (has_input)
      for (std::size_t i = 0; i < in_n; ++i)
        test::store(input, c.dtype, i, test::inputValue(c.reduce, rank, it, i));
    std::vector<double> before(out_n);
    for (std::size_t k = 0; k < out_n; ++k) before[k] = loadAsDouble(output, c.dtype, k);

    PostArgs a = test::collectivePost(c, input, output, count, root);
    h.backend->post({&a, 1}, stream, *done);
    h.backend->wait(*done, stream, WaitMode::Host, testTimeout());

    const int wrong =
        test::countWrongElements(c, kAvg, team, me, root, it, count, output, before);
    EXPECT_EQ(wrong, 0) << test::caseName(c) << ": iteration " << it << " had " << wrong
                        << " wrong elements";
  }
}

// ------------------------------------------------------- the full matrix

class MpiCollective : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() { harness_ = new Harness(); }
  static void TearDownTestSuite() {
    delete harness_;
    harness_ = nullptr;
  }
  static Harness* harness_;
};
Harness* MpiCollective::harness_ = nullptr;

TEST_P(MpiCollective, MatchesTheHostReference) {
  runCase(*harness_, GetParam(), /*count=*/5, /*iterations=*/3);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MpiCollective, ::testing::ValuesIn(test::allCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return test::caseName(info.param);
                         });

// Large messages take other MPI algorithms (segmented, rendezvous).
TEST(MpiBackend, LargeCollectivesMatchTheHostReference) {
  Harness h;
  for (CommType type : {CommType::Allreduce, CommType::Reduce, CommType::ReduceScatter,
                        CommType::Allgather, CommType::Broadcast, CommType::Alltoall})
    for (bool in_place : {false, true})
      runCase(h, {type, DType::Float32, ReduceOp::Sum, in_place, 0}, 50000, 2);
}

TEST(MpiBackend, ZeroElementCollectivesComplete) {
  Harness h;
  for (CommType type : {CommType::Allreduce, CommType::Allgather, CommType::Broadcast})
    runCase(h, {type, DType::Int32, ReduceOp::Sum, false, 0}, 0, 1);
  // A post with nothing to move still records `done`.
  std::unique_ptr<Event> done = h.device.createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.count = 0;
  h.backend->post({&a, 1}, h.device.defaultStream(), *done);
  h.device.synchronize(*done, testTimeout());
  EXPECT_TRUE(h.device.query(*done));
}

// -------------------------------------------------------------- send/recv

TEST(MpiBackend, SendAndRecvPostedInOppositeOrdersDoNotDeadlock) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank();
  if (rank <= 1) {
    const int peer = 1 - rank;
    constexpr std::size_t kCount = (8u << 20) / sizeof(float);  // 8 MiB
    Buffer send(h.device, kCount * sizeof(float)), recv(h.device, kCount * sizeof(float));
    for (int it = 0; it < 2; ++it) {
      std::vector<float> mine = sentData(rank, peer, it, kCount);
      std::memcpy(send.data(), mine.data(), kCount * sizeof(float));
      fillWith(recv.data(), DType::Float32, kCount, poison(DType::Float32));
      Stream& s = h.device.defaultStream();
      auto send_done = h.device.createEvent(), recv_done = h.device.createEvent();
      PostArgs send_op = pointToPoint(CommType::Send, send.data(), kCount, peer);
      PostArgs recv_op = pointToPoint(CommType::Recv, recv.data(), kCount, peer);
      // Rank 0 receives first, rank 1 sends first: with blocking calls
      // (or completions waited on in post order) this would deadlock.
      if (rank == 0) {
        h.backend->post({&recv_op, 1}, s, *recv_done);
        h.backend->post({&send_op, 1}, s, *send_done);
      } else {
        h.backend->post({&send_op, 1}, s, *send_done);
        h.backend->post({&recv_op, 1}, s, *recv_done);
      }
      h.backend->wait(*recv_done, s, WaitMode::Host, testTimeout());
      h.backend->wait(*send_done, s, WaitMode::Host, testTimeout());
      std::vector<float> want = sentData(peer, rank, it, kCount);
      EXPECT_EQ(std::memcmp(recv.data(), want.data(), kCount * sizeof(float)), 0)
          << "iteration " << it;
    }
  }
  test::world().barrier();
}

TEST(MpiBackend, ARingOfRecvsPostedBeforeTheSendsCompletes) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank(), world = test::world().world();
  const int next = (rank + 1) % world, prev = (rank - 1 + world) % world;
  constexpr std::size_t kCount = 100000;
  Buffer send(h.device, kCount * sizeof(float)), recv(h.device, kCount * sizeof(float));
  std::vector<float> mine = sentData(rank, next, 0, kCount);
  std::memcpy(send.data(), mine.data(), kCount * sizeof(float));
  Stream& s = h.device.defaultStream();
  auto recv_done = h.device.createEvent(), send_done = h.device.createEvent();
  PostArgs recv_op = pointToPoint(CommType::Recv, recv.data(), kCount, prev);
  PostArgs send_op = pointToPoint(CommType::Send, send.data(), kCount, next);
  h.backend->post({&recv_op, 1}, s, *recv_done);
  h.backend->post({&send_op, 1}, s, *send_done);
  h.backend->wait(*recv_done, s, WaitMode::Stream, testTimeout());
  h.backend->wait(*send_done, s, WaitMode::Stream, testTimeout());
  h.device.synchronize(s, testTimeout());
  std::vector<float> want = sentData(prev, rank, 0, kCount);
  EXPECT_EQ(std::memcmp(recv.data(), want.data(), kCount * sizeof(float)), 0);
}

TEST(MpiBackend, AReceivesWaitDoesNotWaitForUnrelatedSends) {
  // An all-to-all by hand: every rank posts its sends, then receives from
  // each peer with a host wait. From world 3, rank r's first recv (from
  // r - 1) is waited while its send to r - 1 is still pending (r - 1
  // receives from r only second), and 64 KiB is above MPI's eager limit:
  // with completions waited in post order, every rank would wait for a send
  // whose peer is blocked in turn.
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 16384;  // 64 KiB
  Stream& s = h.device.defaultStream();
  std::vector<std::unique_ptr<Buffer>> send, recv;
  std::vector<std::unique_ptr<Event>> sent;
  for (int j = 1; j < world; ++j) {
    const int peer = (rank + j) % world;
    send.push_back(std::make_unique<Buffer>(h.device, kCount * sizeof(float)));
    std::vector<float> mine = sentData(rank, peer, 0, kCount);
    std::memcpy(send.back()->data(), mine.data(), kCount * sizeof(float));
    PostArgs a = pointToPoint(CommType::Send, send.back()->data(), kCount, peer);
    sent.push_back(h.device.createEvent());
    h.backend->post({&a, 1}, s, *sent.back());
  }
  for (int j = 1; j < world; ++j) {
    const int peer = (rank - j + world) % world;
    recv.push_back(std::make_unique<Buffer>(h.device, kCount * sizeof(float)));
    fillWith(recv.back()->data(), DType::Float32, kCount, poison(DType::Float32));
    PostArgs a = pointToPoint(CommType::Recv, recv.back()->data(), kCount, peer);
    auto done = h.device.createEvent();
    h.backend->post({&a, 1}, s, *done);
    h.backend->wait(*done, s, WaitMode::Host, Duration(5000));
    std::vector<float> want = sentData(peer, rank, 0, kCount);
    EXPECT_EQ(std::memcmp(recv.back()->data(), want.data(), kCount * sizeof(float)), 0)
        << "rank " << rank << " from " << peer;
  }
  for (auto& d : sent) h.backend->wait(*d, s, WaitMode::Host, testTimeout());
  test::world().barrier();
}

TEST(MpiBackend, MessagesBetweenAPairArriveInPostOrder) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank();
  if (rank <= 1) {
    constexpr int kMessages = 4;
    constexpr std::size_t kCount = 1000;
    const int peer = 1 - rank;
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<std::unique_ptr<Event>> done;
    Stream& s = h.device.defaultStream();
    for (int m = 0; m < kMessages; ++m) {
      buffers.push_back(std::make_unique<Buffer>(h.device, kCount * sizeof(float)));
      done.push_back(h.device.createEvent());
      if (rank == 0) {
        std::vector<float> data = sentData(0, 1, m, kCount);
        std::memcpy(buffers[m]->data(), data.data(), kCount * sizeof(float));
        PostArgs op = pointToPoint(CommType::Send, buffers[m]->data(), kCount, peer);
        h.backend->post({&op, 1}, s, *done[m]);
      } else {
        PostArgs op = pointToPoint(CommType::Recv, buffers[m]->data(), kCount, peer);
        h.backend->post({&op, 1}, s, *done[m]);
      }
    }
    h.device.synchronize(s, testTimeout());
    for (int m = 0; m < kMessages; ++m) {
      h.device.synchronize(*done[m], testTimeout());
      if (rank == 1) {
        std::vector<float> want = sentData(0, 1, m, kCount);
        EXPECT_EQ(std::memcmp(buffers[m]->data(), want.data(), kCount * sizeof(float)), 0)
            << "message " << m;
      }
    }
  }
  test::world().barrier();
}

TEST(MpiBackend, APostFromAnIdleStreamStartsAfterAnEarlierPostStillQueued) {
  // Rank 0 posts send 1 from a stream held back by a gate, then send 2
  // from an idle stream, which could start at once on the posting thread:
  // it must not, or MPI would match it with rank 1's first recv.
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank();
  if (rank <= 1) {
    constexpr std::size_t kCount = 256;
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<std::unique_ptr<Event>> done;
    for (int m = 0; m < 2; ++m) {
      buffers.push_back(std::make_unique<Buffer>(h.device, kCount * sizeof(float)));
      done.push_back(h.device.createEvent());
    }
    Stream& idle = h.device.defaultStream();
    if (rank == 0) {
      auto held = h.device.createStream();
      test::Gate gate;
      h.device.launchHostFunc(*held, gate.task());
      for (int m = 0; m < 2; ++m) {
        std::vector<float> data = sentData(0, 1, m, kCount);
        std::memcpy(buffers[m]->data(), data.data(), kCount * sizeof(float));
        PostArgs op = pointToPoint(CommType::Send, buffers[m]->data(), kCount, 1);
        h.backend->post({&op, 1}, m == 0 ? *held : idle, *done[m]);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_FALSE(h.device.query(*done[1])) << "send 2 completed while send 1 was held back";
      gate.open();
      h.device.synchronize(*held, testTimeout());
    } else {
      for (int m = 0; m < 2; ++m) {
        fillWith(buffers[m]->data(), DType::Float32, kCount, poison(DType::Float32));
        PostArgs op = pointToPoint(CommType::Recv, buffers[m]->data(), kCount, 0);
        h.backend->post({&op, 1}, idle, *done[m]);
      }
    }
    for (int m = 0; m < 2; ++m) {
      h.device.synchronize(*done[m], testTimeout());
      if (rank == 1) {
        std::vector<float> want = sentData(0, 1, m, kCount);
        EXPECT_EQ(std::memcmp(buffers[m]->data(), want.data(), kCount * sizeof(float)), 0)
            << "message " << m << " (the sends started out of post order)";
      }
    }
  }
  test::world().barrier();
}

TEST(MpiBackend, AGroupedSendAndRecvExchangeWithEveryPeer) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 3000;
  std::vector<std::unique_ptr<Buffer>> sends, recvs;
  std::vector<PostArgs> ops;
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    sends.push_back(std::make_unique<Buffer>(h.device, kCount * sizeof(float)));
    recvs.push_back(std::make_unique<Buffer>(h.device, kCount * sizeof(float)));
    std::vector<float> data = sentData(rank, peer, 0, kCount);
    std::memcpy(sends.back()->data(), data.data(), kCount * sizeof(float));
    // Receives first in the group on every rank.
    ops.insert(ops.begin(), pointToPoint(CommType::Recv, recvs.back()->data(), kCount, peer));
    ops.push_back(pointToPoint(CommType::Send, sends.back()->data(), kCount, peer));
  }
  auto done = h.device.createEvent();
  h.backend->post(ops, h.device.defaultStream(), *done);
  h.device.synchronize(*done, testTimeout());
  std::size_t i = 0;
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank) continue;
    std::vector<float> want = sentData(peer, rank, 0, kCount);
    EXPECT_EQ(std::memcmp(recvs[i++]->data(), want.data(), kCount * sizeof(float)), 0)
        << "from rank " << peer;
  }
}

// ---------------------------------------------------------- asynchrony

TEST(MpiBackend, PostAndStreamWaitReturnBeforeThePeerHasPosted) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  Harness h;
  const int rank = test::world().rank();
  constexpr auto kPeerDelay = std::chrono::milliseconds(200);
  constexpr std::size_t kCount = 64;
  Buffer buf(h.device, kCount * sizeof(float));
  fillWith(buf.data(), DType::Float32, kCount, rank + 1);
  Stream& s = h.device.defaultStream();
  auto done = h.device.createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.input = buf.data();
  a.output = buf.data();
  a.count = kCount;
  test::world().barrier();
  const Clock::time_point start = Clock::now();
  if (rank != 0) std::this_thread::sleep_for(kPeerDelay);
  h.backend->post({&a, 1}, s, *done);
  h.backend->wait(*done, s, WaitMode::Stream, testTimeout());
  const Clock::duration host_time = Clock::now() - start;
  // Work after the stream wait runs only once the allreduce is complete.
  std::atomic<int64_t> ran_after_ns{-1};
  h.device.launchHostFunc(s, [&] {
    ran_after_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start)
                       .count();
  });
  if (rank == 0) {
    EXPECT_FALSE(h.device.query(*done)) << "the allreduce completed without its peers";
    EXPECT_LT(host_time, std::chrono::milliseconds(100))
        << "post() + stream wait blocked the host";
  }
  h.device.synchronize(s, testTimeout());
  if (rank == 0) {
    EXPECT_GE(std::chrono::nanoseconds(ran_after_ns.load()),
              kPeerDelay - std::chrono::milliseconds(20));
  }
  const int world = test::world().world();
  const double sum = world * (world + 1) / 2.0;
  for (std::size_t k = 0; k < kCount; ++k)
    ASSERT_EQ(loadAsDouble(buf.data(), DType::Float32, k), sum) << "element " << k;
}

TEST(MpiBackend, InputsAreReadOnlyAfterTheWorkBeforeThePostOnTheStream) {
  Harness h;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 32;
  Buffer in(h.device, kCount * sizeof(int32_t)), out(h.device, kCount * sizeof(int32_t));
  Stream& s = h.device.defaultStream();
  fillWith(in.data(), DType::Int32, kCount, -1000);
  // Enqueued, not yet run: a slow task, then the fill that makes the input.
  h.device.launchHostFunc(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  h.device.fill(s, in.data(), DType::Int32, kCount, rank, 0);
  auto done = h.device.createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.dtype = DType::Int32;
  a.input = in.data();
  a.output = out.data();
  a.count = kCount;
  h.backend->post({&a, 1}, s, *done);
  h.device.synchronize(*done, testTimeout());
  for (std::size_t k = 0; k < kCount; ++k)
    ASSERT_EQ(loadAsInt(out.data(), DType::Int32, k), world * (world - 1) / 2) << k;
}

// --------------------------------------------------------------- errors

TEST(MpiBackend, ACountBeyondMpisLimitIsRejectedWithThePath) {
  Harness h;
  PostArgs a;
  a.type = CommType::Allreduce;
  a.count = static_cast<std::size_t>(INT_MAX) + 1;
  a.path = "/body/4/body/1";
  auto done = h.device.createEvent();
  try {
    h.backend->post({&a, 1}, h.device.defaultStream(), *done);
    ADD_FAILURE() << "a count above INT_MAX was accepted";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/4/body/1 (allreduce)"));
    EXPECT_THAT(e.what(), HasSubstr("2147483648 elements"));
  }
}

TEST(MpiBackend, ARecvWithoutASendTimesOutWithThePathAndRank) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  const int rank = test::world().rank();
  // Kept alive to the end of the process: the receive stays posted.
  static int32_t received = -1;
  {
    Harness h(std::chrono::milliseconds(300));
    auto done = h.device.createEvent();
    if (rank == 0) {
      PostArgs a = pointToPoint(CommType::Recv, &received, 1, 1);
      a.dtype = DType::Int32;
      a.path = "/body/7";
      h.backend->post({&a, 1}, h.device.defaultStream(), *done);
      try {
        h.device.synchronize(*done, testTimeout());
        ADD_FAILURE() << "a recv without a send completed";
      } catch (const BackendError& e) {
        // The timeout and the grace that lets an evaluator's waits report first.
        EXPECT_THAT(e.what(), HasSubstr("mpi: /body/7 (recv) did not complete within 2300 ms "
                                        "on rank 0 (the timeout, 300 ms, and 2000 ms)"));
      }
    }
    test::world().barrier();
    // Now satisfy the receive so that nothing stays pending in MPI.
    if (rank == 1) {
      static int32_t sent = 5;
      PostArgs a = pointToPoint(CommType::Send, &sent, 1, 0);
      a.dtype = DType::Int32;
      h.backend->post({&a, 1}, h.device.defaultStream(), *done);
      h.device.synchronize(*done, testTimeout());
    }
    test::world().barrier();
  }
  test::world().barrier();
}

// A collective that a peer never joins stays with MPI for good (it cannot
// be cancelled): its requests are counted as abandoned, and the backend's
// teardown still frees the communicator it was posted on. Collectives that
// complete leave nothing behind.
TEST(MpiBackend, OnlyACollectiveThatNeverCompletesIsAbandoned) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  const int rank = test::world().rank();
  const std::size_t before = MpiBackend::abandonedRequests();
  {
    Harness h;
    Buffer x(h.device, sizeof(float)), y(h.device, sizeof(float));
    Case c{CommType::Allreduce, DType::Float32, ReduceOp::Sum, /*in_place=*/false, /*team=*/0};
    for (int it = 0; it < 3; ++it) {
      PostArgs a = test::collectivePost(c, x.data(), y.data(), 1, 0);
      auto done = h.device.createEvent();
      h.backend->post({&a, 1}, h.device.defaultStream(), *done);
      h.backend->wait(*done, h.device.defaultStream(), WaitMode::Host, testTimeout());
    }
  }
  EXPECT_EQ(MpiBackend::abandonedRequests(), before) << "completed collectives were abandoned";
  // Kept alive to the end of the process: MPI may still write into them.
  static float in = 1, out = 0;
  {
    Harness h(std::chrono::milliseconds(200));
    if (rank == 0) {
      PostArgs a = test::collectivePost(
          Case{CommType::Allreduce, DType::Float32, ReduceOp::Sum, false, 0}, &in, &out, 1, 0);
      a.path = "/body/3";
      auto done = h.device.createEvent();
      h.backend->post({&a, 1}, h.device.defaultStream(), *done);
      EXPECT_THROW(h.device.synchronize(*done, testTimeout()), BackendError);
    }
  }  // teardown frees the communicator while rank 0's allreduce is pending
  EXPECT_EQ(MpiBackend::abandonedRequests(), before + (rank == 0 ? 1 : 0));
  test::world().barrier();
}

// ------------------------------------------------ registry and defaults

TEST(BackendRegistry, MpiIsRegisteredForTheHostDeviceOnly) {
  const BackendInfo* mpi = findBackend("mpi");
  ASSERT_NE(mpi, nullptr);
  EXPECT_EQ(mpi->caps.auto_priority, 10);
  EXPECT_FALSE(mpi->caps.maps_peer_memory);
  SupportQuery q{"host", CommType::Alltoall, DType::BFloat16, ReduceOp::Avg};
  EXPECT_TRUE(supports(mpi->caps, q).ok);
  q.device = "cuda";
  Support s = supports(mpi->caps, q);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.why, "backend 'mpi' runs on device 'host', not on 'cuda'");
  EXPECT_EQ(findBackend("no-such-backend"), nullptr);
}

// Two test backends, for a device no real backend claims.
BackendCaps testCaps(std::string name, int priority, EnumSet<CommType> types) {
  BackendCaps c;
  c.name = std::move(name);
  c.devices = {"test-device"};
  c.types = types;
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = {ReduceOp::Sum};
  c.auto_priority = priority;
  return c;
}

TEST(BackendRegistry, AutoPicksTheHighestPrioritySupportingBackend) {
  const std::vector<BackendCaps> catalog = {
      testCaps("test-low", 1, EnumSet<CommType>::all(kCommTypeNames)),
      testCaps("test-high", 1000, {CommType::Send}), IpcBackend::caps()};
  EXPECT_EQ(selectBackend(catalog, "auto", SupportQuery{"test-device", CommType::Send}, "/body/0")
                .name,
            "test-high");
  EXPECT_EQ(
      selectBackend(catalog, "auto", SupportQuery{"test-device", CommType::Allreduce}, "/body/0")
          .name,
      "test-low");
  SupportQuery max{"test-device", CommType::Allreduce};
  max.reduce = ReduceOp::Max;
  try {
    selectBackend(catalog, "auto", max, "/body/0");
    ADD_FAILURE() << "a backend without max was picked for a max allreduce";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("backend 'test-low' reduces with sum, not max"));
    EXPECT_THAT(e.what(), HasSubstr("backend 'test-high' runs send, not allreduce"));
  }
}

TEST(BackendRegistry, RegisteringANameTwiceIsAUsageError) {
  static bool registered = false;
  BackendInfo info{testCaps("test-twice", 1, {CommType::Send}),
                   []() -> std::unique_ptr<Backend> { return nullptr; }};
  if (!registered) {
    registerBackend(info);
    registered = true;
  }
  EXPECT_THROW(registerBackend(info), UsageError) << "a second 'test-twice'";
  info.caps.name = "auto";
  EXPECT_THROW(registerBackend(info), UsageError) << "a backend named auto";
  EXPECT_NE(findBackend("test-twice"), nullptr);
}

TEST(BackendRegistry, ANamedBackendThatCannotRunTheQuerySaysWhy) {
  SupportQuery q{"cuda", CommType::Allreduce, DType::Float16};
  try {
    selectBackend(backendCatalog(), "mpi", q, "/body/3");
    ADD_FAILURE() << "mpi accepted a cuda allreduce";
  } catch (const ProgramError& e) {
    EXPECT_EQ(std::string(e.what()),
              "/body/3: backend 'mpi' cannot run allreduce of float16 on device 'cuda': backend "
              "'mpi' runs on device 'host', not on 'cuda'");
  }
}

TEST(BackendRegistry, AnUnknownNameListsTheRegisteredBackends) {
  try {
    selectBackend(backendCatalog(), "mpii", SupportQuery{"host"}, "/body/1/backend");
    ADD_FAILURE() << "an unknown backend was accepted";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/1/backend: unknown backend 'mpii'"));
    EXPECT_THAT(e.what(), HasSubstr("\"mpi\""));
  }
}

TEST(BackendRegistry, AutoWithNoSupportingBackendListsEveryReason) {
  SupportQuery q{"tpu", CommType::Broadcast, DType::UInt8};
  try {
    selectBackend(backendCatalog(), "auto", q, "/body/9");
    ADD_FAILURE() << "some backend claimed a tpu device";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/9: no backend can run broadcast of uint8 on device "
                                    "'tpu'"));
    EXPECT_THAT(e.what(), HasSubstr("backend 'mpi' runs on device 'host', not on 'tpu'"));
  }
}

TEST(BackendDefaults, ShareMemHandlesOfABackendThatMapsNoPeerMemoryRejectsItems) {
  Harness h;
  h.backend->shareMemHandles({});  // nothing to exchange: fine
  ShareItem item;
  item.comm = 3;
  std::vector<ShareItem> items{item};
  try {
    h.backend->shareMemHandles(items);
    ADD_FAILURE() << "the mpi backend accepted memory handles";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("backend 'mpi' does not exchange memory handles"));
  }
}

}  // namespace
}  // namespace hir
