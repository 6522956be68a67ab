// Static validation: one test per rule, each with a small program that
// breaks it, checking where the issue is reported and what it says.
#include "analysis/validate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/check.h"
#include <hostir/builder.h>
#include <hostir/json.h>

namespace hir {
namespace {

using Issues = std::vector<ValidationError::Issue>;

// A whole document around `body` (a JSON array's contents).
std::string doc(const std::string& body, const std::string& params = "{\"n\": 8}",
                const std::string& extra = "") {
  return "{\"format\": \"hostir/1\", \"name\": \"t\", \"params\": " + params +
         ", \"inputs\": [], \"outputs\": []" + extra + ", \"body\": [" + body + "]}";
}

Issues issuesOf(const Program& program, int world = 4) {
  try {
    validate(program, ValidateOptions{world, backendCatalog()});
  } catch (const ValidationError& e) {
    return e.issues();
  }
  return {};
}

Issues issuesOf(const std::string& json, int world = 4) {
  return issuesOf(parseProgram(json), world);
}

std::string show(const Issues& issues) {
  std::string out;
  for (const auto& i : issues) out += "\n  " + i.path + ": " + i.message;
  return issues.empty() ? std::string("\n  (no issues)") : out;
}

// True if some issue is at `path` and its message contains `text`.
::testing::AssertionResult hasIssue(const Issues& issues, const std::string& path,
                                    const std::string& text) {
  for (const auto& i : issues)
    if (i.path == path && i.message.find(text) != std::string::npos)
      return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no issue at " << path << " containing \"" << text << "\"; got:" << show(issues);
}

const char* kAlloc =
    R"({"op": "allocate", "name": "buf", "dtype": "float32", "shape": ["world", "n"]})";

std::string alloc(const std::string& name, const std::string& dtype = "float32",
                  const std::string& shape = "[\"world\", \"n\"]") {
  return R"({"op": "allocate", "name": ")" + name + R"(", "dtype": ")" + dtype + R"(", "shape": )" +
         shape + "}";
}

// ------------------------------------------------------------------ valid

TEST(Validate, RingAllgatherFromTheDesignIsValid) {
  const std::string body = std::string(kAlloc) + R"(,
    {"op": "fill", "tensor": "buf[rank]", "value": "rank * 1000", "step": 1},
    {"op": "for", "index": "i", "start": 0, "stop": "world - 1", "body": [
      {"op": "share_mem_handles", "communications": ["s", "r"]},
      {"op": "communication", "name": "s", "type": "send",
       "tensor": "buf[(rank - i + world) % world]", "peer": "(rank + 1) % world", "backend": "ipc"},
      {"op": "communication", "name": "r", "type": "recv",
       "tensor": "buf[(rank - i - 1 + world) % world]", "peer": "(rank - 1 + world) % world",
       "backend": "ipc"},
      {"op": "wait", "communication": "r"},
      {"op": "wait", "communication": "s"}
    ]},
    {"op": "for", "index": "j", "start": 0, "stop": "world", "body": [
      {"op": "check", "tensor": "buf[j]", "value": "j * 1000", "step": 1}
    ]})";
  Issues issues = issuesOf(doc(body, "{\"n\": 1024}"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

// ------------------------------------------------------------ world, params

TEST(Validate, WorldSizeMismatchIsRejected) {
  Issues issues = issuesOf(doc(kAlloc, "{\"n\": 8}", ", \"world_size\": 4"), 2);
  EXPECT_TRUE(hasIssue(issues, "/world_size", "the program needs world size 4; it is run with 2"));
}

TEST(Validate, MatchingWorldSizeIsAccepted) {
  Issues issues = issuesOf(doc(kAlloc, "{\"n\": 8}", ", \"world_size\": 4"), 4);
  EXPECT_TRUE(issues.empty()) << show(issues);
}

TEST(Validate, WorldBelowMinWorldSizeIsRejected) {
  Issues issues = issuesOf(doc(kAlloc, "{\"n\": 8}", ", \"min_world_size\": 3"), 2);
  EXPECT_TRUE(hasIssue(issues, "/min_world_size", "needs at least 3 ranks; it is run with 2"));
  EXPECT_TRUE(issuesOf(doc(kAlloc, "{\"n\": 8}", ", \"min_world_size\": 3"), 3).empty());
}

TEST(Validate, ParamNamedRankIsRejected) {
  // Built in C++: the JSON loader may already refuse this name.
  Program p;
  p.params = {{"rank", 1}, {"n", 2}, {"n", 3}};
  Issues issues = issuesOf(p);
  EXPECT_TRUE(hasIssue(issues, "/params/rank", "a param cannot be named 'rank'"));
  EXPECT_TRUE(hasIssue(issues, "/params/n", "declared twice"));
}

// ------------------------------------------------------------ expressions

TEST(Validate, UnknownNameInExpressionIsRejected) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [
      {"op": "fill", "tensor": "buf", "value": "j + 1"}]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/body/0/value",
                       "unknown name 'j' in expression 'j + 1' (known: rank, world, n, i)"));
}

TEST(Validate, LoopIndexIsNotVisibleAfterItsLoop) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": []},
    {"op": "fill", "tensor": "buf", "value": "i"})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/value", "unknown name 'i'"));
}

TEST(Validate, LoopBoundsCannotUseTheirOwnIndex) {
  Issues issues =
      issuesOf(doc(R"({"op": "for", "index": "i", "start": 0, "stop": "i + 1", "body": []})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/stop", "unknown name 'i' in expression 'i + 1'"));
}

TEST(Validate, LoopIndexShadowingAParamIsRejected) {
  Issues issues =
      issuesOf(doc(R"({"op": "for", "index": "n", "start": 0, "stop": 2, "body": []})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/index", "shadows the param 'n'"));
}

TEST(Validate, LoopIndexShadowingRankIsRejected) {
  // Built in C++: the JSON loader already refuses this index.
  Program p;
  ForLoop f;
  f.index = "rank";
  f.stop = Expr(int64_t{2});
  p.body.push_back(f);
  Issues issues = issuesOf(p);
  EXPECT_TRUE(hasIssue(issues, "/body/0/index", "loop index 'rank' shadows the predefined 'rank'"));
}

TEST(Validate, LoopIndexShadowingAnEnclosingIndexIsRejected) {
  Issues issues = issuesOf(doc(R"(
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [
      {"op": "for", "index": "i", "start": 0, "stop": 2, "body": []}]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/body/0/index",
                       "shadows the index of the enclosing loop at /body/0"));
}

TEST(Validate, SiblingLoopsMayReuseAnIndex) {
  Issues issues = issuesOf(doc(R"(
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": []},
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": []})"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

TEST(Validate, LoopIndexMustBeAnIdentifier) {
  Program p;
  ForLoop f;
  f.index = "2x";
  f.stop = Expr(int64_t{2});
  p.body.push_back(f);
  Issues issues = issuesOf(p);
  EXPECT_TRUE(hasIssue(issues, "/body/0/index", "a loop index is an identifier"));
}

TEST(Validate, ConstantLoopStepThatIsNotPositiveIsRejected) {
  Issues issues =
      issuesOf(doc(R"({"op": "for", "index": "i", "start": 0, "stop": 2, "step": 0, "body": []})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/step", "a loop step must be positive; found 0"));
}

TEST(Validate, ConstantStreamOutOfRangeIsRejected) {
  Issues issues = issuesOf(doc(R"({"op": "set_stream", "stream": 16},
                                  {"op": "sync_stream", "stream": "rank + q"})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/stream", "stream 16 is outside [0, 16)"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/stream", "unknown name 'q'"));
}

TEST(Validate, IfConditionUsesKnownNames) {
  Issues issues = issuesOf(doc(R"({"op": "if", "cond": "rank == root", "then": [], "else": []})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/cond", "unknown name 'root'"));
}

// ------------------------------------------------------------ allocations

TEST(Validate, DuplicateAllocationNameIsRejected) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [)" +
                               kAlloc + "]}"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/body/0/name",
                       "allocation name 'buf' is already used by the allocate at /body/0"));
}

TEST(Validate, UnknownTensorIsRejected) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "fill", "tensor": "bfu[0]", "value": 1})"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/tensor",
                       "'bfu' names no allocation of the program (allocations: buf)"));
}

TEST(Validate, TensorUsedBeforeItsAllocateIsRejected) {
  Issues issues =
      issuesOf(doc(std::string(R"({"op": "fill", "tensor": "buf", "value": 1},)") + kAlloc));
  EXPECT_TRUE(hasIssue(issues, "/body/0/tensor", "'buf' is used before its allocate at /body/1"));
}

TEST(Validate, TensorAllocatedInALoopIsNotVisibleAfterIt) {
  Issues issues = issuesOf(doc(R"(
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [)" +
                               alloc("tmp") + R"(, {"op": "deallocate", "name": "tmp"}]},
    {"op": "check", "tensor": "tmp", "value": 0})"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/tensor",
                       "'tmp' is allocated at /body/0/body/0, in a body that does not enclose"));
}

TEST(Validate, TensorAllocatedInAThenBranchIsNotVisibleInTheElseBranch) {
  Issues issues = issuesOf(doc(R"(
    {"op": "if", "cond": "rank == 0", "then": [)" +
                               alloc("tmp") + R"(],
     "else": [{"op": "fill", "tensor": "tmp", "value": 0}]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/else/0/tensor", "in a body that does not enclose"));
}

TEST(Validate, TensorUsedAfterDeallocateIsRejected) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "deallocate", "name": "buf"},
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [
      {"op": "fill", "tensor": "buf[i]", "value": 1}]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/0/tensor",
                       "in 'buf[i]': 'buf' is used after its deallocate at /body/1"));
}

TEST(Validate, DeallocateTwiceIsRejected) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "deallocate", "name": "buf"}, {"op": "deallocate", "name": "buf"})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/name", "'buf' is deallocated twice (first at /body/1)"));
}

TEST(Validate, DeallocateOfUnknownTensorIsRejected) {
  Issues issues = issuesOf(doc(R"({"op": "deallocate", "name": "ghost"})"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/name", "'ghost' names no allocation of the program"));
}

TEST(Validate, ReferenceIndexUsesOnlyNamesInScope) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "fill", "tensor": "buf[k][0:n]", "value": 1})"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/tensor", "unknown name 'k'"));
}

TEST(Validate, ReferenceWithMoreIndicesThanDimensionsIsRejected) {
  Issues issues = issuesOf(doc(std::string(kAlloc) + R"(,
    {"op": "fill", "tensor": "buf[0][1][0:1]", "value": 1})"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/tensor", "indexes 3 dimensions, but 'buf' has 2"));
}

TEST(Validate, ShapeMayUseRankButNotAnIndexOutOfScope) {
  Issues ok = issuesOf(doc(alloc("a", "float32", R"(["rank + 1", "n"])")));
  EXPECT_TRUE(ok.empty()) << show(ok);
  Issues issues =
      issuesOf(doc(R"({"op": "for", "index": "i", "start": 0, "stop": 2, "body": []},)" +
                   alloc("a", "float32", R"(["n", "i"])")));
  EXPECT_TRUE(hasIssue(issues, "/body/1/shape/1", "unknown name 'i'"));
}

TEST(Validate, InputsAndOutputsMustNameAllocations) {
  Issues issues = issuesOf(std::string(R"({"format": "hostir/1", "name": "t", "params": {"n": 8},
      "inputs": ["buf", "buf"], "outputs": ["out"], "body": [)") +
                           kAlloc + "]}");
  EXPECT_TRUE(hasIssue(issues, "/inputs/1", "'buf' is listed twice"));
  EXPECT_TRUE(hasIssue(issues, "/outputs/0", "'out' names no allocation of the program"));
}

// ---------------------------------------------------------- communications

std::string comm(const std::string& fields) { return R"({"op": "communication", )" + fields + "}"; }

const std::string kTwoBuffers = alloc("a") + "," + alloc("b");

TEST(Validate, DuplicateCommunicationNameIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum")") +
      "," +
      comm(R"("name": "c", "type": "allreduce", "input": "b", "output": "b", "reduce": "sum")")));
  EXPECT_TRUE(
      hasIssue(issues, "/body/3/name", "name 'c' is already used by the communication at /body/2"));
}

TEST(Validate, GroupAndCommunicationShareOneNamespace) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(R"("name": "g", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum")") +
      R"(, {"op": "group", "name": "g", "body": []})"));
  EXPECT_TRUE(hasIssue(issues, "/body/3/name", "already used by the communication at /body/2"));
}

TEST(Validate, CollectiveWithoutInputIsRejected) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + "," + comm(R"("name": "c", "type": "allgather", "output": "b")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2", "allgather needs 'input'"));
}

TEST(Validate, CollectiveWithTensorOrPeerIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "c", "type": "allgather", "input": "a", "output": "b", "tensor": "a", "peer": 1)")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/tensor", "allgather takes no 'tensor'"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/peer", "allgather takes no 'peer'"));
}

TEST(Validate, RootIsRequiredForBroadcast) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + "," +
                   comm(R"("name": "c", "type": "broadcast", "input": "a", "output": "b")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2", "broadcast needs 'root'"));
}

TEST(Validate, RootIsForbiddenForAllreduce) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "c", "type": "allreduce", "input": "a", "output": "b", "reduce": "sum", "root": 0)")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/root", "allreduce takes no 'root'"));
}

TEST(Validate, ReduceOpIsRequiredForReduceScatter) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + "," +
                   comm(R"("name": "c", "type": "reduce_scatter", "input": "a", "output": "b")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2", "reduce_scatter needs 'reduce'"));
}

TEST(Validate, ReduceOpIsForbiddenForAllgather) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(R"("name": "c", "type": "allgather", "input": "a", "output": "b", "reduce": "max")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/reduce", "allgather takes no 'reduce'"));
}

TEST(Validate, SendWithoutPeerIsRejected) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + "," + comm(R"("name": "s", "type": "send", "tensor": "a")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2", "send needs 'peer'"));
}

TEST(Validate, RecvWithInputAndRootIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(R"("name": "r", "type": "recv", "tensor": "a", "peer": 0, "input": "b", "root": 0)")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/input", "recv takes no 'input'"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/root", "recv takes no 'root'"));
}

TEST(Validate, SendWithTeamIsRejected) {
  Issues issues = issuesOf(
      doc(kTwoBuffers + "," +
          comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 1, "team": [0, 1])")));
  EXPECT_TRUE(
      hasIssue(issues, "/body/2/team", "send/recv have no team; the peer is an absolute rank"));
}

TEST(Validate, ProtocolOnCollectiveIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "c", "type": "allreduce", "input": "a", "output": "b", "reduce": "sum", "protocol": "get")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/protocol", "protocol 'get' applies only to send/recv"));
}

TEST(Validate, ProtocolOnABackendWithoutProtocolsIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "s", "type": "send", "tensor": "a", "peer": 1, "backend": "mpi", "protocol": "put")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/protocol", "backend 'mpi' takes no protocol 'put'"));
}

TEST(Validate, UnknownBackendListsTheRegisteredOnes) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 1, "backend": "gloo")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/backend", "unknown backend 'gloo'; expected \"auto\""));
  EXPECT_TRUE(hasIssue(issues, "/body/2/backend", "\"mpi\""));
  EXPECT_TRUE(hasIssue(issues, "/body/2/backend", "\"ipc\""));
}

// Validation asks the catalog it is given, never a list of names of its
// own: a backend an embedder registers is as good as a built-in.
TEST(Validate, ABackendOfTheCatalogIsAcceptedByName) {
  BackendCaps mine;
  mine.name = "my-fabric";
  mine.devices = {"host"};
  mine.types = {CommType::Send, CommType::Recv};
  mine.dtypes = EnumSet<DType>::all(kDTypeNames);
  mine.protocols = {Protocol::Get};
  mine.maps_peer_memory = true;
  std::vector<BackendCaps> catalog = backendCatalog();
  catalog.push_back(mine);
  const std::string body =
      kTwoBuffers + "," +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 1, "backend": "my-fabric", "protocol": "get")") +
      R"(, {"op": "share_mem_handles", "communications": ["s"]}, {"op": "wait", "communication": "s"})";
  try {
    validate(parseProgram(doc(body)), ValidateOptions{4, catalog});
  } catch (const ValidationError& e) {
    FAIL() << e.what();
  }
  EXPECT_THROW(validate(parseProgram(doc(body)), ValidateOptions{4, backendCatalog()}),
               ValidationError);
}

TEST(Validate, ProtocolOnIpcSendIsAccepted) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "s", "type": "send", "tensor": "a", "peer": 1, "backend": "ipc", "protocol": "get")") +
      R"(, {"op": "wait", "communication": "s"})"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

// ----------------------------------------------------------------- dtypes

TEST(Validate, CollectiveBetweenDTypesIsRejected) {
  Issues issues = issuesOf(doc(
      alloc("a") + "," + alloc("b", "int32") + "," +
      comm(R"("name": "c", "type": "allreduce", "input": "a", "output": "b", "reduce": "sum")")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/output", "allreduce from float32 'a' to int32 'b'"));
}

TEST(Validate, CopyBetweenDTypesIsRejected) {
  Issues issues = issuesOf(
      doc(alloc("a") + "," + alloc("b", "int32") + R"(, {"op": "copy", "src": "a", "dst": "b"})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/dst", "copy from float32 'a' to int32 'b'"));
}

// ------------------------------------------------------------------ teams

TEST(Validate, TeamUsingRankIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum", "team": [0, "rank"])")));
  EXPECT_TRUE(hasIssue(issues, "/body/2/team/1",
                       "teams are fixed at load: 'rank' cannot appear in a team"));
}

TEST(Validate, TeamUsingLoopIndexIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [)" +
      comm(
          R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum", "team": ["i", "world - 1"])") +
      "]}"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/0/team/0", "loop index 'i' cannot appear in a team"));
}

TEST(Validate, TeamMayUseWorldAndParams) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
          comm(
              R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum", "team": ["world - 1", "k"])") +
          R"(, {"op": "wait", "communication": "c"})",
      "{\"n\": 8, \"k\": 0}"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

TEST(Validate, TeamRankOutsideTheWorldOrRepeatedIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum", "team": [1, "world", "2 - 1"])")));
  EXPECT_TRUE(
      hasIssue(issues, "/body/2/team/1", "team rank 'world' is 4, outside the world [0, 4)"));
  EXPECT_TRUE(
      hasIssue(issues, "/body/2/team/2", "rank 1 is already in the team (at /body/2/team/0)"));
}

// ------------------------------------------------------ share_mem_handles

const std::string kIpcSend = comm(
    R"("name": "s", "type": "send", "tensor": "a", "peer": "(rank + 1) % world", "backend": "ipc")");

TEST(Validate, ShareMemHandlesMayListALaterCommunication) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + R"(, {"op": "share_mem_handles", "communications": ["s"]},)" +
                   kIpcSend + R"(, {"op": "wait", "communication": "s"})"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

TEST(Validate, ShareMemHandlesOfUnknownCommunicationIsRejected) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + "," + kIpcSend +
                   R"(, {"op": "share_mem_handles", "communications": ["s", "t", "s"]})"));
  EXPECT_TRUE(
      hasIssue(issues, "/body/3/communications/1", "'t' is not a communication of the program"));
  EXPECT_TRUE(hasIssue(issues, "/body/3/communications/2", "'s' is listed twice"));
}

TEST(Validate, ShareMemHandlesOfNonIpcCommunicationIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + "," +
      comm(
          R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum", "backend": "nccl")") +
      R"(, {"op": "share_mem_handles", "communications": ["c"]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/3/communications/0", "uses backend 'nccl'"));
}

// ------------------------------------------------------------------- wait

TEST(Validate, WaitOnUnknownCommunicationIsRejected) {
  Issues issues = issuesOf(doc(R"({"op": "wait", "communication": "x"})"));
  EXPECT_TRUE(
      hasIssue(issues, "/body/0/communication",
               "wait on 'x', which is not a communication or group posted before this node"));
}

TEST(Validate, WaitBeforeThePostIsRejected) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + R"(, {"op": "wait", "communication": "s"},)" + kIpcSend));
  EXPECT_TRUE(hasIssue(issues, "/body/2/communication", "(it is posted later, at /body/3,"));
}

TEST(Validate, AWaitOnALaterPostInALoopAroundItIsAccepted) {
  // Software pipelining: the wait at the top of iteration i waits for the
  // post of iteration i - 1; the loop's first iteration skips it.
  Issues issues = issuesOf(doc(
      kTwoBuffers + R"(, {"op": "for", "index": "i", "stop": 4, "body": [
        {"op": "if", "cond": "i > 0", "then": [{"op": "wait", "communication": "s"}]},
        {"op": "if", "cond": "1", "then": [)" +
      kIpcSend + R"(]}]})"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

TEST(Validate, AWaitOnALaterPostOutsideItsLoopsIsRejectedSayingWhy) {
  // The post is in a loop after the wait's loop: no iteration of the wait's
  // loop follows one that posted it.
  Issues issues = issuesOf(doc(
      kTwoBuffers + R"(, {"op": "for", "index": "i", "stop": 2, "body": [
        {"op": "wait", "communication": "s"}]},
      {"op": "for", "index": "j", "stop": 2, "body": [)" +
      kIpcSend + R"(]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/0/communication",
                       "(it is posted later, at /body/3/body/0, outside every loop around this "
                       "wait"))
      << show(issues);
}

TEST(Validate, WaitOnAGroupOrACommunicationInItIsAccepted) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + R"(, {"op": "group", "name": "g", "body": [)" + kIpcSend +
      R"(]}, {"op": "wait", "communication": "g"}, {"op": "wait", "communication": "s", "mode": "host"})"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

// ------------------------------------------------------------------ group

TEST(Validate, GroupHoldingAFillIsRejected) {
  Issues issues = issuesOf(doc(kTwoBuffers + R"(, {"op": "group", "name": "g", "body": [)" +
                               kIpcSend + R"(, {"op": "fill", "tensor": "b", "value": 0}]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/1",
                       "a group holds communications (and for/if around them), not 'fill'"));
}

TEST(Validate, GroupWithLoopsAroundCommunicationsIsAccepted) {
  Issues issues =
      issuesOf(doc(kTwoBuffers + R"(, {"op": "group", "name": "g", "body": [
      {"op": "for", "index": "i", "start": 0, "stop": "world", "body": [
        {"op": "if", "cond": "i != rank", "then": [)" +
                   comm(R"("name": "s", "type": "send", "tensor": "a[rank]", "peer": "i")") + "," +
                   comm(R"("name": "r", "type": "recv", "tensor": "b[i]", "peer": "i")") +
                   R"(]}]}]}, {"op": "wait", "communication": "g"})"));
  EXPECT_TRUE(issues.empty()) << show(issues);
}

TEST(Validate, NestedGroupIsRejected) {
  Issues issues = issuesOf(doc(kTwoBuffers + R"(, {"op": "group", "name": "g", "body": [
      {"op": "group", "name": "h", "body": []}]})"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/0", "group 'h' is nested in group 'g' (/body/2)"));
}

TEST(Validate, GroupMixingBackendsIsRejected) {
  Issues issues = issuesOf(doc(
      kTwoBuffers + R"(, {"op": "group", "name": "g", "body": [)" +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 1, "backend": "mpi")") + "," +
      comm(R"("name": "t", "type": "send", "tensor": "a", "peer": 2, "backend": "auto")") + "," +
      comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": 1, "backend": "ipc")") + "]}"));
  EXPECT_TRUE(
      hasIssue(issues, "/body/2/body/2/backend",
               "group 'g' mixes backends: 'r' uses 'ipc' but 's' (/body/2/body/0) uses 'mpi'"));
  EXPECT_EQ(issues.size(), 1u) << show(issues);  // "auto" mixes with anything
}

// ---------------------------------------------------------------- together

TEST(Validate, SeveralProblemsAreReportedTogether) {
  const std::string json = doc(kTwoBuffers + R"(,
    {"op": "fill", "tensor": "c", "value": 0},
    {"op": "wait", "communication": "nope"},
    {"op": "set_stream", "stream": "z"})",
                               "{\"n\": 8}", ", \"world_size\": 2");
  Issues issues = issuesOf(json);
  EXPECT_EQ(issues.size(), 4u) << show(issues);
  EXPECT_TRUE(hasIssue(issues, "/world_size", "needs world size 2"));
  EXPECT_TRUE(hasIssue(issues, "/body/2/tensor", "'c' names no allocation"));
  EXPECT_TRUE(hasIssue(issues, "/body/3/communication", "wait on 'nope'"));
  EXPECT_TRUE(hasIssue(issues, "/body/4/stream", "unknown name 'z'"));
  // The exception's text lists each issue on its own line, path first.
  try {
    validate(parseProgram(json), ValidateOptions{4, backendCatalog()});
    FAIL() << "validate accepted an invalid program";
  } catch (const ValidationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/body/3/communication: wait on 'nope'"), std::string::npos) << what;
    EXPECT_EQ(e.exitCode(), kExitBadInput);
  }
}

// A program made by the builder (or by hand) is held to what JSON's parser
// refuses: names that are identifiers, printable text, enums in range
// (issue 40: a name with a space was accepted, a DType out of range was an
// internal assertion at run time).
TEST(Validate, ABuiltProgramIsCheckedAsJsonIsParsed) {
  ProgramBuilder b("bad\x1b[2Kname");
  b.allocate("my tensor", DType::Float32, {Expr(8)});
  b.allocate("x", static_cast<DType>(42), {Expr(8)});
  b.allreduce("ar", "x", "x", static_cast<ReduceOp>(9));
  b.forLoop("i j", 0, 2, [](BodyBuilder&) {});
  b.kernel("k\r", {}, {"x"});
  const Issues issues = issuesOf(b.build());
  EXPECT_TRUE(hasIssue(issues, "/name", "a program name is printable text of at most 256 bytes, "
                                        "but it has \\x1b at byte 3"));
  EXPECT_TRUE(hasIssue(issues, "/body/0/name",
                       "an allocation name is an identifier ([A-Za-z_][A-Za-z0-9_]*); found "
                       "'my tensor'"));
  EXPECT_TRUE(hasIssue(issues, "/body/1/dtype", "dtype 42 is not one of \"float32\""));
  EXPECT_TRUE(hasIssue(issues, "/body/2/reduce", "reduce 9 is not one of \"sum\""));
  EXPECT_TRUE(hasIssue(issues, "/body/3/index", "a loop index is an identifier"));
  EXPECT_TRUE(hasIssue(issues, "/body/4/name", "but it has \\r at byte 1"));
}

}  // namespace
}  // namespace hir
