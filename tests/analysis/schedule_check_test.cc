// The cross-rank schedule check: programs are validated, lowered for a world
// size and run dry on every rank; each test checks what is reported (node
// path, rank, loop indices, sizes) or that a correct program passes.
#include "analysis/schedule_check.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "analysis/validate.h"
#include "common/check.h"
#include <hostir/json.h>
#include "lower/lower.h"

namespace hir {
namespace {

using Issues = std::vector<ValidationError::Issue>;

std::string doc(const std::string& body, const std::string& params = R"({"n": 8})") {
  return R"({"format": "hostir/1", "name": "t", "params": )" + params +
         R"(, "inputs": [], "outputs": [], "body": [)" + body + "]}";
}

// Validated and lowered for `world` ranks.
Plan planOf(const std::string& body, int world, const std::string& params = R"({"n": 8})") {
  Program program = parseProgram(doc(body, params));
  validate(program, ValidateOptions{world, backendCatalog()});
  LowerOptions options;
  options.world = world;
  options.backends = backendCatalog();
  return lower(program, options);
}

Issues scheduleIssues(const Plan& plan, const ScheduleCheckOptions& options = {}) {
  try {
    checkSchedule(plan, options);
  } catch (const ValidationError& e) {
    return e.issues();
  }
  return {};
}

std::string show(const Issues& issues) {
  std::string out;
  for (const auto& i : issues) out += "\n  " + i.path + ": " + i.message;
  return issues.empty() ? std::string("\n  (no issues)") : out;
}

// True if some issue is at `path` and its message contains every one of `texts`.
::testing::AssertionResult hasIssue(const Issues& issues, const std::string& path,
                                    const std::vector<std::string>& texts) {
  for (const auto& i : issues) {
    if (i.path != path) continue;
    bool all = true;
    for (const std::string& t : texts) all = all && i.message.find(t) != std::string::npos;
    if (all) return ::testing::AssertionSuccess();
  }
  std::string wanted;
  for (const std::string& t : texts) wanted += " \"" + t + "\"";
  return ::testing::AssertionFailure()
         << "no issue at " << path << " containing" << wanted << "; got:" << show(issues);
}

std::string alloc(const std::string& name, const std::string& shape,
                  const std::string& dtype = "float32") {
  return R"({"op": "allocate", "name": ")" + name + R"(", "dtype": ")" + dtype + R"(", "shape": )" +
         shape + "}";
}

std::string comm(const std::string& fields) { return R"({"op": "communication", )" + fields + "}"; }

std::string wait(const std::string& name) {
  return R"({"op": "wait", "communication": ")" + name + R"("})";
}

// The ring allgather of the design: world - 1 steps of send/recv.
const std::string kRing = alloc("buf", R"(["world", "n"])") + R"(,
    {"op": "fill", "tensor": "buf[rank]", "value": "rank * 1000", "step": 1},
    {"op": "for", "index": "i", "start": 0, "stop": "world - 1", "body": [)" +
                          comm(R"("name": "s", "type": "send",
       "tensor": "buf[(rank - i + world) % world]", "peer": "(rank + 1) % world")") +
                          "," + comm(R"("name": "r", "type": "recv",
       "tensor": "buf[(rank - i - 1 + world) % world]", "peer": "(rank - 1 + world) % world")") +
                          "," + wait("r") + "," + wait("s") + R"(]},
    {"op": "for", "index": "j", "start": 0, "stop": "world", "body": [
      {"op": "check", "tensor": "buf[j]", "value": "j * 1000", "step": 1}]})";

// ----------------------------------------------------------------- passing

TEST(ScheduleCheck, RingAllgatherPassesAtEveryWorldSize) {
  for (int world = 1; world <= 8; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    Plan plan = planOf(kRing, world);
    ScheduleCheckResult result;
    ASSERT_NO_THROW(result = checkSchedule(plan)) << show(scheduleIssues(plan));
    EXPECT_FALSE(result.truncated);
    // world - 1 sends and as many recvs on every rank.
    EXPECT_EQ(result.communications, int64_t{2} * (world - 1) * world);
  }
}

TEST(ScheduleCheck, NonMembersSkipATeamCollective) {
  const std::string body = alloc("a", R"(["n"])") + "," +
                           comm(R"("name": "c", "type": "allreduce", "input": "a", "output": "a",
                                   "reduce": "sum", "team": [1, 3])") +
                           "," + wait("c");
  ScheduleCheckResult result = checkSchedule(planOf(body, 4));
  EXPECT_EQ(result.communications, 2);  // ranks 1 and 3 only
}

// A group whose body holds no communication (empty, or a loop of no
// iteration) posts nothing, and a wait on it returns at once; the check
// crashed on it (it looked up the backend of a group that has none).
TEST(ScheduleCheck, AGroupWithoutCommunicationsPostsNothing) {
  for (const std::string inner :
       {std::string(), std::string(R"({"op": "for", "index": "j", "stop": 0, "body": []})")}) {
    const std::string body = R"({"op": "for", "index": "i", "stop": 3, "body": [
        {"op": "group", "name": "g", "body": [)" + inner + R"(]},)" +
                             wait("g") + "]}";
    for (int world : {1, 2}) {
      SCOPED_TRACE("world " + std::to_string(world) + ", body [" + inner + "]");
      ScheduleCheckResult result;
      ASSERT_NO_THROW(result = checkSchedule(planOf(body, world)))
          << show(scheduleIssues(planOf(body, world)));
      EXPECT_EQ(result.communications, 0);
      EXPECT_TRUE(result.notes.empty()) << result.notes[0].message;
    }
  }
}

// ------------------------------------------------------------ across ranks

TEST(ScheduleCheck, ACommunicationNeverWaitedOnIsANoteNotAnError) {
  const std::string body = alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," +
                           comm(R"("name": "waited", "type": "allreduce", "input": "a",
                                   "output": "a", "reduce": "sum")") +
                           "," + wait("waited") + "," +
                           comm(R"("name": "joined", "type": "allreduce", "input": "b",
                                   "output": "b", "reduce": "sum")");
  ScheduleCheckResult result;
  ASSERT_NO_THROW(result = checkSchedule(planOf(body, 3)));
  ASSERT_EQ(result.notes.size(), 1u);  // once, not once per rank
  EXPECT_EQ(result.notes[0].path, "/body/4");
  EXPECT_NE(result.notes[0].message.find("on rank 0: communication 'joined' is still pending when "
                                         "the program ends"),
            std::string::npos)
      << result.notes[0].message;
}

TEST(ScheduleCheck, APostWaitedOnlyAfterItsLoopIsNoNote) {
  const std::string body = alloc("a", R"(["n"])") + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 4, "body": [)" +
                           comm(R"("name": "c", "type": "allreduce", "input": "a", "output": "a",
                                   "reduce": "sum")") +
                           "," + wait("c") + "]}";
  EXPECT_TRUE(checkSchedule(planOf(body, 2)).notes.empty());
}

TEST(ScheduleCheck, MismatchedCollectiveTypeNamesBothRanks) {
  const std::string body =
      alloc("a", R"(["n"])") + "," + alloc("b", R"(["world", "n"])") + R"(,
    {"op": "if", "cond": "rank == 2", "then": [)" +
      comm(R"("name": "x", "type": "allgather", "input": "a", "output": "b")") + "," + wait("x") +
      R"(], "else": [)" +
      comm(R"("name": "y", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum")") +
      "," + wait("y") + "]}";
  Issues issues = scheduleIssues(planOf(body, 4));
  EXPECT_TRUE(hasIssue(issues, "/body/2/else/0",
                       {"team [0, 1, 2, 3]: collective #1 differs: rank 0 posts allreduce of 8 "
                        "float32 with sum (/body/2/else/0) but rank 2 posts allgather of 8 float32 "
                        "(/body/2/then/0)"}));
}

TEST(ScheduleCheck, CollectiveCountThatDependsOnRankIsReported) {
  const std::string body =
      alloc("a", R"(["n + rank"])") + "," +
      comm(R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "max")") +
      "," + wait("c");
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/1",
                       {"rank 0 posts allreduce of 8 float32 with max (/body/1) but rank 1 posts "
                        "allreduce of 9 float32 with max (/body/1)"}));
}

TEST(ScheduleCheck, ExtraCollectiveOnOneRankIsReported) {
  const std::string body =
      alloc("a", R"(["n"])") + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": "2 - rank", "body": [)" +
      comm(R"("name": "c", "type": "allreduce", "input": "a", "output": "a", "reduce": "sum")") +
      "," + wait("c") + "]}";
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(
      hasIssue(issues, "/body/1/body/0",
               {"rank 1 posts 1 collective on team [0, 1], rank 0 posts 2; the first "
                "unmatched is allreduce of 8 float32 with sum on rank 0 (/body/1/body/0, i=1)"}));
}

TEST(ScheduleCheck, SendWithoutRecvIsReported) {
  const std::string body = alloc("a", R"(["n"])") + R"(,
    {"op": "if", "cond": "rank == 0", "then": [)" +
                           comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 1)") + "," +
                           wait("s") + "]}";
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/1/then/0",
                       {"rank 0 sends 1 message to rank 1, rank 1 receives 0 from rank 0",
                        "the first unmatched is the send (/body/1/then/0) on rank 0"}));
}

TEST(ScheduleCheck, SendAndRecvOfDifferentSizesAreReported) {
  const std::string body = alloc("a", R"(["n"])") + "," + alloc("b", R"(["2 * n"])") + R"(,
    {"op": "if", "cond": "rank == 0", "then": [)" +
                           comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 1)") + "," +
                           wait("s") + R"(], "else": [)" +
                           comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": 0)") + "," +
                           wait("r") + "]}";
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/2/then/0",
                       {"rank 0's send #1 to rank 1 (/body/2/then/0) carries 8 float32 but rank "
                        "1's recv #1 from rank 0 (/body/2/else/0) expects 16 float32"}));
}

TEST(ScheduleCheck, IpcSharedAllocationWithRankDependentShapeIsReported) {
  const std::string body =
      alloc("a", R"(["n + rank"])") + "," +
      comm(R"("name": "s", "type": "send", "tensor": "a[0:1]", "peer": "1 - rank")") + "," +
      comm(R"("name": "r", "type": "recv", "tensor": "a[1:2]", "peer": "1 - rank")") + "," +
      wait("r") + "," + wait("s");
  Plan plan = planOf(body, 2);
  EXPECT_NO_THROW(checkSchedule(plan));
  // As if lowering had bound the pair to ipc (the shapes must then agree).
  plan.allocs[0].peer_mapped = true;
  Issues issues = scheduleIssues(plan);
  EXPECT_TRUE(hasIssue(issues, "/body/0",
                       {"'a' is shared through ipc, so its shape must be the same on every rank: "
                        "rank 0 has [8], rank 1 has [9]"}));
}

// ------------------------------------------------------------------- ipc

// The ring allgather with every send/recv bound to ipc.
std::string ipcRing(const std::string& protocol_fields = "") {
  std::string out = kRing;
  for (const std::string peer : {R"("(rank + 1) % world")", R"("(rank - 1 + world) % world")"}) {
    const std::size_t at = out.find(peer);
    out.insert(at + peer.size(), R"(, "backend": "ipc")" + protocol_fields);
  }
  return out;
}

TEST(ScheduleCheck, IpcAllocationWhoseShapeDependsOnTheRankIsReported) {
  const std::string body =
      alloc("a", R"(["n + rank"])") + "," +
      comm(R"("name": "s", "type": "send", "tensor": "a[0:1]", "peer": "1 - rank",
              "backend": "ipc")") +
      "," +
      comm(R"("name": "r", "type": "recv", "tensor": "a[1:2]", "peer": "1 - rank",
              "backend": "ipc")") +
      "," + wait("r") + "," + wait("s");
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/0",
                       {"'a' is shared through ipc, so its shape must be the same on every rank: "
                        "rank 0 has [8], rank 1 has [9]"}));
}

TEST(ScheduleCheck, IpcExchangeReachedByOnlySomeRanksIsReported) {
  const std::string body =
      alloc("a", R"(["n"])") + R"(,
    {"op": "if", "cond": "rank == 0", "then": [
      {"op": "share_mem_handles", "communications": ["s"]}]},)" +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "(rank + 1) % world",
              "backend": "ipc")") +
      "," +
      comm(R"("name": "r", "type": "recv", "tensor": "a", "peer": "(rank - 1 + world) % world",
              "backend": "ipc")") +
      "," + wait("r") + "," + wait("s");
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/1/then/0",
                       {"share_mem_handles and the allocations of ipc-shared buffers must happen "
                        "in the same order on every rank (the exchange is collective)",
                        "event #2 is share_mem_handles (/body/1/then/0) on rank 0 but "
                        "share_mem_handles (/body/3) on rank 1"}));
}

TEST(ScheduleCheck, SendAndRecvOnDifferentBackendsOrProtocolsAreReported) {
  const std::string body = alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," +
                           comm(R"("name": "s", "type": "send", "tensor": "a",
                                   "peer": "(rank + 1) % world", "backend": "ipc")") +
                           "," +
                           comm(R"("name": "r", "type": "recv", "tensor": "b",
                                   "peer": "(rank - 1 + world) % world", "backend": "mpi")") +
                           "," + wait("r") + "," + wait("s");
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/2",
                       {"rank 0's send #1 to rank 1 (/body/2) uses backend 'ipc' but rank 1's "
                        "recv #1 from rank 0 (/body/3) uses backend 'mpi'; a send and its recv "
                        "need the same backend"}));

  std::string get = body;
  get.replace(get.find(R"("backend": "mpi")"), 16, R"("backend": "ipc", "protocol": "get")");
  issues = scheduleIssues(planOf(get, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/2",
                       {"uses protocol 'eager' but rank 1's recv #1 from rank 0 (/body/3) uses "
                        "protocol 'get'; a send and its recv need the same protocol (auto is "
                        "decided by size: on ipc, eager up to HIR_IPC_EAGER_SEND_MAX bytes, put "
                        "above)"}));
}

TEST(ScheduleCheck, IpcToAPeerOnAnotherNodeNamesPathRankPeerAndNodes) {
  Plan plan = planOf(ipcRing(), 4);
  ScheduleCheckOptions options;
  options.nodes = {"a", "a", "b", "b"};
  Issues issues = scheduleIssues(plan, options);
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/0",
                       {"on rank 1 (i=0): send to rank 2 through backend 'ipc', but rank 2 is on "
                        "node 'b' and rank 1 on node 'a': backend 'ipc' reaches peers on its own "
                        "node only, so both ranks must be on one node"}));
  EXPECT_TRUE(hasIssue(issues, "/body/2/body/1", {"on rank 0 (i=0): recv from rank 3"}));
  // The same rule over a trace (for evaluators that skip the check).
  P2pTrace trace = traceP2p(plan);
  try {
    checkPeerNodes(plan, trace, options.nodes);
    ADD_FAILURE() << "checkPeerNodes accepted ipc across nodes";
  } catch (const ValidationError& e) {
    EXPECT_TRUE(hasIssue(e.issues(), "/body/2/body/0", {"on rank 1: send to rank 2"}));
  }
  EXPECT_NO_THROW(checkPeerNodes(plan, trace, {"a", "a", "a", "a"}));
  // Auto never binds ipc, so the same ring on auto passes.
  options.nodes = {"a", "b", "a", "b"};
  EXPECT_NO_THROW(checkSchedule(planOf(kRing, 4), options));
}

TEST(ScheduleCheck, TheTraceGivesEachMessageBothEndsInBytes) {
  Plan plan = planOf(ipcRing(R"(, "protocol": "get")"), 3);
  P2pTrace trace = checkSchedule(plan).p2p;
  EXPECT_FALSE(trace.truncated);
  ASSERT_EQ(trace.pairs.size(), 3u);  // 0 -> 1, 1 -> 2, 2 -> 0
  const std::vector<P2pMessage>& m = trace.pairs.at({1, 2});
  ASSERT_EQ(m.size(), 2u);  // world - 1 steps
  const std::size_t row = 8 * sizeof(float);  // n = 8
  // Step i: rank 1 sends buf[(1 - i + 3) % 3], rank 2 receives it in the same row.
  EXPECT_EQ(m[0].send.offset, 1 * row);
  EXPECT_EQ(m[0].recv.offset, 1 * row);
  EXPECT_EQ(m[1].send.offset, 0 * row);
  EXPECT_EQ(m[1].recv.offset, 0 * row);
  EXPECT_EQ(m[1].bytes, row);
  EXPECT_EQ(m[1].protocol, Protocol::Get);
  EXPECT_EQ(plan.backends[m[1].backend].name, "ipc");
  EXPECT_EQ(plan.comms[m[1].send.comm].name, "s");
  EXPECT_EQ(plan.comms[m[1].recv.comm].name, "r");
  EXPECT_EQ(m[1].send.alloc, m[1].recv.alloc);
  // The dry run alone gives the same trace.
  P2pTrace again = traceP2p(plan);
  EXPECT_EQ(again.pairs.at({1, 2}).size(), 2u);
  EXPECT_EQ(again.pairs.at({2, 0})[1].recv.offset, 1 * row);  // step 1: buf[1]
}

TEST(ScheduleCheck, ATruncatedDryRunGivesATruncatedTrace) {
  Plan plan = planOf(ipcRing(), 4);
  ScheduleCheckOptions options;
  options.max_steps_per_rank = 8;  // a few instructions into the loop
  P2pTrace trace = traceP2p(plan, options);
  EXPECT_TRUE(trace.truncated);
  std::size_t messages = 0;
  for (const auto& [pair, m] : trace.pairs) messages += m.size();
  EXPECT_EQ(messages, 4u) << "each rank got through the first step only (a full run has 12)";
}

// -------------------------------------------------------------- per rank

TEST(ScheduleCheck, PeerOutOfRangeNamesRankAndLoopIndex) {
  const std::string body =
      alloc("a", R"(["n"])") + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 2, "body": [)" +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "(rank + 2 + i) % 7")") + "," +
      wait("s") + "]}";
  Issues issues = scheduleIssues(planOf(body, 4));
  EXPECT_TRUE(hasIssue(issues, "/body/1/body/0",
                       {"on rank 1 (i=1): peer (rank + 2 + i) % 7 evaluates to 4, outside the "
                        "world [0, 4)"}));
  // Reported once, for the first rank and iteration that hit it.
  int peer_issues = 0;
  for (const auto& i : issues) peer_issues += i.message.find("peer (") != std::string::npos;
  EXPECT_EQ(peer_issues, 1) << show(issues);
}

TEST(ScheduleCheck, AllgatherOutputOfTheWrongSizeNamesTheSizes) {
  const std::string body =
      alloc("a", R"(["n"])") + "," + alloc("b", R"(["3", "n"])") + "," +
      comm(R"("name": "g", "type": "allgather", "input": "a", "output": "b")") + "," + wait("g");
  Issues issues = scheduleIssues(planOf(body, 4));
  EXPECT_TRUE(hasIssue(issues, "/body/2",
                       {"on rank 0: allgather 'g' has input 'a' of 8 elements and output 'b' of 24 "
                        "elements; the output needs team size 4 x input 8 = 32 elements"}));
}

TEST(ScheduleCheck, ReduceScatterSizesFollowTheTeamSize) {
  const std::string ok = alloc("a", R"(["2", "n"])") + "," + alloc("b", R"(["n"])") + "," +
                         comm(R"("name": "c", "type": "reduce_scatter", "input": "a", "output": "b",
                                 "reduce": "sum", "team": [0, 2])") +
                         "," + wait("c");
  EXPECT_NO_THROW(checkSchedule(planOf(ok, 4)));
  const std::string bad =
      alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," +
      comm(
          R"("name": "c", "type": "reduce_scatter", "input": "a", "output": "b", "reduce": "sum")") +
      "," + wait("c");
  Issues issues = scheduleIssues(planOf(bad, 4));
  EXPECT_TRUE(
      hasIssue(issues, "/body/2", {"the input needs team size 4 x output 8 = 32 elements"}));
}

TEST(ScheduleCheck, RootOutsideTheTeamIsReported) {
  const std::string body = alloc("a", R"(["n"])") + "," +
                           comm(R"("name": "b", "type": "broadcast", "input": "a", "output": "a",
                                   "root": 3, "team": [0, 1])") +
                           "," + wait("b");
  Issues issues = scheduleIssues(planOf(body, 4));
  EXPECT_TRUE(hasIssue(issues, "/body/1",
                       {"on rank 0: root 3 evaluates to 3, which is not a member of team [0, 1]"}));
}

TEST(ScheduleCheck, WaitOnACommunicationThisRankNeverPostedIsReported) {
  const std::string body = alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + R"(,
    {"op": "if", "cond": "rank == 0", "then": [)" +
                           comm(R"("name": "s", "type": "send", "tensor": "a", "peer": 0)") + "," +
                           comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": 0)") +
                           "]}," + wait("r") + "," + wait("s");
  Issues issues = scheduleIssues(planOf(body, 2));
  ASSERT_EQ(issues.size(), 2u) << show(issues);
  EXPECT_TRUE(
      hasIssue(issues, "/body/3", {"on rank 1: waits on 'r', which this rank has not posted yet"}));
  EXPECT_TRUE(hasIssue(issues, "/body/4", {"on rank 1: waits on 's'"}));
}

TEST(ScheduleCheck, ReferenceOutsideItsAllocationIsReported) {
  const std::string body =
      alloc("a", R"(["2", "n"])") + R"(, {"op": "fill", "tensor": "a[rank]", "value": 0})";
  Issues issues = scheduleIssues(planOf(body, 4));
  ASSERT_EQ(issues.size(), 1u) << show(issues);
  EXPECT_EQ(issues[0].path, "/body/1");
  EXPECT_NE(issues[0].message.find("on rank 2: "), std::string::npos) << show(issues);
}

TEST(ScheduleCheck, StreamOutOfRangeIsReported) {
  Issues issues = scheduleIssues(planOf(R"({"op": "set_stream", "stream": "rank * 8"})", 4));
  EXPECT_TRUE(
      hasIssue(issues, "/body/0", {"on rank 2: stream rank * 8 evaluates to 16, outside [0, 16)"}));
}

TEST(ScheduleCheck, CopyOfUnequalSizesIsReported) {
  const std::string body = alloc("a", R"(["n"])") + "," + alloc("b", R"(["n + 1"])") +
                           R"(, {"op": "copy", "src": "a", "dst": "b"})";
  Issues issues = scheduleIssues(planOf(body, 1));
  EXPECT_TRUE(hasIssue(issues, "/body/2", {"copies 8 elements of 'a' into 9 elements of 'b'"}));
}

// The check evaluates what the run evaluates: a fill's or check's pattern
// that fails on some rank fails the check, with that rank.
TEST(ScheduleCheck, PatternsThatCannotBeEvaluatedAreReported) {
  const std::string body = alloc("a", R"(["n"])") +
                           R"j(, {"op": "fill", "tensor": "a", "value": "10 / (rank - 1)"},
                               {"op": "check", "tensor": "a", "value": "1 << (world * 32)"})j";
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/1", {"on rank 1: ", "division by zero"})) << show(issues);
  EXPECT_TRUE(hasIssue(issues, "/body/2", {"on rank 0: ", "shift count 64"})) << show(issues);
}

TEST(ScheduleCheck, LoopStepThatIsNotPositiveStopsTheRank) {
  const std::string body =
      R"({"op": "for", "index": "i", "start": 0, "stop": 4, "step": "rank", "body": []})";
  Issues issues = scheduleIssues(planOf(body, 2));
  EXPECT_TRUE(hasIssue(issues, "/body/0",
                       {"on rank 0: loop step rank evaluates to 0; a loop step must be positive"}));
}

TEST(ScheduleCheck, AllocatingAgainWithoutDeallocateIsReported) {
  const std::string body = R"({"op": "for", "index": "i", "start": 0, "stop": 2, "body": [)" +
                           alloc("t", R"(["n"])") + "]}";
  Issues issues = scheduleIssues(planOf(body, 1));
  EXPECT_TRUE(hasIssue(issues, "/body/0/body/0",
                       {"on rank 0 (i=1): allocates 't' again while it is still allocated"}));
}

// ---------------------------------------------------------------- hazards

// rank sends `a` to the next rank and receives `b` from the previous one;
// `between` runs after the posts, before the waits.
std::string exchange(const std::string& between) {
  return alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," +
         comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "(rank + 1) % world")") + "," +
         comm(
             R"("name": "r", "type": "recv", "tensor": "b", "peer": "(rank + world - 1) % world")") +
         "," + between;
}

TEST(ScheduleCheck, FillOfARecvBufferBeforeItsWaitIsAHazard) {
  const std::string fill = R"({"op": "fill", "tensor": "b", "value": 1})";
  Issues issues = scheduleIssues(planOf(exchange(fill + "," + wait("r") + "," + wait("s")), 2));
  EXPECT_TRUE(hasIssue(issues, "/body/4",
                       {"on rank 0: writes 'b' (elements [0, 8) of 'b') while communication 'r' "
                        "(/body/3) that writes it is still pending; wait on 'r' first"}));
  // The same program with the wait first is fine.
  EXPECT_NO_THROW(checkSchedule(planOf(exchange(wait("r") + "," + fill + "," + wait("s")), 2)));
}

TEST(ScheduleCheck, ReadingASendBufferWhileTheSendIsPendingIsFine) {
  const std::string check = R"({"op": "check", "tensor": "a", "value": 0})";
  EXPECT_NO_THROW(checkSchedule(planOf(exchange(check + "," + wait("r") + "," + wait("s")), 2)));
}

TEST(ScheduleCheck, OverwritingASendBufferWhileTheSendIsPendingIsAHazard) {
  const std::string copy = R"({"op": "copy", "src": "a", "dst": "a"})";
  Issues issues = scheduleIssues(planOf(exchange(copy + "," + wait("r") + "," + wait("s")), 2));
  EXPECT_TRUE(
      hasIssue(issues, "/body/4",
               {"writes 'a'", "while communication 's' (/body/2) that reads it is still pending"}));
}

TEST(ScheduleCheck, DisjointRowsDoNotConflict) {
  // Rows of one buffer: the send reads row 0, the recv writes row 1, the
  // check reads row 0 and the fill writes row 2.
  const std::string body =
      alloc("m", R"(["3", "n"])") + "," +
      comm(R"("name": "s", "type": "send", "tensor": "m[0]", "peer": "1 - rank")") + "," +
      comm(R"("name": "r", "type": "recv", "tensor": "m[1]", "peer": "1 - rank")") +
      R"(, {"op": "check", "tensor": "m[0]", "value": 0}, )" +
      R"({"op": "fill", "tensor": "m[2]", "value": 0}, )" + wait("r") + "," + wait("s");
  EXPECT_NO_THROW(checkSchedule(planOf(body, 2)));
}

TEST(ScheduleCheck, WaitOnAGroupEndsEveryCommunicationInIt) {
  auto program = [](const std::string& between) {
    return alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") +
           R"(, {"op": "group", "name": "g", "body": [)" +
           comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "1 - rank")") + "," +
           comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank")") + "]}," +
           between + R"({"op": "fill", "tensor": "b", "value": 2})";
  };
  EXPECT_NO_THROW(checkSchedule(planOf(program(wait("g") + ","), 2)));
  // A wait on one communication of the group also completes the group post.
  EXPECT_NO_THROW(checkSchedule(planOf(program(wait("s") + ","), 2)));
  Issues issues = scheduleIssues(planOf(program(""), 2));
  EXPECT_TRUE(hasIssue(issues, "/body/3", {"while communication 'r' (/body/2/body/1)"}));
}

TEST(ScheduleCheck, DeallocatingWhileARecvIsPendingIsAHazard) {
  Issues issues = scheduleIssues(
      planOf(exchange(R"({"op": "deallocate", "name": "b"},)" + wait("r") + "," + wait("s")), 2));
  EXPECT_TRUE(hasIssue(issues, "/body/4", {"deallocates 'b' while communication 'r'"}));
}

TEST(ScheduleCheck, HazardInALoopNamesTheIterations) {
  const std::string body =
      alloc("a", R"(["n"])") + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 3, "body": [)" +
      comm(R"("name": "r", "type": "recv", "tensor": "a", "peer": "1 - rank")") + "," +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "1 - rank")") + "]}";
  Issues issues = scheduleIssues(planOf(body, 2));
  // The send reads what the recv of the same iteration writes.
  EXPECT_TRUE(hasIssue(issues, "/body/1/body/1",
                       {"on rank 0 (i=0): reads 'a'", "'r' (/body/1/body/0, i=0) that writes it"}));
  // In the next iteration the recv writes what the pending send reads.
  EXPECT_TRUE(hasIssue(issues, "/body/1/body/0",
                       {"on rank 0 (i=1): writes 'a'", "'r' (/body/1/body/0, i=0)"}));
}

// ---------------------------------------------------------------- streams

// The issue's race: a reduce_scatter waited on stream 1, an allgather posted
// from stream 2 reading its output. `order` goes between the two.
std::string rsThenAg(const std::string& order, const std::string& rs_wait_mode = "stream") {
  return alloc("x", R"(["world * n"])") + "," + alloc("y", R"(["n"])") + "," +
         alloc("z", R"(["world * n"])") + R"(,
    {"op": "fill", "tensor": "x", "value": 1},
    {"op": "set_stream", "stream": 1},
    {"op": "sync_stream", "stream": 0},)" +
         comm(R"("name": "rs", "type": "reduce_scatter", "input": "x", "output": "y", "reduce": "sum")") +
         R"(, {"op": "wait", "communication": "rs", "mode": ")" + rs_wait_mode + R"("},
    {"op": "set_stream", "stream": 2},)" +
         order + comm(R"("name": "ag", "type": "allgather", "input": "y", "output": "z")") +
         "," + wait("ag");
}

TEST(ScheduleCheck, AnOutputWaitedOnAnotherStreamIsAHazardUntilTheStreamsAreOrdered) {
  Issues issues = scheduleIssues(planOf(rsThenAg(""), 2));
  EXPECT_TRUE(hasIssue(issues, "/body/9",
                       {"on rank 0: reads 'y' (elements [0, 8) of 'y') on stream 2 while "
                        "communication 'rs' (/body/6, posted on stream 1) that writes it was "
                        "waited on stream 1 only, and nothing orders stream 2 after that wait",
                        "sync_stream 1 first"}))
      << show(issues);
  // Ordered by a sync_stream, a wait on stream 2 itself, or a host wait.
  EXPECT_NO_THROW(checkSchedule(planOf(rsThenAg(R"({"op": "sync_stream", "stream": 1},)"), 2)));
  EXPECT_NO_THROW(checkSchedule(planOf(rsThenAg(wait("rs") + ","), 2)));
  EXPECT_NO_THROW(checkSchedule(planOf(rsThenAg("", "host"), 2)));
}

TEST(ScheduleCheck, OperationsOnTwoStreamsRaceUnlessSynced) {
  auto body = [](const std::string& order) {
    return alloc("a", R"(["n"])") + R"(,
      {"op": "set_stream", "stream": 3},
      {"op": "fill", "tensor": "a", "value": 1},
      {"op": "set_stream", "stream": 0},)" +
           order + R"({"op": "check", "tensor": "a", "value": 1}, {"op": "sync_stream", "stream": 3})";
  };
  Issues issues = scheduleIssues(planOf(body(""), 1));
  EXPECT_TRUE(hasIssue(issues, "/body/4",
                       {"reads 'a' (elements [0, 8) of 'a') on stream 0 while the fill at /body/2 "
                        "on stream 3 writes it, and nothing orders stream 0 after that: "
                        "sync_stream 3 first"}))
      << show(issues);
  EXPECT_NO_THROW(checkSchedule(planOf(body(R"({"op": "sync_stream", "stream": 3},)"), 1)));
}

TEST(ScheduleCheck, OrderIsTransitiveThroughWaitsAndPosts) {
  // Stream 1 waits on rs, then posts ag reading rs's output; stream 0 waits
  // on ag only: it is ordered after rs too (ag started after rs completed).
  const std::string body = alloc("x", R"(["world * n"])") + "," + alloc("y", R"(["n"])") + "," +
                           alloc("z", R"(["world * n"])") + R"(,
    {"op": "set_stream", "stream": 1},)" +
                           comm(R"("name": "rs", "type": "reduce_scatter", "input": "x", "output": "y", "reduce": "sum")") +
                           "," + wait("rs") + "," +
                           comm(R"("name": "ag", "type": "allgather", "input": "y", "output": "z")") +
                           R"(, {"op": "set_stream", "stream": 0},)" + wait("ag") + R"(,
    {"op": "check", "tensor": "y", "value": 0}, {"op": "fill", "tensor": "x", "value": 0})";
  EXPECT_NO_THROW(checkSchedule(planOf(body, 2)));
}

TEST(ScheduleCheck, ThousandsOfPendingPostsOnDisjointRowsAreCheckedInLinearTime) {
  // 20,000 sends and recvs of distinct rows left pending, then the waits:
  // the old check compared each access with every pending post (quadratic).
  auto body = [](const std::string& waits) {
    return alloc("m", R"(["20000", "2"])") + "," + alloc("o", R"(["20000", "2"])") + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 20000, "body": [)" +
           comm(R"("name": "s", "type": "send", "tensor": "m[i]", "peer": "rank")") + R"(]},
    {"op": "for", "index": "j", "start": 0, "stop": 20000, "body": [)" +
           comm(R"("name": "r", "type": "recv", "tensor": "o[j]", "peer": "rank")") + "]}," +
           waits + R"({"op": "fill", "tensor": "m", "value": 0}, {"op": "fill", "tensor": "o", "value": 0})";
  };
  // A wait covers the earlier posts of its communication.
  EXPECT_NO_THROW(checkSchedule(planOf(body(wait("s") + "," + wait("r") + ","), 1)));
  Issues issues = scheduleIssues(planOf(body(wait("s") + ","), 1));
  ASSERT_EQ(issues.size(), 1u) << show(issues);
  EXPECT_TRUE(hasIssue(issues, "/body/6",
                       {"writes 'o' (elements [0, 40000) of 'o') while communication 'r' "
                        "(/body/3/body/0, j=0) that writes it is still pending"}));
}

// 20,000 pending allreduces that all read one buffer: a segment kept a
// reader per post, and each new post scanned them all (200,000 took 77 s).
// The latest post of the communication stands for the earlier ones (they
// complete in order), so a write to the buffer before the wait is still
// found, naming that post, and none after it.
TEST(ScheduleCheck, PendingPostsThatReadOneBufferKeepOneReader) {
  auto body = [](const std::string& before_fill) {
    return alloc("x", R"([4])") + "," + alloc("y", R"(["20000", "4"])") + R"(,
    {"op": "for", "index": "i", "start": 0, "stop": 20000, "body": [)" +
           comm(R"("name": "ar", "type": "allreduce", "input": "x", "output": "y[i]",
                   "reduce": "sum")") +
           "]}," + before_fill + R"({"op": "fill", "tensor": "x", "value": 0})" + "," + wait("ar");
  };
  EXPECT_NO_THROW(checkSchedule(planOf(body(wait("ar") + ","), 1)));
  Issues issues = scheduleIssues(planOf(body(""), 1));
  ASSERT_EQ(issues.size(), 1u) << show(issues);
  EXPECT_TRUE(hasIssue(issues, "/body/3",
                       {"writes 'x'", "communication 'ar' (/body/2/body/0, i=19999) that reads "
                                      "it is still pending"}));
}

// -------------------------------------------------------------- deadlocks

// The backends of a run, and two with mpi's caps but another order:
// "inorder", where a rank's operations run one after another (nccl's order,
// without needing a GPU build), and "free", where posts never wait for each
// other.
std::vector<BackendCaps> catalogWithInOrder() {
  std::vector<BackendCaps> catalog = backendCatalog();
  for (const BackendCaps& c : backendCatalog())
    if (c.name == "mpi")
      for (auto [name, order] : {std::pair{"inorder", PostOrder::kPerRank},
                                 std::pair{"free", PostOrder::kFree}}) {
        BackendCaps other = c;
        other.name = name;
        other.auto_priority = 0;
        other.post_order = order;
        catalog.push_back(other);
      }
  return catalog;
}

Plan planWith(const std::string& body, int world) {
  Program program = parseProgram(doc(body));
  validate(program, ValidateOptions{world, catalogWithInOrder()});
  LowerOptions options;
  options.world = world;
  options.backends = catalogWithInOrder();
  return lower(program, options);
}

TEST(ScheduleCheck, AHostWaitBeforeTheSendThatFeedsItIsADeadlock) {
  // Every rank receives, waits on the host, then sends: nobody sends first.
  auto body = [](const std::string& mode) {
    return alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," +
           comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": "(rank + world - 1) % world")") +
           R"(, {"op": "wait", "communication": "r", "mode": ")" + mode + R"("},)" +
           comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "(rank + 1) % world")") +
           "," + wait("s");
  };
  for (int world : {2, 3}) {
    Issues issues = scheduleIssues(planOf(body("host"), world));
    ASSERT_EQ(issues.size(), 1u) << show(issues);
    EXPECT_TRUE(hasIssue(issues, "/body/3",
                         {"deadlock: these waits form a cycle, so no rank can go on",
                          "rank 0's host wait on 'r' (/body/3) waits for message #1 from rank " +
                              std::to_string(world - 1) +
                              " to rank 0 (send 's'), and rank 0's send 's' (/body/4) comes "
                              "after it",
                          "rank 1's host wait on 'r' (/body/3) waits for message #1 from rank 0 "
                          "to rank 1"}))
        << show(issues);
  }
  // A stream-mode wait blocks the stream the send is posted from: the same.
  EXPECT_TRUE(hasIssue(scheduleIssues(planOf(body("stream"), 2)), "/body/3",
                       {"rank 0's wait on 'r' on stream 0 (/body/3) waits for message #1"}));
}

TEST(ScheduleCheck, TheSendPostedFromAnotherStreamIsNoDeadlock) {
  // The recv is waited on stream 0; the send goes from stream 1.
  const std::string body =
      alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," +
      comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank")") + "," + wait("r") +
      R"(, {"op": "set_stream", "stream": 1},)" +
      comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "1 - rank")") + "," + wait("s");
  EXPECT_NO_THROW(checkSchedule(planOf(body, 2)));
}

TEST(ScheduleCheck, CollectivesOfTwoTeamsInOpposingOrdersDeadlockOnAnInOrderBackend) {
  // Ranks 0 and 1 are in teams A and B; rank 0 posts A then B, rank 1 B
  // then A. Fine where posts never wait for each other (mpi); a deadlock
  // where a rank's operations run in post order (nccl).
  auto body = [](const std::string& backend) {
    const std::string team_a = R"("team": [0, 1], "backend": ")" + backend + R"(")";
    const std::string team_b = R"("team": [1, 0], "backend": ")" + backend + R"(")";
    auto ar = [&](const std::string& name, const std::string& team) {
      const std::string buf = name.substr(0, 1);  // a or b
      return comm(R"("name": ")" + name + R"(", "type": "allreduce", "input": ")" + buf +
                  R"(", "output": ")" + buf + R"(", "reduce": "sum", )" + team);
    };
    return alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + R"(, {"op": "if", "cond": "rank == 0", "then": [)" +
           ar("a0", team_a) + "," + ar("b0", team_b) + R"(], "else": [)" + ar("b1", team_b) + "," +
           ar("a1", team_a) + "]}";
  };
  EXPECT_NO_THROW(checkSchedule(planWith(body("mpi"), 2)));
  Issues issues = scheduleIssues(planWith(body("inorder"), 2));
  EXPECT_TRUE(hasIssue(issues, "/body/2/else/1",
                       {"deadlock", "rank 0's allreduce 'b0' (/body/2/then/1) starts only after "
                                    "allreduce #1 of team [0, 1] ('a0') completes (inorder runs "
                                    "them in order)",
                        "rank 1's allreduce 'a1' (/body/2/else/1) starts only after allreduce #1 "
                        "of team [1, 0] ('b1') completes"}))
      << show(issues);
}

TEST(ScheduleCheck, SendAndRecvInOpposingOrdersDeadlockOnlyWhereTheBackendSerializes) {
  // Both ranks send, then receive, with a fill between so they are not
  // grouped: fine on mpi (starts never block), a deadlock on an in-order
  // backend; a group fixes it.
  auto body = [](const std::string& backend, bool group) {
    const std::string b = R"(, "backend": ")" + backend + R"(")";
    std::string posts =
        comm(R"("name": "s", "type": "send", "tensor": "a", "peer": "1 - rank")" + b) +
        (group ? "," : R"(, {"op": "fill", "tensor": "c", "value": 0},)") +
        comm(R"("name": "r", "type": "recv", "tensor": "b", "peer": "1 - rank")" + b);
    if (group) posts = R"({"op": "group", "name": "g", "body": [)" + posts + "]}";
    return alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," + alloc("c", R"(["n"])") +
           "," + posts + "," + wait("r") + "," + wait("s");
  };
  EXPECT_NO_THROW(checkSchedule(planWith(body("mpi", false), 2)));
  EXPECT_NO_THROW(checkSchedule(planWith(body("local", false), 2)));
  EXPECT_NO_THROW(checkSchedule(planWith(body("inorder", true), 2)));
  Issues issues = scheduleIssues(planWith(body("inorder", false), 2));
  EXPECT_TRUE(hasIssue(issues, "/body/5", {"deadlock", "rank 0's recv 'r' (/body/5) starts only after message #1 from rank 0 to rank 1 (send 's') completes"}))
      << show(issues);
}

// An all-to-all by hand: every rank posts its sends, then receives from
// each peer with a host wait.
std::string allToAllByHand(const std::string& backend) {
  const std::string b = R"(, "backend": ")" + backend + R"(")";
  return alloc("in", R"(["world", "n"])") + "," + alloc("out", R"(["world", "n"])") +
         R"(, {"op": "for", "index": "j", "start": 1, "stop": "world", "body": [)" +
         comm(R"("name": "s", "type": "send", "tensor": "in[(rank + j) % world]",
              "peer": "(rank + j) % world")" + b) +
         R"(]}, {"op": "for", "index": "j", "start": 1, "stop": "world", "body": [)" +
         comm(R"("name": "r", "type": "recv", "tensor": "out[(rank - j + world) % world]",
              "peer": "(rank - j + world) % world")" + b) +
         R"(, {"op": "wait", "communication": "r", "mode": "host"}]}, )" + wait("s");
}

TEST(ScheduleCheck, AnAllToAllByHandPassesOnTheHostBackendsAndDeadlocksInOrder) {
  // mpi and local complete each post on its own (a recv's wait does not
  // wait for the sends before it), and a send completes once its recv
  // started, which every peer's posts allow.
  for (const std::string backend : {"mpi", "local"})
    for (int world = 2; world <= 6; ++world)
      EXPECT_NO_THROW(checkSchedule(planWith(allToAllByHand(backend), world)))
          << backend << " at world " << world;
  // Where a rank's operations run one after another (nccl), rank 0's
  // first send waits for rank 1's recv, which comes after rank 1's sends.
  Issues issues = scheduleIssues(planWith(allToAllByHand("inorder"), 3));
  EXPECT_TRUE(hasIssue(issues, "/body/3/body/0",
                       {"deadlock", "rank 0's send 's' (/body/2/body/0, j=2) starts only after "
                                    "message #1 from rank 0 to rank 1 (send 's') completes"}))
      << show(issues);
}

// Each rank: on stream 1, a recv from the previous rank, waited on stream 1,
// then a send of what came back to it; on stream 0, a send to the next rank
// (what the next rank's first recv waits for) and a recv from it.
std::string sendBehindAStreamWait(const std::string& backend) {
  const std::string b = R"(, "backend": ")" + backend + R"(")";
  const std::string prev = R"("peer": "(rank - 1 + world) % world")";
  const std::string next = R"("peer": "(rank + 1) % world")";
  return alloc("a", R"(["n"])") + "," + alloc("b", R"(["n"])") + "," + alloc("c", R"(["n"])") +
         R"(, {"op": "set_stream", "stream": 1},)" +
         comm(R"("name": "r", "type": "recv", "tensor": "b", )" + prev + b) + "," + wait("r") +
         "," + comm(R"("name": "s1", "type": "send", "tensor": "b", )" + prev + b) +
         R"(, {"op": "set_stream", "stream": 0},)" +
         comm(R"("name": "s0", "type": "send", "tensor": "a", )" + next + b) +
         R"(, {"op": "fill", "tensor": "c", "value": 0}, )" +
         comm(R"("name": "r1", "type": "recv", "tensor": "c", )" + next + b) + "," + wait("s0") +
         "," + wait("r1") + "," + wait("s1");
}

TEST(ScheduleCheck, AStreamWaitHoldsBackTheLaterStartsOfAHostBackend) {
  // mpi and local start a rank's posts one at a time in post order: 's0'
  // waits for 's1' to start, which waits on stream 1 for 'r', which needs
  // the previous rank's 's0'. Where starts wait only for their own stream,
  // the program is fine at world 3.
  for (const std::string backend : {"mpi", "local"}) {
    Issues issues = scheduleIssues(planWith(sendBehindAStreamWait(backend), 3));
    EXPECT_TRUE(hasIssue(
        issues, "/body/5",
        {"deadlock", "rank 0's wait on 'r' on stream 1 (/body/5) waits for message #1 from rank 2 "
                     "to rank 0 (send 's0')",
         "(" + backend + " starts a rank's posts one at a time, in the order they were posted, "
                         "so rank 0's send 's0' (/body/8) starts only after rank 0's send 's1' "
                         "(/body/6) started)"}))
        << backend << show(issues);
  }
  EXPECT_NO_THROW(checkSchedule(planWith(sendBehindAStreamWait("free"), 3)));
}

TEST(ScheduleCheck, DeadlockSearchOfALongRingIsLinear) {
  // The ring allgather at world 64 (4,032 messages per direction pair
  // group) passes: the search adds a few nodes per post.
  ScheduleCheckResult result = checkSchedule(planOf(kRing, 64));
  EXPECT_EQ(result.communications, int64_t{2} * 63 * 64);
}

// ------------------------------------------------------------- truncation

TEST(ScheduleCheck, TinyStepBudgetTruncatesWithoutFalseMismatches) {
  ScheduleCheckOptions options;
  options.max_steps_per_rank = 5;
  ScheduleCheckResult result = checkSchedule(planOf(kRing, 4), options);
  EXPECT_TRUE(result.truncated);
  EXPECT_LT(result.communications, int64_t{2} * 3 * 4);
}

TEST(ScheduleCheck, IssuesAreCappedAtTwenty) {
  // Each fill writes a different row out of range: 40 distinct problems.
  std::string body = alloc("a", R"(["1", "n"])");
  for (int k = 0; k < 40; ++k)
    body += R"(, {"op": "fill", "tensor": "a[)" + std::to_string(k + 1) + R"(]", "value": 0})";
  Issues issues = scheduleIssues(planOf(body, 1));
  ASSERT_EQ(issues.size(), 20u) << show(issues);
  EXPECT_EQ(issues[18].path, "/body/19");
  // The last entry stands for the 21 problems left out, from /body/20 on.
  EXPECT_EQ(issues[19].path, "/body/20");
  EXPECT_NE(issues[19].message.find("21 more problems"), std::string::npos) << show(issues);
}

}  // namespace
}  // namespace hir
