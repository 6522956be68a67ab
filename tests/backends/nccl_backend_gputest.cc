// The NCCL backend on the cuda device, one GPU per rank, under mpirun at 1, 2
// or 4 ranks: every communication type x dtype x reduce op against the host
// reference of support/collective_reference.h (data seeded by (rank,
// iteration)), outputs poisoned first, in-place forms, teams that are a
// strict subset of the world or the world reordered; send/recv; grouped
// posts; and asynchrony: post() returns while the work it depends on still
// runs. Every GPU test skips when there is no usable GPU per rank (the
// decision is collective: support/gpu_test.h).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hostir/backend.h>
#include "common/elements.h"
#include "common/check.h"
#include "device/cuda/test_kernels.h"
#include <hostir/device.h>
#include "support/collective_reference.h"
#include "support/gpu_test.h"

namespace hir {
namespace {

using ::testing::HasSubstr;
using test::AvgRule;
using test::Case;
using test::store;
using test::testTeams;
using test::testTimeout;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- harness

// A cuda device and an NCCL backend set up on it (collective).
struct Harness {
  Harness() : device(test::makeCudaDevice()) {
    const BackendInfo* info = findBackend("nccl");
    HIR_INTERNAL_ASSERT(info != nullptr, "the nccl backend is not registered");
    backend = info->create();
    BackendContext ctx;
    ctx.device = device.get();
    ctx.bootstrap = &test::world();
    ctx.teams = testTeams(test::world().world());
    ctx.timeout = testTimeout();
    teams = ctx.teams;
    backend->setup(ctx);
  }
  ~Harness() { backend.reset(); }  // before the device

  std::unique_ptr<Device> device;
  std::unique_ptr<Backend> backend;
  std::vector<std::vector<int>> teams;
};

// One harness shared by the tests of this file: communicator setup costs
// hundreds of milliseconds. Created by the first test that needs it (all
// ranks run the tests in the same order), destroyed by the environment
// below before main() finalizes MPI.
Harness* g_harness = nullptr;

Harness& harness() {
  if (g_harness == nullptr) g_harness = new Harness();
  return *g_harness;
}

class HarnessCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    delete g_harness;
    g_harness = nullptr;
  }
};
const auto* const g_cleanup = ::testing::AddGlobalTestEnvironment(new HarnessCleanup);

// Device memory that frees itself.
class Buffer {
 public:
  Buffer(Device& d, std::size_t bytes) : device_(d), bytes_(bytes), p_(d.allocate(bytes)) {}
  ~Buffer() { device_.deallocate(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(p_); }
  std::size_t bytes() const { return bytes_; }

 private:
  Device& device_;
  std::size_t bytes_;
  void* p_;
};

// Blocking copies between host vectors and device memory. After an upload
// the whole device is synchronized: a copy from pageable memory may return
// before its DMA lands, and the backend's streams do not order with it.
void upload(void* dst, const std::vector<std::byte>& src) {
  ASSERT_EQ(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

std::vector<std::byte> download(const void* src, std::size_t bytes) {
  std::vector<std::byte> out(bytes);
  cudaError_t err = cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost);
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  return out;
}

// Byte offset of the first difference, or -1 (sizes differ: the shorter size).
int64_t firstDifference(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

// NCCL averages floating dtypes by scaling with 1/n in the dtype.
constexpr AvgRule kAvg = AvgRule::ScaleByInverse;

// Runs `iterations` posts of one case, reusing the buffers (the root moves
// with the iteration), and checks every output element. Non-members skip,
// as the evaluator does.
void runCase(Harness& h, const Case& c, std::size_t count, int iterations) {
  const std::vector<int>& team = h.teams[c.team];
  const int rank = test::world().rank();
  const std::optional<test::Participation> part = test::participation(c, team, rank, count);
  if (!part) return;
  const auto [me, in_n, out_n, layout] = *part;
  const std::size_t el = dtypeSize(c.dtype);
  Device& device = *h.device;

  // In place: one buffer holding both; else two. Offsets in bytes.
  Buffer main(device, std::max(in_n, out_n) * el);
  std::optional<Buffer> other;
  std::size_t in_offset = 0, out_offset = 0;
  std::byte* in_base = main.data();
  std::byte* out_base = main.data();
  if (c.in_place) {
    if (layout.input_inside_output)
      in_offset = layout.offset * el;
    else
      out_offset = layout.offset * el;
  } else {
    other.emplace(device, out_n * el);
    out_base = other->data();
  }
  Stream& stream = device.defaultStream();
  std::unique_ptr<Event> done = device.createEvent();

  for (int it = 0; it < iterations; ++it) {
    const int root = it % static_cast<int>(team.size());
    // Host images of the device buffers: poison the output, then write the
    // input (which may lie inside the output).
    std::vector<std::byte> main_host(main.bytes()), other_host(other ? other->bytes() : 0);
    std::vector<std::byte>& out_host = c.in_place ? main_host : other_host;
    for (std::size_t k = 0; k < out_n; ++k)
      store(out_host.data() + out_offset, c.dtype, k, test::poison(c.dtype));
    for (std::size_t i = 0; i < in_n; ++i)
      store(main_host.data() + in_offset, c.dtype, i, test::inputValue(c.reduce, rank, it, i));
    upload(main.data(), main_host);
    if (other) upload(other->data(), other_host);
    std::vector<double> before(out_n);
    for (std::size_t k = 0; k < out_n; ++k)
      before[k] = loadAsDouble(out_host.data() + out_offset, c.dtype, k);

    PostArgs a = test::collectivePost(c, in_base + in_offset, out_base + out_offset, count, root);
    h.backend->post({&a, 1}, stream, *done);
    h.backend->wait(*done, stream, WaitMode::Host, testTimeout());

    std::vector<std::byte> got_bytes = download(out_base + out_offset, out_n * el);
    const int wrong =
        test::countWrongElements(c, kAvg, team, me, root, it, count, got_bytes.data(), before);
    EXPECT_EQ(wrong, 0) << test::caseName(c) << ": iteration " << it << " had " << wrong
                        << " wrong elements";
  }
}

// ------------------------------------------------------- the full matrix

class NcclCollective : public ::testing::TestWithParam<Case> {};

TEST_P(NcclCollective, MatchesTheHostReference) {
  HIR_REQUIRE_GPUS(1);
  runCase(harness(), GetParam(), /*count=*/1031, /*iterations=*/3);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, NcclCollective, ::testing::ValuesIn(test::allCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return test::caseName(info.param);
                         });

// Large messages take NCCL's other protocols (LL128, Simple) and many
// channels; in place they take the backend's scratch path (alltoall).
TEST(NcclBackend, LargeCollectivesMatchTheHostReference) {
  HIR_REQUIRE_GPUS(1);
  for (CommType type : {CommType::Allreduce, CommType::Reduce, CommType::ReduceScatter,
                        CommType::Allgather, CommType::Broadcast, CommType::Alltoall,
                        CommType::Gather, CommType::Scatter})
    for (bool in_place : {false, true})
      runCase(harness(), {type, DType::BFloat16, ReduceOp::Sum, in_place, 0}, 3 << 20, 2);
  runCase(harness(), {CommType::Allreduce, DType::Float32, ReduceOp::Max, false, 2}, 4 << 20, 2);
}

TEST(NcclBackend, ZeroElementPostsComplete) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  for (CommType type : {CommType::Allreduce, CommType::Allgather, CommType::Alltoall,
                        CommType::Gather})
    runCase(h, {type, DType::Int32, ReduceOp::Sum, false, 0}, 0, 1);
  Buffer buf(*h.device, 64);
  auto done = h.device->createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.input = buf.data();
  a.output = buf.data();
  a.count = 0;
  h.backend->post({&a, 1}, h.device->defaultStream(), *done);
  h.device->synchronize(*done, testTimeout());
  EXPECT_TRUE(h.device->query(*done));
}

// -------------------------------------------------------------- send/recv

std::vector<std::byte> sentData(DType t, int from, int to, int message, std::size_t n) {
  std::vector<std::byte> v(n * dtypeSize(t));
  for (std::size_t k = 0; k < n; ++k)
    store(v.data(), t, k, static_cast<double>((from * 7 + to * 3 + message * 5 + k) % 100));
  return v;
}

// Each rank sends to the next and receives from the previous in one post
// (an NCCL group), in every dtype; one rank exchanges with itself.
TEST(NcclBackend, ARingExchangeInOneGroupDeliversEveryDtype) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  const int rank = test::world().rank(), world = test::world().world();
  const int next = (rank + 1) % world, prev = (rank - 1 + world) % world;
  constexpr std::size_t kCount = 100003;
  for (const auto& [t, name] : kDTypeNames) {
    Buffer send(*h.device, kCount * dtypeSize(t)), recv(*h.device, kCount * dtypeSize(t));
    for (int it = 0; it < 2; ++it) {
      upload(send.data(), sentData(t, rank, next, it, kCount));
      upload(recv.data(), std::vector<std::byte>(recv.bytes(), std::byte{0xff}));
      PostArgs ops[] = {test::pointToPoint(CommType::Send, send.data(), kCount, next, t),
                        test::pointToPoint(CommType::Recv, recv.data(), kCount, prev, t)};
      auto done = h.device->createEvent();
      h.backend->post(ops, h.device->defaultStream(), *done);
      h.device->synchronize(*done, testTimeout());
      EXPECT_EQ(firstDifference(download(recv.data(), recv.bytes()),
                                sentData(t, prev, rank, it, kCount)),
                -1)
          << name << " iteration " << it << ": byte offset of the first difference";
    }
  }
}

// Separate posts in matching orders (rank 0 sends then receives, rank 1
// receives then sends): several messages in flight between one pair.
TEST(NcclBackend, SeparateSendAndRecvPostsInMatchingOrderComplete) {
  HIR_REQUIRE_GPUS(2);
  Harness& h = harness();
  const int rank = test::world().rank();
  if (rank <= 1) {
    const int peer = 1 - rank;
    constexpr std::size_t kCount = 1 << 20;
    constexpr DType t = DType::Float32;
    Buffer send(*h.device, kCount * 4), recv(*h.device, kCount * 4);
    upload(send.data(), sentData(t, rank, peer, 0, kCount));
    Stream& s = h.device->defaultStream();
    auto send_done = h.device->createEvent(), recv_done = h.device->createEvent();
    PostArgs send_op = test::pointToPoint(CommType::Send, send.data(), kCount, peer, t);
    PostArgs recv_op = test::pointToPoint(CommType::Recv, recv.data(), kCount, peer, t);
    if (rank == 0) {
      h.backend->post({&send_op, 1}, s, *send_done);
      h.backend->post({&recv_op, 1}, s, *recv_done);
    } else {
      h.backend->post({&recv_op, 1}, s, *recv_done);
      h.backend->post({&send_op, 1}, s, *send_done);
    }
    h.backend->wait(*send_done, s, WaitMode::Stream, testTimeout());
    h.backend->wait(*recv_done, s, WaitMode::Stream, testTimeout());
    h.device->synchronize(s, testTimeout());
    EXPECT_EQ(firstDifference(download(recv.data(), recv.bytes()),
                              sentData(t, peer, rank, 0, kCount)),
              -1);
  }
  test::world().barrier();
}

// A post of several collectives is one group; `done` covers all of them.
TEST(NcclBackend, AGroupedPostCompletesEveryOp) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 4096;
  Buffer a(*h.device, kCount * 4), b(*h.device, kCount * 4 * world), c(*h.device, kCount * 8);
  Stream& s = h.device->defaultStream();
  h.device->fill(s, a.data(), DType::Int32, kCount, rank, 0);
  h.device->fill(s, c.data(), DType::Int64, kCount, rank + 1, 1);
  PostArgs ops[2];
  ops[0].type = CommType::Allgather;
  ops[0].dtype = DType::Int32;
  ops[0].input = a.data();
  ops[0].output = b.data();
  ops[0].count = kCount;
  ops[1].type = CommType::Allreduce;
  ops[1].dtype = DType::Int64;
  ops[1].reduce = ReduceOp::Max;
  ops[1].input = c.data();
  ops[1].output = c.data();
  ops[1].count = kCount;
  auto done = h.device->createEvent();
  h.backend->post(ops, s, *done);
  h.backend->wait(*done, s, WaitMode::Stream, testTimeout());
  h.device->synchronize(s, testTimeout());
  std::vector<std::byte> gathered = download(b.data(), b.bytes());
  std::vector<std::byte> maxed = download(c.data(), c.bytes());
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(loadAsInt(gathered.data(), DType::Int32, r * kCount + 17), r) << "chunk " << r;
  for (std::size_t k = 0; k < kCount; k += 1000)
    EXPECT_EQ(loadAsInt(maxed.data(), DType::Int64, k), static_cast<int64_t>(world + k)) << k;
}

// ------------------------------------------------------------- asynchrony

// The test: the host returns from post() while a long GPU kernel
// that produces the input still runs; `done` is not complete right after the
// post; the result is right once it is.
TEST(NcclBackend, PostReturnsWhileTheWorkItDependsOnStillRuns) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  Device& d = *h.device;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr double kSpinMs = 200;
  constexpr std::size_t kCount = 1 << 20;
  Buffer buf(d, kCount * 4), out(d, kCount * 4);
  auto current = d.createStream();
  d.fill(*current, buf.data(), DType::Float32, kCount, -1000, 0);  // not the input
  d.fill(*current, out.data(), DType::Float32, kCount, -1000, 0);
  d.synchronize(*current, testTimeout());
  test::world().barrier();

  // Enqueued, not run yet: the spin, then the fill that makes the input.
  cuda::testSpin(*current, kSpinMs);
  d.fill(*current, buf.data(), DType::Float32, kCount, rank, 1);
  auto done = d.createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.input = buf.data();
  a.output = out.data();
  a.count = kCount;
  const auto t0 = Clock::now();
  h.backend->post({&a, 1}, *current, *done);
  h.backend->wait(*done, *current, WaitMode::Stream, testTimeout());
  const double host_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const bool complete_right_after = d.query(*done);

  EXPECT_LT(host_ms, kSpinMs / 4) << "post() + stream wait blocked the host";
  EXPECT_FALSE(complete_right_after) << "the allreduce completed before its input was made";
  d.synchronize(*current, testTimeout());
  EXPECT_TRUE(d.query(*done));
  std::vector<std::byte> got = download(out.data(), out.bytes());
  const double base = world * (world - 1) / 2.0;
  for (std::size_t k = 0; k < kCount; k += 4099)
    ASSERT_EQ(loadAsDouble(got.data(), DType::Float32, k), base + world * static_cast<double>(k))
        << "element " << k;
}

// allocateSymmetric's memory is zero when the call returns, and keeps
// what is written into it next. Its zeroing once went onto the legacy
// default stream (cudaMemset returns before it runs there), with which the
// device's non-blocking streams do not synchronize: a program's first fill
// could run first and be zeroed after it (a GPU test once saw its first
// run's input all zeros). A spin holds the legacy stream meanwhile, so that
// such a zeroing would land after the fill below.
TEST(NcclBackend, SymmetricMemoryIsZeroedBeforeItsAllocationReturns) {
  HIR_REQUIRE_GPUS(1);
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version < 22700)
    GTEST_SKIP() << "NCCL " << version << " has no symmetric windows (2.27)";
  Harness& h = harness();
  Device& d = *h.device;
  constexpr std::size_t kCount = 1 << 16;
  auto legacy = d.wrapStream(cudaStreamLegacy);
  cuda::testSpin(*legacy, 300);
  const std::vector<int> world_team{0};
  void* p = h.backend->allocateSymmetric(kCount * 4, world_team);
  ASSERT_NE(p, nullptr) << "NCCL " << version << " declined a window";
  auto s = d.createStream();
  d.fill(*s, p, DType::Int32, kCount, 7, 1);
  d.synchronize(*s, testTimeout());
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);  // the spin, and what followed it
  std::vector<std::byte> got = download(p, kCount * 4);
  for (std::size_t k = 0; k < kCount; k += 997)
    ASSERT_EQ(loadAsDouble(got.data(), DType::Int32, k), 7.0 + static_cast<double>(k))
        << "element " << k << ": the zeroing landed after the fill";
}

// Work enqueued on the current stream after a stream-mode wait sees the
// result (it waits for `done` on the GPU, not on the host).
TEST(NcclBackend, WorkAfterAStreamWaitSeesTheResult) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  Device& d = *h.device;
  const int world = test::world().world();
  constexpr std::size_t kCount = 1 << 22;
  Buffer buf(d, kCount * 4), copy(d, kCount * 4);
  auto current = d.createStream();
  d.fill(*current, buf.data(), DType::Int32, kCount, 1, 0);
  cuda::testSpin(*current, 50);
  auto done = d.createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.dtype = DType::Int32;
  a.input = buf.data();
  a.output = buf.data();
  a.count = kCount;
  h.backend->post({&a, 1}, *current, *done);
  h.backend->wait(*done, *current, WaitMode::Stream, testTimeout());
  d.copy(*current, copy.data(), buf.data(), kCount * 4);
  auto records = d.allocateCheckRecords(1);
  d.check(*current, copy.data(), DType::Int32, kCount, world, 0, 0, records, 0);
  d.synchronize(*current, testTimeout());
  EXPECT_EQ(records->mismatches, 0u);
  EXPECT_EQ(records->checked, kCount);
  d.freeCheckRecords(records);
}

// Back-to-back posts on one of hostir's streams skip the join of the caller
// stream when only their own stream waits reached it; work enqueued in
// between (here a slow kernel and the fill that makes the second input) must
// still be waited for.
TEST(NcclBackend, WorkEnqueuedBetweenPostsIsWaitedFor) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  Device& d = *h.device;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 1 << 20;
  Buffer x(d, kCount * 4), y(d, kCount * 4);
  auto current = d.createStream();
  auto done = d.createEvent();
  auto records = d.allocateCheckRecords(2);
  PostArgs a;
  a.type = CommType::Allreduce;
  a.dtype = DType::Int32;
  a.count = kCount;
  for (int round = 0; round < 3; ++round) {
    d.fill(*current, x.data(), DType::Int32, kCount, rank, 0);
    a.input = a.output = x.data();
    h.backend->post({&a, 1}, *current, *done);
    h.backend->wait(*done, *current, WaitMode::Stream, testTimeout());
    h.backend->post({&a, 1}, *current, *done);  // nothing new on `current`: may skip
    h.backend->wait(*done, *current, WaitMode::Stream, testTimeout());
    cuda::testSpin(*current, 50);
    d.fill(*current, y.data(), DType::Int32, kCount, rank + 1, 0);
    a.input = a.output = y.data();
    h.backend->post({&a, 1}, *current, *done);  // must wait for the fill
    h.backend->wait(*done, *current, WaitMode::Stream, testTimeout());
  }
  // x: sum of ranks, reduced twice more per round; y: sum of rank + 1.
  d.check(*current, y.data(), DType::Int32, kCount, world * (world + 1) / 2, 0, 0, records, 0);
  d.synchronize(*current, testTimeout());
  EXPECT_EQ(records[0].mismatches, 0u) << "an allreduce read its input before the fill";
  EXPECT_EQ(records[0].checked, kCount);
  d.freeCheckRecords(records);
}

// A caller's own stream (wrapped) carries work hostir never sees: every post
// joins it. Work goes through a second wrapper of the same stream.
TEST(NcclBackend, PostsOnACallerStreamAlwaysWaitForItsWork) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  Device& d = *h.device;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 1 << 20;
  cudaStream_t native = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&native, cudaStreamNonBlocking), cudaSuccess);
  {
    auto for_posts = d.wrapStream(native);
    auto for_work = d.wrapStream(native);
    Buffer y(d, kCount * 4);
    auto done = d.createEvent();
    auto records = d.allocateCheckRecords(1);
    PostArgs a;
    a.type = CommType::Allreduce;
    a.dtype = DType::Int32;
    a.count = kCount;
    a.input = a.output = y.data();
    d.fill(*for_work, y.data(), DType::Int32, kCount, 0, 0);
    h.backend->post({&a, 1}, *for_posts, *done);
    h.backend->wait(*done, *for_posts, WaitMode::Stream, testTimeout());
    cuda::testSpin(*for_work, 50);
    d.fill(*for_work, y.data(), DType::Int32, kCount, rank + 1, 0);
    h.backend->post({&a, 1}, *for_posts, *done);
    h.backend->wait(*done, *for_posts, WaitMode::Stream, testTimeout());
    d.check(*for_posts, y.data(), DType::Int32, kCount, world * (world + 1) / 2, 0, 0, records,
            0);
    d.synchronize(*for_posts, testTimeout());
    EXPECT_EQ(records[0].mismatches, 0u) << "the allreduce read its input before the fill";
    d.freeCheckRecords(records);
  }
  EXPECT_EQ(cudaStreamDestroy(native), cudaSuccess);
}

// postJoined runs the allreduce on the poster's stream; posts from other
// streams, joined or not, must still reach the GPU in issue order, or ranks
// run NCCL operations in different orders. Streams a and b allreduce
// buffers of their own, with nothing ordering a and b: a joined post on a
// (delayed on rank 0 only), a detached and a joined one on b, a joined one on
// a. Without the backend's ordering rank 0 would run b's first. The first
// switch (a to b) orders after a's tail at that time, the later ones after
// the marks the backend records once it saw two streams.
TEST(NcclBackend, JoinedPostsOnSeveralStreamsKeepTheOrderOfOperations) {
  HIR_REQUIRE_GPUS(1);
  Harness& h = harness();
  Device& d = *h.device;
  const int rank = test::world().rank(), world = test::world().world();
  constexpr std::size_t kCount = 1 << 18;
  auto a = d.createStream(), b = d.createStream();
  Buffer ya(d, kCount * 8), yb(d, kCount * 8);
  auto done_a = d.createEvent(), done_b = d.createEvent();
  auto records = d.allocateCheckRecords(2);
  auto allreduce = [&](Buffer& y) {
    PostArgs op;
    op.type = CommType::Allreduce;
    op.dtype = DType::Int64;
    op.count = kCount;
    op.input = op.output = y.data();
    return op;
  };
  const PostArgs on_a = allreduce(ya), on_b = allreduce(yb);
  d.fill(*a, ya.data(), DType::Int64, kCount, rank + 1, 0);
  d.fill(*b, yb.data(), DType::Int64, kCount, 10 * (rank + 1), 0);
  if (rank == 0) cuda::testSpin(*a, 100);
  EXPECT_TRUE(h.backend->postJoined({&on_a, 1}, *a, *done_a));
  h.backend->post({&on_b, 1}, *b, *done_b);
  h.backend->wait(*done_b, *b, WaitMode::Stream, testTimeout());
  EXPECT_TRUE(h.backend->postJoined({&on_b, 1}, *b, *done_b));
  EXPECT_TRUE(h.backend->postJoined({&on_a, 1}, *a, *done_a));
  const int64_t sum = world * (world + 1) / 2;
  d.check(*a, ya.data(), DType::Int64, kCount, sum * world, 0, 0, &records[0], 0);
  d.check(*b, yb.data(), DType::Int64, kCount, 10 * sum * world, 0, 0, &records[1], 0);
  // Leave the backend's latest post detached: its teardown may wait on the
  // stream of its latest joined post, and streams a and b go away with this
  // test.
  h.backend->post({&on_a, 1}, *a, *done_a);
  h.backend->wait(*done_a, *a, WaitMode::Host, testTimeout());
  d.synchronize(*b, testTimeout());
  EXPECT_EQ(records[0].mismatches, 0u) << "stream a";
  EXPECT_EQ(records[1].mismatches, 0u) << "stream b";
  d.freeCheckRecords(records);
}

// ---------------------------------------------------------------- errors

TEST(NcclBackend, APostInATeamWithoutThisRankIsABug) {
  HIR_REQUIRE_GPUS(3);
  Harness& h = harness();
  if (test::world().rank() != 1) return;  // team 1 is {world-1, 0}
  Buffer buf(*h.device, 64);
  auto done = h.device->createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.input = buf.data();
  a.output = buf.data();
  a.count = 4;
  a.team = 1;
  a.path = "/body/3";
  try {
    h.backend->post({&a, 1}, h.device->defaultStream(), *done);
    ADD_FAILURE() << "a post outside the team was accepted";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/3"));
    EXPECT_THAT(e.what(), HasSubstr("not a member"));
  }
}

TEST(NcclBackend, PostsAfterAbortFail) {
  HIR_REQUIRE_GPUS(1);
  // Its own backend (collective setup), on the shared device.
  Harness& shared = harness();
  const BackendInfo* info = findBackend("nccl");
  ASSERT_NE(info, nullptr);
  std::unique_ptr<Backend> backend = info->create();
  BackendContext ctx;
  ctx.device = shared.device.get();
  ctx.bootstrap = &test::world();
  ctx.teams = testTeams(test::world().world());
  ctx.timeout = testTimeout();
  backend->setup(ctx);
  backend->abort();
  backend->abort();  // twice is harmless
  Buffer buf(*shared.device, 64);
  auto done = shared.device->createEvent();
  PostArgs a;
  a.type = CommType::Allreduce;
  a.input = buf.data();
  a.output = buf.data();
  a.count = 4;
  a.path = "/body/5";
  try {
    backend->post({&a, 1}, shared.device->defaultStream(), *done);
    ADD_FAILURE() << "a post after abort was accepted";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("aborted"));
    EXPECT_THAT(e.what(), HasSubstr("/body/5"));
  }
  backend.reset();
  test::world().barrier();
}

TEST(NcclBackend, SetupOnTheHostDeviceIsRefused) {
  const BackendInfo* info = findBackend("nccl");
  ASSERT_NE(info, nullptr);
  std::unique_ptr<Device> host = createDevice("host", 0);
  std::unique_ptr<Backend> backend = info->create();
  BackendContext ctx;
  ctx.device = host.get();
  ctx.bootstrap = &test::world();
  ctx.teams = testTeams(test::world().world());
  try {
    backend->setup(ctx);
    ADD_FAILURE() << "nccl was set up on the host device";
  } catch (const BackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuda"));
    EXPECT_THAT(e.what(), HasSubstr("'host'"));
  }
}

// ---------------------------------------------------------------- registry

TEST(NcclBackend, IsRegisteredForTheCudaDeviceOnly) {
  const BackendInfo* nccl = findBackend("nccl");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->caps.auto_priority, 10);
  for (const auto& [type, tname] : kCommTypeNames)
    for (const auto& [dtype, dname] : kDTypeNames)
      for (const auto& [op, oname] : kReduceOpNames) {
        SupportQuery q{"cuda", type, dtype, op};
        q.peer_on_other_node = true;
        EXPECT_TRUE(supports(nccl->caps, q).ok) << tname << " " << dname << " " << oname;
      }
  Support host = supports(nccl->caps, SupportQuery{"host", CommType::Allreduce});
  EXPECT_FALSE(host.ok);
  EXPECT_THAT(host.why, HasSubstr("cuda"));
  SupportQuery get{"cuda", CommType::Send};
  get.protocol = Protocol::Get;
  EXPECT_THAT(supports(nccl->caps, get).why, HasSubstr("takes no protocol"));
  EXPECT_EQ(
      selectBackend(backendCatalog(), "auto", SupportQuery{"cuda", CommType::Alltoall}, "/body/0")
          .name,
      "nccl");
}

}  // namespace
}  // namespace hir
