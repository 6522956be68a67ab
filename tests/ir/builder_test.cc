#include <hostir/builder.h>

#include <gtest/gtest.h>

#include "common/check.h"
#include "ir/ir_samples.h"
#include <hostir/json.h>
#include "support/test_util.h"

namespace hir {
namespace {

TEST(Builder, RingAllgatherEqualsTheParsedProgram) {
  ProgramBuilder b("ring_allgather");
  b.param("n", 1048576).output("buf");
  b.allocate("buf", DType::Float32, {"world", "n"});
  b.fill("buf[rank]", "rank * 1000", 1);
  CommOptions ipc{.backend = "ipc"};
  b.forLoop("i", 0, "world - 1", [&](BodyBuilder& l) {
    l.shareMemHandles({"s", "r"});
    l.send("s", "buf[(rank - i + world) % world]", "(rank + 1) % world", ipc);
    l.recv("r", "buf[(rank - i - 1 + world) % world]", "(rank - 1 + world) % world", ipc);
    l.wait("r").wait("s");
  });
  b.forLoop("j", 0, "world", [](BodyBuilder& l) { l.check("buf[j]", "j * 1000", 1); });
  EXPECT_EQ(b.build(), parseProgram(test::kRingAllgatherJson));
}

// kEveryNodeJson, built in C++: every node kind, every communication type,
// teams, backends, protocols, nested loops, if/else and a group.
Program buildEveryNode() {
  ProgramBuilder b("every_node");
  b.worldSize(4).minWorldSize(2).param("n", 8).param("chunks", 2).input("x").output("y");
  b.allocate("x", DType::Float32, {"world", "n"})
      .allocate("y", DType::BFloat16, {"world", "n"})
      .allocate("z", DType::Int64, {4, "n * chunks"});
  b.fill("x[rank]", "rank * 100", 1);
  b.setStream(1);
  b.group("g", [](BodyBuilder& g) {
    g.allgather("ag", "x[rank]", "y", {.backend = "nccl"});
    g.allreduce("ar", "x", "x", ReduceOp::Sum, {.team = std::vector<Expr>{0, 1, "world - 1"}});
  });
  b.wait("g", WaitMode::Host);
  b.syncStream(1).setStream(0);
  b.reduceScatter("rs", "x", "y[rank]", ReduceOp::Max);
  b.broadcast("bc", "x", "x", 0, {.backend = "mpi"});
  b.reduce("rd", "x", "y", "world - 1", ReduceOp::Avg);
  b.gather("ga", "x[rank]", "y", 1);
  b.scatter("sc", "y", "x[rank]", 2);
  b.alltoall("aa", "x", "y");
  b.wait("aa");
  b.forLoop(
      "i", 1, "world",
      [](BodyBuilder& l) {
        l.shareMemHandles({"s", "r"});
        l.ifThen(
            "rank % 2 == 0 && i < world",
            [](BodyBuilder& t) {
              t.send("s", "z[0][0:n]", "(rank + i) % world",
                     {.backend = "ipc", .protocol = Protocol::Get});
            },
            [](BodyBuilder& e) {
              e.recv("r", "z[1][n:2 * n]", "(rank - i + world) % world",
                     {.backend = "ipc", .protocol = Protocol::Put});
            });
        l.wait("s");
      },
      2);
  b.ifThen("!(rank & 1)", [](BodyBuilder& t) { t.copy("z[1]", "z[2]"); });
  b.check("x[rank]", "rank * 100", 1, 0.5);
  b.check("z[3][0:2]", -1);
  b.deallocate("z");
  return b.build();
}

TEST(Builder, EveryNodeKindEqualsTheParsedProgram) {
  Program built = buildEveryNode();
  Program parsed = parseProgram(test::kEveryNodeJson);
  ASSERT_EQ(built.body.size(), parsed.body.size());
  for (std::size_t i = 0; i < built.body.size(); ++i)
    EXPECT_EQ(built.body[i], parsed.body[i]) << "at /body/" << i << " (" << built.body[i].op() << ")";
  EXPECT_EQ(built, parsed);
  EXPECT_EQ(saveProgram(built), saveProgram(parsed));
}

TEST(Builder, CollectivesSetTheFieldsTheirTypeUses) {
  ProgramBuilder b("t");
  b.broadcast("bc", "x", "y", "world - 1");
  b.send("s", "x[1]", 3);
  const auto& bc = std::get<Communication>(b.program().body[0].v);
  EXPECT_EQ(bc.type, CommType::Broadcast);
  EXPECT_EQ(bc.input->str(), "x");
  EXPECT_EQ(bc.output->str(), "y");
  EXPECT_EQ(bc.root, Expr("world - 1"));
  EXPECT_FALSE(bc.tensor.has_value());
  EXPECT_FALSE(bc.peer.has_value());
  EXPECT_FALSE(bc.reduce.has_value());
  const auto& s = std::get<Communication>(b.program().body[1].v);
  EXPECT_EQ(s.tensor->str(), "x[1]");
  EXPECT_EQ(s.peer, Expr(3));
  EXPECT_FALSE(s.input.has_value());
  EXPECT_FALSE(s.root.has_value());
}

TEST(Builder, BadTensorReferenceIsAParseErrorFromTheBuilder) {
  ProgramBuilder b("t");
  try {
    b.fill("buf[0:1][0]", 0);
    ADD_FAILURE() << "built";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.pointer(), "(builder)");
    EXPECT_NE(std::string(e.what()).find("a range must be the last index"), std::string::npos);
  }
  EXPECT_TRUE(b.program().body.empty());
}

TEST(Builder, BadExpressionTextIsAParseError) {
  ProgramBuilder b("t");
  EXPECT_THROW(b.setStream("1 +"), ParseError);
  EXPECT_TRUE(b.program().body.empty());
}

// The pipelined programs of ir_examples/, built in C++ (a compiler would
// emit them this way): the same programs as their JSON.
TEST(Builder, PipelinedMatmulExamplesEqualTheirJson) {
  const std::string chunk = "c * world * mc:(c + 1) * world * mc";
  {
    ProgramBuilder b("allgather_matmul_ring_ipc");
    b.param("m", 8).param("k", 16).param("n", 8);
    b.allocate("xf", DType::Float32, {"world * m", "k"});
    b.allocate("w", DType::Float32, {"k", "n"});
    b.allocate("y", DType::Float32, {"world * m", "n"});
    b.fill("xf[rank * m:(rank + 1) * m]", "rank * 3 + 1", 1).fill("w", 1, 1);
    b.allocate("x", DType::Float32, {"m", "k"});
    b.copy("xf[rank * m:(rank + 1) * m]", "x");
    auto rows = [](const std::string& j) {
      return "[" + j + " * m:(" + j + " + 1) * m]";
    };
    const std::string mine = "(rank - i + world) % world", left = "(rank - i - 1 + world) % world";
    CommOptions ipc{.backend = "ipc"};
    b.forLoop("i", 0, "world", [&](BodyBuilder& l) {
      l.ifThen("i < world - 1", [&](BodyBuilder& t) {
        t.send("s", "xf" + rows(mine), "(rank + 1) % world", ipc);
        t.recv("r", "xf" + rows(left), "(rank - 1 + world) % world", ipc);
      });
      l.setStream(1).syncStream(0).matmul("xf" + rows(mine), "w", "y" + rows(mine)).setStream(0);
      l.ifThen("i < world - 1", [](BodyBuilder& t) { t.wait("s").wait("r"); });
    });
    b.syncStream(1);
    b.allocate("g", DType::Float32, {"world * m", "k"});
    b.allocate("wneg", DType::Float32, {"k", "n"});
    b.allocate("yneg", DType::Float32, {"world * m", "n"});
    b.fill("wneg", -1, -1).allgather("ag", "x", "g").wait("ag");
    b.matmul("g", "wneg", "yneg").addTensors("y", "yneg", "yneg").check("yneg", 0);
    EXPECT_EQ(b.build(), loadProgram(test::examplesDir() + "/allgather_matmul_ring_ipc.json"));
  }
  {
    ProgramBuilder b("allgather_matmul_chunked");
    b.param("chunks", 4).param("mc", 2).param("k", 16).param("n", 8);
    b.allocate("x", DType::Float32, {"chunks", "mc", "k"});
    b.allocate("g", DType::Float32, {"chunks * world * mc", "k"});
    b.allocate("w", DType::Float32, {"k", "n"});
    b.allocate("y", DType::Float32, {"chunks * world * mc", "n"});
    b.fill("x", "rank * 5 + 1", 1).fill("w", 2, 1);
    b.forLoop("c", 0, "chunks", [&](BodyBuilder& l) {
      l.allgather("ag", "x[c]", "g[" + chunk + "]").wait("ag");
      l.setStream(1).syncStream(0);
      l.matmul("g[" + chunk + "]", "w", "y[" + chunk + "]");
      l.setStream(0);
    });
    b.syncStream(1);
    b.allocate("gs", DType::Float32, {"chunks * world * mc", "k"});
    b.allocate("wneg", DType::Float32, {"k", "n"});
    b.allocate("yneg", DType::Float32, {"chunks * world * mc", "n"});
    b.fill("wneg", -2, -1);
    b.forLoop("c", 0, "chunks", [&](BodyBuilder& l) {
      l.allgather("ags", "x[c]", "gs[" + chunk + "]").wait("ags", WaitMode::Host);
    });
    b.matmul("gs", "wneg", "yneg").addTensors("y", "yneg", "y").check("y", 0);
    EXPECT_EQ(b.build(), loadProgram(test::examplesDir() + "/allgather_matmul_chunked.json"));
  }
  {
    ProgramBuilder b("matmul_reduce_scatter_chunked");
    b.param("chunks", 4).param("mc", 2).param("kr", 8).param("n", 8);
    b.allocate("x", DType::Float32, {"chunks * world * mc", "kr"});
    b.allocate("w", DType::Float32, {"kr", "n"});
    b.allocate("p", DType::Float32, {"chunks * world * mc", "n"});
    b.allocate("out", DType::Float32, {"chunks * mc", "n"});
    b.fill("x", "rank + 1", 1).fill("w", 1, 1);
    b.setStream(1).syncStream(0).setStream(0);  // stream 1's matmuls read what stream 0 filled
    b.forLoop("c", 0, "chunks", [&](BodyBuilder& l) {
      l.setStream(1).matmul("x[" + chunk + "]", "w", "p[" + chunk + "]").setStream(0);
      l.syncStream(1);
      l.reduceScatter("rs", "p[" + chunk + "]", "out[c * mc:(c + 1) * mc]", ReduceOp::Sum);
      l.wait("rs");
    });
    b.allocate("wneg", DType::Float32, {"kr", "n"});
    b.allocate("pneg", DType::Float32, {"chunks * world * mc", "n"});
    b.allocate("outneg", DType::Float32, {"chunks * mc", "n"});
    b.fill("wneg", -1, -1).matmul("x", "wneg", "pneg");
    b.forLoop("c", 0, "chunks", [&](BodyBuilder& l) {
      l.reduceScatter("rsneg", "pneg[" + chunk + "]", "outneg[c * mc:(c + 1) * mc]",
                      ReduceOp::Sum);
      l.wait("rsneg", WaitMode::Host);
    });
    b.addTensors("out", "outneg", "out").check("out", 0);
    EXPECT_EQ(b.build(),
              loadProgram(test::examplesDir() + "/matmul_reduce_scatter_chunked.json"));
  }
}

TEST(Builder, KernelNodesSortTheirArgsLikeJson) {
  ProgramBuilder b("k");
  b.allocate("a", DType::Float32, {4}).allocate("b", DType::Float32, {4});
  b.kernel("rotate_rows", {"a"}, {"b"}, {{"shift", 1}, {"extra", "world"}});
  b.matmul("a", "b", "a", MatmulOptions{.transpose_b = true, .accumulate = true});
  const Program p = b.build();
  EXPECT_EQ(parseProgram(saveProgram(p)), p);
  const auto& k = std::get<Kernel>(p.body[2].v);
  ASSERT_EQ(k.args.size(), 2u);
  EXPECT_EQ(k.args[0].first, "extra");
}

TEST(Builder, ElementwiseNodesRandomFillsAndTensorChecksMatchTheirJson) {
  ProgramBuilder b("e");
  b.allocate("x", DType::Float32, {8}).allocate("h", DType::BFloat16, {8});
  b.fillRandom("x", "rank + 1", -0.5, 2.0).relu("x", "x").gelu("x", "x").silu("x", "x");
  b.scale("x", "x", Real(Expr("world"))).cast("x", "h").checkClose("h", "x", 0.01, 1e-3);
  const Program json = parseProgram(R"({"format": "hostir/1", "name": "e", "body": [
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": [8]},
    {"op": "allocate", "name": "h", "dtype": "bfloat16", "shape": [8]},
    {"op": "fill", "tensor": "x", "random": {"seed": "rank + 1", "low": -0.5, "high": 2}},
    {"op": "relu", "input": "x", "output": "x"},
    {"op": "gelu", "input": "x", "output": "x"},
    {"op": "silu", "input": "x", "output": "x"},
    {"op": "scale", "input": "x", "output": "x", "factor": "world"},
    {"op": "cast", "input": "x", "output": "h"},
    {"op": "check", "tensor": "h", "expected": "x", "rtol": 0.01, "atol": 0.001}]})");
  EXPECT_EQ(b.program(), json) << saveProgram(b.program(), 2);
}

}  // namespace
}  // namespace hir
