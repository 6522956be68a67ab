// The evaluator's contract on the host device through the MPI backend:
// posting never blocks the host, stream-mode waits never block it, host-mode
// waits do, caller buffers bind, run-time errors name path, rank and loop
// indices, and failed checks report what they found.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/check.h"
#include <hostir/backend.h>
#include <hostir/json.h>
#include <hostir/evaluator.h>
#include <hostir/session.h>
#include "support/mpi_test.h"

namespace hir {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

EvaluatorOptions shortTimeout() {
  EvaluatorOptions o;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// An allreduce that rank 1 joins late; the wait mode is a parameter.
std::string lateAllreduce(std::string_view mode) {
  return fmt::format(R"({{
    "format": "hostir/1", "name": "late",
    "body": [
      {{"op": "allocate", "name": "x", "dtype": "float32", "shape": [1024]}},
      {{"op": "fill", "tensor": "x", "value": "rank + 1", "step": 0}},
      {{"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
        "output": "x", "reduce": "sum"}},
      {{"op": "wait", "communication": "ar", "mode": "{}"}},
      {{"op": "check", "tensor": "x", "value": "world * (world + 1) / 2"}}
    ]}})",
                     mode);
}

// Runs lateAllreduce(mode) with rank 1 posting 400 ms late; returns how long
// run() and run() + synchronize() took on this rank, and the checks.
struct LateRun {
  double run_ms, total_ms;
  RunReport report;
};
LateRun runLateAllreduce(std::string_view mode) {
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(lateAllreduce(mode)), shortTimeout());
  test::world().barrier();
  if (test::world().rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto t0 = Clock::now();
  ev.run();
  double run_ms = msSince(t0);
  ev.synchronize();
  return LateRun{run_ms, msSince(t0), ev.report()};
}

TEST(Evaluator, StreamWaitReturnsBeforeTheCommunicationCompletes) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  LateRun r = runLateAllreduce("stream");
  if (test::world().rank() == 0) {
    EXPECT_LT(r.run_ms, 200.0) << "run() blocked on a communication a peer joined late";
    EXPECT_GT(r.total_ms, 300.0) << "the communication finished before the peer posted it";
  }
  EXPECT_TRUE(r.report.ok()) << r.report.format();
}

TEST(Evaluator, HostWaitBlocksUntilTheCommunicationCompletes) {
  HIR_REQUIRE_WORLD_AT_LEAST(2);
  LateRun r = runLateAllreduce("host");
  if (test::world().rank() == 0) EXPECT_GT(r.run_ms, 300.0) << "host wait did not block";
  EXPECT_TRUE(r.report.ok()) << r.report.format();
}

TEST(Evaluator, BoundCallerBuffersAreUsedAcrossRuns) {
  const char* text = R"({
    "format": "hostir/1", "name": "bind", "params": {"n": 256},
    "inputs": ["in"], "outputs": ["out"],
    "body": [
      {"op": "allocate", "name": "in", "dtype": "int32", "shape": ["n"]},
      {"op": "allocate", "name": "out", "dtype": "int32", "shape": ["world", "n"]},
      {"op": "communication", "name": "ag", "type": "allgather", "input": "in", "output": "out"},
      {"op": "wait", "communication": "ag"}
    ]})";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(text), shortTimeout());
  int rank = test::world().rank(), world = test::world().world();
  std::vector<int32_t> in(256), out(256 * world);
  ev.bind("in", in.data(), in.size() * sizeof(int32_t));
  ev.bind("out", out.data(), out.size() * sizeof(int32_t));
  for (int iter = 0; iter < 3; ++iter) {
    for (int k = 0; k < 256; ++k) in[k] = rank * 1000 + iter * 100 + k % 97;
    std::fill(out.begin(), out.end(), -7);  // poison
    ev.run();
    ev.synchronize();
    for (int r = 0; r < world; ++r)
      for (int k = 0; k < 256; ++k)
        ASSERT_EQ(out[r * 256 + k], r * 1000 + iter * 100 + k % 97)
            << "iteration " << iter << ", chunk " << r << ", element " << k;
  }
}

TEST(Evaluator, BindingANameThatIsNotAnInputIsAUsageError) {
  const char* text = R"({"format": "hostir/1", "name": "b", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [4]}]})";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(text), shortTimeout());
  int32_t buf[4];
  try {
    ev.bind("x", buf, sizeof(buf));
    FAIL() << "bind accepted a name outside inputs/outputs";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not listed in the program's inputs or outputs"),
              std::string::npos)
        << e.what();
  }
}

TEST(Evaluator, PeerOutsideTheWorldNamesPathRankAndLoopIndex) {
  // The cross-rank check is off so that the evaluator's own check is hit.
  const char* text = R"({"format": "hostir/1", "name": "p", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [4]},
      {"op": "for", "index": "i", "start": 0, "stop": 3, "body": [
        {"op": "if", "cond": "i == 2", "then": [
          {"op": "communication", "name": "s", "type": "send", "tensor": "x",
           "peer": "world + i"}]}]}]})";
  Session session(test::world(), SessionOptions{"host"});
  EvaluatorOptions o = shortTimeout();
  o.check_schedule = false;
  Evaluator ev(session, parseProgram(text), o);
  try {
    ev.run();
    FAIL() << "a peer outside the world was posted";
  } catch (const ProgramError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("/body/1/body/0/then/0"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("rank {}", test::world().rank())), std::string::npos) << m;
    EXPECT_NE(m.find("i=2"), std::string::npos) << m;
    EXPECT_NE(m.find("outside the world"), std::string::npos) << m;
  }
}

TEST(Evaluator, WaitOnACommunicationNeverPostedIsRejectedAtRunTime) {
  const char* text = R"({"format": "hostir/1", "name": "w", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [4]},
      {"op": "if", "cond": "0", "then": [
        {"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
         "output": "x", "reduce": "sum"}]},
      {"op": "wait", "communication": "ar"}]})";
  Session session(test::world(), SessionOptions{"host"});
  EvaluatorOptions o = shortTimeout();
  o.check_schedule = false;
  Evaluator ev(session, parseProgram(text), o);
  try {
    ev.run();
    FAIL() << "waited on a communication that was never posted";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("wait on 'ar', which this rank has not posted yet"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("/body/2"), std::string::npos) << e.what();
  }
}

TEST(Evaluator, APipelinedWaitBeforeTheFirstPostFailsNamingTheIteration) {
  // The wait at the top of the loop waits for the previous iteration's post;
  // at i = 0 there is none. (With the check on, the check says so first:
  // ir_examples/invalid/wait_before_first_post_in_loop.json.)
  const char* text = R"({"format": "hostir/1", "name": "w", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [2, 4]},
      {"op": "for", "index": "i", "stop": 3, "body": [
        {"op": "wait", "communication": "ar"},
        {"op": "communication", "name": "ar", "type": "allreduce", "input": "x[i % 2]",
         "output": "x[i % 2]", "reduce": "sum"}]}]})";
  Session session(test::world(), SessionOptions{"host"});
  EvaluatorOptions o = shortTimeout();
  o.check_schedule = false;
  Evaluator ev(session, parseProgram(text), o);
  try {
    ev.run();
    FAIL() << "waited before the first post";
  } catch (const ProgramError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("wait on 'ar', which this rank has not posted yet"), std::string::npos) << m;
    EXPECT_NE(m.find("/body/1/body/0"), std::string::npos) << m;
    EXPECT_NE(m.find("i=0"), std::string::npos) << m;
  }
}

TEST(Evaluator, FailedCheckReportsRankPathLoopIndexAndElements) {
  const char* text = R"({"format": "hostir/1", "name": "c", "body": [
      {"op": "allocate", "name": "x", "dtype": "int32", "shape": [3, 8]},
      {"op": "for", "index": "j", "start": 0, "stop": 3, "body": [
        {"op": "fill", "tensor": "x[j]", "value": "j * 10", "step": 1}]},
      {"op": "fill", "tensor": "x[1][5:6]", "value": -1},
      {"op": "for", "index": "j", "start": 0, "stop": 3, "body": [
        {"op": "check", "tensor": "x[j]", "value": "j * 10", "step": 1}]}]})";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(text), shortTimeout());
  ev.run();
  ev.synchronize();
  RunReport r = ev.report();
  ASSERT_EQ(r.failures.size(), 1u) << r.format();
  const CheckFailure& f = r.failures[0];
  EXPECT_EQ(f.rank, test::world().rank());
  EXPECT_EQ(f.path, "/body/3/body/0");
  EXPECT_EQ(f.tensor, "x[j]");
  EXPECT_EQ(f.context, "j=1");
  EXPECT_EQ(f.mismatches, 1u);
  ASSERT_EQ(f.first.size(), 1u);
  EXPECT_EQ(f.first[0].index, 5);
  EXPECT_EQ(f.first[0].got, -1.0);
  EXPECT_EQ(f.first[0].expected, 15.0);
  EXPECT_EQ(r.checks_run, 3u);
}

TEST(Evaluator, RepeatedRunsReuseEveryCacheAndStayCorrect) {
  // A loop of posts and waits over 50 runs: events and allocations are
  // reused; data seeded by iteration proves no stale result is read.
  const char* text = R"({"format": "hostir/1", "name": "r", "params": {"it": 0}, "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": [64]},
      {"op": "for", "index": "i", "start": 0, "stop": 4, "body": [
        {"op": "fill", "tensor": "x", "value": "rank * 3 + i", "step": 1},
        {"op": "communication", "name": "ar", "type": "allreduce", "input": "x",
         "output": "x", "reduce": "max"},
        {"op": "wait", "communication": "ar"},
        {"op": "check", "tensor": "x", "value": "(world - 1) * 3 + i", "step": 1}]},
      {"op": "deallocate", "name": "x"}]})";
  Session session(test::world(), SessionOptions{"host"});
  Evaluator ev(session, parseProgram(text), shortTimeout());
  for (int run = 0; run < 50; ++run) ev.run();
  ev.synchronize();
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 200u);
}

// ------------------------------------------- a backend of the embedder

// Copies input to output: an allreduce at world 1, on the host device.
class LocalCopyBackend : public Backend {
 public:
  static inline int posts = 0;
  std::string_view name() const override { return "local-copy"; }
  void setup(const BackendContext& ctx) override { device_ = ctx.device; }
  void post(std::span<const PostArgs> ops, Stream& current, Event& done) override {
    for (const PostArgs& a : ops)
      device_->copy(current, a.output, a.input, a.count * dtypeSize(a.dtype));
    device_->record(done, current);
    ++posts;
  }
};

// Registration is all it takes: JSON names it, validation and lowering ask
// its caps, the evaluator creates and posts to it.
TEST(Evaluator, ABackendTheEmbedderRegistersCanBeNamedInJson) {
  if (test::world().world() != 1) GTEST_SKIP() << "local-copy is an allreduce at world 1 only";
  static bool registered = false;
  if (!registered) {
    BackendCaps caps;
    caps.name = "local-copy";
    caps.devices = {"host"};
    caps.types = {CommType::Allreduce};
    caps.dtypes = {DType::Int32};
    caps.reduce_ops = {ReduceOp::Sum};
    registerBackend({caps, [] { return std::make_unique<LocalCopyBackend>(); }});
    registered = true;
  }
  auto program = [](std::string_view dtype) {
    return parseProgram(fmt::format(R"({{"format": "hostir/1", "name": "mine", "body": [
        {{"op": "allocate", "name": "a", "dtype": "{0}", "shape": [8]}},
        {{"op": "allocate", "name": "b", "dtype": "{0}", "shape": [8]}},
        {{"op": "fill", "tensor": "b", "value": -1}},
        {{"op": "fill", "tensor": "a", "value": 5, "step": 1}},
        {{"op": "communication", "name": "ar", "type": "allreduce", "input": "a", "output": "b",
          "reduce": "sum", "backend": "local-copy"}},
        {{"op": "wait", "communication": "ar"}},
        {{"op": "check", "tensor": "b", "value": 5, "step": 1}}]}})",
                                    dtype));
  };
  Session session(test::world(), SessionOptions{"host"});
  const int before = LocalCopyBackend::posts;
  Evaluator ev(session, program("int32"), shortTimeout());
  ev.run();
  ev.run();
  ev.synchronize();
  RunReport r = ev.report();
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.checks_run, 2u);
  EXPECT_EQ(LocalCopyBackend::posts - before, 2);
  try {
    Evaluator bad(session, program("float32"), shortTimeout());
    FAIL() << "local-copy was bound to a float32 allreduce";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("/body/4: backend 'local-copy' cannot run allreduce of "
                                         "float32 on device 'host': backend 'local-copy' moves "
                                         "int32, not float32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hir

