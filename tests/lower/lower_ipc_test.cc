// Lowering of ipc communications: where the implicit share_mem_handles go
// (before the outermost top-level node, and after an allocation nested in a
// loop or if), which communications they list, which allocations are marked
// ipc-shared, and the per-communication note that the backend cannot reach
// another node.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/validate.h"
#include "common/overloaded.h"
#include <hostir/json.h>
#include "lower/lower.h"

namespace hir {
namespace {

Plan planOf(const std::string& body, int world = 2) {
  Program program = parseProgram(R"({"format": "hostir/1", "name": "t", "body": [)" + body + "]}");
  validate(program, ValidateOptions{world, backendCatalog()});
  LowerOptions options;
  options.world = world;
  options.backends = backendCatalog();
  return lower(program, options);
}

// The code as short words: "alloc a", "share s r", "post s", "loop", "next", ...
std::vector<std::string> words(const Plan& plan) {
  std::vector<std::string> out;
  for (const Instr& in : plan.code)
    out.push_back(std::visit(
        Overloaded{
            [&](const instr::Allocate& a) { return "alloc " + plan.allocs[a.alloc].name; },
            [&](const instr::Deallocate& d) { return "free " + plan.allocs[d.alloc].name; },
            [&](const instr::Post& p) { return "post " + plan.comms[p.comm].name; },
            [&](const instr::GroupBegin&) { return std::string("group"); },
            [&](const instr::GroupEnd&) { return std::string("end"); },
            [&](const instr::Share& s) {
              std::string w = "share";
              for (int c : s.comms) w += " " + plan.comms[c].name;
              return w;
            },
            [&](const instr::Wait&) { return std::string("wait"); },
            [&](const instr::LoopInit&) { return std::string("loop"); },
            [&](const instr::LoopNext&) { return std::string("next"); },
            [&](const instr::JumpIfZero&) { return std::string("if"); },
            [&](const instr::Jump&) { return std::string("jump"); },
            [&](const instr::SetStream&) { return std::string("set_stream"); },
            [&](const instr::SyncStream&) { return std::string("sync_stream"); },
            [&](const instr::Fill&) { return std::string("fill"); },
            [&](const instr::Copy&) { return std::string("copy"); },
            [&](const instr::Check&) { return std::string("check"); },
            [&](const instr::Matmul&) { return std::string("matmul"); },
            [&](const instr::Add&) { return std::string("add"); },
            [&](const instr::Unary& u) { return std::string(toString(u.op)); },
            [&](const instr::Kernel&) { return std::string("kernel"); },
        },
        in.op));
  return out;
}

using Words = std::vector<std::string>;

const std::string kSendRecv = R"(
  {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "1 - rank",
   "backend": "ipc"},
  {"op": "communication", "name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank",
   "backend": "ipc"},
  {"op": "wait", "communication": "s"}, {"op": "wait", "communication": "r"})";

const std::string kTwoBuffers = R"(
  {"op": "allocate", "name": "a", "dtype": "int32", "shape": [4]},
  {"op": "allocate", "name": "b", "dtype": "int32", "shape": [4]},)";

TEST(LowerIpc, ImplicitExchangeGoesBeforeTheOutermostLoopAfterTheAllocations) {
  Plan plan = planOf(kTwoBuffers + R"(
    {"op": "for", "index": "i", "start": 0, "stop": 3, "body": [
      {"op": "for", "index": "j", "start": 0, "stop": 2, "body": [)" +
                     kSendRecv + "]}]}");
  EXPECT_EQ(words(plan), (Words{"alloc a", "alloc b", "share s r", "loop", "loop", "group", "post s",
                                "post r", "end", "wait", "wait", "next", "next"}));
  EXPECT_TRUE(plan.allocs[0].peer_mapped);
  EXPECT_TRUE(plan.allocs[1].peer_mapped);
}

TEST(LowerIpc, AnAllocationInsideTheLoopIsExchangedRightAfterIt) {
  Plan plan = planOf(R"(
    {"op": "allocate", "name": "a", "dtype": "int32", "shape": [4]},
    {"op": "for", "index": "i", "start": 0, "stop": 3, "body": [
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [4]},)" +
                     kSendRecv + R"(, {"op": "deallocate", "name": "b"}]})");
  EXPECT_EQ(words(plan), (Words{"alloc a", "share s r", "loop", "alloc b", "share r", "group", "post s",
                                "post r", "end", "wait", "wait", "free b", "next"}));
}

TEST(LowerIpc, OnlyCommunicationsLeftOutOfAnExplicitExchangeGetAnImplicitOne) {
  Plan plan = planOf(kTwoBuffers + R"(
    {"op": "for", "index": "i", "start": 0, "stop": 3, "body": [
      {"op": "share_mem_handles", "communications": ["r"]},)" +
                     kSendRecv + "]}");
  EXPECT_EQ(words(plan), (Words{"alloc a", "alloc b", "share s", "loop", "share r", "group", "post s",
                                "post r", "end", "wait", "wait", "next"}));
}

TEST(LowerIpc, AutoAndMpiCommunicationsNeedNoExchange) {
  std::string body = kTwoBuffers + kSendRecv;
  for (std::size_t at; (at = body.find("\"ipc\"")) != std::string::npos;)
    body.replace(at, 5, "\"auto\"");
  Plan plan = planOf(body);
  EXPECT_EQ(words(plan), (Words{"alloc a", "alloc b", "group", "post s", "post r", "end", "wait", "wait"}));
  ASSERT_EQ(plan.backends.size(), 1u);
  EXPECT_EQ(plan.backends[0].name, "mpi");
  EXPECT_FALSE(plan.backends[0].maps_peer_memory);
  EXPECT_FALSE(plan.allocs[0].peer_mapped);
  EXPECT_TRUE(plan.comms[0].cross_node_why.empty()) << "mpi reaches other nodes";
}

TEST(LowerIpc, IpcCommunicationsSayWhyTheyCannotReachAnotherNode) {
  Plan plan = planOf(kTwoBuffers + kSendRecv);
  ASSERT_EQ(plan.backends.size(), 1u);
  EXPECT_EQ(plan.backends[0].name, "ipc");
  EXPECT_TRUE(plan.backends[0].maps_peer_memory);
  for (const PlanComm& c : plan.comms)
    EXPECT_EQ(c.cross_node_why,
              "backend 'ipc' reaches peers on its own node only, so both ranks must be on one "
              "node; use backend \"auto\" for a peer on another node");
}

}  // namespace
}  // namespace hir

namespace hir {
namespace {

// Adjacent send/recv nodes are posted as one unit; anything between them,
// a different backend, or an explicit group ends the run.
TEST(Lower, AdjacentSendAndRecvArePostedAsOneUnit) {
  Plan plan = lower(parseProgram(R"({"format": "hostir/1", "name": "p", "body": [
      {"op": "allocate", "name": "a", "dtype": "int32", "shape": [4]},
      {"op": "allocate", "name": "b", "dtype": "int32", "shape": [4]},
      {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "(rank + 1) % world"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b", "peer": "(rank + world - 1) % world"},
      {"op": "wait", "communication": "r"},
      {"op": "communication", "name": "s2", "type": "send", "tensor": "a", "peer": "(rank + 1) % world"},
      {"op": "wait", "communication": "s2"},
      {"op": "communication", "name": "r2", "type": "recv", "tensor": "b", "peer": "(rank + world - 1) % world"},
      {"op": "wait", "communication": "r2"},
      {"op": "wait", "communication": "s"}]})"),
                     LowerOptions{.world = 3, .backends = backendCatalog()});
  std::vector<int> group_of;
  for (const PlanComm& c : plan.comms) group_of.push_back(c.group);
  EXPECT_EQ(group_of, (std::vector<int>{0, 0, -1, -1}));
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_NE(plan.groups[0].name.find("/body/2 to /body/3"), std::string::npos)
      << plan.groups[0].name;
}

}  // namespace
}  // namespace hir
