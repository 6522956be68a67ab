// The plan-stepping core (plan/step.h): what the cross-rank check and the
// evaluator both run.
#include "plan/step.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include <hostir/error.h>
#include <hostir/json.h>

#include "compile/compile.h"

namespace hir {
namespace {

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

CompiledExpr constant(int64_t v) {
  return CompiledExpr::compile(Expr(v), [](std::string_view) { return -1; });
}

// A reference of constant indices into an allocation of constant shape,
// resolved by the core.
RefSpan resolveRef(std::string_view text, const std::vector<int64_t>& shape,
                   const std::vector<int64_t>& select,
                   const std::optional<std::pair<int64_t, int64_t>>& range) {
  PlanAlloc alloc;
  alloc.name = "buf";
  for (int64_t e : shape) alloc.shape.push_back(constant(e));
  Layout layout;
  evalLayout(alloc, nullptr, layout);
  PlanRef ref;
  ref.alloc = 0;
  for (int64_t v : select) ref.select.push_back(constant(v));
  if (range) {
    ref.has_range = true;
    ref.range_begin = constant(range->first);
    ref.range_end = constant(range->second);
  }
  ref.text = std::string(text);
  return hir::resolveRef(ref, layout, nullptr);
}

TEST(ResolveRef, WholeTensor) {
  RefSpan s = resolveRef("buf", {4, 6}, {}, std::nullopt);
  EXPECT_EQ(s.offset, 0);
  EXPECT_EQ(s.count, 24);
}

TEST(ResolveRef, SelectsAreRowMajor) {
  RefSpan row = resolveRef("buf[2]", {4, 6}, {2}, std::nullopt);
  EXPECT_EQ(row.offset, 12);
  EXPECT_EQ(row.count, 6);
  RefSpan element = resolveRef("buf[2][3]", {4, 6}, {2, 3}, std::nullopt);
  EXPECT_EQ(element.offset, 15);
  EXPECT_EQ(element.count, 1);
  RefSpan inner = resolveRef("t[1][2]", {2, 3, 5}, {1, 2}, std::nullopt);
  EXPECT_EQ(inner.offset, 1 * 15 + 2 * 5);
  EXPECT_EQ(inner.count, 5);
}

TEST(ResolveRef, RangesCoverWholeRowsOfTheNextDim) {
  RefSpan rows = resolveRef("buf[1:3]", {4, 6}, {}, std::make_pair(int64_t{1}, int64_t{3}));
  EXPECT_EQ(rows.offset, 6);
  EXPECT_EQ(rows.count, 12);
  RefSpan part = resolveRef("buf[1][2:5]", {4, 6}, {1}, std::make_pair(int64_t{2}, int64_t{5}));
  EXPECT_EQ(part.offset, 8);
  EXPECT_EQ(part.count, 3);
  RefSpan empty = resolveRef("buf[6:6]", {6}, {}, std::make_pair(int64_t{6}, int64_t{6}));
  EXPECT_EQ(empty.offset, 6);
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(resolveRef("z", {0, 5}, {}, std::nullopt).count, 0);
}

std::string programError(std::string_view text, const std::vector<int64_t>& shape,
                         const std::vector<int64_t>& select,
                         std::optional<std::pair<int64_t, int64_t>> range) {
  try {
    resolveRef(text, shape, select, range);
  } catch (const ProgramError& e) {
    return e.what();
  }
  ADD_FAILURE() << text << " resolved";
  return "";
}

TEST(ResolveRef, OutOfRangeIndexNamesIndexValueAndBound) {
  EXPECT_EQ(programError("buf[i]", {4, 6}, {4}, std::nullopt),
            "index 0 of 'buf[i]' is 4, outside [0, 4)");
  EXPECT_EQ(programError("buf[0][j]", {4, 6}, {0, -1}, std::nullopt),
            "index 1 of 'buf[0][j]' is -1, outside [0, 6)");
}

TEST(ResolveRef, TooManyIndicesAreRejected) {
  EXPECT_EQ(programError("v[0][0]", {4}, {0, 0}, std::nullopt),
            "'v[0][0]' has 2 indices but its tensor has 1 dimensions");
  EXPECT_TRUE(contains(programError("v[0][0:1]", {4}, {0}, std::make_pair(int64_t{0}, int64_t{1})),
                       "has 2 indices"));
}

TEST(ResolveRef, BadRangeNamesBothBoundsAndTheExtent) {
  std::string msg = programError("buf[a:b]", {4, 6}, {}, std::make_pair(int64_t{2}, int64_t{5}));
  EXPECT_TRUE(contains(msg, "range [2:5] of 'buf[a:b]' is outside [0, 4]")) << msg;
  EXPECT_TRUE(contains(programError("buf[a:b]", {4}, {}, std::make_pair(int64_t{3}, int64_t{1})),
                       "range [3:1]"));
  EXPECT_TRUE(contains(programError("buf[a:b]", {4}, {}, std::make_pair(int64_t{-1}, int64_t{1})),
                       "range [-1:1]"));
}

TEST(EvalLayout, SizesThatDoNotFitIn63BitsAreProgramErrors) {
  PlanAlloc alloc;
  alloc.name = "huge";
  alloc.dtype = DType::Float32;
  alloc.shape = {constant(int64_t{1} << 62)};
  Layout layout;
  try {
    evalLayout(alloc, nullptr, layout);
    FAIL() << "2^62 float32 elements fit";
  } catch (const ProgramError& e) {
    EXPECT_TRUE(contains(e.what(), "'huge' has 4611686018427387904 elements of float32: more "
                                   "than 2^63 bytes"))
        << e.what();
  }
  alloc.shape = {constant(int64_t{1} << 62), constant(4)};
  EXPECT_THROW(evalLayout(alloc, nullptr, layout), ProgramError);
  alloc.shape = {constant(3), constant(-1)};
  try {
    evalLayout(alloc, nullptr, layout);
    FAIL() << "a negative extent was accepted";
  } catch (const ProgramError& e) {
    EXPECT_TRUE(contains(e.what(), "'huge' has extent -1 (-1) in dimension 1")) << e.what();
  }
  alloc.shape = {constant(3), constant(5)};
  evalLayout(alloc, nullptr, layout);
  EXPECT_EQ(layout.elements, 15);
  EXPECT_EQ(layout.bytes, 60u);
  EXPECT_EQ(layout.strides, (std::vector<int64_t>{5, 1}));
}

Plan planOf(const std::string& body, int world) {
  CompileOptions co;
  co.world = world;
  co.check_schedule = false;
  return compile(parseProgram(R"({"format": "hostir/1", "name": "t", "params": {"n": 8}, "body": [)" +
                              body + "]}"),
                 co)
      .plan;
}

// Executors for step(): count the bodies run, or do nothing.
struct CountSetStream {
  int bodies = 0;
  void operator()(const instr::SetStream&, int) { ++bodies; }
  void operator()(const auto&, int) {}
};
struct Nothing {
  void operator()(const auto&, int) {}
};

// A loop whose index would pass 2^63 - 1 ends instead of wrapping around.
TEST(Step, ALoopCounterThatWouldOverflowEndsTheLoop) {
  Plan plan = planOf(
      R"({"op": "for", "index": "i", "start": "9223372036854775805", "stop": "9223372036854775807",
          "step": 2, "body": [{"op": "set_stream", "stream": 0}]})",
      1);
  std::vector<int64_t> scalars = plan.scalar_init;
  CountSetStream exec;
  int pc = 0, steps = 0;
  while (pc < static_cast<int>(plan.code.size()) && steps++ < 100)
    pc = step(plan, pc, scalars.data(), exec);
  EXPECT_EQ(exec.bodies, 1);
  EXPECT_LT(steps, 100) << "the loop did not end";
}

TEST(Step, ANonPositiveLoopStepIsAProgramError) {
  Plan plan = planOf(R"({"op": "for", "index": "i", "start": 0, "stop": 4, "step": "rank",
                         "body": []})",
                     1);
  std::vector<int64_t> scalars = plan.scalar_init;
  Nothing exec;
  try {
    step(plan, 0, scalars.data(), exec);
    FAIL() << "a loop step of 0 ran";
  } catch (const ProgramError& e) {
    EXPECT_TRUE(contains(e.what(), "loop step rank evaluates to 0; a loop step must be positive"));
  }
}

// Every instruction's accesses come from one place; the dry run and the
// evaluator both use them.
TEST(ForEachAccess, PostsReadTheirInputAndWriteTheirOutput) {
  Plan plan = planOf(R"({"op": "allocate", "name": "a", "dtype": "float32", "shape": ["n"]},
                        {"op": "allocate", "name": "b", "dtype": "float32", "shape": ["n"]},
                        {"op": "communication", "name": "ar", "type": "allreduce",
                         "input": "a", "output": "b", "reduce": "sum"},
                        {"op": "wait", "communication": "ar"},
                        {"op": "copy", "src": "b", "dst": "a"},
                        {"op": "fill", "tensor": "b", "value": 1},
                        {"op": "check", "tensor": "a", "value": 1})",
                     2);
  std::vector<std::string> seen;
  for (const Instr& in : plan.code)
    forEachAccess(plan, in, [&](const PlanRef& ref, Access a) {
      seen.push_back(std::string(a == Access::Read ? "R " : "W ") + ref.text);
    });
  EXPECT_EQ(seen, (std::vector<std::string>{"R a", "W b", "R b", "W a", "W b", "R a"}));
}

TEST(ChunkCount, EachTypeSaysWhatItNeeds) {
  PlanComm c;
  c.name = "g";
  c.type = CommType::Allgather;
  PlanRef in, out;
  in.text = "x";
  out.text = "y";
  c.input = in;
  c.output = out;
  EXPECT_EQ(chunkCount(c, 4, 8, 32), 8);
  try {
    chunkCount(c, 4, 8, 31);
    FAIL() << "allgather of 8 into 31 for 4 ranks";
  } catch (const ProgramError& e) {
    EXPECT_EQ(std::string(e.what()),
              "allgather 'g' has input 'x' of 8 elements and output 'y' of 31 elements; the "
              "output needs team size 4 x input 8 = 32 elements");
  }
  EXPECT_THROW(chunkCount(c, 4, int64_t{1} << 62, 0), ProgramError);
  c.type = CommType::Alltoall;
  EXPECT_EQ(chunkCount(c, 4, 32, 32), 8);
  EXPECT_THROW(chunkCount(c, 3, 32, 32), ProgramError);
  c.type = CommType::ReduceScatter;
  EXPECT_EQ(chunkCount(c, 2, 16, 8), 8);
}

}  // namespace
}  // namespace hir
