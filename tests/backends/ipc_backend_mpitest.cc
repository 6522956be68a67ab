// The ipc backend on the host device, at any world size (a world of one
// sends to itself; the tests up to the caller-buffer one run on the cuda
// device too, under HIR_TEST_DEVICE=cuda, as gpu-check does): data seeded by (rank, iteration)
// through the evaluator under both protocols and every posting order, slices of one allocation and
// buffers shared by several communications, the ring allgather against the
// MPI allgather, the exchange cache (counted), implicit exchanges, errors
// (peer out of range, caller buffers, posts without an exchange), memory over
// 1000 runs and teardown. IpcFakeNodes runs under HIR_FAKE_NODES=2 (ctest
// mpi.np4.fake_nodes): ipc to another node is refused, auto falls back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <hostir/backend.h>
#include "backends/ipc/ipc_backend.h"
#include "backends/ipc/collectives.h"
#include "common/settings.h"
#include "common/check.h"
#include "common/log.h"
#include "device/gpus.h"
#include "device/host_device.h"
#include "device/messages.h"
#include <hostir/json.h>
#include <hostir/kernel.h>
#include "lower/lower.h"
#include "plan/plan.h"
#include <hostir/evaluator.h>
#include <hostir/session.h>
#include "support/gate.h"
#include "support/mpi_test.h"
#include "support/test_util.h"

namespace hir {
namespace {

using ::testing::HasSubstr;
using test::testDevice;

Duration testTimeout() {
  const char* s = std::getenv("HIR_TEST_TIMEOUT_S");
  return std::chrono::seconds(s != nullptr ? std::atoi(s) : 60);
}

EvaluatorOptions options() {
  EvaluatorOptions o;
  o.timeout = testTimeout();
  return o;
}

std::string program(const std::string& name, const std::string& params, const std::string& body,
                    const std::string& outputs = "") {
  return fmt::format(R"({{"format": "hostir/1", "name": "{}", "params": {{{}}},
    "outputs": [{}], "body": [{}]}})",
                     name, params, outputs, body);
}

std::string protocolName(Protocol p) { return std::string(toString(p)); }

// Runs `text` `runs` times in one evaluator on `device` (a registered
// name); every check must pass.
RunReport runProgram(const std::string& text, int runs, int64_t* exchanges = nullptr,
                     const std::string& device = testDevice()) {
  Session session(test::world(), SessionOptions{device});
  Evaluator ev(session, parseProgram(text), options());
  for (int r = 0; r < runs; ++r) ev.run();
  ev.synchronize();
  if (exchanges) *exchanges = ev.exchanges();
  return ev.report();
}

// ------------------------------------------------- both protocols, any order

// Posting orders of the ring: 0 every rank sends first, 1 every rank
// receives first, 2 even ranks send first and odd ranks receive first.
using OrderParam = std::tuple<Protocol, int>;

class IpcProtocolOrder : public ::testing::TestWithParam<OrderParam> {};

// A ring exchange of int32 data seeded by (rank, iteration), 100 iterations,
// with no explicit share_mem_handles (lowering inserts one).
std::string ringPatterns(Protocol protocol, int order) {
  const std::string cond = order == 0 ? "1" : order == 1 ? "0" : "rank % 2 == 0";
  auto send = [&](const char* name) {
    return fmt::format(R"({{"op": "communication", "name": "{}", "type": "send",
      "tensor": "mine", "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{}"}})",
                       name, protocolName(protocol));
  };
  auto recv = [&](const char* name) {
    return fmt::format(R"({{"op": "communication", "name": "{}", "type": "recv",
      "tensor": "theirs", "peer": "(rank - 1 + world) % world", "backend": "ipc",
      "protocol": "{}"}})",
                       name, protocolName(protocol));
  };
  auto wait = [](const char* name) {
    return fmt::format(R"({{"op": "wait", "communication": "{}"}})", name);
  };
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "mine", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "theirs", "dtype": "int32", "shape": ["n"]}},
      {{"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [
        {{"op": "fill", "tensor": "mine", "value": "rank * 100000 + i * 1000", "step": 1}},
        {{"op": "fill", "tensor": "theirs", "value": -1}},
        {{"op": "if", "cond": "{}", "then": [{}, {}, {}, {}], "else": [{}, {}, {}, {}]}},
        {{"op": "check", "tensor": "theirs",
         "value": "(rank - 1 + world) % world * 100000 + i * 1000", "step": 1}}
      ]}})",
      cond, send("s1"), recv("r1"), wait("r1"), wait("s1"), recv("r2"), send("s2"), wait("s2"),
      wait("r2"));
  return program("ring_patterns", R"("n": 256, "iters": 100)", body);
}

TEST_P(IpcProtocolOrder, RingDataSeededByRankAndIterationArrivesOver100Iterations) {
  const auto [protocol, order] = GetParam();
  int64_t exchanges = -1;
  RunReport r = runProgram(ringPatterns(protocol, order), 2, &exchanges);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 200u);
  EXPECT_EQ(exchanges, 1) << "the implicit exchange before the loop runs once, in the first run";
}

std::string orderName(const ::testing::TestParamInfo<OrderParam>& info) {
  static const char* kOrders[] = {"SendFirst", "RecvFirst", "Mixed"};
  return protocolName(std::get<0>(info.param)) + kOrders[std::get<1>(info.param)];
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcProtocolOrder,
                         ::testing::Combine(::testing::Values(Protocol::Put, Protocol::Get,
                                                              Protocol::Eager),
                                            ::testing::Values(0, 1, 2)),
                         orderName);

// -------------------------------------------------------- per protocol

// (protocol, counted): counted runs the suite with HIR_IPC_COUNTED=1, the
// message numbers counted on the device as graph mode does.
using ProtocolParam = std::tuple<Protocol, bool>;

class IpcProtocol : public ::testing::TestWithParam<ProtocolParam> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam())) setenv("HIR_IPC_COUNTED", "1", 1);
  }
  void TearDown() override { unsetenv("HIR_IPC_COUNTED"); }
  Protocol proto() const { return std::get<0>(GetParam()); }
  std::string protocol() const { return protocolName(proto()); }
  std::string otherProtocol() const {
    return protocolName(proto() == Protocol::Put ? Protocol::Get : Protocol::Put);
  }
};

// HIR_IPC_SEQ_START for the length of a test.
class SeqStart {
 public:
  explicit SeqStart(const char* value) { setenv("HIR_IPC_SEQ_START", value, 1); }
  ~SeqStart() { unsetenv("HIR_IPC_SEQ_START"); }
};

// Sequence numbers survive the wrap at 2^32: starting six below it, each
// pair's counters wrap at its 6th message of the first run, and the 200
// messages of two runs (every posting order on the ring, seeded data,
// poisoned before each message) all arrive right.
TEST_P(IpcProtocol, SequenceNumbersSurviveTheWrapAt2To32) {
  SeqStart start("4294967290");
  for (int order = 0; order < 3; ++order) {
    RunReport r = runProgram(ringPatterns(proto(), order), 2);
    EXPECT_TRUE(r.ok()) << "order " << order << ": " << r.format();
    EXPECT_EQ(r.checks_run, 200u) << "order " << order;
  }
}

TEST(Ipc, ASequenceStartThatIsNoUint32IsAUsageError) {
  SeqStart start("4294967296");
  try {
    runProgram(ringPatterns(Protocol::Put, 0), 1);
    FAIL() << "HIR_IPC_SEQ_START=2^32 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("HIR_IPC_SEQ_START must be in [0, 4294967295], got "
                                         "4294967296"),
              std::string::npos)
        << e.what();
  }
}

// The ring allgather of design §3 through ipc and, on the same data, the
// backend's own allgather ("auto": MPI on the host, NCCL on GPUs); every
// chunk of both checked against the seeded pattern on the device.
TEST_P(IpcProtocol, RingAllgatherEqualsTheBackendAllgather) {
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "mine", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "buf", "dtype": "int32", "shape": ["world", "n"]}},
      {{"op": "allocate", "name": "ag_out", "dtype": "int32", "shape": ["world", "n"]}},
      {{"op": "fill", "tensor": "mine", "value": "rank * 7919 + seed", "step": 3}},
      {{"op": "fill", "tensor": "buf", "value": -7}},
      {{"op": "fill", "tensor": "ag_out", "value": -9}},
      {{"op": "copy", "src": "mine", "dst": "buf[rank]"}},
      {{"op": "for", "index": "i", "start": 0, "stop": "world - 1", "body": [
        {{"op": "share_mem_handles", "communications": ["s", "r"]}},
        {{"op": "communication", "name": "s", "type": "send",
         "tensor": "buf[(rank - i + world) % world]", "peer": "(rank + 1) % world",
         "backend": "ipc", "protocol": "{0}"}},
        {{"op": "communication", "name": "r", "type": "recv",
         "tensor": "buf[(rank - i - 1 + world) % world]", "peer": "(rank - 1 + world) % world",
         "backend": "ipc", "protocol": "{0}"}},
        {{"op": "wait", "communication": "r"}},
        {{"op": "wait", "communication": "s"}}
      ]}},
      {{"op": "communication", "name": "ag", "type": "allgather", "input": "mine",
       "output": "ag_out", "backend": "auto"}},
      {{"op": "wait", "communication": "ag"}},
      {{"op": "for", "index": "c", "start": 0, "stop": "world", "body": [
        {{"op": "check", "tensor": "buf[c]", "value": "c * 7919 + seed", "step": 3}},
        {{"op": "check", "tensor": "ag_out[c]", "value": "c * 7919 + seed", "step": 3}}
      ]}})",
      protocol());
  const int world = test::world().world();
  // gpu-check runs the ipc tests with 2 ranks on a machine of 1 GPU
  // (HIR_SHARE_GPUS): ipc works there, NCCL refuses it.
  if (testDevice() == "cuda" && test::world().localSize() > visibleGpuCount())
    GTEST_SKIP() << "the ranks share a GPU, which NCCL (the allgather to compare with) refuses";
  Session session(test::world(), SessionOptions{testDevice()});
  for (int seed : {5, 11}) {
    Evaluator ev(session,
                 parseProgram(program("allgathers", fmt::format(R"("n": 1000, "seed": {})", seed),
                                      body)),
                 options());
    ev.run();
    ev.synchronize();
    RunReport r = ev.report();
    EXPECT_TRUE(r.ok()) << "seed " << seed << ": " << r.format();
    EXPECT_EQ(r.checks_run, 2u * static_cast<uint64_t>(world));
  }
}

// Four communications on four slices of one allocation, two to each
// neighbour (with one or two ranks, both neighbours are one rank, and the
// messages of a pair match in program order).
TEST_P(IpcProtocol, SlicesOfOneAllocationServeSeveralCommunications) {
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "buf", "dtype": "int32", "shape": [4, "n"]}},
      {{"op": "for", "index": "i", "start": 0, "stop": 10, "body": [
        {{"op": "fill", "tensor": "buf[0]", "value": "rank * 1000 + i * 10", "step": 1}},
        {{"op": "fill", "tensor": "buf[1]", "value": "rank * 1000 + i * 10 + 5", "step": 2}},
        {{"op": "fill", "tensor": "buf[2:4]", "value": -1}},
        {{"op": "communication", "name": "a", "type": "send", "tensor": "buf[0]",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}},
        {{"op": "communication", "name": "b", "type": "send", "tensor": "buf[1]",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
        {{"op": "communication", "name": "c", "type": "recv", "tensor": "buf[2]",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
        {{"op": "communication", "name": "d", "type": "recv", "tensor": "buf[3]",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}},
        {{"op": "wait", "communication": "a"}}, {{"op": "wait", "communication": "b"}},
        {{"op": "wait", "communication": "c"}}, {{"op": "wait", "communication": "d"}},
        {{"op": "check", "tensor": "buf[2]", "value": "(rank - 1 + world) % world * 1000 + i * 10",
         "step": 1}},
        {{"op": "check", "tensor": "buf[3]", "value": "(rank + 1) % world * 1000 + i * 10 + 5",
         "step": 2}}
      ]}})",
      protocol());
  RunReport r = runProgram(program("slices", R"("n": 300)", body), 2);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 40u);
}

// Messages of one lane (the same peer and direction) posted both ways: "a"
// detached (work before its wait: it runs on the lane's stream) and "b"
// joined (waited right away: it runs on the poster's stream), from stream
// i % 2, so the lane moves between three streams. Sequence numbers would
// pair the wrong messages if any of them overtook another.
TEST_P(IpcProtocol, JoinedAndDetachedMessagesOfOneLaneStayInOrderAcrossStreams) {
  auto comm = [&](const char* name, const char* type, const char* tensor, const char* peer) {
    return fmt::format(R"({{"op": "communication", "name": "{}", "type": "{}", "tensor": "{}",
      "peer": "{}", "backend": "ipc", "protocol": "{}"}})",
                       name, type, tensor, peer, protocol());
  };
  const char* next = "(rank + 1) % world";
  const char* prev = "(rank - 1 + world) % world";
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "out_a", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "out_b", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "in_a", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "in_b", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "other", "dtype": "int32", "shape": ["n"]}},
      {{"op": "for", "index": "i", "start": 0, "stop": 40, "body": [
        {{"op": "set_stream", "stream": "i % 2"}},
        {{"op": "sync_stream", "stream": "(i + 1) % 2"}},
        {{"op": "fill", "tensor": "out_a", "value": "rank * 100000 + i * 100", "step": 1}},
        {{"op": "fill", "tensor": "out_b", "value": "rank * 100000 + i * 100 + 50", "step": 1}},
        {{"op": "fill", "tensor": "in_a", "value": -1}},
        {{"op": "fill", "tensor": "in_b", "value": -1}},
        {}, {{"op": "fill", "tensor": "other", "value": "i"}},
        {}, {{"op": "fill", "tensor": "other", "value": "i"}},
        {}, {}, {{"op": "wait", "communication": "sb"}}, {{"op": "wait", "communication": "rb"}},
        {{"op": "wait", "communication": "sa"}}, {{"op": "wait", "communication": "ra"}},
        {{"op": "check", "tensor": "in_a", "value": "{} * 100000 + i * 100", "step": 1}},
        {{"op": "check", "tensor": "in_b", "value": "{} * 100000 + i * 100 + 50", "step": 1}}
      ]}})",
      comm("sa", "send", "out_a", next), comm("ra", "recv", "in_a", prev),
      comm("sb", "send", "out_b", next), comm("rb", "recv", "in_b", prev), prev, prev);
  const std::string text = program("lanes", R"("n": 64)", body);
  // The plan really mixes both kinds of post.
  Plan plan =
      lower(parseProgram(text), LowerOptions{test::world().world(), "host", backendCatalog()});
  int joined = 0, detached = 0;
  for (const Instr& in : plan.code) {
    if (const auto* p = std::get_if<instr::Post>(&in.op); p && plan.comms[p->comm].group < 0)
      (p->joined ? joined : detached)++;
    if (const auto* e = std::get_if<instr::GroupEnd>(&in.op)) (e->joined ? joined : detached)++;
  }
  EXPECT_EQ(detached, 2) << "sa and ra";
  EXPECT_EQ(joined, 1) << "the implicit group of sb and rb";
  RunReport r = runProgram(text, 2);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 160u);
}

// Two sends read one buffer and two recvs write halves of another, posted
// as one group (one completion for all four).
TEST_P(IpcProtocol, TwoCommunicationsShareABufferInOneGroup) {
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "src", "dtype": "int64", "shape": ["n"]}},
      {{"op": "allocate", "name": "dst", "dtype": "int64", "shape": [2, "n"]}},
      {{"op": "for", "index": "i", "start": 0, "stop": 20, "body": [
        {{"op": "fill", "tensor": "src", "value": "rank * 1000000 + i * 1000", "step": 1}},
        {{"op": "fill", "tensor": "dst", "value": -1}},
        {{"op": "group", "name": "g", "body": [
          {{"op": "communication", "name": "to_next", "type": "send", "tensor": "src",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "to_prev", "type": "send", "tensor": "src",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "from_prev", "type": "recv", "tensor": "dst[0]",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "from_next", "type": "recv", "tensor": "dst[1]",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}}
        ]}},
        {{"op": "wait", "communication": "g"}},
        {{"op": "check", "tensor": "dst[0]",
         "value": "(rank - 1 + world) % world * 1000000 + i * 1000", "step": 1}},
        {{"op": "check", "tensor": "dst[1]", "value": "(rank + 1) % world * 1000000 + i * 1000",
         "step": 1}}
      ]}})",
      protocol());
  RunReport r = runProgram(program("shared", R"("n": 100)", body), 2);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 80u);
}

// Buffers allocated and deallocated in every iteration: lowering exchanges
// after the allocation; the cached block makes later exchanges no-ops, and
// a second run exchanges nothing.
TEST_P(IpcProtocol, BuffersAllocatedInsideTheLoopAreExchangedOnlyInTheFirstRun) {
  const std::string body = fmt::format(
      R"({{"op": "for", "index": "i", "start": 0, "stop": 5, "body": [
        {{"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]}},
        {{"op": "allocate", "name": "y", "dtype": "float32", "shape": ["n"]}},
        {{"op": "fill", "tensor": "x", "value": "rank * 100 + i", "step": 1}},
        {{"op": "communication", "name": "s", "type": "send", "tensor": "x",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}},
        {{"op": "communication", "name": "r", "type": "recv", "tensor": "y",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
        {{"op": "wait", "communication": "s"}},
        {{"op": "wait", "communication": "r"}},
        {{"op": "check", "tensor": "y", "value": "(rank - 1 + world) % world * 100 + i",
         "step": 1}},
        {{"op": "deallocate", "name": "x"}},
        {{"op": "deallocate", "name": "y"}}
      ]}})",
      protocol());
  Session session(test::world(), SessionOptions{testDevice()});
  Evaluator ev(session, parseProgram(program("inner", R"("n": 64)", body)), options());
  ev.run();
  ev.synchronize();
  const int64_t first = ev.exchanges();
  EXPECT_GE(first, 1);
  for (int run = 0; run < 3; ++run) ev.run();
  ev.synchronize();
  EXPECT_EQ(ev.exchanges(), first) << "a later run exchanged again";
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 20u);
}

// One group, waited right away (so posted joined), with two messages on
// each lane, one by each protocol: the side that copies differs between
// them, so the host's numbers and counted ones must both pair the k-th
// message of a lane on one side with the k-th on the other, whatever phase
// of the group enqueues it.
TEST_P(IpcProtocol, AGroupMixingBothProtocolsOnOneLanePairsItsMessagesInOrder) {
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "a", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "b", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "ra", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "rb", "dtype": "int32", "shape": ["n"]}},
      {{"op": "for", "index": "i", "start": 0, "stop": 30, "body": [
        {{"op": "fill", "tensor": "a", "value": "rank * 100000 + i * 100", "step": 1}},
        {{"op": "fill", "tensor": "b", "value": "rank * 100000 + i * 100 + 7", "step": 3}},
        {{"op": "fill", "tensor": "ra", "value": -1}},
        {{"op": "fill", "tensor": "rb", "value": -1}},
        {{"op": "group", "name": "g", "body": [
          {{"op": "communication", "name": "sa", "type": "send", "tensor": "a",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "sb", "type": "send", "tensor": "b",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{1}"}},
          {{"op": "communication", "name": "rcv_a", "type": "recv", "tensor": "ra",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "rcv_b", "type": "recv", "tensor": "rb",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{1}"}}
        ]}},
        {{"op": "wait", "communication": "g"}},
        {{"op": "check", "tensor": "ra", "value": "(rank - 1 + world) % world * 100000 + i * 100",
         "step": 1}},
        {{"op": "check", "tensor": "rb",
         "value": "(rank - 1 + world) % world * 100000 + i * 100 + 7", "step": 3}}
      ]}})",
      protocol(), otherProtocol());
  const std::string text = program("mixed", R"("n": 96)", body);
  Plan plan =
      lower(parseProgram(text), LowerOptions{test::world().world(), "host", backendCatalog()});
  int joined = 0;
  for (const Instr& in : plan.code)
    if (const auto* e = std::get_if<instr::GroupEnd>(&in.op)) joined += e->joined;
  EXPECT_EQ(joined, 1) << "the group is waited right away: posted joined";
  RunReport r = runProgram(text, 2);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 120u);
}

// One group, waited right away, with two messages of one protocol on each
// lane (one counter), a small one and then a large one: the second must be
// numbered after the first, or the group would complete when the small one
// arrives, and the check of the large buffer, right after the group, would
// find its poison while the copy is still on its way.
TEST_P(IpcProtocol, AGroupOfTwoMessagesOnOneLaneCompletesOnlyWhenBothArrived) {
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "a", "dtype": "int32", "shape": [16]}},
      {{"op": "allocate", "name": "b", "dtype": "int32", "shape": ["n"]}},
      {{"op": "allocate", "name": "ra", "dtype": "int32", "shape": [16]}},
      {{"op": "allocate", "name": "rb", "dtype": "int32", "shape": ["n"]}},
      {{"op": "for", "index": "i", "start": 0, "stop": 4, "body": [
        {{"op": "fill", "tensor": "a", "value": "rank * 100000 + i * 1000", "step": 1}},
        {{"op": "fill", "tensor": "b", "value": "rank * 100000 + i * 1000 + 3", "step": 1}},
        {{"op": "fill", "tensor": "ra", "value": -1}},
        {{"op": "fill", "tensor": "rb", "value": -1}},
        {{"op": "group", "name": "g", "body": [
          {{"op": "communication", "name": "sa", "type": "send", "tensor": "a",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "sb", "type": "send", "tensor": "b",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "{1}"}},
          {{"op": "communication", "name": "rcv_a", "type": "recv", "tensor": "ra",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{0}"}},
          {{"op": "communication", "name": "rcv_b", "type": "recv", "tensor": "rb",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "{1}"}}
        ]}},
        {{"op": "wait", "communication": "g"}},
        {{"op": "check", "tensor": "rb",
         "value": "(rank - 1 + world) % world * 100000 + i * 1000 + 3", "step": 1}},
        {{"op": "check", "tensor": "ra", "value": "(rank - 1 + world) % world * 100000 + i * 1000",
         "step": 1}}
      ]}})",
      // 32 MiB is beyond eager: auto (put) behind an eager message.
      protocol(), proto() == Protocol::Eager ? "auto" : protocol());
  RunReport r = runProgram(program("two_on_a_lane", R"("n": 8388608)", body), 1);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 8u);
}

// ------------------------------------------------------------ eager

// An environment variable for the length of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// `sends` eager messages to the next rank in one group, then as many
// receives from the previous one, waited on at once (`joined`) or posted
// apart and waited on later; every message seeded by rank, iteration and
// index, every receive buffer poisoned.
std::string eagerBurst(int sends, bool joined) {
  std::string body = fmt::format(
      R"({{"op": "allocate", "name": "out", "dtype": "int32", "shape": [{0}, 5]}},
      {{"op": "allocate", "name": "in", "dtype": "int32", "shape": [{0}, 5]}},
      {{"op": "allocate", "name": "scratch", "dtype": "int32", "shape": [4]}},
      {{"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [
        {{"op": "fill", "tensor": "out", "value": "rank * 100000 + i * 100", "step": 1}},
        {{"op": "fill", "tensor": "in", "value": -1}},
        {{"op": "group", "name": "g", "body": [)",
      sends);
  for (int k = 0; k < sends; ++k)
    body += fmt::format(
        R"({0}{{"op": "communication", "name": "s{1}", "type": "send", "tensor": "out[{1}]",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "eager"}})",
        k ? "," : "", k);
  for (int k = 0; k < sends; ++k)
    body += fmt::format(
        R"(,{{"op": "communication", "name": "r{0}", "type": "recv", "tensor": "in[{0}]",
           "peer": "(rank - 1 + world) % world", "backend": "ipc"}})",
        k);
  body += "]},";
  if (!joined) body += R"({"op": "fill", "tensor": "scratch", "value": 0}, )";
  body += R"({"op": "wait", "communication": "g"},
        {"op": "check", "tensor": "in", "value": "(rank - 1 + world) % world * 100000 + i * 100",
         "step": 1}
      ]})";
  return program("eager_burst", R"("iters": 20)", body);
}

// More eager messages on one lane in one post than the lane has slots: the
// later ones wait for the peer to copy the earlier ones out, so the post
// cannot run in phases on one stream (each rank's sends would wait for its
// peer's receives, enqueued after its own sends): it runs lane by lane.
// With 2 slots and 7 messages per post, each slot is reused 3 times a post.
TEST_P(IpcProtocol, MoreEagerMessagesInOnePostThanSlotsAllArrive) {
  if (proto() != Protocol::Eager) GTEST_SKIP() << "eager only";
  ScopedEnv slots("HIR_IPC_EAGER_SLOTS", "2");
  for (bool joined : {true, false}) {
    RunReport r = runProgram(eagerBurst(7, joined), 2);
    EXPECT_TRUE(r.ok()) << (joined ? "joined: " : "apart: ") << r.format();
    EXPECT_EQ(r.checks_run, 40u);
  }
  SeqStart start("4294967290");  // the slots' ring across the wrap of the numbers
  RunReport r = runProgram(eagerBurst(3, true), 2);
  EXPECT_TRUE(r.ok()) << r.format();
}

TEST(IpcEager, AMessageAboveTheLimitIsRefusedAtLoadNamingTheNode) {
  ScopedEnv max("HIR_IPC_EAGER_MAX", "64");
  ScopedEnv sends("HIR_IPC_EAGER_SEND_MAX", "0");  // the limit is then HIR_IPC_EAGER_MAX's
  try {
    runProgram(eagerBurst(1, true), 1);  // 5 int32: 20 bytes, fine
    const std::string big = program("big", "", R"(
      {"op": "allocate", "name": "a", "dtype": "float32", "shape": [17]},
      {"op": "allocate", "name": "b", "dtype": "float32", "shape": [17]},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a",
       "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "eager"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b",
       "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "eager"},
      {"op": "wait", "communication": "s"}, {"op": "wait", "communication": "r"})");
    runProgram(big, 1);
    FAIL() << "a 68-byte eager message was accepted under HIR_IPC_EAGER_MAX=64";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/2: on rank 0: protocol 'eager' carries at most "
                                    "64 bytes in one send or recv (the larger of "
                                    "HIR_IPC_EAGER_SEND_MAX and HIR_IPC_EAGER_MAX"));
    EXPECT_THAT(e.what(), HasSubstr("and this one has 68; use 'put' or 'auto'"));
  }
}

// Auto picks eager for a send or recv up to the limit (the larger of
// HIR_IPC_EAGER_SEND_MAX, 16 MiB by default, and HIR_IPC_EAGER_MAX) and put
// above it, alike on both ends; with HIR_IPC_EAGER_MAX=0, never eager.
TEST(IpcEager, AutoIsEagerUpToTheLimitAndPutAbove) {
  const std::string text = program("sizes", "", R"(
      {"op": "allocate", "name": "small", "dtype": "uint8", "shape": [4096]},
      {"op": "allocate", "name": "big", "dtype": "uint8", "shape": [4097]},
      {"op": "communication", "name": "s1", "type": "send", "tensor": "small", "peer": 0, "backend": "ipc"},
      {"op": "communication", "name": "r1", "type": "recv", "tensor": "small", "peer": 0, "backend": "ipc"},
      {"op": "communication", "name": "s2", "type": "send", "tensor": "big", "peer": 0, "backend": "ipc"},
      {"op": "communication", "name": "r2", "type": "recv", "tensor": "big", "peer": 0, "backend": "ipc"})");
  auto protocols = [&] {
    Plan plan = lower(parseProgram(text),
                      LowerOptions{1, "host", backendCatalog(), Settings::fromEnvironment()});
    std::vector<Protocol> out;
    for (const PlanBackend& b : plan.backends)
      if (b.name == "ipc")
        for (std::size_t bytes : {std::size_t{4096}, std::size_t{4097}})
          out.push_back(b.protocolFor(Protocol::Auto, bytes));
    return out;
  };
  EXPECT_EQ(protocols(), (std::vector<Protocol>{Protocol::Eager, Protocol::Eager}));
  {
    ScopedEnv max("HIR_IPC_EAGER_MAX", "4096");
    ScopedEnv sends("HIR_IPC_EAGER_SEND_MAX", "0");
    EXPECT_EQ(protocols(), (std::vector<Protocol>{Protocol::Eager, Protocol::Put}));
  }
  {
    ScopedEnv sends("HIR_IPC_EAGER_SEND_MAX", "4096");
    EXPECT_EQ(protocols(), (std::vector<Protocol>{Protocol::Eager, Protocol::Eager}))
        << "HIR_IPC_EAGER_MAX (16 KiB) is the larger";
    ScopedEnv max("HIR_IPC_EAGER_MAX", "1024");
    EXPECT_EQ(protocols(), (std::vector<Protocol>{Protocol::Eager, Protocol::Put}));
  }
  EXPECT_EQ(
      ipcResolveProtocol(Settings::fromEnvironment(), Protocol::Auto, kIpcEagerSendMaxDefault),
      Protocol::Eager);
  EXPECT_EQ(
      ipcResolveProtocol(Settings::fromEnvironment(), Protocol::Auto, kIpcEagerSendMaxDefault + 1),
      Protocol::Put);
  ScopedEnv off("HIR_IPC_EAGER_MAX", "0");
  EXPECT_EQ(protocols(), (std::vector<Protocol>{Protocol::Put, Protocol::Put}));
  EXPECT_EQ(ipcResolveProtocol(Settings::fromEnvironment(), Protocol::Auto, 8), Protocol::Put);
}

// HIR_IPC_EAGER_SEND_MAX takes a number of bytes up to 1 GiB; anything else
// is a usage error (exit 2 from hir) naming the variable and the value.
TEST(IpcEager, ABadEagerSendMaxIsAUsageErrorNamingIt) {
  for (const char* bad : {"16M", "-1", "1073741825"}) {
    ScopedEnv sends("HIR_IPC_EAGER_SEND_MAX", bad);
    try {
      ipcResolveProtocol(Settings::fromEnvironment(), Protocol::Auto, 64);
      ADD_FAILURE() << "HIR_IPC_EAGER_SEND_MAX=" << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("HIR_IPC_EAGER_SEND_MAX")) << bad;
      EXPECT_THAT(e.what(), HasSubstr(bad));
    }
  }
}

// HIR_IPC_DIRECT is 0 or 1; anything else is a usage error (exit 2 from
// hir) naming the variable and the value, on every rank at setup.
TEST(IpcEager, ADirectSwitchOtherThan0Or1IsAUsageErrorNamingIt) {
  for (const char* bad : {"yes", "2"}) {
    ScopedEnv direct("HIR_IPC_DIRECT", bad);
    try {
      runProgram(ringPatterns(Protocol::Eager, 0), 1);
      ADD_FAILURE() << "HIR_IPC_DIRECT=" << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("HIR_IPC_DIRECT")) << bad;
      EXPECT_THAT(e.what(), HasSubstr(bad));
    }
  }
}

// Eager maps no buffer, only the pages: a caller's buffer may be sent and
// received (put would refuse to export it).
TEST(IpcEager, CallerBuffersMoveBecauseNoBufferIsMapped) {
  const std::string body = R"(
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [8]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [8]},
      {"op": "fill", "tensor": "a", "value": "rank * 10", "step": 1},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a",
       "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "eager"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b",
       "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "eager"},
      {"op": "wait", "communication": "s"},
      {"op": "wait", "communication": "r"})";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(program("bound", "", body, R"("a", "b")")), options());
  std::vector<int32_t> in(8, -1), out(8, -1);
  ev.bind("a", out.data(), sizeof(int32_t) * out.size());
  ev.bind("b", in.data(), sizeof(int32_t) * in.size());
  ev.run();
  ev.synchronize();
  EXPECT_TRUE(ev.report().ok()) << ev.report().format();
  const int w = test::world().world(), from = (test::world().rank() - 1 + w) % w;
  for (int k = 0; k < 8; ++k) EXPECT_EQ(in[static_cast<std::size_t>(k)], from * 10 + k) << k;
}

// The ipc subsystem's debug log lines while `fn` runs (the setup's "eager
// slots: ..." among them); the environment's log settings afterwards.
template <class Fn>
std::string ipcDebugLog(Fn&& fn) {
  std::mutex mu;
  std::string log;
  setLogSink([&](std::string_view line) {
    std::lock_guard lock(mu);
    log += std::string(line) + "\n";
  });
  configureLog("debug", "ipc");
  try {
    fn();
  } catch (...) {
    setLogSink(nullptr);
    reloadLogConfigFromEnvironment();
    throw;
  }
  setLogSink(nullptr);
  reloadLogConfigFromEnvironment();
  return log;
}

// A stream of mid-size sends (64 KiB and 1 MiB, auto: eager below
// HIR_IPC_EAGER_SEND_MAX) into one receive buffer, each waited on before the
// next, as hir_p2p_bench's bandwidth rows do: every message lands whole
// (seeded by rank, iteration and message, the buffer poisoned before each),
// through slots the evaluator sized for the program's largest eager send
// (smaller slots would refuse the message at its post).
TEST(IpcEager, MidSizeSendsStreamThroughSlotsSizedForTheProgram) {
  const std::string body = R"(
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [16384]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [16384]},
      {"op": "allocate", "name": "c", "dtype": "int32", "shape": [262144]},
      {"op": "allocate", "name": "d", "dtype": "int32", "shape": [262144]},
      {"op": "for", "index": "i", "start": 0, "stop": 3, "body": [
        {"op": "for", "index": "j", "start": 0, "stop": 12, "body": [
          {"op": "fill", "tensor": "a", "value": "rank * 1000000 + i * 10000 + j * 100", "step": 1},
          {"op": "fill", "tensor": "c", "value": "rank * 1000000 + i * 10000 + j * 100 + 7", "step": 3},
          {"op": "fill", "tensor": "b", "value": -1},
          {"op": "fill", "tensor": "d", "value": -1},
          {"op": "communication", "name": "s1", "type": "send", "tensor": "a",
           "peer": "(rank + 1) % world", "backend": "ipc"},
          {"op": "communication", "name": "r1", "type": "recv", "tensor": "b",
           "peer": "(rank - 1 + world) % world", "backend": "ipc"},
          {"op": "wait", "communication": "s1"}, {"op": "wait", "communication": "r1"},
          {"op": "communication", "name": "s2", "type": "send", "tensor": "c",
           "peer": "(rank + 1) % world", "backend": "ipc"},
          {"op": "communication", "name": "r2", "type": "recv", "tensor": "d",
           "peer": "(rank - 1 + world) % world", "backend": "ipc"},
          {"op": "wait", "communication": "s2"}, {"op": "wait", "communication": "r2"},
          {"op": "check", "tensor": "b",
           "value": "(rank - 1 + world) % world * 1000000 + i * 10000 + j * 100", "step": 1},
          {"op": "check", "tensor": "d",
           "value": "(rank - 1 + world) % world * 1000000 + i * 10000 + j * 100 + 7", "step": 3}
        ]}
      ]})";
  const std::string text = program("mid_stream", "", body);
  Plan plan = lower(parseProgram(text),
                      LowerOptions{1, "host", backendCatalog(), Settings::fromEnvironment()});
  for (const PlanBackend& b : plan.backends)
    if (b.name == "ipc") {
      EXPECT_EQ(b.protocolFor(Protocol::Auto, 65536), Protocol::Eager);
      EXPECT_EQ(b.protocolFor(Protocol::Auto, 1 << 20), Protocol::Eager);
    }
  RunReport r;
  const std::string log = ipcDebugLog([&] { r = runProgram(text, 2); });
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2u * 36u * 2u);
  EXPECT_THAT(log, HasSubstr("eager slots: 8 per sender of 1048576 bytes (the program's largest "
                             "eager send: 1048576 bytes)"));
}

// A ring step of 16-byte eager messages, `iterations` times.
std::string ringSteps(int iterations) {
  return fmt::format(R"(
      {{"op": "allocate", "name": "a", "dtype": "int32", "shape": [4]}},
      {{"op": "allocate", "name": "b", "dtype": "int32", "shape": [4]}},
      {{"op": "for", "index": "i", "start": 0, "stop": {}, "body": [
        {{"op": "communication", "name": "s", "type": "send", "tensor": "a",
         "peer": "(rank + 1) % world", "backend": "ipc"}},
        {{"op": "communication", "name": "r", "type": "recv", "tensor": "b",
         "peer": "(rank + world - 1) % world", "backend": "ipc"}},
        {{"op": "wait", "communication": "s"}}, {{"op": "wait", "communication": "r"}}]}})",
                     iterations);
}

// A program too long for the check to see whole (its trace is of a prefix)
// may send larger eager messages later than the check saw: its slots are
// sized for HIR_IPC_EAGER_SEND_MAX, 2 of 16 MiB per sender. The check is
// cut at 1,000 steps per rank (EvaluatorOptions::check_steps_per_rank), far
// short of the loop's 40,000.
TEST(IpcEager, ATraceOfAPrefixSizesTheSlotsForTheLimit) {
  EvaluatorOptions opts = options();
  opts.check_steps_per_rank = 1000;
  const std::string log = ipcDebugLog([&] {
    Session session(test::world(), SessionOptions{"host"});
    Evaluator ev(session, parseProgram(program("long", "", ringSteps(10000))), opts);
  });
  EXPECT_THAT(log, HasSubstr("eager slots: 2 per sender of 16777216 bytes (the program's largest "
                             "eager send is unknown"));
}

// The same program, checked whole under the default limit, gets slots sized
// for what it sends; and a limit below 1 is a usage error.
TEST(IpcEager, TheCheckStepLimitIsAnEvaluatorOption) {
  const std::string log = ipcDebugLog([&] {
    Session session(test::world(), SessionOptions{"host"});
    Evaluator ev(session, parseProgram(program("short", "", ringSteps(100))), options());
  });
  EXPECT_THAT(log, HasSubstr("(the program's largest eager send: 16 bytes)"));
  EvaluatorOptions bad = options();
  bad.check_steps_per_rank = 0;
  Session session(test::world(), SessionOptions{"host"});
  try {
    Evaluator ev(session, parseProgram(program("short", "", ringSteps(100))), bad);
    ADD_FAILURE() << "a limit of 0 steps was accepted";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("check_steps_per_rank must be at least 1, got 0"));
  }
}

namespace {

// An ipc backend on `device`, set up for a program whose largest eager send
// is `largest` bytes (-1: unknown). Collective.
std::unique_ptr<IpcBackend> ipcFor(HostDevice& device, int64_t largest) {
  auto backend = std::make_unique<IpcBackend>();
  BackendContext ctx;
  ctx.device = &device;
  ctx.bootstrap = &test::world();
  ctx.teams = {{}};
  for (int r = 0; r < test::world().world(); ++r) ctx.teams[0].push_back(r);
  ctx.timeout = testTimeout();
  ctx.largest_eager_send = largest;
  ctx.settings = Settings::fromEnvironment();
  agreeOnSettings(test::world(), ctx.settings);  // as an Evaluator's load does
  backend->setup(ctx);
  return backend;
}

}  // namespace

// The eager slots fit the program: HIR_IPC_EAGER_MAX's 16 KiB when its sends
// are no larger, as large as its largest eager send (a multiple of 16
// bytes) otherwise, and fewer of them once a sender's row of 8 would pass
// 32 MiB (at least 2, a power of two); a program whose trace is unknown
// gets slots of HIR_IPC_EAGER_SEND_MAX.
TEST(IpcEager, SlotsAreAsLargeAsTheProgramsLargestEagerSend) {
  HostDevice device(testTimeout());
  const struct {
    int64_t largest;
    std::size_t bytes;
    uint32_t slots;
  } cases[] = {{0, 16384, 8},
               {16384, 16384, 8},
               {100001, 100016, 8},
               {std::int64_t{4} << 20, std::size_t{4} << 20, 8},
               {(std::int64_t{4} << 20) + 16, (std::size_t{4} << 20) + 16, 4},
               {std::int64_t{16} << 20, std::size_t{16} << 20, 2},
               {-1, kIpcEagerSendMaxDefault, 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("largest eager send {}", c.largest));
    auto b = ipcFor(device, c.largest);
    EXPECT_EQ(b->eagerSlotBytes(), c.bytes);
    EXPECT_EQ(b->eagerSlots(), c.slots);
  }
  {
    ScopedEnv one("HIR_IPC_EAGER_SLOTS", "1");
    EXPECT_EQ(ipcFor(device, std::int64_t{16} << 20)->eagerSlots(), 1u);
  }
  ScopedEnv sends("HIR_IPC_EAGER_SEND_MAX", "65536");
  EXPECT_EQ(ipcFor(device, -1)->eagerSlotBytes(), 65536u);
}

// Ranks whose HIR_IPC_EAGER_SEND_MAX differ would decide auto differently
// for some sizes, and ranks that loaded programs of different largest eager
// sends would size their slots differently: either fails the setup on
// every rank, saying which.
TEST(IpcEager, SendLimitsOrSlotsThatDifferAcrossRanksFailOnEveryRank) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  HostDevice device(testTimeout());
  const bool one = test::world().rank() == 1;
  {
    ScopedEnv sends("HIR_IPC_EAGER_SEND_MAX", one ? "65536" : "131072");
    try {
      ipcFor(device, 0);
      ADD_FAILURE() << "ranks with different HIR_IPC_EAGER_SEND_MAX set up";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("HIR_IPC_EAGER_SEND_MAX must be the same on every rank"));
    }
  }
  try {
    ipcFor(device, one ? 65536 : 0);
    ADD_FAILURE() << "ranks with slots of different sizes set up";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("eager slots of"));
    EXPECT_THAT(e.what(), HasSubstr("every rank must load the same program"));
  }
  test::world().barrier();
}

// Ranks that disagree on a message's size (another program, or other params
// on one rank, which each rank's own check cannot see) must not copy past
// the peer's block. The side that copies (put's sender, get's receiver)
// sees 4096 float32 where its peer's block holds one: it fails naming the
// message, its size and the likely cause, instead of writing or reading
// 16 KiB past the block (which crashed the sender); its peer fails by its
// timeout.
TEST(Ipc, APeerBlockSmallerThanTheMessageIsNotCopiedPast) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  const int rank = test::world().rank();
  for (const std::string protocol : {"put", "get"}) {
    const int copier = protocol == "put" ? 0 : 1;
    const std::string body = fmt::format(R"(
      {{"op": "allocate", "name": "a", "dtype": "float32", "shape": [{0}]}},
      {{"op": "fill", "tensor": "a", "value": 1}},
      {{"op": "if", "cond": "rank == 0", "then": [
        {{"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": 1,
         "backend": "ipc", "protocol": "{1}"}},
        {{"op": "wait", "communication": "s"}}]}},
      {{"op": "if", "cond": "rank == 1", "then": [
        {{"op": "communication", "name": "r", "type": "recv", "tensor": "a", "peer": 0,
         "backend": "ipc", "protocol": "{1}"}},
        {{"op": "wait", "communication": "r"}}]}})",
                                         rank == copier ? 4096 : 1, protocol);
    Session session(test::world(), SessionOptions{testDevice()});
    EvaluatorOptions o = options();
    o.timeout = std::chrono::seconds(2);
    std::string what;
    try {
      Evaluator ev(session, parseProgram(program("disagree", "", body)), o);
      ev.run();
      ev.synchronize();
    } catch (const Error& e) {
      what = e.what();
    }
    if (rank == copier) {
      EXPECT_THAT(what, HasSubstr(fmt::format("of 16384 bytes at byte 0 of rank {}'s allocation",
                                              1 - copier)))
          << protocol;
      EXPECT_THAT(what, HasSubstr("the ranks disagree on the message")) << protocol;
    } else if (rank < 2) {
      EXPECT_FALSE(what.empty()) << protocol << ": rank " << rank << " ran, its peer failed";
    }
    test::world().barrier();
  }
}

// The slots, and which messages go in lines, must be alike everywhere: a
// rank with another limit fails the load on every rank, naming the setting
// (the settings' comparison across ranks, common/settings.h).
TEST(IpcEager, LimitsThatDifferAcrossRanksFailOnEveryRank) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  for (const char* variable : {"HIR_IPC_EAGER_MAX", "HIR_IPC_INLINE_MAX", "HIR_IPC_EAGER_SLOTS"}) {
    ScopedEnv max(variable, test::world().rank() == 1 ? "4" : "8");
    try {
      runProgram(eagerBurst(1, true), 1);
      ADD_FAILURE() << "ranks with different " << variable << " ran";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("{} must be the same on every rank", variable)));
    }
  }
}

// Eager messages in lines (small) and not (above HIR_IPC_INLINE_MAX) on one
// lane, alternating, over the slots' ring and across the wrap at 2^32,
// host-numbered and counted (where one step holds both kinds, in one ring
// of slots and their line areas): the receiver of a message not in lines
// waits for "done", which messages in lines store too, so its number is
// never far behind; each message arrives whole, in order, with data seeded
// by rank and iteration.
TEST(IpcEager, MessagesInLinesAndNotShareALaneInOrder) {
  ScopedEnv lines("HIR_IPC_INLINE_MAX", "64");
  ScopedEnv slots("HIR_IPC_EAGER_SLOTS", "2");
  struct Case {
    const char* counted;
    const char* start;
  };
  for (const Case c : {Case{"0", "0"}, Case{"0", "4294967291"}, Case{"1", "0"},
                       Case{"1", "4294967291"}}) {
    ScopedEnv counted("HIR_IPC_COUNTED", c.counted);
    ScopedEnv seq("HIR_IPC_SEQ_START", c.start);
    const std::string where = fmt::format("counted {}, start {}", c.counted, c.start);
    const std::string body = R"(
      {"op": "allocate", "name": "small", "dtype": "int32", "shape": [13]},
      {"op": "allocate", "name": "big", "dtype": "int32", "shape": [300]},
      {"op": "allocate", "name": "small_in", "dtype": "int32", "shape": [13]},
      {"op": "allocate", "name": "big_in", "dtype": "int32", "shape": [300]},
      {"op": "for", "index": "i", "start": 0, "stop": 25, "body": [
        {"op": "fill", "tensor": "small", "value": "rank * 1000 + i", "step": 3},
        {"op": "fill", "tensor": "big", "value": "rank * 100000 + i * 7", "step": 1},
        {"op": "fill", "tensor": "small_in", "value": -1},
        {"op": "fill", "tensor": "big_in", "value": -1},
        {"op": "communication", "name": "s1", "type": "send", "tensor": "small",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "eager"},
        {"op": "communication", "name": "s2", "type": "send", "tensor": "big",
         "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "eager"},
        {"op": "communication", "name": "r1", "type": "recv", "tensor": "small_in",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "eager"},
        {"op": "communication", "name": "r2", "type": "recv", "tensor": "big_in",
         "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "eager"},
        {"op": "wait", "communication": "s1"}, {"op": "wait", "communication": "s2"},
        {"op": "wait", "communication": "r1"}, {"op": "wait", "communication": "r2"},
        {"op": "check", "tensor": "small_in", "value": "(rank - 1 + world) % world * 1000 + i",
         "step": 3},
        {"op": "check", "tensor": "big_in",
         "value": "(rank - 1 + world) % world * 100000 + i * 7", "step": 1}
      ]})";
    RunReport r = runProgram(program("lines_and_not", "", body), 2);
    EXPECT_TRUE(r.ok()) << where << ": " << r.format();
    EXPECT_EQ(r.checks_run, 100u) << where;
  }
}

// A message in lines must not take the bytes that a larger message (not in
// lines) left in its slot for its own lines. With one slot, rank 0 sends a
// message of 300 int32 not in lines, every word of it the number of the
// lane's next message (the flag of that message's lines), then, 100 ms
// later, a message in lines; rank 1 polls for the second as soon as it has
// the first. When lines shared the slot, every line "arrived" at once with
// a stale word. Direct delivery is off, so the first message goes through
// the slot; from 0 and across the wrap at 2^32.
TEST(IpcEager, MessagesInLinesIgnoreWhatALargerMessageLeftInTheirSlot) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  static const bool registered = [] {
    registerKernel({"ipc_test_pause", {"host", "cuda"}, [](const KernelLaunch& k) {
                      const auto ms = std::chrono::milliseconds(k.arg("ms"));
                      k.device.launchHostFunc(k.stream, [ms] { std::this_thread::sleep_for(ms); });
                    }});
    return true;
  }();
  (void)registered;
  ScopedEnv lines("HIR_IPC_INLINE_MAX", "64");
  ScopedEnv slots("HIR_IPC_EAGER_SLOTS", "1");
  ScopedEnv direct("HIR_IPC_DIRECT", "0");
  const int rank = test::world().rank();
  for (const uint32_t start : {0u, 4294967291u}) {
    ScopedEnv seq("HIR_IPC_SEQ_START", std::to_string(start));
    // Iteration i's large message is number start + 2i + 1, its message in
    // lines start + 2i + 2 (as an int32, for the fill).
    const auto flag = static_cast<int32_t>(start + 2);
    const std::string body = fmt::format(R"(
      {{"op": "allocate", "name": "small", "dtype": "int32", "shape": [13]}},
      {{"op": "allocate", "name": "big", "dtype": "int32", "shape": [300]}},
      {{"op": "allocate", "name": "pause", "dtype": "int32", "shape": [1]}},
      {{"op": "for", "index": "i", "start": 0, "stop": 5, "body": [
        {{"op": "if", "cond": "rank == 0", "then": [
          {{"op": "fill", "tensor": "big", "value": "{} + 2 * i"}},
          {{"op": "communication", "name": "s1", "type": "send", "tensor": "big", "peer": 1,
           "backend": "ipc", "protocol": "eager"}},
          {{"op": "wait", "communication": "s1"}},
          {{"op": "kernel", "name": "ipc_test_pause", "writes": ["pause"], "args": {{"ms": 100}}}},
          {{"op": "fill", "tensor": "small", "value": "1000 + i", "step": 3}},
          {{"op": "communication", "name": "s2", "type": "send", "tensor": "small", "peer": 1,
           "backend": "ipc", "protocol": "eager"}},
          {{"op": "wait", "communication": "s2"}}]}},
        {{"op": "if", "cond": "rank == 1", "then": [
          {{"op": "fill", "tensor": "small", "value": -1}},
          {{"op": "communication", "name": "r1", "type": "recv", "tensor": "big", "peer": 0,
           "backend": "ipc", "protocol": "eager"}},
          {{"op": "wait", "communication": "r1"}},
          {{"op": "communication", "name": "r2", "type": "recv", "tensor": "small", "peer": 0,
           "backend": "ipc", "protocol": "eager"}},
          {{"op": "wait", "communication": "r2"}},
          {{"op": "check", "tensor": "big", "value": "{} + 2 * i"}},
          {{"op": "check", "tensor": "small", "value": "1000 + i", "step": 3}}]}}
      ]}})",
                                         flag, flag);
    RunReport r = runProgram(program("stale_slot", "", body), 1);
    EXPECT_TRUE(r.ok()) << "start " << start << ": " << r.format();
    EXPECT_EQ(r.checks_run, rank == 1 ? 10u : 0u) << "start " << start;
  }
}

// A joined post gives the signals of its receives (a put's "free") before
// its eager sends, which may wait for their slot. With one slot, rank 0
// sends m0 without waiting, then posts {send m1, recv x by put} and waits
// on it; rank 1 posts {send y by put, recv m0} and waits, then receives
// m1. Rank 0's send of m1 waits for rank 1's copy of m0 out of the slot,
// which rank 1's post runs after its put of y, which waits for rank 0's
// "free": given after the send of m1, that was a deadlock (the run timed
// out).
TEST(IpcEager, AJoinedPostSignalsItsReceivesBeforeItsEagerSendsWait) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  ScopedEnv slots("HIR_IPC_EAGER_SLOTS", "1");
  const std::string body = R"(
      {"op": "allocate", "name": "m", "dtype": "int32", "shape": [16]},
      {"op": "allocate", "name": "m_in", "dtype": "int32", "shape": [2, 16]},
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [64]},
      {"op": "for", "index": "i", "start": 0, "stop": 5, "body": [
        {"op": "if", "cond": "rank == 0", "then": [
          {"op": "fill", "tensor": "m", "value": "i * 100", "step": 1},
          {"op": "fill", "tensor": "x", "value": -1},
          {"op": "communication", "name": "s0", "type": "send", "tensor": "m", "peer": 1,
           "backend": "ipc", "protocol": "eager"},
          {"op": "group", "name": "g0", "body": [
            {"op": "communication", "name": "s1", "type": "send", "tensor": "m", "peer": 1,
             "backend": "ipc", "protocol": "eager"},
            {"op": "communication", "name": "r0", "type": "recv", "tensor": "x", "peer": 1,
             "backend": "ipc", "protocol": "put"}]},
          {"op": "wait", "communication": "g0"},
          {"op": "wait", "communication": "s0"},
          {"op": "check", "tensor": "x", "value": "i * 1000", "step": 1}]},
        {"op": "if", "cond": "rank == 1", "then": [
          {"op": "fill", "tensor": "x", "value": "i * 1000", "step": 1},
          {"op": "fill", "tensor": "m_in", "value": -1},
          {"op": "group", "name": "g1", "body": [
            {"op": "communication", "name": "t0", "type": "send", "tensor": "x", "peer": 0,
             "backend": "ipc", "protocol": "put"},
            {"op": "communication", "name": "q0", "type": "recv", "tensor": "m_in[0]", "peer": 0,
             "backend": "ipc", "protocol": "eager"}]},
          {"op": "wait", "communication": "g1"},
          {"op": "communication", "name": "q1", "type": "recv", "tensor": "m_in[1]", "peer": 0,
           "backend": "ipc", "protocol": "eager"},
          {"op": "wait", "communication": "q1"},
          {"op": "check", "tensor": "m_in[0]", "value": "i * 100", "step": 1},
          {"op": "check", "tensor": "m_in[1]", "value": "i * 100", "step": 1}]}
      ]})";
  RunReport r = runProgram(program("announce_first", "", body), 1);
  EXPECT_TRUE(r.ok()) << r.format();
  const int rank = test::world().rank();
  EXPECT_EQ(r.checks_run, rank == 0 ? 5u : rank == 1 ? 10u : 0u);
}

// Eager messages above the lines (16 KiB; and 256 KiB, which a cuda device
// copies with a grid, through the slot), in every posting order of the
// ring, host-numbered and counted, from 0 and from across the wrap at 2^32,
// with 1 and 2 slots (one: every mark shares a word): a receiver that
// posted first may get its data directly (docs/ipc.md, "Direct delivery"),
// a later one through its slot; the data seeded by rank and iteration is
// right either way.
TEST(IpcEager, MessagesAboveTheLinesArriveWhicheverSideComesFirst) {
  struct Case {
    const char* slots;
    const char* counted;
    const char* start;
  };
  std::vector<Case> cases;
  for (const char* slots : {"1", "2"})
    for (const char* counted : {"0", "1"})
      for (const char* start : {"0", "4294967291"}) cases.push_back({slots, counted, start});
  for (const Case& c : cases) {
    ScopedEnv slots("HIR_IPC_EAGER_SLOTS", c.slots);
    ScopedEnv count("HIR_IPC_COUNTED", c.counted);
    ScopedEnv seq("HIR_IPC_SEQ_START", c.start);
    for (int order : {0, 1, 2}) {
      for (int n : {4096, 65536}) {
        std::string text = ringPatterns(Protocol::Eager, order);
        const std::string params = R"("n": 256, "iters": 100)";
        const std::size_t at = text.find(params);
        ASSERT_NE(at, std::string::npos);
        text.replace(at, params.size(), fmt::format(R"("n": {}, "iters": 20)", n));
        const std::string where = fmt::format("{} bytes, {} slots, counted {}, start {}, order {}",
                                              n * 4, c.slots, c.counted, c.start, order);
        RunReport r = runProgram(text, 2);
        EXPECT_TRUE(r.ok()) << where << ": " << r.format();
        EXPECT_EQ(r.checks_run, 40u) << where;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcProtocol,
                         ::testing::Combine(::testing::Values(Protocol::Put, Protocol::Get,
                                                              Protocol::Eager),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return protocolName(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "Counted" : "");
                         });

// ------------------------------------------------------------ exchanges

// `protocol`: "" (auto: eager at this size) or e.g. `, "protocol": "put"`.
std::string ringWithShares(const std::string& shares, int iters, const std::string& protocol = "") {
  const std::string body = fmt::format(
      R"({{"op": "allocate", "name": "a", "dtype": "int32", "shape": [32]}},
      {{"op": "allocate", "name": "b", "dtype": "int32", "shape": [32]}},
      {{"op": "for", "index": "i", "start": 0, "stop": {0}, "body": [
        {1}
        {{"op": "fill", "tensor": "a", "value": "rank + i * 10", "step": 1}},
        {{"op": "communication", "name": "s", "type": "send", "tensor": "a",
         "peer": "(rank + 1) % world", "backend": "ipc"{2}}},
        {{"op": "communication", "name": "r", "type": "recv", "tensor": "b",
         "peer": "(rank - 1 + world) % world", "backend": "ipc"{2}}},
        {{"op": "wait", "communication": "s"}},
        {{"op": "wait", "communication": "r"}},
        {{"op": "check", "tensor": "b", "value": "(rank - 1 + world) % world + i * 10",
         "step": 1}}
      ]}})",
      iters, shares, protocol);
  return program("ring", "", body);
}

TEST(Ipc, ASecondRunDoesNoExchange) {
  // The exchange sits inside the loop, as in design §3: only the first
  // execution goes through the bootstrap.
  Session session(test::world(), SessionOptions{testDevice()});
  Evaluator ev(session,
               parseProgram(ringWithShares(
                   R"({"op": "share_mem_handles", "communications": ["s", "r"]},)", 4)),
               options());
  EXPECT_EQ(ev.exchanges(), 0);
  ev.run();
  ev.synchronize();
  EXPECT_EQ(ev.exchanges(), 1);
  for (int run = 0; run < 5; ++run) ev.run();
  ev.synchronize();
  EXPECT_EQ(ev.exchanges(), 1);
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 24u);
}

TEST(Ipc, RepeatingAnExchangeOfTheSameCommunicationsIsANoOp) {
  int64_t exchanges = -1;
  RunReport r =
      runProgram(ringWithShares(R"({"op": "share_mem_handles", "communications": ["s", "r"]},
                        {"op": "share_mem_handles", "communications": ["r", "s"]},
                        {"op": "share_mem_handles", "communications": ["s"]},)",
                                3),
                 2, &exchanges);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(exchanges, 1);
}

// An explicit share_mem_handles that leaves out 'r': lowering adds an
// exchange for 'r' alone, and the program runs.
TEST(Ipc, ACommunicationLeftOutOfAnExplicitExchangeGetsAnImplicitOne) {
  const std::string text =
      ringWithShares(R"({"op": "share_mem_handles", "communications": ["s"]},)", 3);
  Session session(test::world(), SessionOptions{testDevice()});
  Evaluator ev(session, parseProgram(text), options());
  std::vector<std::vector<std::string>> shares;
  for (const Instr& in : ev.plan().code)
    if (auto* s = std::get_if<instr::Share>(&in.op)) {
      shares.emplace_back();
      for (int c : s->comms) shares.back().push_back(ev.plan().comms[c].name);
    }
  EXPECT_EQ(shares, (std::vector<std::vector<std::string>>{{"r"}, {"s"}}))
      << "expected the implicit exchange of 'r' before the loop, then the explicit one of 's'";
  ev.run();
  ev.run();
  ev.synchronize();
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 6u);
}

// ---------------------------------------------------------------- errors

TEST(Ipc, APeerOutsideTheWorldIsAValidationErrorNamingPathAndRank) {
  const std::string body = R"(
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [8]},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "rank + world",
       "backend": "ipc"},
      {"op": "wait", "communication": "s"})";
  Session session(test::world(), SessionOptions{testDevice()});
  try {
    Evaluator ev(session, parseProgram(program("out", "", body)), options());
    FAIL() << "a peer outside the world was accepted";
  } catch (const ValidationError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/1"));
    EXPECT_THAT(e.what(), HasSubstr("on rank 0: peer rank + world evaluates to"));
    EXPECT_THAT(e.what(), HasSubstr("outside the world"));
  }
}

// An explicit exchange placed before the allocations it should cover: the
// cross-rank check refuses it at load, naming the node and the buffer
// (issue 40); without the check, the post says so on every rank (instead of
// moving data to stale memory).
TEST(Ipc, AnExchangeBeforeTheAllocationIsAClearErrorAtThePost) {
  const std::string body = R"(
      {"op": "share_mem_handles", "communications": ["s", "r"]},
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [8]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [8]},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a",
       "peer": "(rank + 1) % world", "backend": "ipc"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b",
       "peer": "(rank - 1 + world) % world", "backend": "ipc"},
      {"op": "wait", "communication": "s"},
      {"op": "wait", "communication": "r"})";
  Session session(test::world(), SessionOptions{testDevice()});
  try {
    Evaluator checked(session, parseProgram(program("early", "", body)), options());
    FAIL() << "the check let an exchange before its allocations through";
  } catch (const ValidationError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/body/0: on rank 0: share_mem_handles exchanges the memory "
                                    "of 's', but its buffer 'a' is not allocated here"));
  }
  EvaluatorOptions unchecked = options();
  unchecked.check_schedule = false;
  Evaluator ev(session, parseProgram(program("early", "", body)), unchecked);
  try {
    ev.run();
    FAIL() << "a post into memory never exchanged went ahead";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("/body/3: on rank {}: 'a' got new memory (it was "
                                                "never exchanged) after the last "
                                                "share_mem_handles that covered it",
                                                test::world().rank())));
  }
}

// Put maps the receiver's buffer: a caller's buffer there cannot be shared.
// Every rank fails the same exchange with the same message (no rank hangs).
TEST(Ipc, ACallerBufferThatPeersMustMapFailsTheExchangeOnEveryRank) {
  const std::string body = R"(
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [8]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [8]},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a",
       "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "put"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b",
       "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "put"},
      {"op": "wait", "communication": "s"},
      {"op": "wait", "communication": "r"})";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(program("bound", "", body, R"("b")")), options());
  std::vector<int32_t> mine(8);
  ev.bind("b", mine.data(), sizeof(int32_t) * mine.size());
  try {
    ev.run();
    FAIL() << "a caller's buffer was exported";
  } catch (const RuntimeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ipc: share_mem_handles failed on"));
    EXPECT_THAT(e.what(), HasSubstr("rank 0: 'b' (allocation #1, recv from rank"));
    EXPECT_THAT(e.what(), HasSubstr("bound to a caller's buffer"));
  }
}

// --------------------------------------------------- memory and teardown

// Resident memory of this process, in bytes.
long residentBytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Mappings of hostir memory (memfd blocks, ours and imported).
int hostirMappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    n += line.find("memfd:hostir") != std::string::npos;
  return n;
}

// Whether this build runs under a sanitizer, whose allocator (quarantine,
// shadow memory) grows resident memory on its own.
constexpr bool kSanitized = HIR_TEST_SANITIZED;

TEST(Ipc, AThousandRunsLeaveResidentMemoryFlat) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  // The same answer on every rank (one build): a collective skip.
  if (kSanitized) GTEST_SKIP() << "resident memory is the sanitizer's under a sanitizer build";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(ringWithShares("", 2)), options());
  auto runs = [&](int n) {
    for (int k = 0; k < n; ++k) {
      ev.run();
      if (k % 50 == 49) ev.synchronize();  // bounds the work in flight
    }
    ev.synchronize();
  };
  runs(100);  // warm-up: caches, pools, thread stacks
  const long before = residentBytes();
  runs(1000);
  const long after = residentBytes();
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2200u);
  EXPECT_EQ(ev.exchanges(), 1);
  // Measured: a few KiB either way (malloc noise); a leak of one event,
  // closure or mapping per message would be 1000 x 2 or more.
  EXPECT_LT(after - before, 512 * 1024)
      << "resident memory grew from " << before << " to " << after << " bytes over 1000 runs";
  if (test::world().rank() == 0)
    std::printf("[ ipc ] resident memory over 1000 runs: %ld -> %ld bytes (%+ld)\n", before, after,
                after - before);
}

TEST(Ipc, TeardownUnmapsEveryPeerBlockAndFreesEveryBlock) {
  const int baseline = hostirMappings();
  {
    Session session(test::world(), SessionOptions{"host"});
    Evaluator ev(session, parseProgram(ringWithShares("", 2, R"(, "protocol": "put")")),
                 options());
    ev.run();
    ev.synchronize();
    EXPECT_TRUE(ev.report().ok()) << ev.report().format();
    // Ours (a, b, the signal page) and, from another rank, its b and page.
    EXPECT_GE(hostirMappings(), baseline + (test::world().world() > 1 ? 5 : 3));
  }
  EXPECT_EQ(hostirMappings(), baseline);
}

// Eager messages go through the signal pages' slots: the exchange maps the
// peers' pages and no buffer (put maps the peer's b too: the test above).
TEST(Ipc, EagerMessagesMapOnlyThePeersPages) {
  const int baseline = hostirMappings();
  {
    Session session(test::world(), SessionOptions{"host"});
    Evaluator ev(session, parseProgram(ringWithShares("", 2, R"(, "protocol": "eager")")),
                 options());
    ev.run();
    ev.synchronize();
    EXPECT_TRUE(ev.report().ok()) << ev.report().format();
    // Ours (a, b, the signal page, the release word of waits for lines)
    // and the pages of the ring's two neighbours (one rank at world 2, none
    // at world 1): no block of theirs.
    const int w = test::world().world();
    EXPECT_EQ(hostirMappings(), baseline + 4 + std::min(w - 1, 2));
  }
  EXPECT_EQ(hostirMappings(), baseline);
}

// Eager messages too large for lines (16 KiB) may be delivered straight
// into a receive buffer that was posted first (docs/ipc.md): the receiver's
// buffer is mapped by its sender, on top of the pages (none at world 1,
// where a rank sends to itself). With HIR_IPC_DIRECT=0 only the pages.
TEST(Ipc, EagerMessagesAboveTheLinesMapTheReceiveBuffersForDirectDelivery) {
  const int baseline = hostirMappings();
  const char* off = std::getenv("HIR_IPC_DIRECT");
  const bool direct = off == nullptr || std::string_view(off) != "0";
  std::string text = ringWithShares("", 3, R"(, "protocol": "eager")");
  for (std::size_t at; (at = text.find("[32]")) != std::string::npos;)
    text.replace(at, 4, "[4096]");
  {
    Session session(test::world(), SessionOptions{"host"});
    Evaluator ev(session, parseProgram(text), options());
    ev.run();
    ev.synchronize();
    EXPECT_TRUE(ev.report().ok()) << ev.report().format();
    const int w = test::world().world();
    EXPECT_EQ(hostirMappings(), baseline + 4 + std::min(w - 1, 2) + (direct && w > 1 ? 1 : 0));
  }
  EXPECT_EQ(hostirMappings(), baseline);
}

// Rank 0's second run posts a message that rank 1 posts only seconds later:
// rank 0 times out, and its teardown must end promptly (the run's failure
// aborted the backend, which released its own stuck waits, and the device
// abandoned its queued work) rather than after the device's 10-minute
// stream-wait limit. Rank 1 then runs against a peer that gave up: its
// messages may complete (if rank 0's released copy ran before its queued
// work was abandoned) or time out in turn, promptly too, naming them; it
// never hangs, and rank 0's memory, left mapped, stays valid.
TEST(Ipc, TeardownAfterATimedOutRunEndsPromptly) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  using Clock = std::chrono::steady_clock;
  const int rank = test::world().rank();
  const std::string body = R"(
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [64]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [64]},
      {"op": "share_mem_handles", "communications": ["s", "r"]},
      {"op": "if", "cond": "rank < 2", "then": [
        {"op": "fill", "tensor": "a", "value": "rank", "step": 1},
        {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "1 - rank",
         "backend": "ipc"},
        {"op": "communication", "name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank",
         "backend": "ipc"},
        {"op": "wait", "communication": "s"},
        {"op": "wait", "communication": "r"},
        {"op": "check", "tensor": "b", "value": "1 - rank", "step": 1}]})";
  Session session(test::world(), SessionOptions{"host"});
  EvaluatorOptions o = options();
  o.timeout = std::chrono::milliseconds(500);
  double teardown_s = 0, second_run_s = 0;
  {
    auto ev = std::make_unique<Evaluator>(session, parseProgram(program("late", "", body)), o);
    ev->run();  // the exchange, and a first message both ways
    ev->synchronize();
    test::world().barrier();
    if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(4));
    const auto t0 = Clock::now();
    try {
      ev->run();
      ev->synchronize();
      EXPECT_NE(rank, 0) << "rank 0 did not time out while rank 1 slept";
      if (rank != 0) EXPECT_TRUE(ev->report().ok()) << ev->report().format();
    } catch (const TimeoutError& e) {
      EXPECT_LT(rank, 2) << e.what();
      // The recv is what rank 0 waits for; it joined stream 0, so the
      // report can only name it through that stream.
      EXPECT_NE(std::string(e.what()).find(
                    "'r' (recv) at /body/3/then/2, on stream 0, which has not finished"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(fmt::format(
                    "queued  'r' recv #2 from rank {} at /body/3/then/2 on ipc, run 2", 1 - rank)),
                std::string::npos)
          << e.what();
    }
    second_run_s = std::chrono::duration<double>(Clock::now() - t0).count();
    const auto t1 = Clock::now();
    ev.reset();
    teardown_s = std::chrono::duration<double>(Clock::now() - t1).count();
  }
  EXPECT_LT(second_run_s, 2.0) << "the second run took " << second_run_s << " s";
  EXPECT_LT(teardown_s, 2.0) << "teardown after a timeout took " << teardown_s << " s";
  test::world().barrier();
}

// ---------------------------------------------- the backend, without evaluator

// A host device and an ipc backend set up on it (collective).
struct Harness {
  Harness() : device(testTimeout()) {
    backend = findBackend("ipc")->create();
    BackendContext ctx;
    ctx.device = &device;
    ctx.bootstrap = &test::world();
    ctx.teams = {{}};
    for (int r = 0; r < test::world().world(); ++r) ctx.teams[0].push_back(r);
    ctx.timeout = testTimeout();
    ctx.largest_eager_send = 0;  // its messages are small: slots of HIR_IPC_EAGER_MAX
    ctx.settings = Settings::fromEnvironment();
    backend->setup(ctx);
  }
  ~Harness() { backend.reset(); }
  HostDevice device;
  std::unique_ptr<Backend> backend;
};

PostArgs sendToNext(void* data, std::size_t count) {
  const int rank = test::world().rank(), world = test::world().world();
  PostArgs a;
  a.type = CommType::Send;
  a.dtype = DType::Int32;
  a.input = data;
  a.count = count;
  a.peer = (rank + 1) % world;
  a.comm = 0;
  a.input_alloc = 0;
  a.remote.alloc = 1;
  a.remote.pair_seq = 1;
  a.path = "/body/7";
  return a;
}

namespace {

// A host device whose copy to `gated` (set by the test) waits on its stream
// until the test opens the gate.
class GatedCopy : public HostDevice {
 public:
  using HostDevice::HostDevice;
  void copy(Stream& s, void* dst, const void* src, std::size_t bytes) override {
    if (dst == gated) launchHostFunc(s, gate.task());
    HostDevice::copy(s, dst, src, bytes);
  }
  void* gated = nullptr;
  test::Gate gate;
};

}  // namespace

// An allgather of 4 MiB per rank, on the backend alone: its put messages go
// to the peers while its local copy (the rank's own chunk) runs beside
// them, on a stream of its own, which the collective's completion still
// waits for. Rank 0's local copy is held: every other rank's allgather
// completes all the same (rank 0's puts did not queue behind it), and rank
// 0's does not until the copy is let go.
TEST(IpcBackend, ALargeLocalCopyRunsBesideTheTransfersAndIsPartOfTheCollective) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  const int rank = test::world().rank(), world = test::world().world();
  GatedCopy device(testTimeout());
  std::unique_ptr<Backend> backend = findBackend("ipc")->create();
  BackendContext ctx;
  ctx.device = &device;
  ctx.bootstrap = &test::world();
  ctx.teams = {{}};
  for (int r = 0; r < world; ++r) ctx.teams[0].push_back(r);
  ctx.timeout = testTimeout();
  ctx.largest_eager_send = 0;
  ctx.settings = Settings::fromEnvironment();
  backend->setup(ctx);
  const std::size_t c = (std::size_t{4} << 20) / sizeof(int32_t) + 3, size = sizeof(int32_t);
  auto* in = static_cast<int32_t*>(device.allocate(c * size));
  auto* out = static_cast<int32_t*>(device.allocate(world * c * size));
  Stream& s = device.defaultStream();
  device.fill(s, in, DType::Int32, c, rank * 100, 1);
  device.fill(s, out, DType::Int32, world * c, -7, 0);
  device.synchronize(s, testTimeout());
  // Allocation 0 is every rank's input, 1 its output; each pair's first
  // message is number 1.
  std::vector<CollectiveMessage> messages;
  ASSERT_EQ(ipcCollectiveMessages({CommType::Allgather, DType::Int32, c, world, rank, 0, false},
                                  Settings::fromEnvironment(), messages),
            "copies");
  std::vector<ShareItem> items;
  std::vector<CollectivePiece> pieces;
  for (const CollectiveMessage& m : messages) {
    const bool send = m.from == rank;
    ShareItem item;
    item.comm = 0;
    item.type = send ? CommType::Send : CommType::Recv;
    item.peer = send ? m.to : m.from;
    item.alloc = send ? 0 : 1;
    item.base = send ? static_cast<void*>(in) : out;
    item.bytes = send ? c * size : world * c * size;
    item.peer_alloc = send ? 1 : 0;
    item.protocol = m.protocol;
    item.name = send ? "in" : "out";
    item.largest_message = c * size;
    items.push_back(item);
    CollectivePiece piece;
    piece.message = m;
    piece.peer_rank = item.peer;
    piece.peer.alloc = item.peer_alloc;
    piece.peer.offset = (send ? m.to_offset : m.from_offset) * size;
    piece.peer.pair_seq = 1;
    pieces.push_back(piece);
  }
  backend->shareMemHandles(items);
  PostArgs a;
  a.type = CommType::Allgather;
  a.dtype = DType::Int32;
  a.input = in;
  a.output = out;
  a.count = c;
  a.comm = 0;
  a.input_alloc = 0;
  a.output_alloc = 1;
  a.path = "/body/2";
  a.pieces = pieces;
  if (rank == 0) device.gated = out;  // its own chunk, the first
  std::unique_ptr<Event> done = device.createEvent();
  backend->post({&a, 1}, s, *done);
  if (rank != 0) {
    device.gate.open();
    EXPECT_NO_THROW(device.synchronize(*done, std::chrono::seconds(10)))
        << "rank " << rank << "'s allgather did not complete while rank 0's local copy was held";
  }
  test::world().barrier();
  if (rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(device.query(*done)) << "the allgather completed before its local copy ran";
    device.gate.open();
    device.synchronize(*done, testTimeout());
  }
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(out[r * c], r * 100) << "chunk " << r;
    EXPECT_EQ(out[r * c + c - 1], static_cast<int32_t>(r * 100 + c - 1)) << "chunk " << r;
  }
  test::world().barrier();
  backend.reset();
  device.deallocate(in);
  device.deallocate(out);
}

TEST(IpcBackend, PostingBeforeAnyExchangeIsAClearError) {
  Harness h;
  void* data = h.device.allocate(64);
  PostArgs a = sendToNext(data, 16);
  std::unique_ptr<Event> done = h.device.createEvent();
  try {
    h.backend->post(std::span<const PostArgs>(&a, 1), h.device.defaultStream(), *done);
    FAIL() << "a send was posted without an exchange";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr(fmt::format("ipc: /body/7: send to rank {} before any share_mem_handles "
                                      "exchanged with rank {}",
                                      a.peer, a.peer)));
  }
  h.device.deallocate(data);
}

// The evaluator always fills the peer's address: a post without it is a bug
// of the caller, not of the program.
TEST(IpcBackend, PostingWithoutThePeerAddressIsAnInternalError) {
  Harness h;
  void* data = h.device.allocate(64);
  PostArgs a = sendToNext(data, 16);
  a.remote.pair_seq = 0;
  std::unique_ptr<Event> done = h.device.createEvent();
  try {
    h.backend->post(std::span<const PostArgs>(&a, 1), h.device.defaultStream(), *done);
    FAIL() << "a send was posted without its message number";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("was posted without the peer's address"));
  }
  h.device.deallocate(data);
}

// The exchange covered the signal pages but not the allocation the post
// names: the post says which allocation of which rank is missing.
TEST(IpcBackend, PostingIntoAnAllocationNeverExchangedIsAClearError) {
  Harness h;
  const int rank = test::world().rank(), world = test::world().world();
  void* data = h.device.allocate(64);
  ShareItem send;
  send.comm = 0;
  send.type = CommType::Send;
  send.peer = (rank + 1) % world;
  send.alloc = 0;
  send.base = data;
  send.bytes = 64;
  send.peer_alloc = 1;
  send.name = "a";
  ShareItem recv = send;
  recv.comm = 1;
  recv.type = CommType::Recv;
  recv.peer = (rank - 1 + world) % world;
  recv.alloc = 1;
  recv.base = nullptr;  // no memory yet: nothing to export
  recv.peer_alloc = 0;
  std::vector<ShareItem> items{send, recv};
  h.backend->shareMemHandles(items);
  EXPECT_EQ(static_cast<IpcBackend&>(*h.backend).exchanges(), 1);
  PostArgs a = sendToNext(data, 16);
  std::unique_ptr<Event> done = h.device.createEvent();
  try {
    h.backend->post(std::span<const PostArgs>(&a, 1), h.device.defaultStream(), *done);
    FAIL() << "a send into an allocation never exchanged was posted";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("send to rank {} (put): rank {}'s allocation #1 "
                                                "was never exchanged",
                                                a.peer, a.peer)));
  }
  h.device.deallocate(data);
}

TEST(IpcBackend, AutoNeverPicksIpcAndIpcRefusesRootedReductionsAndOtherNodes) {
  SupportQuery q{"host", CommType::Send};
  EXPECT_EQ(selectBackend(backendCatalog(), "auto", q, "").name, "mpi");
  const BackendCaps ipc = IpcBackend::caps();
  EXPECT_TRUE(supports(ipc, q).ok);
  q.type = CommType::Allgather;
  EXPECT_TRUE(supports(ipc, q).ok);
  EXPECT_EQ(selectBackend(backendCatalog(), "auto", q, "").name, "mpi");
  q.type = CommType::Gather;
  EXPECT_EQ(supports(ipc, q).why,
            "backend 'ipc' runs allgather, allreduce, reduce_scatter, broadcast, alltoall, send, "
            "recv, not gather");
  q.type = CommType::Recv;
  q.peer_on_other_node = true;
  EXPECT_THAT(supports(ipc, q).why, HasSubstr("both ranks must be on one node"));
  q.peer_on_other_node = false;
  q.protocol = Protocol::Get;
  EXPECT_TRUE(supports(ipc, q).ok);
  EXPECT_TRUE(findBackend("ipc")->caps.maps_peer_memory);
  EXPECT_LT(findBackend("ipc")->caps.auto_priority, 1);
  // "auto" with a protocol: mpi takes none, and ipc is never picked.
  try {
    selectBackend(backendCatalog(), "auto", q, "/body/3");
    FAIL() << "auto picked a backend for a recv with protocol get";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("/body/3: no backend can run recv of float32 on device 'host'"));
    EXPECT_THAT(e.what(),
                HasSubstr("backend 'mpi' takes no protocol, yet protocol 'get' is given"));
    EXPECT_THAT(e.what(), HasSubstr("backend 'ipc' could, but \"auto\" never picks it"));
  }
}

// ------------------------------------------------- an embedder's device

// A host device without a message protocol of its own (messages() null),
// as an embedder's device is: ipc runs its protocol over the device's
// public calls (messagesOf's generic one: waitValue, copy, writeValue,
// reduce), with no counted and no inline part.
class PublicCallsOnly : public HostDevice {
 public:
  using HostDevice::HostDevice;
  DeviceMessages* messages() override { return nullptr; }
};

// Registers PublicCallsOnly as device "host-public-calls" (once).
void registerPublicCallsOnly() {
  static std::once_flag once;
  std::call_once(once, [] {
    registerDevice(DeviceInfo{
        "host-public-calls", [](std::string*) { return true; },
        [](int, const Settings&) -> std::unique_ptr<Device> {
          return std::make_unique<PublicCallsOnly>(testTimeout());
        }});
  });
}

// The ring of every protocol (put, get, eager; mixed posting order) and
// the examples of eager messages (puts above the eager limit) and of
// collectives, seeded data checked, on a device whose messages() is null.
TEST(IpcOverPublicCalls, MessagesAndCollectivesArriveOnADeviceWithoutItsOwnProtocol) {
  registerPublicCallsOnly();
  ASSERT_EQ(createDevice("host-public-calls", 0)->messages(), nullptr);
  for (Protocol p : {Protocol::Put, Protocol::Get, Protocol::Eager}) {
    const RunReport r = runProgram(ringPatterns(p, 2), 1, nullptr, "host-public-calls");
    EXPECT_TRUE(r.ok()) << protocolName(p) << ": " << r.format();
    EXPECT_EQ(r.checks_run, 100u) << protocolName(p);
  }
  for (const char* example : {"eager_messages_ipc.json", "collectives_ipc.json"}) {
    const std::string text = test::readFile(test::examplesDir() + "/" + example);
    const RunReport r = runProgram(text, 2, nullptr, "host-public-calls");
    EXPECT_TRUE(r.ok()) << example << ": " << r.format();
    EXPECT_GT(r.checks_run, 0u) << example;
  }
}

// --------------------------------------------------------- two fake nodes

// True when this world spans more than one node (HIR_FAKE_NODES=2).
bool spansNodes() {
  const std::vector<std::string>& nodes = test::world().nodes();
  return std::adjacent_find(nodes.begin(), nodes.end(), std::not_equal_to<>()) != nodes.end();
}

TEST(IpcFakeNodes, IpcToAPeerOnAnotherNodeIsAValidationErrorNamingPathRankAndPeer) {
  if (!spansNodes()) GTEST_SKIP() << "needs ranks on two nodes (HIR_FAKE_NODES=2)";
  Session session(test::world(), SessionOptions{"host"});
  try {
    Evaluator ev(session, parseProgram(ringWithShares("", 1)), options());
    FAIL() << "ipc was accepted between nodes";
  } catch (const ValidationError& e) {
    const std::vector<std::string>& nodes = test::world().nodes();
    // The first rank whose next rank is on another node.
    int from = 0;
    while (nodes[from] == nodes[(from + 1) % nodes.size()]) ++from;
    const int to = (from + 1) % static_cast<int>(nodes.size());
    EXPECT_THAT(e.what(), HasSubstr(fmt::format(
                              "/body/2/body/1: on rank {} (i=0): send to rank {} through backend "
                              "'ipc', but rank {} is on node '{}' and rank {} on node '{}'",
                              from, to, to, nodes[to], from, nodes[from])));
    EXPECT_THAT(e.what(), HasSubstr("both ranks must be on one node"));
  }
}

TEST(IpcFakeNodes, AutoBindsTheSameRingToMpiAndRuns) {
  std::string text = ringWithShares("", 3);
  for (std::size_t at; (at = text.find("\"ipc\"")) != std::string::npos;)
    text.replace(at, 5, "\"auto\"");
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(text), options());
  ASSERT_EQ(ev.plan().backends.size(), 1u);
  EXPECT_EQ(ev.plan().backends[0].name, "mpi");
  ev.run();
  ev.synchronize();
  EXPECT_TRUE(ev.report().ok()) << ev.report().format();
  EXPECT_EQ(ev.exchanges(), 0);
}

// Ranks 2k and 2k + 1 share a node under HIR_FAKE_NODES=2 with 4 ranks:
// ipc between them works while the world spans two nodes.
TEST(IpcFakeNodes, IpcBetweenRanksOfOneNodeWorks) {
  const int rank = test::world().rank(), world = test::world().world();
  if (world % 2 != 0) GTEST_SKIP() << "needs an even world";
  const std::vector<std::string>& nodes = test::world().nodes();
  for (int r = 0; r < world; r += 2)
    if (nodes[r] != nodes[r + 1]) GTEST_SKIP() << "ranks " << r << " and " << r + 1 << " differ";
  const std::string body = R"(
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [16]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [16]},
      {"op": "fill", "tensor": "a", "value": "rank * 50", "step": 1},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "rank ^ 1",
       "backend": "ipc", "protocol": "get"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b", "peer": "rank ^ 1",
       "backend": "ipc", "protocol": "get"},
      {"op": "wait", "communication": "s"},
      {"op": "wait", "communication": "r"},
      {"op": "check", "tensor": "b", "value": "(rank ^ 1) * 50", "step": 1})";
  RunReport r = runProgram(program("pairs", "", body), 2);
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2u);
  (void)rank;
}

}  // namespace
}  // namespace hir
