// ipc's collectives (backends/ipc/collectives.h) through the evaluator, at
// any world size: every type, dtype and reduce op on data seeded by rank and
// iteration, outputs poisoned before each post, checked on the device
// against the host's arithmetic; in and out of place; with the host's
// message numbers, with counted ones (graph mode's), and with allreduce
// forced to two-shot. Under HIR_TEST_DEVICE=cuda (gpu-check) they run on
// GPUs. Then what the cross-rank check refuses, the exchange cache, and a
// group mixing a collective with sends and recvs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <hostir/evaluator.h>
#include <hostir/json.h>
#include <hostir/session.h>
#include "common/check.h"
#include "support/mpi_test.h"
#include "support/test_util.h"

namespace hir {
namespace {

using ::testing::HasSubstr;
using test::testDevice;

EvaluatorOptions options() {
  EvaluatorOptions o;
  const char* s = std::getenv("HIR_TEST_TIMEOUT_S");
  o.timeout = std::chrono::seconds(s != nullptr ? std::atoi(s) : 60);
  return o;
}

std::string program(const std::string& params, const std::string& body) {
  return fmt::format(R"({{"format": "hostir/1", "name": "ipc_collective", "params": {{{}}},
    "body": [{}]}})",
                     params, body);
}

// How the backend numbers messages and splits allreduce. Default: small
// chunks (all but the large cases') go eager; NoEager turns eager off
// (HIR_IPC_EAGER_MAX=0), so that they run put and get; TwoShot forces
// allreduce to two-shot (eager off too, which would take it first). Wrap:
// message numbers start 6 below 2^32 (HIR_IPC_SEQ_START), so that two runs
// of three collectives cross the wrap on every lane. Split: a broadcast of
// 3 ranks or more is scatter-allgather at any size (eager off too, which
// would take the small ones first); CountedSplit the same, counted.
enum class Mode {
  Default, NoEager, TwoShot, Counted, CountedNoEager, Wrap, WrapNoEager, Split, CountedSplit
};

// Sets the environment of a mode for the lifetime of an evaluator.
class ModeEnv {
 public:
  explicit ModeEnv(Mode m) {
    if (m == Mode::NoEager || m == Mode::TwoShot || m == Mode::CountedNoEager ||
        m == Mode::WrapNoEager || m == Mode::Split || m == Mode::CountedSplit)
      ::setenv("HIR_IPC_EAGER_MAX", "0", 1);
    if (m == Mode::TwoShot) ::setenv("HIR_IPC_ONE_SHOT_MAX", "0", 1);
    if (m == Mode::Split || m == Mode::CountedSplit)
      ::setenv("HIR_IPC_BROADCAST_SPLIT_MIN", "0", 1);
    if (m == Mode::Counted || m == Mode::CountedNoEager || m == Mode::CountedSplit)
      ::setenv("HIR_IPC_COUNTED", "1", 1);
    if (m == Mode::Wrap || m == Mode::WrapNoEager)
      ::setenv("HIR_IPC_SEQ_START", "4294967290", 1);
  }
  ~ModeEnv() {
    ::unsetenv("HIR_IPC_EAGER_MAX");
    ::unsetenv("HIR_IPC_ONE_SHOT_MAX");
    ::unsetenv("HIR_IPC_BROADCAST_SPLIT_MIN");
    ::unsetenv("HIR_IPC_COUNTED");
    ::unsetenv("HIR_IPC_SEQ_START");
  }
  ModeEnv(const ModeEnv&) = delete;
  ModeEnv& operator=(const ModeEnv&) = delete;
};

struct Case {
  CommType type;
  ReduceOp op = ReduceOp::Sum;
  DType dtype = DType::Float32;
  int n = 8;  // elements of a rank's chunk
  bool in_place = false;
  Mode mode = Mode::Default;
};

// Rank r's input in iteration `it` is r * 2 + it * 3 + 1 + j at element j
// (prod: 1 or 2), small enough to be exact in every dtype at 4 ranks with
// n = 8; the output is poisoned with -7 before each post.
constexpr int kIters = 3;
const char* kBase = "rank * 2 + it * 3 + 1";

std::string body(const Case& c) {
  const std::string dt(toString(c.dtype));
  std::string alloc, fill, comm, check;
  auto allocate = [&](const char* name, const char* shape) {
    alloc += fmt::format(R"({{"op": "allocate", "name": "{}", "dtype": "{}", "shape": {}}},)",
                         name, dt, shape);
  };
  auto fillWith = [&](const std::string& tensor, const std::string& value, const std::string& step) {
    fill += fmt::format(R"({{"op": "fill", "tensor": "{}", "value": "{}", "step": "{}"}},)", tensor,
                        value, step);
  };
  auto checkThat = [&](const std::string& tensor, const std::string& value,
                       const std::string& step) {
    check += fmt::format(R"(,{{"op": "check", "tensor": "{}", "value": "{}", "step": "{}"}})",
                         tensor, value, step);
  };
  std::string input = "x", output = "y", extra;
  switch (c.type) {
    case CommType::Allreduce: {
      allocate("x", R"(["n"])");
      if (c.in_place) output = "x"; else allocate("y", R"(["n"])");
      if (c.op == ReduceOp::Prod) fillWith("x", "1 + (rank + it) % 2", "0");
      else fillWith("x", kBase, "1");
      if (!c.in_place) fillWith("y", "-7", "0");
      extra = fmt::format(R"(, "reduce": "{}")", toString(c.op));
      switch (c.op) {
        case ReduceOp::Sum: checkThat(output, "world * (world - 1) + world * (it * 3 + 1)", "world"); break;
        case ReduceOp::Avg: checkThat(output, "world - 1 + it * 3 + 1", "1"); break;
        case ReduceOp::Max: checkThat(output, "(world - 1) * 2 + it * 3 + 1", "1"); break;
        case ReduceOp::Min: checkThat(output, "it * 3 + 1", "1"); break;
        case ReduceOp::Prod: checkThat(output, "1 << ((world + it % 2) / 2)", "0"); break;
      }
      break;
    }
    case CommType::ReduceScatter:
      allocate("x", R"(["world", "n"])");
      if (c.in_place) output = "x[rank]"; else allocate("y", R"(["n"])");
      fillWith("x", kBase, "1");
      if (!c.in_place) fillWith("y", "-7", "0");
      extra = fmt::format(R"(, "reduce": "{}")", toString(c.op));
      if (c.op == ReduceOp::Max)
        checkThat(output, "(world - 1) * 2 + it * 3 + 1 + rank * n", "1");
      else
        checkThat(output, "world * (world - 1) + world * (it * 3 + 1) + world * rank * n", "world");
      break;
    case CommType::Allgather:
      allocate("y", R"(["world", "n"])");
      if (c.in_place) input = "y[rank]"; else allocate("x", R"(["n"])");
      fillWith("y", "-7", "0");
      fillWith(input, kBase, "1");
      check = R"(,{"op": "for", "index": "c", "start": 0, "stop": "world", "body": [)";
      check += R"({"op": "check", "tensor": "y[c]", "value": "c * 2 + it * 3 + 1", "step": 1}]})";
      break;
    case CommType::Alltoall:
      allocate("x", R"(["world", "n"])");
      allocate("y", R"(["world", "n"])");
      fillWith("x", kBase, "1");
      fillWith("y", "-7", "0");
      check = R"(,{"op": "for", "index": "c", "start": 0, "stop": "world", "body": [)";
      check += R"({"op": "check", "tensor": "y[c]", "value": "c * 2 + it * 3 + 1 + rank * n",)";
      check += R"( "step": 1}]})";
      break;
    case CommType::Broadcast:
      allocate("x", R"(["n"])");
      if (c.in_place) output = "x"; else allocate("y", R"(["n"])");
      fillWith("x", kBase, "1");
      if (!c.in_place) fillWith("y", "-7", "0");
      extra = R"(, "root": "it % world")";
      checkThat(output, "it % world * 2 + it * 3 + 1", "1");
      break;
    default:
      ADD_FAILURE() << "no seeded program for " << toString(c.type);
  }
  return fmt::format(
      R"({} {{"op": "for", "index": "it", "start": 0, "stop": {}, "body": [{}
        {{"op": "communication", "name": "coll", "type": "{}", "input": "{}", "output": "{}",
         "backend": "ipc"{}}},
        {{"op": "wait", "communication": "coll"}}{}]}})",
      alloc, kIters, fill, toString(c.type), input, output, extra, check);
}

class IpcCollectiveSeeded : public ::testing::TestWithParam<Case> {};

TEST_P(IpcCollectiveSeeded, MatchesTheHostReferenceInEveryIteration) {
  const Case& c = GetParam();
  ModeEnv env(c.mode);
  Session session(test::world(), SessionOptions{testDevice()});
  Evaluator ev(session, parseProgram(program(fmt::format(R"("n": {})", c.n), body(c))), options());
  ev.run();
  ev.run();  // a second run continues the message numbers, with no exchange
  ev.synchronize();
  const RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  const uint64_t per_it = c.type == CommType::Allgather || c.type == CommType::Alltoall
                              ? static_cast<uint64_t>(test::world().world())
                              : 1;
  EXPECT_EQ(r.checks_run, 2 * kIters * per_it);  // this rank's, over both runs
  // One exchange at the first run (none at world 1, where nothing moves).
  EXPECT_EQ(ev.exchanges(), test::world().world() > 1 ? 1 : 0);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  constexpr DType kAll[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                            DType::Int32,   DType::Int64,   DType::UInt8};
  constexpr DType kSome[] = {DType::Float32, DType::BFloat16, DType::Int32, DType::UInt8};
  for (Mode m : {Mode::Default, Mode::NoEager, Mode::TwoShot, Mode::Counted, Mode::CountedNoEager})
    for (bool in_place : {false, true}) {
      for (DType t : kAll) out.push_back({CommType::Allreduce, ReduceOp::Sum, t, 8, in_place, m});
      if (m == Mode::Counted || m == Mode::CountedNoEager) continue;
      for (ReduceOp op : {ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg})
        for (DType t : kSome) out.push_back({CommType::Allreduce, op, t, 8, in_place, m});
    }
  for (Mode m : {Mode::Default, Mode::NoEager, Mode::Counted, Mode::CountedNoEager})
    for (bool in_place : {false, true}) {
      for (DType t : kAll) {
        out.push_back({CommType::ReduceScatter, ReduceOp::Sum, t, 8, in_place, m});
        out.push_back({CommType::Allgather, ReduceOp::Sum, t, 8, in_place, m});
        out.push_back({CommType::Broadcast, ReduceOp::Sum, t, 8, in_place, m});
        if (!in_place) out.push_back({CommType::Alltoall, ReduceOp::Sum, t, 8, false, m});
      }
      out.push_back({CommType::ReduceScatter, ReduceOp::Max, DType::Int32, 8, in_place, m});
    }
  // Broadcast by scatter-allgather (from 3 ranks; at 2, copies): every
  // dtype, and a count that splits unevenly over the members.
  for (Mode m : {Mode::Split, Mode::CountedSplit})
    for (bool in_place : {false, true}) {
      for (DType t : kAll) out.push_back({CommType::Broadcast, ReduceOp::Sum, t, 8, in_place, m});
      out.push_back({CommType::Broadcast, ReduceOp::Sum, DType::Int32, 70001, in_place, m});
    }
  // Chunks of 4 MiB and more: the broadcast's default split limit reached,
  // and a local copy (the root's, a member's own chunk) that runs on a
  // stream beside the transfers and is joined back before the collective
  // completes.
  for (bool in_place : {false, true}) {
    out.push_back({CommType::Broadcast, ReduceOp::Sum, DType::Float32, (1 << 20) + 3, in_place,
                   Mode::Default});
    out.push_back({CommType::Allgather, ReduceOp::Sum, DType::Float32, (1 << 20) + 3, in_place,
                   Mode::Default});
  }
  out.push_back({CommType::Alltoall, ReduceOp::Sum, DType::Int32, (1 << 20) + 3, false,
                 Mode::Default});
  // Mid sizes: from 3 ranks each member's puts (or gets) are one message
  // step above one kernel's size (cuda: one grid, every push on its own
  // link), in 16-byte multiples and not (70001 below), with host and
  // counted numbers.
  for (Mode m : {Mode::Default, Mode::Counted})
    for (int count : {1 << 16, 70001}) {
      if (m == Mode::Default && count == 70001) continue;  // below
      out.push_back({CommType::Allgather, ReduceOp::Sum, DType::Int32, count, false, m});
      out.push_back({CommType::Alltoall, ReduceOp::Sum, DType::Int32, count, false, m});
    }
  // Across the wrap of the message numbers at 2^32, with host and counted
  // numbers alike (the counted ones start where the page does), eager or
  // not.
  for (Mode m : {Mode::Wrap, Mode::WrapNoEager}) {
    for (bool in_place : {false, true}) {
      out.push_back({CommType::Allreduce, ReduceOp::Sum, DType::Int32, 8, in_place, m});
      out.push_back({CommType::Allgather, ReduceOp::Sum, DType::Int32, 8, in_place, m});
    }
    out.push_back({CommType::Alltoall, ReduceOp::Sum, DType::Int32, 8, false, m});
    out.push_back({CommType::ReduceScatter, ReduceOp::Sum, DType::Int32, 8, false, m});
  }
  // Large and odd: uneven two-shot chunks, the copy engine and the
  // reduction kernel's vector path on GPUs. Out of place, 2 ranks default to
  // one-shot up to 16 MiB: TwoShot forces the uneven chunks there too.
  for (DType t : {DType::Float32, DType::Int32})
    for (bool in_place : {false, true}) {
      out.push_back({CommType::Allreduce, ReduceOp::Sum, t, 70001, in_place, Mode::Default});
      if (!in_place)
        out.push_back({CommType::Allreduce, ReduceOp::Sum, t, 70001, false, Mode::TwoShot});
      out.push_back({CommType::ReduceScatter, ReduceOp::Sum, t, 70001, in_place, Mode::Default});
      out.push_back({CommType::Allgather, ReduceOp::Sum, t, 70001, in_place, Mode::Default});
      out.push_back({CommType::Broadcast, ReduceOp::Sum, t, 70001, in_place, Mode::Default});
      if (!in_place)
        out.push_back({CommType::Alltoall, ReduceOp::Sum, t, 70001, false, Mode::Default});
    }
  return out;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = fmt::format("{}_{}_{}_n{}", toString(c.type),
                                 hasReduceOp(c.type) ? toString(c.op) : "copy", toString(c.dtype),
                                 c.n);
  if (c.in_place) name += "_inplace";
  switch (c.mode) {
    case Mode::Default: break;
    case Mode::NoEager: name += "_noeager"; break;
    case Mode::TwoShot: name += "_twoshot"; break;
    case Mode::Counted: name += "_counted"; break;
    case Mode::CountedNoEager: name += "_counted_noeager"; break;
    case Mode::Wrap: name += "_wrap"; break;
    case Mode::WrapNoEager: name += "_wrap_noeager"; break;
    case Mode::Split: name += "_split"; break;
    case Mode::CountedSplit: name += "_counted_split"; break;
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(IpcCollectives, IpcCollectiveSeeded, ::testing::ValuesIn(cases()),
                         caseName);

// ------------------------------------------------------ the check refuses

ValidationError loadFails(const std::string& body) {
  Session session(test::world(), SessionOptions{testDevice()});
  try {
    Evaluator ev(session, parseProgram(program(R"("n": 8)", body)), options());
  } catch (const ValidationError& e) {
    return e;
  }
  ADD_FAILURE() << "the program was accepted";
  return ValidationError(std::vector<ValidationError::Issue>{});
}

// Rank 0 posts the allreduce before its send to rank 1, rank 1 its recv
// before the allreduce: on the lane 0 -> 1 the allreduce's message would
// meet the send's.
TEST(IpcCollectivesCheck, ACollectiveAndASendInAnotherOrderOnTheirTwoRanksAreRejected) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  const ValidationError e = loadFails(R"(
    {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["n"]},
    {"op": "allocate", "name": "y", "dtype": "int32", "shape": ["n"]},
    {"op": "allocate", "name": "m", "dtype": "int32", "shape": ["n"]},
    {"op": "if", "cond": "rank == 0", "then": [
      {"op": "communication", "name": "ar0", "type": "allreduce", "input": "x", "output": "y", "reduce": "sum",
       "team": [0, 1], "backend": "ipc"},
      {"op": "communication", "name": "s", "type": "send", "tensor": "m", "peer": 1,
       "backend": "ipc"},
      {"op": "wait", "communication": "ar0"},
      {"op": "wait", "communication": "s"}
    ]},
    {"op": "if", "cond": "rank == 1", "then": [
      {"op": "communication", "name": "r", "type": "recv", "tensor": "m", "peer": 0,
       "backend": "ipc"},
      {"op": "communication", "name": "ar1", "type": "allreduce", "input": "x", "output": "y", "reduce": "sum",
       "team": [0, 1], "backend": "ipc"},
      {"op": "wait", "communication": "r"},
      {"op": "wait", "communication": "ar1"}
    ]})");
  EXPECT_THAT(e.what(), HasSubstr("rank 0's send #1 to rank 1"));
  EXPECT_THAT(e.what(), HasSubstr("is a message of allreduce 'ar0' but rank 1's recv #1 from rank "
                                  "0"));
  EXPECT_THAT(e.what(), HasSubstr("is recv 'r'; backend 'ipc' runs collectives as messages"));
}

// Eager off: in place on rank 0 (two-shot), out of place on the others
// (one-shot): their messages would not pair. (Eager, both are eager
// one-shot, in the seeded cases above.)
TEST(IpcCollectivesCheck, RanksThatPickDifferentAllreduceAlgorithmsAreRejected) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  ModeEnv env(Mode::NoEager);
  const ValidationError e = loadFails(R"(
    {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["n"]},
    {"op": "allocate", "name": "y", "dtype": "int32", "shape": ["n"]},
    {"op": "if", "cond": "rank == 0", "then": [
      {"op": "communication", "name": "inplace", "type": "allreduce", "input": "x", "reduce": "sum",
       "output": "x", "backend": "ipc"},
      {"op": "wait", "communication": "inplace"}
    ], "else": [
      {"op": "communication", "name": "apart", "type": "allreduce", "input": "x", "reduce": "sum",
       "output": "y", "backend": "ipc"},
      {"op": "wait", "communication": "apart"}
    ]})");
  EXPECT_THAT(e.what(), HasSubstr("collective #1 differs: rank 0 posts allreduce of 8 int32 with "
                                  "sum, two-shot"));
  EXPECT_THAT(e.what(), HasSubstr("posts allreduce of 8 int32 with sum, one-shot"));
}

// One collective, posted by different nodes on even and odd ranks (as a
// program with rank-dependent branches does): their messages pair.
TEST(IpcCollectivesCheck, OneCollectivePostedByDifferentNodesOnDifferentRanksRuns) {
  Session session(test::world(), SessionOptions{testDevice()});
  Evaluator ev(session, parseProgram(program(R"("n": 8)", R"(
    {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["n"]},
    {"op": "allocate", "name": "y", "dtype": "int32", "shape": ["n"]},
    {"op": "fill", "tensor": "x", "value": "rank", "step": 1},
    {"op": "if", "cond": "rank % 2 == 0", "then": [
      {"op": "communication", "name": "even", "type": "allreduce", "input": "x", "output": "y",
       "reduce": "sum", "backend": "ipc"},
      {"op": "wait", "communication": "even"}
    ], "else": [
      {"op": "communication", "name": "odd", "type": "allreduce", "input": "x", "output": "y",
       "reduce": "sum", "backend": "ipc"},
      {"op": "wait", "communication": "odd"}
    ]},
    {"op": "check", "tensor": "y", "value": "world * (world - 1) / 2", "step": "world"})")),
               options());
  ev.run();
  ev.synchronize();
  const RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 1u);
}

TEST(IpcCollectivesCheck, AnAlltoallInPlaceIsRejectedNamingTheNode) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);  // at 1 nothing moves, and in place is fine
  const ValidationError e = loadFails(R"(
    {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["world", "n"]},
    {"op": "communication", "name": "a2a", "type": "alltoall", "input": "x", "output": "x",
     "backend": "ipc"},
    {"op": "wait", "communication": "a2a"})");
  EXPECT_THAT(e.what(), HasSubstr("/body/1"));
  EXPECT_THAT(e.what(), HasSubstr("cannot run in place"));
}

// --------------------------------------------------------------- groups

// An allgather and a ring of sends and recvs, posted as one group on ipc:
// the ring's messages and the allgather's share the lanes, in order.
TEST(IpcCollectives, AGroupOfAnAllgatherAndARingRunsBothOverIterations) {
  for (Mode m : {Mode::Default, Mode::Counted, Mode::NoEager, Mode::CountedNoEager}) {
    ModeEnv env(m);
    Session session(test::world(), SessionOptions{testDevice()});
    Evaluator ev(session, parseProgram(program(R"("n": 64)", R"(
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "allocate", "name": "all", "dtype": "float32", "shape": ["world", "n"]},
      {"op": "allocate", "name": "from_prev", "dtype": "float32", "shape": ["n"]},
      {"op": "for", "index": "it", "start": 0, "stop": 4, "body": [
        {"op": "fill", "tensor": "x", "value": "rank * 100 + it", "step": 1},
        {"op": "fill", "tensor": "all", "value": -7},
        {"op": "fill", "tensor": "from_prev", "value": -7},
        {"op": "group", "name": "g", "body": [
          {"op": "communication", "name": "ag", "type": "allgather", "input": "x",
           "output": "all", "backend": "ipc"},
          {"op": "communication", "name": "s", "type": "send", "tensor": "x",
           "peer": "(rank + 1) % world", "backend": "ipc"},
          {"op": "communication", "name": "r", "type": "recv", "tensor": "from_prev",
           "peer": "(rank - 1 + world) % world", "backend": "ipc"}
        ]},
        {"op": "wait", "communication": "g"},
        {"op": "for", "index": "c", "start": 0, "stop": "world", "body": [
          {"op": "check", "tensor": "all[c]", "value": "c * 100 + it", "step": 1}
        ]},
        {"op": "check", "tensor": "from_prev", "value": "(rank - 1 + world) % world * 100 + it",
         "step": 1}
      ]})")),
                 options());
    ev.run();
    ev.synchronize();
    const RunReport r = ev.report();
    EXPECT_TRUE(r.ok()) << r.format();
    EXPECT_EQ(r.checks_run, 4u * static_cast<uint64_t>(test::world().world() + 1));
  }
}

// Get messages of a ring listed before an allreduce in one group: on the
// lane from the previous rank, the ring's copy runs after the allreduce's
// reduction although it comes first, so in counted mode the lane's counter
// must advance at the copy, the part enqueued last (eager off: the
// allreduce's messages are get messages of the same lane; eager on, they
// have counters of their own).
TEST(IpcCollectives, AGroupOfGetMessagesBeforeAnAllreduceRunsBothOverIterations) {
  for (Mode m : {Mode::Default, Mode::Counted, Mode::NoEager, Mode::CountedNoEager}) {
    ModeEnv env(m);
    Session session(test::world(), SessionOptions{testDevice()});
    Evaluator ev(session, parseProgram(program(R"("n": 64)", R"(
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": ["n"]},
      {"op": "allocate", "name": "sum", "dtype": "int32", "shape": ["n"]},
      {"op": "allocate", "name": "from_prev", "dtype": "int32", "shape": ["n"]},
      {"op": "for", "index": "it", "start": 0, "stop": 4, "body": [
        {"op": "fill", "tensor": "x", "value": "rank * 100 + it", "step": 1},
        {"op": "fill", "tensor": "sum", "value": -7},
        {"op": "fill", "tensor": "from_prev", "value": -7},
        {"op": "group", "name": "g", "body": [
          {"op": "communication", "name": "r", "type": "recv", "tensor": "from_prev",
           "peer": "(rank - 1 + world) % world", "backend": "ipc", "protocol": "get"},
          {"op": "communication", "name": "s", "type": "send", "tensor": "x",
           "peer": "(rank + 1) % world", "backend": "ipc", "protocol": "get"},
          {"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
           "output": "sum", "reduce": "sum", "backend": "ipc"}
        ]},
        {"op": "wait", "communication": "g"},
        {"op": "check", "tensor": "sum", "value": "50 * world * (world - 1) + world * it",
         "step": "world"},
        {"op": "check", "tensor": "from_prev", "value": "(rank - 1 + world) % world * 100 + it",
         "step": 1}
      ]})")),
                 options());
    ev.run();
    ev.synchronize();
    const RunReport r = ev.report();
    EXPECT_TRUE(r.ok()) << "mode " << static_cast<int>(m) << ": " << r.format();
    EXPECT_EQ(r.checks_run, 8u);
  }
}

// More small collectives in one group than eager slots (2 here): the group
// runs in waves that each fit, joined or not, with host and counted message
// numbers, over iterations (each wave's sends wait for the slots the last
// wave's freed).
TEST(IpcCollectives, AGroupOfMoreSmallCollectivesThanSlotsRunsInWaves) {
  for (const char* between : {"", R"({"op": "fill", "tensor": "other", "value": 1},)"})
    for (Mode m : {Mode::Default, Mode::Counted}) {
      ModeEnv env(m);
      ::setenv("HIR_IPC_EAGER_SLOTS", "2", 1);
      Session session(test::world(), SessionOptions{testDevice()});
      std::string group, checks;
      for (int k = 0; k < 5; ++k) {
        group += fmt::format(R"({}{{"op": "communication", "name": "ag{}", "type": "allgather",
          "input": "x", "output": "all{}", "backend": "ipc"}})",
                             k == 0 ? "" : ",", k, k);
        checks += fmt::format(R"(,{{"op": "for", "index": "c", "start": 0, "stop": "world",
          "body": [{{"op": "check", "tensor": "all{}[c]", "value": "c * 100 + it", "step": 1}}]}})",
                              k);
      }
      std::string allocs;
      for (int k = 0; k < 5; ++k)
        allocs += fmt::format(R"({{"op": "allocate", "name": "all{}", "dtype": "float32",
          "shape": ["world", "n"]}},)",
                              k);
      Evaluator ev(session, parseProgram(program(R"("n": 16)", fmt::format(R"(
        {{"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]}},
        {{"op": "allocate", "name": "sum", "dtype": "float32", "shape": ["n"]}},
        {{"op": "allocate", "name": "other", "dtype": "float32", "shape": ["n"]}}, {}
        {{"op": "for", "index": "it", "start": 0, "stop": 3, "body": [
          {{"op": "fill", "tensor": "x", "value": "rank * 100 + it", "step": 1}},
          {{"op": "fill", "tensor": "sum", "value": -7}},
          {{"op": "group", "name": "g", "body": [{},
            {{"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
             "output": "sum", "reduce": "sum", "backend": "ipc"}}]}}, {}
          {{"op": "wait", "communication": "g"}},
          {{"op": "check", "tensor": "sum", "value": "50 * world * (world - 1) + world * it",
           "step": "world"}} {}]}})",
                                                                            allocs, group, between,
                                                                            checks))),
                   options());
      ev.run();
      ev.synchronize();
      const RunReport r = ev.report();
      ::unsetenv("HIR_IPC_EAGER_SLOTS");
      EXPECT_TRUE(r.ok()) << "mode " << static_cast<int>(m) << between << ": " << r.format();
      EXPECT_EQ(r.checks_run, 3u * (1 + 5 * static_cast<uint64_t>(test::world().world())));
    }
}

// Such a group with a send and a recv in it is refused when it is posted:
// its waves could leave the recv waiting for a peer's send in a later wave.
TEST(IpcCollectives, AGroupOfMoreSmallCollectivesThanSlotsWithASendIsRefusedNamingBoth) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  ::setenv("HIR_IPC_EAGER_SLOTS", "1", 1);
  Session session(test::world(), SessionOptions{testDevice()});
  Evaluator ev(session, parseProgram(program(R"("n": 16)", R"(
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "all", "dtype": "float32", "shape": ["world", "n"]},
    {"op": "allocate", "name": "from_prev", "dtype": "float32", "shape": ["n"]},
    {"op": "group", "name": "g", "body": [
      {"op": "communication", "name": "ag", "type": "allgather", "input": "x",
       "output": "all", "backend": "ipc"},
      {"op": "communication", "name": "s", "type": "send", "tensor": "x",
       "peer": "(rank + 1) % world", "backend": "ipc"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "from_prev",
       "peer": "(rank - 1 + world) % world", "backend": "ipc"}
    ]},
    {"op": "wait", "communication": "g"})")),
               options());
  ::unsetenv("HIR_IPC_EAGER_SLOTS");
  try {
    ev.run();
    ev.synchronize();
    ADD_FAILURE() << "the group ran";
  } catch (const ProgramError& e) {
    EXPECT_THAT(e.what(), HasSubstr("more eager messages to one peer than its 1 slots"));
    EXPECT_THAT(e.what(), HasSubstr("/body/3/body/0"));
    EXPECT_THAT(e.what(), HasSubstr("a send (/body/3/body/1)"));
  }
}

}  // namespace
}  // namespace hir
