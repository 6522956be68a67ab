// Adding a node kind or an instruction: the compiler stops the build in
// every pass that dispatches on them (docs/architecture.md, "Adding a node").
// This test keeps the rest honest: one program holds every node kind and
// lowers to every instruction, and goes through every pass that runs
// without devices (JSON load and save, printer, validation, lowering, the
// cross-rank dry run). A new kind without a place here fails it, pointing
// at the list of passes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <variant>

#include <hostir/json.h>
#include <hostir/printer.h>

#include "compile/compile.h"
#include "ir/walk.h"

namespace hir {
namespace {

constexpr const char* kEveryKind = R"json({
  "format": "hostir/1", "name": "every_kind", "params": {"n": 4},
  "inputs": ["x"], "outputs": ["y"],
  "body": [
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["n"]},
    {"op": "allocate", "name": "y", "dtype": "float32", "shape": ["n"]},
    {"op": "fill", "tensor": "x", "value": "rank", "step": 1},
    {"op": "set_stream", "stream": 1},
    {"op": "sync_stream", "stream": 0},
    {"op": "group", "name": "g", "body": [
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "y",
       "reduce": "sum"}]},
    {"op": "wait", "communication": "g"},
    {"op": "set_stream", "stream": 0},
    {"op": "sync_stream", "stream": 1},
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [
      {"op": "share_mem_handles", "communications": ["s", "r"]},
      {"op": "if", "cond": "rank == 0",
       "then": [{"op": "communication", "name": "s", "type": "send", "tensor": "x", "peer": 1,
                 "backend": "ipc"},
                {"op": "wait", "communication": "s"}],
       "else": [{"op": "communication", "name": "r", "type": "recv", "tensor": "x", "peer": 0,
                 "backend": "ipc"},
                {"op": "wait", "communication": "r"}]}]},
    {"op": "copy", "src": "y", "dst": "x"},
    {"op": "check", "tensor": "x", "value": 1, "step": 2},
    {"op": "allocate", "name": "m", "dtype": "float32", "shape": [2, 2]},
    {"op": "allocate", "name": "mo", "dtype": "float32", "shape": [2, 2]},
    {"op": "matmul", "a": "m", "b": "m", "out": "mo", "accumulate": true},
    {"op": "add", "a": "x", "b": "y", "out": "y"},
    {"op": "fill", "tensor": "m", "random": {"seed": "rank", "low": -1, "high": 1}},
    {"op": "relu", "input": "m", "output": "m"},
    {"op": "gelu", "input": "m", "output": "mo"},
    {"op": "silu", "input": "mo", "output": "mo"},
    {"op": "scale", "input": "mo", "output": "m", "factor": "world"},
    {"op": "cast", "input": "m", "output": "x"},
    {"op": "check", "tensor": "m", "expected": "mo", "rtol": 0.5, "atol": 1},
    {"op": "kernel", "name": "test_kernel", "reads": ["x"], "writes": ["y"],
     "args": {"shift": "rank"}},
    {"op": "deallocate", "name": "y"}
  ]
})json";

TEST(EveryNodeKind, GoesThroughEveryPass) {
  const Program program = parseProgram(kEveryKind);

  std::set<std::size_t> kinds;
  walkNodes(program.body, [&](const Node& n) { kinds.insert(n.v.index()); });
  for (std::size_t k = 0; k < std::variant_size_v<Node::Variant>; ++k)
    EXPECT_TRUE(kinds.count(k))
        << "node kind '" << kNodeOpNames[k]
        << "' is not in this test's program: add it here, and check that every pass listed in "
           "docs/architecture.md (\"Adding a node\") handles it";

  // JSON save and load, and the printer.
  EXPECT_EQ(parseProgram(saveProgram(program)), program);
  const std::string listing = printProgram(program);
  for (std::size_t k = 0; k < std::variant_size_v<Node::Variant>; ++k)
    EXPECT_NE(listing.find(std::string(kNodeOpNames[k])), std::string::npos)
        << "the printer does not show '" << kNodeOpNames[k] << "'";

  // Validation, lowering and the cross-rank dry run.
  CompileOptions co;
  co.world = 2;
  co.device = "host";
  co.kernels = std::vector<std::string>{"test_kernel"};
  const CompiledProgram compiled = compile(program, co);
  EXPECT_TRUE(compiled.checked);
  EXPECT_EQ(compiled.communications, 2 + 2 * 2);  // allreduce on 2 ranks, 2 sends + 2 recvs

  std::set<std::size_t> instructions;
  for (const Instr& in : compiled.plan.code) instructions.insert(in.op.index());
  for (std::size_t k = 0; k < std::variant_size_v<decltype(Instr::op)>; ++k)
    EXPECT_TRUE(instructions.count(k))
        << "instruction #" << k << " of Instr::op is not produced by this test's program: "
        << "extend the program so that the dry run and the evaluator are exercised on it";
}

}  // namespace
}  // namespace hir
