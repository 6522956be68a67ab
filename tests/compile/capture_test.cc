// What the cross-rank check says about graph capture
// (CompiledProgram::capture_blocker) and what graph mode requires of a
// compiled program (requireCapturable): each blocker is named with its node
// path, rank and loop indices; a capturable program has none. Backends are
// two fakes on the host device, one capturable and one not, so that the
// analysis is tested without a GPU.
#include "compile/compile.h"

#include <gtest/gtest.h>

#include <string>

#include <hostir/json.h>

namespace hir {
namespace {

BackendCaps fakeCaps(std::string name, bool capturable) {
  BackendCaps c;
  c.name = std::move(name);
  c.devices = {"host"};
  c.types = EnumSet<CommType>::all(kCommTypeNames);
  c.dtypes = EnumSet<DType>::all(kDTypeNames);
  c.reduce_ops = EnumSet<ReduceOp>::all(kReduceOpNames);
  c.post_order = PostOrder::kPerRank;
  c.capturable = capturable;
  return c;
}

CompiledProgram compileBody(const std::string& body, int world = 2, bool check = true,
                            int64_t max_steps = CompileOptions{}.max_steps_per_rank) {
  const std::string text =
      R"({"format": "hostir/1", "name": "t", "params": {"n": 8, "iters": 3}, "body": [)" + body +
      "]}";
  CompileOptions co;
  co.world = world;
  co.device = "host";
  co.backends = {fakeCaps("graphable", true), fakeCaps("plain", false)};
  co.kernels = std::vector<std::string>{};
  co.check_schedule = check;
  co.max_steps_per_rank = max_steps;
  return compile(parseProgram(text), co);
}

// An allreduce in a loop on `backend`, waited on in `mode`, checked.
std::string loopBody(const std::string& backend, const std::string& mode) {
  return R"(
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [
      {"op": "fill", "tensor": "x", "value": "rank + i", "step": 1},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x", "reduce": "sum",
       "backend": ")" + backend + R"("},
      {"op": "wait", "communication": "ar", "mode": ")" + mode + R"("},
      {"op": "check", "tensor": "x", "value": "world * (world - 1) / 2 + world * i",
       "step": "world"}
    ]})";
}

TEST(Capture, AProgramOfStreamWaitsOnACapturableBackendHasNoBlocker) {
  const CompiledProgram c = compileBody(loopBody("graphable", "stream"));
  EXPECT_TRUE(c.checked);
  EXPECT_FALSE(c.capture_blocker.has_value()) << c.capture_blocker->message;
  EXPECT_NO_THROW(requireCapturable(c));
}

TEST(Capture, AHostModeWaitBlocksCaptureAndIsNamedWithItsLoopIndex) {
  const CompiledProgram c = compileBody(loopBody("graphable", "host"));
  ASSERT_TRUE(c.capture_blocker.has_value());
  EXPECT_EQ(c.capture_blocker->path, "/body/1/body/2");
  EXPECT_NE(c.capture_blocker->message.find("on rank 0 (i=0)"), std::string::npos)
      << c.capture_blocker->message;
  EXPECT_NE(c.capture_blocker->message.find("waits on 'ar' in host mode"), std::string::npos)
      << c.capture_blocker->message;
  try {
    requireCapturable(c);
    FAIL() << "a host-mode wait passed requireCapturable";
  } catch (const ValidationError& e) {
    ASSERT_EQ(e.issues().size(), 1u);
    EXPECT_EQ(e.issues()[0].path, "/body/1/body/2");
    EXPECT_NE(e.issues()[0].message.find("a run cannot be captured into a graph"),
              std::string::npos)
        << e.issues()[0].message;
  }
}

TEST(Capture, APostOnABackendThatIsNotCapturableBlocksCapture) {
  const CompiledProgram c = compileBody(loopBody("plain", "stream"));
  ASSERT_TRUE(c.capture_blocker.has_value());
  EXPECT_EQ(c.capture_blocker->path, "/body/1/body/1");
  EXPECT_NE(c.capture_blocker->message.find("posts a allreduce through backend 'plain'"),
            std::string::npos)
      << c.capture_blocker->message;
}

TEST(Capture, AGroupOnABackendThatIsNotCapturableBlocksCapture) {
  const CompiledProgram c = compileBody(R"(
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "y", "dtype": "float32", "shape": ["n"]},
    {"op": "group", "name": "g", "body": [
      {"op": "communication", "name": "a", "type": "allreduce", "input": "x", "output": "x", "reduce": "sum",
       "backend": "plain"},
      {"op": "communication", "name": "b", "type": "allreduce", "input": "y", "output": "y", "reduce": "sum",
       "backend": "plain"}]},
    {"op": "wait", "communication": "g"})");
  ASSERT_TRUE(c.capture_blocker.has_value());
  EXPECT_EQ(c.capture_blocker->path, "/body/2");
  EXPECT_NE(c.capture_blocker->message.find("posts a group through backend 'plain'"),
            std::string::npos)
      << c.capture_blocker->message;
}

TEST(Capture, AnAllocationWhoseSizeChangesWithinARunBlocksCapture) {
  const CompiledProgram c = compileBody(R"(
    {"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["i + 1"]},
      {"op": "fill", "tensor": "x", "value": 1, "step": 0},
      {"op": "deallocate", "name": "x"}
    ]})");
  ASSERT_TRUE(c.capture_blocker.has_value());
  EXPECT_EQ(c.capture_blocker->path, "/body/0/body/0");
  EXPECT_NE(c.capture_blocker->message.find("on rank 0 (i=1)"), std::string::npos)
      << c.capture_blocker->message;
  EXPECT_NE(c.capture_blocker->message.find("allocates 'x' with 8 bytes after 4 bytes"),
            std::string::npos)
      << c.capture_blocker->message;
}

TEST(Capture, AnAllocationOfOneSizeReallocatedEveryIterationIsCapturable) {
  const CompiledProgram c = compileBody(R"(
    {"op": "for", "index": "i", "start": 0, "stop": "iters", "body": [
      {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
      {"op": "fill", "tensor": "x", "value": "i", "step": 0},
      {"op": "deallocate", "name": "x"}
    ]})");
  EXPECT_FALSE(c.capture_blocker.has_value()) << c.capture_blocker->message;
}

// Only rank 1 waits on the host: the blocker names rank 1 (rank 0 captures
// fine, but every rank must capture for the collectives to match).
TEST(Capture, ABlockerOnOneRankIsNamedWithThatRank) {
  const CompiledProgram c = compileBody(R"(
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x", "reduce": "sum",
     "backend": "graphable"},
    {"op": "if", "cond": "rank == 1",
     "then": [{"op": "wait", "communication": "ar", "mode": "host"}],
     "else": [{"op": "wait", "communication": "ar"}]})");
  ASSERT_TRUE(c.capture_blocker.has_value());
  EXPECT_EQ(c.capture_blocker->path, "/body/2/then/0");
  EXPECT_NE(c.capture_blocker->message.find("on rank 1"), std::string::npos)
      << c.capture_blocker->message;
}

TEST(Capture, GraphModeNeedsTheCrossRankCheck) {
  const CompiledProgram c = compileBody(loopBody("graphable", "stream"), 2, /*check=*/false);
  EXPECT_FALSE(c.checked);
  try {
    requireCapturable(c);
    FAIL() << "an unchecked program passed requireCapturable";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the cross-rank check"), std::string::npos)
        << e.what();
  }
}

TEST(Capture, GraphModeNeedsACheckOfWholeRuns) {
  const CompiledProgram c = compileBody(R"(
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "for", "index": "i", "start": 0, "stop": 100000, "body": [
      {"op": "fill", "tensor": "x", "value": "i", "step": 0}]})",
                                        2, true, /*max_steps=*/2000);
  ASSERT_TRUE(c.truncated);
  try {
    requireCapturable(c);
    FAIL() << "a program checked in part passed requireCapturable";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("covered only the first"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hir
