// Which posts lowering marks joined (plan.h): a post, or a group's end,
// followed right away by stream-mode waits on everything it posts, with no
// other wait on them anywhere. The evaluator hands exactly those to
// Backend::postJoined, which may run them on the current stream; a wrong
// mark would take away overlap that the program asked for.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/validate.h"
#include <hostir/json.h>
#include "lower/lower.h"

namespace hir {
namespace {

// The joined flag of every Post outside a group and every GroupEnd, in
// code order, as "name:1" / "name:0" (a GroupEnd is named by its group).
std::vector<std::string> joinedMarks(const std::string& body) {
  Program program = parseProgram(
      R"({"format": "hostir/1", "name": "t", "body": [
        {"op": "allocate", "name": "a", "dtype": "float32", "shape": [4]},
        {"op": "allocate", "name": "b", "dtype": "float32", "shape": [4]},)" +
      body + "]}");
  validate(program, ValidateOptions{2, backendCatalog()});
  LowerOptions options;
  options.world = 2;
  options.backends = backendCatalog();
  Plan plan = lower(program, options);
  std::vector<std::string> out;
  for (const Instr& in : plan.code) {
    if (const auto* p = std::get_if<instr::Post>(&in.op)) {
      if (plan.comms[p->comm].group < 0)
        out.push_back(plan.comms[p->comm].name + (p->joined ? ":1" : ":0"));
    } else if (const auto* e = std::get_if<instr::GroupEnd>(&in.op)) {
      out.push_back(plan.groups[e->group].name + (e->joined ? ":1" : ":0"));
    }
  }
  return out;
}

using Marks = std::vector<std::string>;

const char* kAllreduce =
    R"({"op": "communication", "name": "c", "type": "allreduce", "input": "a", "output": "a",
    "reduce": "sum"})";

std::string waitOn(const std::string& name, const std::string& mode = "stream") {
  return R"({"op": "wait", "communication": ")" + name + R"(", "mode": ")" + mode + R"("})";
}

TEST(LowerJoined, APostWaitedRightAwayOnTheStreamIsJoined) {
  EXPECT_EQ(joinedMarks(std::string(kAllreduce) + "," + waitOn("c")), Marks{"c:1"});
}

TEST(LowerJoined, WorkBetweenThePostAndItsWaitKeepsThePostDetached) {
  EXPECT_EQ(joinedMarks(std::string(kAllreduce) +
                        R"(, {"op": "fill", "tensor": "b", "value": 1}, )" + waitOn("c")),
            Marks{"c:0"});
}

TEST(LowerJoined, AHostWaitRightAfterKeepsThePostDetached) {
  EXPECT_EQ(joinedMarks(std::string(kAllreduce) + "," + waitOn("c", "host")), Marks{"c:0"});
}

TEST(LowerJoined, ASecondWaitElsewhereKeepsThePostDetached) {
  EXPECT_EQ(joinedMarks(std::string(kAllreduce) + "," + waitOn("c") +
                        R"(, {"op": "fill", "tensor": "b", "value": 1}, )" + waitOn("c", "host")),
            Marks{"c:0"});
}

TEST(LowerJoined, AStreamChangeBeforeTheWaitKeepsThePostDetached) {
  EXPECT_EQ(joinedMarks(std::string(kAllreduce) +
                        R"(, {"op": "set_stream", "stream": 1}, )" + waitOn("c")),
            Marks{"c:0"});
}

TEST(LowerJoined, WaitsOnOtherCommunicationsInTheRunDoNotMatter) {
  const std::string first =
      R"({"op": "communication", "name": "d", "type": "allreduce", "input": "b", "output": "b",
          "reduce": "sum"},
         {"op": "fill", "tensor": "b", "value": 1},)";
  // d is followed by a fill: detached. c's run of waits also waits on d.
  EXPECT_EQ(joinedMarks(first + kAllreduce + "," + waitOn("d") + "," + waitOn("c")),
            (Marks{"d:0", "c:1"}));
}

TEST(LowerJoined, AGroupWaitedAsAWholeOrMemberByMemberIsJoined) {
  const std::string group = R"({"op": "group", "name": "g", "body": [
      {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "1 - rank"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank"}]},)";
  EXPECT_EQ(joinedMarks(group + waitOn("g")), Marks{"g:1"});
  EXPECT_EQ(joinedMarks(group + waitOn("r") + "," + waitOn("s")), Marks{"g:1"});
  // One member left for later: the group stays detached.
  EXPECT_EQ(joinedMarks(group + waitOn("r") + R"(, {"op": "fill", "tensor": "a", "value": 1}, )" +
                        waitOn("s")),
            Marks{"g:0"});
}

TEST(LowerJoined, AdjacentSendAndRecvWaitedRightAwayFormAJoinedImplicitGroup) {
  const std::string ring = R"(
      {"op": "communication", "name": "s", "type": "send", "tensor": "a", "peer": "1 - rank"},
      {"op": "communication", "name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank"},)";
  std::vector<std::string> marks = joinedMarks(ring + waitOn("s") + "," + waitOn("r"));
  ASSERT_EQ(marks.size(), 1u) << "one implicit group end";
  EXPECT_EQ(marks[0].substr(marks[0].size() - 2), ":1");
}

TEST(LowerJoined, APostAtTheEndOfALoopBodyIsDetached) {
  EXPECT_EQ(joinedMarks(R"({"op": "for", "index": "i", "start": 0, "stop": 2, "body": [)" +
                        std::string(kAllreduce) + "]}," + waitOn("c")),
            Marks{"c:0"});
}

}  // namespace
}  // namespace hir
